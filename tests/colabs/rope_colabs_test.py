"""Executes the RoPE-extension and Frequency-Entropy colabs (smoke settings)."""

from absl.testing import absltest

from jaxlab.testing import notebooks

def _run(name: str) -> str:
  return notebooks.run_notebook(name, preset="tiny,smoke")


class RopeColabsTest(absltest.TestCase):

  def test_rope_extension_colab(self):
    out = _run("rope_extension.ipynb")
    self.assertIn("band [d_l, d_h] = (20, 46)", out)
    self.assertIn("mrope_pro      s[d_l]=1.000 s[d_h]=16.00  lambda increasing",
                  out)
    self.assertIn("mrope_uni      s[d_l]=1.000 s[d_h]=16.00  lambda flat",
                  out)
    self.assertIn("yarn_rotation  s[d_l]=1.000 s[d_h]=16.00  lambda "
                  "decreasing", out)
    self.assertIn("| MrRoPE-Pro | ", out)  # tables rendered from results.json
    self.assertIn("mrope_pro: passkey at 256 =", out)

  def test_frequency_entropy_colab(self):
    out = _run("frequency_entropy.ipynb")
    self.assertIn("SequenceFE pure sinusoid: 0.000", out)
    self.assertRegex(out, r"SequenceFE white noise: 0\.9[3-6]")
    self.assertIn("SequenceFE RoPE vs NoPE:", out)
    self.assertIn("rule_a+b", out)


if __name__ == "__main__":
  absltest.main()
