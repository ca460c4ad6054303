"""Throughput: tok/s over target tokens, slot tok/s and MFU over slots."""

import contextlib
import io
import re
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

import jax

from jaxlab import parallel
from jaxlab.configs import common
from jaxlab.data import pipeline
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import trainer

B, T = 8, 32


def tiny_config(steps):
  c = common.base_config()
  c.model.update(vocab_size=64, dim=32, num_layers=1, num_heads=2,
                 num_kv_heads=2, mlp_dim=64)
  c.train.update(steps=steps, batch_size=B, seq_len=T, log_every=1,
                 eval_every=0, checkpoint_every=0, async_checkpoint=False,
                 tensorboard=False, peak_flops=1e12)
  c.optim.update(lr=1e-2, warmup_steps=0, schedule="constant")
  return c


def mesh_of(data):
  return parallel.make_mesh({"data": data, "fsdp": 1, "tensor": 1},
                            devices=jax.devices()[:data])


def padded_source(n=32, vocab=64, seed=0):
  """Chat-like rows: a few targets at the end of each row, the rest padding.

  Row i has `1 + i % 7` targets, so a step's count depends on its batch.
  """
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    ids = rng.integers(0, vocab, size=T + 1).astype(np.int32)
    mask = np.zeros(T, np.float32)
    mask[T - 1 - i % 7:] = 1.0
    out.append({"inputs": ids[:-1], "targets": ids[1:], "loss_mask": mask})
  return out


class MetricsWriterTest(absltest.TestCase):

  def _tmp(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path

  def test_targets_and_slots_per_second(self):
    writer = metrics_lib.MetricsWriter(
        self._tmp(), total_steps=10, tokens_per_step=512,
        flops_per_step=1e9, peak_flops=1e12, tensorboard=False)
    writer.start(1)
    writer.count_targets(1, 999)  # the untimed (compiling) step: not counted
    for step in (2, 3, 4):
      writer.count_targets(step, 64)
    perf = writer.perf(4)
    step_s = 1 / perf["perf/steps_per_s"]
    self.assertAlmostEqual(perf["perf/tokens_per_s"] * step_s, 64, places=6)
    self.assertAlmostEqual(perf["perf/slot_tokens_per_s"] * step_s, 512,
                           places=6)
    self.assertAlmostEqual(perf["perf/mfu"] / perf["perf/useful_mfu"], 8.0,
                           places=6)
    with contextlib.redirect_stdout(io.StringIO()) as buf:
      writer.write(4, {"loss": 1.0, **perf})
    line = buf.getvalue()
    self.assertIn(f"{perf['perf/tokens_per_s']:.0f} tok/s", line)
    self.assertIn(f"{perf['perf/slot_tokens_per_s']:.0f} slot tok/s", line)
    self.assertIn(f"MFU(slots) {100 * perf['perf/mfu']:.1f}%", line)
    self.assertIn(f"useful MFU {100 * perf['perf/useful_mfu']:.1f}%", line)

  def test_without_a_count_every_slot_is_a_target(self):
    writer = metrics_lib.MetricsWriter(self._tmp(), total_steps=4,
                                       tokens_per_step=256, tensorboard=False)
    writer.start(0)
    perf = writer.perf(2)
    self.assertEqual(perf["perf/tokens_per_s"],
                     perf["perf/slot_tokens_per_s"])
    self.assertNotIn("perf/mfu", perf)


class TrainerThroughputTest(absltest.TestCase):

  def _run(self, grad_accum):
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    src = padded_source()
    cfg = tiny_config(steps=5)
    cfg.optim.grad_accum = grad_accum
    with contextlib.redirect_stdout(io.StringIO()) as buf:
      trainer.train(cfg, tmp, train_source=src,
                    mesh=mesh_of(2))
    # The batches the run drew (same pipeline, same seed): targets per step.
    ds = pipeline.batched_dataset(src, global_batch=B, seed=cfg.seed)
    targets = [float(ds[s - 1]["loss_mask"].sum()) for s in range(1, 6)]
    self.assertLess(max(targets), B * T / 4)  # mostly padding
    rows = [r for r in metrics_lib.read_metrics(tmp)
            if "perf/steps_per_s" in r]
    self.assertLen(rows, 4)  # step 1 compiles and is not timed
    lines = [l for l in buf.getvalue().splitlines() if "tok/s" in l]
    self.assertLen(lines, 4)
    for row, line in zip(rows, lines):
      s = row["step"]
      step_time = 1 / row["perf/steps_per_s"]
      # Timed steps are 2..s: their mean target count per step.
      want = np.mean(targets[1:s])
      self.assertAlmostEqual(row["perf/tokens_per_s"] * step_time, want,
                             places=4)
      self.assertAlmostEqual(row["perf/slot_tokens_per_s"] * step_time,
                             B * T, places=4)
      self.assertAlmostEqual(row["perf/useful_mfu"] / row["perf/mfu"],
                             want / (B * T), places=6)
      tok = float(re.search(r"\| ([0-9.]+) tok/s", line).group(1))
      slot = float(re.search(r"\| ([0-9.]+) slot tok/s", line).group(1))
      self.assertAlmostEqual(tok, row["perf/tokens_per_s"], delta=0.5)
      self.assertAlmostEqual(slot, row["perf/slot_tokens_per_s"], delta=0.5)
      self.assertIn("MFU(slots)", line)
      self.assertNotIn("perf/target_tokens", row)

  def test_tok_s_counts_target_tokens_of_a_padded_batch(self):
    self._run(grad_accum=1)

  def test_tok_s_counts_target_tokens_under_grad_accum(self):
    self._run(grad_accum=2)


if __name__ == "__main__":
  absltest.main()
