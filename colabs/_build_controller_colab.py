"""Builds colabs/controller.ipynb (run: python colabs/_build_controller_colab.py)."""

import os
import sys

import nbformat

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", """# Emergent discrete controller modules (paper I)

A `ControllerBlock` at every p-th decoder block keeps a small program state
(registers, flags), picks one of five operations (ASSIGN, ADD, COMPARE,
BRANCH, NOOP) with a Gumbel-softmax whose temperature anneals with the
training step, executes it on the state, and writes the state change back
into the residual stream (`jaxlab.models.controller`). This notebook shows
the simulator's opcode traces, the temperature schedule, and trains vanilla
and controller models on short algorithmic instances, testing on longer
ones (`jaxlab/experiments/controller.py`)."""),
    ("code", """import os, json
import numpy as np
from IPython.display import Image, display
from jaxlab import main as launcher
from jaxlab.configs import controller as controller_configs
from jaxlab.data.synthetic import algorithmic as alg
from jaxlab.nn import gumbel"""),
    ("md", "## Opcode traces from the simulator"),
    ("code", """prog, out = alg.simulate_bubble_sort([3, 1, 2])
print("bubble sort [3, 1, 2] ->", out)
print("trace:", [(alg.OPS[op], i, j) for op, i, j in prog])
prog, ans = alg.simulate_sum([7, 5, 9])
print("sum mod 10 of [7, 5, 9] ->", ans, "| trace:", [alg.OPS[p[0]] for p in prog])
ex = alg.sort(__import__("random").Random(0), 5)
print("sort example tokens:", ex.tokens)
print("per-token ops:      ", [alg.OPS[o][:3] for o in ex.token_ops])"""),
    ("md", "## The temperature schedule: τ(t) = max(τ_min, τ₀ e^(−γt))"),
    ("code", """for t in (0, 150, 300, 600, 900):
  print(f"step {t:4d}: tau = {float(gumbel.temperature(t, tau0=1.0, tau_min=0.1, anneal_steps=600)):.3f}")"""),
    ("md", "## Train short, test long"),
    ("code", """config = controller_configs.get_config(PRESET)
out = launcher.run_experiment(config, WORKDIR)
for r in out["records"]:
  print(f'{r["task"]:9s} {r["variant"]:8s} seed {r["seed"]}: ' + " ".join(
      f"{k}={v:.2f}" for k, v in r.items() if k.startswith(("acc", "align"))))
for r in out["flops"]:
  print(f'p={r["p"]}: FLOP overhead formula {100 * r["formula"]:.1f}% '
        f'counted {100 * r["counted"]:.1f}% measured {100 * r["measured"]:.1f}%')"""),
    ("code", """results = json.load(open(os.path.join(WORKDIR, "results.json")))
print([t["id"] for t in results["tables"]])
display(Image(os.path.join(WORKDIR, "accuracy_vs_length.png")))"""),
]


def build() -> nbformat.NotebookNode:
  # The test runs "smoke"; "tiny" is the CPU default; "" the docs table.
  return _setup_cell.notebook(CELLS, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "controller.ipynb")
