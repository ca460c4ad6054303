"""Executes the Vulcan colab (smoke settings)."""

import re

from absl.testing import absltest

from jaxlab.testing import notebooks


class VulcanColabTest(absltest.TestCase):

  def test_vulcan_colab(self):
    out = notebooks.run_notebook("vulcan.ipynb", preset="tiny,smoke")
    self.assertIn("full-rank SVD prune exact: True", out)
    # By hand, dim 16, 1 layer, 2 heads of 8, mlp 16, 10 classes, 8x8x1
    # images, patch 2 (17 tokens): embed 64 + 16 + 16 + 272 = 368; block:
    # norms 64, Q,K 544, V 272, O 272, MLP 544 = 1696; head 202.
    self.assertIn("dense params 2266 |", out)
    self.assertIn("| Vulcan R=0.6 |", out)
    self.assertIn("| Magnitude R=0.6 |", out)
    self.assertIn("methods: dense, finetune, Vulcan R=0.6, Magnitude R=0.6",
                  out)
    ratio = float(re.search(r"pruned/dense params: ([0-9.]+)", out).group(1))
    self.assertLess(ratio, 1.0)


if __name__ == "__main__":
  absltest.main()
