"""Experiment "train": the generic trainer on `config.model` / `config.data`.

Writes `WORKDIR/results.json` with the final (train and eval) metrics and a
loss-curve PNG.
"""

import json
import os
from typing import Any

import jax

from jaxlab.train import metrics as metrics_lib
from jaxlab.train import trainer


def plot_loss(workdir: str) -> str | None:
  """Saves WORKDIR/loss.png from metrics.jsonl (None if nothing logged)."""
  rows = metrics_lib.read_metrics(workdir)
  tr = [(r["step"], r["loss"]) for r in rows if "loss" in r]
  ev = [(r["step"], r["eval/loss"]) for r in rows if "eval/loss" in r]
  if not tr:
    return None
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(5, 3.2))
  ax.plot(*zip(*tr), label="train")
  if ev:
    ax.plot(*zip(*ev), "o-", label="eval")
  ax.set_xlabel("step")
  ax.set_ylabel("loss (nats/token)")
  ax.legend()
  fig.tight_layout()
  path = os.path.join(workdir, "loss.png")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def run(config, workdir: str) -> dict[str, Any]:
  out = trainer.train(config, workdir)
  out.pop("train_state", None)
  rows = metrics_lib.read_metrics(workdir)
  losses = [r["loss"] for r in rows if "loss" in r]
  if losses:
    out["first_logged_loss"] = losses[0]
  # Only process 0 writes: every process of a multi-host run shares WORKDIR.
  if not out["preempted"] and jax.process_index() == 0:
    out["plot"] = plot_loss(workdir)
    with open(os.path.join(workdir, "results.json"), "w") as f:
      json.dump(out, f, indent=2)
  return out
