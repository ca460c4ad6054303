"""KV-cache / prompt compression benchmark (paper M), one JSON object.

    python -m jaxlab.experiments.bench kv_compression [--config=tiny]
        [--workdir=DIR] [--out=FILE]

The target and draft are seed 0 of a `jaxlab/configs/speckv.py` run
(`DIR/seed0/{target,draft}.npz` from `python -m jaxlab.main
--config=jaxlab/configs/speckv.py:... --workdir=DIR`); without them they are
trained here with the same config. The experiment already times seed 0
(`evaluate(..., timing=True)`); its `DIR/seed0/eval.json` is read unless
`--fresh`. Every method of `methods.names` (full,
draft, SnapKV, SpecKV, SpecPC, SpecKV-PC, random, last-N) answers the
held-out RULER-like prompts at each budget C_max: exact match, part recall,
the target's peak and decode-time cache (slots per layer and KV head), and
the wall time of prefill + decode (draft passes included) of a second call
(the first compiles) relative to full's. Timings on a shared CPU are noisy.
"""

import argparse
import json
import os
import platform
import tempfile

import jax

from jaxlab.configs import speckv as speckv_config
from jaxlab.experiments import bench
from jaxlab.experiments import speckv as speckv_exp

KEYS = ("exact", "part_recall", "exact_q_first", "exact_q_last",
        "peak_cache", "decode_cache", "prefill_cache", "latency_s",
        "latency_vs_full")


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="jaxlab.experiments.bench kv_compression")
  parser.add_argument("--config", default="tiny")
  parser.add_argument("--workdir", default="")
  parser.add_argument("--out", default="")
  parser.add_argument("--fresh", action="store_true",
                      help="re-evaluate even if DIR/seed0/eval.json exists")
  args = parser.parse_args(argv)
  config = speckv_config.get_config(args.config)
  workdir = args.workdir or tempfile.mkdtemp(prefix="kv_compression_")
  tok = speckv_exp.WordTokenizer()
  seed = int(config.seeds[0])
  seed_dir = os.path.join(workdir, f"seed{seed}")
  examples = speckv_exp.held_out(tok, config)
  done = os.path.join(seed_dir, "eval.json")
  metrics, source = None, "evaluated here"
  if os.path.exists(done) and not args.fresh:
    with open(done) as f:
      metrics = json.load(f)["methods"]
    source = f"the experiment's timed evaluation ({done})"
  if metrics is None or "latency_s" not in next(iter(
      next(iter(metrics.values())).values())):
    target, draft, _ = speckv_exp.seed_models(config, tok, seed, seed_dir)
    metrics = speckv_exp.evaluate(target, draft, config, tok, examples,
                                  timing=True)
    source = "evaluated here"
  out = {
      "benchmark": "kv_compression",
      "config": args.config,
      "context": int(config.task.length),
      "prompts": len(examples),
      "budgets": [int(b) for b in config.methods.budgets],
      "source": source,
      "backend": jax.default_backend(),
      "machine": platform.platform(),
      "note": ("latency = wall seconds of prefill + decode (draft passes "
               "included) for the whole batch, second call; cache = slots "
               "per layer and KV head held by the target"),
      "methods": {name: {b: {k: m[k] for k in KEYS if k in m}
                         for b, m in per_b.items()}
                  for name, per_b in metrics.items()},
  }
  bench.emit(out, args.out, indent=1)
