"""KV-cache / prompt compression benchmark (paper M), one JSON object.

    python -m jaxlab.experiments.bench kv_compression [--config=tiny]
        [--workdir=DIR] [--out=FILE]

The target and draft are seed 0 of a `jaxlab/configs/speckv.py` run
(`DIR/seed0/{target,draft}.npz` from `python -m jaxlab.main
--config=jaxlab/configs/speckv.py:... --workdir=DIR`); without them they are
trained here with the same config. The experiment already times seed 0
(`evaluate(..., timing=True)`); its `DIR/seed0/eval.json` is read unless
`--fresh`; otherwise the experiment runs here for seed 0
(`jaxlab.experiments.run_experiment`, the launcher's) in a scratch workdir
holding DIR's trained models, which it reloads when they were trained with
the same config. Every method of `methods.names` (full,
draft, SnapKV, SpecKV, SpecPC, SpecKV-PC, random, last-N) answers the
held-out RULER-like prompts at each budget C_max: exact match, part recall,
the target's peak and decode-time cache (slots per layer and KV head), and
the wall time of prefill + decode (draft passes included) of a second call
(the first compiles) relative to full's. Timings on a shared CPU are noisy.
"""

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile

import jax

from jaxlab import experiments
from jaxlab.configs import speckv as speckv_config
from jaxlab.data.word_tokenizer import WordTokenizer
from jaxlab.evals import ruler_task
from jaxlab.experiments import bench
from jaxlab.io import stages

KEYS = ("exact", "part_recall", "exact_q_first", "exact_q_last",
        "peak_cache", "decode_cache", "prefill_cache", "latency_s",
        "latency_vs_full")


def _copy_models(src: str, dst: str) -> None:
  """The .npz stages of `src` (with their `jaxlab.io.stages` keys) to `dst`."""
  os.makedirs(dst, exist_ok=True)
  for name in os.listdir(src):
    if name.endswith((".npz", ".npz" + stages.SUFFIX)):
      shutil.copy(os.path.join(src, name), dst)


def evaluate_here(config, seed: int, workdir: str) -> dict:
  """Seed `seed`'s timed evaluation (eval.json's "methods") from a run of
  `config` for that seed only, launched here in a scratch workdir
  (`jaxlab.experiments.run_experiment`, the launcher's). The trained models
  of `workdir/seed{seed}/` (when given) are copied there first, so the run
  reloads them when they are current (`jaxlab.io.stages`), and the run's
  models are copied back; `workdir`'s results stay as they are."""
  run_config = config.copy_and_resolve_references()
  with run_config.unlocked():
    run_config.seeds = (int(seed),)
  scratch = tempfile.mkdtemp(prefix="kv_compression_")
  dst = os.path.join(scratch, f"seed{seed}")
  os.makedirs(dst)
  src = os.path.join(workdir, f"seed{seed}") if workdir else ""
  if src and os.path.isdir(src):
    _copy_models(src, dst)
  try:
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON alone
      experiments.run_experiment(run_config, scratch)
    if src:
      _copy_models(dst, src)
    with open(os.path.join(dst, "eval.json")) as f:
      return json.load(f)["methods"]
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="jaxlab.experiments.bench kv_compression")
  parser.add_argument("--config", default="tiny")
  parser.add_argument("--workdir", default="")
  parser.add_argument("--out", default="")
  parser.add_argument("--fresh", action="store_true",
                      help="re-evaluate even if DIR/seed0/eval.json exists")
  args = parser.parse_args(argv)
  config = speckv_config.get_config(args.config)
  seed = int(config.seeds[0])
  examples = ruler_task.held_out(WordTokenizer(), config)
  done = os.path.join(args.workdir, f"seed{seed}", "eval.json")
  metrics, source = None, "evaluated here"
  if args.workdir and os.path.exists(done) and not args.fresh:
    with open(done) as f:
      metrics = json.load(f)["methods"]
    source = f"the experiment's timed evaluation ({done})"
  if metrics is None or "latency_s" not in next(iter(
      next(iter(metrics.values())).values())):
    metrics = evaluate_here(config, seed, args.workdir)
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
