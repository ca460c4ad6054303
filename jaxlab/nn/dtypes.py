"""The dtype reductions run in: float32, or wider when the input is wider."""

import jax.numpy as jnp


def at_least_float32(dtype) -> jnp.dtype:
  """`float32` for bf16/fp16/fp32 (and integer) inputs; `float64` for float64.

  Softmaxes, norms and losses reduce in at least float32 whatever the compute
  dtype (bf16 training keeps float32 statistics). A float64 model (under
  `jax_enable_x64`, e.g. a test comparing two implementations of the same
  update without float32 rounding noise) stays float64 throughout.
  """
  return jnp.promote_types(dtype, jnp.float32)
