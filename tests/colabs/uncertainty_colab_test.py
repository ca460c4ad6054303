"""Executes the paper-J uncertainty colab (smoke settings)."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class UncertaintyColabTest(absltest.TestCase):

  def test_uncertainty_colab(self):
    out = notebooks.run_notebook("uncertainty.ipynb", preset="tiny,smoke")
    self.assertIn("cluster ids: [0, 0, 1, 2]", out)
    # p_c = (0.75, 0.125, 0.125), cluster frequencies (1/2, 1/4, 1/4).
    self.assertIn("SE = 0.7356  SE_R = 0.5213  DSE = 1.0397  NE = 1.5596",
                  out)
    self.assertIn("AUROC of a perfect detector: 1.0", out)
    self.assertIn("eigenstate residual < 1e-8: True", out)
    self.assertIn("SE_R+ λ=25", out)
    self.assertIn("seed 0", out)


if __name__ == "__main__":
  absltest.main()
