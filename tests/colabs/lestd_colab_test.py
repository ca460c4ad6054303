"""Executes the LeSTD colab on the smoke preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class LeSTDColabTest(absltest.TestCase):

  def test_lestd_colab(self):
    out = notebooks.run_notebook("lestd.ipynb", preset="smoke")
    # hand accounting: (48 + 5) / 256, (48 + 5 + 5) / 256, (48 + 5 + 1) / 256
    self.assertIn("none   ratio 0.2070", out)
    self.assertIn("coo    ratio 0.2266", out)
    self.assertIn("bitmap ratio 0.2109", out)
    self.assertIn("auto   ratio 0.2109", out)
    self.assertIn("nnz 10 of 32", out)
    # the squared error equals ‖W‖² − Σ kept g² (orthonormal factors)
    self.assertIn("equal: True", out)
    self.assertIn("Held-out perplexity", out)


if __name__ == "__main__":
  absltest.main()
