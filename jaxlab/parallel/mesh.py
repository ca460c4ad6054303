"""Device mesh, logical-axis rules and shardings from a config.

The one sharding recipe jaxlab uses (ANCHORS.md section 9):

    mesh = make_mesh(config.mesh)                   # ('data', 'fsdp', 'tensor')
    rules = rules_from_config(config.sharding_rules)
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
      graphdef, state = create_sharded(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))

Parameters carry logical axis names (`jaxlab.nn.partitioning`); the rules
table maps each name to a mesh axis (or None = replicated). Models are created
under `jax.jit` with `out_shardings` derived from those names, so weights are
born sharded and never materialise on one device first.
"""

from collections.abc import Callable, Mapping, Sequence
import math
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from flax import nnx

MESH_AXES = ("data", "fsdp", "tensor")
# The batch is split over both data-parallel axes; FSDP shards weights on
# 'embed' and gathers them per layer; tensor parallelism splits heads/mlp/vocab.
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("norm", None),
    ("lora_rank", None),
    ("layers", None),  # stacked layers of a scanned decoder
)


def maybe_initialize_distributed() -> None:
  """Joins a multi-process run when one was asked for; else does nothing.

  `jaxlab.main` sets up explicit multi-process runs from its flags
  (`jaxlab.parallel.distributed.initialize`). Here, for library use, only
  the opt-in auto-detection applies: with `JAXLAB_DISTRIBUTED=auto` in the
  environment, `jax.distributed.initialize()` detects a TPU pod slice /
  Slurm / Open MPI cluster. Must run before any other JAX computation.
  """
  from jaxlab.parallel import distributed  # pylint: disable=g-import-not-at-top
  if jax.distributed.is_initialized() or not distributed.auto_requested():
    return
  distributed.initialize(auto=True)


def mesh_shape(mesh_config: Mapping[str, int],
               num_devices: int | None = None) -> tuple[int, int, int]:
  """Resolves `{data, fsdp, tensor}` sizes; one -1 fills the rest.

  Raises:
    ValueError: naming the `mesh.*` field when sizes don't fit the devices.
  """
  n = jax.device_count() if num_devices is None else num_devices
  sizes = []
  for axis in MESH_AXES:
    v = mesh_config.get(axis, 1)
    if not isinstance(v, int) or (v < 1 and v != -1):
      raise ValueError(f"mesh.{axis} must be a positive int or -1, got {v!r}")
    sizes.append(v)
  if sizes.count(-1) > 1:
    raise ValueError(f"at most one of mesh.{{data,fsdp,tensor}} may be -1, "
                     f"got {dict(zip(MESH_AXES, sizes))}")
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if n % known:
      raise ValueError(f"mesh {dict(zip(MESH_AXES, sizes))}: {n} devices are "
                       f"not divisible by {known}")
    sizes[sizes.index(-1)] = n // known
  if math.prod(sizes) != n:
    raise ValueError(f"mesh {dict(zip(MESH_AXES, sizes))} needs "
                     f"{math.prod(sizes)} devices but {n} are available; set "
                     "one of mesh.data/mesh.fsdp/mesh.tensor to -1 to fill")
  return tuple(sizes)


def make_mesh(mesh_config: Mapping[str, int] | None = None,
              devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
  """A ('data', 'fsdp', 'tensor') mesh with Auto axis types.

  Over the devices of several TPU slices (multi-slice: devices with distinct
  `slice_index`), 'data' spans the slices (the DCN axis; `mesh.data` must be
  a multiple of the slice count) and 'fsdp'/'tensor' stay within a slice.
  """
  mesh_config = {"data": -1} if mesh_config is None else dict(mesh_config)
  shape = mesh_shape(mesh_config,
                     None if devices is None else len(devices))
  slices = num_slices(jax.devices() if devices is None else devices)
  if slices > 1:
    return _multislice_mesh(shape, list(jax.devices() if devices is None
                                        else devices), slices)
  kw = {} if devices is None else {"devices": devices}
  return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, **kw)


