"""Writes colabs/uncertainty.ipynb (paper J: QTN semantic uncertainty).

    python colabs/_build_uncertainty_colab.py

The notebook runs its experiment with the config arg in the environment
variable JAXLAB_COLAB_PRESET (default "tiny"; the test uses "tiny,smoke").
"""

import os
import sys

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", "# Semantic uncertainty of hallucinations with a quantum tensor "
     "network (paper J), miniature\n\n"
     "Sample R answers per question, cluster them by meaning (bidirectional "
     "entailment; on CPU a string-matching stand-in), and score the "
     "question by the entropy of the cluster probabilities $p_c(j) = "
     "\\sum_{r\\in j} e^{\\ell_r} / \\sum_r e^{\\ell_r}$. Paper J replaces "
     "Shannon by Rényi-2, $-\\log\\sum_j p_c(j)^2$, and reweights each "
     "cluster by a per-sample uncertainty read from a Hamiltonian whose "
     "eigenstate is the kernel-mean-embedding wave function of the "
     "log-likelihoods (QCM null space, then first-order perturbation "
     "theory). Spec: `papers/H-N.md` section J."),
    ("code", """\
import numpy as np
from jaxlab.evals import uncertainty as unc
ll = np.log([0.5, 0.25, 0.125, 0.125])
ids = unc.semantic_ids(["Lisbon.", "lisbon", "Osaka", "the Porto"])
print("cluster ids:", ids.tolist())
print(f"SE = {float(unc.semantic_entropy(ll, ids)):.4f}  "
      f"SE_R = {float(unc.renyi2_entropy(ll, ids)):.4f}  "
      f"DSE = {float(unc.discrete_semantic_entropy(ids)):.4f}  "
      f"NE = {float(unc.naive_entropy(ll)):.4f}")
print("AUROC of a perfect detector:", unc.auroc([0.9, 0.1, 0.8], [True, False, True]))"""),
    ("md", "## Tiny LM that confabulates about held-out facts\n\n"
     "The model learns the facts of 70 % of the people; held-out people "
     "are never seen, so its answers about them are confabulations. "
     "Positive class of AUROC = the greedy answer is wrong."),
    ("code", """\
from jaxlab import main as launcher
from jaxlab.configs import uncertainty as cfg_mod
from IPython.display import Image, display
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
for rec in result["per_seed"]:
  print("seed", rec["seed"], {k: round(v, 3) for k, v in rec["setup"].items()})
  for ex in rec["examples"][:3]:
    print(f'  [{ex["group"]}] {ex["question"]} truth={ex["truth"]} '
          f'greedy={ex["greedy"]!r} clusters={ex["ids"]}')
print(f'{"estimator":18s} {"AUROC":>7s} {"AURAC":>7s}')
for name in result["per_seed"][0]["metrics"]:
  m = [r["metrics"][name] for r in result["per_seed"]]
  print(f'{name:18s} {np.nanmean([x["auroc"] if x["auroc"] is not None else np.nan for x in m]):7.3f} '
        f'{np.mean([x["aurac"] for x in m]):7.3f}')
display(Image(result["plot"]))"""),
    ("md", "The QTN step d check: the null vector of the quantum covariance "
     "matrix makes $\\psi_0$ an eigenstate of $H=\\sum_i c_i h_i$."),
    ("code", """\
res = max(r["setup"]["qtn_eigenstate_residual"] for r in result["per_seed"])
print("eigenstate residual < 1e-8:", res < 1e-8)"""),
]


def build() -> nbformat.NotebookNode:
  return _setup_cell.notebook(CELLS, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "uncertainty.ipynb")
