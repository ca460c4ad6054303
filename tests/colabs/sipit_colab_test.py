"""Executes the SipIt colab (smoke settings)."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class SipItColabTest(absltest.TestCase):

  def test_sipit_colab(self):
    out = notebooks.run_notebook("sipit.ipynb", preset="tiny,smoke")
    # Hand-checkable: rows 0 and 2 coincide; |(6, 8)| = 10; 4 bits = 7
    # levels per side of one absmax scale 1.0.
    self.assertIn("min 0.0 pair (0, 2) collisions 1 max 10.0", out)
    self.assertIn("4-bit codes [ 0.          0.42857146 -1.        ]", out)
    self.assertRegex(out, r"trained/gradient\s+accuracy 1\.000")
    self.assertRegex(out, r"trained/random\s+accuracy 1\.000")
    self.assertIn("tied rows:", out)


if __name__ == "__main__":
  absltest.main()
