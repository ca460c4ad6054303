"""Where a compiled step's time goes: per-HLO-op trace, grouped by model part.

    python -m jaxlab.experiments.bench profile [--what=decode,train] [--size=56m]
        [--batch=8] [--out=FILE]

XLA:CPU records one trace event per executed thunk (fusion, dot, copy, ...)
when `--xla_cpu_enable_xprof_traceme=true` is set; each event names its HLO
module and instruction. `op_breakdown(fn)` runs `fn` under `jax.profiler`
and joins those events with the optimized HLO of the same modules (dumped
by `--xla_dump_to`), so each instruction's time is attributed to the
library source line that created it (HLO metadata keeps the Python stack):
the LM head (`Decoder.unembed`), the cross-entropy (`train/losses.py`),
attention projections and core, the MLP, norms, RoPE, embedding,
the optimizer (optax) and sampling; forward and backward are told apart by
the `transpose(jvp(...))` that JAX writes into backward ops' names.

Both flags must be set before the CPU backend starts: `enable()` does it
(the `profile` benchmark calls it first; `decode --profile` / `train
--profile` run this module in a child process so their timings stay free of
tracing). Numbers are shares of the summed op time (ops of the two XLA
threads may overlap, so the sum can exceed wall time); on a loaded machine
the shares are noisier than they look.
"""

import collections
import glob
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
from typing import Any, Callable

from jaxlab.experiments import bench
# Run in a child process by the benchmarks (`_child`, which they import).
from jaxlab.experiments.bench._child import in_child, summary  # pylint: disable=unused-import

_DUMP_DIR = os.path.join(tempfile.gettempdir(),
                         f"jaxlab_profile_hlo_{os.getpid()}")
_CONTROL_OPS = ("while", "conditional", "call")


def enable(dump_dir: str = _DUMP_DIR) -> str:
  """Adds the per-thunk trace and HLO dump flags to XLA_FLAGS (before jax
  starts its CPU backend); returns the dump directory."""
  if "jax" in sys.modules:
    import jax  # pylint: disable=g-import-not-at-top
    if getattr(jax._src.xla_bridge, "_backends", None):  # pylint: disable=protected-access
      raise RuntimeError("profile.enable() must run before jax's backend "
                         "starts (first array / jit)")
  shutil.rmtree(dump_dir, ignore_errors=True)
  flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = (
      f"{flags} --xla_cpu_enable_xprof_traceme=true --xla_dump_to={dump_dir}"
      " --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=^$").strip()
  return dump_dir


# ----------------------------------------------------------------------------
# HLO text -> per-instruction source location.
# ----------------------------------------------------------------------------

