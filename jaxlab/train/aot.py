r"""Ahead-of-time compilation for TPU topologies, from a CPU-only machine.

    from jaxlab.train import aot
    aot.configure_host_env()                       # before JAX touches libtpu
    report = aot.compile_config(config, "v5e:2x2")  # or num_slices=2
    print(aot.format_report(report))

libtpu (the `tpu` extra: `pip install 'jax[tpu]==<jax version>'`) can build
compile-only TPU devices for any topology name (`v5e:2x2`, `v5p:2x2x4`,
`v4:2x2x1`, `v6e:4x4`, ...) on a machine without TPUs. The train step of
`config` is then built exactly as `trainer.train` builds it (the mesh from
`config.mesh` over those devices, the born-sharded state from
`trainer.build(..., abstract_only=True)`, `trainer.make_train_step` with
`parallel.batch_sharding`) and lowered with abstract arguments; nothing is
allocated. The batch is the LM pipeline's, or for a prefix LM (the
Qwen2.5-VL of a `vision=` paper preset) its loss's images / clips + text
(`train_example`). The report holds, per chip:

* `memory`: argument / output / alias / temp / total bytes of
  `compiled.memory_analysis()` against the chip's HBM;
* `flops`: the analytic model FLOPs of one step (`ModelSpec.flops_per_token`,
  6 N + attention for the decoder). XLA's `cost_analysis()` counts the body
  of a loop (scanned layers, gradient accumulation, chunked loss) once and a
  Pallas kernel as 0, so it is not a work count and is not used;
* `collectives`: kind, count and bytes of every collective in the optimised
  HLO (`parse_collectives`), a loop body's counted once per iteration;
* `custom_calls`: custom-call targets (Pallas/Mosaic kernels show up as
  `tpu_custom_call`);
* `roofline`: max(FLOPs / peak, HBM bytes / bandwidth, collective bytes /
  ICI bandwidth) from `CHIPS`: a lower bound on the step time, not a
  prediction.

A program that does not fit the chip raises `HbmOomError`, one message with
the numbers and the knobs to turn. `compile_sampler` does the same for the
sampler's prefill and decode programs (`jaxlab.decoding.sampler`).

Where this lives: `jaxlab.train` because it compiles the trainer's step
(`trainer.build` / `make_train_step`); `jaxlab.parallel` sits below the
trainer and must not import it.
"""

from collections.abc import Callable, Mapping, Sequence
import dataclasses
import math
import os
import re
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxlab import parallel


# --------------------------------------------------------------------------
# Chips.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChipSpec:
  """Per-chip peak numbers (public spec sheets; see CHIPS)."""
  name: str
  peak_bf16_flops: float    # FLOP/s, dense bf16 matmul peak
  hbm_bytes: float          # nominal HBM capacity
  hbm_bandwidth: float      # bytes/s
  ici_bandwidth: float      # bytes/s, bidirectional, all links of one chip


_GB, _GIB = 1e9, float(1 << 30)

# Sources (Google Cloud TPU system architecture pages):
#   v4:  https://cloud.google.com/tpu/docs/v4 -- 275 TFLOP/s bf16, HBM2
#        32 GiB at 1200 GB/s. That page gives no per-chip ICI number; derived:
#        6 ICI links (3D torus) x 400 Gb/s per direction (Jouppi et al., "TPU
#        v4: An Optically Reconfigurable Supercomputer...", ISCA 2023) =
#        300 GB/s per direction, 600 GB/s bidirectional.
#   v5e: https://cloud.google.com/tpu/docs/v5e -- 197 TFLOP/s bf16, 16 GB HBM
#        at 819 GB/s, bidirectional ICI 400 GB/s per chip.
#   v5p: https://cloud.google.com/tpu/docs/v5p -- 459 TFLOP/s bf16, 95 GiB
#        HBM2e at 2765 GB/s, bidirectional ICI 1200 GB/s per chip.
#   v6e: https://cloud.google.com/tpu/docs/v6e -- 918 TFLOP/s bf16, 32 GB HBM
#        at 1640 GB/s, bidirectional ICI 800 GB/s per chip.
# The compiler's usable HBM is a little below the nominal capacity (libtpu
# reports 15.75 GiB for a v5e); its own limit is the one in an OOM message.
CHIPS: dict[str, ChipSpec] = {
    "v4": ChipSpec("v4", 275e12, 32 * _GIB, 1200 * _GB, 600 * _GB),
    "v5e": ChipSpec("v5e", 197e12, 16 * _GIB, 819 * _GB, 400 * _GB),
    "v5p": ChipSpec("v5p", 459e12, 95 * _GIB, 2765 * _GB, 1200 * _GB),
    "v6e": ChipSpec("v6e", 918e12, 32 * _GIB, 1640 * _GB, 800 * _GB),
}

# `Device.device_kind` of each chip.
_DEVICE_KINDS = {"TPU v4": "v4", "TPU v5 lite": "v5e", "TPU v5e": "v5e",
                 "TPU v5": "v5p", "TPU v5p": "v5p", "TPU v6 lite": "v6e",
                 "TPU v6e": "v6e"}
# Topology-name prefixes that alias a chip ("v5litepod-8" style names too).
_PREFIXES = {"v4": "v4", "v5e": "v5e", "v5litepod": "v5e", "v5lite": "v5e",
             "v5p": "v5p", "v6e": "v6e"}


def chip_of(device_or_topology: Any) -> ChipSpec:
  """The ChipSpec of a TPU device or a topology name ("v5e:2x2")."""
  if isinstance(device_or_topology, str):
    prefix = device_or_topology.split(":", 1)[0].split("-", 1)[0].lower()
    if prefix not in _PREFIXES:
      raise ValueError(f"unknown TPU {device_or_topology!r}; valid chip "
                       f"prefixes: {', '.join(sorted(_PREFIXES))}")
    return CHIPS[_PREFIXES[prefix]]
  kind = device_or_topology.device_kind
  if kind not in _DEVICE_KINDS:
    raise ValueError(f"no chip spec for device kind {kind!r}; known: "
                     f"{', '.join(sorted(_DEVICE_KINDS))}")
  return CHIPS[_DEVICE_KINDS[kind]]


# --------------------------------------------------------------------------
# Topology devices and mesh.
# --------------------------------------------------------------------------

