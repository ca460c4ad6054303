"""MSRL chart-to-code rewards: textual, visual and execution (spec F item 4).

R = w_t * R_text + w_v * R_vis + w_e * R_exec, with a two-stage curriculum
(stage 1: w_v = 0; stage 2: w_v > 0, spec F item 5).

* `normalize_code` parses matplotlib code with `ast` (never executes it),
  resolves variables to literals, maps `plt.*` calls onto the current axes'
  methods (`plt.title` -> `set_title`, ...), and binds positional arguments
  to keyword names, giving a list of canonical `PlotCall`s.
* Field extractors over those calls: data values, chart types, layout
  (subplot grid + positions), text elements, colours (ChartMimic's low-level
  dimensions plus data, spec F item 4).
* Matchers: +-5 % soft numeric F1, exact-string multiset F1, 1 - normalised
  edit distance.
* `visual_reward`: render (in the sandbox) and compare with a pluggable judge
  (`JUDGES`; default "ssim", a numpy SSIM; an MLLM judge can be registered).
* `exec_reward`: 1 if the code renders a figure in the sandbox.
* `ChartRewardConfig`, `chart_group_reward` (a group reward fn), and
  `CurriculumConfig` / `stage_for_step`.

Values not reported by the paper are marked [inferred] and are config fields.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxlab import registry
from jaxlab.rewards import sandbox

# ----------------------------------------------------------------------------
# Code extraction and AST normalisation.
# ----------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(text: str, *, require_fence: bool = False) -> str | None:
  """The last ```python``` block of a completion (or the text itself).

  MSRL's R_exec uses the extracted block [notes]; `require_fence=True` makes
  a completion without one score 0 instead of being run as-is.
  """
  blocks = _FENCE_RE.findall(text)
  if blocks:
    return blocks[-1]
  return None if require_fence else text


class _Unknown:
  def __repr__(self):
    return "UNKNOWN"


UNKNOWN = _Unknown()


@dataclasses.dataclass(frozen=True)
class AxesRef:
  """A subplot: grid shape and 0-based (row, col) position."""
  nrows: int = 1
  ncols: int = 1
  row: int = 0
  col: int = 0


@dataclasses.dataclass
class _AxesGrid:
  nrows: int
  ncols: int

  def at(self, idx) -> AxesRef | _Unknown:
    if isinstance(idx, tuple) and len(idx) == 2:
      r, c = idx
    elif isinstance(idx, int):
      r, c = (idx, 0) if self.ncols == 1 else (
          (0, idx) if self.nrows == 1 else divmod(idx, self.ncols))
    else:
      return UNKNOWN
    if not (isinstance(r, int) and isinstance(c, int)):
      return UNKNOWN
    r, c = r % self.nrows, c % self.ncols
    return AxesRef(self.nrows, self.ncols, r, c)


@dataclasses.dataclass(frozen=True)
class _Row:
  grid: _AxesGrid
  row: int

  def at(self, c):
    return self.grid.at((self.row, c)) if isinstance(c, int) else UNKNOWN


@dataclasses.dataclass
class PlotCall:
  """A canonical call on an axes (or the figure, axes=None)."""
  method: str
  axes: AxesRef | None
  kwargs: dict[str, Any]


# Positional parameter names of the methods we canonicalise (matplotlib's).
_SIGNATURES = {
    "bar": ("x", "height", "width", "bottom"),
    "barh": ("y", "width", "height", "left"),
    "plot": ("x", "y", "fmt"),
    "scatter": ("x", "y", "s", "c"),
    "pie": ("x", "explode", "labels", "colors"),
    "hist": ("x", "bins"),
    "fill_between": ("x", "y1", "y2"),
    "stackplot": ("x", "y"),
    "boxplot": ("x",),
    "violinplot": ("dataset",),
    "step": ("x", "y"),
    "errorbar": ("x", "y", "yerr", "xerr"),
    "stem": ("x", "y"),
    "set_title": ("label",),
    "set_xlabel": ("xlabel",),
    "set_ylabel": ("ylabel",),
    "suptitle": ("t",),
    "set_xticks": ("ticks", "labels"),
    "set_yticks": ("ticks", "labels"),
    "set_xticklabels": ("labels",),
    "set_yticklabels": ("labels",),
    "legend": ("labels",),
    "set_xlim": ("left", "right"),
    "set_ylim": ("bottom", "top"),
    "text": ("x", "y", "s"),
    "annotate": ("text", "xy"),
    "axhline": ("y",),
    "axvline": ("x",),
}
PLOT_METHODS = frozenset({
    "bar", "barh", "plot", "scatter", "pie", "hist", "fill_between",
    "stackplot", "boxplot", "violinplot", "step", "errorbar", "stem",
    "imshow", "contour", "contourf", "hexbin", "quiver", "axhline",
    "axvline"})
# plt.<name> -> axes method.
_PLT_TO_AXES = {"title": "set_title", "xlabel": "set_xlabel",
                "ylabel": "set_ylabel", "xticks": "set_xticks",
                "yticks": "set_yticks", "xlim": "set_xlim",
                "ylim": "set_ylim", "xscale": "set_xscale",
                "yscale": "set_yscale"}
_KW_ALIASES = {"c": "color", "lw": "linewidth", "ls": "linestyle",
               "colors": "color", "ec": "edgecolor", "fc": "facecolor",
               "label": "label", "labels": "labels", "tick_label": "labels"}
_DATA_KEYS = {"bar": ("height",), "barh": ("width",), "plot": ("y",),
              "scatter": ("x", "y"), "pie": ("x",), "hist": ("x",),
              "fill_between": ("y1", "y2"), "stackplot": ("y",),
              "boxplot": ("x",), "violinplot": ("dataset",),
              "step": ("y",), "errorbar": ("y",), "stem": ("y",)}
_FMT_COLOURS = "bgrcmykw"


def _plot_fmt_kwargs(kwargs: dict[str, Any]) -> None:
  """plot(y), plot(y, 'r-') and plot(x, y, fmt) -> keywords."""
  x, y, fmt = kwargs.get("x"), kwargs.get("y"), kwargs.get("fmt")
  if isinstance(y, str) and fmt is None:     # plot(y, "r-")
    kwargs["fmt"], kwargs["y"], kwargs["x"] = y, x, None
    x, y, fmt = None, x, y
  if y is None and x is not None:             # plot(y)
    kwargs["y"], kwargs["x"] = x, None
  if isinstance(kwargs.get("fmt"), str):
    for ch in kwargs.pop("fmt"):
      if ch in _FMT_COLOURS:
        kwargs.setdefault("color", ch)
  kwargs.pop("fmt", None)
  if kwargs.get("x") is None:
    kwargs.pop("x", None)


class _Normaliser:
  """Walks a module's statements, tracking literal variables and axes."""

  def __init__(self):
    self.env: dict[str, Any] = {}
    self.calls: list[PlotCall] = []
    self.current: AxesRef = AxesRef()
    self.np_names = {"np", "numpy"}
    self.plt_names = {"plt"}

  # -- literal evaluation ------------------------------------------------
  def value(self, node: ast.AST) -> Any:  # noqa: C901
    if isinstance(node, ast.Constant):
      return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
      vals = [self.value(e) for e in node.elts]
      return tuple(vals) if isinstance(node, ast.Tuple) else vals
    if isinstance(node, ast.Dict):
      return {self.value(k): self.value(v)
              for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.Name):
      return self.env.get(node.id, UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
      v = self.value(node.operand)
      return -v if isinstance(v, (int, float)) else UNKNOWN
    if isinstance(node, ast.BinOp):
      a, b = self.value(node.left), self.value(node.right)
      if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b,
               ast.Mult: lambda: a * b, ast.Div: lambda: a / b if b else
               UNKNOWN}
        f = ops.get(type(node.op))
        return f() if f else UNKNOWN
      if isinstance(a, list) and isinstance(b, list) and isinstance(
          node.op, ast.Add):
        return a + b
      return UNKNOWN
    if isinstance(node, ast.Subscript):
      base = self.value(node.value)
      idx = self.value(node.slice)
      if isinstance(base, (_AxesGrid, _Row)):
        if isinstance(base, _AxesGrid) and isinstance(idx, int) and (
            base.nrows > 1 and base.ncols > 1):
          return _Row(base, idx % base.nrows)
        return base.at(idx)
      try:
        return base[idx] if not isinstance(base, _Unknown) else UNKNOWN
      except Exception:  # pylint: disable=broad-except
        return UNKNOWN
    if isinstance(node, ast.Call):
      return self.call_value(node)
    return UNKNOWN

  def call_value(self, node: ast.Call) -> Any:
    fn = node.func
    args = [self.value(a) for a in node.args]
    if isinstance(fn, ast.Name) and fn.id in ("list", "tuple") and args:
      return list(args[0]) if isinstance(args[0], (list, tuple)) else UNKNOWN
    if isinstance(fn, ast.Name) and fn.id == "range" and all(
        isinstance(a, int) for a in args) and 1 <= len(args) <= 3:
      r = range(*args)
      return list(r) if len(r) <= 10000 else UNKNOWN
    if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and (
        fn.value.id in self.np_names):
      if fn.attr in ("array", "asarray") and args:
        return list(args[0]) if isinstance(args[0], (list, tuple)) else UNKNOWN
      if fn.attr == "arange" and all(isinstance(a, (int, float)) for a in args):
        n = len(np.arange(*args)) if args else 0
        return np.arange(*args).tolist() if 0 < n <= 10000 else UNKNOWN
      if fn.attr == "linspace" and len(args) >= 2:
        num = args[2] if len(args) > 2 else 50
        if all(isinstance(a, (int, float)) for a in args[:2]) and isinstance(
            num, int) and 0 < num <= 10000:
          return np.linspace(args[0], args[1], num).tolist()
    return UNKNOWN

  # -- statements ----------------------------------------------------------
  def run(self, tree: ast.Module) -> list[PlotCall]:
    for stmt in tree.body:
      self.stmt(stmt)
    return self.calls

  def stmt(self, node: ast.stmt) -> None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      for a in node.names:
        if a.name in ("numpy",):
          self.np_names.add(a.asname or a.name)
        if a.name in ("matplotlib.pyplot",) or (
            isinstance(node, ast.ImportFrom) and node.module == "matplotlib"
            and a.name == "pyplot"):
          self.plt_names.add(a.asname or "pyplot")
    elif isinstance(node, ast.Assign):
      val = self.expr(node.value)
      for tgt in node.targets:
        self.bind(tgt, val)
    elif isinstance(node, ast.Expr):
      self.expr(node.value)
    elif isinstance(node, ast.With):
      for s in node.body:
        self.stmt(s)

  def bind(self, tgt: ast.AST, val: Any) -> None:
    if isinstance(tgt, ast.Name):
      self.env[tgt.id] = val
    elif isinstance(tgt, (ast.Tuple, ast.List)):
      vals = val if isinstance(val, (tuple, list)) and len(val) == len(
          tgt.elts) else [UNKNOWN] * len(tgt.elts)
      for t, v in zip(tgt.elts, vals):
        self.bind(t, v)

  def expr(self, node: ast.AST) -> Any:
    if not isinstance(node, ast.Call):
      return self.value(node)
    fn = node.func
    if not isinstance(fn, ast.Attribute):
      return self.value(node)
    owner_node, name = fn.value, fn.attr
    args = [self.value(a) for a in node.args]
    kwargs = {k.arg: self.value(k.value) for k in node.keywords if k.arg}
    is_plt = isinstance(owner_node, ast.Name) and (
        owner_node.id in self.plt_names)
    if is_plt and name == "subplots":
      nrows = args[0] if args else kwargs.get("nrows", 1)
      ncols = args[1] if len(args) > 1 else kwargs.get("ncols", 1)
      if not (isinstance(nrows, int) and isinstance(ncols, int)) or (
          nrows < 1 or ncols < 1):
        return ("figure", UNKNOWN)
      grid = _AxesGrid(nrows, ncols)
      # As in matplotlib, the last subplot created is the current axes.
      self.current = AxesRef(nrows, ncols, nrows - 1, ncols - 1)
      axes = grid.at(0) if nrows * ncols == 1 else grid
      return ("figure", axes)
    if (is_plt and name == "subplot") or name == "add_subplot":
      spec = args
      if len(args) == 1 and isinstance(args[0], int) and args[0] >= 111:
        spec = [args[0] // 100, args[0] // 10 % 10, args[0] % 10]
      if len(spec) == 3 and all(isinstance(a, int) for a in spec):
        r, c, i = spec
        ref = AxesRef(r, c, (i - 1) // c, (i - 1) % c)
        self.current = ref
        return ref
      return UNKNOWN
    if is_plt and name == "gca":
      return self.current
    if is_plt and name in ("figure", "savefig", "show", "close",
                           "tight_layout", "subplots_adjust", "grid",
                           "rcParams"):
      return UNKNOWN
    if is_plt:
      axes: AxesRef | None = self.current
      method = _PLT_TO_AXES.get(name, name)
      if name == "suptitle":
        axes = None
    else:
      owner = self.value(owner_node)
      if isinstance(owner, AxesRef):
        axes, method = owner, name   # ax.f() leaves plt's current axes
      elif name == "suptitle":
        axes, method = None, name
      else:
        return UNKNOWN
    kw = {}
    for pname, v in zip(_SIGNATURES.get(method, ()), args):
      kw[pname] = v
    for k, v in kwargs.items():
      kw[_KW_ALIASES.get(k, k)] = v
    if method == "plot":
      _plot_fmt_kwargs(kw)
    self.calls.append(PlotCall(method, axes, kw))
    return UNKNOWN


def normalize_code(code: str) -> list[PlotCall] | None:
  """Canonical plot calls of `code`, or None if it does not parse.

  Only straight-line code is followed (assignments, calls, `with` blocks);
  loops and functions are skipped, values they produce are UNKNOWN.
  """
  try:
    tree = ast.parse(code)
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    return None
  try:
    return _Normaliser().run(tree)
  except RecursionError:
    return None


# ----------------------------------------------------------------------------
# Field extractors.
# ----------------------------------------------------------------------------


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


def extract_data_values(calls: Sequence[PlotCall]) -> list[float]:
  """Numbers plotted as data (bar heights, line y, scatter x/y, pie, ...)."""
  out = []
  for c in calls:
    for key in _DATA_KEYS.get(c.method, ()):
      out.extend(_flat_numbers(c.kwargs.get(key)))
  return out


def extract_chart_types(calls: Sequence[PlotCall]) -> list[str]:
  return [c.method for c in calls if c.method in PLOT_METHODS]


def extract_layout(calls: Sequence[PlotCall]) -> list[tuple[int, int, int, int]]:
  """(nrows, ncols, row, col) of every subplot that holds a plot call."""
  seen = []
  for c in calls:
    if c.method in PLOT_METHODS and c.axes is not None:
      t = (c.axes.nrows, c.axes.ncols, c.axes.row, c.axes.col)
      if t not in seen:
        seen.append(t)
  return seen


_TEXT_FIELDS = {"set_title": ("label",), "set_xlabel": ("xlabel",),
                "set_ylabel": ("ylabel",), "suptitle": ("t",),
                "set_xticklabels": ("labels",), "set_yticklabels": ("labels",),
                "set_xticks": ("labels",), "set_yticks": ("labels",),
                "legend": ("labels",), "text": ("s",), "annotate": ("text",)}


def extract_text(calls: Sequence[PlotCall]) -> dict[str, str]:
  """Text elements keyed by (subplot, role): title, labels, legend, ticks."""
  out: dict[str, list[str]] = {}
  for c in calls:
    pos = "fig" if c.axes is None else f"{c.axes.row},{c.axes.col}"
    keys = _TEXT_FIELDS.get(c.method, ())
    if c.method in PLOT_METHODS:
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


def extract_colors(calls: Sequence[PlotCall]) -> list[str]:
  """Explicit colours of plot calls, normalised to '#rrggbb'."""
  out = []
  for c in calls:
    if c.method not in PLOT_METHODS:
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
# Matchers.
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


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
  """Edit distance (insert / delete / substitute, cost 1)."""
  if len(a) < len(b):
    a, b = b, a
  prev = list(range(len(b) + 1))
  for i, ca in enumerate(a, 1):
    cur = [i]
    for j, cb in enumerate(b, 1):
      cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
    prev = cur
  return prev[-1]


def edit_similarity(a: str, b: str) -> float:
  """1 - levenshtein(a, b) / max(|a|, |b|); 1 for two empty strings."""
  if not a and not b:
    return 1.0
  return 1.0 - levenshtein(a, b) / max(len(a), len(b))


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
  gt_calls = normalize_code(gt_code)
  if gt_calls is None:
    raise ValueError("the ground-truth code does not parse")
  pred_calls = normalize_code(pred_code)
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


# ----------------------------------------------------------------------------
# Visual judges.
# ----------------------------------------------------------------------------

Judge = Callable[[np.ndarray, np.ndarray], float]
JUDGES: registry.Registry[Judge] = registry.Registry("visual judge")
register_judge = JUDGES.register
get_judge = JUDGES.get


def _gray(img: np.ndarray) -> np.ndarray:
  img = np.asarray(img, np.float64)
  if img.ndim == 3:
    img = img[..., :3] @ np.array([0.299, 0.587, 0.114])
  return img


def _box_filter(x: np.ndarray, k: int) -> np.ndarray:
  """Mean over each valid k x k window (integral image)."""
  c = np.cumsum(np.cumsum(np.pad(x, ((1, 0), (1, 0))), 0), 1)
  s = c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]
  return s / (k * k)


def ssim(a: np.ndarray, b: np.ndarray, *, window: int = 7,
         data_range: float = 255.0) -> float:
  """Mean SSIM of two images over valid uniform `window` x `window` patches.

  Wang et al. 2004 with K1=0.01, K2=0.03 and sample (ddof=1) covariances,
  which is skimage's `structural_similarity(..., gaussian_weights=False)`
  mean over the non-border region. Colour inputs are converted to luma.
  """
  x, y = _gray(a), _gray(b)
  if x.shape != y.shape:
    raise ValueError(f"ssim: shapes differ {x.shape} vs {y.shape}")
  k = min(window, *x.shape)
  n = k * k
  c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
  mx, my = _box_filter(x, k), _box_filter(y, k)
  cov_norm = n / (n - 1)
  vx = cov_norm * (_box_filter(x * x, k) - mx * mx)
  vy = cov_norm * (_box_filter(y * y, k) - my * my)
  vxy = cov_norm * (_box_filter(x * y, k) - mx * my)
  s = ((2 * mx * my + c1) * (2 * vxy + c2)) / (
      (mx * mx + my * my + c1) * (vx + vy + c2))
  return float(np.mean(s))


@register_judge("ssim")
def ssim_judge(pred: np.ndarray, target: np.ndarray) -> float:
  return float(np.clip(ssim(pred, target), 0.0, 1.0))


@register_judge("pixel_mse")
def pixel_mse_judge(pred: np.ndarray, target: np.ndarray) -> float:
  """1 - mean squared error on [0, 1] pixels."""
  d = (np.asarray(pred, np.float64) - np.asarray(target, np.float64)) / 255.0
  return float(1.0 - np.mean(d * d))


@register_judge("histogram")
def histogram_judge(pred: np.ndarray, target: np.ndarray,
                    bins: int = 8) -> float:
  """Histogram intersection of the joint RGB colour histograms."""
  def hist(img):
    q = (np.asarray(img)[..., :3].astype(np.int64) * bins) // 256
    idx = (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]
    h = np.bincount(idx.ravel(), minlength=bins ** 3).astype(np.float64)
    return h / h.sum()
  return float(np.minimum(hist(pred), hist(target)).sum())


# ----------------------------------------------------------------------------
# Rewards and curriculum.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChartRewardConfig:
  """R = w_text R_text + w_vis R_vis + w_exec R_exec (weights [inferred]).

  The paper's weights were not found (spec F): equal weights by default.
  """
  w_text: float = 1.0
  w_vis: float = 1.0
  w_exec: float = 1.0
  text_weights: tuple[tuple[str, float], ...] = tuple(
      (d, 1.0) for d in TEXT_DIMENSIONS)
  rel_tol: float = 0.05
  judge: str = "ssim"
  timeout_s: float = 10.0
  size: tuple[int, int] = (64, 64)
  require_fence: bool = False
  max_workers: int = 2

  def replace(self, **kw) -> "ChartRewardConfig":
    return dataclasses.replace(self, **kw)


def exec_reward(result: sandbox.RenderResult) -> float:
  """R_exec in {0, 1}: the code ran and produced a figure."""
  return float(result.ok and result.image is not None)


def visual_reward(result: sandbox.RenderResult, target: np.ndarray,
                  judge: str | Judge = "ssim") -> float:
  """R_vis: judge(rendering, target) in [0, 1]; render failure -> 0."""
  if not result.ok or result.image is None:
    return 0.0
  fn = get_judge(judge) if isinstance(judge, str) else judge
  return float(np.clip(fn(result.image, target), 0.0, 1.0))


def weighted_reward(r_text: float, r_vis: float, r_exec: float,
                    cfg: ChartRewardConfig) -> float:
  return cfg.w_text * r_text + cfg.w_vis * r_vis + cfg.w_exec * r_exec


def chart_reward(completion: str, gt_code: str, target_image: np.ndarray | None,
                 cfg: ChartRewardConfig = ChartRewardConfig(), *,
                 render: Callable[..., sandbox.RenderResult] | None = None
                 ) -> dict[str, float]:
  """All reward components of one completion (spec F item 4)."""
  render = render or sandbox.render_chart
  code = extract_code(completion, require_fence=cfg.require_fence)
  if code is None:
    return {"reward": 0.0, "text": 0.0, "vis": 0.0, "exec": 0.0}
  r_text = text_reward(code, gt_code, weights=dict(cfg.text_weights),
                       rel_tol=cfg.rel_tol)
  need_render = cfg.w_exec != 0 or cfg.w_vis != 0
  result = render(code, timeout_s=cfg.timeout_s, size=cfg.size) if (
      need_render) else None
  r_exec = exec_reward(result) if result is not None else 0.0
  r_vis = 0.0
  if cfg.w_vis != 0 and result is not None and target_image is not None:
    r_vis = visual_reward(result, target_image, cfg.judge)
  return {"reward": weighted_reward(r_text, r_vis, r_exec, cfg),
          "text": r_text, "vis": r_vis, "exec": r_exec}


def chart_group_reward(completions: Sequence[str], gt_codes: Sequence[str],
                       target_images: Sequence[np.ndarray | None],
                       cfg: ChartRewardConfig = ChartRewardConfig(), *,
                       render=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
  """A group reward fn: rewards `[N]` and per-component arrays.

  Renders run concurrently in `cfg.max_workers` sandboxes.
  """
  if not (len(completions) == len(gt_codes) == len(target_images)):
    raise ValueError("completions, gt_codes and target_images must have the "
                     "same length")
  with concurrent.futures.ThreadPoolExecutor(max(1, cfg.max_workers)) as ex:
    parts = list(ex.map(lambda a: chart_reward(*a, cfg, render=render),
                        zip(completions, gt_codes, target_images)))
  comps = {k: np.array([p[k] for p in parts], np.float32) for k in parts[0]}
  return comps.pop("reward"), comps


@dataclasses.dataclass(frozen=True)
class CurriculumStage:
  name: str
  steps: int
  dataset: str
  reward: ChartRewardConfig


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
  """MSRL two-stage curriculum (spec F item 5), each stage its own data."""
  stages: tuple[CurriculumStage, ...]

  @classmethod
  def two_stage(cls, stage1_steps: int, stage2_steps: int, *,
                stage1_data: str = "stage1", stage2_data: str = "stage2",
                base: ChartRewardConfig = ChartRewardConfig()
                ) -> "CurriculumConfig":
    return cls((CurriculumStage("text_exec", stage1_steps, stage1_data,
                                base.replace(w_vis=0.0)),
                CurriculumStage("text_vis_exec", stage2_steps, stage2_data,
                                base)))


def stage_for_step(step: int, curriculum: CurriculumConfig) -> CurriculumStage:
  """The stage that global `step` falls in (the last one afterwards)."""
  if step < 0:
    raise ValueError(f"step must be >= 0, got {step}")
  start = 0
  for st in curriculum.stages:
    if step < start + st.steps:
      return st
    start += st.steps
  return curriculum.stages[-1]