_INSTR = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*?\b([a-z][\w\-]*)\(")
_META = re.compile(r'op_name="([^"]*)"(?: .*?stack_frame_id=(\d+))?')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_BODY = re.compile(r"body=%?([\w.\-]+)")


def _parse_tables(text: str):
  """(file names, function names, file locations, stack frames) tables."""
  def section(name):
    m = re.search(rf"^{name}\n(.*?)(?:\n\n|\Z)", text, re.S | re.M)
    return m.group(1).splitlines() if m else []
  files = {int(l.split(" ", 1)[0]): l.split(" ", 1)[1].strip('"')
           for l in section("FileNames") if l.strip()}
  funcs = {int(l.split(" ", 1)[0]): l.split(" ", 1)[1].strip('"')
           for l in section("FunctionNames") if l.strip()}
  locs = {}
  for l in section("FileLocations"):
    m = re.match(r"(\d+) \{file_name_id=(\d+) function_name_id=(\d+) "
                 r"line=(\d+)", l)
    if m:
      locs[int(m.group(1))] = (files.get(int(m.group(2)), "?"),
                               funcs.get(int(m.group(3)), "?"),
                               int(m.group(4)))
  frames = {}
  for l in section("StackFrames"):
    m = re.match(r"(\d+) \{file_location_id=(\d+) parent_frame_id=(\d+)", l)
    if m:
      frames[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
  return locs, frames


def _stack(frame_id: int | None, locs, frames) -> list[tuple[str, str, int]]:
  out, seen = [], set()
  while frame_id and frame_id in frames and frame_id not in seen:
    seen.add(frame_id)
    loc, parent = frames[frame_id]
    if loc in locs:
      out.append(locs[loc])
    frame_id = parent
  return out  # innermost first


_WEIGHT = {"dot": 6, "convolution": 6, "scatter": 5, "reduce": 4,
           "copy": 3, "transpose": 3, "gather": 2, "dynamic-update-slice": 2}


def parse_hlo(text: str) -> dict[str, dict[str, Any]]:
  """instruction name -> {"op", "op_name", "stack"} for one HLO module.

  A fusion takes the metadata of its heaviest inner instruction (a dot over
  a scatter, a reduce, a copy/transpose, anything else), so a dot with a
  fused epilogue is charged to the dot's source line and a layout copy
  shows as kind "copy"/"transpose".
  """
  locs, frames = _parse_tables(text)
  comps: dict[str, list[tuple[str, str, str, str | None]]] = {}
  current = None
  for line in text.splitlines():
    if line and not line.startswith(" ") and "{" in line and (
        line.startswith("%") or line.startswith("ENTRY")):
      current = line.split()[1] if line.startswith("ENTRY") else line.split()[0]
      current = current.lstrip("%")
      comps[current] = []
      continue
    m = _INSTR.match(line)
    if m and current is not None:
      meta = _META.search(line)
      calls = _CALLS.search(line) or _BODY.search(line)
      comps[current].append((m.group(1), m.group(2),
                             meta.group(1) if meta else "",
                             meta.group(2) if meta else None,
                             calls.group(1) if calls else None))
  out = {}
  for comp in comps.values():
    for name, op, op_name, frame, calls in comp:
      best = (0, op_name, frame, op)
      if op == "fusion" and calls in comps:
        for _, iop, iname, iframe, _ in comps[calls]:
          w = _WEIGHT.get(iop, 1 if iname else 0)
          if w > best[0]:
            best = (w, iname, iframe, iop)
      out[name] = {"op": op, "inner_op": best[3], "op_name": best[1],
                   "stack": _stack(int(best[2]) if best[2] else None,
                                   locs, frames)}
  return out


# ----------------------------------------------------------------------------
# Categories.
# ----------------------------------------------------------------------------

def categorize(info: dict[str, Any]) -> str:
  """Model part of one HLO instruction, from the Python stack that made it."""
  stack = info["stack"]
  # Function names are qualified ("Decoder.unembed"): keep the last part.
  frames = [(os.path.basename(f), fn.rsplit(".", 1)[-1])
            for f, fn, _ in stack]
  names = {f"{f}:{fn}" for f, fn in frames}
  full = " ".join(f for f, _, _ in stack)
  op_name = info["op_name"]
  if "decoder.py:unembed" in names or "decoder.py:lm_head" in names:
    return "lm_head"
  if "losses.py" in {f for f, _ in frames}:
    return "cross_entropy"
  if "optax" in full:
    return "optimizer"
  if "rope.py" in {f for f, _ in frames}:
    return "rope"
  if "norm.py:__call__" in names:
    return "norm"
  if "attention.py:project_qkv" in names:
    return "attention_qkv_proj"
  if "attention.py:project_out" in names:
    return "attention_out_proj"
  if "attention.py:attend" in names or "attention.py:__call__" in names:
    if "dot_product_attention" in op_name:
      return "attention_core"
    if "dynamic_update_slice" in op_name:
      return "kv_cache_write"
    if info["inner_op"] == "dot":
      return "attention_out_proj"
    return "attention_core"
  if "attention.py:make_attention_mask" in names:
    return "attention_mask"
  if "mlp.py:__call__" in names:
    return "mlp"
  if "decoder.py:embed" in names:
    return "embedding"
  if "sampler.py" in {f for f, _ in frames}:
    return "sampling"
  if "trainer.py" in {f for f, _ in frames}:
    return "step_glue"
  if info["op"] in ("copy", "transpose") or info["inner_op"] in (
      "copy", "transpose"):
    return "copies"
  return "other"


def phase(info: dict[str, Any]) -> str:
  return "backward" if "transpose(" in info["op_name"] else "forward"


# ----------------------------------------------------------------------------
# Trace -> breakdown.
# ----------------------------------------------------------------------------

def _load_modules(dump_dir: str) -> dict[str, dict[str, dict[str, Any]]]:
  mods = {}
  for path in glob.glob(os.path.join(dump_dir,
                                     "*after_optimizations.txt")):
    with open(path) as f:
      text = f.read()
    m = re.search(r"^HloModule ([\w.\-]+)", text, re.M)
    if m:
      mods.setdefault(m.group(1), {}).update(parse_hlo(text))
  return mods


def op_breakdown(fn: Callable[[], Any], *, dump_dir: str = _DUMP_DIR,
                 top: int = 12) -> dict[str, Any]:
  """Runs `fn()` (already compiled) under the profiler; time per part.

  Returns {"total_op_ms", "by_part": {part: share}, "by_part_ms",
  "by_phase": {forward/backward: share}, "by_op_kind", "by_module":
  {jit module: {"ms", "by_part"}}, "top_ops": [...]}
  (shares of the summed op time; `enable()` must have run first).
  """
  import jax  # pylint: disable=g-import-not-at-top
  trace_dir = tempfile.mkdtemp(prefix="jaxlab_trace_")
  try:
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      jax.block_until_ready(fn())
    paths = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"),
                      recursive=True)
    if not paths:
      raise RuntimeError("no trace written")
    with gzip.open(paths[0]) as f:
      events = json.load(f)["traceEvents"]
  finally:
    shutil.rmtree(trace_dir, ignore_errors=True)
  mods = _load_modules(dump_dir)
  part_us = collections.Counter()
  phase_us = collections.Counter()
  kind_us = collections.Counter()
  op_us = collections.Counter()
  module_part_us = collections.defaultdict(collections.Counter)
  unknown = 0.0
  for e in events:
    args = e.get("args") or {}
    if e.get("ph") != "X" or "hlo_op" not in args:
      continue
    op = args["hlo_op"]
    info = mods.get(args.get("hlo_module", ""), {}).get(op)
    if info is None:
      unknown += e.get("dur", 0.0)
      continue
    if info["op"] in _CONTROL_OPS:
      continue  # its body's ops are traced themselves
    dur = float(e.get("dur", 0.0))
    part = categorize(info)
    part_us[part] += dur
    phase_us[phase(info)] += dur
    kind_us[info["inner_op"] if info["op"] == "fusion" else info["op"]] += dur
    op_us[(args["hlo_module"], op, part)] += dur
    module_part_us[args["hlo_module"]][part] += dur
  total = sum(part_us.values())
  if not total:
    raise RuntimeError("no per-op trace events: was profile.enable() called "
                       "before jax started?")
  share = lambda c: {k: v / total for k, v in c.most_common()}  # pylint: disable=g-long-lambda
  return {
      "total_op_ms": total / 1e3,
      "unattributed_ms": unknown / 1e3,
      "by_part": share(part_us),
      "by_part_ms": {k: v / 1e3 for k, v in part_us.most_common()},
      "by_phase": share(phase_us),
      "by_op_kind": share(kind_us),
      "by_module": {
          m: {"ms": sum(c.values()) / 1e3,
              "by_part": {k: v / sum(c.values()) for k, v in c.most_common()}}
          for m, c in module_part_us.items()},
      "top_ops": [{"module": m, "op": o, "part": p, "ms": v / 1e3,
                   "share": v / total}
                  for (m, o, p), v in op_us.most_common(top)],
  }


# ----------------------------------------------------------------------------
# The benchmark: decode / train steps of the bench shapes.
# ----------------------------------------------------------------------------

def profile_decode(size: str, batch: int, prompt_len: int, new_tokens: int
                   ) -> dict[str, Any]:
  """Breakdown of one greedy `sampler.generate` call (prefill + decode loop)
  of a random decoder of the decode benchmark's `size`."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from jaxlab.experiments.bench import decode as decode_bench  # pylint: disable=g-import-not-at-top
  from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
  from jaxlab.models import decoder  # pylint: disable=g-import-not-at-top
  shape = decode_bench.SIZES[size]
  cfg = decoder.DecoderConfig(
      vocab_size=shape["vocab_size"], dim=shape["hidden_size"],
      mlp_dim=shape["intermediate_size"], num_layers=shape["num_layers"],
      num_heads=shape["num_heads"], num_kv_heads=shape["num_kv_heads"],
      tie_embeddings=shape.get("tie_embeddings", False))
  model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
  prompts = np.random.default_rng(0).integers(
      0, cfg.vocab_size, (batch, prompt_len)).tolist()
  run = lambda: sampler.generate(model, prompts,  # pylint: disable=g-long-lambda
                                 max_new_tokens=new_tokens).tokens
  run()  # compile
  out = op_breakdown(run)
  out.update(what="decode", size=size, batch=batch, prompt_len=prompt_len,
             new_tokens=new_tokens)
  return out


def profile_train(size: str) -> dict[str, Any]:
  """Breakdown of one step of `trainer.make_train_step` (the train
  benchmark's `size`, fp32, AdamW with clipping)."""
  import jax  # pylint: disable=g-import-not-at-top
  from jaxlab.experiments.bench import train as train_bench  # pylint: disable=g-import-not-at-top
  step, holder, batch = train_bench.trainer_step_for(size)

  def run():
    holder["state"], m = step(holder["state"], batch, jax.random.key(0))
    return m["loss"]
  jax.block_until_ready(run())  # compile
  out = op_breakdown(run)
  out.update(what="train", size=size)
  return out


def main(argv=()):
  args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
  enable()
  what = args.get("what", "decode")
  size = args.get("size", "56m")
  if what == "decode":
    out = profile_decode(size, int(args.get("batch", 8)),
                         int(args.get("prompt_len", 128)),
                         int(args.get("new_tokens", 32)))
  elif what == "train":
    out = profile_train(size)
  else:
    raise ValueError(f"--what={what!r}; valid: decode, train")
  out["loadavg"] = list(os.getloadavg())
  bench.emit(out, args.get("out"), indent=1)
  return out


if __name__ == "__main__":
  main(sys.argv[1:])