# What libtpu needs on a machine without TPUs: no GCE metadata-server query,
# a valid worker hostname (otherwise it logs an INVALID_ARGUMENT error about
# TPU_WORKER_HOSTNAMES at load), and no claim on /tmp/libtpu_lockfile (any
# process that loads libtpu holds it, e.g. a CPU run of JAX without
# JAX_PLATFORMS=cpu, and compile-only devices need no exclusive chip).
HOST_ENV = {"TPU_SKIP_MDS_QUERY": "1", "TPU_WORKER_HOSTNAMES": "localhost",
            "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


def configure_host_env(*, cpu_platform: bool = True) -> None:
  """Sets the environment for compiling TPU programs on a CPU machine.

  Call before the first JAX computation (before libtpu loads). Values
  already in the environment are kept. With `cpu_platform`, JAX's own
  backend is the CPU (`JAX_PLATFORMS=cpu`), so JAX does not try to open
  local TPU chips: the topology devices come from libtpu regardless.
  """
  for k, v in HOST_ENV.items():
    os.environ.setdefault(k, v)
  if cpu_platform:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def libtpu_available() -> bool:
  """Whether libtpu is importable (the `tpu` extra is installed)."""
  try:
    import libtpu  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


def topology_devices(topology: str, num_slices: int = 1) -> list[Any]:
  """Compile-only TPU devices of `topology` ("v5p:2x2x4"), `num_slices` of it.

  v4 and v5p chips are one device each (megacore), as on a real slice.
  Raises ValueError naming the topology when libtpu rejects it.
  """
  if not libtpu_available():
    raise ValueError("AOT compilation for TPU needs libtpu: pip install "
                     f"'jax[tpu]=={jax.__version__}' (the `tpu` extra)")
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  chip = chip_of(topology)
  kw = {"num_slices": int(num_slices)} if num_slices > 1 else {}
  if chip.name in ("v4", "v5p"):
    kw["chip_config_name"] = "megacore"
  try:
    desc = topologies.get_topology_desc(topology_name=topology,
                                        platform="tpu", **kw)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"--topology={topology!r} (num_slices={num_slices}): "
                     f"libtpu could not build it: {str(e).splitlines()[0]}"
                     ) from None
  return list(desc.devices)


# --------------------------------------------------------------------------
# HLO parsing.
# --------------------------------------------------------------------------

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all",
               "collective-permute", "collective-broadcast",
               "ragged-all-to-all")
_ITEMSIZE = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1,
             "f8e5m2": 1, "f8e4m3": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1,
             "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
             "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ARRAY_RE = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_INSTR_RE = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([a-z][\w\-]*)\((.*)$")
_COMP_RE = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLEE_RE = re.compile(
    r"\b(?:body|condition|calls|to_apply|true_computation|"
    r"false_computation)=%?([\w.\-]+)")
_BRANCHES_RE = re.compile(r"\bbranch_computations=\{([^}]*)\}")
_TRIP_RE = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def _shape_bytes(shape_text: str) -> int:
  """Bytes of every array in an HLO shape (a tuple: their sum)."""
  total = 0
  for dtype, dims in _ARRAY_RE.findall(shape_text):
    if dtype not in _ITEMSIZE:
      continue
    n = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
    total += n * _ITEMSIZE[dtype]
  return total


def _computations(hlo_text: str) -> tuple[dict[str, list[str]], str | None]:
  """{computation name: its instruction lines}, and the ENTRY name."""
  comps, entry, current = {}, None, None
  for line in hlo_text.splitlines():
    if current is None:
      m = _COMP_RE.match(line)
      if m and "=" not in line.split("{")[0].split("(")[0]:
        current = m.group(1)
        comps[current] = []
        if line.lstrip().startswith("ENTRY"):
          entry = current
      continue
    if line.strip() == "}":
      current = None
      continue
    comps[current].append(line)
  return comps, entry


_CONST_RE = re.compile(
    r"^\s*%?([\w.\-]+)\s*=\s*[su](?:32|64)\[\]\S*\s+constant\((-?\d+)\)")


def _trip_count(while_line: str, comps: Mapping[str, list[str]]) -> int:
  """Iterations of a while loop: XLA's `known_trip_count` when annotated,
  else N from a condition `i < N` (a compare with direction=LT against an
  integer constant: the form of a `lax.scan` / `fori_loop`, which count
  from 0 by 1); 1 when neither is found (a data-dependent loop)."""
  m = _TRIP_RE.search(while_line)
  if m:
    return int(m.group(1))
  c = re.search(r"condition=%?([\w.\-]+)", while_line)
  lines = comps.get(c.group(1), ()) if c else ()
  consts = {}
  for line in lines:
    k = _CONST_RE.match(line)
    if k:
      consts[k.group(1)] = int(k.group(2))
  for line in lines:
    if " compare(" in line and "direction=LT" in line:
      args = line.split(" compare(", 1)[1].split(")", 1)[0]
      for name in re.findall(r"%?([\w.\-]+)", args):
        if name in consts and consts[name] > 0:
          return consts[name]
  return 1


def _multipliers(comps: Mapping[str, list[str]], entry: str | None
                 ) -> dict[str, int]:
  """How many times each computation runs per call of ENTRY.

  A while loop's body and condition run `_trip_count` times; other callees
  once per caller run.
  """
  mult = {name: 0 for name in comps}
  roots = [entry] if entry in comps else list(comps)
  for r in roots:
    mult[r] = 1
  order = list(roots)
  seen = set()
  while order:
    name = order.pop(0)
    if name in seen:
      continue
    seen.add(name)
    for line in comps.get(name, ()):
      trip = _trip_count(line, comps) if " while(" in line else 1
      callees = _CALLEE_RE.findall(line)
      for group in _BRANCHES_RE.findall(line):
        callees += [c.strip().lstrip("%") for c in group.split(",")]
      for callee in callees:
        if callee in comps:
          mult[callee] = max(mult[callee], mult[name] * trip)
          order.append(callee)
  return mult


def _group_size(line: str) -> int | None:
  """Devices per replica group of a collective's HLO line (None: unknown).

  Reads the three spellings: explicit `{{0,1,2,3},...}`, iota
  `[groups,size]<=[n]` and mesh `mesh['axis_0'=2,'axis_1'=4] {'axis_1'}`.
  """
  m = re.search(r"replica_groups=\{\{([\d,\s]+)\}", line)
  if m:
    return len([x for x in m.group(1).split(",") if x.strip()])
  m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line)
  if m:
    return int(m.group(2))
  m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
  if m:
    sizes = dict(re.findall(r"'([^']+)'=(\d+)", m.group(1)))
    axes = re.findall(r"'([^']+)'", m.group(2))
    return math.prod(int(sizes.get(a, 1)) for a in axes)
  return None


def _traffic_factor(kind: str, group: int | None) -> float:
  """Bytes each chip must move per byte of the collective (a lower bound).

  With g devices in a group: an all-gather / reduce-scatter / all-to-all
  moves (g-1)/g of the large side through each chip, an all-reduce twice
  that (reduce-scatter + all-gather, bandwidth-optimal), a permute all of
  it. An unknown group size takes g = 2, the smallest factor.
  """
  if kind == "collective-permute" or kind == "collective-broadcast":
    return 1.0
  g = group or 2
  frac = (g - 1) / g if g > 1 else 0.0
  return 2.0 * frac if kind == "all-reduce" else frac


