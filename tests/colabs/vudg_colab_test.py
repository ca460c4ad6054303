"""Executes the VUDG colab (smoke settings)."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class VudgColabTest(absltest.TestCase):

  def test_vudg_colab(self):
    out = notebooks.run_notebook("vudg.ipynb", preset="tiny,smoke")
    # Question 0 answered right, a malformed reply, an option's text.
    self.assertIn("hand check: correct=(True, False, True) malformed=1", out)
    self.assertIn("| Full-domain: D-Avg (upper bound) |", out)
    self.assertIn("| Multi-source LODO: Avg_m |", out)
    self.assertIn("| Chance | 16.7", out)
    self.assertIn("| night |", out)


if __name__ == "__main__":
  absltest.main()
