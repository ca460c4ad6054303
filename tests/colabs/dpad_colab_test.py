"""Executes the DPad colab on the smoke preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class DPadColabTest(absltest.TestCase):

  def test_dpad_colab(self):
    out = notebooks.run_notebook("dpad.ipynb", preset="smoke")
    # a / sqrt(2 pi) = 1.6 * 0.39894 and sum over W = 64 of the Gaussian.
    self.assertIn("P(keep d=0) = 0.6383", out)
    self.assertIn("num_transfer_tokens(10, 4) = [3 3 2 2]", out)
    self.assertIn("gen_len 32 vanilla", out)
    self.assertIn("gen_len 32 +all", out)
    self.assertIn("| want", out)


if __name__ == "__main__":
  absltest.main()
