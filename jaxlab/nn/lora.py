"""LoRA: low-rank adapters on named weights, for fine-tuning (Hu et al. 2021).

W_eff = W + (alpha / r) * A @ B with A `[in..., r]`, B `[r, out...]`, B = 0 at
init so training starts from the pretrained function. Because jaxlab models
read raw parameters (`q_dnh`, `gate_df`, ...) rather than Linear layers, LoRA
is applied as a reparameterisation: `add_lora` attaches `<name>_lora_a/_b`
variables (type `LoRA`) next to each targeted `nnx.Param`; `merge_lora`
writes W + delta into the params of a (traced) copy before the forward pass.
The trainer differentiates and optimises only `LoRA` variables.

It lives in `nn`, under the trainer and checkpoint I/O, so that both fold
the adapters with this one `merge_lora`: the trainer in its loss
(`jaxlab.train.lora` gives it these names) and `jaxlab.io.hf.save` on
export.

A weight's input dims: the first dim when it is `embed` (q/k/v, gate/up:
`[D, ...]`) or the weight is 2-D; otherwise all but the last (`o_nhd`:
in = (N, H), out = D), matching HF's Linear-layer LoRA.

Scanned decoders (`DecoderConfig.scan_layers`): a weight whose first logical
axis is "layers" holds L' layers stacked `[L', ...]`; its factors are
stacked too (A `[L', in..., r]`, B `[L', r, out...]`, one adapter per
layer) and `merge_lora` adds each layer's own A @ B. `decoder.stack_layers`
/ `unstack_layers` carry the factors between the layouts exactly (so
`stack_layers(model)` with adapters computes what `model` computes);
`add_lora` on a scanned model draws A from the same distribution as on
the unrolled one but with different random numbers.
"""

from collections.abc import Sequence
import re

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.nn import partitioning as pt

_SUFFIX_A, _SUFFIX_B = "_lora_a", "_lora_b"


class LoRA(nnx.Variable):
  """A trainable low-rank factor (the only thing optimised under LoRA)."""


def _axes(param: nnx.Variable, ndim: int) -> tuple:
  axes = param.get_metadata().get("out_sharding")
  return tuple(axes) if axes else (None,) * ndim


def _targets(model: nnx.Module, patterns: Sequence[str]):
  """(module, attribute name, Param) for params whose name fully matches."""
  regexes = [re.compile(p) for p in patterns]
  for _, module in nnx.iter_modules(model):
    for name, value in list(vars(module).items()):
      if (isinstance(value, nnx.Param) and not name.endswith(
          (_SUFFIX_A, _SUFFIX_B)) and any(r.fullmatch(name) for r in regexes)):
        yield module, name, value


def add_lora(model: nnx.Module, *, rank: int, alpha: float,
             targets: Sequence[str], rngs: nnx.Rngs) -> list[str]:
  """Attaches LoRA factors to params named by `targets` (regexes).

  Returns the names that got adapters; raises ValueError if none matched.
  """
  if rank <= 0:
    raise ValueError(f"lora.rank must be positive, got {rank}")
  added = []
  for module, name, param in list(_targets(model, targets)):
    w = param[...]
    axes = _axes(param, w.ndim)
    # A stacked (scanned) weight: one adapter per layer, stacked alike.
    lead = 1 if axes[0] == pt.LAYERS else 0
    lead_shape, lead_axes = w.shape[:lead], axes[:lead]
    shape, axes = w.shape[lead:], axes[lead:]
    n_in = 1 if (len(shape) == 2 or axes[0] == "embed") else len(shape) - 1
    in_shape, out_shape = shape[:n_in], shape[n_in:]
    fan_in = 1
    for s in in_shape:
      fan_in *= s
    a = jax.random.normal(rngs.params(), (*lead_shape, *in_shape, rank),
                          w.dtype) / (fan_in ** 0.5)
    b = jnp.zeros((*lead_shape, rank, *out_shape), w.dtype)
    setattr(module, name + _SUFFIX_A, LoRA(
        a, out_sharding=(*lead_axes, *axes[:n_in], "lora_rank"),
        eager_sharding=False, lora_scale=alpha / rank))
    setattr(module, name + _SUFFIX_B, LoRA(
        b, out_sharding=(*lead_axes, "lora_rank", *axes[n_in:]),
        eager_sharding=False))
    added.append(name)
  if not added:
    raise ValueError(f"lora.targets={list(targets)} matched no parameter")
  return added


def merge_lora(model: nnx.Module) -> nnx.Module:
  """Writes W + (alpha/r) A @ B into each adapted param, in place.

  Call on a copy (inside the loss, the model is a fresh `nnx.merge`);
  gradients flow to A and B.
  """
  for _, module in nnx.iter_modules(model):
    for name, value in list(vars(module).items()):
      if isinstance(value, LoRA) and name.endswith(_SUFFIX_A):
        base = name[:-len(_SUFFIX_A)]
        a = value[...]
        b = getattr(module, base + _SUFFIX_B)[...]
        scale = value.get_metadata()["lora_scale"]
        if _axes(value, a.ndim)[0] == pt.LAYERS:  # stacked: per layer
          delta = jax.vmap(lambda a, b: jnp.tensordot(a, b, axes=1))(a, b)
        else:
          delta = jnp.tensordot(a, b, axes=1)
        delta = delta * scale
        w = getattr(module, base)
        w[...] = w[...] + delta.astype(w.dtype)
  return model


def has_lora(model: nnx.Module) -> bool:
  return any(isinstance(v, LoRA) for _, v in nnx.iter_graph(model))
