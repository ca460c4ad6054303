"""`jaxlab.rewards.chartmimic` against ChartMimic's own evaluators.

The reference is a port of ChartMimic's evaluation (github.com/ChartMimic/
ChartMimic, commit c9e149c): chart2code/utils/post_process/code_checker.py
(code clean-up), chart2code/utils/evaluator/{text,layout,chart_type,color}
_evaluator.py with chart_type_evaluator_prefix.py / color_evaluator_prefix.py
(2-D branches) and color_utils.py, colormath 3.0's sRGB -> Lab and
`delta_e_cie2000` (matrix form), and the aggregation of
scripts/direct_mimic/get_results.ipynb. As theirs, each evaluator executes
the script separately (prefix + code + suffix, a fresh process each: here
a fork of one trusted reference process) and the colour score searches
permutations. Scripts are trusted matplotlib written here: a bar chart, a
line + scatter with legend, 2x1 subplots, a pie, each with a variant.
"""

import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import numpy as np

from jaxlab.rewards import chartmimic as cm

# ---------------------------------------------------------------------------
# The reference: runs in its own interpreter (argv: a JSON list of
# [name, path] scripts; writes <path>.<evaluator>.json).
# ---------------------------------------------------------------------------
_REFERENCE_RUNNER = r'''
import json, os, sys, inspect
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

TEXT_PREFIX = """
from matplotlib.backends.backend_pdf import RendererPdf
drawed_texts = []
def log_function(func):
    def wrapper(*args, **kwargs):
        global drawed_texts
        object = args[0]
        x = args[2]
        y = args[3]
        s = args[4]
        drawed_texts.append((x, y, s))
        return func(*args, **kwargs)
    return wrapper
RendererPdf.draw_text = log_function(RendererPdf.draw_text)
"""
TEXT_SUFFIX = """
with open(OUT, 'w') as f:
    json.dump([t[-1] for t in drawed_texts], f)
"""
AX_TICKS_DELETION = """
all_axes = plt.gcf().get_axes()
for ax in all_axes:
    ax.set_xticks([])
    ax.set_yticks([])
"""
LAYOUT_SUFFIX = """
def get_gridspec_layout_info(fig):
    layout_info = {}
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        if spec is None:
            continue
        gs = spec.get_gridspec()
        nrows, ncols = gs.get_geometry()
        row_start, row_end = spec.rowspan.start, spec.rowspan.stop - 1
        col_start, col_end = spec.colspan.start, spec.colspan.stop - 1
        layout_info[ax] = dict(nrows=nrows, ncols=ncols, row_start=row_start, row_end=row_end, col_start=col_start, col_end=col_end)
    return list(layout_info.values())
with open(OUT, 'w') as f:
    json.dump(get_gridspec_layout_info(plt.gcf()), f)
"""
TYPE_PREFIX = """
from matplotlib.projections.polar import PolarAxes
from matplotlib.axes import Axes
from matplotlib.image import NonUniformImage
from matplotlib.patches import Ellipse, Circle
from mpl_toolkits.mplot3d import Axes3D
import inspect
called_functions = {}
in_decorator = False
def log_function(func):
    def wrapper(*args, **kwargs):
        global in_decorator
        if not in_decorator:
            in_decorator = True
            if len(args) > 0 and type(args[0]) == PolarAxes and func.__name__ == "plot":
                file_name = inspect.getfile(func)
                file_name += "_polar"
            else:
                file_name = inspect.getfile(func)
            name = file_name + "-" + func.__name__
            called_functions[name] = called_functions.get(name, 0) + 1
            result = func(*args, **kwargs)
            in_decorator = False
            return result
        else:
            return func(*args, **kwargs)
    return wrapper
for n in ["bar", "barh", "plot", "axhline", "axvline", "axvspan", "axhspan", "hlines", "vlines", "errorbar", "boxplot", "violinplot", "violin", "hist", "fill_between", "fill_betweenx", "scatter", "quiver"]:
    setattr(Axes, n, log_function(getattr(Axes, n)))
for n in ["scatter", "plot", "plot_surface", "bar3d", "bar", "add_collection3d"]:
    setattr(Axes3D, n, log_function(getattr(Axes3D, n)))
for n in ["pie", "fill", "imshow", "pcolor"]:
    setattr(Axes, n, log_function(getattr(Axes, n)))
NonUniformImage.__init__ = log_function(NonUniformImage.__init__)
Axes.contour = log_function(Axes.contour)
Axes.contourf = log_function(Axes.contourf)
Ellipse.__init__ = log_function(Ellipse.__init__)
Axes.broken_barh = log_function(Axes.broken_barh)
Axes.tripcolor = log_function(Axes.tripcolor)
Circle.__init__ = log_function(Circle.__init__)
"""
TYPE_SUFFIX = """
with open(OUT, 'w') as f:
    json.dump(called_functions, f)
"""
COLOR_PREFIX = """
import matplotlib
import matplotlib.colors as mcolors
from matplotlib.axes._base import _process_plot_var_args
from matplotlib.axes._axes import Axes
from matplotlib.projections.polar import PolarAxes
import inspect
drawed_colors = []
drawed_objects = {}
in_decorator = False
def convert_color_to_hex(color):
    if isinstance(color, str):
        if color.startswith('#') and (len(color) == 7 or len(color) == 9):
            return color.upper()
        else:
            return mcolors.to_hex(mcolors.to_rgba(color)).upper()
    elif isinstance(color, (list, tuple, np.ndarray)) and (len(color) == 4 or len(color) == 3):
        return mcolors.to_hex(color).upper()
    else:
        raise ValueError("Unsupported color format")
def log_function(func, name=None):
    fname = name or func.__name__
    def wrapper(*args, **kwargs):
        global drawed_colors
        global in_decorator
        if in_decorator == False:
            in_decorator = True
            func_name = inspect.getfile(func) + "/" + fname
            result = func(*args, **kwargs)
            if fname == "_makeline":
                color = convert_color_to_hex(result[1]["color"])
                drawed_objects[func_name + "--" + color] = result[0]
            elif fname in ("axhline", "axvline"):
                color = convert_color_to_hex(result.get_color())
                drawed_objects[func_name + "--" + color] = result
            elif fname == "_fill_between_x_or_y":
                color = convert_color_to_hex(list(result.get_facecolors()[0]))
                drawed_objects[func_name + "--" + color] = result
            elif fname == "bar":
                for item in result:
                    color = convert_color_to_hex(list(item._original_facecolor))
                    drawed_objects[func_name + "--" + color] = item
            elif fname == "scatter" and type(args[0]) != PolarAxes:
                if "cmap" in kwargs and kwargs["cmap"] is not None:
                    if type(kwargs["cmap"]) == str:
                        drawed_objects[func_name + "--" + kwargs["cmap"]] = result
                    else:
                        drawed_objects[func_name + "--" + kwargs["cmap"].name] = result
                else:
                    if len(result.get_facecolor()) != 0:
                        color = convert_color_to_hex(list(result.get_facecolor()[0]))
                        drawed_objects[func_name + "--" + color] = result
            elif fname == "pie":
                for item in result[0]:
                    color = convert_color_to_hex(item.get_facecolor())
                    drawed_objects[func_name + "--" + color] = item
            elif fname in ("axvspan", "axhspan"):
                color = convert_color_to_hex(result.get_facecolor())
                drawed_objects[func_name + "--" + color] = result
            elif fname == "hist":
                tops, bins, patches = result
                if type(patches) != matplotlib.cbook.silent_list:
                    for item in patches:
                        color = convert_color_to_hex(list(item.get_facecolor()))
                        drawed_objects[func_name + "--" + color] = item
                else:
                    for container in patches:
                        for item in container:
                            color = convert_color_to_hex(list(item.get_facecolor()))
                            drawed_objects[func_name + "--" + color] = item
            in_decorator = False
        else:
            return func(*args, **kwargs)
        return result
    return wrapper
def update_drawed_colors(drawed_obejcts):
    drawed_colors = []
    for name, obj in drawed_objects.items():
        func_name = name.split("--")[0]
        color = name.split("--")[1]
        if "/_makeline" in func_name:
            drawed_colors.append(func_name + "--" + convert_color_to_hex(obj.get_color()))
        elif "/axhline" in func_name or "/axvline" in func_name:
            drawed_colors.append(func_name + "--" + convert_color_to_hex(obj.get_color()))
        elif "/_fill_between_x_or_y" in func_name:
            drawed_colors.append(func_name + "--" + convert_color_to_hex(list(obj.get_facecolors()[0])))
        elif "/bar" in func_name and "_3d" not in func_name:
            drawed_colors.append(func_name + "--" + convert_color_to_hex(list(obj._original_facecolor)))
        elif "/scatter" in func_name and "polar" not in func_name and "3d" not in func_name:
            if color.startswith("#") == False:
                drawed_colors.append(func_name + "--" + color)
            else:
                if len(obj.get_facecolor()) != 0:
                    drawed_colors.append(func_name + "--" + convert_color_to_hex(list(obj.get_facecolor()[0])))
        elif "/pie" in func_name or "/axvspan" in func_name or "/axhspan" in func_name:
            drawed_colors.append(func_name + "--" + convert_color_to_hex(obj.get_facecolor()))
        elif "/hist" in func_name:
            drawed_colors.append(func_name + "--" + convert_color_to_hex(list(obj.get_facecolor())))
    return list(set(drawed_colors))
# matplotlib >= 3.10 names _makeline _make_line.
_process_plot_var_args._make_line = log_function(_process_plot_var_args._make_line, "_makeline")
for n in ["bar", "scatter", "axhline", "axvline", "_fill_between_x_or_y", "pie", "axvspan", "axhspan", "hist"]:
    setattr(Axes, n, log_function(getattr(Axes, n)))
"""
COLOR_SUFFIX = """
drawed_colors = update_drawed_colors(drawed_objects)
with open(OUT, 'w') as f:
    json.dump(drawed_colors, f)
"""

def run(kind, code, out):
    if kind == "text":
        prefix, suffix = TEXT_PREFIX, TEXT_SUFFIX
        i = code.find("plt.savefig")
        code = code[:i] + AX_TICKS_DELETION + code[i:]
    elif kind == "layout":
        prefix, suffix = "", LAYOUT_SUFFIX
    elif kind == "type":
        prefix, suffix = TYPE_PREFIX, TYPE_SUFFIX
    else:
        prefix, suffix = COLOR_PREFIX, COLOR_SUFFIX
    pid = os.fork()
    if pid == 0:
        try:
            env = {"__name__": "__main__", "OUT": out, "json": json, "np": np}
            exec(prefix + code + suffix, env)
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.waitpid(pid, 0)

for name, path in json.loads(sys.argv[1]):
    with open(path) as f:
        code = f.read()
    os.chdir(os.path.dirname(path))
    for kind in ("text", "layout", "type", "color"):
        run(kind, code, path + "." + kind + ".json")
'''


