"""Builds colabs/lestd.ipynb (run: python colabs/_build_lestd_colab.py)."""

import os
import sys

import nbformat

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", """# LeSTD: sparse Tucker decomposition of attention

Paper P (ICLR 2026, OpenReview 0oHaazjMUX). Per layer, each head's
W^Q, W^K, W^V and (W^O)ᵀ are stacked into W_total [d_model, d_head, 4, h];
HOOI finds shared orthonormal bases (the head mode is not compressed), and
the core is made sparse by magnitude (in an orthonormal basis the importance
of a coefficient g is g²/E) with a closed-form refit. `TuckerAttention` runs
the decoder directly on the factors. `jaxlab.compression.lestd` implements
it next to two baselines: per-matrix truncated SVD and dense-core Tucker."""),
    ("code", """import os, json, tempfile
import numpy as np
from IPython.display import Image, display
from jaxlab import main as launcher
from jaxlab.configs import lestd as lestd_configs
from jaxlab.compression import lestd"""),
    ("md", """## The identity behind Stage II

With orthonormal factors, the squared error of a (sparse) Tucker
approximation is ‖W‖² minus the squares of the kept core entries."""),
    ("code", """rng = np.random.default_rng(0)
w = rng.normal(size=(8, 4, 4, 2)).astype(np.float32)
core, factors = lestd.hooi(w, (4, 2, 2, 2), skip_modes=(3,))
sparse, keep = lestd.sparsify_core(w, factors, 10, alpha=0.1)
err = float(np.sum((w - np.asarray(lestd.tucker_to_tensor(sparse, factors))) ** 2))
identity = float(np.sum(w**2) - np.sum(np.asarray(sparse)**2))
print(f"error {err:.4f}, |W|^2 - sum of kept g^2 {identity:.4f}, equal: {np.isclose(err, identity, rtol=1e-5)}")
print("nnz", int(keep.sum()), "of", keep.size)"""),
    ("md", """## Accounting counts the stored indices

W_total (8, 4, 4, 2) with ranks (4, 2, 2): factors 48 words, core 32
entries, original 256 words. Five nonzeros with one 32-bit COO index each:
(48 + 5 + 5) / 256; with a 32-entry bitmap: (48 + 5 + 1) / 256."""),
    ("code", """for fmt in ("none", "coo", "bitmap", "auto"):
  print(f"{fmt:6s} ratio {lestd.compression_ratio((8, 4, 4, 2), (4, 2, 2), 5, index_format=fmt):.4f}")"""),
    ("md", "## Train a tiny MHA decoder, compress, measure perplexity"),
    ("code", """config = lestd_configs.get_config(PRESET)
workdir = tempfile.mkdtemp(prefix="lestd_colab_")
results = launcher.run_experiment(config, workdir)
for table in results["tables"]:
  print(table["title"])
  for row in table["rows"]:
    cells = {k: round(float(np.mean([v for v in c["values"] if v is not None] or [np.nan])), 3)
             for k, c in row["cells"].items()}
    print(f'  {row["label"]:22s}', cells)"""),
    ("code", """display(Image(os.path.join(workdir, "lestd.png")))"""),
]


def build() -> nbformat.NotebookNode:
  # The test runs the `smoke` preset; `tiny` is the committed miniature.
  return _setup_cell.notebook(CELLS, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "lestd.ipynb")
