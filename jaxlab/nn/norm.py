"""Normalisation layers."""

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.nn import dtypes
from jaxlab.nn import partitioning


class RMSNorm(nnx.Module):
  """Root-mean-square norm (Zhang & Sennrich, 2019), as in Llama/Qwen2.

  y = scale * x / sqrt(mean(x^2) + eps). The statistic is computed in float32
  and the normalised value cast back to the input dtype before the scale is
  applied, in the same order as transformers' `LlamaRMSNorm`.

  `plus_one=True` is Gemma's variant: y = (x / sqrt(mean(x^2) + eps)) *
  (1 + scale), the product taken in float32 and only then cast to the input
  dtype (transformers' `Gemma3RMSNorm`); `scale` then starts at 0 (the
  identity).
  """

  def __init__(self, dim: int, *, eps: float = 1e-6, param_dtype=jnp.float32,
               plus_one: bool = False):
    self.eps = eps
    self.plus_one = plus_one
    init = jnp.zeros if plus_one else jnp.ones
    self.scale = partitioning.param(init((dim,), param_dtype), ("norm",))

  def __call__(self, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    x32 = x.astype(dtypes.at_least_float32(dtype))
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    if self.plus_one:
      y32 = x32 * jax.lax.rsqrt(var + self.eps)
      return (y32 * (1.0 + self.scale[...].astype(y32.dtype))).astype(dtype)
    y = (x32 * jax.lax.rsqrt(var + self.eps)).astype(dtype)
    return self.scale[...].astype(dtype) * y


class LayerNorm(nnx.Module):
  """Layer norm with a scale and a bias (Ba et al., 2016), torch's
  `nn.LayerNorm` as Phi uses it.

  y = (x - mean(x)) / sqrt(var(x) + eps) * scale + bias over the last axis,
  the statistics (biased variance) and the affine map computed in float32
  (at least), the result cast back to the input dtype.
  """

  def __init__(self, dim: int, *, eps: float = 1e-5, param_dtype=jnp.float32):
    self.eps = eps
    self.scale = partitioning.param(jnp.ones((dim,), param_dtype), ("norm",))
    self.bias = partitioning.param(jnp.zeros((dim,), param_dtype), ("norm",))

  def __call__(self, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    x32 = x.astype(dtypes.at_least_float32(dtype))
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    centred = x32 - mean
    var = jnp.mean(jnp.square(centred), axis=-1, keepdims=True)
    y = centred * jax.lax.rsqrt(var + self.eps)
    y = (y * self.scale[...].astype(y.dtype)
         + self.bias[...].astype(y.dtype))
    return y.astype(dtype)
