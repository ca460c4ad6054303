"""Feed-forward blocks."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.nn import partitioning as pt

# Gate activations of the gated MLP: "silu" (SwiGLU: Llama, Qwen) and
# "gelu_tanh" (GeGLU with the tanh approximation of GELU: Gemma's
# `gelu_pytorch_tanh`, Phi's `gelu_new`); "gelu" is the exact (erf) GELU.
ACTIVATIONS = {"silu": jax.nn.silu,
               "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
               "gelu": functools.partial(jax.nn.gelu, approximate=False)}


def _setup(module: nnx.Module, activation: str, init_std: float, dtype):
  """Checks `activation`, sets the module's dtype and activation; returns
  the weight initialiser N(0, init_std)."""
  if activation not in ACTIVATIONS:
    raise ValueError(f"activation={activation!r} unknown; valid: "
                     f"{', '.join(ACTIVATIONS)}")
  module.dtype = dtype
  module.activation = activation
  return jax.nn.initializers.normal(init_std)


class SwiGLU(nnx.Module):
  """Gated MLP of Llama/Qwen2: down(silu(gate(x)) * up(x)) (Shazeer, 2020).

  `activation="gelu_tanh"` is GeGLU, down(gelu_tanh(gate(x)) * up(x))
  (Gemma); see `ACTIVATIONS`.
  """

  def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs,
               param_dtype=jnp.float32, dtype=jnp.float32,
               init_std: float = 0.02, activation: str = "silu"):
    init = _setup(self, activation, init_std, dtype)
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


class MLP(nnx.Module):
  """Non-gated MLP: down(act(x @ up + b_up)) + b_down (GPT-2 / Phi's
  `fc1` -> activation -> `fc2`; Phi: act = `gelu_new`, "gelu_tanh" here).

  Params: up_df `[D, F]`, down_fd `[F, D]` and, with `bias`, up_bias_f
  `[F]` and down_bias_d `[D]`.
  """

  def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs,
               param_dtype=jnp.float32, dtype=jnp.float32,
               init_std: float = 0.02, activation: str = "gelu_tanh",
               bias: bool = True):
    init = _setup(self, activation, init_std, dtype)
    self.up_df = pt.param(init(rngs.params(), (dim, hidden), param_dtype),
                          (pt.EMBED, pt.MLP))
    self.down_fd = pt.param(init(rngs.params(), (hidden, dim), param_dtype),
                            (pt.MLP, pt.EMBED))
    if bias:
      self.up_bias_f = pt.param(jnp.zeros((hidden,), param_dtype), (pt.MLP,))
      self.down_bias_d = pt.param(jnp.zeros((dim,), param_dtype), (pt.EMBED,))
    else:
      self.up_bias_f = self.down_bias_d = None

  def __call__(self, x_btd: jax.Array) -> jax.Array:
    dt = self.dtype
    h_btf = x_btd.astype(dt) @ self.up_df[...].astype(dt)
    if self.up_bias_f is not None:
      h_btf = h_btf + self.up_bias_f[...].astype(dt)
    out = ACTIVATIONS[self.activation](h_btf) @ self.down_fd[...].astype(dt)
    if self.down_bias_d is not None:
      out = out + self.down_bias_d[...].astype(dt)
    return out