def _reference_logs(scripts: dict[str, str], root: str) -> dict[str, dict]:
  """Each script's four logs as ChartMimic's evaluators write them."""
  items = []
  for name, code in scripts.items():
    path = os.path.join(root, name + ".py")
    with open(path, "w") as f:
      f.write(code)
    items.append([name, path])
  env = dict(os.environ, MPLBACKEND="Agg")
  subprocess.run([sys.executable, "-c", _REFERENCE_RUNNER, json.dumps(items)],
                 check=True, env=env, cwd=root, timeout=600)
  out = {}
  for name, path in items:
    logs = {}
    for kind in ("text", "layout", "type", "color"):
      p = f"{path}.{kind}.json"
      if os.path.exists(p):
        with open(p) as f:
          logs[kind] = json.load(f)
      else:
        logs[kind] = [] if kind != "type" else {}
    out[name] = logs
  return out


# colormath 3.0: sRGBColor(is_upscaled=True) -> XYZ (d65) -> LabColor, and
# color_diff_matrix.delta_e_cie2000 (vector against a matrix).
def _colormath_lab(rgb255):
  lin = []
  for v in np.asarray(rgb255, float) / 255.0:
    lin.append(v / 12.92 if v <= 0.04045 else math.pow((v + 0.055) / 1.055,
                                                       2.4))
  m = np.array(((0.412424, 0.357579, 0.180464),
                (0.212656, 0.715158, 0.0721856),
                (0.0193324, 0.119193, 0.950444)))
  xyz = [max(v, 0.0) for v in m.dot(np.array(lin))]
  illum = (0.95047, 1.00000, 1.08883)
  t = []
  for v, w in zip(xyz, illum):
    v = v / w
    t.append(math.pow(v, 1.0 / 3.0) if v > 216.0 / 24389.0
             else 7.787 * v + 16.0 / 116.0)
  return np.array([116.0 * t[1] - 16.0, 500.0 * (t[0] - t[1]),
                   200.0 * (t[1] - t[2])])


