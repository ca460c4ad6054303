"""Builds colabs/calibration.ipynb (run: python colabs/_build_calibration_colab.py).

The notebook runs the B-calibration miniature with the config preset in
JAXLAB_COLAB_PRESET (default "tiny"; the test uses "tiny,smoke").
"""

import os
import sys

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", """# B-calibration: base vs RL vs DPO vs chain of thought (paper N)

"Trained on Tokens, Calibrated on Concepts" (Nakkiran et al., arXiv
2511.04869): collapse each sampled answer to a semantic class with a function
B, take the class frequencies over M samples at T = 1 as the model's
distribution pi_x, its max as the *B-confidence* and its plurality as the
prediction. The paper predicts that base LMs are B-calibrated, and that RL /
DPO instruction tuning and chain-of-thought prompting break it.
`jaxlab.evals.calibration` implements B, the B-confidence, SmoothECE (Apple
relplot's algorithm), binned ECE, reliability diagrams with bootstrap bands
and the rank-8 LoRA learnability probe; `jaxlab.objectives.dpo` the DPO
loss."""),
    ("md", "## SmoothECE on synthetic predictors"),
    ("code", """import numpy as np
from jaxlab.evals import calibration as cal
rng = np.random.default_rng(0)
f = rng.uniform(size=2000)
for name, p in (("calibrated", f), ("overconfident", f ** 3),
                ("underconfident", np.sqrt(f))):
  y = (rng.uniform(size=f.size) < p).astype(float)
  ece, sigma = cal.smooth_ece(f, y, return_sigma=True)
  print(f"{name:15s} smECE {ece:.3f} (sigma* {sigma:.3f})  "
        f"binned ECE {cal.binned_ece(f, y):.3f}")"""),
    ("md", "## B: paraphrases collapse to one class"),
    ("code", """from jaxlab.data.synthetic import aleatoric
task = aleatoric.make_task(num_questions=2, seed=0)
q = task.questions[0]
print("question:", task.prompt(q, "direct", 1), "| p* =",
      {v: round(p, 2) for v, p in zip(q.values, q.probs)})
r = np.random.default_rng(1)
answers = [task.response(q, "direct", r) for _ in range(6)]
print("direct answers:", answers)
print("cot answer:", task.response(q, "cot", r))
classes = cal.collapse_all("", answers, "numeric")
print("B(answers):", classes, "-> (confidence, plurality):",
      cal.b_confidence(classes))"""),
    ("md", """## The miniature

Pre-train a tiny LM on both answer styles, tune copies with GRPO (reward: the
mode answer) and DPO (mode preferred over another answer), and evaluate
every variant's B-calibration against references drawn from p*."""),
    ("code", """from jaxlab import main as launcher
from jaxlab.configs import calibration as cfg_mod
from jaxlab.experiments import report
from IPython.display import Image, display
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
data = json.load(open(os.path.join(WORKDIR, "results.json")))
print(report.render_table(data, data["tables"][0]["id"]))
display(Image(result["plot"]))"""),
    ("code", """s = result["summary"]
for v in result["per_seed"]:
  print(f"{v}: smECE {s[v + '/smece_mean']:.3f}  "
        f"confidence - accuracy {s[v + '/overconfidence_mean']:+.3f}  "
        f"probe KL {s[v + '/probe_kl_mean']:.3f}")"""),
]


def build() -> nbformat.NotebookNode:
  return _setup_cell.notebook(CELLS, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "calibration.ipynb")
