"""`jaxlab.data.chartmimic` on directories in the releases' layouts.

ChartMimic (README at c9e149c): the extracted `dataset-iclr.tar.gz`,
`direct_600/<type>_<n>.{png,pdf,py}`, sizes in the repository's
`dimentions_info.jsonl`. ReachQA (hewei2001/ReachQA data/reachqa_test/ at
7dea078): `code/<NNNNN>.py`, `images/<NNNNN>.jpg`, `data.json`.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np
from PIL import Image

from jaxlab.data import chartmimic


def _png(path, h=20, w=30, value=0):
  Image.fromarray(np.full((h, w, 3), value, np.uint8)).save(path)


class ChartMimicDataTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

  def _chartmimic(self, with_dims=True):
    task = os.path.join(self.root, "dataset", "direct_600")
    os.makedirs(task)
    for i, (name, fs) in enumerate([("line_2", "(6, 4)"),
                                    ("bar_10", "(5.0, 3.5)"),
                                    ("bar_1", "[8, 6]")]):
      with open(os.path.join(task, name + ".py"), "w") as f:
        f.write(f"import matplotlib.pyplot as plt\n"
                f"plt.figure(figsize={fs})\nplt.plot([{i}])\n")
      _png(os.path.join(task, name + ".png"), value=i)
      open(os.path.join(task, name + ".pdf"), "wb").close()
    if with_dims:
      with open(os.path.join(self.root, chartmimic.DIMENSIONS), "w") as f:
        f.write(json.dumps({"idx": "bar_1", "width": 10.0,
                            "height": 7.5}) + "\n")
    return task

  def test_chartmimic_layout(self):
    task = self._chartmimic()
    rows = chartmimic.load_rows(os.path.join(self.root, "dataset"))
    self.assertEqual([r["name"] for r in rows], ["bar_1", "bar_10",
                                                 "line_2"])
    self.assertEqual([r["chart_type"] for r in rows], ["bar", "bar", "line"])
    # bar_1 from the jsonl (two levels up), the others from figsize=.
    self.assertEqual([(r["width"], r["height"]) for r in rows],
                     [("10.0", "7.5"), ("5.0", "3.5"), ("6", "4")])
    self.assertEqual(rows[2]["image"], os.path.join(task, "line_2.png"))
    self.assertIn("plt.plot([0])", rows[2]["code"])
    self.assertEqual(chartmimic.read_image(rows[0]["image"]).shape,
                     (20, 30, 3))
    self.assertLen(chartmimic.load_rows(self.root, max_rows=2), 2)
    self.assertEqual(chartmimic.load_rows(task, subset="")[0]["name"],
                     "bar_1")
    self.assertNotEqual(chartmimic.digest(rows),
                        chartmimic.digest(rows[:2]))

  def test_reachqa_layout(self):
    for d in ("code", "images"):
      os.makedirs(os.path.join(self.root, d))
    for n in ("00002", "00001"):
      with open(os.path.join(self.root, "code", n + ".py"), "w") as f:
        f.write("import matplotlib.pyplot as plt\n"
                "fig, ax = plt.subplots(figsize=(14, 9))\nplt.show()\n")
      Image.fromarray(np.zeros((9, 14, 3), np.uint8)).save(
          os.path.join(self.root, "images", n + ".jpg"))
    with open(os.path.join(self.root, "data.json"), "w") as f:
      json.dump([{"question": "q", "answer": "a",
                  "image": "images/00001.jpg", "split": "reasoning"}], f)
    rows = chartmimic.load_rows(self.root)   # subset default: not there
    self.assertEqual([r["name"] for r in rows], ["00001", "00002"])
    self.assertEqual((rows[0]["width"], rows[0]["height"]), ("14", "9"))
    self.assertTrue(rows[0]["image"].endswith("images/00001.jpg"))

  def test_errors(self):
    with self.assertRaisesRegex(FileNotFoundError, "no ChartMimic task"):
      chartmimic.load_rows(self.root)
    task = self._chartmimic(with_dims=False)
    os.remove(os.path.join(task, "bar_1.png"))
    with self.assertRaisesRegex(FileNotFoundError, "bar_1.png is missing"):
      chartmimic.load_rows(self.root)
    _png(os.path.join(task, "bar_1.png"))
    with open(os.path.join(task, "bar_1.py"), "w") as f:
      f.write("import matplotlib.pyplot as plt\nplt.figure()\n")
    with self.assertRaisesRegex(ValueError, "bar_1: no entry"):
      chartmimic.load_rows(self.root)


if __name__ == "__main__":
  absltest.main()