def _colormath_de2000(lab_color_vector, lab_color_matrix):
  L, a, b = lab_color_vector  # pylint: disable=invalid-name
  avg_Lp = (L + lab_color_matrix[:, 0]) / 2.0  # pylint: disable=invalid-name
  C1 = np.sqrt(np.sum(np.power(lab_color_vector[1:], 2)))  # pylint: disable=invalid-name
  C2 = np.sqrt(np.sum(np.power(lab_color_matrix[:, 1:], 2), axis=1))  # pylint: disable=invalid-name
  avg_C1_C2 = (C1 + C2) / 2.0  # pylint: disable=invalid-name
  G = 0.5 * (1 - np.sqrt(np.power(avg_C1_C2, 7.0) / (  # pylint: disable=invalid-name
      np.power(avg_C1_C2, 7.0) + np.power(25.0, 7.0))))
  a1p = (1.0 + G) * a
  a2p = (1.0 + G) * lab_color_matrix[:, 1]
  C1p = np.sqrt(np.power(a1p, 2) + np.power(b, 2))  # pylint: disable=invalid-name
  C2p = np.sqrt(np.power(a2p, 2) + np.power(lab_color_matrix[:, 2], 2))  # pylint: disable=invalid-name
  avg_C1p_C2p = (C1p + C2p) / 2.0  # pylint: disable=invalid-name
  h1p = np.degrees(np.arctan2(b, a1p))
  h1p += (h1p < 0) * 360
  h2p = np.degrees(np.arctan2(lab_color_matrix[:, 2], a2p))
  h2p += (h2p < 0) * 360
  avg_Hp = (((np.fabs(h1p - h2p) > 180) * 360) + h1p + h2p) / 2.0  # pylint: disable=invalid-name
  T = (1 - 0.17 * np.cos(np.radians(avg_Hp - 30))  # pylint: disable=invalid-name
       + 0.24 * np.cos(np.radians(2 * avg_Hp))
       + 0.32 * np.cos(np.radians(3 * avg_Hp + 6))
       - 0.2 * np.cos(np.radians(4 * avg_Hp - 63)))
  diff_h2p_h1p = h2p - h1p
  delta_hp = diff_h2p_h1p + (np.fabs(diff_h2p_h1p) > 180) * 360
  delta_hp -= (h2p > h1p) * 720
  delta_Lp = lab_color_matrix[:, 0] - L  # pylint: disable=invalid-name
  delta_Cp = C2p - C1p  # pylint: disable=invalid-name
  delta_Hp = 2 * np.sqrt(C2p * C1p) * np.sin(np.radians(delta_hp) / 2.0)  # pylint: disable=invalid-name
  S_L = 1 + ((0.015 * np.power(avg_Lp - 50, 2))  # pylint: disable=invalid-name
             / np.sqrt(20 + np.power(avg_Lp - 50, 2.0)))
  S_C = 1 + 0.045 * avg_C1p_C2p  # pylint: disable=invalid-name
  S_H = 1 + 0.015 * avg_C1p_C2p * T  # pylint: disable=invalid-name
  delta_ro = 30 * np.exp(-(np.power(((avg_Hp - 275) / 25), 2.0)))
  R_C = np.sqrt((np.power(avg_C1p_C2p, 7.0))  # pylint: disable=invalid-name
                / (np.power(avg_C1p_C2p, 7.0) + np.power(25.0, 7.0)))
  R_T = -2 * R_C * np.sin(2 * np.radians(delta_ro))  # pylint: disable=invalid-name
  return np.sqrt(np.power(delta_Lp / S_L, 2) + np.power(delta_Cp / S_C, 2)
                 + np.power(delta_Hp / S_H, 2)
                 + R_T * (delta_Cp / S_C) * (delta_Hp / S_H))


