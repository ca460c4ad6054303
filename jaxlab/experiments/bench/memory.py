"""Training memory: compiled memory analysis of the trainer's own train step.

    python -m jaxlab.experiments.bench memory [--sizes=56m] [--out=FILE]
        [--time_size=small] [--time_steps=3]

For each size and configuration (fsdp 1 or 8 on 8 CPU devices, remat off or
on, chunked cross-entropy off or on) this lowers and compiles
`jaxlab.train.trainer.make_train_step` (the step `trainer.train` runs, on a
state from `trainer.build(..., abstract_only=True)`, so nothing is
allocated) and reports XLA's per-device memory analysis: argument, output,
temp and peak bytes (`peak = argument + output - alias + temp`, the
parts `jax.stages.Compiled.memory_analysis` exposes), plus the bytes
of the parameters and the optimizer state per device computed from the
shardings of the state. The fsdp=8 / fsdp=1 ratio of those bytes is the
claim (one eighth, up to the few replicated scalars: the step counter).

Remat trades memory for time: the temp bytes fall, and a short timing of
the real step at `--time_size` (a few steps, median; NOISY on a shared
machine: the load average is recorded) shows what it costs.

Needs 8 devices: run it as a fresh process (it sets
`--xla_force_host_platform_device_count=8` when JAX is not yet imported).
"""

import os
import sys

if "jax" not in sys.modules and "device_count" not in os.environ.get(
    "XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

# pylint: disable=g-import-not-at-top,wrong-import-position
import json
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.configs import common
from jaxlab.experiments import bench
from jaxlab import parallel
from jaxlab.train import losses
from jaxlab.train import trainer

# Model shapes (DecoderConfig fields) and the per-step batch.
SIZES = {
    "tiny": dict(vocab_size=256, dim=64, num_layers=2, num_heads=4,
                 num_kv_heads=2, mlp_dim=128, batch=8, seq_len=64),
    "small": dict(vocab_size=8192, dim=256, num_layers=4, num_heads=4,
                  num_kv_heads=2, mlp_dim=704, batch=8, seq_len=256),
    "56m": dict(vocab_size=32000, dim=512, num_layers=8, num_heads=8,
                num_kv_heads=4, mlp_dim=1408, batch=8, seq_len=256),
}


def config_for(size: str | dict[str, Any], *, fsdp: int = 1,
               remat: bool = False, chunk: int = 0):
  """A trainer config (from `common.base_config()`) for `size`."""
  s = dict(SIZES[size] if isinstance(size, str) else size)
  batch, seq_len = s.pop("batch"), s.pop("seq_len")
  c = common.base_config()
  c.model.update(remat=remat, **s)
  c.train.update(steps=10, batch_size=batch, seq_len=seq_len)
  c.mesh.update(data=1, fsdp=fsdp, tensor=1)
  c.loss.chunk_size = chunk
  return c


def _state_bytes(state, shardings) -> dict[str, int]:
  """Per-device bytes of params and optimizer state from their shardings."""
  out = {"params": 0, "optimizer": 0}
  leaves = jax.tree_util.tree_leaves_with_path(state)
  shard_leaves = jax.tree.leaves(shardings)
  for (path, a), sh in zip(leaves, shard_leaves):
    shape = sh.shard_shape(a.shape)
    n = int(np.prod(shape)) * jnp.dtype(a.dtype).itemsize
    # The state is the (model, optimizer) pair: path[0] is 0 or 1.
    first = path[0]
    idx = getattr(first, "idx", getattr(first, "key", None))
    out["params" if idx == 0 else "optimizer"] += n
  return out


def compile_step(config, *, devices=None):
  """(compiled train step, TrainState) of the trainer for `config`."""
  mesh = parallel.make_mesh(config.mesh, devices=devices)
  ts = trainer.build(config, mesh=mesh, abstract_only=True)
  with jax.set_mesh(mesh), nnx.logical_axis_rules(ts.rules):
    batch_sh = parallel.batch_sharding(mesh, ts.rules)
    step = trainer.make_train_step(
        ts, losses.get(config.loss.name), config.loss, grad_accum=1,
        batch_sharding=batch_sh)
    b, t = int(config.train.batch_size), int(config.train.seq_len)
    tok = jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=batch_sh)
    batch = {"inputs": tok, "targets": tok}
    compiled = step.lower(ts.state, batch, jax.random.key(0)).compile()
  return compiled, ts, step


