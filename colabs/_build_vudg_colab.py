"""Writes colabs/vudg.ipynb.

    python colabs/_build_vudg_colab.py

The notebook runs the VUDG miniature with the config arg in the environment
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
          "# VUDG: video understanding domain generalisation (paper S), "
          "miniature\n\n"
          "Mini-VUDG clips (an actor doing two actions beside an object, "
          "four multiple-choice questions per clip) are rendered under the "
          "11 VUDG domains (style, viewpoint, environment). The shared video "
          "model (per-frame ViT + temporal transformer + decoder, frames as "
          "an `inputs_embeds` prefix) is trained by the generic trainer and "
          "answers by greedy decoding; the harness extracts letters, counts "
          "malformed replies and averages per domain (D-Avg) under the "
          "full-domain, leave-one-domain-out and single-source protocols. "
          "Spec: `papers/O-S.md` section S."),
      ("code", """\
from jaxlab.data.synthetic import video_domains as vd
from jaxlab.evals import vudg
data = vd.generate("test", domains=["night", "cartoon"], clips_per_domain=1, seed=0, num_frames=4, size=16)
q = data.questions[0]
print(q.question)
print("answer:", q.answer, "=", q.answer_text)
r = vudg.score(data.questions[:3], [q.answer, "(Z) nonsense", data.questions[2].answer_text])
print(f"hand check: correct={r.correct} malformed={r.num_malformed}")"""),
      ("code", """\
from jaxlab import main as launcher
from jaxlab.configs import vudg as cfg_mod
from jaxlab.experiments import report
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
for table in result["tables"]:
  print(report.render_table(result, table["id"], name="vudg"))"""),
  ]
  return _setup_cell.notebook(cells)


if __name__ == "__main__":
  _setup_cell.write(build(), "vudg.ipynb")
