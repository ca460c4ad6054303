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
  """

  def __init__(self, dim: int, *, eps: float = 1e-6, param_dtype=jnp.float32):
    self.eps = eps
    self.scale = partitioning.param(
        jnp.ones((dim,), param_dtype), ("norm",))

  def __call__(self, x: jax.Array) -> jax.Array:
    dtype = x.dtype
    x32 = x.astype(dtypes.at_least_float32(dtype))
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    y = (x32 * jax.lax.rsqrt(var + self.eps)).astype(dtype)
    return self.scale[...].astype(dtype) * y
