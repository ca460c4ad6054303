"""Feed-forward blocks."""

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.nn import partitioning as pt


class SwiGLU(nnx.Module):
  """Gated MLP of Llama/Qwen2: down(silu(gate(x)) * up(x)) (Shazeer, 2020)."""

  def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs,
               param_dtype=jnp.float32, dtype=jnp.float32,
               init_std: float = 0.02):
    init = jax.nn.initializers.normal(init_std)
    self.dtype = dtype
    self.gate_df = pt.param(init(rngs.params(), (dim, hidden), param_dtype),
                            (pt.EMBED, pt.MLP))
    self.up_df = pt.param(init(rngs.params(), (dim, hidden), param_dtype),
                          (pt.EMBED, pt.MLP))
    self.down_fd = pt.param(init(rngs.params(), (hidden, dim), param_dtype),
                            (pt.MLP, pt.EMBED))

  def __call__(self, x_btd: jax.Array) -> jax.Array:
    x_btd = x_btd.astype(self.dtype)
    gate_btf = x_btd @ self.gate_df[...].astype(self.dtype)
    up_btf = x_btd @ self.up_df[...].astype(self.dtype)
    return (jax.nn.silu(gate_btf) * up_btf) @ self.down_fd[...].astype(
        self.dtype)