def parse_collectives(hlo_text: str) -> dict[str, dict[str, int]]:
  """{kind: {"count", "bytes", "traffic_bytes"}} of an (optimised) HLO.

  A `*-start`/`*-done` pair counts once (the start). `bytes` is the size of
  the collective's larger side: the gathered result of an all-gather, the
  unreduced input of a reduce-scatter, the buffer of an all-reduce /
  all-to-all / permute (a tuple-shaped, combined collective: the sum of its
  arrays). `traffic_bytes` is what each chip must at least send or receive
  for them (`_traffic_factor` of the group size), the roofline's ICI term.
  Collectives in a while loop's body count once per iteration
  (`_trip_count`: per step, not per HLO line).
  """
  comps, entry = _computations(hlo_text)
  if not comps:  # a bare list of instructions
    comps, entry = {"main": hlo_text.splitlines()}, "main"
  mult = _multipliers(comps, entry)
  shapes: dict[str, str] = {}
  for lines in comps.values():
    for line in lines:
      m = _INSTR_RE.match(line)
      if m:
        shapes[m.group(1)] = m.group(2)
  out: dict[str, dict[str, int]] = {}
  for name, lines in comps.items():
    times = mult.get(name, 1) or 1
    for line in lines:
      m = _INSTR_RE.match(line)
      if not m:
        continue
      op = m.group(3)
      kind = op[:-len("-start")] if op.endswith("-start") else op
      if kind not in COLLECTIVES:
        continue
      result = m.group(2)
      operands = [o.strip().lstrip("%") for o in
                  re.findall(r"%?([\w.\-]+)(?=[,)])",
                             m.group(4).split(")")[0] + ")")]
      in_bytes = sum(_shape_bytes(shapes.get(o, "")) for o in operands)
      res_bytes = _shape_bytes(result)
      if op.endswith("-start") and result.lstrip().startswith("("):
        # An async start's tuple holds (operands..., results...[, scratch]).
        res_bytes = max(res_bytes - in_bytes, 0) or res_bytes
      nbytes = max(res_bytes, in_bytes)
      traffic = nbytes * _traffic_factor(kind, _group_size(line))
      entry_ = out.setdefault(kind, {"count": 0, "bytes": 0,
                                     "traffic_bytes": 0})
      entry_["count"] += times
      entry_["bytes"] += times * nbytes
      entry_["traffic_bytes"] += int(round(times * traffic))
  return dict(sorted(out.items()))


def custom_calls(hlo_text: str) -> dict[str, int]:
  """{custom_call_target: count} in an HLO text (Pallas: tpu_custom_call)."""
  out: dict[str, int] = {}
  for target in re.findall(r'custom_call_target="([^"]+)"', hlo_text):
    out[target] = out.get(target, 0) + 1
  return dict(sorted(out.items()))


# Custom-call targets of hand-written kernels (Pallas/Mosaic on TPU), as
# opposed to XLA's own (AsyncCollectiveStart, AssumeGatherIndicesInBound...).
KERNEL_TARGETS = ("tpu_custom_call",)


def kernels(hlo_text: str) -> dict[str, int]:
  """{kernel name: count} of the Pallas/Mosaic custom calls of an HLO.

  The name is the kernel's own (`kernel_name` of the Mosaic backend
  config) when present, else the instruction's name without its numeric
  suffix (Pallas names it after the kernel: `%splash_mha_fwd_residuals.3`)
  unless that is a generic `custom-call.N`, else the last `op_name`
  component of the call's metadata, else its target.
  """
  out: dict[str, int] = {}
  for line in hlo_text.splitlines():
    m = re.search(r'custom_call_target="([^"]+)"', line)
    if not m or m.group(1) not in KERNEL_TARGETS:
      continue
    kname = re.search(r'\\?"kernel_name\\?"\s*:\s*\\?"([^"\\]+)', line)
    name = re.search(r'op_name="([^"]+)"', line)
    instr = _INSTR_RE.match(line)
    iname = re.sub(r"(\.\d+)+$", "", instr.group(1)) if instr else ""
    key = (kname.group(1) if kname else
           iname if iname and not iname.startswith("custom-call") else
           name.group(1).rstrip("/").split("/")[-1] if name else m.group(1))
    out[key] = out.get(key, 0) + 1
  return dict(sorted(out.items()))


# --------------------------------------------------------------------------
# Memory and out-of-memory errors.
# --------------------------------------------------------------------------


class HbmOomError(ValueError):
  """The program does not fit the chip's HBM (one message, with knobs)."""


_OOM_MARKERS = ("Ran out of memory", "CompileTimeHbmOom", "RESOURCE_EXHAUSTED",
                "exceeded hbm", "Exceeded hbm")
# libtpu's two phrasings: "Used 37.65G of 15.75G hbm. Exceeded hbm capacity
# by 21.90G." and "the total memory required for HLO temporaries (165.90G)
# exceeds available HBM (15.75G)".
_OOM_USED_RE = re.compile(
    r"Used\s+([\d.]+)([KMGT]?)\s+of\s+([\d.]+)([KMGT]?)\s+hbm", re.I)
_OOM_REQUIRED_RE = re.compile(
    r"required for ([\w\s]+?)\s*\(([\d.]+)([KMGT]?)\)\s*exceeds available "
    r"HBM\s*\(([\d.]+)([KMGT]?)\)", re.I)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

KNOBS = ("mesh.fsdp / mesh.tensor (shard the weights and optimizer state over "
         "more chips)",
         "model.remat (\"full\" recomputes each block in the backward "
         "pass; \"minimal\" keeps the matmul outputs)",
         "train.batch_size / optim.grad_accum (fewer tokens live per "
         "micro-batch)",
         "loss.chunk_size (e.g. 1024: never all [B, T, V] logits)",
         "model.param_dtype (bfloat16 halves the weights; the optimizer "
         "state follows)")


def is_oom(error: BaseException) -> bool:
  text = str(error)
  return any(m in text for m in _OOM_MARKERS) and (
      "memory" in text.lower() or "hbm" in text.lower())


def oom_message(error: BaseException, *, what: str, chip: ChipSpec,
                context: Mapping[str, Any]) -> str:
  """One message: what did not fit, by how much, and the knobs to turn."""
  text = str(error)
  m = _OOM_USED_RE.search(text)
  r = _OOM_REQUIRED_RE.search(text)
  if m or r:
    if m:
      used = float(m.group(1)) * _UNITS[m.group(2).upper()]
      cap = float(m.group(3)) * _UNITS[m.group(4).upper()]
      for_what = ""
    else:
      used = float(r.group(2)) * _UNITS[r.group(3).upper()]
      cap = float(r.group(4)) * _UNITS[r.group(5).upper()]
      for_what = f" for {r.group(1).strip()}"
    numbers = (f"needs {used / _GIB:.2f} GiB of HBM per chip{for_what} but "
               f"the {chip.name} compiler limit is {cap / _GIB:.2f} GiB "
               f"(over by {(used - cap) / _GIB:.2f} GiB)")
  else:
    first = next((ln.strip() for ln in text.splitlines()
                  if "memory" in ln.lower() or "hbm" in ln.lower()),
                 text.splitlines()[0] if text else "")
    numbers = (f"does not fit the {chip.name}'s "
               f"{chip.hbm_bytes / _GIB:.2f} GiB HBM per chip ({first[:300]})")
  ctx = ", ".join(f"{k}={v}" for k, v in context.items())
  return (f"{what} {numbers}; {ctx}. Turn: " + "; ".join(KNOBS) + ".")


