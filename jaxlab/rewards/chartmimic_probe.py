"""The instrumentation `jaxlab.rewards.chartmimic` runs INSIDE the sandbox.

Not imported by jaxlab: its source is the trusted `prefix` of a sandbox
probe (`jaxlab.rewards.sandbox.render_chart(probe=...)`), executed in the
job before the untrusted code; `SUFFIX` runs after the code and leaves the
log in `__log__`. What it records follows ChartMimic's evaluators
(github.com/ChartMimic/ChartMimic at c9e149c, chart2code/utils/evaluator/):

* chart types (`chart_type_evaluator_prefix.py`): a count per plotting
  function called at the outermost level (a call made inside another logged
  call is not counted), keyed by the function's source file and name
  (`<file>_polar-plot` for `plot` on a `PolarAxes`);
* colours (`color_evaluator_prefix.py`): at each outermost call of the
  colour-logged functions, the artists it returns stored under
  `<file>/<name>--<colour at call>` (so one artist per distinct colour of a
  function), and at the end each stored artist's colour read again
  (`update_drawed_colors`); colour maps by name;
* layout (`layout_evaluator.py`): each axes' gridspec geometry and span;
* texts (`text_evaluator.py`, as `code4evaluation` uses it:
  `use_position=False, use_axs=False`): the strings the PDF renderer's
  `draw_text` receives when the figure is saved to PDF after every axes'
  ticks are removed.

Differences, all by necessity: matplotlib 3.10+ renamed
`_process_plot_var_args._makeline` to `_make_line` (patched under its
old key); file keys are relative to site-packages; 3-D, networkx,
squarify and matplotlib-venn colour branches are not ported (their chart
types are counted where the module imports).
"""
# pylint: disable=protected-access,broad-except,invalid-name
# pylint: disable=unidiomatic-typecheck  (exact types, as theirs check)

import functools
import inspect
import io
import os
import warnings

import matplotlib
import matplotlib.colors as mcolors
import matplotlib.patches as mpatches
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import cbook
from matplotlib.axes import Axes
from matplotlib.axes._base import _process_plot_var_args
from matplotlib.backends.backend_pdf import RendererPdf
from matplotlib.image import NonUniformImage
from matplotlib.patches import Circle
from matplotlib.patches import Ellipse
from matplotlib.projections.polar import PolarAxes

warnings.filterwarnings("ignore")

try:
  from mpl_toolkits.mplot3d import Axes3D
except Exception:
  Axes3D = None

_ROOT = os.path.dirname(os.path.dirname(matplotlib.__file__))
_TYPES = {}
_OBJECTS = {}
_TEXTS = []
_FAILED = set()
_DEPTH = {"type": 0, "color": 0}
_TEXT_ON = [False]
_WHERE = {}  # id(wrapper) -> the wrapped original's file


def _file(fn):
  try:
    return os.path.relpath(inspect.getfile(fn), _ROOT)
  except Exception:
    return "?"


def _hex(c):
  """ChartMimic's `convert_color_to_hex` (an error aborts the colours)."""
  if isinstance(c, str):
    if c.startswith("#") and len(c) in (7, 9):
      return c.upper()
    return mcolors.to_hex(mcolors.to_rgba(c)).upper()
  if isinstance(c, (list, tuple, np.ndarray)) and len(c) in (3, 4):
    return mcolors.to_hex(c).upper()
  raise ValueError(f"unsupported colour {c!r}")


def _type_wrap(owner, attr):
  fn = getattr(owner, attr)
  where, name = _WHERE.get(id(fn)) or _file(fn), fn.__name__

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if _DEPTH["type"]:
      return fn(*args, **kwargs)
    polar = bool(args) and type(args[0]) == PolarAxes and name == "plot"
    key = f"{where}{'_polar' if polar else ''}-{name}"
    _TYPES[key] = _TYPES.get(key, 0) + 1
    _DEPTH["type"] += 1
    try:
      return fn(*args, **kwargs)
    finally:
      _DEPTH["type"] -= 1

  _WHERE[id(wrapper)] = where
  setattr(owner, attr, wrapper)
  return where


def _store(key, obj):
  _OBJECTS[key] = obj


