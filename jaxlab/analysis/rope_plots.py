"""Figures of the MrRoPE miniature (paper D): metric vs length, learning
curves and the cumulative scale of every RoPE scaling (MrRoPE Fig. 3)."""

from __future__ import annotations

import numpy as np

from jaxlab.analysis import figures
from jaxlab.nn import rope


def plot_metric(summary, metric, lengths, path, log_y=False) -> str:
  """Mean ± std of `summary[metric][method]` vs evaluation length."""
  with figures.figure(path, figsize=(6, 3.6)) as (_, ax):
    for method, v in summary[metric].items():
      ax.errorbar(lengths, v["mean"], yerr=v["std"], marker="o", capsize=2,
                  label=method)
    ax.set_xscale("log", base=2)
    if log_y:
      ax.set_yscale("log")
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(metric)
    ax.legend(fontsize=7, ncol=2)
  return path


def plot_learning_curves(per_seed, path: str) -> str:
  """Held-out answer exact match / digit accuracy vs step, one line per seed."""
  with figures.figure(path, figsize=(5, 3.2)) as (_, ax):
    for rec in per_seed:
      curve = rec.get("learning_curve") or []
      if curve:
        steps = [r["step"] for r in curve]
        ax.plot(steps, [r["answer_exact"] for r in curve], marker="o",
                label=f"seed {rec['seed']} exact")
        ax.plot(steps, [r["answer_acc"] for r in curve], ls="--",
                label=f"seed {rec['seed']} digit acc.")
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out answer accuracy (1x)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
  return path


def plot_cumulative_scale(path: str, *, head_dim: int = 128,
                          base: float = 1e4, original: int = 4096,
                          factor: float = 16.0) -> str:
  """MrRoPE Fig. 3 (qualitative): s_i and lambda_i for every method."""
  kw = dict(head_dim=head_dim, base=base, factor=factor,
            original_max_position=original)
  with figures.figure(path, figsize=(10, 3.6), ncols=2) as (fig, (a1, a2)):
    for m in ("pi", "ntk", "yarn", "yarn_rotation", "llama3", "mrope_uni",
              "mrope_pro"):
      a1.plot(rope.cumulative_scale(m, **kw), label=m)
      a2.plot(np.log(rope.step_ratio(m, **kw)), label=m)
    a1.set_yscale("log")
    a1.set_xlabel("pair i")
    a1.set_ylabel("cumulative scale s_i")
    a2.set_xlabel("pair i")
    a2.set_ylabel("log lambda_i = log s_{i+1}/s_i")
    a1.legend(fontsize=7)
    fig.suptitle(f"D={head_dim}, b={base:g}, L={original}, S={factor:g}")
  return path
