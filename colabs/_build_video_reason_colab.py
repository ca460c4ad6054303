"""Writes colabs/video_reason.ipynb (paper R: VideoReasonBench).

    python colabs/_build_video_reason_colab.py

The notebook runs its experiment with the config arg in the environment
variable JAXLAB_COLAB_PRESET (default "tiny"; the test uses "tiny,smoke").
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position


def build():
  return _setup_cell.notebook([
      ("md",
       "# VideoReasonBench (paper R), procedural miniature\n\n"
       "A video is a chain of state transitions {S_t, o_t, S_t+1}: every "
       "operation is visible, the state only at the start or only at the "
       "end. Six demos (Number sliding puzzle, Circle lights-out, Cup swaps, "
       "File terminal commands, Card piles and Chip cups as synthetic "
       "stand-ins), six skills at three levels (recall, infer, predict), "
       "answers computed by the simulators and checked exactly. Spec: "
       "`papers/O-S.md` section R."),
      ("code", """\
import numpy as np
from jaxlab.data.synthetic import video_reason as vr
from jaxlab.evals import video_reason as ev
v = vr.make_video("number", 3, 5, "start", seed=0, frame_size=32)
print("frames", v.frames.shape, v.frames.dtype, "| file", v.path)
print(vr.vid2txt(v))
for rec in v.questions:
  print(f"[L{rec['level']} {rec['dim']}] {rec['question']}\\n   -> {rec['answer']}")"""),
      ("code", """\
import matplotlib.pyplot as plt
fig, ax = plt.subplots(1, len(v.frames), figsize=(1.6 * len(v.frames), 1.8))
for a, f, o in zip(ax, v.frames, v.frame_ops):
  a.imshow(f); a.axis("off"); a.set_title("reveal" if o < 0 else f"op {o + 1}", fontsize=7)
plt.show()"""),
      ("md",
       "## Exact checker, solvers and malformed answers\n\nThe oracle reads "
       "the revealed state and the operations and reasons exactly (100%); a "
       "noisy viewer mis-sees each operation with probability p; a malformed "
       "answer is wrong and counted."),
      ("code", """\
videos = vr.generate(["number", "cup", "chip"], num_ops=(5, 9), seed=0, progress=False)
recs = vr.records(videos)
print("oracle:", ev.score(recs, vr.solvers.oracle(videos)).summary())
for p in (0.1, 0.3):
  print(f"noisy p={p}: accuracy {ev.score(recs, vr.solvers.noisy(videos, p)).accuracy:.3f}")
bad = ev.score(recs[:3], ["Final Answer: ???", "no marker", "Final Answer: " + recs[2]["answer"]])
print("malformed:", bad.malformed, "accuracy:", round(bad.accuracy, 3))"""),
      ("md",
       "## The miniature\n\nSolvers on the benchmark layout, then the shared "
       "video LM (ViT per frame + temporal block + decoder) trained on "
       "Cup/Chip questions with a `Think:` transcript and decoded at several "
       "thinking budgets (the `smoke` preset skips the model)."),
      ("code", """\
from jaxlab import main as launcher
from jaxlab.configs import video_reason as cfg_mod
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
print(result["table_markdown"])"""),
  ])


if __name__ == "__main__":
  _setup_cell.write(build(), "video_reason.ipynb")
