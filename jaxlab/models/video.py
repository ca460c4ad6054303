"""A video LM: per-frame ViT + temporal transformer + decoder (frames as prefix).

    cfg = VideoConfig(decoder=DecoderConfig(...), vit=ViTConfig(...),
                      num_frames=8)
    model = VideoLM(cfg, rngs=nnx.Rngs(0))
    prefix_bpd = model.prefix_embeds(frames_bfhwc)      # [B, F*K, D]
    logits_btv = model(frames_bfhwc, ids_bt)            # logits of the ids
    out = model.forward(ids_bt, attention_mask=mask_bt,  # DecoderOutput
                        prefix_inputs=frames_bfhwc)
    result = model.generate(frames_bfhwc, prompts, max_new_tokens=4,
                            eos_id=tok.eos_id)           # sampler's result

Built by name through the model registry (`config.model.name = "video"`:
decoder fields at the top of `config.model`, a `vit` section of
`jaxlab.models.vit.ViTConfig` fields, a `video` section of the temporal
fields of `VideoConfig`; see `config_from_dict`), trained by the generic
trainer with the `video_lm` loss (`jaxlab.objectives.video_lm`: batch
`frames [B, F, H, W, C]`, `inputs`, `targets`, `loss_mask [B, T]`, sharded
on the batch axis like any batch), and decoded by
`jaxlab.decoding.sampler.generate` with the frames as `prefix_embeds`.

Architecture (the usual LVLM recipe, e.g. VideoLLaMA / Qwen2.5-VL, shrunk):
  1. every frame goes through the shared ViT patch encoder
     (`jaxlab.models.vit.ViTEncoder`, projected to the decoder width D):
     `[B*F, P, D]`;
  2. `frame_pooling="mean"` averages the P patch tokens of a frame into one
     token (K = 1 per frame), `"none"` keeps them (K = P);
  3. a learned temporal position embedding `[F, D]` is added to every token
     of frame f, and `temporal_layers` bidirectional pre-norm blocks (the
     ViT's block) attend jointly over the F*K tokens, then an RMSNorm;
  4. the F*K tokens are the decoder's `inputs_embeds` prefix, followed by
     the token embeddings of the prompt; position ids are counted over
     [prefix; real tokens], exactly as the sampler counts them.

`forward(ids, prefix_inputs=frames)` is the shared prefix LM's
(`jaxlab.models.prefix_lm.PrefixLM`, also the chart-to-code image policy
`ImagePrefixLM`: `prefix_inputs` / `prefix_embeds`), so the GRPO loss
(`jaxlab.objectives.grpo.policy_token_logprobs`) can train it from
rollout batches that carry the frames as `prefix_inputs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import registry as jregistry
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import prefix_lm
from jaxlab.models import registry
from jaxlab.models import vit as vit_lib
from jaxlab.nn import norm as norm_lib
from jaxlab.nn import partitioning as pt

FRAME_POOLINGS = ("mean", "none")
# `config.model.video` fields (the rest of VideoConfig comes from the
# decoder fields and the `vit` section).
TEMPORAL_FIELDS = ("num_frames", "frame_pooling", "temporal_layers",
                   "temporal_heads", "temporal_mlp_dim")


@dataclasses.dataclass(frozen=True)
class VideoConfig:
  """Video LM = ViT per frame + temporal transformer + decoder.

  Attributes:
    decoder: the decoder LM (its `dim` D is the width of every video token).
    vit: the per-frame encoder; `out_dim` must equal `decoder.dim`.
    num_frames: F, frames per clip (the temporal embedding has F rows).
    frame_pooling: "mean" (one token per frame) or "none" (all P patches).
    temporal_layers: bidirectional blocks over the F*K tokens (0 = none).
    temporal_heads: their attention heads (D must divide by it).
    temporal_mlp_dim: their SwiGLU width.
  """
  decoder: decoder_lib.DecoderConfig
  vit: vit_lib.ViTConfig
  num_frames: int = 8
  frame_pooling: str = "mean"
  temporal_layers: int = 1
  temporal_heads: int = 4
  temporal_mlp_dim: int = 128

  def __post_init__(self):
    if self.vit.out_dim != self.decoder.dim:
      raise ValueError(f"model.vit.out_dim={self.vit.out_dim} must equal the "
                       f"decoder width model.dim={self.decoder.dim}")
    if self.frame_pooling not in FRAME_POOLINGS:
      raise ValueError(f"model.video.frame_pooling={self.frame_pooling!r}; "
                       f"valid: {', '.join(FRAME_POOLINGS)}")
    if self.num_frames < 1:
      raise ValueError(f"model.video.num_frames={self.num_frames} must be "
                       ">= 1")
    if self.temporal_layers < 0:
      raise ValueError("model.video.temporal_layers must be >= 0")
    if self.temporal_layers and self.decoder.dim % self.temporal_heads:
      raise ValueError(f"model.dim={self.decoder.dim} must be a multiple of "
                       f"model.video.temporal_heads={self.temporal_heads}")

  @property
  def tokens_per_frame(self) -> int:
    return 1 if self.frame_pooling == "mean" else self.vit.num_patches

  @property
  def num_prefix(self) -> int:
    """Video tokens fed before the prompt: F * K."""
    return self.num_frames * self.tokens_per_frame

  @property
  def frame_shape(self) -> tuple[int, int, int]:
    return (self.vit.image_size, self.vit.image_size, self.vit.channels)

  def temporal_block_config(self) -> vit_lib.ViTConfig:
    """The ViT block config reused for the temporal blocks (width D)."""
    d = self.decoder.dim
    return vit_lib.ViTConfig(
        image_size=self.vit.patch_size, patch_size=self.vit.patch_size,
        channels=self.vit.channels, dim=d, num_layers=self.temporal_layers,
        num_heads=self.temporal_heads, mlp_dim=self.temporal_mlp_dim,
        out_dim=d, init_std=self.vit.init_std, norm_eps=self.vit.norm_eps)


def config_from_dict(model_cfg: Mapping[str, Any], *,
                     vocab_size: int | None = None) -> VideoConfig:
  """`config.model` -> VideoConfig; an unknown field is an error naming it.

  Layout: decoder fields (`DecoderConfig`) at the top, a `vit` section
  (`ViTConfig` fields; `out_dim` defaults to the decoder width) and a
  `video` section (`num_frames`, `frame_pooling`, `temporal_layers`,
  `temporal_heads`, `temporal_mlp_dim`).
  """
  from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
  model_cfg = dict(model_cfg)
  vit_section = dict(model_cfg.pop("vit", None) or {})
  video_section = dict(model_cfg.pop("video", None) or {})
  dcfg = registry.decoder_config(model_cfg, vocab_size=vocab_size)
  vit = jregistry.dataclass_from_config(
      vit_lib.ViTConfig, vit_section, exclude=(), where="model.vit",
      defaults={"out_dim": dcfg.dim})
  for key in video_section:
    if key not in TEMPORAL_FIELDS:
      raise ValueError(f"model.video.{key} is not a video field; valid: "
                       f"{', '.join(TEMPORAL_FIELDS)}")
  return VideoConfig(decoder=dcfg, vit=vit, **video_section)


class VideoLM(prefix_lm.PrefixLM):
  """Frames `[B, F, H, W, C]` in [0, 1] + token ids -> decoder output.

  `forward`, `__call__` and `generate` are the shared prefix LM's
  (`jaxlab.models.prefix_lm.PrefixLM`); this class defines the prefix.
  """

  PREFIX_INPUTS = "frames [B, F, H, W, C]"
  PREFIX_UNIT = "clip"

  def __init__(self, cfg: VideoConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.decoder.dim
    self.vit = vit_lib.ViTEncoder(cfg.vit, rngs=rngs)
    self.temporal_pos_fd = pt.param(
        jax.nn.initializers.normal(cfg.vit.init_std)(
            rngs.params(), (cfg.num_frames, d)), (None, pt.EMBED))
    tcfg = cfg.temporal_block_config()
    self.temporal = nnx.List([vit_lib.ViTBlock(tcfg, rngs=rngs)
                              for _ in range(cfg.temporal_layers)])
    self.temporal_norm = norm_lib.RMSNorm(d, eps=cfg.vit.norm_eps)
    self.decoder = decoder_lib.Decoder(cfg.decoder, rngs=rngs)

  # -- the video prefix --------------------------------------------------------

  def _check_frames(self, frames_bfhwc) -> None:
    cfg = self.cfg
    want = (cfg.num_frames,) + cfg.frame_shape
    if frames_bfhwc.ndim != 5 or tuple(frames_bfhwc.shape[1:]) != want:
      raise ValueError(f"frames must be [B, {', '.join(map(str, want))}] "
                       f"(B clips of model.video.num_frames frames of "
                       f"model.vit.image_size pixels), got "
                       f"{tuple(frames_bfhwc.shape)}")

  def frame_tokens(self, frames_bfhwc: jax.Array) -> jax.Array:
    """Per-frame ViT tokens, pooled: `[B, F, K, D]` (steps 1-2)."""
    self._check_frames(frames_bfhwc)
    b, f = frames_bfhwc.shape[:2]
    tok = self.vit(frames_bfhwc.reshape((b * f,) + frames_bfhwc.shape[2:]))
    tok = tok.reshape(b, f, tok.shape[1], tok.shape[2])
    if self.cfg.frame_pooling == "mean":
      tok = jnp.mean(tok, axis=2, keepdims=True)
    return tok

  def prefix_embeds(self, frames_bfhwc: jax.Array) -> jax.Array:
    """Frames -> the decoder prefix `[B, F*K, D]` (steps 1-3)."""
    tok = self.frame_tokens(frames_bfhwc)
    b, f, k, d = tok.shape
    x = (tok + self.temporal_pos_fd[...][None, :, None, :]).reshape(
        b, f * k, d)
    for block in self.temporal:
      x = block(x)
    return self.temporal_norm(x).astype(decoder_lib.to_dtype(
        self.cfg.decoder.dtype))


# Jitted `model.prefix_embeds(frames)` (one compile per frame shape).
encode_prefix = prefix_lm.encode_prefix


def count_params(model: nnx.Module) -> int:
  """Number of scalars in the module's `nnx.Param`s."""
  return int(sum(np.size(x) for x in jax.tree.leaves(
      nnx.state(model, nnx.Param))))


# -- model.name="video" (the registry finds it by package walk) ---------------


@registry.register("video")
def _build_video(model_cfg, *, vocab_size: int | None = None,
                 seed: int = 0) -> registry.ModelSpec:
  """`VideoLM`: decoder fields + `vit` + `video`."""
  cfg = config_from_dict(model_cfg, vocab_size=vocab_size)
  return registry.ModelSpec(
      factory=lambda: VideoLM(cfg, rngs=nnx.Rngs(seed)), config=cfg)
