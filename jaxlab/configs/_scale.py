"""Paper-scale presets (`--config=NAME:paper`): the papers' own model shapes, lengths and batches.

A config's `paper` preset (`--config=rope_extension:paper`) calls `apply`
with the paper's model (a name of `SHAPES`), sequence length, batch and the
TPU topology it fits on. `apply` sets `config.model` to that architecture
(bf16 compute over fp32 master weights, scanned layers, full remat: the
TPU defaults MaxText uses), `config.train` to the paper's batch and length,
`config.mesh` to FSDP over every chip, the vocabulary-chunked loss, and
`config.scale` to what `python -m experiments.compile` reads when no
`--topology` is given:

    python -m experiments.compile --config=rope_extension:paper
    python -m jaxlab.experiments.bench.tpu_presets      # every paper preset

`config.scale.program` says which program stands for the paper's cost:
"train" (the step that trains the model: SFT, unlearning, the reranker's
fine-tuning, GRPO's learner update) and, when `sampler` is given, the
sampler's prefill and decode at the rollout / evaluation batch.

Vision-language papers. With `vision=` (F, G: images; R, S: clips) the
model is the whole Qwen2.5-VL (`jaxlab.models.qwen2_vl_prefix`, name
"qwen2_5_vl_prefix": the language model of `shape` plus the released
0.67B-parameter vision tower of `VISION_SHAPES`), so the compiled step
holds the tower's weights, optimizer state, activations and FLOPs too. Its
batch is the prefix-LM loss's (`prefix_lm_nll`: images `[B, H, W, 3]`,
ids, mask; `video_lm` for clips: frames `[B, F, H, W, 3]`, inputs,
targets, loss_mask). `seq_len` counts the text tokens after the vision
prefix; the language model runs over `scale.vision.positions` = prefix +
text positions, the prefix being <|vision_start|>, the merged vision
tokens and <|vision_end|> (a 448 x 448 image: 32 x 32 patches of 14 =
1024 patches, 2 x 2-merged to 256 tokens, + 2 = 258 positions). The
sampler's programs (prefill, decode) are the language model's alone: the
tower runs once per prompt before prefill, and the sampler's prompt length
counts the vision tokens. Paper A (rerank) stays LM-only (`VLM_NOTE`): its
step is the `rerank` loss of `jaxlab.models.reranker` (score heads over
groups of query / document prompts whose images have their own sizes), a
model and batch this compile path does not build, so its preset compiles
the next-token step of the language model as the stand-in (a lower bound).
The weights are never materialised: on a CPU host the preset is for
compiling, on a TPU VM it is the run itself (for the experiments whose
model is `config.model`).

Shapes are the released checkpoints' `config.json` values (Hugging Face
model cards of each model; vocabulary sizes as shipped, padded ones kept).

`NAME:paper` is the run, not only a shape: after `preset`, each config
calls `paper_run` with the paper's released checkpoint (`init_from`, a Hub
id) and released data (`data.source="hf"`, `data.path`, `data.subset`,
`data.split`, `data.eval_split`). The AOT compile builds the preset's
shape (the checkpoint's, `SHAPES`) and reads no weights. A config whose
model is not a decoder (StableToken's speech tokenizer, the controller,
Vulcan's ViT) keeps its paper shape in a `PAPER_MODEL` dict: `PAPER` is
for the compile targets (`python -m jaxlab.experiments.bench.tpu_presets`
compiles every config that has one). `short` (`NAME:paper,short`) is the
same run with its budget cut by one documented rule (`short`, below).
"""

from __future__ import annotations

from typing import Any

import ml_collections
import numpy as np

