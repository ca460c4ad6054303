"""A ViT image classifier (DeiT-style) with per-layer widths, for pruning.

    cfg = ViTClassifierConfig(image_size=8, patch_size=2, channels=1)
    model = ViTClassifier(cfg, rngs=nnx.Rngs(0))
    logits_bc = model(images_bhwc)                    # [B, num_classes]
    logits_bc, taps = model(images_bhwc, taps=True)   # + activations

Patches are linearly embedded, a learned CLS token is prepended and a learned
position embedding added; pre-norm blocks (LayerNorm, multi-head attention
with biases, LayerNorm, GELU MLP with biases) follow, and the classifier head
reads the final-normed CLS token, as in DeiT/timm's `VisionTransformer`.

Widths can differ per layer (`qk_dims`, `v_dims`, `mlp_dims`): the query/key
dimension per head may differ from the value dimension per head, which is
what Vulcan's SVD head pruning produces (papers/O-S.md, O.5), so a pruned
model is a real, smaller module. The attention scale of layer l is
`qk_dims[l] ** -0.5`.

`taps=True` also returns the activations pruning criteria read:
`mlp_act` (per layer, the GELU output of fc1, `[B, N, m_l]`: Vulcan's
neuron score hook, O.2), `residual` (per layer, the block output) and
`features` (the normed CLS token fed to the head).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab import registry as jregistry
from jaxlab.nn import partitioning as pt
from jaxlab.models import registry
from jaxlab.models import vit as vit_lib


@dataclasses.dataclass(frozen=True)
class ViTClassifierConfig:
  """Architecture; the per-layer tuples are empty for a uniform (dense) ViT.

  Attributes:
    image_size, patch_size, channels: input images `[B, S, S, channels]`.
    dim: the residual width d.
    num_layers, num_heads: depth L and heads H (every layer has H heads).
    head_dim: the dense per-head dimension of Q, K and V.
    mlp_dim: the dense FFN width e.
    num_classes: classifier outputs C.
    qk_dims, v_dims, mlp_dims: per-layer overrides (length L each, or
      empty: `head_dim`/`mlp_dim` everywhere).
    rescale_input: images in [0, 1] are mapped to [-1, 1] (the
      miniature); False: inputs are already normalised (the `pixel_values`
      of an HF image processor, `jaxlab.data.vision_processor`), as a
      checkpoint loaded by `jaxlab.io.hf.vit` expects.
    distillation_token: DeiT's second learned token after CLS (Touvron et
      al., 2021): the position embedding covers patches + 2 tokens.
    distilled_head: DeiT's `...WithTeacher` head: logits are the mean of
      the CLS head and a second head on the distillation token.
  """
  image_size: int = 8
  patch_size: int = 2
  channels: int = 1
  dim: int = 64
  num_layers: int = 2
  num_heads: int = 4
  head_dim: int = 16
  mlp_dim: int = 128
  num_classes: int = 10
  qk_dims: tuple[int, ...] = ()
  v_dims: tuple[int, ...] = ()
  mlp_dims: tuple[int, ...] = ()
  init_std: float = 0.02
  norm_eps: float = 1e-6
  rescale_input: bool = True
  distillation_token: bool = False
  distilled_head: bool = False

  def __post_init__(self):
    if self.image_size % self.patch_size:
      raise ValueError(f"model.image_size={self.image_size} must be a "
                       f"multiple of model.patch_size={self.patch_size}")
    if self.distilled_head and not self.distillation_token:
      raise ValueError("model.distilled_head=True reads the distillation "
                       "token: set model.distillation_token=True")
    for name in ("qk_dims", "v_dims", "mlp_dims"):
      dims = tuple(int(x) for x in getattr(self, name))
      object.__setattr__(self, name, dims)
      if dims and len(dims) != self.num_layers:
        raise ValueError(f"model.{name} has {len(dims)} entries; need one "
                         f"per layer (num_layers={self.num_layers}) or none")
      if any(x < 1 for x in dims):
        raise ValueError(f"model.{name}={dims}: every width must be >= 1")

  @property
  def num_patches(self) -> int:
    return (self.image_size // self.patch_size) ** 2

  @property
  def num_prefix_tokens(self) -> int:
    """CLS (and DeiT's distillation token)."""
    return 1 + int(self.distillation_token)

  @property
  def num_tokens(self) -> int:
    """Patches plus the CLS (and distillation) token."""
    return self.num_patches + self.num_prefix_tokens

  def qk_dim(self, layer: int) -> int:
    return self.qk_dims[layer] if self.qk_dims else self.head_dim

  def v_dim(self, layer: int) -> int:
    return self.v_dims[layer] if self.v_dims else self.head_dim

  def mlp_width(self, layer: int) -> int:
    return self.mlp_dims[layer] if self.mlp_dims else self.mlp_dim

  def with_widths(self, *, qk_dims, v_dims, mlp_dims) -> ViTClassifierConfig:
    return dataclasses.replace(self, qk_dims=tuple(qk_dims),
                               v_dims=tuple(v_dims), mlp_dims=tuple(mlp_dims))

  def layer_params(self, layer: int) -> int:
    """Parameters of block `layer`: 2 LayerNorms, attention, MLP."""
    d, h = self.dim, self.num_heads
    qk, v, m = self.qk_dim(layer), self.v_dim(layer), self.mlp_width(layer)
    norms = 2 * 2 * d
    attn = 2 * h * qk * (d + 1) + h * v * (d + 1) + h * v * d + d
    mlp = d * m + m + m * d + d
    return norms + attn + mlp

  def num_params(self) -> int:
    """All parameters (equals the count of the built module's arrays)."""
    d = self.dim
    patch_dim = self.patch_size ** 2 * self.channels
    # patch kernel + bias, CLS / distillation tokens, positions
    embed = patch_dim * d + d + self.num_prefix_tokens * d + (
        self.num_tokens * d)
    heads = 1 + int(self.distilled_head)
    head = 2 * d + heads * (d * self.num_classes + self.num_classes)
    return embed + sum(self.layer_params(l) for l in range(self.num_layers)
                       ) + head

  def flops(self) -> float:
    """Forward multiply-accumulates of one image (Vulcan's `get_gflops`).

    papers/O-S.md O.5: (N-1) p^2 c d (patch embedding) + (2 L N + C + 1) d
    (norms, head) + sum_l [(2 N d + N^2)(qk_l + v_l) H + 2 N d m_l], with N
    the tokens including CLS (N-1 is the patch count; DeiT's distillation
    token is one more token).
    """
    n, d, h = self.num_tokens, self.dim, self.num_heads
    patch_dim = self.patch_size ** 2 * self.channels
    total = self.num_patches * patch_dim * d + (
        2 * self.num_layers * n + self.num_classes + 1) * d
    for l in range(self.num_layers):
      total += (2 * n * d + n * n) * (self.qk_dim(l) + self.v_dim(l)) * h
      total += 2 * n * d * self.mlp_width(l)
    return float(total)


def config_from_dict(model_cfg: Mapping[str, Any]) -> ViTClassifierConfig:
  """`config.model` fields (minus `name`) -> ViTClassifierConfig."""
  return jregistry.dataclass_from_config(ViTClassifierConfig, model_cfg)


class LayerNorm(nnx.Module):
  """y = (x - mean) / sqrt(var + eps) * scale + bias (Ba et al., 2016)."""

  def __init__(self, dim: int, *, eps: float):
    self.eps = eps
    self.scale = pt.param(jnp.ones((dim,)), (pt.NORM,))
    self.bias = pt.param(jnp.zeros((dim,)), (pt.NORM,))

  def __call__(self, x: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + self.eps) * self.scale[...] + (
        self.bias[...])


class Attention(nnx.Module):
  """Multi-head attention with biases; Q/K dim `qk` and V dim `v` per head.

  Weights are `[d, H, k]` (`wq_dhk`, `wk_dhk`), `[d, H, v]` (`wv_dhv`) and
  `[H, v, d]` (`wo_hvd`), so head h's W_Q,h of the spec (head_dim x d) is
  `wq_dhk[:, h, :].T`.
  """

  def __init__(self, dim: int, heads: int, qk: int, v: int, *,
               init_std: float, rngs: nnx.Rngs):
    init = jax.nn.initializers.normal(init_std)
    self.qk, self.v = qk, v
    ax3 = (pt.EMBED, pt.HEADS, pt.HEAD_DIM)
    self.wq_dhk = pt.param(init(rngs.params(), (dim, heads, qk)), ax3)
    self.bq_hk = pt.param(jnp.zeros((heads, qk)), (pt.HEADS, pt.HEAD_DIM))
    self.wk_dhk = pt.param(init(rngs.params(), (dim, heads, qk)), ax3)
    self.bk_hk = pt.param(jnp.zeros((heads, qk)), (pt.HEADS, pt.HEAD_DIM))
    self.wv_dhv = pt.param(init(rngs.params(), (dim, heads, v)), ax3)
    self.bv_hv = pt.param(jnp.zeros((heads, v)), (pt.HEADS, pt.HEAD_DIM))
    self.wo_hvd = pt.param(init(rngs.params(), (heads, v, dim)),
                           (pt.HEADS, pt.HEAD_DIM, pt.EMBED))
    self.bo_d = pt.param(jnp.zeros((dim,)), (pt.EMBED,))

  def __call__(self, x_bnd: jax.Array) -> jax.Array:
    q = jnp.einsum("bnd,dhk->bnhk", x_bnd, self.wq_dhk[...]) + self.bq_hk[...]
    k = jnp.einsum("bnd,dhk->bnhk", x_bnd, self.wk_dhk[...]) + self.bk_hk[...]
    v = jnp.einsum("bnd,dhv->bnhv", x_bnd, self.wv_dhv[...]) + self.bv_hv[...]
    scores = jnp.einsum("bnhk,bmhk->bhnm", q, k) / math.sqrt(self.qk)
    probs = jax.nn.softmax(scores, axis=-1)
    o = jnp.einsum("bhnm,bmhv->bnhv", probs, v)
    return jnp.einsum("bnhv,hvd->bnd", o, self.wo_hvd[...]) + self.bo_d[...]


class MLP(nnx.Module):
  """fc1 -> GELU -> fc2, with biases; returns (output, GELU activation)."""

  def __init__(self, dim: int, width: int, *, init_std: float,
               rngs: nnx.Rngs):
    init = jax.nn.initializers.normal(init_std)
    self.w1_dm = pt.param(init(rngs.params(), (dim, width)),
                          (pt.EMBED, pt.MLP))
    self.b1_m = pt.param(jnp.zeros((width,)), (pt.MLP,))
    self.w2_md = pt.param(init(rngs.params(), (width, dim)),
                          (pt.MLP, pt.EMBED))
    self.b2_d = pt.param(jnp.zeros((dim,)), (pt.EMBED,))

  def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    act = jax.nn.gelu(x @ self.w1_dm[...] + self.b1_m[...], approximate=False)
    return act @ self.w2_md[...] + self.b2_d[...], act


class Block(nnx.Module):

  def __init__(self, cfg: ViTClassifierConfig, layer: int, *,
               rngs: nnx.Rngs):
    self.ln1 = LayerNorm(cfg.dim, eps=cfg.norm_eps)
    self.attn = Attention(cfg.dim, cfg.num_heads, cfg.qk_dim(layer),
                          cfg.v_dim(layer), init_std=cfg.init_std, rngs=rngs)
    self.ln2 = LayerNorm(cfg.dim, eps=cfg.norm_eps)
    self.mlp = MLP(cfg.dim, cfg.mlp_width(layer), init_std=cfg.init_std,
                   rngs=rngs)

  def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = x + self.attn(self.ln1(x))
    out, act = self.mlp(self.ln2(x))
    return x + out, act


class ViTClassifier(nnx.Module):
  """Images `[B, S, S, C]` in [0, 1] -> logits `[B, num_classes]`.

  `model(pixel_values=x)` takes `[B, C, S, S]` instead (transformers'
  layout); with `rescale_input=False` (a loaded HF checkpoint) the values
  are used as the image processor normalised them.
  """

  def __init__(self, cfg: ViTClassifierConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    init = jax.nn.initializers.normal(cfg.init_std)
    patch_dim = cfg.patch_size ** 2 * cfg.channels
    self.patch_embed_kd = pt.param(init(rngs.params(), (patch_dim, cfg.dim)),
                                   (None, pt.EMBED))
    self.patch_bias_d = pt.param(jnp.zeros((cfg.dim,)), (pt.EMBED,))
    self.cls_d = pt.param(init(rngs.params(), (cfg.dim,)), (pt.EMBED,))
    if cfg.distillation_token:
      self.dist_d = pt.param(init(rngs.params(), (cfg.dim,)), (pt.EMBED,))
    self.pos_embed_nd = pt.param(init(rngs.params(), (cfg.num_tokens,
                                                      cfg.dim)),
                                 (None, pt.EMBED))
    self.blocks = nnx.List([Block(cfg, l, rngs=rngs)
                            for l in range(cfg.num_layers)])
    self.final_norm = LayerNorm(cfg.dim, eps=cfg.norm_eps)
    self.head_dc = pt.param(init(rngs.params(), (cfg.dim, cfg.num_classes)),
                            (pt.EMBED, None))
    self.head_bias_c = pt.param(jnp.zeros((cfg.num_classes,)), (None,))
    if cfg.distilled_head:
      self.dist_head_dc = pt.param(
          init(rngs.params(), (cfg.dim, cfg.num_classes)), (pt.EMBED, None))
      self.dist_head_bias_c = pt.param(jnp.zeros((cfg.num_classes,)),
                                       (None,))

  def __call__(self, images_bhwc: jax.Array | None = None, *,
               pixel_values: jax.Array | None = None, taps: bool = False):
    cfg = self.cfg
    if (images_bhwc is None) == (pixel_values is None):
      raise ValueError("give images `[B, S, S, C]` or pixel_values "
                       "`[B, C, S, S]`, exactly one")
    if pixel_values is not None:
      if pixel_values.ndim != 4:
        raise ValueError(f"pixel_values must be [B, {cfg.channels}, "
                         f"{cfg.image_size}, {cfg.image_size}], got "
                         f"{pixel_values.shape}")
      images_bhwc = jnp.transpose(pixel_values, (0, 2, 3, 1))
    if images_bhwc.shape[1:] != (cfg.image_size, cfg.image_size,
                                 cfg.channels):
      raise ValueError(f"images must be [B, {cfg.image_size}, "
                       f"{cfg.image_size}, {cfg.channels}], got "
                       f"{images_bhwc.shape}")
    x = images_bhwc.astype(jnp.float32)
    if cfg.rescale_input:
      x = x * 2.0 - 1.0
    x = vit_lib.patchify(x, cfg.patch_size)
    x = x @ self.patch_embed_kd[...] + self.patch_bias_d[...]
    prefix = [self.cls_d[...]] + ([self.dist_d[...]]
                                  if cfg.distillation_token else [])
    prefix = jnp.broadcast_to(jnp.stack(prefix),
                              (x.shape[0], len(prefix), cfg.dim))
    x = jnp.concatenate([prefix, x], axis=1) + self.pos_embed_nd[...][None]
    acts, residual = [], []
    for block in self.blocks:
      x, act = block(x)
      acts.append(act)
      residual.append(x)
    normed = self.final_norm(x[:, :cfg.num_prefix_tokens])
    features = normed[:, 0]
    logits = features @ self.head_dc[...] + self.head_bias_c[...]
    if cfg.distilled_head:  # DeiT with teacher: mean of the two heads
      dist = (normed[:, 1] @ self.dist_head_dc[...]
              + self.dist_head_bias_c[...])
      logits = (logits + dist) / 2
    if taps:
      return logits, {"mlp_act": tuple(acts), "residual": tuple(residual),
                      "features": features}
    return logits


def count_params(model: nnx.Module) -> int:
  """Number of scalars in the module's `nnx.Param`s."""
  return int(sum(x.size for x in jax.tree.leaves(nnx.state(model,
                                                           nnx.Param))))


# -- model.name="vit_classifier" (the registry finds it by package walk) ------


@registry.register("vit_classifier")
def _build_vit_classifier(model_cfg, *, vocab_size: int | None = None,
                          seed: int = 0) -> registry.ModelSpec:
  """`jaxlab.models.vit_classifier` (images -> logits; no vocabulary)."""
  del vocab_size
  cfg = config_from_dict(model_cfg)
  return registry.ModelSpec(
      factory=lambda: ViTClassifier(cfg, rngs=nnx.Rngs(seed)),
      config=cfg)
