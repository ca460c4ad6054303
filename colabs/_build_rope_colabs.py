"""Writes colabs/rope_extension.ipynb and colabs/frequency_entropy.ipynb.

    python colabs/_build_rope_colabs.py

Each notebook runs its experiment with the config arg in the environment
variable JAXLAB_COLAB_PRESET (default "tiny"; the test uses "tiny,smoke").
"""

import os
import sys

import nbformat
from nbformat import v4

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position


def rope_extension() -> nbformat.NotebookNode:
  cells = [
      v4.new_code_cell(_setup_cell.setup_cell("tiny")),
      v4.new_markdown_cell(
          "# MrRoPE: mixed-radix RoPE extension (paper D), miniature\n\n"
          "Every RoPE scaling is a *cumulative scale* $s_i$ on the default "
          "frequencies, $\\theta'_i = \\theta_i / s_i$. MrRoPE-Uni spreads "
          "$\\ln S$ evenly over the band $[d_l, d_h]$; MrRoPE-Pro "
          "progressively (slow-to-steep); YaRN in its rotation-count form is "
          "regressive. Then we train a tiny LM at a short length on a "
          "copy-style passkey corpus (`#` + 3 distinct digits hidden in "
          "filler; the prompt ends with `#`) and evaluate it training-free "
          "at longer lengths under every scaling. Spec: `papers/A-G.md` "
          "section D."),
      v4.new_code_cell("""\
import numpy as np
from jaxlab.nn import rope
kw = dict(head_dim=128, base=1e4, factor=16.0, original_max_position=4096)
lo, hi = rope.band_boundaries(head_dim=128, base=1e4, original_max_position=4096)
print("band [d_l, d_h] =", (lo, hi))
for m in ("yarn", "yarn_rotation", "mrope_uni", "mrope_pro"):
  s = rope.cumulative_scale(m, **kw)
  lam = rope.step_ratio(m, **kw)[lo + 1:hi - 1]
  trend = "increasing" if np.all(np.diff(lam) > 0) else (
      "decreasing" if np.all(np.diff(lam) < 0) else "flat/mixed")
  print(f"{m:14s} s[d_l]={s[lo]:.3f} s[d_h]={s[hi]:.2f}  lambda {trend}")
for m in ("default", "ntk", "yarn", "yarn_rotation", "mrope_uni", "mrope_pro"):
  inv, scale = rope.inv_freq(m, **kw)
  print(f"{m:14s} first root of B(m): {rope.rope_bound_first_root(inv, 1 << 16)}"
        f"  attention scale {scale:.4f}")"""),
      v4.new_code_cell("""\
from jaxlab.analysis import rope_plots
from IPython.display import Image, display
display(Image(rope_plots.plot_cumulative_scale(os.path.join(WORKDIR, "scale.png"))))"""),
      v4.new_markdown_cell(
          "## Train short, test long\n\nOne model per seed; every method "
          "reuses the same parameters (`long_context.with_rope_scaling`). "
          "The learning curve (held-out exact match at the training length) "
          "must be near 1 before the long-length table means anything."),
      v4.new_code_cell("""\
from jaxlab import main as launcher
from jaxlab.configs import rope_extension as cfg_mod
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
for rec in result["per_seed"]:
  print("seed", rec["seed"], "learning curve (step, exact):",
        [(r["step"], round(r["answer_exact"], 2)) for r in rec["learning_curve"]])
print(result["table_markdown"])
for p in result["plots"][:2] + result["plots"][3:]:
  display(Image(p))"""),
      v4.new_code_cell("""\
last = len(result["lengths"]) - 1
for m in ("yarn", "mrope_pro"):
  if m in result["summary"]["passkey"]:
    v = result["summary"]["passkey"][m]
    print(f"{m}: passkey at {result['lengths'][last]} = "
          f"{v['mean'][last]:.2f} ± {v['std'][last]:.2f}")"""),
  ]
  return v4.new_notebook(cells=cells, metadata={
      "kernelspec": {"name": "python3", "display_name": "Python 3",
                     "language": "python"}})


def frequency_entropy() -> nbformat.NotebookNode:
  cells = [
      v4.new_code_cell(_setup_cell.setup_cell("tiny")),
      v4.new_markdown_cell(
          "# Frequency Entropy of rotary pairs (paper C), miniature\n\n"
          "SpectrumFE (short-time, 'bands') and SequenceFE (global, "
          "'periodicity') of the post-RoPE query-pair norms, per layer, "
          "head and pair; a NoPE layer is the control; weighted RoPE "
          "attenuates selected pairs at inference. Spec: `papers/A-G.md` "
          "section C."),
      v4.new_code_cell("""\
import numpy as np
from jaxlab.analysis import frequency_entropy as fe
n = np.arange(4096)
print(f"SequenceFE pure sinusoid: {float(fe.sequence_fe(2 + np.sin(2 * np.pi * 37 * n / 4096))):.3f}")
print(f"SequenceFE white noise: {float(fe.sequence_fe(np.random.default_rng(0).standard_normal(4096))):.2f}")
print(f"SpectrumFE white noise: {float(fe.spectrum_fe(np.random.default_rng(0).standard_normal(4096))):.2f}")"""),
      v4.new_code_cell("""\
from jaxlab import main as launcher
from jaxlab.configs import frequency_entropy as cfg_mod
from IPython.display import Image, display
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
print(json.dumps(result["per_layer"], indent=1))
print("SequenceFE RoPE vs NoPE:", result["sequence_fe_rope_vs_nope_native"])
for p in result["plots"]:
  display(Image(p))"""),
      v4.new_code_cell("""\
print("baseline perplexity", round(result["baseline_perplexity"], 3))
for name, sw in result["sweeps"].items():
  print(f"{name:16s} n={sw['num_selected']:3d}", [round(p, 3) for p in sw["perplexity"]])"""),
  ]
  return v4.new_notebook(cells=cells, metadata={
      "kernelspec": {"name": "python3", "display_name": "Python 3",
                     "language": "python"}})


# Notebook file -> its builder (the tests discover builders by this).
NOTEBOOKS = {"rope_extension.ipynb": rope_extension,
             "frequency_entropy.ipynb": frequency_entropy}


def main():
  for name, nb in (("rope_extension", rope_extension()),
                   ("frequency_entropy", frequency_entropy())):
    path = os.path.join(HERE, f"{name}.ipynb")
    nbformat.write(nb, path)
    print("wrote", path)


if __name__ == "__main__":
  main()