def batch_mesh(n_batch: int | None = None, *, tensor: int = 1,
               fsdp: int = 1,
               devices: Sequence[jax.Device] | None = None
               ) -> jax.sharding.Mesh:
  """A mesh for a sub-training whose batch has `n_batch` rows.

  The rule: the batch axes ('data' x 'fsdp') span the largest divisor of
  `n_batch` that is <= len(devices) // tensor, so every device of the batch
  axes holds whole rows; 'fsdp' keeps gcd(that divisor, `fsdp`) of them and
  'data' the rest; the mesh takes the first data * fsdp * tensor devices
  (default `jax.devices()`). `n_batch=None` uses every device. On one
  device this is the one-device mesh.
  """
  devices = list(jax.devices() if devices is None else devices)
  if tensor < 1 or fsdp < 1 or len(devices) % tensor:
    raise ValueError(f"batch_mesh: tensor={tensor} (and fsdp={fsdp}) must be "
                     f">= 1 and tensor must divide the {len(devices)} devices")
  room = len(devices) // tensor
  if n_batch is None:
    rows = room
  else:
    if int(n_batch) < 1:
      raise ValueError(f"batch_mesh: n_batch={n_batch} must be >= 1")
    rows = max(k for k in range(1, min(room, int(n_batch)) + 1)
               if int(n_batch) % k == 0)
  f = math.gcd(rows, int(fsdp))
  shape = {"data": rows // f, "fsdp": f, "tensor": int(tensor)}
  return make_mesh(shape, devices=devices[:rows * int(tensor)])


def mesh_from_config(config: Any, *, batch: int | None = None,
                     devices: Sequence[jax.Device] | None = None
                     ) -> jax.sharding.Mesh:
  """The mesh of `config.mesh` for a (sub-)training of `batch` rows.

  `config` is a whole config (its `mesh` section is read) or the mesh
  section itself. When the batch axes of that mesh (data x fsdp) divide
  `batch` (or `batch` is None) it is that mesh; otherwise
  `batch_mesh(batch, tensor=..., fsdp=...)` with the config's tensor and
  fsdp sizes: the largest divisor of `batch` that is <= the devices left by
  'tensor' (see `batch_mesh`). A config without a `mesh` section gets
  `{"data": -1}`.
  """
  section = config.get("mesh") if hasattr(config, "get") and (
      "mesh" in config) else config
  if section is None or not hasattr(section, "get") or not any(
      a in section for a in MESH_AXES):
    section = {"data": -1}
  section = {a: section.get(a, 1) for a in MESH_AXES}
  n = len(jax.devices() if devices is None else devices)
  d, f, t = mesh_shape(section, n)
  if batch is None or int(batch) % (d * f) == 0:
    return make_mesh({"data": d, "fsdp": f, "tensor": t}, devices=devices)
  return batch_mesh(int(batch), tensor=t, fsdp=f, devices=devices)


def num_slices(devices: Sequence[jax.Device]) -> int:
  """Distinct `slice_index` values of `devices` (1 without multi-slice)."""
  return len({getattr(d, "slice_index", 0) for d in devices})


def _multislice_mesh(shape, devices, slices: int) -> jax.sharding.Mesh:
  from jax.experimental import mesh_utils  # pylint: disable=g-import-not-at-top
  if shape[0] % slices:
    raise ValueError(f"mesh {dict(zip(MESH_AXES, shape))} over {slices} "
                     f"slices: mesh.data={shape[0]} must be a multiple of the "
                     "slice count (data parallelism spans the slices)")
  ici = (shape[0] // slices, shape[1], shape[2])
  grid = mesh_utils.create_hybrid_device_mesh(
      ici, (slices, 1, 1), devices, allow_split_physical_axes=True)
  return jax.sharding.Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * 3)


def rules_from_config(rules: Any = None) -> tuple[tuple[str, Any], ...]:
  """Normalises a rules table (sequence of pairs or a name->axes mapping).

  Values are a mesh axis name, a tuple of them, or None (replicated).
  """
  if rules is None:
    return DEFAULT_RULES
  items = rules.items() if hasattr(rules, "items") else rules
  out = []
  for item in items:
    if len(item) != 2:
      raise ValueError(f"sharding_rules entry {item!r} is not a (logical name, "
                       "mesh axes) pair")
    name, axes = item
    axes_t = tuple(axes) if isinstance(axes, (list, tuple)) else (axes,)
    for a in axes_t:
      if a is not None and a not in MESH_AXES:
        raise ValueError(f"sharding_rules[{name!r}] = {axes!r}: unknown mesh "
                         f"axis {a!r}; valid: {', '.join(MESH_AXES)} or None")
    out.append((name, tuple(axes) if isinstance(axes, (list, tuple)) else axes))
  return tuple(out)


def logical_to_spec(axes: Sequence[str | None],
                    rules: Sequence[tuple[str, Any]]) -> P:
  """PartitionSpec for logical axis names under `rules` (for activations)."""
  table = dict(rules)
  return P(*(None if a is None else table.get(a) for a in axes))


def batch_spec(rules: Sequence[tuple[str, Any]] = DEFAULT_RULES,
               leading: int = 0) -> P:
  """Spec of a batch array: axis `leading` is the batch axis."""
  return P(*([None] * leading), dict(rules).get("batch", ("data", "fsdp")))


def batch_sharding(mesh: jax.sharding.Mesh,
                   rules: Sequence[tuple[str, Any]] = DEFAULT_RULES,
                   leading: int = 0) -> NamedSharding:
  return NamedSharding(mesh, batch_spec(rules, leading))


def state_shardings(abstract_state: Any, mesh: jax.sharding.Mesh) -> Any:
  """NamedShardings for an (abstract) NNX state from its logical names.

  Must run inside `nnx.logical_axis_rules(rules)`.
  """
  return nnx.get_named_sharding(abstract_state, mesh)


def create_sharded(factory: Callable[[], Any],
                   mesh: jax.sharding.Mesh | None = None) -> tuple[Any, Any]:
  """Creates `factory()` under jit, born sharded. Returns (graphdef, state).

  Run inside `jax.set_mesh(mesh)` and `nnx.logical_axis_rules(rules)`.
  """
  mesh = mesh or jax.sharding.get_abstract_mesh()
  abstract = nnx.eval_shape(factory)
  graphdef, abs_state = nnx.split(abstract)
  shardings = nnx.get_named_sharding(abs_state, mesh)
  state = jax.jit(lambda: nnx.split(factory())[1], out_shardings=shardings)()
  return graphdef, state


def abstract_model(factory: Callable[[], Any], mesh: jax.sharding.Mesh):
  """(graphdef, abstract state with shardings), e.g. as a restore target."""
  graphdef, abs_state = nnx.split(nnx.eval_shape(factory))
  shardings = nnx.get_named_sharding(abs_state, mesh)
  abs_state = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      abs_state, shardings)
  return graphdef, abs_state


