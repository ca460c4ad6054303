"""Executes the PMC and MathFimer colabs on their test presets.

PMC runs `tiny,smoke` (PMC alone, a few steps, short generations: the same
cells and the same rendered table, in seconds); MathFimer's `tiny` is
already that small.
"""

from absl.testing import absltest

from jaxlab.testing import notebooks

def _run(name, preset="tiny"):
  return notebooks.run_notebook(name, preset=preset)


class PmcColabsTest(absltest.TestCase):

  def test_pmc_colab(self):
    out = _run("pmc_unlearning.ipynb", "tiny,smoke")
    self.assertIn("forget mass with retain: 0.0", out)
    self.assertIn("top colour without retain: 1.0", out)
    self.assertIn("| PMC |", out)  # table.md rendered from results.json

  def test_mathfimer_colab(self):
    out = _run("mathfimer.ipynb")
    self.assertIn("loss on: '21 - 4 = 17'", out)  # eos decodes to nothing
    self.assertIn("| expanded, round 1 |", out)  # table.md from results


if __name__ == "__main__":
  absltest.main()