# name -> DecoderConfig fields (jaxlab.models.decoder), from each released
# checkpoint's config.json.
SHAPES: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-3.2-1B(-Instruct)
    "llama3_2_1b": dict(vocab_size=128256, dim=2048, num_layers=16,
                        num_heads=32, num_kv_heads=8, mlp_dim=8192,
                        rope_theta=500000.0, tie_embeddings=True,
                        max_position_embeddings=131072),
    # meta-llama/Llama-3.2-3B(-Instruct)
    "llama3_2_3b": dict(vocab_size=128256, dim=3072, num_layers=28,
                        num_heads=24, num_kv_heads=8, mlp_dim=8192,
                        rope_theta=500000.0, tie_embeddings=True,
                        max_position_embeddings=131072),
    # meta-llama/Meta-Llama-3-8B / Llama-3.1-8B(-Instruct)
    "llama3_8b": dict(vocab_size=128256, dim=4096, num_layers=32,
                      num_heads=32, num_kv_heads=8, mlp_dim=14336,
                      rope_theta=500000.0, max_position_embeddings=131072),
    # meta-llama/Llama-2-7b-hf
    "llama2_7b": dict(vocab_size=32000, dim=4096, num_layers=32, num_heads=32,
                      num_kv_heads=32, mlp_dim=11008, rope_theta=10000.0,
                      max_position_embeddings=4096),
    # meta-llama/Llama-2-13b-hf
    "llama2_13b": dict(vocab_size=32000, dim=5120, num_layers=40,
                       num_heads=40, num_kv_heads=40, mlp_dim=13824,
                       rope_theta=10000.0, max_position_embeddings=4096),
    # Qwen/Qwen2.5-0.5B(-Instruct)
    "qwen2_5_0_5b": dict(vocab_size=151936, dim=896, num_layers=24,
                         num_heads=14, num_kv_heads=2, mlp_dim=4864,
                         qkv_bias=True, tie_embeddings=True,
                         rope_theta=1000000.0, max_position_embeddings=32768),
    # Qwen/Qwen2.5-3B(-Instruct); Qwen2.5-VL-3B's language model
    "qwen2_5_3b": dict(vocab_size=151936, dim=2048, num_layers=36,
                       num_heads=16, num_kv_heads=2, mlp_dim=11008,
                       qkv_bias=True, tie_embeddings=True,
                       rope_theta=1000000.0, max_position_embeddings=32768),
    # Qwen/Qwen2.5-7B(-Instruct), Qwen2.5-Math-7B (theta 1e4, 4k), and
    # Qwen2.5-VL-7B's language model
    "qwen2_5_7b": dict(vocab_size=152064, dim=3584, num_layers=28,
                       num_heads=28, num_kv_heads=4, mlp_dim=18944,
                       qkv_bias=True, rope_theta=1000000.0,
                       max_position_embeddings=32768),
    # Qwen/Qwen2.5-14B(-Instruct)
    "qwen2_5_14b": dict(vocab_size=152064, dim=5120, num_layers=48,
                        num_heads=40, num_kv_heads=8, mlp_dim=13824,
                        qkv_bias=True, rope_theta=1000000.0,
                        max_position_embeddings=32768),
    # Qwen/Qwen3-8B
    "qwen3_8b": dict(vocab_size=151936, dim=4096, num_layers=36, num_heads=32,
                     num_kv_heads=8, head_dim=128, mlp_dim=12288,
                     qk_norm=True, rope_theta=1000000.0,
                     max_position_embeddings=40960),
    # Qwen/Qwen3-4B (tied)
    "qwen3_4b": dict(vocab_size=151936, dim=2560, num_layers=36, num_heads=32,
                     num_kv_heads=8, head_dim=128, mlp_dim=9728, qk_norm=True,
                     tie_embeddings=True, rope_theta=1000000.0,
                     max_position_embeddings=40960),
    # GSAI-ML/LLaDA-8B-Instruct (bidirectional masked diffusion; MHA)
    "llada_8b": dict(vocab_size=126464, dim=4096, num_layers=32, num_heads=32,
                     num_kv_heads=32, mlp_dim=12288, rope_theta=500000.0,
                     causal=False, max_position_embeddings=4096),
    # mistralai/Mistral-7B-v0.1 (sliding window 4096)
    "mistral_7b": dict(vocab_size=32000, dim=4096, num_layers=32,
                       num_heads=32, num_kv_heads=8, mlp_dim=14336,
                       rope_theta=10000.0, sliding_window=4096,
                       max_position_embeddings=32768),
}

