"""A small ViT patch encoder whose tokens feed a decoder LM.

    enc = ViTEncoder(ViTConfig(image_size=16, patch_size=4, out_dim=64), ...)
    tokens_bpd = enc(images_bhwc)        # [B, P, out_dim], P = (16 / 4)^2

Images are split into non-overlapping patches, linearly embedded, given a
learned position embedding, passed through bidirectional pre-norm blocks
(jaxlab's attention without RoPE, RMSNorm and SwiGLU, as in Qwen2.5-VL's
vision tower) and projected to the decoder width by a two-layer MLP merger.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.nn import attention as attn_lib
from jaxlab.nn import mlp as mlp_lib
from jaxlab.nn import norm as norm_lib
from jaxlab.nn import partitioning as pt



@dataclasses.dataclass(frozen=True)
class ViTConfig:
  image_size: int = 16
  patch_size: int = 4
  channels: int = 3
  dim: int = 64
  num_layers: int = 2
  num_heads: int = 4
  mlp_dim: int = 128
  out_dim: int = 64  # the decoder's width
  init_std: float = 0.02
  norm_eps: float = 1e-6

  def __post_init__(self):
    if self.image_size % self.patch_size:
      raise ValueError(f"image_size={self.image_size} must be a multiple of "
                       f"patch_size={self.patch_size}")
    if self.dim % self.num_heads:
      raise ValueError(f"dim={self.dim} must be a multiple of "
                       f"num_heads={self.num_heads}")

  @property
  def num_patches(self) -> int:
    return (self.image_size // self.patch_size) ** 2


def patchify(images_bhwc: jax.Array, patch_size: int) -> jax.Array:
  """`[B, H, W, C]` -> `[B, (H/p)(W/p), p*p*C]`, row-major over patches."""
  b, h, w, c = images_bhwc.shape
  p = patch_size
  x = images_bhwc.reshape(b, h // p, p, w // p, p, c)
  x = x.transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(b, (h // p) * (w // p), p * p * c)


class ViTBlock(nnx.Module):

  def __init__(self, cfg: ViTConfig, *, rngs: nnx.Rngs):
    self.attn_norm = norm_lib.RMSNorm(cfg.dim, eps=cfg.norm_eps)
    self.attn = attn_lib.Attention(
        cfg.dim, cfg.num_heads, cfg.num_heads, cfg.dim // cfg.num_heads,
        rngs=rngs, init_std=cfg.init_std, use_rope=False)
    self.mlp_norm = norm_lib.RMSNorm(cfg.dim, eps=cfg.norm_eps)
    self.mlp = mlp_lib.SwiGLU(cfg.dim, cfg.mlp_dim, rngs=rngs,
                              init_std=cfg.init_std)

  def __call__(self, x_bpd: jax.Array) -> jax.Array:
    a, _ = self.attn(self.attn_norm(x_bpd), cos_btd=None, sin_btd=None,
                     mask=None)
    x_bpd = x_bpd + a
    return x_bpd + self.mlp(self.mlp_norm(x_bpd))


class ViTEncoder(nnx.Module):
  """Patch encoder + projection to the decoder width."""

  def __init__(self, cfg: ViTConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    init = jax.nn.initializers.normal(cfg.init_std)
    patch_dim = cfg.patch_size ** 2 * cfg.channels
    self.patch_embed_kd = pt.param(
        init(rngs.params(), (patch_dim, cfg.dim)), (None, pt.EMBED))
    self.patch_bias_d = pt.param(jnp.zeros((cfg.dim,)), (pt.EMBED,))
    self.pos_embed_pd = pt.param(
        init(rngs.params(), (cfg.num_patches, cfg.dim)), (None, pt.EMBED))
    self.blocks = nnx.List([ViTBlock(cfg, rngs=rngs)
                            for _ in range(cfg.num_layers)])
    self.final_norm = norm_lib.RMSNorm(cfg.dim, eps=cfg.norm_eps)
    # Two-layer merger to the LM width (as the Qwen2.5-VL patch merger).
    self.proj_in_df = pt.param(init(rngs.params(), (cfg.dim, cfg.mlp_dim)),
                               (pt.EMBED, pt.MLP))
    self.proj_out_fo = pt.param(
        init(rngs.params(), (cfg.mlp_dim, cfg.out_dim)), (pt.MLP, pt.EMBED))

  def __call__(self, images_bhwc: jax.Array) -> jax.Array:
    """Images `[B, H, W, C]` (float in [0, 1]) -> tokens `[B, P, out_dim]`."""
    cfg = self.cfg
    if images_bhwc.shape[1:] != (cfg.image_size, cfg.image_size,
                                 cfg.channels):
      raise ValueError(f"images must be [B, {cfg.image_size}, "
                       f"{cfg.image_size}, {cfg.channels}], got "
                       f"{images_bhwc.shape}")
    x = patchify(images_bhwc.astype(jnp.float32) * 2.0 - 1.0,
                 cfg.patch_size)
    x = x @ self.patch_embed_kd[...] + self.patch_bias_d[...]
    x = x + self.pos_embed_pd[...][None]
    for block in self.blocks:
      x = block(x)
    x = self.final_norm(x)
    return jax.nn.gelu(x @ self.proj_in_df[...]) @ self.proj_out_fo[...]
