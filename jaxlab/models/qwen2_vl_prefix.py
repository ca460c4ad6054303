"""Qwen2.5-VL (or Qwen2-VL) as a prefix LM: the multimodal papers' policies.

    model = Qwen2VLPrefixLM(vl_cfg, PrefixConfig(kind="image",
                                                 image_size=(32, 32)),
                            rngs=nnx.Rngs(0))
    out = model.forward(ids_bt, attention_mask=mask_bt,
                        prefix_inputs=images_bhwc)       # logits of the ids
    result = model.generate(images_bhwc, prompts, max_new_tokens=8, eos_id=2)
    jaxlab.io.hf.save(model.vl, vl_cfg, "/tmp/export")  # a Qwen2.5-VL ckpt

The experiments of papers F (chart-to-code), G (Trust-GRPO), R
(VideoReasonBench) and S (VUDG) train and sample "prefix LMs"
(`jaxlab.models.prefix_lm.PrefixLM`): `forward(ids, attention_mask,
prefix_inputs=x)` gives the logits of the ids after an image or clip `x`,
and `generate(x, prompts, ...)` samples after it. This class is that
protocol on the Qwen2.5-VL architecture (`jaxlab.models.qwen2_vl.Qwen2VL`,
logits equal to transformers' `Qwen2_5_VLForConditionalGeneration`): each
row is the Qwen chat layout

    <|vision_start|> <|image_pad|> x n <|vision_end|> ids ...

(`<|video_pad|>` for a clip), so `forward` is exactly `Qwen2VL.forward`
on that token sequence with the item's `pixel_values` / `image_grid_thw`
(or `pixel_values_videos` / `video_grid_thw`), its M-RoPE positions
(`qwen2_vl.rope_index`: (t, h, w) positions for the n vision tokens, the
text after them resuming at 1 + max(h, w)), and the logits of the T ids
returned. Inputs are the experiments' arrays in [0, 1]: images
`[B, H, W, C]` or clips `[B, F, H, W, C]` of a fixed size, normalised with
the processor's mean / std (OpenAI CLIP's, as
`jaxlab.data.vision_processor`) and cut into patches on the device
(`jaxlab.nn.patches.qwen_vl_patchify`), so the vision tower trains inside
the gradient (freeze it with the optimizer's frozen patterns or LoRA
targets). A clip's frames are `temporal_patch_size`-grouped (F / 2 temporal
patches for Qwen's T = 2) and its temporal positions are spaced by
`tokens_per_second * seconds_per_grid` (Qwen2.5-VL; Qwen2-VL counts
temporal patches).

Special tokens: a checkpoint's vocabulary has them (`image_token_id`,
`video_token_id`, `vision_start_token_id` in `config.model`,
`PrefixConfig.vision_end_token_id`). A task vocabulary of V ids (the
miniatures' grammars and byte tokenizers) is extended by four at the end,
V..V+3 = vision start, vision end, image pad, video pad
(`with_task_vocab`); the logits then cover the task's V ids only (the
four are inputs, never outputs), in `forward`, `unembed` and so in the
sampler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P

from jaxlab import registry as jregistry
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import prefix_lm
from jaxlab.models import qwen2_vl
from jaxlab.models import registry
from jaxlab.nn import partitioning as pt
from jaxlab.nn import patches

# OpenAI CLIP's normalisation, the Qwen-VL processors' default (the same
# numbers as `jaxlab.data.vision_processor.OPENAI_CLIP_MEAN` / `_STD`).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
KINDS = ("image", "video")
NUM_SPECIAL = 4  # vision start, vision end, image pad, video pad


@dataclasses.dataclass(frozen=True)
class PrefixConfig:
  """What the prefix is.

  kind: "image" (inputs `[B, H, W, C]`) or "video" (`[B, F, H, W, C]`).
  image_size: (H, W) of every image / frame (multiples of patch_size *
    spatial_merge_size), or one int for a square.
  num_frames: F of a clip (video only).
  seconds_per_grid: seconds per temporal patch of a clip
    (`second_per_grid_ts`: temporal_patch_size / fps; [inferred] 1.0 for
    the miniatures' clips, which have no frame rate).
  vision_end_token_id: `<|vision_end|>` (Qwen's 151653).
  task_vocab_size: 0, or V: the logits are cut to the first V ids (a task
    vocabulary extended by the four special tokens).
  image_mean, image_std: per-channel normalisation of the [0, 1] inputs.
  head_ids: token ids before the vision start token, the same in every
    row (a chat template's system turn and user header, so the prefix is
    the rendered chat up to its image: `head <|vision_start|> ...`);
    empty = the image first.
  """
  kind: str = "image"
  image_size: Any = 32
  num_frames: int = 1
  seconds_per_grid: float = 1.0
  vision_end_token_id: int = 151653
  task_vocab_size: int = 0
  image_mean: tuple[float, ...] = CLIP_MEAN
  image_std: tuple[float, ...] = CLIP_STD
  head_ids: tuple[int, ...] = ()

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"prefix kind={self.kind!r}; valid: {KINDS}")
    size = self.image_size
    size = (int(size), int(size)) if np.ndim(size) == 0 else tuple(
        int(s) for s in size)
    object.__setattr__(self, "image_size", size)
    object.__setattr__(self, "image_mean", tuple(self.image_mean))
    object.__setattr__(self, "image_std", tuple(self.image_std))
    object.__setattr__(self, "head_ids",
                       tuple(int(i) for i in self.head_ids))
    if self.kind == "image" and self.num_frames != 1:
      raise ValueError("num_frames is for kind='video'; an image has one")


def with_task_vocab(model_cfg: Mapping[str, Any], vocab_size: int
                    ) -> tuple[dict[str, Any], dict[str, int]]:
  """(`config.model` with vocab V + 4, the special ids V..V+3) for a task
  vocabulary of V ids that has no vision tokens."""
  ids = dict(vision_start_token_id=vocab_size,
             vision_end_token_id=vocab_size + 1,
             image_token_id=vocab_size + 2, video_token_id=vocab_size + 3)
  return dict(model_cfg, vocab_size=vocab_size + NUM_SPECIAL), ids


class Qwen2VLPrefixLM(prefix_lm.PrefixLM):
  """`Qwen2VL` reading one image / clip before the ids of each row.

  `vl` is the whole Qwen2.5-VL module (export it with `jaxlab.io.hf.save`);
  `decoder` its language model. Without prefix inputs `forward` is the
  plain (text or multimodal) `Qwen2VL.forward` with the logits cut to the
  task vocabulary: the sampler's model protocol, with `embed`,
  `init_cache`, `default_positions`, `unembed` and `multimodal_inputs`.
  """

  PREFIX_INPUTS = "images [B, H, W, C] or clips [B, F, H, W, C]"
  PREFIX_UNIT = "image or clip"

  def __init__(self, cfg: qwen2_vl.Qwen2VLConfig, prefix: PrefixConfig, *,
               rngs: nnx.Rngs):
    vcfg = cfg.vision
    unit = vcfg.patch_size * vcfg.spatial_merge_size
    h, w = prefix.image_size
    if h % unit or w % unit:
      raise ValueError(f"prefix image_size={prefix.image_size}: H and W must "
                       f"be multiples of patch_size * spatial_merge_size = "
                       f"{unit}")
    if len(prefix.image_mean) != vcfg.in_channels or len(
        prefix.image_std) != vcfg.in_channels:
      raise ValueError(f"image_mean / image_std need {vcfg.in_channels} "
                       "entries (vision.in_channels)")
    if prefix.task_vocab_size > cfg.text.vocab_size:
      raise ValueError(f"task_vocab_size={prefix.task_vocab_size} > the "
                       f"model's vocab_size={cfg.text.vocab_size}")
    self.cfg = cfg
    self.prefix = prefix
    self.vl = qwen2_vl.Qwen2VL(cfg, rngs=rngs)
    self.grid = prefix_grid(vcfg, prefix)
    self.num_vision = int(np.prod(self.grid)) // vcfg.spatial_merge_size ** 2
    self.num_prefix = len(prefix.head_ids) + self.num_vision + 2
    pad = cfg.image_token_id if prefix.kind == "image" else (
        cfg.video_token_id)
    # A tuple (static): module arrays become pytree leaves under jit.
    self.prefix_ids = tuple(int(i) for i in (
        list(prefix.head_ids) + [cfg.vision_start_token_id]
        + [pad] * self.num_vision + [prefix.vision_end_token_id]))

  @classmethod
  def wrap(cls, vl: qwen2_vl.Qwen2VL, prefix: PrefixConfig
           ) -> "Qwen2VLPrefixLM":
    """This prefix LM around an existing `Qwen2VL` (a loaded checkpoint,
    `jaxlab.io.pretrained.load`), its weights shared, none created."""
    model = nnx.eval_shape(lambda: cls(vl.cfg, prefix, rngs=nnx.Rngs(0)))
    model.vl = vl
    return model

  @property
  def decoder(self) -> decoder_lib.Decoder:
    return self.vl.language_model

  # -- the prefix --------------------------------------------------------------

  def _vision_kwargs(self, batch: int) -> dict[str, Any]:
    grids = np.array([self.grid] * batch)
    if self.prefix.kind == "image":
      return {"image_grid_thw": grids}
    return {"video_grid_thw": grids,
            "second_per_grid_ts": [self.prefix.seconds_per_grid] * batch}

  def _check(self, x) -> None:
    h, w = self.prefix.image_size
    c = self.cfg.vision.in_channels
    want = ((h, w, c) if self.prefix.kind == "image"
            else (self.prefix.num_frames, h, w, c))
    if x.ndim != len(want) + 1 or tuple(x.shape[1:]) != want:
      raise ValueError(f"prefix inputs must be [B, {', '.join(map(str, want))}"
                       f"] ({self.prefix.kind}s of model.prefix.image_size "
                       f"in [0, 1]), got {tuple(x.shape)}")

  def pixel_values(self, x: jax.Array) -> jax.Array:
    """Inputs in [0, 1] -> the processor's patches `[B * n * 4, C*T*P*P]`
    (normalised, each item's patches in 2x2-merge-block order)."""
    self._check(x)
    x = jnp.asarray(x, jnp.float32)
    mean = jnp.asarray(self.prefix.image_mean, jnp.float32)
    std = jnp.asarray(self.prefix.image_std, jnp.float32)
    x = (x - mean) / std
    if self.prefix.kind == "image":
      x = x[:, None]
    frames_bfchw = jnp.moveaxis(x, -1, 2)
    vcfg = self.cfg.vision
    rows = [patches.qwen_vl_patchify(
        f, patch_size=vcfg.patch_size,
        temporal_patch_size=vcfg.temporal_patch_size,
        merge_size=vcfg.spatial_merge_size)[0] for f in frames_bfchw]
    return jnp.concatenate(rows, 0)

  def prefix_embeds(self, prefix_inputs: jax.Array) -> jax.Array:
    """Inputs -> embeddings `[B, k + n + 2, D]` of [the k `head_ids`;
    vision start; the n merged vision features; vision end].

    The tower runs on each item alone (`jax.vmap` over the batch: every
    item has the same grid and the tower mixes no items, so this equals
    one call over the concatenated patches). Under a mesh whose batch axes
    divide B, the vmapped axis is sharded over them (`spmd_axis_name`) and
    each item's patches and features are pinned to its shard (a sharding
    constraint), so each chip runs the tower on its own items (the splash
    kernel's `shard_map` included) with the FSDP weights all-gathered.
    Without the pin GSPMD split the tower's matmuls over their sharded
    contracting dim and all-reduced whole-batch activations: the AOT
    compile of chart_to_code:paper (v5p:2x2x4) had 86.8 GiB of
    temporaries and 1,217 GiB of all-reduce per step, 26.4 GiB and
    0.01 GiB with it."""
    self._check(prefix_inputs)
    grid = np.array([self.grid])
    axes = pt.batch_mesh_axes(prefix_inputs.shape[0])
    # Under vmap with spmd_axis_name, P() pins an item's arrays to its
    # batch shard (replicated over the other mesh axes).
    pin = ((lambda a: a) if axes is None else
           (lambda a: jax.lax.with_sharding_constraint(a, P())))

    def one(x):  # one image `[H, W, C]` or clip `[F, H, W, C]`
      return pin(self.vl.visual(pin(self.pixel_values(x[None])), grid))

    feats = jax.vmap(one, spmd_axis_name=axes)(prefix_inputs)
    b = prefix_inputs.shape[0]
    k = len(self.prefix.head_ids) + 1      # head + vision start
    ends = self.decoder.embed(jnp.asarray(
        list(self.prefix_ids[:k]) + [self.prefix_ids[-1]], jnp.int32))
    feats = feats.reshape(b, self.num_vision, -1).astype(ends.dtype)
    d = ends.shape[-1]
    return jnp.concatenate(
        [jnp.broadcast_to(ends[None, :k], (b, k, d)), feats,
         jnp.broadcast_to(ends[None, k:], (b, 1, d))], axis=1)

  def prefix_positions(self) -> tuple[np.ndarray, int]:
    """(M-RoPE positions `[3, n + 2]` of the prefix, the first text
    position after it), from `rope_index` of one prefix row (host numpy,
    not cached on the module: its arrays would become pytree leaves). The
    text after the vision end token continues from its position, as in
    `rope_index` of the whole row (the `rope_deltas` of decoding count
    from the largest position instead, as transformers does)."""
    ids = np.asarray(self.prefix_ids, np.int32)[None]
    kw = self._vision_kwargs(1)
    pos, _ = qwen2_vl.rope_index(
        ids, self.cfg, kw.get("image_grid_thw"), kw.get("video_grid_thw"),
        kw.get("second_per_grid_ts"))
    return pos[:, 0], int(pos[0, 0, -1]) + 1

  def positions_3bt(self, batch: int, length: int) -> np.ndarray:
    """M-RoPE positions `[3, B, n + 2 + T]` of [prefix; T ids] (text ids
    at consecutive positions after the prefix; right padding is masked)."""
    pre, start = self.prefix_positions()
    text = np.broadcast_to(np.arange(start, start + length), (3, length))
    row = np.concatenate([pre, text], 1)
    return np.broadcast_to(row[:, None], (3, batch, row.shape[1])).copy()

  # -- the prefix LM protocol ---------------------------------------------------

  def _cut(self, out: decoder_lib.DecoderOutput) -> decoder_lib.DecoderOutput:
    v = self.prefix.task_vocab_size
    if not v or out.logits is None:
      return out
    return dataclasses.replace(out, logits=out.logits[..., :v])

  def forward(self, input_ids_bt=None, attention_mask=None, *,
              prefix_inputs=None, prefix_embeds=None,
              **kwargs) -> decoder_lib.DecoderOutput:
    """With `prefix_inputs` (or `prefix_embeds`): the output over [prefix;
    ids] with the logits of the T ids (row t predicts ids[:, t + 1]);
    `attention_mask [B, T]` marks real ids (right padding). Without: the
    plain `Qwen2VL.forward(input_ids_bt, attention_mask=, **kwargs)`."""
    if prefix_inputs is None and prefix_embeds is None:
      return self._cut(self.vl.forward(input_ids_bt,
                                       attention_mask=attention_mask,
                                       **kwargs))
    if prefix_inputs is not None and prefix_embeds is not None:
      raise ValueError("give one of prefix_inputs and prefix_embeds")
    if prefix_embeds is None:
      prefix_embeds = self.prefix_embeds(prefix_inputs)
    b, p = prefix_embeds.shape[:2]
    t = input_ids_bt.shape[1]
    h = jnp.concatenate([prefix_embeds, self.decoder.embed(
        input_ids_bt).astype(prefix_embeds.dtype)], axis=1)
    mask = None if attention_mask is None else jnp.concatenate(
        [jnp.ones((b, p), bool), attention_mask.astype(bool)], axis=1)
    out = self.vl.forward(inputs_embeds=h, attention_mask=mask,
                          positions_3bt=self.positions_3bt(b, t), **kwargs)
    return self._cut(dataclasses.replace(out, logits=out.logits[:, p:]))

  def generate(self, prefix_inputs, prompts: Sequence[Sequence[int]], **kw):
    """`jaxlab.decoding.sampler.generate` of the prompts after their image
    / clip (the Qwen layout above: the vision prefix once, then KV-cached
    decoding at M-RoPE text positions). Returns the sampler's
    `GenerateResult` (new tokens only)."""
    from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
    x = jnp.asarray(prefix_inputs, jnp.float32)
    if x.shape[0] != len(prompts):
      raise ValueError(f"{x.shape[0]} inputs for {len(prompts)} prompts; "
                       f"give one {self.PREFIX_UNIT} per prompt")
    pv = _pixel_values_jit(self, x)
    mm = self._vision_kwargs(len(prompts))
    mm["pixel_values" if self.prefix.kind == "image"
       else "pixel_values_videos"] = pv
    head = list(self.prefix_ids)
    return sampler.generate(self, [head + list(p) for p in prompts],
                            multimodal=mm, **kw)

  # -- the sampler's model protocol ---------------------------------------------

  def embed(self, input_ids_bt):
    return self.decoder.embed(input_ids_bt)

  def init_cache(self, batch: int, max_len: int, dtype=None):
    return self.vl.init_cache(batch, max_len, dtype)

  @staticmethod
  def default_positions(valid_bt, cache=None):
    return decoder_lib.Decoder.default_positions(valid_bt, cache)

  def unembed(self, h_btd):
    logits = self.vl.unembed(h_btd)
    v = self.prefix.task_vocab_size
    return logits[..., :v] if v else logits

  def multimodal_inputs(self, input_ids_bt, attention_mask=None, **kw):
    return self.vl.multimodal_inputs(input_ids_bt, attention_mask, **kw)


@nnx.jit
def _pixel_values_jit(model: Qwen2VLPrefixLM, x: jax.Array) -> jax.Array:
  return model.pixel_values(x)


# -- sizes and FLOPs -----------------------------------------------------------


def prefix_grid(vcfg: qwen2_vl.VisionConfig, prefix: PrefixConfig
                ) -> tuple[int, int, int]:
  """(t, h, w) patch grid of one image / clip of `prefix`: t temporal
  patches (an image: 1; a clip: ceil(F / temporal_patch_size)) of
  (H / patch_size) x (W / patch_size) patches."""
  h, w = prefix.image_size
  frames = 1 if prefix.kind == "image" else prefix.num_frames
  return (-(-frames // vcfg.temporal_patch_size), h // vcfg.patch_size,
          w // vcfg.patch_size)


def vision_num_params(vcfg: qwen2_vl.VisionConfig) -> int:
  """Parameters of the vision tower (`qwen2_vl.VisionTower`): the patch
  embedding (no bias), `depth` blocks (two norms, fused qkv and output
  projection with biases, the MLP with biases) and the merger (ln_q, two
  linears with biases). Qwen2.5-VL-7B's: 676,550,144 (+ its language model
  7,615,616,512 = the released 8,292,166,656)."""
  d, f, m = vcfg.hidden_size, vcfg.intermediate_size, (
      vcfg.hidden_size * vcfg.spatial_merge_size ** 2)
  norm = d if vcfg.variant == "qwen2_5_vl" else 2 * d  # RMS / LayerNorm
  if vcfg.variant == "qwen2_5_vl":
    mlp = 3 * d * f + 2 * f + d   # gate, up, down
  else:
    mlp = 2 * d * f + f + d       # fc1, fc2
  block = 2 * norm + (3 * d * d + 3 * d) + (d * d + d) + mlp
  merger = norm + (m * m + m) + (m * vcfg.out_hidden_size
                                 + vcfg.out_hidden_size)
  return vcfg.patch_dim * d + vcfg.depth * block + merger


def vision_forward_flops(vcfg: qwen2_vl.VisionConfig,
                         grid_thw: Sequence[int]) -> float:
  """Forward FLOPs of the tower on one item of patch grid `grid_thw`.

  2 per matmul weight per row (N patches through the patch embedding and
  the blocks, N / merge^2 units through the merger; biases and norms not
  counted), plus 4 * hidden_size per attended (query, key) pair per block
  (scores and values): sum over the attention segments of length^2, the
  frames for full-attention blocks and the windows (`window_index`) for
  the others."""
  grid = tuple(int(g) for g in grid_thw)
  n = int(np.prod(grid))
  d, f = vcfg.hidden_size, vcfg.intermediate_size
  m = d * vcfg.spatial_merge_size ** 2
  mlp = (3 if vcfg.variant == "qwen2_5_vl" else 2) * d * f
  matmul = n * (vcfg.patch_dim * d + vcfg.depth * (4 * d * d + mlp))
  matmul += n // vcfg.spatial_merge_size ** 2 * (
      m * m + m * vcfg.out_hidden_size)
  pairs = lambda cu: float(np.sum(np.diff(np.asarray(cu)) ** 2))
  full = pairs(qwen2_vl.frame_cu_seqlens([grid]))
  if vcfg.variant == "qwen2_vl":
    n_full, window = vcfg.depth, 0.0
  else:
    n_full = sum(1 for i in vcfg.fullatt_block_indexes if i < vcfg.depth)
    window = pairs(qwen2_vl.window_index([grid], vcfg)[1])
  attn = 4.0 * d * (n_full * full + (vcfg.depth - n_full) * window)
  return 2.0 * matmul + attn


def train_flops_per_token(vl_cfg: qwen2_vl.Qwen2VLConfig,
                          prefix: PrefixConfig, seq_len: int) -> float:
  """Training FLOPs per text token of a row [prefix; `seq_len` ids]: the
  language model's (`registry.decoder_train_flops_per_token`: 6 N +
  attention) over all P + T positions (prefix included; the logits of
  every position counted) plus 3x the tower's forward FLOPs of the row's
  image / clip (`vision_forward_flops`; backward = 2x forward), divided
  by the T text tokens (the report multiplies by batch x seq_len)."""
  grid = prefix_grid(vl_cfg.vision, prefix)
  positions = int(np.prod(grid)) // vl_cfg.vision.spatial_merge_size ** 2
  positions += 2 + int(seq_len)
  lm = registry.decoder_train_flops_per_token(vl_cfg.text, positions)
  tower = 3.0 * vision_forward_flops(vl_cfg.vision, grid)
  return (lm * positions + tower) / int(seq_len)


def config_from_dict(model_cfg: Mapping[str, Any], *,
                     vocab_size: int | None = None,
                     variant: str = "qwen2_5_vl"
                     ) -> tuple[qwen2_vl.Qwen2VLConfig, PrefixConfig]:
  """`config.model` (name "qwen2_5_vl_prefix" / "qwen2_vl_prefix"): the
  `qwen2_vl.config_from_dict` fields plus `prefix` (PrefixConfig fields).
  Without `image_token_id` in the section, `vocab_size` (the task's) is
  extended by the four special tokens (`with_task_vocab`). `qkv_bias`
  defaults to True: the language model is Qwen2's, so `io.hf.save` exports
  the whole model as a Qwen2.5-VL / Qwen2-VL checkpoint."""
  d = {k: (v.to_dict() if hasattr(v, "to_dict") else v)
       for k, v in dict(model_cfg).items()}
  pre = dict(d.pop("prefix", None) or {})
  d.pop("name", None)
  d.setdefault("qkv_bias", True)  # the Qwen2 language model (exportable)
  if "image_token_id" not in d:
    if int(d.get("vocab_size") or 0) > 0:  # the section's wins, as in
      vocab_size = int(d["vocab_size"])    # registry.decoder_config
    if not vocab_size:
      raise ValueError("model.vocab_size (or the task's vocab_size) is "
                       "needed to place the vision tokens after it")
    d, ids = with_task_vocab(d, vocab_size)
    pre.setdefault("vision_end_token_id", ids.pop("vision_end_token_id"))
    pre.setdefault("task_vocab_size", vocab_size)
    d.update(ids)
    vocab_size = None
  vl_cfg = qwen2_vl.config_from_dict(d, vocab_size=vocab_size,
                                     variant=variant)
  prefix = jregistry.dataclass_from_config(PrefixConfig, pre, exclude=(),
                                           where="model.prefix")
  return vl_cfg, prefix


def _builder(variant: str):
  def build(model_cfg, *, vocab_size: int | None = None,
            seed: int = 0) -> registry.ModelSpec:
    vl_cfg, prefix = config_from_dict(model_cfg, vocab_size=vocab_size,
                                      variant=variant)
    return registry.ModelSpec(
        factory=lambda: Qwen2VLPrefixLM(vl_cfg, prefix, rngs=nnx.Rngs(seed)),
        config=vl_cfg,
        flops_per_token=lambda t: train_flops_per_token(vl_cfg, prefix, t))
  build.__doc__ = (f"`Qwen2VLPrefixLM` ({variant} tower): `config.model` "
                   "decoder fields + `vision` + `prefix` sections.")
  return build


registry.register("qwen2_5_vl_prefix")(_builder("qwen2_5_vl"))
registry.register("qwen2_vl_prefix")(_builder("qwen2_vl"))
