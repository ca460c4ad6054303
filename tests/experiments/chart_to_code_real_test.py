"""chart_to_code:paper,short on ChartMimic's released layout (through
`jaxlab.main.run_experiment`), from a tiny random Qwen2.5-VL checkpoint.

The layout (github.com/ChartMimic/ChartMimic README at c9e149c: the
extracted `dataset-iclr.tar.gz` holds `direct_600/`, ...; per chart
`<type>_<n>.pdf`, the `.png` beside it (chart2code/data/data_utils.py) and
the gold `<type>_<n>.py`; figure sizes in the repository's
`dimentions_info.jsonl`: `idx`, `width`, `height`): three charts rendered
here with matplotlib from their own scripts.

Checks: `data.rows` counts the charts read; the replies are the
checkpoint's (re-generated for the first chart); the prompt is ChartMimic's
direct-mimic instruction with the chart's figsize and the image's tokens;
the table equals ChartMimic's aggregation recomputed here from the saved
replies through the evaluator; with designed replies (the gold script, a
variant, no code block) the scores are the values they must be.
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np

from jaxlab import main as jaxlab_main
from jaxlab.configs import chart_to_code as c2c_config
from jaxlab.data import chartmimic as cm_data
from jaxlab.rewards import chartmimic as cm_eval
from jaxlab.evals import vl_chat
from jaxlab.experiments.chart_to_code import chartmimic_run
from jaxlab.rewards import sandbox
from jaxlab.rewards.chart import judges
from jaxlab.testing import hf_fixtures
from jaxlab.testing import vl_fixtures

GOLD = {
    "bar_1": """import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(3.0, 2.5))
ax.bar(["A", "B", "C"], [3.0, 5.0, 2.0], color=["#1f77b4", "#ff7f0e",
       "#2ca02c"])
ax.set_title("Sales")
ax.set_ylabel("Units")
plt.tight_layout()
plt.savefig("bar_1.pdf", bbox_inches="tight")
""",
    "line_1": """import matplotlib.pyplot as plt
import numpy as np
x = np.arange(5)
plt.figure(figsize=(3.0, 2.5))
plt.plot(x, x * 2.0, color="red", label="a")
plt.scatter(x, x + 1.0, color="blue", label="b")
plt.legend()
plt.title("Trend")
plt.savefig("line_1.pdf", bbox_inches="tight")
""",
    "pie_1": """import matplotlib.pyplot as plt
plt.figure(figsize=(2.5, 2.5))
plt.pie([50, 30, 20], labels=["x", "y", "z"],
        colors=["#ff9999", "#66b3ff", "#99ff99"])
plt.title("Share")
plt.savefig("pie_1.pdf", bbox_inches="tight")
""",
}
DIMS = {"bar_1": (3.0, 2.5), "line_1": (3.0, 2.5), "pie_1": (2.5, 2.5)}


def write_chartmimic(root: str) -> str:
  """`root/direct_600/` with .py, .pdf and .png per chart, and the
  repository's dimentions_info.jsonl beside it."""
  task = os.path.join(root, "direct_600")
  os.makedirs(task)
  for name, code in GOLD.items():
    with open(os.path.join(task, name + ".py"), "w") as f:
      f.write(code)
    cwd = os.getcwd()
    os.chdir(task)
    try:
      exec(code, {"__name__": "__main__"})  # pylint: disable=exec-used
      plt.savefig(name + ".png", dpi=40)
    finally:
      plt.close("all")
      os.chdir(cwd)
  with open(os.path.join(root, cm_data.DIMENSIONS), "w") as f:
    for name, (w, h) in DIMS.items():
      f.write(json.dumps({"idx": name, "width": w, "height": h}) + "\n")
  return root


class ChartMimicRealRunTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hf_fixtures.inductor_cleanup()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = vl_fixtures.make_qwen2_5_vl_checkpoint(
        os.path.join(cls.root, "ckpt"))
    cls.data = write_chartmimic(os.path.join(cls.root, "ChartMimic"))
    cls.rows = cm_data.load_rows(cls.data)
    # The recomputation's scripts on one warm worker (each job still gets
    # fresh processes and namespaces), not a fresh zygote per script.
    cls.pool = sandbox.SandboxPool(workers=1)
    cls.res = cls._run("run")

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()
    shutil.rmtree(cls.root, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  @classmethod
  def _config(cls):
    cfg = c2c_config.get_config("paper,short")
    cfg.init_from, cfg.data.path = cls.ckpt, cls.data
    cfg.model.dtype = "float32"
    cfg.chartmimic.update(min_pixels=28 * 28, max_pixels=56 * 56,
                          max_new_tokens=6, judge_size=(48, 64), workers=1,
                          timeout_s=20.0)
    return cfg

  @classmethod
  def _run(cls, name):
    work = os.path.join(cls.root, name)
    jaxlab_main.run_experiment(cls._config(), work)
    with open(os.path.join(work, "results.json")) as f:
      return json.load(f)

  def _recompute(self, rows, responses, cfg):
    """ChartMimic's table from the replies: evaluator per chart, then
    get_results.ipynb's sums over all charts."""
    per = []
    for row, resp in zip(rows, responses):
      code = cm_eval.prepare_code(cm_eval.extract_code(resp))
      gen = cm_eval.run_script(code, chart_name=row["name"], pool=self.pool)
      gold = cm_eval.run_script(cm_eval.prepare_code(row["code"]),
                                chart_name=row["name"], pool=self.pool)
      f1 = cm_eval.score_pair(gen, gold)
      vis = 0.0
      if gen.ran:
        h, w = cfg.chartmimic.judge_size
        r = sandbox.render_chart(code, size=(h, w), pool=self.pool)
        vis = judges.ssim_judge(
            r.image, chartmimic_run.target_image(row["image"], (h, w)))
      per.append(dict(ran=gen.ran, **f1, visual=vis,
                      data=cm_eval.data_f1(code, row["code"])
                      if gen.ran else 0.0))
    n = len(per)
    out = {"exec_rate": 100.0 * sum(p["ran"] for p in per) / n}
    for k in ("text", "layout", "type", "color", "data", "visual"):
      out[k] = 100.0 * sum(p[k] for p in per if p["ran"]) / n
    out["low_level"] = (out["text"] + out["layout"] + out["type"]
                        + out["color"]) / 4
    return out, per

  def _table(self, res):
    (tab,) = [t for t in res["tables"] if t["id"] == "chartmimic"]
    (row,) = tab["rows"]
    return {k: v["values"][0] for k, v in row["cells"].items()}

  def test_rows_and_provenance(self):
    self.assertEqual(self.res["data"]["rows"], {"test": 3})
    self.assertEqual(self.res["data"]["path"], self.data)
    self.assertEqual(self.res["data"]["task"], "direct_600")
    self.assertEqual(self.res["data"]["digest"], cm_data.digest(self.rows))
    self.assertNotEqual(cm_data.digest(self.rows[:2]),
                        cm_data.digest(self.rows))
    self.assertEqual(self.res["extra"]["chartmimic"]["names"],
                     ["bar_1", "line_1", "pie_1"])
    self.assertEqual(self.res["init_from"]["spec"], self.ckpt)

  def test_replies_are_the_checkpoints(self):
    cfg = self._config()
    chat = vl_chat.VLChat.load(self.ckpt, dtype="float32")
    text, n = chartmimic_run.reply(chat, self.rows[0], cfg.chartmimic)
    ex = self.res["extra"]["chartmimic"]
    self.assertEqual(ex["responses"][0], text)
    self.assertEqual(ex["tokens"][0], n)
    # The prompt: their instruction with the chart's figsize, then the
    # image's tokens (56 x 42 px within max_pixels -> a 2 x 4 patch grid
    # of 14 px patches, merged 2 x 2 -> 2 tokens).
    image = cm_data.read_image(self.rows[0]["image"])
    mm = chat.image_inputs([image], min_pixels=28 * 28,
                           max_pixels=56 * 56)
    ids = chartmimic_run.prompt_ids(
        chat, chartmimic_run.DIRECT_PROMPT.format(width=3.0, height=2.5),
        mm["image_grid_thw"])
    pad = chat.tokenizer.token_id(vl_chat.IMAGE_PAD)
    self.assertEqual(ids.count(pad), int(np.prod(mm["image_grid_thw"][0]))
                     // 4)
    decoded = chat.tokenizer.decode(ids)
    self.assertIn("figsize=(3.0, 2.5)", decoded)
    self.assertLess(decoded.index("reproduces the picture below."),
                    decoded.index("<|vision_start|>"))

  def test_table_equals_recomputation(self):
    ex = self.res["extra"]["chartmimic"]
    want, _ = self._recompute(self.rows, ex["responses"], self._config())
    got = self._table(self.res)
    for k, v in want.items():
      self.assertAlmostEqual(got[k], v, places=6, msg=k)

  def test_designed_replies(self):
    # Exact gold (its savefig dropped by code_checker), a variant, no code.
    variant = GOLD["line_1"].replace('color="red"', 'color="darkred"')
    variant = variant.replace('"Trend"', '"Trends"')
    replies = ["```python\n" + GOLD["bar_1"] + "```",
               "Sure:\n```python\n" + variant + "```",
               "I cannot draw this."]
    with mock.patch.object(vl_chat.VLChat, "generate",
                           side_effect=[(r, 5) for r in replies]):
      res = self._run("designed")
    got = self._table(res)
    want, per = self._recompute(self.rows, replies, self._config())
    for k, v in want.items():
      self.assertAlmostEqual(got[k], v, places=6, msg=k)
    self.assertAlmostEqual(got["exec_rate"], 200 / 3)
    # The gold copy scores 1 on every low-level F1 and the data F1.
    self.assertEqual([per[0][k] for k in cm_eval.LOW_LEVEL], [1.0] * 4)
    self.assertEqual(per[0]["data"], 1.0)
    # The variant: texts "a", "b", "Trends" vs "a", "b", "Trend" -> 2/3;
    # layout and types equal; one colour changed (< 1, > 0).
    self.assertAlmostEqual(per[1]["text"], 2 / 3)
    self.assertEqual((per[1]["layout"], per[1]["type"]), (1.0, 1.0))
    self.assertTrue(0.0 < per[1]["color"] < 1.0)
    self.assertFalse(per[2]["ran"])
    self.assertEqual(res["extra"]["chartmimic"]["per_chart"][2]["error"],
                     "no code")


if __name__ == "__main__":
  absltest.main()
