"""Executes the rerank colab on the tiny preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class RerankColabTest(absltest.TestCase):

  def test_rerank_colab(self):
    # The embedding miniature's smoke run (the multimodal LoRA run is the
    # `mm` miniature; its pieces are tested in tests/models/).
    out = notebooks.run_notebook("rerank_cl_vs_sft.ipynb",
                                 preset="tiny,smoke")
    # Weights of z_yes = [1, .5, 0, -.5, -1], z_no = 0: softmax / sigmoid.
    self.assertIn("cl                 [[0.571 0.26  0.158 0.096 0.058]]", out)
    self.assertIn("sft                [[0.269 0.622 0.5   0.378 0.269]]", out)
    self.assertIn("constant_tau_mask  [[1. 1. 1. 1. 1.]]", out)
    # table.md is rendered from results.json (`report.render_table`).
    self.assertIn("| W / D | nDCG@10 × 100 | MRR@10 × 100 |", out)
    self.assertIn("| sft/sft | ", out)
    self.assertIn("| cl/cl | ", out)


if __name__ == "__main__":
  absltest.main()
