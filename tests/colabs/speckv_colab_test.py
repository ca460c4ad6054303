"""Executes the SpecKV colab on the smoke preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class SpecKVColabTest(absltest.TestCase):

  def test_speckv_colab(self):
    out = notebooks.run_notebook("speckv.ipynb", preset="smoke")
    # Hand-checked: key 1 (value 3) wins, key 3 (value 1) second, plus the
    # window (keys 6, 7).
    self.assertIn("kept keys: [1, 3, 6, 7]", out)
    self.assertIn("answer:", out)
    self.assertIn("C_max 16 speckv", out)
    self.assertIn("Spearman(draft, target importance) =", out)
    self.assertIn("'budget_16', 'importance'", out)


if __name__ == "__main__":
  absltest.main()
