"""Rotary position embeddings (Su et al., 2021) with a registry of scalings.

`inv_freq(method, ...)` returns the per-pair inverse frequencies theta_i
(shape `[head_dim // 2]`) and an attention scale; `apply_rope` rotates q/k with
them. Context-extension methods (PI, NTK, YaRN, Llama-3, MrRoPE, ...) register
a function under a name, so a config picks one by string:

    inv, scale = rope.inv_freq("default", head_dim=64, base=10000.0)

The rotation follows the half-split ("rotate_half") layout of Llama/Qwen2
checkpoints: pair i couples dims i and i + head_dim/2.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# name -> fn(*, head_dim, base, factor, original_max_position, beta_fast,
#            beta_slow, **options) -> (inv_freq [head_dim//2] float64, scale)
ScalingFn = Callable[..., tuple[np.ndarray, float]]
_SCALINGS: dict[str, ScalingFn] = {}


def register(name: str) -> Callable[[ScalingFn], ScalingFn]:
  """Registers a RoPE scaling function under `name`."""

  def wrap(fn: ScalingFn) -> ScalingFn:
    if name in _SCALINGS:
      raise ValueError(f"RoPE scaling {name!r} is already registered")
    _SCALINGS[name] = fn
    return fn

  return wrap


def available() -> tuple[str, ...]:
  return tuple(sorted(_SCALINGS))


def default_inv_freq(head_dim: int, base: float) -> np.ndarray:
  """theta_i = base^(-2i/d), i = 0..d/2-1 (RoFormer eq. 15)."""
  if head_dim % 2:
    raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
  exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
  return 1.0 / (base ** exponents)


@register("default")
def _default(*, head_dim, base, **unused) -> tuple[np.ndarray, float]:
  del unused
  return default_inv_freq(head_dim, base), 1.0


def inv_freq(method: str, *, head_dim: int, base: float, factor: float = 1.0,
             original_max_position: int | None = None,
             beta_fast: float = 32.0, beta_slow: float = 1.0,
             **options: Any) -> tuple[np.ndarray, float]:
  """Inverse frequencies `[head_dim // 2]` and attention scale of a method.

  Args:
    method: a registered scaling name (see `available()`).
    head_dim: rotary dimension d.
    base: RoPE base b (`rope_theta`).
    factor: context-extension factor S >= 1.
    original_max_position: pre-training context length L.
    beta_fast, beta_slow: YaRN/MrRoPE boundaries in rotations.
    **options: method-specific options.

  Returns:
    (inv_freq float32 numpy array, attention_scale float). The attention scale
    multiplies cos and sin (as transformers does), so q.k logits scale by its
    square.
  """
  if method not in _SCALINGS:
    raise ValueError(
        f"unknown RoPE scaling method {method!r}; valid choices: "
        f"{', '.join(available())}")
  if factor < 1.0:
    raise ValueError(
        f"RoPE scaling factor must be >= 1 (got {factor}); valid choices of "
        f"method: {', '.join(available())}")
  inv, scale = _SCALINGS[method](
      head_dim=head_dim, base=base, factor=factor,
      original_max_position=original_max_position, beta_fast=beta_fast,
      beta_slow=beta_slow, **options)
  inv = np.asarray(inv, dtype=np.float64)
  if inv.shape != (head_dim // 2,):
    raise ValueError(f"{method}: inv_freq has shape {inv.shape}, expected "
                     f"({head_dim // 2},)")
  return inv.astype(np.float32), float(scale)


def rotate_half(x: jax.Array) -> jax.Array:
  x1, x2 = jnp.split(x, 2, axis=-1)
  return jnp.concatenate([-x2, x1], axis=-1)


def cos_sin(positions_bt: jax.Array, inv_freq_h: jax.Array,
            attention_scale: float = 1.0,
            pair_weights_h: jax.Array | None = None
            ) -> tuple[jax.Array, jax.Array]:
  """cos/sin tables `[B, T, head_dim]` in float32 for integer positions.

  `pair_weights_h` (optional, `[head_dim // 2]`) scales each rotary pair's
  rotation angle; it is the hook for attenuating selected frequencies.
  """
  inv = jnp.asarray(inv_freq_h, jnp.float32)
  if pair_weights_h is not None:
    inv = inv * jnp.asarray(pair_weights_h, jnp.float32)
  angles_bth = positions_bt.astype(jnp.float32)[..., None] * inv
  angles_btd = jnp.concatenate([angles_bth, angles_bth], axis=-1)
  return (jnp.cos(angles_btd) * attention_scale,
          jnp.sin(angles_btd) * attention_scale)


def apply_rope(x_btnh: jax.Array, cos_btd: jax.Array,
               sin_btd: jax.Array) -> jax.Array:
  """Rotates `x [B, T, N, H]` by precomputed cos/sin `[B, T, H]`."""
  dtype = x_btnh.dtype
  x = x_btnh.astype(jnp.float32)
  cos = cos_btd[:, :, None, :]
  sin = sin_btd[:, :, None, :]
  return (x * cos + rotate_half(x) * sin).astype(dtype)
