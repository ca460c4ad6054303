"""The one conversion loop between a jaxlab module and HF-named tensors.

Every family (`jaxlab.io.hf.decoder`, `jaxlab.io.hf.qwen2_vl`, ...) is a
name table over this loop:

    table[param_path] = (hf_name, hf_shape, hf_to_ours, ours_to_hf)

maps each unrolled jaxlab param path (as `nnx.to_flat_state` spells it,
e.g. `("layers", 0, "attn", "q_dnh")`) to its HF tensor, that tensor's
shape in transformers' layout, and the two layout conversions (transpose,
head reshape, ...). A scanned model's stacked param (`("scan_blocks", j,
...)`, `[L', ...]`) is the HF tensors of its layers stacked: the family's
`layer_paths(param_path)` names them (unrolled paths, in stacking order;
None for an ordinary param).

`fill` reads a module: the module is built abstractly (`nnx.eval_shape`),
each param's HF tensor(s) are read through `get_tensor(name, shape)`
(lazily, one at a time), shape-checked, converted, stacked for scanned
layers, cast to the param's dtype and placed with its `NamedSharding`
(`fit_sharding`), then merged into the module. `to_tensors` is its
inverse for `save`, with LoRA adapters folded in by `jaxlab.nn.lora`.
"""

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn import lora

# (HF name, HF shape, hf_to_ours, ours_to_hf) of one param.
Row = tuple[str, tuple[int, ...], Callable[[Any], Any], Callable[[Any], Any]]
Table = Mapping[tuple[Any, ...], Row]
LayerPaths = Callable[[tuple[Any, ...]], list[tuple[Any, ...]] | None]


def no_layers(param_path: tuple[Any, ...]) -> None:
  """`layer_paths` of a family without scanned params."""
  del param_path


def fit_sharding(sharding: jax.sharding.NamedSharding,
                 shape: tuple[int, ...]) -> jax.sharding.NamedSharding:
  """Replicates the dims a sharding does not divide evenly.

  Real checkpoints often have fewer KV heads than the tensor axis has
  devices (or an odd vocabulary); those dims stay replicated rather than
  failing.
  """
  spec = list(sharding.spec) + [None] * (len(shape) - len(sharding.spec))
  for i, axes in enumerate(spec):
    if axes is None:
      continue
    names = axes if isinstance(axes, tuple) else (axes,)
    ways = int(np.prod([sharding.mesh.shape[a] for a in names]))
    if shape[i] % ways:
      spec[i] = None
  return jax.sharding.NamedSharding(sharding.mesh,
                                    jax.sharding.PartitionSpec(*spec))


def fill(make: Callable[[], nnx.Module], table: Table,
         get_tensor: Callable[[str, tuple[int, ...]], Any], *,
         layer_paths: LayerPaths = no_layers,
         mesh: jax.sharding.Mesh | None = None, rules: Any = None
         ) -> nnx.Module:
  """The module `make()` builds, its every variable read from HF tensors.

  Args:
    make: builds the module (called under `nnx.eval_shape`: nothing is
      initialised).
    table: param path -> `Row` (module docstring) for every unrolled param.
    get_tensor: `get_tensor(name, shape) -> array`: the HF tensor `name` in
      transformers' layout, expected of shape `shape`; it should raise a
      ValueError naming its source when the tensor is missing or has
      another shape (a returned array of the wrong shape raises one here).
      Called once per tensor (per layer of a scanned param).
    layer_paths: the unrolled paths stacked in a scanned param (or None).
    mesh, rules: optional mesh and logical-axis rules; every variable is
      placed with its `NamedSharding` as it is converted (a dim the mesh
      axes do not divide stays replicated; a variable without logical axes
      is replicated).

  Returns:
    The filled module (each variable in its abstract dtype).
  """
  graphdef, abs_state = nnx.split(nnx.eval_shape(make))
  shardings = None
  if mesh is not None:
    with nnx.logical_axis_rules(rules or ()):
      shardings = dict(nnx.to_flat_state(
          nnx.get_named_sharding(abs_state, mesh)))

  def read(param_path, dtype):
    """One unrolled param, converted from its HF tensor (host numpy)."""
    if param_path not in table:
      raise ValueError(f"internal: no HF tensor mapped to {param_path}")
    name, hf_shape, to_ours, _ = table[param_path]
    raw = np.asarray(get_tensor(name, hf_shape))
    if tuple(raw.shape) != tuple(hf_shape):
      raise ValueError(f"tensor {name!r} has shape {tuple(raw.shape)}, "
                       f"expected {tuple(hf_shape)}")
    return np.asarray(to_ours(raw)).astype(dtype)

  flat = []
  for param_path, var in nnx.to_flat_state(abs_state):
    param_path = tuple(param_path)
    expected = var.get_value()
    dtype = np.dtype(expected.dtype)
    stacked = layer_paths(param_path)
    if stacked is None:
      arr = read(param_path, dtype)
    else:  # scanned: the layers' tensors stacked on the host
      arr = np.stack([read(p, dtype) for p in stacked])
    if arr.shape != expected.shape:
      raise ValueError(f"internal: {param_path} converts to shape "
                       f"{arr.shape}, the module has {expected.shape}")
    if shardings is not None:
      value = jax.device_put(arr, fit_sharding(
          shardings[param_path].get_value(), arr.shape))
    else:
      value = jnp.asarray(arr)
    flat.append((param_path, var.replace(value)))
  return nnx.merge(graphdef, nnx.from_flat_state(flat))


def to_tensors(model: nnx.Module, table: Table, *,
               layer_paths: LayerPaths = no_layers) -> dict[str, np.ndarray]:
  """HF name -> host array in transformers' layout of every `nnx.Param` of
  `model` (the inverse of `fill`; a scanned param split into its layers).

  A weight with LoRA factors (`jaxlab.nn.lora.add_lora`) is written as the
  weight the trainer computes with, W + (alpha / r) A @ B
  (`jaxlab.nn.lora.merge_lora` on a copy). Each tensor keeps its param's
  dtype and is checked against the table's HF shape.
  """
  if lora.has_lora(model):
    model = lora.merge_lora(nnx.clone(model))
  tensors = {}
  for param_path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    param_path = tuple(param_path)
    value = np.asarray(var.get_value())
    stacked = layer_paths(param_path)
    # A scanned param holds the layers `stacked` along its first axis.
    pieces = ([(param_path, value)] if stacked is None
              else list(zip(stacked, value)))
    for piece_path, piece in pieces:
      if piece_path not in table:
        raise ValueError(f"parameter {param_path} has no HF equivalent")
      name, hf_shape, _, to_hf = table[piece_path]
      arr = np.ascontiguousarray(to_hf(piece))
      if arr.shape != tuple(hf_shape):
        raise ValueError(f"parameter {param_path} gives {name!r} of shape "
                         f"{arr.shape}, expected {hf_shape}")
      tensors[name] = arr
  return tensors