def shard_params(module_or_state: Any, mesh: jax.sharding.Mesh) -> Any:
  """Moves an existing (host-built) module or state onto the mesh per rules.

  For models built outside jit (e.g. an imported HF checkpoint). Returns the
  same kind of object it was given.
  """
  is_module = isinstance(module_or_state, nnx.Module)
  if is_module:
    graphdef, state = nnx.split(module_or_state)
  else:
    state = module_or_state
  shardings = nnx.get_named_sharding(state, mesh)
  state = jax.device_put(state, shardings)
  return nnx.merge(graphdef, state) if is_module else state


def process_batch_rows(sharding: jax.sharding.Sharding,
                       shape: Sequence[int], axis: int = 0) -> list[int]:
  """Indices along `axis` of a global array held by this process's devices.

  `jax.make_array_from_process_local_data(sharding, local)` takes `local` to
  be exactly these rows of the global array, in ascending order. Feeding
  each process these rows of the single-process batch makes a multi-process
  step see the same global batch as a single-process one.
  """
  rows = set()
  for index in sharding.addressable_devices_indices_map(tuple(shape)).values():
    start, stop, step = index[axis].indices(shape[axis])
    rows.update(range(start, stop, step))
  return sorted(rows)


def describe(mesh: jax.sharding.Mesh) -> str:
  return ", ".join(f"{k}={v}" for k, v in mesh.shape.items())