def _ref_similarity(c1, c2):  # color_utils.calculate_similarity_single
  if c1.startswith("#") and c2.startswith("#"):
    rgb = lambda c: tuple(int(c.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    lab1, lab2 = _colormath_lab(rgb(c1)), _colormath_lab(rgb(c2))
    de = _colormath_de2000(lab1, np.array([lab2]))[0].item()
    return max(0, 1 - (de / 100))
  elif not c1.startswith("#") and not c2.startswith("#"):
    return 1 if c1 == c2 else 0
  return 0


def _ref_text(gen, gold):  # TextEvaluator._calculate_metrics
  if not gen or not gold:
    return 0
  gen, n_gen, n_gold = list(gen), len(gen), len(gold)
  n_correct = 0
  for t in gold:
    if t in gen:
      n_correct += 1
      gen.remove(t)
  p, r = n_correct / n_gen, n_correct / n_gold
  return 0 if p + r == 0 else 2 * p * r / (p + r)


_ref_layout = _ref_text  # LayoutEvaluator: the same rule on the dicts


def _ref_type(gen, gold):  # ChartTypeEvaluator._calculate_metrics
  if not gen:
    return 0
  n_correct = sum(min(c, gold[t]) for t, c in gen.items() if t in gold)
  p = n_correct / sum(gen.values())
  r = n_correct / sum(gold.values())
  return 0 if p + r == 0 else 2 * p * r / (p + r)


def _ref_color(gen, gold):  # ColorEvaluator._calculate_metrics
  def group(cs):
    d = {}
    for c in cs:
      d.setdefault(c.split("--")[0], []).append(c.split("--")[1])
    return d
  g1, g2 = group(gen), group(gold)
  total = 0
  for k in set(g1) | set(g2):
    l1, l2 = g1.get(k, []), g2.get(k, [])
    if not l1 or not l2:
      continue
    shorter, longer = (l1, l2) if len(l1) <= len(l2) else (l2, l1)
    total += max(sum(_ref_similarity(a, b) for a, b in zip(shorter, perm))
                 for perm in itertools.permutations(longer, len(shorter)))
  p = total / len(gen) if gen else 0
  r = total / len(gold) if gold else 0
  return 0 if p + r == 0 else 2 * p * r / (p + r)


def _checker(code, pdf):  # code_checker.py: strip, append the PDF save
  return cm.prepare_code(code) + f'\nplt.savefig("{pdf}")'


_BAR = """import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(5, 4))
ax.bar(["A", "B", "C", "D"], [3.0, 5.5, 2.1, 4.2],
       color=["#1f77b4", "#ff7f0e", "#1f77b4", "#2ca02c"])
ax.set_title("Quarterly sales")
ax.set_xlabel("Region")
ax.set_ylabel("Units (k)")
ax.text(0, 3.2, "peak")
plt.savefig("bar.pdf")
"""
_BAR_VAR = """import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(5, 4))
ax.bar(["A", "B", "C", "D"], [3.0, 5.0, 2.0, 4.0],
       color=["#1f77b4", "#d62728", "#1f77b4", "#98df8a"])
ax.barh([1], [2.0], color="purple")
ax.set_title("Quarterly Sales")
ax.set_ylabel("Units (k)")
plt.show()
ax.set_xlabel("ignored: after plt.show")
"""
_LINE = """import matplotlib.pyplot as plt
import numpy as np
x = np.arange(6)
plt.figure(figsize=(6, 4))
plt.plot(x, x ** 1.5, color="tab:blue", label="model")
plt.plot(x, x + 1, "r--", label="baseline")
plt.scatter(x, x * 1.2, color="green", label="observed")
plt.axhline(2.0, color="gray")
plt.legend(loc="upper left")
plt.title("Scaling")
plt.savefig("line.pdf")
"""
_LINE_VAR = """import matplotlib.pyplot as plt
import numpy as np
x = np.arange(6)
plt.figure(figsize=(6, 4))
plt.plot(x, x ** 1.4, color="navy", label="model")
plt.scatter(x, x * 1.1, c=x, cmap="viridis", label="observed")
plt.fill_between(x, x, x + 1, color="orange", alpha=0.3)
plt.legend()
plt.title("Scaling")
"""
_SUBPLOTS = """import matplotlib.pyplot as plt
import numpy as np
fig, (a1, a2) = plt.subplots(2, 1, figsize=(5, 7))
a1.plot([1, 2, 3], [2, 4, 3], color="#8c564b")
a1.set_title("Top")
a2.hist(np.array([1, 2, 2, 3, 3, 3, 4]), bins=4, color="#17becf")
a2.set_title("Bottom")
fig.suptitle("Two panels")
plt.tight_layout()
plt.savefig("sub.pdf")
"""
_SUBPLOTS_VAR = """import matplotlib.pyplot as plt
import numpy as np
fig, axs = plt.subplots(1, 3, figsize=(9, 3))
axs[0].plot([1, 2, 3], [2, 4, 3], color="#8c564b")
axs[0].set_title("Top")
axs[1].hist([np.array([1, 2, 2]), np.array([3, 3, 4])], bins=3,
            color=["#17becf", "#bcbd22"])
axs[2].axvspan(0.2, 0.4, color="#e377c2")
fig.suptitle("Two panels")
"""
_PIE = """import matplotlib.pyplot as plt
plt.figure(figsize=(4, 4))
plt.pie([40, 30, 20, 10], labels=["Rent", "Food", "Travel", "Other"],
        colors=["#ff9999", "#66b3ff", "#99ff99", "#ffcc99"],
        autopct="%1.1f%%")
plt.title("Budget")
plt.savefig("pie.pdf")
"""
_PIE_VAR = """import matplotlib.pyplot as plt
plt.figure(figsize=(4, 4))
plt.pie([40, 30, 30], labels=["Rent", "Food", "Misc"],
        colors=["#ff8888", "#3366ff", "#99ff99"], autopct="%1.0f%%")
plt.title("Budget")
"""
_BROKEN = """import matplotlib.pyplot as plt
plt.bar([1, 2], [3, 4]
"""

# (gold, generated reply) pairs; the gold runs as released (its own
# savefig), the reply goes through code_checker.
PAIRS = {
    "bar_1": (_BAR, "```python\n" + _BAR_VAR + "```"),
    "line_1": (_LINE, "Here:\n```python\n" + _LINE_VAR + "```\nDone."),
    "multi_1": (_SUBPLOTS, "```python" + _SUBPLOTS_VAR + "```"),
    "pie_1": (_PIE, "```python\n" + _PIE_VAR + "```"),
    "bar_2": (_BAR, "```python\n" + _BROKEN + "```"),
    "line_2": (_LINE, "no code block at all"),
}


class ChartMimicParityTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    scripts = {}
    for name, (gold, reply) in PAIRS.items():
      scripts[name + "_gold"] = gold
      code = cm.extract_code(reply)
      if code:  # their code_checker skips replies without a code block
        scripts[name + "_gen"] = _checker(
            code, os.path.join(cls.root, name + "_gen.pdf"))
    cls.ref = _reference_logs(scripts, cls.root)
    cls.ours = {}
    with cm.sandbox.SandboxPool(workers=1) as pool:
      for name, (gold, reply) in PAIRS.items():
        cls.ours[name] = (
            cm.run_script(cm.prepare_code(cm.extract_code(reply)),
                          chart_name=name, pool=pool),
            cm.run_script(cm.prepare_code(gold), chart_name=name, pool=pool))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _ref_f1s(self, name):
    gold = self.ref[name + "_gold"]
    gen = self.ref.get(name + "_gen")
    if gen is None or not os.path.exists(
        os.path.join(self.root, name + "_gen.pdf")):
      return None  # did not run: not in their code-pass set
    return {"text": _ref_text(gen["text"], gold["text"]),
            "layout": _ref_layout(gen["layout"], gold["layout"]),
            "type": _ref_type(gen["type"], gold["type"]),
            "color": _ref_color(gen["color"], gold["color"])}

  def test_logs_match_reference(self):
    for name in ("bar_1", "line_1", "multi_1", "pie_1"):
      gen, gold = self.ours[name]
      for log, ref in ((gen, self.ref[name + "_gen"]),
                       (gold, self.ref[name + "_gold"])):
        self.assertTrue(log.ran, (name, log.error))
        self.assertEqual(sorted(log.texts), sorted(ref["text"]), name)
        self.assertEqual(sorted(log.layout), sorted(
            tuple(d[k] for k in ("nrows", "ncols", "row_start", "row_end",
                                 "col_start", "col_end"))
            for d in ref["layout"]), name)
        self.assertEqual(sorted(log.types.values()),
                         sorted(ref["type"].values()), name)
        self.assertLen(log.colors, len(ref["color"]), name)

  def test_f1s_equal_reference(self):
    checked = 0
    for name in PAIRS:
      gen, gold = self.ours[name]
      ref = self._ref_f1s(name)
      ours = cm.score_pair(gen, gold)
      if ref is None:
        self.assertFalse(gen.ran, name)
        self.assertEqual(ours, {k: 0.0 for k in cm.LOW_LEVEL})
        continue
      self.assertTrue(gen.ran, name)
      for k in cm.LOW_LEVEL:
        self.assertAlmostEqual(ours[k], ref[k], places=9, msg=(name, k))
      checked += 1
    self.assertEqual(checked, 4)

  def test_values_that_could_be_wrong(self):
    # Not a tautology: each variant differs from its gold in each field.
    f1 = {n: cm.score_pair(*self.ours[n]) for n in PAIRS}
    for n in ("bar_1", "line_1", "multi_1", "pie_1"):
      self.assertTrue(any(0.0 < v < 1.0 for v in f1[n].values()), f1[n])
    # bar_1 by hand: gold draws title, x/y labels, "peak" (4 texts, ticks
    # removed); the variant draws "Quarterly Sales" and "Units (k)": 1 of
    # 2 generated, 1 of 4 gold -> F1 = 2 * 0.5 * 0.25 / 0.75 = 1/3.
    self.assertAlmostEqual(f1["bar_1"]["text"], 1 / 3)
    # Types: gold 1 bar; variant bar + barh -> P 1/2, R 1 -> 2/3.
    self.assertAlmostEqual(f1["bar_1"]["type"], 2 / 3)
    # Layout: 2x1 gold against 1x3 variant share no cell.
    self.assertEqual(f1["multi_1"]["layout"], 0.0)

  def test_aggregate_is_their_table(self):
    per = []
    for name in PAIRS:
      gen, gold = self.ours[name]
      per.append({"ran": gen.ran, **cm.score_pair(gen, gold)})
    agg = cm.aggregate(per)
    n = len(PAIRS)
    self.assertAlmostEqual(agg["exec_rate"], 100 * 4 / n)
    for k in cm.LOW_LEVEL:
      ref = sum((self._ref_f1s(m) or {k: 0.0})[k] for m in PAIRS)
      self.assertAlmostEqual(agg[k], 100 * ref / n, places=7)
    self.assertAlmostEqual(agg["low_level"],
                           sum(agg[k] for k in cm.LOW_LEVEL) / 4)

  def test_ciede2000_matches_colormath_form(self):
    rng = np.random.default_rng(0)
    for _ in range(200):
      a, b = rng.integers(0, 256, (2, 3))
      ha = "#%02X%02X%02X" % tuple(a)
      hb = "#%02X%02X%02X" % tuple(b)
      self.assertAlmostEqual(cm.color_similarity(ha, hb),
                             _ref_similarity(ha, hb), places=10)
    self.assertEqual(cm.color_similarity("viridis", "viridis"), 1.0)
    self.assertEqual(cm.color_similarity("viridis", "#000000"), 0.0)


if __name__ == "__main__":
  absltest.main()
