"""Writes colabs/sipit.ipynb (paper Q: SipIt inversion and injectivity).

    python colabs/_build_sipit_colab.py

The notebook runs its experiment with the config arg in the environment
variable JAXLAB_COLAB_PRESET (default "tiny"; the test uses "tiny,smoke").
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
          "# Language models are injective and hence invertible (paper Q)\n\n"
          "A causal decoder's state at position t depends only on tokens "
          "0..t, so the prompt can be read back from one layer's states "
          "position by position: propose a token, run one step over the "
          "recovered prefix (a KV cache, tiled to verify many candidates "
          "at once), accept it when the state matches. **SipIt** orders "
          "the proposals by a gradient step on a continuous embedding; "
          "**BruteForce** proposes at random (about |V|/2 proposals per "
          "token). The collision test measures the minimum pairwise "
          "distance of last-token states per layer, chunked; tied "
          "embedding rows and quantised states are the negative controls. "
          "Spec: `papers/O-S.md` section Q."),
      ("code", """\
import numpy as np
from jaxlab.analysis import injectivity as inj
x = np.array([[0., 0.], [3., 4.], [0., 0.], [6., 8.]], np.float32)
s = inj.pair_stats(x, chunk=3)
print("min", s.min, "pair", s.pair, "collisions", s.collisions, "max", s.max)
print("4-bit codes", inj.quantize_states(np.array([0.05, 0.5, -1.0]), 4))"""),
      ("code", """\
from jaxlab import main as launcher
from jaxlab.configs import sipit as cfg_mod
from IPython.display import Image, display
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
for key, v in result["summary"].items():
  print(f"{key:22s} accuracy {v['accuracy']:.3f}  median proposals/token "
        f"{v['median_proposals']:.1f}  (|V|/2 = {result['vocab_size'] // 2})")
display(Image(result["plots"][0]))"""),
      ("code", """\
rec = result["per_seed"][0]
for kind in ("random-init", "trained"):
  c = rec[kind]["collisions"]
  print(kind, "min distance per layer", np.round(c["min"], 4),
        "exhaustive", np.round(c["exhaustive_min"], 4))
print("tied rows:", rec["trained"]["tied"])
print("quantised:", rec["trained"]["quant_inversion"])"""),
  ]
  return _setup_cell.notebook(cells, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "sipit.ipynb")
