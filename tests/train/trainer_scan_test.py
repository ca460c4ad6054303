"""The trainer with a scanned decoder, a remat policy name and the chunked
loss with tied embeddings (the config path of issue 30).

Reference: the same training run with the unrolled decoder. Both start from
the same parameters (same seed, `scan_layers` only changes the layout) and
run the same float32 arithmetic per layer, so the per-step losses agree to
rounding: AdamW's update is invariant to the scale of a gradient, so a
relative gradient error of ~eps * K * L (eps = 2**-23, K = 64, L = 2) moves
the loss by about lr times that; rtol 1e-5 is far above that and far below
the loss decrease per step (~0.1).
"""

import shutil
import tempfile

from absl.testing import absltest
import jax
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.configs import common
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import trainer


def _config(scan):
  c = common.base_config()
  c.model.update(vocab_size=64, dim=32, num_layers=2, num_heads=2,
                 num_kv_heads=2, mlp_dim=64, tie_embeddings=True,
                 remat="minimal", scan_layers=scan)
  c.loss.chunk_size = 8
  c.data.update(num_docs=64, eval_fraction=0.0)
  c.train.update(steps=3, batch_size=8, seq_len=16, log_every=1,
                 eval_every=0, checkpoint_every=0, async_checkpoint=False,
                 tensorboard=False, peak_flops=1e12)
  c.optim.update(lr=1e-2, warmup_steps=0, schedule="constant",
                 weight_decay=0.01)
  return c


def _source(n=16, seq_len=16, vocab=64):
  rng = np.random.default_rng(0)
  out = []
  for _ in range(n):
    ids = rng.integers(0, vocab, size=seq_len + 1).astype(np.int32)
    out.append({"inputs": ids[:-1], "targets": ids[1:],
                "loss_mask": np.ones(seq_len, np.float32)})
  return out


class TrainerScanTest(absltest.TestCase):

  def test_scanned_run_matches_unrolled(self):
    mesh = parallel.make_mesh({"data": 2, "fsdp": 2, "tensor": 2},
                              devices=jax.devices()[:8])
    runs = {}
    for scan in (False, True):
      workdir = tempfile.mkdtemp()
      self.addCleanup(shutil.rmtree, workdir, ignore_errors=True)
      result = trainer.train(_config(scan), workdir, train_source=_source(),
                             mesh=mesh)
      losses = [r["loss"] for r in metrics_lib.read_metrics(workdir)]
      ts = result["train_state"]
      model, _ = nnx.merge(ts.graphdef, ts.state)
      runs[scan] = (losses, model)
    (l0, m0), (l1, m1) = runs[False], runs[True]
    self.assertLen(l1, 3)
    np.testing.assert_allclose(l1, l0, rtol=1e-5)
    self.assertLess(l1[-1], l1[0])
    self.assertTrue(m1.cfg.scan_layers)
    self.assertEqual(m1.cfg.remat, "minimal")
    q = m1.scan_blocks[0].attn.q_dnh
    self.assertEqual(q.shape, (2, 32, 2, 16))
    self.assertEqual(q[...].sharding.spec[0], None)  # "layers" replicated
    self.assertEqual(m0.layers[1].attn.q_dnh.shape, (32, 2, 16))


if __name__ == "__main__":
  absltest.main()
