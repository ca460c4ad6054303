"""`bench long_forward`: both attention kernels give the same perplexity of
the same real text (a tiny checkpoint written here; 2 layers so the second
layer attends over the first's chunked output). Tolerance: float32 scores
and softmax in both, summed in another order (see
tests/nn/chunked_attention_test.py); 1e-5 relative on a perplexity."""

import os
import shutil
import tempfile

from absl.testing import absltest

from jaxlab.experiments.bench import long_forward
from jaxlab.testing import hf_fixtures


class LongForwardTest(absltest.TestCase):

  def test_kernels_agree(self):
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp)
    ckpt = hf_fixtures.make_chat_checkpoint(
        os.path.join(tmp, "ckpt"), num_layers=2, hidden_size=32, num_heads=4,
        num_kv_heads=2, max_position_embeddings=256)
    xla = long_forward.measure(ckpt, 200, "xla")
    chunked = long_forward.measure(ckpt, 200, "chunked")
    self.assertAlmostEqual(chunked["perplexity"] / xla["perplexity"], 1.0,
                           delta=1e-5)
    self.assertGreater(xla["perplexity"], 1.0)
    for r in (xla, chunked):
      self.assertEqual(sorted(r), ["peak_rss_gb", "perplexity", "seconds"])
    with self.assertRaisesRegex(ValueError, "--length=10000000"):
      long_forward.measure(ckpt, 10_000_000, "xla")


if __name__ == "__main__":
  absltest.main()
