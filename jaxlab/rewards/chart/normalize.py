"""Chart code extraction and AST normalisation (MSRL, spec F item 4).

`normalize_code` parses matplotlib code with `ast` (never executes it),
resolves variables to literals, maps `plt.*` calls onto the current axes'
methods (`plt.title` -> `set_title`, ...), and binds positional arguments to
keyword names, giving a list of canonical `PlotCall`s that the field
extractors of `jaxlab.rewards.chart.fields` read.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any

import numpy as np

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
