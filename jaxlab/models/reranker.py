"""A multimodal pointwise LLM reranker (paper A, spec 1-3).

The reranker reads one prompt per (instruction, query, document) triple, where
query and document are text, an image, or both, and is scored at the answer
position from the yes/no logits (`jaxlab.objectives.rerank`). An image becomes
`num_patches` `<image>` placeholder tokens in the prompt; a ViT
(`jaxlab.models.vit`) encodes the pixels and its projected patch tokens
replace the placeholders' embeddings before `Decoder.forward(inputs_embeds=)`,
so the decoder reads interleaved image and text.

Architecture `arch="qwen2_5_vl"` (`RerankerConfig.vision` a
`jaxlab.models.qwen2_vl.VisionConfig`) is instead exactly Qwen2.5-VL
(`qwen2_vl.Qwen2VL`, transformers' `Qwen2_5_VLForConditionalGeneration`) on
the interleaved prompt: `collate_groups` normalises each image with the
processor's per-channel `image_mean` / `image_std` (passed in; OpenAI CLIP's
for Qwen) and cuts it into the processor's patches (`qwen2_vl.patchify`:
`pixel_values [B, G, I, h*w, C*T*P*P]`, grid (1, h, w) = image side / P),
an image takes h * w / merge^2 `<image>` placeholders (the tower's merged
tokens), and the host computes the multimodal RoPE positions of every
prompt (`qwen2_vl.rope_index` over the attention mask: `mrope_positions
[B, G, 3, T]`) so the model runs under `jit`. The model's `vl` is the
`Qwen2VL` (its `visual` encodes each image alone -- the tower attends
within a frame, so this equals encoding the batch's images together -- and
its `language_model` reads the features scattered into the placeholders at
the M-RoPE positions); `jaxlab.io.hf.save(model.vl, cfg.vl, path)` exports
the (LoRA-merged or not) backbone as a Qwen2.5-VL checkpoint. Prompts have
no `<|vision_start|>` tokens (the byte tokenizer has none): neither
jaxlab's `rope_index` nor transformers 5's `get_rope_index` needs them
(the latter reads `mm_token_type_ids` = (ids == image id); a test runs the
exported backbone in transformers on the collated batch and gets the
heads' logits; transformers 4's older `get_rope_index` looked for the
vision-start token instead). The heads below read `language_model` the same way in both
architectures.

    tok = rerank_tokens.make_tokenizer(...)   # jaxlab.data: <image>, labels
    cfg = RerankerConfig.from_tokenizer(tok, decoder=..., vit=...)
    model = Reranker(cfg, rngs=nnx.Rngs(0))
    batch = collate_groups(examples, tok, cfg, template, max_len=96)
    heads = model.score_heads(batch)                # RerankHeads, each [B, G]
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax import struct

from jaxlab.models import decoder as decoder_lib
from jaxlab.models import qwen2_vl
from jaxlab.models import vit as vit_lib
from jaxlab.nn import partitioning as pt

IMAGE_TOKEN = "<image>"
ARCHS = ("vit_decoder", "qwen2_5_vl")
# Label words for the multi-token direction probe (spec 8): up to 8 + 8.
# The same strings as `jaxlab.data.rerank_tokens` (its `make_tokenizer`).
# Byte-level tokenizers get them as named specials; with a real tokenizer use
# plain words ("yes", "true", ...).
LABEL_TOKENS_POS = ("<yes>", "<true>", "<right>", "<correct>", "<relevant>",
                    "<same>", "<good>", "<positive>")
LABEL_TOKENS_NEG = ("<no>", "<false>", "<wrong>", "<incorrect>",
                    "<irrelevant>", "<different>", "<bad>", "<negative>")
# [inferred] Qwen3-Reranker-style prompt (the paper's is not available).
QWEN3_SYSTEM = ('Judge whether the Document meets the requirements based on '
                'the Query and the Instruct provided. Note that the answer '
                'can only be "yes" or "no".\n')
QWEN3_TEMPLATE = ("{system}<Instruct>: {instruction}\n<Query>: {query}\n"
                  "<Document>: {document}\nAnswer:")


@struct.dataclass
class RerankHeads:
  """Answer-position readouts of a reranker, each `[...]` (e.g. `[B, G]`).

  z_yes, z_no: logits of the yes / no label tokens (M_y.h, M_n.h).
  z_label_pos, z_label_neg: `[..., K]` logits of multi-token label sets
    (e.g. yes/true/correct..., no/false/wrong...), or None.
  z_rand: `[..., 2]` logits (R_y.h, R_n.h) of a randomly initialised,
    learnable replacement of the yes/no unembeddings (direction "random"),
    or None when the model has no such head.

  The model's output type; `jaxlab.objectives.rerank` (the scores and
  losses reading it) re-exports it.
  """
  z_yes: jax.Array
  z_no: jax.Array
  z_label_pos: jax.Array | None = None
  z_label_neg: jax.Array | None = None
  z_rand: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class RerankerConfig:
  """Reranker = decoder + optional ViT + label token ids.

  num_label_tokens: size of the multi-token label set (2..16: half positive,
    half negative); 0 disables the multi-token heads.
  random_direction: add a learnable random yes/no head R (direction D_Rand).
  arch: "vit_decoder" (`vit` + `decoder`) or "qwen2_5_vl" (Qwen2.5-VL:
    `vision` tower + `decoder` as its language model, M-RoPE).
  vision: the Qwen2.5-VL tower (arch "qwen2_5_vl"); its `out_hidden_size`
    is set to the decoder width.
  image_size: side of the (square) images of arch "qwen2_5_vl", a multiple
    of patch_size * spatial_merge_size.
  image_mean, image_std: the processor's per-channel normalisation of the
    [0, 1] images (arch "qwen2_5_vl"; e.g.
    `jaxlab.data.vision_processor.OPENAI_CLIP_MEAN` / `_STD`).
  mrope_section: temporal / height / width split of the decoder's
    head_dim / 2 rotary pairs; () = Qwen's 1 : 1.5 : 1.5
    (`default_mrope_section`).
  vision_start_token_id, video_token_id: written into the exported
    Qwen2.5-VL config (-1: the tokenizer has none; prompts never use them).
  """
  decoder: decoder_lib.DecoderConfig
  vit: vit_lib.ViTConfig | None
  image_token_id: int
  yes_id: int
  no_id: int
  label_pos_ids: tuple[int, ...] = ()
  label_neg_ids: tuple[int, ...] = ()
  random_direction: bool = False
  arch: str = "vit_decoder"
  vision: qwen2_vl.VisionConfig | None = None
  image_size: int = 0
  image_mean: tuple[float, ...] = ()
  image_std: tuple[float, ...] = ()
  mrope_section: tuple[int, ...] = ()
  vision_start_token_id: int = -1
  video_token_id: int = -1

  def __post_init__(self):
    if self.arch not in ARCHS:
      raise ValueError(f"reranker arch={self.arch!r}; valid: {ARCHS}")
    for key in ("image_mean", "image_std", "mrope_section"):
      object.__setattr__(self, key, tuple(getattr(self, key)))
    if self.arch != "qwen2_5_vl":
      return
    v = self.vision
    if v is None:
      raise ValueError("arch='qwen2_5_vl' needs a vision (VisionConfig)")
    object.__setattr__(self, "vision", dataclasses.replace(
        v, out_hidden_size=self.decoder.dim))
    unit = v.patch_size * v.spatial_merge_size
    if self.image_size < unit or self.image_size % unit:
      raise ValueError(f"image_size={self.image_size} must be a positive "
                       f"multiple of patch_size * spatial_merge_size = {unit}")
    if not (len(self.image_mean) == len(self.image_std) == v.in_channels):
      raise ValueError(f"image_mean / image_std need {v.in_channels} values "
                       "(the processor's normalisation), got "
                       f"{self.image_mean} / {self.image_std}")

  @property
  def vl(self) -> qwen2_vl.Qwen2VLConfig:
    """The Qwen2.5-VL config of arch "qwen2_5_vl" (text = `decoder`)."""
    if self.arch != "qwen2_5_vl":
      raise ValueError(f"arch={self.arch!r} has no Qwen2.5-VL config")
    return qwen2_vl.Qwen2VLConfig(
        text=self.decoder, vision=self.vision,
        image_token_id=self.image_token_id,
        video_token_id=self.video_token_id,
        vision_start_token_id=self.vision_start_token_id,
        mrope_section=self.mrope_section or default_mrope_section(
            self.decoder.resolved_head_dim))

  @property
  def image_grid(self) -> tuple[int, int, int]:
    """(t, h, w) patch grid of one image (arch "qwen2_5_vl")."""
    side = self.image_size // self.vision.patch_size
    return (1, side, side)

  @property
  def num_image_tokens(self) -> int:
    """Placeholders per image: ViT patches, or merged Qwen-VL tokens
    (t * h * w / merge^2); 0 without an image encoder."""
    if self.arch == "qwen2_5_vl":
      t, h, w = self.image_grid
      return t * h * w // self.vision.spatial_merge_size ** 2
    return self.vit.num_patches if self.vit is not None else 0

  @property
  def has_images(self) -> bool:
    return self.arch == "qwen2_5_vl" or self.vit is not None

  @classmethod
  def from_tokenizer(cls, tok: Any, *,
                     decoder: decoder_lib.DecoderConfig,
                     vit: vit_lib.ViTConfig | None,
                     yes_token: str = "<yes>", no_token: str = "<no>",
                     image_token: str = IMAGE_TOKEN,
                     num_label_tokens: int = 0,
                     label_tokens_pos: Sequence[str] = LABEL_TOKENS_POS,
                     label_tokens_neg: Sequence[str] = LABEL_TOKENS_NEG,
                     random_direction: bool = False,
                     **arch_fields) -> "RerankerConfig":
    """Resolves yes/no (and label-set) ids from the tokenizer.

    `arch_fields`: `arch`, `vision`, `image_size`, `image_mean`,
    `image_std`, `mrope_section`, ... (the Qwen2.5-VL architecture)."""
    if num_label_tokens and not (
        2 <= num_label_tokens <= 2 * min(len(label_tokens_pos),
                                         len(label_tokens_neg))
        and num_label_tokens % 2 == 0):
      raise ValueError(
          f"num_label_tokens must be an even number in [2, "
          f"{2 * min(len(label_tokens_pos), len(label_tokens_neg))}] or 0, "
          f"got {num_label_tokens}")
    half = num_label_tokens // 2
    if vit is not None and vit.out_dim != decoder.dim:
      raise ValueError(f"vit.out_dim={vit.out_dim} must equal the decoder "
                       f"width {decoder.dim}")
    if tok.vocab_size > decoder.vocab_size:
      raise ValueError(f"tokenizer vocab {tok.vocab_size} exceeds the "
                       f"decoder's vocab_size {decoder.vocab_size}")
    return cls(decoder=decoder, vit=vit,
               image_token_id=tok.token_id(image_token),
               yes_id=tok.token_id(yes_token), no_id=tok.token_id(no_token),
               label_pos_ids=tuple(tok.token_id(t)
                                   for t in label_tokens_pos[:half]),
               label_neg_ids=tuple(tok.token_id(t)
                                   for t in label_tokens_neg[:half]),
               random_direction=random_direction, **arch_fields)


def from_vl(tok: Any, vl: qwen2_vl.Qwen2VLConfig, *, image_size: int,
            image_mean: Sequence[float], image_std: Sequence[float],
            image_token: str = "<|image_pad|>", **label_fields
            ) -> RerankerConfig:
  """The reranker config of a loaded Qwen2.5-VL / Qwen2-VL checkpoint
  (`jaxlab.io.pretrained.load`'s `Qwen2VLConfig`): its text decoder,
  vision tower, special ids and M-RoPE split, so `RerankerConfig.vl` is
  the checkpoint's own config; `label_fields` are `from_tokenizer`'s
  (`yes_token`, `no_token`, `num_label_tokens`, ...), `image_mean` /
  `image_std` the checkpoint processor's."""
  cfg = RerankerConfig.from_tokenizer(
      tok, decoder=vl.text, vit=None, image_token=image_token,
      arch="qwen2_5_vl", vision=vl.vision, image_size=int(image_size),
      image_mean=tuple(image_mean), image_std=tuple(image_std),
      mrope_section=vl.mrope_section,
      vision_start_token_id=vl.vision_start_token_id,
      video_token_id=vl.video_token_id, **label_fields)
  if cfg.image_token_id != vl.image_token_id:
    raise ValueError(f"image_token={image_token!r} is id "
                     f"{cfg.image_token_id}, the checkpoint's image token "
                     f"is {vl.image_token_id}")
  if cfg.vl != vl:
    raise ValueError(f"reranker config {cfg.vl} != checkpoint {vl}")
  return cfg


def default_mrope_section(head_dim: int) -> tuple[int, int, int]:
  """Qwen's M-RoPE split of head_dim / 2 rotary pairs (16 / 24 / 24 of 64):
  height and width a 3/8 share each, temporal the rest (as
  `qwen2_vl.config_from_dict`)."""
  half = head_dim // 2
  hw = (half - half // 4) // 2
  return (half - 2 * hw, hw, hw)


class Reranker(nnx.Module):
  """Decoder LM + ViT patch encoder (or Qwen2.5-VL), read out at the answer
  position."""

  def __init__(self, cfg: RerankerConfig, *, rngs: nnx.Rngs,
               vl: qwen2_vl.Qwen2VL | None = None):
    """`vl`: a loaded Qwen2.5-VL / Qwen2-VL model (arch "qwen2_5_vl"; its
    config must be `cfg.vl`), used as is instead of a random one."""
    self.cfg = cfg
    if vl is not None and (cfg.arch != "qwen2_5_vl" or vl.cfg != cfg.vl):
      raise ValueError(
          "Reranker(vl=...): the model's Qwen2VLConfig must be the "
          "reranker config's `vl` (build it with rr.from_vl of the same "
          f"load, dtypes included); got {getattr(vl, 'cfg', None)}")
    if cfg.arch == "qwen2_5_vl":
      # visual + language_model, exported whole by jaxlab.io.hf.save.
      self.vl = vl if vl is not None else qwen2_vl.Qwen2VL(cfg.vl, rngs=rngs)
      self.vit = None
    else:
      self.vl = None
      self.decoder = decoder_lib.Decoder(cfg.decoder, rngs=rngs)
      self.vit = (None if cfg.vit is None else
                  vit_lib.ViTEncoder(cfg.vit, rngs=rngs))
    if cfg.random_direction:
      # D_Rand (spec 8): a randomly initialised, learnable replacement of the
      # yes/no unembedding rows, scaled like the LM head.
      self.rand_head_dk = pt.param(
          jax.random.normal(rngs.params(), (cfg.decoder.dim, 2)) *
          cfg.decoder.init_std, (pt.EMBED, None))
    else:
      self.rand_head_dk = None

  @property
  def language_model(self) -> decoder_lib.Decoder:
    """The decoder the heads read (`decoder`, or Qwen2.5-VL's LM)."""
    return self.decoder if self.vl is None else self.vl.language_model

  def embed_inputs(self, input_ids_nt: jax.Array,
                   images_nihwc: jax.Array | None) -> jax.Array:
    """Token embeddings `[n, T, D]`; `<image>` slots get image features.

    `images_nihwc`: ViT images `[n, I, S, S, C]`, or for Qwen2.5-VL each
    image's processor patches `[n, I, h * w, C*T*P*P]` (`collate_groups`).
    The k-th placeholder of a sequence takes the k-th feature token of its
    images concatenated in order (`[I * P]`), so placeholders for images
    0, 1, ... appear in the prompt in the same order as `images` (slots of
    absent images are never read).
    """
    lm = self.language_model
    emb = lm.embed(input_ids_nt)
    if images_nihwc is None or not self.cfg.has_images:
      return emb
    n, i = images_nihwc.shape[:2]
    flat = images_nihwc.reshape((n * i,) + images_nihwc.shape[2:])
    if self.vl is not None:
      # One image at a time (the tower attends within a frame, so this is
      # the batch's images encoded together, at O(h*w)^2 attention each).
      grid = [self.cfg.image_grid]
      feats = jax.vmap(lambda pv: self.vl.visual(pv, grid))(flat)
    else:
      feats = self.vit(flat)
    feats = feats.reshape(n, i * feats.shape[1], feats.shape[2])
    is_img = input_ids_nt == self.cfg.image_token_id
    slot = jnp.clip(jnp.cumsum(is_img, axis=1) - 1, 0, feats.shape[1] - 1)
    img_emb = jnp.take_along_axis(feats, slot[..., None], axis=1)
    return jnp.where(is_img[..., None], img_emb.astype(emb.dtype), emb)

  def heads(self, input_ids_nt: jax.Array, attention_mask_nt: jax.Array,
            answer_index_n: jax.Array,
            images_nihwc: jax.Array | None = None,
            positions_3nt: jax.Array | None = None) -> RerankHeads:
    """Answer-position readouts, each `[n]` (label sets `[n, K]`).

    `positions_3nt`: Qwen2.5-VL's M-RoPE positions (`rope_index` of the
    prompts; required for arch "qwen2_5_vl")."""
    emb = self.embed_inputs(input_ids_nt, images_nihwc)
    if self.vl is not None:
      if positions_3nt is None:
        raise ValueError("arch='qwen2_5_vl' needs the M-RoPE positions "
                         "(collate_groups' mrope_positions)")
      out = self.vl.forward(inputs_embeds=emb,
                            attention_mask=attention_mask_nt,
                            positions_3bt=positions_3nt,
                            output_hidden_states=True)
    else:
      out = self.decoder.forward(inputs_embeds=emb,
                                 attention_mask=attention_mask_nt,
                                 output_hidden_states=True)
    lm = self.language_model
    h_last = out.hidden_states[-1]
    h_nd = jnp.take_along_axis(h_last, answer_index_n[:, None, None],
                               axis=1)[:, 0]
    logits_nv = lm.unembed(h_nd[:, None])[:, 0]
    cfg = self.cfg
    z_rand = None
    if self.rand_head_dk is not None:
      hn = lm.final_norm(h_nd).astype(jnp.float32)
      z_rand = hn @ self.rand_head_dk[...].astype(jnp.float32)
    pos = (logits_nv[:, jnp.array(cfg.label_pos_ids)]
           if cfg.label_pos_ids else None)
    neg = (logits_nv[:, jnp.array(cfg.label_neg_ids)]
           if cfg.label_neg_ids else None)
    return RerankHeads(z_yes=logits_nv[:, cfg.yes_id],
                              z_no=logits_nv[:, cfg.no_id],
                              z_label_pos=pos, z_label_neg=neg, z_rand=z_rand)

  def score_heads(self, batch: dict[str, jax.Array]) -> RerankHeads:
    """Group batch (`input_ids [B, G, T]`, `attention_mask`, `answer_index
    [B, G]`, optional `images [B, G, I, H, W, C]` (ViT) or `pixel_values
    [B, G, I, N, C*T*P*P]` and `mrope_positions [B, G, 3, T]` (Qwen2.5-VL))
    -> heads `[B, G]`."""
    ids = batch["input_ids"]
    lead = ids.shape[:-1]
    n = int(np.prod(lead))
    t = ids.shape[-1]
    images = batch.get("pixel_values" if self.vl is not None else "images")
    if images is not None:
      images = images.reshape((n,) + images.shape[len(lead):])
    positions = batch.get("mrope_positions")
    if positions is not None:
      positions = jnp.moveaxis(positions.reshape(n, 3, t), 1, 0)
    h = self.heads(ids.reshape(n, t),
                   batch["attention_mask"].reshape(n, t),
                   batch["answer_index"].reshape(n), images, positions)
    return jax.tree.map(lambda x: x.reshape(lead + x.shape[1:]), h)


# -- prompts and batching ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
  """`template` with {system}, {instruction}, {query}, {document} fields."""
  system: str = QWEN3_SYSTEM
  template: str = QWEN3_TEMPLATE


def _item_text(item, num_patches: int, image_token: str = IMAGE_TOKEN
               ) -> tuple[str, list[np.ndarray]]:
  if isinstance(item, str):
    return item, []
  text = item.get("text") or ""
  image = item.get("image")
  if image is None:
    return text, []
  sep = " " if text else ""
  return image_token * num_patches + sep + text, [image]


def encode_pair(instruction: str, query, document,
                tok: Any, template: PromptTemplate,
                num_patches: int, max_len: int,
                image_token: str = IMAGE_TOKEN
                ) -> tuple[list[int], list[np.ndarray]]:
  """Token ids of one prompt (<= max_len) and its images in prompt order.

  Too-long prompts lose document tokens from the end; the answer suffix is
  kept so the answer position stays the last token.
  """
  q_text, q_imgs = _item_text(query, num_patches, image_token)
  d_text, d_imgs = _item_text(document, num_patches, image_token)
  marker = "\x00DOC\x00"
  full = template.template.format(system=template.system,
                                  instruction=instruction, query=q_text,
                                  document=marker)
  head, tail = full.split(marker)
  head_ids = tok.encode(head + d_text)
  tail_ids = tok.encode(tail)
  room = max_len - len(tail_ids)
  if room < 1:
    raise ValueError(f"max_len={max_len} is too short for the prompt")
  ids = head_ids[:room] + tail_ids
  return ids, q_imgs + d_imgs


def collate_groups(groups: Sequence[tuple[str, object, Sequence[object]]],
                   tok: Any, cfg: RerankerConfig,
                   template: PromptTemplate, *, max_len: int,
                   max_images: int = 2,
                   image_token: str = IMAGE_TOKEN) -> dict[str, np.ndarray]:
  """Group batch from (instruction, query, [doc0 (positive), doc1, ...]).

  Returns numpy `input_ids [B, G, T]` (right-padded), `attention_mask`,
  `answer_index [B, G]` and, when the model has a ViT, `images [B, G, I,
  S, S, C]` (zeros where a prompt has fewer than `max_images`); for arch
  "qwen2_5_vl" instead `pixel_values [B, G, I, h*w, C*T*P*P]` (each image
  normalised with `cfg.image_mean` / `image_std` and cut by
  `qwen2_vl.patchify`, the processor's layout; zeros for absent images)
  and `mrope_positions [B, G, 3, T]` (`qwen2_vl.rope_index` of each
  prompt over its attention mask, grid `cfg.image_grid` per image;
  padding 0). `image_token` is the placeholder string (one token id:
  `cfg.image_token_id`), repeated `cfg.num_image_tokens` times per image.
  """
  b = len(groups)
  g = len(groups[0][2])
  if any(len(x[2]) != g for x in groups):
    raise ValueError("every group needs the same number of documents")
  p = cfg.num_image_tokens
  qwen = cfg.arch == "qwen2_5_vl"
  ids = np.full((b, g, max_len), tok.pad_id, np.int32)
  mask = np.zeros((b, g, max_len), np.int32)
  ans = np.zeros((b, g), np.int32)
  images = None
  if qwen:
    t, h, w = cfg.image_grid
    images = np.zeros((b, g, max_images, t * h * w, cfg.vision.patch_dim),
                      np.float32)
    mean = np.asarray(cfg.image_mean, np.float32)
    std = np.asarray(cfg.image_std, np.float32)
  elif cfg.vit is not None:
    s, c = cfg.vit.image_size, cfg.vit.channels
    images = np.zeros((b, g, max_images, s, s, c), np.float32)
  counts = []
  for bi, (ins, query, docs) in enumerate(groups):
    for gi, doc in enumerate(docs):
      seq, imgs = encode_pair(ins, query, doc, tok, template, p, max_len,
                              image_token)
      if imgs and not cfg.has_images:
        raise ValueError("an item has an image but the reranker has no ViT")
      if len(imgs) > max_images:
        raise ValueError(f"a prompt has {len(imgs)} images > max_images="
                         f"{max_images}")
      if qwen and sum(x == cfg.image_token_id for x in seq) != p * len(imgs):
        raise ValueError(f"max_len={max_len} cuts an image's placeholders "
                         "(Qwen2.5-VL needs whole images)")
      ids[bi, gi, :len(seq)] = seq
      mask[bi, gi, :len(seq)] = 1
      ans[bi, gi] = len(seq) - 1
      counts.append(len(imgs))
      for ii, img in enumerate(imgs):
        if qwen:
          x = (np.asarray(img, np.float32) - mean) / std   # [S, S, C]
          pv, grid = qwen2_vl.patchify(x.transpose(2, 0, 1)[None],
                                       cfg.vision)
          if tuple(grid) != cfg.image_grid:
            raise ValueError(f"an image of shape {np.shape(img)}: grid "
                             f"{grid} != {cfg.image_grid} (image_size="
                             f"{cfg.image_size})")
          images[bi, gi, ii] = pv
        else:
          images[bi, gi, ii] = img
  out = {"input_ids": ids, "attention_mask": mask, "answer_index": ans}
  if qwen:
    out["pixel_values"] = images
    grids = [cfg.image_grid] * sum(counts) if sum(counts) else None
    pos, _ = qwen2_vl.rope_index(ids.reshape(b * g, max_len), cfg.vl,
                                 image_grid_thw=grids,
                                 attention_mask=mask.reshape(b * g, max_len))
    out["mrope_positions"] = np.ascontiguousarray(
        pos.reshape(3, b, g, max_len).transpose(1, 2, 0, 3)).astype(np.int32)
  elif images is not None:
    out["images"] = images
  return out


def _load_image(image, size: int) -> np.ndarray:
  """uint8 `[size, size, 3]` of a path, a PIL image or a uint8 array (RGB,
  as UniIR opens M-BEIR's images), resized (bicubic, the processor's
  default) to the fixed square every prompt of a jitted batch shares."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  if isinstance(image, str):
    with Image.open(image) as im:
      image = im.convert("RGB")
  elif not hasattr(image, "convert"):
    image = Image.fromarray(np.asarray(image, np.uint8))
  image = image.convert("RGB").resize((size, size),
                                      Image.Resampling.BICUBIC)
  return np.asarray(image, np.uint8)


def chat_prompt(chat: Any, cfg: RerankerConfig, template: PromptTemplate,
                instruction: str, query, document, *, max_len: int
                ) -> tuple[list[int], np.ndarray | None]:
  """One (instruction, query, document) prompt through a checkpoint's chat
  template (`jaxlab.evals.vl_chat.VLChat.content_prompt`): `template.
  system` as the system turn, the user turn `template.template` (with
  `{system}` empty) whose query / document images are `{"type": "image"}`
  items where the item stands (each expanded to its tokens by the
  checkpoint's processor, images `cfg.image_size` square), the generation
  prompt last (the answer position). Returns (ids, pixel_values of its
  images in order or None). A prompt over `max_len` loses document text
  tokens from the end (then ValueError if that is not enough)."""
  tok = chat.tokenizer
  side = int(cfg.image_size)

  def parts(item):
    if isinstance(item, str):
      return item, None
    img = item.get("image")
    return item.get("text") or "", (None if img is None else
                                    _load_image(img, side))

  (q_text, q_img), (doc_text, d_img) = parts(query), parts(document)
  images = [im for im in (q_img, d_img) if im is not None]
  marks = ("\x00Q\x00", "\x00D\x00")
  head, rest = template.template.format(
      system="", instruction=instruction, query=marks[0],
      document=marks[1]).split(marks[0])
  mid, tail = rest.split(marks[1])
  bound = side * side
  for _ in range(4):
    content = [{"type": "text", "text": head}]
    for text, img, after in ((q_text, q_img, mid), (doc_text, d_img, tail)):
      if img is not None:
        content.append({"type": "image"})
      sep = " " if img is not None and text else ""
      content.append({"type": "text", "text": sep + text + after})
    ids, mm = chat.content_prompt(content, images, min_pixels=bound,
                                  max_pixels=bound,
                                  system=template.system or None)
    over = len(ids) - max_len
    if over <= 0:
      return ids, (mm["pixel_values"] if images else None)
    d_ids = tok.encode(doc_text)
    if not d_ids:
      break
    doc_text = tok.decode(d_ids[:max(0, len(d_ids) - over)])
  raise ValueError(f"max_len={max_len} is too short for a prompt "
                   f"({len(ids)} tokens with the document text cut)")


def collate_chat_groups(groups: Sequence[tuple[str, object, Sequence[object]]],
                        chat: Any, cfg: RerankerConfig,
                        template: PromptTemplate, *, max_len: int,
                        max_images: int = 2) -> dict[str, np.ndarray]:
  """`collate_groups` for a loaded Qwen2.5-VL / Qwen2-VL checkpoint: each
  prompt is `chat_prompt` (the checkpoint's chat template and processor);
  the same arrays (`input_ids`, `attention_mask`, `answer_index`,
  `pixel_values [B, G, I, h*w, C*T*P*P]`, `mrope_positions`)."""
  if cfg.arch != "qwen2_5_vl":
    raise ValueError("collate_chat_groups needs arch 'qwen2_5_vl'")
  b, g = len(groups), len(groups[0][2])
  if any(len(x[2]) != g for x in groups):
    raise ValueError("every group needs the same number of documents")
  pad = chat.tokenizer.pad_id or 0
  ids = np.full((b, g, max_len), pad, np.int32)
  mask = np.zeros((b, g, max_len), np.int32)
  ans = np.zeros((b, g), np.int32)
  t, h, w = cfg.image_grid
  images = np.zeros((b, g, max_images, t * h * w, cfg.vision.patch_dim),
                    np.float32)
  count = 0
  for bi, (ins, query, docs) in enumerate(groups):
    for gi, doc in enumerate(docs):
      seq, pv = chat_prompt(chat, cfg, template, ins, query, doc,
                            max_len=max_len)
      n = 0 if pv is None else len(pv) // (t * h * w)
      if n > max_images:
        raise ValueError(f"a prompt has {n} images > max_images="
                         f"{max_images}")
      ids[bi, gi, :len(seq)] = seq
      mask[bi, gi, :len(seq)] = 1
      ans[bi, gi] = len(seq) - 1
      if n:
        images[bi, gi, :n] = pv.reshape(n, t * h * w, -1)
      count += n
  pos, _ = qwen2_vl.rope_index(
      ids.reshape(b * g, max_len), cfg.vl,
      image_grid_thw=[cfg.image_grid] * count if count else None,
      attention_mask=mask.reshape(b * g, max_len))
  return {"input_ids": ids, "attention_mask": mask, "answer_index": ans,
          "pixel_values": images,
          "mrope_positions": np.ascontiguousarray(
              pos.reshape(3, b, g, max_len).transpose(1, 2, 0, 3)
          ).astype(np.int32)}


# -- the spec's CPU miniature -------------------------------------------------


class FrozenHead(nnx.Variable):
  """A "pretrained" unembedding kept out of the optimizer (not an nnx.Param)."""


class EmbeddingReranker(nnx.Module):
  """Spec A "CPU-only miniature": h = MLP([q; d; q*d]), z = h @ M (frozen).

  Columns of M: 0 = yes, 1 = no, then `num_label_tokens // 2 - 1` more
  yes-like and no-like label rows (multi-token direction). `pretrain_head`
  style training of the whole model on another binary task gives M_y and
  M_n meaning before M is frozen (`freeze_head`).
  """

  def __init__(self, embed_dim: int, hidden: int, dim: int, *,
               num_label_tokens: int = 8, rngs: nnx.Rngs):
    init = jax.nn.initializers.lecun_normal()
    self.w1 = pt.param(init(rngs.params(), (3 * embed_dim, hidden)),
                       (None, pt.MLP))
    self.b1 = pt.param(jnp.zeros((hidden,)), (pt.MLP,))
    self.w2 = pt.param(init(rngs.params(), (hidden, hidden)), (None, pt.MLP))
    self.b2 = pt.param(jnp.zeros((hidden,)), (pt.MLP,))
    self.w3 = pt.param(init(rngs.params(), (hidden, dim)), (pt.MLP, pt.EMBED))
    half = max(num_label_tokens // 2, 1)
    self.num_labels = half
    # Trainable until `freeze_head` (pretraining), then a FrozenHead.
    self.head_dk = pt.param(init(rngs.params(), (dim, 2 * half)),
                            (pt.EMBED, None))
    self.rand_head_dk = pt.param(
        jax.random.normal(rngs.params(), (dim, 2)) / jnp.sqrt(dim),
        (pt.EMBED, None))

  def freeze_head(self):
    self.head_dk = FrozenHead(self.head_dk[...])

  def score_heads(self, batch: dict[str, jax.Array]) -> RerankHeads:
    """`query [B, E]`, `docs [B, G, E]` -> heads `[B, G]`."""
    q = jnp.broadcast_to(batch["query"][:, None], batch["docs"].shape)
    d = batch["docs"]
    x = jnp.concatenate([q, d, q * d], axis=-1)
    x = jax.nn.gelu(x @ self.w1[...] + self.b1[...])
    x = jax.nn.gelu(x @ self.w2[...] + self.b2[...])
    h = x @ self.w3[...]
    z = h @ self.head_dk[...]
    k = self.num_labels
    # Label columns: [yes, yes-like..., no, no-like...].
    return RerankHeads(z_yes=z[..., 0], z_no=z[..., k],
                              z_label_pos=z[..., :k], z_label_neg=z[..., k:],
                              z_rand=h @ self.rand_head_dk[...])
