"""Executes the PMC and MathFimer colabs on their tiny preset."""

import os

from absl.testing import absltest
import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _run(name):
  path = os.path.join(ROOT, "colabs", name)
  nb = nbformat.read(path, as_version=4)
  os.environ["JAXLAB_COLAB_PRESET"] = "tiny"
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": os.path.join(ROOT, "colabs")}}
                 ).execute()
  return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                 for o in c.get("outputs", []))


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
