"""StableToken's figure: UED % per noise type and variant (mean ± std)."""

from __future__ import annotations

import json

import numpy as np

from jaxlab.analysis import figures
from jaxlab.objectives.stabletoken_train import LABELS


def plot(summary: dict[str, dict[str, list[float]]], kinds: list[str],
         path: str) -> str:
  """Bars of UED % per noise type (and their average) per variant."""
  variants = list(summary)
  cols = kinds + ["avg"]
  width = 0.8 / max(len(variants), 1)
  with figures.figure(path, figsize=(9, 3.6)) as (_, ax):
    for j, v in enumerate(variants):
      means = [np.mean(summary[v][f"ued_{c}"]) for c in cols]
      stds = [np.std(summary[v][f"ued_{c}"], ddof=1)
              if len(summary[v][f"ued_{c}"]) > 1 else 0.0 for c in cols]
      ax.bar(np.arange(len(cols)) + j * width, means, width, yerr=stds,
             label=LABELS.get(v, v), capsize=2)
    ax.set_xticks(np.arange(len(cols)) + width * (len(variants) - 1) / 2)
    ax.set_xticklabels(cols)
    ax.set_ylabel("UED % (lower is more stable)")
    ax.set_title("Token stability on held-out noisy copies (mean ± std over "
                 "seeds)")
    ax.legend(fontsize=8)
  return path


def plot_from_results(results_json: str, path: str) -> str:
  """The UED plot from a (merged) results file, e.g. `plot_from_results(
  'docs/results/stabletoken.json', 'docs/papers/stabletoken.png')`."""
  with open(results_json) as f:
    res = json.load(f)
  table = next(t for t in res["tables"] if t["id"] == "ued")
  inv = {label: v for v, label in LABELS.items()}
  summary = {inv.get(r["label"], r["label"]):
             {k: c["values"] for k, c in r["cells"].items()}
             for r in table["rows"]}
  kinds = [c["key"][4:] for c in table["columns"]
           if c["key"].startswith("ued_") and c["key"] != "ued_avg"]
  return plot(summary, kinds, path)
