"""Writes colabs/vulcan.ipynb.

    python colabs/_build_vulcan_colab.py

The notebook runs the Vulcan miniature with the config arg in the
environment variable JAXLAB_COLAB_PRESET (default "tiny"; the test uses
"tiny,smoke").
"""

import os
import sys

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position


def build() -> nbformat.NotebookNode:
  cells = [
      ("md", 
          "# Vulcan: class-specific ViT pruning (paper O), miniature\n\n"
          "A ViT classifier trained on all classes is compressed for a "
          "target subset S: FFN neurons are scored on S and collapsed into "
          "k-means clusters by a pull regulariser, the tail singular values "
          "of W_Q / W_V are penalised, both under dual-ascent multipliers; "
          "then clusters are merged exactly and heads cut by SVD, giving a "
          "real, smaller module. Baselines prune to the same widths "
          "(magnitude, Taylor on S, Taylor on all classes) and fine-tune. "
          "Spec: `papers/O-S.md` section O."),
      ("code", """\
import numpy as np
from flax import nnx
from jaxlab.compression import vulcan
from jaxlab.models import vit_classifier as vc
# Exactness of the two prune operations on a random tiny ViT.
cfg = vc.ViTClassifierConfig(dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=16, init_std=0.3)
m = vc.ViTClassifier(cfg, rngs=nnx.Rngs(0))
x = np.random.default_rng(0).uniform(size=(4, 8, 8, 1)).astype(np.float32)
ident = (np.arange(16),)
full = vulcan.prune(m, vulcan.Plan(vulcan.Widths((16,), (8,), (8,)), ident, ident, 0.0))
print(f"full-rank SVD prune exact: {np.abs(vulcan.logits(full, x) - vulcan.logits(m, x)).max() < 1e-4}")
print("dense params", cfg.num_params(), "| MACs/image", int(cfg.flops()))"""),
      ("code", """\
from jaxlab import main as launcher
from jaxlab.configs import vulcan as cfg_mod
from jaxlab.experiments import report
from IPython.display import Image, display
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
for table in result["results"]["tables"]:
  print(report.render_table(result["results"], table["id"], name="vulcan"))
display(Image(result["plot"]))"""),
      ("code", """\
acc = {r["label"]: np.mean(r["cells"]["acc"]["values"]) for r in result["accuracy"]["rows"]}
print("methods:", ", ".join(acc))
eff = {r["label"]: r["cells"] for r in result["efficiency"]["rows"]}
dense, pruned = eff["dense"], [v for k, v in eff.items() if k != "dense"][0]
print(f"pruned/dense params: {np.mean(pruned['params']['values']) / np.mean(dense['params']['values']):.3f}")"""),
  ]
  return _setup_cell.notebook(cells, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "vulcan.ipynb")
