"""ChartMimic's low-level metrics and execution rate (spec F item 6).

What ChartMimic's direct-mimic evaluation computes (github.com/ChartMimic/
ChartMimic at c9e149c), on jaxlab's sandbox:

1. The reply's code: the first ```python block (`code_checker.py`
   `extract_code`; none -> nothing runs), everything from the first
   `plt.savefig(` or `plt.show(` on removed, a PDF save appended.
2. Each script (generated and gold) executed with instrumented matplotlib:
   here ONE sandboxed job per script (`jaxlab.rewards.sandbox`, a `probe`
   whose trusted prefix is `jaxlab/rewards/chartmimic_probe.py`) logs what
   their four evaluator runs log: the drawn texts, the gridspec layout of
   each axes, the plotting functions called, the artists' colours.
3. Per pair (`*_evaluator.py` `_calculate_metrics`):
   * text (`TextEvaluator(use_position=False, use_axs=False)`): multiset
     match of the drawn strings; precision / recall / F1 (0 when either
     side drew none);
   * layout: multiset match of the axes' `(nrows, ncols, row_start,
     row_end, col_start, col_end)`;
   * type: per function `min(count_gen, count_gold)` matched, over the
     generated calls (precision) and the gold calls (recall);
   * colour: colours grouped by the function that drew them; within a
     group, the best one-to-one pairing of the shorter list into the longer
     (their `permutations` search; here the same optimum by
     `scipy.optimize.linear_sum_assignment`) under `1 - CIEDE2000 / 100`
     (hex colours, colormath's sRGB -> Lab and its `delta_e_cie2000`),
     1 for equal colour-map names, else 0; summed over groups, over the
     numbers of generated and gold colours. More than 10 colours are first
     thinned (`filter_color`: drop a colour within similarity 0.7 of an
     earlier one; their order is a set's, here sorted).
4. Aggregate (`scripts/direct_mimic/get_results.ipynb`, filter
   `code_pass`): ExecRate = scripts that ran / all charts; each score = the
   sum of its F1 over the scripts that ran / all charts (x 100); Low-Level
   = the mean of the four.

Deviations: the gold script is cut like a reply (`prepare_code`; theirs
runs it whole, its `plt.savefig` writing the PDF the text run logs: the
same texts when the save is its last plotting statement, as in the
release). Where theirs would raise or keep a stale value: an empty
generated type log or an empty gold colour log gives 0 (theirs keeps the
previous chart's value or raises ZeroDivisionError). The data F1 is
jaxlab's static one (`jaxlab.rewards.chart.fields`, +-5 % soft match over
the literal data values), which ChartMimic does not compute.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxlab.rewards import sandbox
from jaxlab.rewards.chart import fields
from jaxlab.rewards.chart import normalize

__all__ = [
    "LOW_LEVEL", "ScriptLog", "aggregate", "color_f1", "color_similarity",
    "data_f1", "delta_e_cie2000", "extract_code", "filter_colors",
    "layout_f1", "prepare_code", "probe", "run_script", "score_pair",
    "text_f1", "type_f1",
]

LOW_LEVEL = ("text", "layout", "type", "color")
_PROBE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "chartmimic_probe.py")
_FENCE = re.compile(r"```python(.*?)```", re.DOTALL)
_SAVEFIG = re.compile(r"plt\.savefig\(.*\n*", re.DOTALL)
_SHOW = re.compile(r"plt.show\(.*\n*", re.DOTALL)


def extract_code(response: str) -> str:
  """The first ```python block of a reply ("" if none), as theirs."""
  found = _FENCE.findall(response or "")
  return found[0] if found else ""


def prepare_code(code: str) -> str:
  """`code_checker.py`: from the first `plt.savefig(` / `plt.show(` on,
  everything removed (their regexes, DOTALL), stripped."""
  code = _SAVEFIG.sub("", code)
  code = _SHOW.sub("", code)
  return code.strip()


def probe(chart_name: str = "") -> dict[str, str]:
  """The sandbox probe: the instrumentation and the log-collecting call
  (`graph_*` charts take their layout evaluator's graph rule)."""
  with open(_PROBE_FILE) as f:
    prefix = f.read()
  graph = os.path.basename(chart_name).startswith("graph")
  return {"prefix": prefix, "suffix": f"__log__ = collect(graph={graph})\n"}


@dataclasses.dataclass
class ScriptLog:
  """What one script's instrumented run logged; `ran` = it executed and
  its figure saved (ChartMimic's code-pass)."""
  ran: bool
  texts: list[str] = dataclasses.field(default_factory=list)
  layout: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
  types: dict[str, int] = dataclasses.field(default_factory=dict)
  colors: list[str] = dataclasses.field(default_factory=list)
  error: str = ""


_LAYOUT_KEYS = ("nrows", "ncols", "row_start", "row_end", "col_start",
                "col_end")


def _parse_log(log: Any) -> ScriptLog:
  """The probe's JSON (untrusted: only well-formed fields kept)."""
  if not isinstance(log, dict) or not log.get("saved"):
    err = log.get("error", "") if isinstance(log, dict) else "no log"
    return ScriptLog(False, error=str(err)[:500])
  texts = [str(t) for t in log.get("texts", []) if isinstance(t, str)]
  layout = [tuple(int(d[k]) for k in _LAYOUT_KEYS)
            for d in log.get("layout", [])
            if isinstance(d, dict) and all(
                isinstance(d.get(k), int) for k in _LAYOUT_KEYS)]
  types = {str(k): int(v) for k, v in (log.get("types") or {}).items()
           if isinstance(v, int)}
  colors = [str(c) for c in log.get("colors", [])
            if isinstance(c, str) and "--" in c]
  return ScriptLog(True, texts, layout, types, filter_colors(colors))


def run_script(code: str, *, chart_name: str = "", timeout_s: float = 30.0,
               pool: sandbox.SandboxPool | None = None) -> ScriptLog:
  """Runs `code` (already `prepare_code`d) under the probe in the sandbox."""
  if not code.strip():
    return ScriptLog(False, error="no code")
  r = sandbox.render_chart(code, timeout_s=timeout_s, pool=pool,
                           probe=probe(chart_name))
  if not r.ok:
    return ScriptLog(False, error=r.error)
  return _parse_log(r.log)


# ---------------------------------------------------------------------------
# Colour similarity: colormath 3.0's sRGB -> Lab (D65, 2 deg) and
# delta_e_cie2000 (its matrix form, incl. its mean-hue rule), as
# ChartMimic's color_utils.py calls them.
# ---------------------------------------------------------------------------

_RGB_TO_XYZ = ((0.412424, 0.357579, 0.180464),
               (0.212656, 0.715158, 0.0721856),
               (0.0193324, 0.119193, 0.950444))
_D65 = (0.95047, 1.00000, 1.08883)
_CIE_E = 216.0 / 24389.0


def _lab(hex_colour: str) -> tuple[float, float, float]:
  h = hex_colour.lstrip("#")
  rgb = [int(h[i:i + 2], 16) / 255.0 for i in (0, 2, 4)]
  lin = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
         for v in rgb]
  xyz = [max(sum(m * c for m, c in zip(row, lin)), 0.0)
         for row in _RGB_TO_XYZ]
  f = []
  for v, w in zip(xyz, _D65):
    t = v / w
    f.append(t ** (1.0 / 3.0) if t > _CIE_E else 7.787 * t + 16.0 / 116.0)
  return 116.0 * f[1] - 16.0, 500.0 * (f[0] - f[1]), 200.0 * (f[1] - f[2])


def delta_e_cie2000(lab1: Sequence[float], lab2: Sequence[float]) -> float:
  """colormath's `delta_e_cie2000` (Kl = Kc = Kh = 1) of two Lab colours."""
  l1, a1, b1 = lab1
  l2, a2, b2 = lab2
  avg_lp = (l1 + l2) / 2.0
  c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
  avg_c = (c1 + c2) / 2.0
  g = 0.5 * (1 - math.sqrt(avg_c ** 7 / (avg_c ** 7 + 25.0 ** 7)))
  a1p, a2p = (1 + g) * a1, (1 + g) * a2
  c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
  avg_cp = (c1p + c2p) / 2.0
  h1p = math.degrees(math.atan2(b1, a1p)) % 360.0
  h2p = math.degrees(math.atan2(b2, a2p)) % 360.0
  avg_hp = ((360.0 if abs(h1p - h2p) > 180 else 0.0) + h1p + h2p) / 2.0
  t = (1 - 0.17 * math.cos(math.radians(avg_hp - 30))
       + 0.24 * math.cos(math.radians(2 * avg_hp))
       + 0.32 * math.cos(math.radians(3 * avg_hp + 6))
       - 0.2 * math.cos(math.radians(4 * avg_hp - 63)))
  dh = h2p - h1p
  if abs(dh) > 180:
    dh += 360.0
  if h2p > h1p:
    dh -= 720.0
  d_lp, d_cp = l2 - l1, c2p - c1p
  d_hp = 2 * math.sqrt(c2p * c1p) * math.sin(math.radians(dh) / 2.0)
  s_l = 1 + 0.015 * (avg_lp - 50) ** 2 / math.sqrt(20 + (avg_lp - 50) ** 2)
  s_c = 1 + 0.045 * avg_cp
  s_h = 1 + 0.015 * avg_cp * t
  d_ro = 30 * math.exp(-(((avg_hp - 275) / 25) ** 2))
  r_c = math.sqrt(avg_cp ** 7 / (avg_cp ** 7 + 25.0 ** 7))
  r_t = -2 * r_c * math.sin(2 * math.radians(d_ro))
  return math.sqrt((d_lp / s_l) ** 2 + (d_cp / s_c) ** 2
                   + (d_hp / s_h) ** 2
                   + r_t * (d_cp / s_c) * (d_hp / s_h))


def color_similarity(c1: str, c2: str) -> float:
  """`calculate_similarity_single`: 1 - CIEDE2000/100 (>= 0) for two hex
  colours, equality for two colour-map names, else 0."""
  if c1.startswith("#") and c2.startswith("#"):
    return max(0.0, 1 - delta_e_cie2000(_lab(c1), _lab(c2)) / 100)
  if not c1.startswith("#") and not c2.startswith("#"):
    return 1.0 if c1 == c2 else 0.0
  return 0.0


def filter_colors(colors: Sequence[str]) -> list[str]:
  """Over 10 `function--colour` entries: `filter_color` on the sorted list
  (keep an entry unless within similarity 0.7 of one kept before)."""
  colors = sorted(set(colors))
  if len(colors) <= 10:
    return colors
  kept: list[str] = []
  for c in colors:
    col = c.split("--", 1)[1]
    if all(color_similarity(col, k.split("--", 1)[1]) <= 0.7 for k in kept):
      kept.append(c)
  return kept


# ---------------------------------------------------------------------------
# Per-pair F1s.
# ---------------------------------------------------------------------------


def _prf(correct: float, n_gen: float, n_gold: float) -> dict[str, float]:
  p = correct / n_gen if n_gen else 0.0
  r = correct / n_gold if n_gold else 0.0
  return {"precision": p, "recall": r,
          "f1": 2 * p * r / (p + r) if p + r else 0.0}


def _multiset_prf(gen: Sequence[Any], gold: Sequence[Any]) -> dict:
  if not gen or not gold:
    return _prf(0, 0, 0)
  correct = sum((collections.Counter(gen) & collections.Counter(gold))
                .values())
  return _prf(correct, len(gen), len(gold))


def text_f1(gen: ScriptLog, gold: ScriptLog) -> dict[str, float]:
  return _multiset_prf(gen.texts, gold.texts)


def layout_f1(gen: ScriptLog, gold: ScriptLog) -> dict[str, float]:
  return _multiset_prf(gen.layout, gold.layout)


def type_f1(gen: ScriptLog, gold: ScriptLog) -> dict[str, float]:
  if not gen.types:
    return _prf(0, 0, 0)
  correct = sum(min(n, gold.types[k]) for k, n in gen.types.items()
                if k in gold.types)
  return _prf(correct, sum(gen.types.values()), sum(gold.types.values()))


def _best_pairing(a: list[str], b: list[str]) -> float:
  if not a or not b:
    return 0.0
  from scipy import optimize  # pylint: disable=g-import-not-at-top
  sim = np.array([[color_similarity(x, y) for y in b] for x in a])
  rows, cols = optimize.linear_sum_assignment(sim, maximize=True)
  return float(sim[rows, cols].sum())


def color_f1(gen: ScriptLog, gold: ScriptLog) -> dict[str, float]:
  def groups(cs):
    out = collections.defaultdict(list)
    for c in cs:
      fn, col = c.split("--", 1)
      out[fn].append(col)
    return out
  g1, g2 = groups(gen.colors), groups(gold.colors)
  total = sum(_best_pairing(g1.get(k, []), g2.get(k, []))
              for k in set(g1) | set(g2))
  return _prf(total, len(gen.colors), len(gold.colors))


def data_f1(gen_code: str, gold_code: str) -> float:
  """jaxlab's static data-value F1 (+-5 %; 0 if either does not parse)."""
  gen_calls = normalize.normalize_code(gen_code)
  gold_calls = normalize.normalize_code(gold_code)
  if gen_calls is None or gold_calls is None:
    return 0.0
  return fields.numeric_soft_f1(fields.extract_data_values(gen_calls),
                                fields.extract_data_values(gold_calls))


def score_pair(gen: ScriptLog, gold: ScriptLog) -> dict[str, float]:
  """The four low-level F1s of one generated script against its gold
  (all 0 when the generated one did not run)."""
  if not gen.ran:
    return {k: 0.0 for k in LOW_LEVEL}
  return {"text": text_f1(gen, gold)["f1"],
          "layout": layout_f1(gen, gold)["f1"],
          "type": type_f1(gen, gold)["f1"],
          "color": color_f1(gen, gold)["f1"]}


def aggregate(per_chart: Sequence[dict[str, Any]]) -> dict[str, float]:
  """ChartMimic's table row (x 100): ExecRate, the four scores and their
  mean (Low-Level), each summed over the charts whose code ran and divided
  by all charts; each entry of `per_chart` has `ran` and the four F1s (and
  optionally `data`, `visual`, averaged over all charts)."""
  n = len(per_chart)
  if not n:
    raise ValueError("no charts to aggregate")
  ran = [c for c in per_chart if c["ran"]]
  out = {"exec_rate": 100.0 * len(ran) / n}
  for k in LOW_LEVEL:
    out[k] = 100.0 * sum(float(c[k]) for c in ran) / n
  out["low_level"] = sum(out[k] for k in LOW_LEVEL) / len(LOW_LEVEL)
  for k in ("data", "visual"):
    if all(k in c for c in per_chart):
      out[k] = 100.0 * sum(float(c[k]) for c in per_chart) / n
  return out