# name -> VisionConfig fields (jaxlab.models.qwen2_vl) of a released vision
# tower, from the checkpoint's config.json `vision_config`; out_hidden_size
# is the language model's width (set by `apply`).
VISION_SHAPES: dict[str, dict[str, Any]] = {
    # Qwen/Qwen2.5-VL-3B-Instruct and -7B-Instruct (the same tower)
    "qwen2_5_vl": dict(depth=32, hidden_size=1280, intermediate_size=3420,
                       num_heads=16, in_channels=3, patch_size=14,
                       spatial_merge_size=2, temporal_patch_size=2,
                       window_size=112, fullatt_block_indexes=(7, 15, 23, 31),
                       tokens_per_second=2, hidden_act="silu",
                       variant="qwen2_5_vl"),
}
# Qwen2.5-VL's special tokens (in the released vocabularies of the 3B and
# 7B: tokenizer_config.json added tokens; config.json token ids).
QWEN_VL_TOKENS = dict(vision_start_token_id=151652, image_token_id=151655,
                      video_token_id=151656)
QWEN_VL_VISION_END = 151653
VISION_KINDS = ("image", "video")
# The loss of the step a vision preset compiles, per prefix kind.
VISION_LOSSES = {"image": "prefix_lm_nll", "video": "video_lm"}
_VISION_KEYS = ("shape", "kind", "image_size", "num_frames",
                "seconds_per_grid")

PROGRAMS = ("train", "eval")

# The note of a preset compiled on Qwen2.5-VL's language model alone (paper
# A, whose loss takes no images; see the module docstring).
VLM_NOTE = ("language model of Qwen2.5-VL-{size}; the vision tower (0.67B "
            "params, a few hundred image tokens per sample) is not in the "
            "compiled program, so memory and FLOPs are lower bounds")
# The note of a `vision=` preset.
VL_NOTE = ("the whole Qwen2.5-VL-{size} (vision tower included); seq_len "
           "counts the text tokens after the vision prefix")