def memory_of(compiled, chip: ChipSpec) -> dict[str, Any]:
  """Per-chip bytes of `compiled.memory_analysis()` against `chip`'s HBM.

  total = arguments + outputs - aliased (donated) + temporaries, and `fits`
  compares it with the nominal HBM. libtpu's own compile-time check is
  weaker: it compares the temporaries alone with its usable HBM (15.75 GiB
  on a v5e: "the total memory required for HLO temporaries (...) exceeds
  available HBM (...)"), so a program can compile and still not fit once
  its arguments (weights, optimizer state, batch) are resident: measured,
  a 1B decoder with 3.45 GiB of arguments and 12.94 GiB of temporaries
  compiled for v5e:2x2.
  """
  ma = compiled.memory_analysis()
  arg = int(ma.argument_size_in_bytes)
  out = int(ma.output_size_in_bytes)
  alias = int(ma.alias_size_in_bytes)
  temp = int(ma.temp_size_in_bytes)
  total = arg + out - alias + temp
  return {"argument_bytes": arg, "output_bytes": out, "alias_bytes": alias,
          "temp_bytes": temp,
          "generated_code_bytes": int(ma.generated_code_size_in_bytes),
          "total_bytes": total, "hbm_bytes": int(chip.hbm_bytes),
          "fits": total <= chip.hbm_bytes,
          "hbm_fraction": total / chip.hbm_bytes}


def roofline(chip: ChipSpec, *, flops: float | None, hbm_bytes: float,
             collective_bytes: float) -> dict[str, Any]:
  """A lower bound on the step time of one chip (not a prediction).

  compute: `flops` (per chip) at the bf16 peak; memory: `hbm_bytes` (per
  chip, at least what every argument and output needs: read and written
  once) at the HBM bandwidth; collectives: the bytes each chip must move
  for them (`parse_collectives`' traffic_bytes) at the whole chip's
  bidirectional ICI bandwidth (all links busy). The bound is the largest of
  the three: the units overlap at best.
  """
  terms = {"compute_s": (flops or 0.0) / chip.peak_bf16_flops,
           "hbm_s": hbm_bytes / chip.hbm_bandwidth,
           "ici_s": collective_bytes / chip.ici_bandwidth}
  bound = max(terms.values())
  return {"chip": chip.name, **terms, "step_lower_bound_s": bound,
          "bound_by": max(terms, key=terms.get)[:-2],
          "note": "lower bound: max of compute, HBM and ICI time at peak"}


def _program_report(compiled, chip: ChipSpec, *, flops_per_chip, seconds,
                    hbm_bytes: float | None = None) -> dict[str, Any]:
  """The per-chip report of one compiled program.

  `hbm_bytes`: the HBM traffic lower bound for the roofline; default: every
  argument read once and every output written once.
  """
  hlo = compiled.as_text()
  coll = parse_collectives(hlo)
  mem = memory_of(compiled, chip)
  coll_bytes = sum(v["bytes"] for v in coll.values())
  traffic = sum(v["traffic_bytes"] for v in coll.values())
  if hbm_bytes is None:
    hbm_bytes = mem["argument_bytes"] + mem["output_bytes"]
  return {
      "compile_s": seconds,
      "memory": mem,
      "flops_per_chip": flops_per_chip,
      "collectives": coll,
      "collective_bytes": coll_bytes,
      "collective_traffic_bytes": traffic,
      "custom_calls": custom_calls(hlo),
      "kernels": kernels(hlo),
      "hlo_lines": hlo.count("\n"),
      "_hlo": hlo,
      "roofline": roofline(chip, flops=flops_per_chip, hbm_bytes=hbm_bytes,
                           collective_bytes=traffic),
  }


def _compile(lowered, *, what: str, chip: ChipSpec,
             context: Mapping[str, Any]):
  """`lowered.compile()`; an HBM overflow becomes one HbmOomError.

  JAX's persistent compilation cache is off for it: an executable for
  compile-only devices cannot be loaded back from it (libtpu: "PjRtCompiler
  must be constructed with a Client"), so writing one only wastes disk.
  """
  from jax._src import config as jax_config  # pylint: disable=g-import-not-at-top
  try:
    with jax_config.enable_compilation_cache(False):
      return lowered.compile()
  except Exception as e:  # pylint: disable=broad-except
    if is_oom(e):
      raise HbmOomError(oom_message(e, what=what, chip=chip,
                                    context=context)) from None
    raise


# --------------------------------------------------------------------------
# The train step.
# --------------------------------------------------------------------------


def lm_example(seq_len: int) -> dict[str, np.ndarray]:
  """One example of the LM pipeline (`data.pipeline`): its keys and dtypes."""
  from jaxlab.data import pipeline  # pylint: disable=g-import-not-at-top
  return pipeline._empty(int(seq_len), 0)  # pylint: disable=protected-access


# Losses of a prefix LM (`config.model` with a `prefix` section: the
# Qwen2.5-VL prefix LM, `jaxlab.models.qwen2_vl_prefix`) and their batches.
PREFIX_LOSSES = ("prefix_lm_nll", "video_lm")
# `config.model` keys of the prefix LM that its language model has not.
_VL_KEYS = ("vision", "prefix", "image_token_id", "video_token_id",
            "vision_start_token_id", "mrope_section")


def _loss_name(config) -> str:
  """The step's loss: a paper-scale preset's `scale.loss`, else
  `config.loss.name`."""
  scale = config.get("scale")
  if scale is not None and scale.get("loss"):
    return scale.loss
  return config.loss.name


def prefix_example(config, seq_len: int) -> dict[str, np.ndarray] | None:
  """One example of a prefix LM's loss, None when `config.model` has no
  `prefix` section or the loss is not one of `PREFIX_LOSSES`.

  `prefix_lm_nll`: images `[H, W, C]` (a clip: `[F, H, W, C]`) float32 in
  [0, 1], ids `[T]` int32, mask `[T]` float32; `video_lm`: frames
  `[F, H, W, C]`, inputs / targets `[T]` int32, loss_mask `[T]` float32
  (no attention_mask: rows unpadded). T = `seq_len`, the text after the
  vision prefix. Zero-strided arrays: only shapes and dtypes are read.
  """
  model = config.model
  prefix = model.get("prefix")
  loss = _loss_name(config)
  if prefix is None or loss not in PREFIX_LOSSES:
    return None
  size = prefix.get("image_size", 32)
  h, w = (int(size),) * 2 if np.ndim(size) == 0 else (int(s) for s in size)
  ch = int((model.get("vision") or {}).get("in_channels", 3))
  kind = prefix.get("kind", "image")
  shape = ((h, w, ch) if kind == "image"
           else (int(prefix.get("num_frames", 1)), h, w, ch))
  zeros = lambda shp, dt: np.broadcast_to(np.zeros((), dt), shp)
  t = (int(seq_len),)
  if loss == "prefix_lm_nll":
    return {"images": zeros(shape, np.float32), "ids": zeros(t, np.int32),
            "mask": zeros(t, np.float32)}
  if kind != "video":
    raise ValueError(f"loss video_lm needs model.prefix.kind='video', got "
                     f"{kind!r}")
  return {"frames": zeros(shape, np.float32), "inputs": zeros(t, np.int32),
          "targets": zeros(t, np.int32), "loss_mask": zeros(t, np.float32)}


