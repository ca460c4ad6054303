"""Controller-module miniature (paper I, "CPU miniature"): jaxlab/configs/controller.py.

Per task and seed, trains vanilla / soft (τ = 1) / Gumbel-annealed models on
short instances with the trainer's step (`StepRunner`, loss "controller"),
then measures sequence-level exact accuracy at the training lengths and at
each test length (teacher-forced argmax = greedy exact match), the trace
alignment of the executed ops with the simulator's opcodes, the accuracy with
the controllers knocked out (NOOP everywhere), and the FLOP overhead:
counted (`controller_forward_flops`), measured (XLA cost analysis of the
compiled forward) and the spec's formula (1/(2p))(d_s/D)^2.
Writes WORKDIR/results.json (tables: accuracy, controller, flops),
accuracy_vs_length.png and table.md.
"""

from __future__ import annotations

import os
import time

import numpy as np

from jaxlab.analysis.controller_plots import plot_accuracy_vs_length
from jaxlab.data.synthetic import algorithmic as alg
from jaxlab.data.synthetic.controller_data import eval_sets, pad_lengths  # pylint: disable=unused-import
from jaxlab.evals.controller_eval import (  # pylint: disable=unused-import
    VARIANT_LABELS, evaluate, flop_rows, model_config)
from jaxlab.experiments import log as log_lib
from jaxlab.experiments import results as results_lib
from jaxlab.experiments.controller.train import loss_config, train_variant  # pylint: disable=unused-import

def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  log = log_lib.logger("controller")
  tasks = [t for t in config.tasks.split(",") if t]
  # A tuple of registered names (a comma-separated string still works).
  variants = [v.strip() for v in (config.variants.split(",")
              if isinstance(config.variants, str) else config.variants)
              if v.strip()]
  for t in tasks:
    alg.TASKS.get(t)
  lengths = ["train"] + [str(n) for n in config.test_lengths]
  records = []
  for task in tasks:
    sets = eval_sets(config, task)
    for seed in config.seeds:
      for variant in variants:
        model, last = train_variant(config, task, variant, int(seed), log)
        rec = {"task": task, "variant": variant, "seed": int(seed),
               "final_task_loss": last.get("task_loss")}
        for name in lengths:
          ev = evaluate(model, sets[name], int(config.eval_batch_size))
          rec[f"acc_{name}"] = ev["acc"]
          if "align" in ev:
            rec[f"align_{name}"] = ev["align"]
            rec[f"entropy_{name}"] = ev["entropy"]
        if variant != "vanilla":
          ko = evaluate(model, sets["train"], int(config.eval_batch_size),
                        knockout=True)
          rec["acc_knockout"] = ko["acc"]
          rec["knockout_drop"] = rec["acc_train"] - ko["acc"]
        rec["aul"] = float(np.mean([rec[f"acc_{n}"] for n in lengths]))
        records.append(rec)
        log(f"{task}/{variant}/seed{seed}: " + " ".join(
            f"{k}={v:.3f}" for k, v in rec.items() if isinstance(v, float)))
  flops = flop_rows(config)
  log(f"flops: {flops}")
  out = {"records": records, "flops": flops,
         "lengths": [int(np.mean(config.train_lengths))] +
                    [int(n) for n in config.test_lengths]}
  tables, comparisons = results_tables(out, config)
  results_lib.write(workdir, "controller", tables=tables,
                    comparisons=comparisons, extra=out, config=config,
                    start_time=t0)
  plot_accuracy_vs_length(out, config,
                          os.path.join(workdir, "accuracy_vs_length.png"))
  return out


def _row(rec) -> str:
  return f"{rec['task']} / {VARIANT_LABELS.get(rec['variant'], rec['variant'])}"


def results_tables(out: dict, config) -> tuple[list, list]:
  lo, hi = min(config.train_lengths), max(config.train_lengths)
  acc_cols = [results_lib.Column("acc_train", f"acc n={lo}-{hi} (train)", 1,
                                 100)]
  acc_cols += [results_lib.Column(f"acc_{n}", f"acc n={n}", 1, 100)
               for n in config.test_lengths]
  acc_cols.append(results_lib.Column("aul", "AUL", 1, 100))
  acc = results_lib.Table(
      "accuracy", "Sequence-level exact accuracy (%) vs length; AUL = mean "
      "over the evaluated lengths", acc_cols, row_label="task / model")
  last = str(config.test_lengths[-1])
  ctl_cols = [results_lib.Column("align_train", "trace alignment n=train",
                                 1, 100),
              results_lib.Column(f"align_{last}",
                                 f"trace alignment n={last}", 1, 100),
              results_lib.Column("acc_knockout", "acc knocked out (train n)",
                                 1, 100),
              results_lib.Column("knockout_drop", "knockout drop", 1, 100),
              results_lib.Column("entropy_train", "selector entropy (nats)",
                                 3)]
  ctrl = results_lib.Table(
      "controller", "Controllers: executed op vs simulator opcode, and the "
      "test-time knockout (NOOP everywhere)", ctl_cols,
      row_label="task / model")
  for rec in out["records"]:
    acc.add_seed(_row(rec), rec["seed"],
                 {c.key: rec[c.key] for c in acc_cols if c.key in rec})
    if rec["variant"] != "vanilla":
      ctrl.add_seed(_row(rec), rec["seed"],
                    {c.key: rec[c.key] for c in ctl_cols if c.key in rec})
  flops = results_lib.Table(
      "flops", "FLOP overhead of the controllers (forward, % of the "
      f"decoder's, T = {config.flops_seq_len})",
      [results_lib.Column("formula", "formula (1/(2p))(d_s/D)²", 1, 100,
                          spread=False),
       results_lib.Column("counted", "counted (matmuls)", 1, 100,
                          spread=False),
       results_lib.Column("measured", "measured (XLA cost analysis)", 1,
                          100, spread=False)], row_label="p")
  for r in out["flops"]:
    flops.add_seed(f"p={r['p']}", None,
                   {k: r[k] for k in ("formula", "counted", "measured")})
  comparisons = []
  tasks = sorted({r["task"] for r in out["records"]})
  variants = {r["variant"] for r in out["records"]}
  for task in tasks:
    lab = lambda v, task=task: f"{task} / {VARIANT_LABELS[v]}"  # pylint: disable=g-long-lambda
    for a, b in (("gumbel", "vanilla"), ("gumbel", "soft")):
      if a in variants and b in variants:
        for col in (f"acc_{last}", "aul"):
          comparisons.append(results_lib.Comparison("accuracy", col,
                                                    lab(a), lab(b)))
  return [acc, ctrl, flops], comparisons
