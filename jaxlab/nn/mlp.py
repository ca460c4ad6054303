"""Feed-forward blocks."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.nn import partitioning as pt

# Gate activations of the gated MLP: "silu" (SwiGLU: Llama, Qwen) and
# "gelu_tanh" (GeGLU with the tanh approximation of GELU: Gemma's
# `gelu_pytorch_tanh`).
ACTIVATIONS = {"silu": jax.nn.silu,
               "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True)}


class SwiGLU(nnx.Module):
  """Gated MLP of Llama/Qwen2: down(silu(gate(x)) * up(x)) (Shazeer, 2020).

  `activation="gelu_tanh"` is GeGLU, down(gelu_tanh(gate(x)) * up(x))
  (Gemma); see `ACTIVATIONS`.
  """

  def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs,
               param_dtype=jnp.float32, dtype=jnp.float32,
               init_std: float = 0.02, activation: str = "silu"):
    if activation not in ACTIVATIONS:
      raise ValueError(f"activation={activation!r} unknown; valid: "
                       f"{', '.join(ACTIVATIONS)}")
    init = jax.nn.initializers.normal(init_std)
    self.dtype = dtype
    self.activation = activation
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
    act = ACTIVATIONS[self.activation]
    return (act(gate_btf) * up_btf) @ self.down_fd[...].astype(self.dtype)