def scale_example(config, seq_len: int) -> dict[str, np.ndarray] | None:
  """The example a paper preset names in `config.scale.example` (batch key
  -> dtype name, each a `[seq_len]` array), for a loss whose batch is not
  the LM pipeline's (the controller loss: inputs, targets, loss_mask,
  op_targets); None when it names none."""
  scale = config.get("scale")
  spec = scale.get("example") if scale is not None else None
  if not spec:
    return None
  return {k: np.broadcast_to(np.zeros((), np.dtype(str(dt))),
                             (int(seq_len),))
          for k, dt in dict(spec).items()}


def classifier_example(model_cfg) -> dict[str, np.ndarray]:
  """One example of the `classification` loss of an image classifier
  (`NO_VOCAB_MODELS`): images `[S, S, C]` float32, labels `[]` int32."""
  s, ch = int(model_cfg.image_size), int(model_cfg.get("channels", 3))
  return {"images": np.broadcast_to(np.zeros((), np.float32), (s, s, ch)),
          "labels": np.zeros((), np.int32)}


def speech_example(config, seq_len: int) -> dict[str, np.ndarray] | None:
  """One example of the `stabletoken` loss (StableToken's tokenizer,
  `jaxlab.objectives.stabletoken`), None for other losses: clean and
  perturbed log-mel `[T, n_mels]` float32 (T = `seq_len` mel frames),
  `frame_lengths` int32, CTC `labels` `[T / 4]` int32 (one per 25 Hz
  token at most) and `label_mask` bool. Zero-strided arrays."""
  if _loss_name(config) != "stabletoken":
    return None
  mels = int(config.model.get("num_mel_bins", 0)
             or config.model.get("n_mels", 80))
  zeros = lambda shp, dt: np.broadcast_to(np.zeros((), dt), shp)
  t, n = int(seq_len), max(1, int(seq_len) // 4)
  return {"features": zeros((t, mels), np.float32),
          "features_noisy": zeros((t, mels), np.float32),
          "frame_lengths": np.zeros((), np.int32),
          "labels": zeros((n,), np.int32), "label_mask": zeros((n,), bool)}


def train_example(config, seq_len: int) -> dict[str, np.ndarray]:
  """The example the compiled step reads: a preset's `scale.example`
  (`scale_example`), `classifier_example` for an image classifier,
  `prefix_example` for a prefix LM, `speech_example` for StableToken's
  tokenizer, else the LM pipeline's (`lm_example`)."""
  ex = scale_example(config, seq_len)
  if ex is not None:
    return ex
  if config.model.get("name", "") in NO_VOCAB_MODELS:
    return classifier_example(config.model)
  ex = prefix_example(config, seq_len)
  if ex is None:
    ex = speech_example(config, seq_len)
  return lm_example(seq_len) if ex is None else ex


def language_model_config(model_cfg):
  """`config.model` of a prefix LM's language model alone (name "decoder",
  its vision / prefix sections and vision token ids dropped); other
  configs unchanged. The sampler's programs: the tower runs once per
  prompt, before them."""
  if model_cfg.get("prefix") is None:
    return model_cfg
  import ml_collections  # pylint: disable=g-import-not-at-top
  d = {k: v for k, v in model_cfg.to_dict().items() if k not in _VL_KEYS}
  d["name"] = "decoder"
  d.setdefault("qkv_bias", True)  # qwen2_vl_prefix's default
  return ml_collections.ConfigDict(d)


def _num_params(cfg) -> int | None:
  """Parameters of a model config: `num_params()`, or a Qwen2-VL config's
  language model + vision tower; None when unknown."""
  if hasattr(cfg, "num_params"):
    return int(cfg.num_params())
  if hasattr(cfg, "text") and hasattr(cfg, "vision"):
    from jaxlab.models import qwen2_vl_prefix  # pylint: disable=g-import-not-at-top
    return int(cfg.text.num_params()
               + qwen2_vl_prefix.vision_num_params(cfg.vision))
  return None


def abstract_batch(example: Mapping[str, Any], batch_size: int,
                   sharding: NamedSharding, grad_accum: int = 1) -> Any:
  """ShapeDtypeStructs of a global batch of `example`s (the train layout)."""
  def one(x):
    x = np.asarray(x)
    shape = ((grad_accum, batch_size // grad_accum) if grad_accum > 1
             else (batch_size,)) + x.shape
    return jax.ShapeDtypeStruct(shape, x.dtype, sharding=sharding)
  return jax.tree.map(one, dict(example))


# `config.model.name`s whose models read no tokens (image classifiers).
NO_VOCAB_MODELS = ("vit_classifier",)


def _vocab_size(config) -> int | None:
  """The trainer's vocabulary rule: the tokenizer's size rounded up to 64
  (None for a model of `NO_VOCAB_MODELS`: its builder takes none)."""
  if config.model.get("name", "") in NO_VOCAB_MODELS:
    return None
  if int(config.model.get("vocab_size", 0) or 0) > 0:
    return None
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  tok = pretrained.data_tokenizer(config.data.tokenizer,
                                  path=config.data.get("tokenizer_path", ""),
                                  init_from=config.get("init_from", ""))
  return tokenizers.padded_vocab_size(tok.vocab_size)


def make_mesh(mesh_config, devices: Sequence[Any]) -> jax.sharding.Mesh:
  """`parallel.make_mesh` over topology devices (multi-slice: DCN = data)."""
  return parallel.make_mesh(mesh_config, devices=devices)


def _key_struct(mesh) -> jax.ShapeDtypeStruct:
  key = jax.eval_shape(lambda: jax.random.key(0))
  return jax.ShapeDtypeStruct(key.shape, key.dtype,
                              sharding=NamedSharding(mesh, P()))


def state_bytes_per_chip(state: Any) -> int:
  """Bytes one chip holds of an abstract state (its shard of every leaf).

  Uses each leaf's sharding's shard shape; the largest shard when shards
  differ (uneven splits pad to it).
  """
  total = 0
  for leaf in jax.tree.leaves(state):
    sh = getattr(leaf, "sharding", None)
    shape = sh.shard_shape(leaf.shape) if sh is not None else leaf.shape
    total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
  return total


def compile_train_step(config, devices: Sequence[Any], *,
                       model: Any = None, loss_fn: Callable | None = None,
                       example: Mapping[str, Any] | None = None,
                       mesh: jax.sharding.Mesh | None = None
                       ) -> dict[str, Any]:
  """Compiles `config`'s train step for `devices`; returns the report.

  Args:
    config: a config from `configs/common.base_config()`.
    devices: TPU devices (`topology_devices`), all of the mesh.
    model / loss_fn: as for `trainer.train` (defaults: `config.model`,
      `losses.get(config.loss.name)`).
    example: one training example (dict of arrays; only shapes and dtypes
      are used); default: `train_example` at `train.seq_len` (the LM
      pipeline's example, or a prefix LM's images / clips + text).
    mesh: a mesh to use instead of `config.mesh` over `devices`.

  Raises:
    HbmOomError: the step does not fit the chip's HBM.
  """
  from jaxlab.train import losses  # pylint: disable=g-import-not-at-top
  from jaxlab.train import trainer  # pylint: disable=g-import-not-at-top
  chip = chip_of(devices[0])
  mesh = mesh or make_mesh(config.mesh, devices)
  # A paper-scale preset (`jaxlab.configs._scale`) names the step's loss.
  loss_fn = loss_fn or losses.get(_loss_name(config))
  grad_accum = int(config.optim.grad_accum)
  batch_size, seq_len = int(config.train.batch_size), int(config.train.seq_len)
  n_batch = mesh.shape["data"] * mesh.shape["fsdp"]
  if batch_size % grad_accum or (batch_size // grad_accum) % n_batch:
    raise ValueError(f"train.batch_size={batch_size} must be divisible by "
                     f"optim.grad_accum={grad_accum} times mesh.data*mesh.fsdp"
                     f"={n_batch}")
  t0 = time.perf_counter()
  if model is None and (config.get("scale") is not None
                        or config.model.get("name", "") in NO_VOCAB_MODELS):
    # A paper-scale preset (`configs._scale`, or an image classifier's
    # `PAPER_MODEL`): its model section is the released checkpoint's
    # shape, so the compile builds it (no weights are read) rather than
    # loading `init_from`.
    model = trainer.model_spec(config, vocab_size=_vocab_size(config))
  ts = trainer.build(config, model=model, vocab_size=_vocab_size(config),
                     mesh=mesh, abstract_only=True)
  batch_sh = parallel.batch_sharding(mesh, ts.rules,
                                     leading=1 if grad_accum > 1 else 0)
  batch = abstract_batch(example if example is not None
                         else train_example(config, seq_len), batch_size,
                         batch_sh, grad_accum)
  key = _key_struct(mesh)
  with jax.set_mesh(mesh), nnx.logical_axis_rules(ts.rules):
    step = trainer.make_train_step(ts, loss_fn, config.loss,
                                   grad_accum=grad_accum,
                                   batch_sharding=batch_sh)
    lowered = step.lower(ts.state, batch, key)
  lower_s = time.perf_counter() - t0
  n_chips = len(devices)
  context = {"topology_chips": n_chips,
             "mesh": parallel.mesh.describe(mesh),
             "batch_size": batch_size, "seq_len": seq_len,
             "grad_accum": grad_accum,
             "loss.chunk_size": config.loss.get("chunk_size", 0),
             "model.remat": config.model.get("remat", None)}
  t1 = time.perf_counter()
  with jax.set_mesh(mesh), nnx.logical_axis_rules(ts.rules):
    compiled = _compile(lowered, what="the train step", chip=chip,
                        context=context)
  compile_s = time.perf_counter() - t1
  flops_tok = (ts.spec.flops_per_token(seq_len)
               if ts.spec is not None and ts.spec.flops_per_token else None)
  flops_step = None if flops_tok is None else flops_tok * batch_size * seq_len
  rep = _program_report(compiled, chip,
                        flops_per_chip=None if flops_step is None
                        else flops_step / n_chips, seconds=compile_s)
  params = _num_params(ts.spec.config) if ts.spec is not None else None
  rep.update({
      "program": "train_step", "lower_s": lower_s, **context,
      "tokens_per_step": batch_size * seq_len,
      "tokens_per_chip": batch_size * seq_len // n_chips,
      "params": params,
      "state_bytes_per_chip": state_bytes_per_chip(ts.state),
      "batch_bytes_per_chip": state_bytes_per_chip(batch),
      "flops_per_step": flops_step,
      "flops_per_token": flops_tok,
  })
  rep["_compiled"] = compiled
  rep["_train_state"] = ts
  return rep


def compile_eval_step(config, devices: Sequence[Any], *,
                      mesh: jax.sharding.Mesh | None = None
                      ) -> dict[str, Any]:
  """Compiles the forward-only loss (perplexity evaluation) of `config`.

  The program of a zero-shot paper (a RoPE extension evaluated at 128k
  tokens, an analysis of a pretrained model): the model's parameters alone
  are its arguments (no optimizer state, no gradients), over the batch of
  `train.batch_size` x `train.seq_len`.
  """
  from jaxlab.train import losses  # pylint: disable=g-import-not-at-top
  from jaxlab.train import trainer  # pylint: disable=g-import-not-at-top
  chip = chip_of(devices[0])
  mesh = mesh or make_mesh(config.mesh, devices)
  loss_fn = losses.get(_loss_name(config))
  batch_size, seq_len = int(config.train.batch_size), int(config.train.seq_len)
  t0 = time.perf_counter()
  rules = parallel.rules_from_config(config.get("sharding_rules"))
  spec = trainer.model_spec(config, vocab_size=_vocab_size(config))
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    abstract = nnx.eval_shape(spec.factory)
    graphdef, abs_state = nnx.split(abstract)
    shardings = nnx.get_named_sharding(abs_state, mesh)
    state = jax.tree.map(
        lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh),
        abs_state, shardings)
    batch_sh = parallel.batch_sharding(mesh, rules)
    batch = abstract_batch(train_example(config, seq_len), batch_size,
                           batch_sh)

    def step(st, b, rng):
      model = nnx.merge(graphdef, st)
      loss, _ = losses.call(loss_fn, model, b, rng=rng, config=config.loss,
                            step=jnp.zeros((), jnp.int32))
      return loss.astype(jnp.float32)

    lowered = jax.jit(step, in_shardings=(shardings, batch_sh, None)).lower(
        state, batch, _key_struct(mesh))
  lower_s = time.perf_counter() - t0
  n_chips = len(devices)
  context = {"topology_chips": n_chips,
             "mesh": parallel.mesh.describe(mesh),
             "batch_size": batch_size, "seq_len": seq_len,
             "loss.chunk_size": config.loss.get("chunk_size", 0)}
  t1 = time.perf_counter()
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    compiled = _compile(lowered, what="the eval step", chip=chip,
                        context=context)
  compile_s = time.perf_counter() - t1
  cfg = spec.config
  flops_tok = (None if spec.flops_per_token is None
               else spec.flops_per_token(seq_len) / 3.0)  # forward: 2N of 6N
  flops_step = None if flops_tok is None else flops_tok * batch_size * seq_len
  rep = _program_report(compiled, chip, seconds=compile_s,
                        flops_per_chip=None if flops_step is None
                        else flops_step / n_chips)
  rep.update({
      "program": "eval_step", "lower_s": lower_s, **context,
      "tokens_per_step": batch_size * seq_len,
      "tokens_per_chip": batch_size * seq_len // n_chips,
      "params": _num_params(cfg),
      "state_bytes_per_chip": state_bytes_per_chip(state),
      "batch_bytes_per_chip": state_bytes_per_chip(batch),
      "flops_per_step": flops_step, "flops_per_token": flops_tok,
  })
  rep["_compiled"] = compiled
  return rep


# --------------------------------------------------------------------------
# The sampler (prefill and decode).
# --------------------------------------------------------------------------


def sampler_shapes(config) -> tuple[int, int, int] | None:
  """(batch, prompt length, new tokens) of an experiment that samples.

  Read from `config.aot_sampler` ({batch, prompt_len, max_new_tokens}) when
  present, else from a GRPO config (`rl.prompts_per_step` x
  `grpo.group_size` rows, `grpo.max_new_tokens`, prompts of 128) or a
  generate-style config (`max_new_tokens` with `prompts` /
  `samples_per_prompt`); None for a config that does not sample. Lengths
  are bucketed as the sampler buckets them.
  """
  from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
  spec = config.get("aot_sampler")
  if spec is not None:
    return (int(spec.batch), sampler.bucket_length(int(spec.prompt_len)),
            sampler.bucket_length(int(spec.max_new_tokens)))
  grpo, rl = config.get("grpo"), config.get("rl")
  if grpo is not None and rl is not None and "max_new_tokens" in grpo:
    # GRPO rollouts: prompts_per_step x group_size rows; the prompt length
    # depends on the data (default 128: set aot_sampler.prompt_len).
    batch = int(rl.get("prompts_per_step", 1)) * int(grpo.get("group_size",
                                                               1))
    return (batch, sampler.bucket_length(128),
            sampler.bucket_length(int(grpo.max_new_tokens)))
  if "max_new_tokens" not in config:
    return None
  n_prompts = max(len(config.get("prompts", ()) or ()),
                  len(config.get("prompt_ids", ()) or ()), 1)
  batch = n_prompts * int(config.get("samples_per_prompt", 1) or 1)
  prompt_len = int(config.get("prompt_len", 0) or 0) or 16
  return (batch, sampler.bucket_length(prompt_len),
          sampler.bucket_length(int(config.max_new_tokens)))


def compile_sampler(config, devices: Sequence[Any], *, batch: int,
                    prompt_len: int, max_new_tokens: int,
                    mesh: jax.sharding.Mesh | None = None,
                    greedy: bool = True) -> dict[str, Any]:
  """Compiles the sampler's prefill and decode programs abstractly.

  The model comes from `config.model` (a prefix LM: its language model,
  `language_model_config`, the prompt length counting the vision tokens;
  weights sharded per `config.sharding_rules`); prompts `[batch,
  prompt_len]` are sharded over the batch axes when `batch` divides them
  (else replicated); the KV cache holds `prompt_len + max_new_tokens`
  slots. Returns {"prefill": report, "decode": report}.
  """
  from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
  from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
  chip = chip_of(devices[0])
  mesh = mesh or make_mesh(config.mesh, devices)
  rules = parallel.rules_from_config(config.sharding_rules)
  spec = registry.get_spec(language_model_config(config.model),
                           vocab_size=_vocab_size(config),
                           seed=int(config.seed))
  n_batch = mesh.shape["data"] * mesh.shape["fsdp"]
  row_sh = (parallel.batch_sharding(mesh, rules) if batch % n_batch == 0
            else NamedSharding(mesh, P()))
  rep_sh = NamedSharding(mesh, P())
  settings = sampler._Settings(  # pylint: disable=protected-access
      greedy=greedy, top_k=None, use_top_p=not greedy, logits_processor=None)
  s32 = lambda shape, dt=jnp.int32: jax.ShapeDtypeStruct(shape, dt,
                                                         sharding=rep_sh)
  key = _key_struct(mesh)
  ids = jax.ShapeDtypeStruct((batch, prompt_len), jnp.int32, sharding=row_sh)
  mask = jax.ShapeDtypeStruct((batch, prompt_len), jnp.bool_, sharding=row_sh)
  stop = s32((4,))
  out: dict[str, Any] = {}
  ctx = {"batch": batch, "prompt_len": prompt_len,
         "max_new_tokens": max_new_tokens,
         "mesh": parallel.mesh.describe(mesh)}
  n_chips = len(devices)
  cfg = spec.config
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    graphdef, abs_state = parallel.abstract_model(spec.factory, mesh)
    t0 = time.perf_counter()
    lowered = sampler._prefill.lower(  # pylint: disable=protected-access
        graphdef, settings, max_new_tokens, None, abs_state, ids, mask, key,
        s32((), jnp.float32), s32((), jnp.float32), stop, s32(()))
    compiled = _compile(lowered, what="the sampler prefill", chip=chip,
                        context=ctx)
    pre_s = time.perf_counter() - t0
    fwd = None
    if cfg is not None and hasattr(cfg, "num_params"):
      fwd = registry.decoder_forward_flops(cfg, batch * prompt_len,
                                           prompt_len / 2)
    out["prefill"] = _program_report(
        compiled, chip, flops_per_chip=None if fwd is None else fwd / n_chips,
        seconds=pre_s)
    carry = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        compiled.out_info, compiled.output_shardings)
    t0 = time.perf_counter()
    lowered = sampler._decode.lower(  # pylint: disable=protected-access
        graphdef, settings, abs_state, carry, key, s32((), jnp.float32),
        s32((), jnp.float32), stop, s32(()), s32(()), s32(()))
    compiled_d = _compile(lowered, what="the sampler decode loop", chip=chip,
                          context=ctx)
    dec_s = time.perf_counter() - t0
    dec = None
    if cfg is not None and hasattr(cfg, "num_params"):
      dec = sum(registry.decoder_forward_flops(cfg, batch, prompt_len + i)
                for i in range(1, max_new_tokens))
    # Each decode step reads at least this chip's weights once.
    weights = state_bytes_per_chip(abs_state)
    out["decode"] = _program_report(
        compiled_d, chip, flops_per_chip=None if dec is None else dec / n_chips,
        seconds=dec_s, hbm_bytes=(max_new_tokens - 1) * weights)
    out["decode"]["note"] = (
        "one call = the whole decode loop (max_new_tokens - 1 steps); its "
        "collectives are listed once per loop iteration (no static trip "
        "count)")
  for k in out:
    out[k].update({"program": f"sampler_{k}", **ctx})
    if config.model.get("prefix") is not None:
      out[k]["model"] = ("the prefix LM's language model: the vision tower "
                         "runs once per prompt before prefill; prompt_len "
                         "counts the vision tokens")
  return out


# --------------------------------------------------------------------------
# Everything for one config.
# --------------------------------------------------------------------------


def compile_config(config, topology: str, *, num_slices: int = 1,
                   sampler_too: bool = True, hlo_dir: str | None = None,
                   **train_kw) -> dict[str, Any]:
  """The train step (and, for a sampling experiment, the sampler) of
  `config` compiled for `num_slices` x `topology`. JSON-ready dict.

  With `hlo_dir`, each program's optimised HLO is written there as
  `<program>.hlo.txt`.
  """
  devices = topology_devices(topology, num_slices)
  chip = chip_of(devices[0])
  mesh = make_mesh(config.mesh, devices)
  report: dict[str, Any] = {
      "topology": topology, "num_slices": num_slices, "chips": len(devices),
      "scale": (config.scale.to_dict() if config.get("scale") is not None
                else None),
      "chip": dataclasses.asdict(chip), "device_kind": devices[0].device_kind,
      "jax": jax.__version__, "libtpu": _libtpu_version(),
      "loadavg": list(os.getloadavg()),
  }
  program = (config.scale.get("program", "train")
             if config.get("scale") is not None else "train")
  if program == "eval":
    first = compile_eval_step(config, devices, mesh=mesh)
    programs = {"eval_step": first}
    report["eval_step"] = json_ready(first)
  else:
    first = compile_train_step(config, devices, mesh=mesh, **train_kw)
    programs = {"train_step": first}
    report["train_step"] = json_ready(first)
  if sampler_too:
    shapes = sampler_shapes(config)
    if shapes is not None:
      b, p, n = shapes
      samp = compile_sampler(
          config, devices, batch=b, prompt_len=p, max_new_tokens=n,
          mesh=mesh, greedy=float(config.get("temperature", 0.0)) == 0.0)
      programs.update({f"sampler_{k}": v for k, v in samp.items()})
      report["sampler"] = json_ready(samp)
  if hlo_dir:
    os.makedirs(hlo_dir, exist_ok=True)
    for name, rep in programs.items():
      with open(os.path.join(hlo_dir, f"{name}.hlo.txt"), "w") as f:
        f.write(rep["_hlo"])
  report["loadavg_after"] = list(os.getloadavg())
  return report


def overflow_message(report: Mapping[str, Any]) -> str | None:
  """One message for the programs of a `compile_config` report whose total
  bytes exceed the chip's HBM although libtpu compiled them (it checks the
  temporaries alone), with the knobs; None when everything fits."""
  first = "train_step" if "train_step" in report else "eval_step"
  progs = [(f"the {first.replace('_', ' ')}", report[first])] + [
      (f"the sampler {k}", v) for k, v in (report.get("sampler") or {}).items()]
  over = [(n, r["memory"]) for n, r in progs if not r["memory"]["fits"]]
  if not over:
    return None
  chip = report["chip"]["name"]
  parts = [f"{n} needs {m['total_bytes'] / _GIB:.2f} GiB per chip "
           f"({m['argument_bytes'] / _GIB:.2f} arguments + "
           f"{m['temp_bytes'] / _GIB:.2f} temporaries) but a {chip} has "
           f"{m['hbm_bytes'] / _GIB:.2f} GiB" for n, m in over]
  return ("; ".join(parts) + " (libtpu compiled it: its check counts the "
          "temporaries only). Turn: " + "; ".join(KNOBS) + ".")


def _libtpu_version() -> str | None:
  try:
    from importlib import metadata  # pylint: disable=g-import-not-at-top
    return metadata.version("libtpu")
  except Exception:  # pylint: disable=broad-except
    return None


def json_ready(d: Any) -> Any:
  """Drops the private (`_`) entries and non-JSON values of a report."""
  if isinstance(d, Mapping):
    return {k: json_ready(v) for k, v in d.items()
            if not str(k).startswith("_")}
  if isinstance(d, (list, tuple)):
    return [json_ready(v) for v in d]
  if isinstance(d, (np.integer,)):
    return int(d)
  if isinstance(d, (np.floating,)):
    return float(d)
  if d is None or isinstance(d, (int, float, str, bool)):
    return d
  return str(d)


def _gib(x) -> str:
  return "-" if x is None else f"{x / _GIB:.2f} GiB"


def format_program(name: str, rep: Mapping[str, Any]) -> str:
  mem, rl = rep["memory"], rep["roofline"]
  lines = [f"{name}: compiled in {rep['compile_s']:.1f} s",
           f"  per chip: arguments {_gib(mem['argument_bytes'])}, outputs "
           f"{_gib(mem['output_bytes'])} (aliased {_gib(mem['alias_bytes'])}),"
           f" temporaries {_gib(mem['temp_bytes'])}, total "
           f"{_gib(mem['total_bytes'])} of {_gib(mem['hbm_bytes'])} HBM "
           f"({100 * mem['hbm_fraction']:.0f}%)"
           + ("" if mem["fits"] else "  DOES NOT FIT (libtpu only checks "
              "the temporaries at compile time)")]
  if rep.get("flops_per_chip"):
    lines.append(f"  model FLOPs per chip: {rep['flops_per_chip']:.3e}")
  if rep["collectives"]:
    lines.append("  collectives (per step): " + ", ".join(
        f"{k} x{v['count']} {_gib(v['bytes'])}"
        for k, v in rep["collectives"].items()))
  else:
    lines.append("  collectives: none")
  lines.append("  kernels (Pallas/Mosaic): " + (", ".join(
      f"{k} x{v}" for k, v in rep["kernels"].items()) or "none")
               + "; other custom calls: " + (", ".join(
                   f"{k} x{v}" for k, v in rep["custom_calls"].items()
                   if k not in KERNEL_TARGETS) or "none"))
  lines.append(f"  roofline lower bound ({rl['chip']}): "
               f"{rl['step_lower_bound_s'] * 1e3:.2f} ms ({rl['bound_by']}-"
               f"bound; compute {rl['compute_s'] * 1e3:.2f} ms, HBM "
               f"{rl['hbm_s'] * 1e3:.2f} ms, ICI {rl['ici_s'] * 1e3:.2f} ms)")
  return "\n".join(lines)


def format_report(report: Mapping[str, Any]) -> str:
  """A human-readable table of `compile_config`'s report."""
  head = (f"{report['num_slices']} x {report['topology']} "
          f"({report['chips']} x {report['device_kind']}), jax "
          f"{report['jax']}, libtpu {report['libtpu']}")
  parts = [head]
  first = "train_step" if "train_step" in report else "eval_step"
  tr = report[first]
  parts.append(f"{first.replace('_', ' ')}: mesh {tr['mesh']}, batch "
               f"{tr['batch_size']} x {tr['seq_len']} "
               f"({tr['tokens_per_chip']} tokens per chip), grad_accum "
               f"{tr.get('grad_accum', 1)}")
  parts.append(format_program(first, tr))
  for k, v in (report.get("sampler") or {}).items():
    parts.append(format_program(f"sampler {k} (batch {v['batch']}, prompt "
                                f"{v['prompt_len']}, new "
                                f"{v['max_new_tokens']})", v))
  return "\n".join(parts)