def _log_colours(fn_name, base, args, kwargs, result):
  """What ChartMimic's colour `log_function` stores for one call."""
  t0 = type(args[0]) if args else None
  if fn_name == "_makeline":
    _store(f"{base}--{_hex(result[1]['color'])}", result[0])
  elif fn_name in ("axhline", "axvline"):
    _store(f"{base}--{_hex(result.get_color())}", result)
  elif fn_name == "_fill_between_x_or_y":
    _store(f"{base}--{_hex(list(result.get_facecolors()[0]))}", result)
  elif fn_name == "bar":
    for item in result:
      _store(f"{base}--{_hex(list(item._original_facecolor))}", item)
  elif fn_name == "scatter":
    b = base if t0 != PolarAxes else base + "_polar"
    cmap = kwargs.get("cmap")
    if cmap is not None:
      _store(f"{b}--{cmap if isinstance(cmap, str) else cmap.name}", result)
    elif len(result.get_facecolor()):
      _store(f"{b}--{_hex(list(result.get_facecolor()[0]))}", result)
  elif fn_name == "pie":
    for item in result[0]:
      _store(f"{base}--{_hex(item.get_facecolor())}", item)
  elif fn_name in ("axvspan", "axhspan"):
    _store(f"{base}--{_hex(result.get_facecolor())}", result)
  elif fn_name in ("hlines", "vlines", "quiver", "broken_barh"):
    cols = (result.get_edgecolors() if fn_name in ("hlines", "vlines")
            else result.get_facecolors())
    last = None
    for item in list(cols):
      last = _hex(list(item))
    if last is None:  # theirs: a NameError, the colour run stops
      raise ValueError("no colours")
    _store(f"{base}--{last}", result)  # the last colour's key (theirs)
  elif fn_name == "boxplot":
    for item in result["boxes"]:
      if type(item) == mpatches.PathPatch:
        _store(f"{base}--{_hex(list(item.get_facecolor()))}", item)
  elif fn_name == "violinplot":
    for item in result["bodies"]:
      _store(f"{base}--{_hex(list(item.get_facecolor()[0]))}", item)
  elif fn_name == "hist":
    patches = result[2]
    groups = patches if type(patches) == cbook.silent_list else [patches]
    for group in groups:
      for item in group:
        _store(f"{base}--{_hex(list(item.get_facecolor()))}", item)
  elif fn_name == "plot" and t0 == PolarAxes:
    for line in result:
      _store(f"{base}_polar--{_hex(line.get_color())}", line)
  elif fn_name in ("imshow", "pcolor", "contour", "contourf", "tripcolor"):
    _store(f"{base}--{result.get_cmap().name}", result)
  elif fn_name == "fill":
    for patch in result:
      _store(f"{base}--{_hex(list(patch.get_facecolor()))}", patch)
  elif fn_name == "__init__" and t0 == NonUniformImage:
    _store(f"{base}--{args[0].get_cmap().name}", args[0])
  elif fn_name == "__init__" and t0 in (Ellipse, Circle):
    _store(f"{base}--{_hex(args[0].get_facecolor())}", args[0])


def _colour_wrap(owner, attr, fn_name=None, where=None):
  fn = getattr(owner, attr)
  fn_name = fn_name or attr
  base = f"{where or _WHERE.get(id(fn)) or _file(fn)}/{fn_name}"

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if _DEPTH["color"]:
      return fn(*args, **kwargs)
    _DEPTH["color"] += 1
    try:
      result = fn(*args, **kwargs)
    finally:
      _DEPTH["color"] -= 1
    if "color" not in _FAILED:
      try:
        _log_colours(fn_name, base, args, kwargs, result)
      except Exception:  # their colour run would have stopped here
        _FAILED.add("color")
    return result

  setattr(owner, attr, wrapper)


def _final_colours():
  """ChartMimic's `update_drawed_colors`: each stored artist's colour now."""
  out = []
  for key, obj in _OBJECTS.items():
    fn, colour = key.split("--", 1)
    if "/_makeline" in fn or "/axhline" in fn or "/axvline" in fn:
      out.append(f"{fn}--{_hex(obj.get_color())}")
    elif "/_fill_between_x_or_y" in fn:
      out.append(f"{fn}--{_hex(list(obj.get_facecolors()[0]))}")
    elif "/bar" in fn and "_3d" not in fn:
      out.append(f"{fn}--{_hex(list(obj._original_facecolor))}")
    elif "/scatter" in fn and "polar" not in fn and "3d" not in fn:
      if not colour.startswith("#"):
        out.append(f"{fn}--{colour}")
      elif len(obj.get_facecolor()):
        out.append(f"{fn}--{_hex(list(obj.get_facecolor()[0]))}")
    elif "/pie" in fn or "/axvspan" in fn or "/axhspan" in fn:
      out.append(f"{fn}--{_hex(obj.get_facecolor())}")
    elif "/hlines" in fn or "/vlines" in fn:
      for item in obj.get_edgecolors():
        out.append(f"{fn}--{_hex(list(item))}")
    elif "/boxplot" in fn or "/hist" in fn:
      out.append(f"{fn}--{_hex(list(obj.get_facecolor()))}")
    elif "/violinplot" in fn:
      out.append(f"{fn}--{_hex(list(obj.get_facecolor()[0]))}")
    elif "/quiver" in fn:
      for item in obj.get_facecolors().tolist():
        out.append(f"{fn}--{_hex(item)}")
    elif "/plot" in fn and "polar" in fn:
      out.append(f"{fn}_polar--{_hex(obj.get_color())}")
    elif "/scatter" in fn and "polar" in fn:
      if not colour.startswith("#"):
        out.append(f"{fn}_polar--{colour}")
      elif len(obj.get_facecolor()):
        out.append(f"{fn}_polar--{_hex(list(obj.get_facecolor()[0]))}")
    elif ("/imshow" in fn or "/pcolor" in fn or "/contour" in fn
          or "/tripcolor" in fn):
      out.append(f"{fn}--{obj.get_cmap().name}")
    elif "/fill" in fn:
      out.append(f"{fn}--{_hex(list(obj.get_facecolor()))}")
    elif "/__init__" in fn and type(obj) == NonUniformImage:
      out.append(f"{fn}--{obj.get_cmap().name}")
    elif "/broken_barh" in fn:
      for item in obj.get_facecolors().tolist():
        out.append(f"{fn}--{_hex(item)}")
    elif "/__init__" in fn and type(obj) in (Ellipse, Circle):
      out.append(f"{fn}--{_hex(obj.get_facecolor())}")
  return sorted(set(out))