def analyse(config, *, devices=None) -> dict[str, Any]:
  """Compiled per-device memory analysis of the trainer's step for config."""
  compiled, ts, _ = compile_step(config, devices=devices)
  mem = compiled.memory_analysis()
  row = {
      "argument_bytes": int(mem.argument_size_in_bytes),
      "output_bytes": int(mem.output_size_in_bytes),
      "alias_bytes": int(mem.alias_size_in_bytes),
      "temp_bytes": int(mem.temp_size_in_bytes),
  }
  # XLA:CPU's own peak_memory_in_bytes leaves the temp buffers out, so the
  # peak is summed from the parts (both are reported).
  row["peak_bytes"] = (row["argument_bytes"] + row["output_bytes"] -
                       row["alias_bytes"] + row["temp_bytes"])
  xla_peak = getattr(mem, "peak_memory_in_bytes", None)
  if xla_peak is not None:
    row["xla_peak_memory_in_bytes"] = int(xla_peak)
  state_b = _state_bytes(ts.state, ts.shardings)
  row["param_bytes_per_device"] = state_b["params"]
  row["optimizer_bytes_per_device"] = state_b["optimizer"]
  row["param_plus_optimizer_bytes_per_device"] = sum(state_b.values())
  cost = compiled.cost_analysis()
  if isinstance(cost, list):
    cost = cost[0] if cost else {}
  if cost:
    row["xla_flops"] = float(cost.get("flops", 0.0))
    row["xla_bytes_accessed"] = float(cost.get("bytes accessed", 0.0))
  return row


def time_step(config, steps: int = 3) -> float:
  """Median seconds of the trainer's real step (1 device; noisy)."""
  mesh = parallel.make_mesh(config.mesh, devices=jax.devices()[:1])
  ts = trainer.build(config, mesh=mesh)
  with jax.set_mesh(mesh), nnx.logical_axis_rules(ts.rules):
    batch_sh = parallel.batch_sharding(mesh, ts.rules)
    step = trainer.make_train_step(
        ts, losses.get(config.loss.name), config.loss, grad_accum=1,
        batch_sharding=batch_sh)
    b, t = int(config.train.batch_size), int(config.train.seq_len)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, int(config.model.vocab_size), (b, t + 1))
    batch = {"inputs": jnp.asarray(ids[:, :-1], jnp.int32),
             "targets": jnp.asarray(ids[:, 1:], jnp.int32)}
    state = ts.state
    key = jax.random.key(0)
    state, out = step(state, batch, key)  # compile
    jax.block_until_ready(out)
    times = []
    for _ in range(steps):
      t0 = time.perf_counter()
      state, out = step(state, batch, key)
      jax.block_until_ready(out)
      times.append(time.perf_counter() - t0)
  return float(np.median(times))


def main(argv=()):
  args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
  sizes = args.get("sizes", "56m").split(",")
  time_size = args.get("time_size", "small")
  time_steps = int(args.get("time_steps", 3))
  n_dev = jax.device_count()
  report = {"backend": jax.default_backend(), "devices": n_dev,
            "jax": jax.__version__,
            "loadavg_start": list(os.getloadavg()), "results": []}
  plan = [dict(fsdp=1, remat=False, chunk=0), dict(fsdp=1, remat=True, chunk=0),
          dict(fsdp=1, remat=False, chunk=1024),
          dict(fsdp=1, remat=True, chunk=1024)]
  if n_dev >= 8:
    plan += [dict(fsdp=8, remat=False, chunk=0),
             dict(fsdp=8, remat=True, chunk=0)]
  for size in sizes:
    base = None
    for p in plan:
      devices = jax.devices()[:p["fsdp"]]
      row = {"size": size, **p, **analyse(config_for(size, **p),
                                          devices=devices)}
      if p["fsdp"] == 1 and not p["remat"] and not p["chunk"]:
        base = row
      if base is not None and p["fsdp"] > 1:
        row["param_plus_optimizer_ratio_to_fsdp1"] = (
            row["param_plus_optimizer_bytes_per_device"] /
            base["param_plus_optimizer_bytes_per_device"])
      report["results"].append(row)
      print(json.dumps(row), file=sys.stderr, flush=True)
  timing = []
  for p in (dict(remat=False, chunk=0), dict(remat=True, chunk=0),
            dict(remat=False, chunk=1024)):
    sec = time_step(config_for(time_size, fsdp=1, **p), time_steps)
    timing.append({"size": time_size, **p, "step_s": sec,
                   "loadavg_1m": os.getloadavg()[0]})
    print(json.dumps(timing[-1]), file=sys.stderr, flush=True)
  report["step_time_noisy"] = timing
  report["loadavg_end"] = list(os.getloadavg())
  bench.emit(report, args.get("out"), indent=2)
  return report


if __name__ == "__main__":
  main(sys.argv[1:])
