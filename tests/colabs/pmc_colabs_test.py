"""Executes the PMC and MathFimer colabs on their tiny preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks

def _run(name):
  return notebooks.run_notebook(name, preset="tiny")


class PmcColabsTest(absltest.TestCase):

  def test_pmc_colab(self):
    out = _run("pmc_unlearning.ipynb")
    self.assertIn("forget mass with retain: 0.0", out)
    self.assertIn("top colour without retain: 1.0", out)
    self.assertIn("| pmc |", out)

  def test_mathfimer_colab(self):
    out = _run("mathfimer.ipynb")
    self.assertIn("loss on: '21 - 4 = 17'", out)  # eos decodes to nothing
    self.assertIn("| expanded_r1 |", out)


if __name__ == "__main__":
  absltest.main()
