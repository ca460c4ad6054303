"""Writes colabs/pmc_unlearning.ipynb and colabs/mathfimer.ipynb.

    python colabs/_build_pmc_colabs.py

The notebooks run the experiment modules on a preset chosen by the
JAXLAB_COLAB_PRESET environment variable ("tiny" by default, what the test
suite executes; "" for the full README preset).
"""

import os
import sys

import nbformat
from nbformat import v4

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position


def pmc_notebook():
  cells = [
      v4.new_code_cell(_setup_cell.setup_cell("tiny")),
      v4.new_markdown_cell(
          "# Partial Model Collapse (PMC) unlearning in jaxlab\n\n"
          "Paper: *Model Collapse Is Not a Bug but a Feature in Machine "
          "Unlearning for LLMs* (arXiv 2507.04219). PMC samples n answers to "
          "each forget question from the model itself, keeps the one least "
          "similar to the model's original answer (reward 1 - ROUGE-L "
          "recall) in a per-question cache whose score never increases, and "
          "trains on it with a lambda-weighted retain loss. Modules: "
          "`jaxlab.objectives.pmc`, `self_generated`, `unlearning`."),
      v4.new_markdown_cell(
          "## 1. The lottery machine\nA categorical model retrained on its "
          "own samples collapses to one colour; mixed with a fixed retain "
          "set, only the colours outside the retain set die out."),
      v4.new_code_cell(
          "import numpy as np\nimport matplotlib.pyplot as plt\n"
          "from jaxlab.objectives import pmc\n"
          "h_r = pmc.lottery_machine(rounds=1500, use_retain=True, seed=0)\n"
          "h_n = pmc.lottery_machine(rounds=1500, use_retain=False, seed=0)\n"
          "plt.plot(h_r[:, 7:].sum(-1), label='forget mass, with retain')\n"
          "plt.plot(h_n.max(-1), label='top colour, no retain')\n"
          "plt.legend(); plt.xlabel('round'); plt.show()\n"
          "print('forget mass with retain:', h_r[-1, 7:].sum())\n"
          "print('top colour without retain:', h_n[-1].max())"),
      v4.new_markdown_cell(
          "## 2. Tiny LM on a TOFU-like fact set\nMemorise, then unlearn "
          "the forget split with PMC and the baselines (GA, GD, NPO, "
          "SimNPO, IDK, DPO); UQ = 100(1 - mean forget recall), utility = "
          "100 x mean(retain, world, real-authors recall); leakage = share "
          "of forget facts whose value shows up greedily, after the paper's "
          "prefill \"The answer is: \", after prefilling the start of the "
          "true answer, or in samples; `mc_least_likely_acc` = the "
          "multiple-choice attack that picks the least likely option "
          "(chance 1/4); `drift` = mean change of log p (nats/token) of the "
          "forget values in unrelated sentences "
          "(`jaxlab.evals.unlearning`)."),
      v4.new_code_cell(
          "from jaxlab import main as launcher\n"
          "from jaxlab.configs import pmc as pmc_config\n"
          "config = pmc_config.get_config(PRESET)\n"
          "config.parts = 'unlearn'\n"
          "if PRESET == 'tiny':\n  config.methods = 'pmc,ga'\n"
          "results = launcher.run_experiment(config, WORKDIR)\n"
          "print(open(os.path.join(WORKDIR, 'table.md')).read())"),
  ]
  return v4.new_notebook(cells=cells)


def mathfimer_notebook():
  cells = [
      v4.new_code_cell(_setup_cell.setup_cell("tiny")),
      v4.new_markdown_cell(
          "# MathFimer step expansion in jaxlab\n\nPaper: *MathFimer: "
          "Enhancing Mathematical Reasoning by Expanding Reasoning Steps "
          "through Fill-in-the-Middle* (arXiv 2502.11684). A FIM model fills "
          "a step between two steps; applied to every gap of a coarse "
          "solution, with a similarity filter (eta = 0.8), it expands the "
          "chain. Module: `jaxlab.objectives.fim`."),
      v4.new_markdown_cell("## PSM format with a middle-only loss mask"),
      v4.new_code_cell(
          "from jaxlab.data import tokenizers\n"
          "from jaxlab.objectives import fim\n"
          "tok = tokenizers.ByteTokenizer(); fmt = fim.FimFormat()\n"
          "fmt.add_to_tokenizer(tok)\n"
          "ex = fim.FimExample('Compute 7 *3 -4.', ('7 * 3 = 21',), "
          "('answer: 17',), '21 - 4 = 17')\n"
          "ids, mask = fmt.encode(tok, ex)\n"
          "print(fmt.format(ex))\n"
          "print('loss on:', repr(tok.decode([t for t, m in zip(ids, mask) "
          "if m])))"),
      v4.new_markdown_cell(
          "## Miniature: coarse vs expanded arithmetic solutions"),
      v4.new_code_cell(
          "from jaxlab import main as launcher\n"
          "from jaxlab.configs import mathfimer as mf_config\n"
          "config = mf_config.get_config(PRESET)\n"
          "results = launcher.run_experiment(config, WORKDIR)\n"
          "print(open(os.path.join(WORKDIR, 'table.md')).read())"),
  ]
  return v4.new_notebook(cells=cells)


# Notebook file -> its builder (the tests discover builders by this).
NOTEBOOKS = {"pmc_unlearning.ipynb": pmc_notebook,
             "mathfimer.ipynb": mathfimer_notebook}


def main():
  for name, nb in (("pmc_unlearning.ipynb", pmc_notebook()),
                   ("mathfimer.ipynb", mathfimer_notebook())):
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, os.path.join(HERE, name))


if __name__ == "__main__":
  main()