def _layout(fig, graph):
  """ChartMimic's `get_gridspec_layout_info` (the graph variant for
  `graph_*` charts)."""
  out = []
  for ax in fig.axes:
    if graph:
      out.append(dict(nrows=1, ncols=1, row_start=0, row_end=1, col_start=0,
                      col_end=1))
      continue
    spec = ax.get_subplotspec()
    if spec is None:
      continue
    nrows, ncols = spec.get_gridspec().get_geometry()
    out.append(dict(nrows=int(nrows), ncols=int(ncols),
                    row_start=int(spec.rowspan.start),
                    row_end=int(spec.rowspan.stop - 1),
                    col_start=int(spec.colspan.start),
                    col_end=int(spec.colspan.stop - 1)))
  return out


_draw_text = RendererPdf.draw_text


@functools.wraps(_draw_text)
def _logged_draw_text(self, gc, x, y, s, *args, **kwargs):
  if _TEXT_ON[0]:
    _TEXTS.append(str(s))
  return _draw_text(self, gc, x, y, s, *args, **kwargs)


RendererPdf.draw_text = _logged_draw_text


def collect(graph=False):
  """The log of the figure the code left (`plt.gcf()`)."""
  fig = plt.gcf()
  log = {"saved": False}
  try:  # the code_checker's `plt.savefig("<name>.pdf")`
    fig.savefig(io.BytesIO(), format="pdf")
    log["saved"] = True
  except Exception as e:
    log["error"] = f"{type(e).__name__}: {e}"[:500]
    return log
  try:
    log["layout"] = _layout(fig, graph)
  except Exception:
    log["layout"] = []
  log["types"] = dict(_TYPES)
  try:
    log["colors"] = [] if "color" in _FAILED else _final_colours()
  except Exception:
    log["colors"] = []
  try:  # the text evaluator's run: ticks removed, then the PDF save
    for ax in fig.get_axes():
      ax.set_xticks([])
      ax.set_yticks([])
    _TEXT_ON[0] = True
    fig.savefig(io.BytesIO(), format="pdf")
    log["texts"] = list(_TEXTS)
  except Exception:
    log["texts"] = []
  _TEXT_ON[0] = False
  return log


# Chart types (chart_type_evaluator_prefix.py's list).
_TYPE_AXES = (
    "bar", "barh", "plot", "axhline", "axvline", "axvspan", "axhspan",
    "hlines", "vlines", "errorbar", "boxplot", "violinplot", "violin",
    "hist", "fill_between", "fill_betweenx", "scatter", "quiver", "pie",
    "fill", "imshow", "pcolor", "contour", "contourf", "broken_barh",
    "tripcolor")
# Colours (color_evaluator_prefix.py's list, 2-D).
_COLOUR_AXES = (
    "bar", "scatter", "axhline", "axvline", "_fill_between_x_or_y", "pie",
    "axvspan", "axhspan", "hlines", "vlines", "boxplot", "violinplot",
    "hist", "quiver", "imshow", "pcolor", "contour", "contourf", "fill",
    "broken_barh", "tripcolor")

_plot_file = _file(Axes.plot)
for _a in _TYPE_AXES:
  if hasattr(Axes, _a):
    _type_wrap(Axes, _a)
for _cls in (NonUniformImage, Ellipse, Circle):
  _type_wrap(_cls, "__init__")
if Axes3D is not None:
  for _a in ("scatter", "plot", "plot_surface", "bar3d", "bar",
             "add_collection3d"):
    if hasattr(Axes3D, _a):
      _type_wrap(Axes3D, _a)
_make = "_makeline" if hasattr(_process_plot_var_args, "_makeline") else (
    "_make_line")
_colour_wrap(_process_plot_var_args, _make, "_makeline")
for _a in _COLOUR_AXES:
  if hasattr(Axes, _a):
    _colour_wrap(Axes, _a)
_colour_wrap(PolarAxes, "plot", "plot", where=_plot_file)
for _cls in (NonUniformImage, Ellipse, Circle):
  _colour_wrap(_cls, "__init__")
