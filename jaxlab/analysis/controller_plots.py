"""The controller miniature's figure: exact accuracy vs instance length."""

from __future__ import annotations

import numpy as np

from jaxlab.analysis import figures
from jaxlab.evals.controller_eval import VARIANT_LABELS


def plot_accuracy_vs_length(out: dict, config, path: str) -> str:
  """Exact accuracy vs instance length per task, one line per variant."""
  tasks = sorted({r["task"] for r in out["records"]})
  names = ["train"] + [str(n) for n in config.test_lengths]
  xs = out["lengths"]
  with figures.figure(path, figsize=(5 * len(tasks), 3.6), ncols=len(tasks),
                      squeeze=False) as (_, axes):
    for ax, task in zip(axes[0], tasks):
      for variant in [v for v in VARIANT_LABELS]:
        recs = [r for r in out["records"]
                if r["task"] == task and r["variant"] == variant]
        if not recs:
          continue
        vals = np.array([[r[f"acc_{n}"] for n in names] for r in recs]) * 100
        sd = vals.std(0, ddof=1) if len(recs) > 1 else np.zeros(len(names))
        ax.errorbar(xs, vals.mean(0), yerr=sd, marker="o", capsize=3,
                    label=VARIANT_LABELS[variant])
      ax.set(title=f"{task} (n seeds = {len(config.seeds)})",
             xlabel="instance length n (train: mean of the training range)",
             ylabel="exact accuracy (%)", xscale="log", ylim=(-3, 103))
      ax.minorticks_off()
      ax.set_xticks(xs)
      ax.set_xticklabels([str(x) for x in xs])
      ax.legend(fontsize=8)
  return path
