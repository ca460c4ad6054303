"""Executes the rerank colab on the tiny preset."""

import os

from absl.testing import absltest
import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class RerankColabTest(absltest.TestCase):

  def test_rerank_colab(self):
    path = os.path.join(ROOT, "colabs", "rerank_cl_vs_sft.ipynb")
    nb = nbformat.read(path, as_version=4)
    old = os.environ.get("JAXLAB_COLAB_PRESET")
    os.environ["JAXLAB_COLAB_PRESET"] = "tiny"
    try:
      NotebookClient(nb, timeout=600, kernel_name="python3", resources={
          "metadata": {"path": os.path.join(ROOT, "colabs")}}).execute()
    finally:
      if old is None:
        os.environ.pop("JAXLAB_COLAB_PRESET")
      else:
        os.environ["JAXLAB_COLAB_PRESET"] = old
    out = "".join(o.get("text", "") for c in nb.cells
                  if c.cell_type == "code" for o in c.get("outputs", []))
    # Weights of z_yes = [1, .5, 0, -.5, -1], z_no = 0: softmax / sigmoid.
    self.assertIn("cl                 [[0.571 0.26  0.158 0.096 0.058]]", out)
    self.assertIn("sft                [[0.269 0.622 0.5   0.378 0.269]]", out)
    self.assertIn("constant_tau_mask  [[1. 1. 1. 1. 1.]]", out)
    self.assertIn("| sft/sft | 4 |", out)
    self.assertIn("| cl/cl | 4 |", out)


if __name__ == "__main__":
  absltest.main()