def _vision_model(fields: dict[str, Any], vision: dict[str, Any],
                  tower: dict[str, Any] | None = None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
  """(the vision + prefix sections and token ids of `config.model`, the
  `scale.vision` record) of a `vision=` argument (see `apply`); `tower`:
  VisionConfig fields instead of `VISION_SHAPES[vision["shape"]]` (a
  checkpoint's own, `from_checkpoint`)."""
  # Imported here: configs may import models, but a plain LM preset need
  # not load the VLM modules.
  from jaxlab.models import qwen2_vl  # pylint: disable=g-import-not-at-top
  from jaxlab.models import qwen2_vl_prefix  # pylint: disable=g-import-not-at-top
  unknown = sorted(set(vision) - set(_VISION_KEYS))
  if unknown:
    raise ValueError(f"scale.apply: vision has unknown keys {unknown}; "
                     f"valid: {', '.join(_VISION_KEYS)}")
  shape = vision.get("shape", "qwen2_5_vl")
  if shape not in VISION_SHAPES:
    raise ValueError(f"scale.apply: unknown vision shape {shape!r}; valid: "
                     f"{', '.join(sorted(VISION_SHAPES))}")
  kind = vision.get("kind")
  if kind not in VISION_KINDS:
    raise ValueError(f"scale.apply: vision kind={kind!r}; valid: "
                     f"{', '.join(VISION_KINDS)}")
  if "image_size" not in vision:
    raise ValueError("scale.apply: vision needs image_size (pixels, one int "
                     "or (H, W))")
  if kind == "image" and int(vision.get("num_frames", 1)) != 1:
    raise ValueError("scale.apply: vision num_frames is for kind='video'")
  if kind == "video" and "num_frames" not in vision:
    raise ValueError("scale.apply: vision kind='video' needs num_frames")
  tower = dict(VISION_SHAPES[shape] if tower is None else tower,
               out_hidden_size=fields["dim"], dtype="bfloat16",
               param_dtype="float32")
  size = vision["image_size"]
  size = (int(size),) * 2 if isinstance(size, (int, float)) else tuple(
      int(x) for x in size)
  prefix = dict(kind=kind, image_size=size,
                num_frames=int(vision.get("num_frames", 1)),
                vision_end_token_id=QWEN_VL_VISION_END)
  if "seconds_per_grid" in vision:
    prefix["seconds_per_grid"] = float(vision["seconds_per_grid"])
  vcfg = qwen2_vl.VisionConfig(**tower)
  pcfg = qwen2_vl_prefix.PrefixConfig(**prefix)  # checks kind / frames
  unit = vcfg.patch_size * vcfg.spatial_merge_size
  if size[0] % unit or size[1] % unit:
    raise ValueError(f"scale.apply: vision image_size={size}: H and W must "
                     f"be multiples of patch_size * spatial_merge_size = "
                     f"{unit}")
  grid = qwen2_vl_prefix.prefix_grid(vcfg, pcfg)
  tokens = int(np.prod(grid)) // vcfg.spatial_merge_size ** 2
  record = dict(shape=shape, kind=kind, image_size=list(size),
                num_frames=pcfg.num_frames, grid_thw=list(grid),
                patches=int(np.prod(grid)), vision_tokens=tokens,
                prefix_tokens=tokens + 2,
                params=qwen2_vl_prefix.vision_num_params(vcfg))
  sections = dict(QWEN_VL_TOKENS, vision=tower, prefix=prefix)
  return sections, record


def apply(c: ml_collections.ConfigDict, *, shape: str, topology: str,
          seq_len: int, batch_size: int, paper: str, num_slices: int = 1,
          sampler: tuple[int, int, int] | None = None, grad_accum: int = 1,
          remat: Any = "full", chunk_size: int = 1024, note: str = "",
          program: str = "train", lora_rank: int = 0,
          model_overrides: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None
          ) -> ml_collections.ConfigDict:
    """Sets `c` to the paper's scale (see the module docstring); returns it.

    Args:
      c: the experiment's config (from `common.base_config()`).
      shape: a key of `SHAPES`.
      topology: the TPU topology the programs are compiled for (libtpu's
        name, e.g. "v5p:2x2x4").
      seq_len, batch_size: the training step's (global) batch.
      paper: where the numbers come from (spec section, table).
      num_slices: slices of `topology` (multi-slice over DCN).
      sampler: (batch, prompt_len, max_new_tokens) of the paper's rollout or
        evaluation decode, compiled too; None: the train step only.
      grad_accum, remat, chunk_size: the step's microbatching, remat policy
        and vocabulary chunk of the loss.
      note: what the compiled program leaves out or stands in for.
      program: "train" (the training step) or "eval" (the forward pass
        alone: a training-free method, an analysis of a pretrained model).
      lora_rank: > 0: the step trains LoRA factors of this rank on every
        linear layer (`config.lora`), the base weights frozen.
      model_overrides: further DecoderConfig fields (e.g. a RoPE scaling).
      vision: None (a language model), or the vision tower and the prefix of
        a Qwen2.5-VL model: {"shape": a key of `VISION_SHAPES` (default
        "qwen2_5_vl"), "kind": "image" | "video", "image_size": pixels (int
        or (H, W), multiples of 28), "num_frames": a clip's frames (video),
        "seconds_per_grid": seconds per temporal patch (video; optional)}.
        `config.model` is then the prefix LM "qwen2_5_vl_prefix" (this
        shape's language model, the tower in bf16 over fp32 weights),
        `scale.loss` the prefix-LM loss of the kind (`VISION_LOSSES`),
        `scale.vision` its sizes (grid, patches, prefix tokens, tower
        params, `positions` = prefix + seq_len); `seq_len` counts the text
        tokens after the prefix.
    """
    if program not in PROGRAMS:
      raise ValueError(f"scale.apply: program={program!r}; valid: "
                       f"{', '.join(PROGRAMS)}")
    if shape not in SHAPES:
      raise ValueError(f"scale.apply: unknown shape {shape!r}; valid: "
                       f"{', '.join(sorted(SHAPES))}")
    fields = dict(SHAPES[shape], **(model_overrides or {}))
    model = ml_collections.ConfigDict({"name": "decoder"})
    for k, v in fields.items():
      model[k] = v
    record = None
    if vision is not None:
      if not fields.get("causal", True):
        raise ValueError(f"scale.apply: vision needs a causal language "
                         f"model; shape {shape!r} is bidirectional")
      sections, record = _vision_model(fields, dict(vision))
      model.name = "qwen2_5_vl_prefix"
      for k, v in sections.items():
        model[k] = v
      record["positions"] = record["prefix_tokens"] + int(seq_len)
    model.dtype = "bfloat16"
    model.param_dtype = "float32"
    model.remat = remat
    model.scan_layers = True
    c.model = model
    c.train.batch_size = int(batch_size)
    c.train.seq_len = int(seq_len)
    c.optim.grad_accum = int(grad_accum)
    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1
    if "loss" in c:
      c.loss.chunk_size = int(chunk_size)
    c.scale = ml_collections.ConfigDict({
        "shape": shape, "topology": topology, "num_slices": int(num_slices),
        "paper": paper, "note": note, "program": program,
        # The step compiled: next-token CE, or LLaDA's masked-diffusion loss
        # for a bidirectional model (over the LM pipeline's batch layout).
        "loss": "lm" if fields.get("causal", True) else "llada"})
    if record is not None:
      # The prefix LM's loss over its batch (images / clips + text).
      c.scale.loss = VISION_LOSSES[record["kind"]]
      c.scale.vision = record
    if lora_rank:
      c.lora.rank = int(lora_rank)
      c.lora.alpha = float(2 * lora_rank)
    if sampler is not None:
      b, p, n = (int(x) for x in sampler)
      c.aot_sampler = ml_collections.ConfigDict(
          {"batch": b, "prompt_len": p, "max_new_tokens": n})
    return c


# `config.model` fields a preset chooses, not the checkpoint's architecture.
PRESET_MODEL_KNOBS = frozenset({"name", "dtype", "param_dtype", "remat",
                                "scan_layers", "attention_impl", "vision",
                                "prefix"})


def from_checkpoint(c: ml_collections.ConfigDict, ckpt: Any, where: str
                    ) -> ml_collections.ConfigDict:
  """`c` (a paper-scale preset) with the architecture of checkpoint config
  `ckpt` instead of `SHAPES[c.scale.shape]`; returns `c`.

  `ckpt` is what `jaxlab.io.pretrained.checkpoint_config` reads from
  `init_from` (no tensor): a `DecoderConfig`, or a `Qwen2VLConfig` (its
  language model, and for a `vision=` preset its vision tower and special
  tokens too). The preset's own choices stay: compute / parameter dtypes,
  remat, scanning, the image size and frames of the prefix, and every
  model field the preset or the command line set away from its shape
  (`model_overrides`, `--config.model.x`). `scale.model_from` records
  `where`; `scale.vision` is recomputed from the checkpoint's tower.
  """
  import dataclasses  # pylint: disable=g-import-not-at-top
  from jaxlab.models import decoder as decoder_lib  # pylint: disable=g-import-not-at-top
  from jaxlab.models import qwen2_vl  # pylint: disable=g-import-not-at-top
  scale = c.get("scale")
  if scale is None:
    raise ValueError("scale.from_checkpoint: the config has no paper-scale "
                     "preset (config.scale)")
  vl = isinstance(ckpt, qwen2_vl.Qwen2VLConfig)
  text = ckpt.text if vl else ckpt
  if not isinstance(text, decoder_lib.DecoderConfig):
    raise ValueError(f"{where}: not a decoder checkpoint "
                     f"({type(ckpt).__name__}); the preset's model is one")
  model = c.model.to_dict()
  if model.get("name") == "qwen2_5_vl_prefix" and not vl:
    raise ValueError(f"{where}: the preset compiles a Qwen2.5-VL model "
                     "(vision tower and language model), but init_from is a "
                     "language model alone")
  shape = dict(SHAPES[scale.shape])
  # Fields the preset or the user set away from the shape are kept.
  kept = {k for k, v in model.items()
          if k not in PRESET_MODEL_KNOBS and k not in QWEN_VL_TOKENS
          and (k not in shape or _plain(v) != _plain(shape[k]))}
  arch = {}
  for f in dataclasses.fields(decoder_lib.DecoderConfig):
    value = getattr(text, f.name)
    default = (f.default if f.default is not dataclasses.MISSING else
               f.default_factory() if f.default_factory
               is not dataclasses.MISSING else object())
    if f.name in PRESET_MODEL_KNOBS or f.name in kept:
      continue
    if f.name in shape or _plain(value) != _plain(default):
      arch[f.name] = _plain(value)
  model.update(arch)
  record = None
  if model.get("name") == "qwen2_5_vl_prefix":
    tower = {f.name: _plain(getattr(ckpt.vision, f.name))
             for f in dataclasses.fields(qwen2_vl.VisionConfig)
             if f.name in VISION_SHAPES["qwen2_5_vl"]}
    prefix = dict(model["prefix"])
    vision = dict(shape=scale.vision.shape, kind=prefix["kind"],
                  image_size=tuple(prefix["image_size"]),
                  num_frames=prefix.get("num_frames", 1))
    if "seconds_per_grid" in prefix:
      vision["seconds_per_grid"] = prefix["seconds_per_grid"]
    sections, record = _vision_model(model, vision, tower=tower)
    sections.update(image_token_id=ckpt.image_token_id,
                    video_token_id=ckpt.video_token_id,
                    vision_start_token_id=ckpt.vision_start_token_id)
    sections["prefix"] = dict(sections["prefix"], **{
        k: v for k, v in prefix.items() if k not in sections["prefix"]})
    model.update(sections)
    record["positions"] = record["prefix_tokens"] + int(c.train.seq_len)
  c.model = ml_collections.ConfigDict(model)
  c.scale.model_from = str(where)
  if record is not None:
    c.scale.vision = record
  return c


def _plain(value: Any) -> Any:
  """A field's value as config files hold it (lists as tuples, recursively)."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, (tuple, list)):
    return tuple(_plain(v) for v in value)
  if isinstance(value, dict):
    return {k: _plain(v) for k, v in value.items()}
  return value


def preset(c: ml_collections.ConfigDict, spec: dict[str, Any]
           ) -> ml_collections.ConfigDict:
  """`apply(c, **spec)`: a config file's `PAPER` dict as its paper preset."""
  return apply(c, **spec)


# --------------------------------------------------------------------------
# `NAME:paper` is the run: the paper's checkpoint and released data.
# --------------------------------------------------------------------------

# Every parameter of the decoder a LoRA run adapts: the attention
# projections and the MLP of every block (`jaxlab.nn.attention`,
# `jaxlab.nn.mlp`). Every architecture `init_from` loads (`jaxlab.io.hf`:
# Llama, Qwen2 / 2.5 / 3, Mistral, Gemma 3, Phi, LLaDA, Dream, and the language
# model of Qwen2-VL / 2.5-VL) becomes a `jaxlab.models.decoder.Decoder`
# with these names, scanned or not; a vision tower's `nnx.Linear` kernels
# are not matched (spec A.9: LoRA on the LLM, the tower frozen).
LM_LORA_TARGETS = ("q_dnh", "k_dkh", "v_dkh", "o_nhd", "gate_df", "up_df",
                   "down_fd")


def paper_run(c: ml_collections.ConfigDict, *, init_from: str, path: str,
              subset: str = "", split: str = "train", eval_split: str = "",
              **data) -> ml_collections.ConfigDict:
  """Points `c` at the paper's released checkpoint and data; returns `c`.

  Sets `config.init_from` (a Hub id: `jaxlab.io.pretrained` resolves it
  when online, or pass a local copy with `--config.init_from=DIR`), the
  `hf` source over the released dataset (`data.path` a Hub id or a local
  copy laid out as on the Hub, `data.subset` its config name as released,
  '' where it has none), the released split names, the checkpoint's own
  tokenizer (`data.tokenizer="auto"`), and `data.max_rows` (0 = every row;
  the `short` preset caps it). `data` sets further `config.data` fields
  (column names); a field the base config lacks is added.
  """
  c.init_from = init_from
  fields = dict(source="hf", path=path, subset=subset, split=split,
                eval_split=eval_split, tokenizer="auto", max_rows=0, **data)
  for k, v in fields.items():
    c.data[k] = v
  return c


# The `short` preset (`NAME:paper,short`): the same run with its budget cut
# and nothing else changed. `short` cuts, wherever they sit in the config,
# the fields whose name is a key here, by this rule:
#   seeds, model_seeds          -> (0,)
#   steps (STEP_KEYS)           -> min(value, SHORT_STEPS)
#   samples (SAMPLE_KEYS)       -> min(value, SHORT_SAMPLES)
#   evaluation rows (ROW_KEYS)  -> min(value, SHORT_ROWS)
#   eval_batches, max_rows      -> SHORT_EVAL_BATCHES / SHORT_ROWS (also
#                                  when 0, which means "all")
#   resamples (RESAMPLE_KEYS)   -> min(value, SHORT_RESAMPLES)
#   repeats (REPEAT_KEYS)       -> min(value, 1)
# Zero or negative values other than those of eval_batches / max_rows are
# switches ("0 = the spec's", "-1 = 60 % of train.steps") and are kept. A
# config adds what is specific to it (`short(c, {"lottery.rounds": 10})`);
# those fields must be budget fields too (`BUDGET_KEYS`).
SHORT_STEPS = 2
SHORT_SAMPLES = 2
SHORT_ROWS = 8
SHORT_EVAL_BATCHES = 1
SHORT_RESAMPLES = 10
SEED_KEYS = ("seeds", "model_seeds")
# Optimizer steps of a training or a sub-training (not warmup_steps,
# cot_steps, anneal_steps: lengths and schedules, not budgets).
STEP_KEYS = ("steps", "stage1_steps", "stage2_steps", "pretrain_steps",
             "hard_prompts_steps")
SAMPLE_KEYS = ("samples", "num_samples", "eval_samples", "leak_samples",
               "samples_per_question", "references_per_question")
ROW_KEYS = ("eval_queries", "num_eval", "eval_stories", "eval_size",
            "retain_limit", "eval_seqs", "num_eval_seqs", "num_prompts",
            "prompts", "eval_docs", "eval_videos_per_cell",
            "test_clips_per_domain", "num_test", "eval_clips",
            "eval_utterances", "spearman_examples", "exhaustive_prompts",
            "control_prompts", "hard_prompts_prompts", "num_probe_seqs")
RESAMPLE_KEYS = ("num_bootstrap", "num_resamples")
REPEAT_KEYS = ("repeats", "latency_repeats")
ZERO_IS_ALL_KEYS = ("eval_batches", "max_rows")
# Budget fields a config may cut besides (`short(c, specific)`).
EXTRA_BUDGET_KEYS = ("rounds", "train_examples", "num_train", "num_fim",
                     "train_clips_per_domain", "train_videos_per_cell",
                     "train_utterances", "train_clips", "sft_size",
                     "stage_size", "num_people", "num_questions",
                     "known", "paraphrased", "heldout", "num_docs",
                     "num_seqs", "continuations")
BUDGET_KEYS = frozenset(SEED_KEYS + STEP_KEYS + SAMPLE_KEYS + ROW_KEYS
                        + RESAMPLE_KEYS + REPEAT_KEYS + ZERO_IS_ALL_KEYS
                        + EXTRA_BUDGET_KEYS)


def is_budget_key(name: str) -> bool:
  """Whether a field named `name` (the last part of its path) is one the
  `short` preset may change (a key of `BUDGET_KEYS`)."""
  return name in BUDGET_KEYS


def _short_value(name: str, value: Any) -> Any:
  """`value` of a field named `name` under the `short` rule (unchanged when
  the rule does not apply)."""
  if isinstance(value, bool):
    return value
  if name in SEED_KEYS and isinstance(value, (tuple, list)):
    return (0,) if len(value) else tuple(value)
  if not isinstance(value, int):
    return value
  if name in ZERO_IS_ALL_KEYS:
    cap = SHORT_ROWS if name == "max_rows" else SHORT_EVAL_BATCHES
    return cap if value <= 0 else min(value, cap)
  if name in STEP_KEYS:
    cap = SHORT_STEPS
  elif name in SAMPLE_KEYS:
    cap = SHORT_SAMPLES
  elif name in ROW_KEYS:
    cap = SHORT_ROWS
  elif name in RESAMPLE_KEYS:
    cap = SHORT_RESAMPLES
  elif name in REPEAT_KEYS:
    cap = 1
  else:
    return value
  return min(value, cap) if value > 0 else value


def short(c: ml_collections.ConfigDict,
          specific: dict[str, Any] | None = None
          ) -> ml_collections.ConfigDict:
  """The `short` preset: `c` with its budget cut (rule above); returns it.

  Args:
    c: a config (any preset, `paper` first for `NAME:paper,short`).
    specific: dotted path -> value, the config's own budget cuts, applied
      after the rule; each path's last part must be in `BUDGET_KEYS`.
  """
  def walk(node: ml_collections.ConfigDict) -> None:
    for name in list(node.keys()):
      value = node[name]
      if isinstance(value, ml_collections.ConfigDict):
        walk(value)
        continue
      new = _short_value(name, value)
      if new is not value and new != value:
        node[name] = new
  walk(c)
  for path, value in (specific or {}).items():
    *parents, name = path.split(".")
    if not is_budget_key(name):
      raise ValueError(f"scale.short: {path!r} is not a budget field (valid "
                       f"names: {', '.join(sorted(BUDGET_KEYS))})")
    node = c
    for p in parents:
      node = node[p]
    if name not in node:
      raise ValueError(f"scale.short: the config has no field {path!r}")
    node[name] = value
  return c
