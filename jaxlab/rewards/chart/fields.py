"""Field extractors, matchers and R_text of MSRL chart rewards (spec F item 4).

* Extractors over the canonical `PlotCall`s of `normalize.normalize_code`:
  data values, chart types, layout (subplot grid + positions), text elements,
  colours (ChartMimic's low-level dimensions plus data).
* Matchers: +-5 % soft numeric F1, exact-string multiset F1, 1 - normalised
  edit distance (`edit_similarity`, the one implementation in
  `jaxlab.evals.text`).
* `text_reward_fields` / `text_reward`: R_text, per dimension and weighted.

Values not reported by the paper are marked [inferred].
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxlab.evals import text as text_metrics
from jaxlab.rewards.chart import normalize

__all__ = [
    "TEXT_DIMENSIONS", "edit_similarity", "exact_f1", "extract_chart_types",
    "extract_colors", "extract_data_values", "extract_layout", "extract_text",
    "levenshtein", "numeric_soft_f1", "text_reward", "text_reward_fields",
    "text_score",
]

# The one edit distance of the library (rapidfuzz), under the names R_text
# uses.
levenshtein = text_metrics.levenshtein
edit_similarity = text_metrics.edit_similarity

# ----------------------------------------------------------------------------
# Field extractors.
# ----------------------------------------------------------------------------

_DATA_KEYS = {"bar": ("height",), "barh": ("width",), "plot": ("y",),
              "scatter": ("x", "y"), "pie": ("x",), "hist": ("x",),
              "fill_between": ("y1", "y2"), "stackplot": ("y",),
              "boxplot": ("x",), "violinplot": ("dataset",),
              "step": ("y",), "errorbar": ("y",), "stem": ("y",)}


def _flat_numbers(v: Any) -> list[float]:
  if isinstance(v, bool):
    return []
  if isinstance(v, (int, float)):
    return [float(v)] if math.isfinite(v) else []
  if isinstance(v, (list, tuple)):
    return [x for e in v for x in _flat_numbers(e)]
  if isinstance(v, dict):
    return [x for e in v.values() for x in _flat_numbers(e)]
  return []


def _flat_strings(v: Any) -> list[str]:
  if isinstance(v, str):
    return [v]
  if isinstance(v, (list, tuple)):
    return [x for e in v for x in _flat_strings(e)]
  return []


def extract_data_values(calls: Sequence[normalize.PlotCall]) -> list[float]:
  """Numbers plotted as data (bar heights, line y, scatter x/y, pie, ...)."""
  out = []
  for c in calls:
    for key in _DATA_KEYS.get(c.method, ()):
      out.extend(_flat_numbers(c.kwargs.get(key)))
  return out


def extract_chart_types(calls: Sequence[normalize.PlotCall]) -> list[str]:
  return [c.method for c in calls if c.method in normalize.PLOT_METHODS]


def extract_layout(calls: Sequence[normalize.PlotCall]
                   ) -> list[tuple[int, int, int, int]]:
  """(nrows, ncols, row, col) of every subplot that holds a plot call."""
  seen = []
  for c in calls:
    if c.method in normalize.PLOT_METHODS and c.axes is not None:
      t = (c.axes.nrows, c.axes.ncols, c.axes.row, c.axes.col)
      if t not in seen:
        seen.append(t)
  return seen


_TEXT_FIELDS = {"set_title": ("label",), "set_xlabel": ("xlabel",),
                "set_ylabel": ("ylabel",), "suptitle": ("t",),
                "set_xticklabels": ("labels",), "set_yticklabels": ("labels",),
                "set_xticks": ("labels",), "set_yticks": ("labels",),
                "legend": ("labels",), "text": ("s",), "annotate": ("text",)}


def extract_text(calls: Sequence[normalize.PlotCall]) -> dict[str, str]:
  """Text elements keyed by (subplot, role): title, labels, legend, ticks."""
  out: dict[str, list[str]] = {}
  for c in calls:
    pos = "fig" if c.axes is None else f"{c.axes.row},{c.axes.col}"
    keys = _TEXT_FIELDS.get(c.method, ())
    if c.method in normalize.PLOT_METHODS:
      keys = ("label", "labels")   # series labels feed the legend
      role = "legend"
    else:
      role = c.method.replace("set_", "")
      if role in ("xticks", "xticklabels"):
        role = "xticklabels"
      if role in ("yticks", "yticklabels"):
        role = "yticklabels"
    for k in keys:
      strings = _flat_strings(c.kwargs.get(k))
      if strings:
        out.setdefault(f"{pos}:{role}", []).extend(strings)
  return {k: "\n".join(v) for k, v in out.items()}


def _to_hex(colour: Any) -> str | None:
  if not isinstance(colour, (str, tuple, list)):
    return None
  try:
    from matplotlib import colors as mcolors  # pylint: disable=g-import-not-at-top
    return mcolors.to_hex(colour).lower()
  except (ValueError, TypeError):
    return str(colour).strip().lower() if isinstance(colour, str) else None


def extract_colors(calls: Sequence[normalize.PlotCall]) -> list[str]:
  """Explicit colours of plot calls, normalised to '#rrggbb'."""
  out = []
  for c in calls:
    if c.method not in normalize.PLOT_METHODS:
      continue
    for key in ("color", "facecolor"):
      v = c.kwargs.get(key)
      if v is None:
        continue
      if isinstance(v, list) or (isinstance(v, tuple) and v and isinstance(
          v[0], (str, tuple, list))):
        items = list(v)
      else:
        items = [v]
      for item in items:
        h = _to_hex(item)
        if h:
          out.append(h)
  return out


# ----------------------------------------------------------------------------
# Matchers. Edit distances come from `jaxlab.evals.text` (rapidfuzz).
# ----------------------------------------------------------------------------


def _f1(matched: int, n_pred: int, n_gt: int) -> float:
  if n_pred == 0 and n_gt == 0:
    return 1.0
  if matched == 0:
    return 0.0
  p, r = matched / n_pred, matched / n_gt
  return 2 * p * r / (p + r)


def numeric_soft_f1(pred: Sequence[float], gt: Sequence[float], *,
                    rel_tol: float = 0.05, abs_tol: float = 1e-9) -> float:
  """F1 of a one-to-one matching where |p - g| <= rel_tol * |g| (+ abs_tol).

  Greedy: each ground-truth value (in order) takes the closest unused
  prediction within tolerance. Order-free, so a permuted series scores 1.
  """
  used = [False] * len(pred)
  matched = 0
  for g in gt:
    best, best_err = -1, math.inf
    for i, p in enumerate(pred):
      err = abs(p - g)
      if not used[i] and err <= rel_tol * abs(g) + abs_tol and err < best_err:
        best, best_err = i, err
    if best >= 0:
      used[best] = True
      matched += 1
  return _f1(matched, len(pred), len(gt))


def exact_f1(pred: Sequence[Any], gt: Sequence[Any]) -> float:
  """Multiset F1 with exact (hard) equality of items."""
  matched = sum((Counter(pred) & Counter(gt)).values())
  return _f1(matched, len(pred), len(gt))


def text_score(pred: dict[str, str], gt: dict[str, str]) -> float:
  """Mean edit similarity over the union of text keys (missing key -> 0)."""
  keys = set(pred) | set(gt)
  if not keys:
    return 1.0
  return float(np.mean([edit_similarity(pred.get(k, ""), gt.get(k, ""))
                        if k in pred and k in gt else 0.0 for k in keys]))


TEXT_DIMENSIONS = ("data", "type", "layout", "text", "color")


def text_reward_fields(pred_code: str, gt_code: str, *,
                       rel_tol: float = 0.05) -> dict[str, float]:
  """Per-dimension scores of R_text (spec F item 4); all 0 if unparseable."""
  gt_calls = normalize.normalize_code(gt_code)
  if gt_calls is None:
    raise ValueError("the ground-truth code does not parse")
  pred_calls = normalize.normalize_code(pred_code)
  if pred_calls is None:
    return {d: 0.0 for d in TEXT_DIMENSIONS}
  return {
      "data": numeric_soft_f1(extract_data_values(pred_calls),
                              extract_data_values(gt_calls), rel_tol=rel_tol),
      "type": exact_f1(extract_chart_types(pred_calls),
                       extract_chart_types(gt_calls)),
      "layout": exact_f1(extract_layout(pred_calls), extract_layout(gt_calls)),
      "text": text_score(extract_text(pred_calls), extract_text(gt_calls)),
      "color": exact_f1(extract_colors(pred_calls), extract_colors(gt_calls)),
  }


def text_reward(pred_code: str, gt_code: str, *,
                weights: dict[str, float] | None = None,
                rel_tol: float = 0.05) -> float:
  """R_text: weighted mean of the five dimensions ([inferred] equal)."""
  fields = text_reward_fields(pred_code, gt_code, rel_tol=rel_tol)
  w = weights or {d: 1.0 for d in TEXT_DIMENSIONS}
  unknown = set(w) - set(TEXT_DIMENSIONS)
  if unknown:
    raise ValueError(f"unknown text dimensions {sorted(unknown)}; valid: "
                     f"{', '.join(TEXT_DIMENSIONS)}")
  total = sum(w.values())
  return sum(w[d] * fields[d] for d in w) / total if total else 0.0
