"""jaxlab/experiments/bench/gpu.py on CPU with a tiny shape.

Checks that the benchmark times the library's own objects (the step
`trainer.make_train_step` returns, `sampler.generate`) and its arithmetic:
FLOPs per token by hand, MFU = tokens/s * FLOPs/token / peak, decode
tokens/s and the roofline fraction, and the roofline of a decode step.
"""

from unittest import mock

from absl.testing import absltest
import numpy as np

from jaxlab.experiments.bench import gpu
from jaxlab.experiments.bench import roofline
from jaxlab.decoding import sampler
from jaxlab.models import decoder
from jaxlab.train import trainer

TINY = dict(vocab_size=64, dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
            mlp_dim=64)
# Hand count: per layer q, o 32*32, k, v 32*16, mlp 3*32*64, 2 norms of 32;
# final norm 32; LM head 64*32 (the input embedding is a gather: excluded).
N_MATMUL = 2 * 1024 + 2 * 512 + 3 * 2048 + 64 + 32 + 2048
FLOPS_PER_TOKEN = 6 * N_MATMUL + 12 * 1 * 16 * 2 * 16  # + 12 L T H d_head


class _Spy:
  """Wraps the jitted step `make_train_step` returns; counts `lower`."""

  def __init__(self, fn, log):
    self.fn, self.log = fn, log

  def lower(self, *args):
    self.log.append("lower")
    return self.fn.lower(*args)


class GpuBenchTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.made, cls.generated = [], []
    real_make, real_generate = trainer.make_train_step, sampler.generate

    def make(*args, **kwargs):
      spy = _Spy(real_make(*args, **kwargs), cls.made)
      cls.made.append(spy)
      return spy

    def generate(*args, **kwargs):
      cls.generated.append(kwargs.get("timings"))
      return real_generate(*args, **kwargs)

    with mock.patch.dict(gpu.SIZES, {"tiny": TINY}), \
         mock.patch.dict(gpu.SPEC_PEAK, {"cpu": 989e12}), \
         mock.patch.object(trainer, "make_train_step", make), \
         mock.patch.object(sampler, "generate", generate):
      cls.out = gpu.main([
          "--sizes=tiny", "--train_plan=tiny,8,1,auto",
          "--dtype=float32", "--seq_len=16", "--prompt_len=16",
          "--new_tokens=4", "--decode_batches=2", "--repeats=2",
          "--matmul_n=64", "--bandwidth_gib=0.001"])

  def test_times_the_trainers_own_step(self):
    # One plan row (with remat, the costlier path): one step made, lowered
    # once and timed through that compiled object.
    self.assertLen([m for m in self.made if isinstance(m, _Spy)], 1)
    self.assertEqual(self.made.count("lower"), 1)
    rows = self.out["train"]
    self.assertLen(rows, 1)
    for row in rows:
      self.assertNotIn("error", row)
      self.assertEqual(row["step"], "trainer.make_train_step")
      # Random init (std 0.02): the loss is about log(V).
      self.assertAlmostEqual(row["loss"], np.log(64), delta=0.05)
      self.assertTrue(row["remat"])

  def test_mfu_arithmetic(self):
    for row in self.out["train"]:
      self.assertEqual(row["train_flops_per_token"], FLOPS_PER_TOKEN)
      tok_s = 8 * 16 / row["step_s"]
      self.assertAlmostEqual(row["tokens_per_s"] / tok_s, 1.0, places=9)
      self.assertAlmostEqual(
          row["mfu_vs_spec_peak"] / (tok_s * FLOPS_PER_TOKEN / 989e12), 1.0,
          places=9)
      measured = self.out["measured_matmul_peak_tflops"] * 1e12
      self.assertAlmostEqual(
          row["mfu_vs_measured_peak"] / (tok_s * FLOPS_PER_TOKEN / measured),
          1.0, places=9)

  def test_decode_uses_the_sampler_and_its_arithmetic(self):
    (row,) = self.out["decode"]
    self.assertNotIn("error", row)
    self.assertEqual(row["decode"], "sampler.generate")
    self.assertLen(self.generated, 2)  # one warm-up, one timed
    self.assertAlmostEqual(row["decode_s"],
                           self.generated[1]["decode_s"], places=12)
    self.assertAlmostEqual(row["decode_tokens_per_s"],
                           2 * 3 / row["decode_s"], places=6)
    self.assertAlmostEqual(
        row["decode_fraction_of_roofline"],
        row["decode_tokens_per_s"] / row["roofline_decode_tokens_per_s"],
        places=9)

  def test_decode_roofline_by_hand(self):
    cfg = decoder.DecoderConfig(**TINY)
    # One decode step (new_tokens=2) at context 9, batch 1; prefill of 8
    # tokens at average context 4.
    bw, peak = 1e6, 1e9
    weights = 4 * N_MATMUL
    kv = 9 * 2 * 1 * 1 * 16 * 4  # ctx * (K, V) * layers * kv heads * hd * 4
    step_flops = 2 * N_MATMUL + 4 * 1 * 2 * 16 * 9
    prefill_flops = 8 * (2 * N_MATMUL + 4 * 1 * 2 * 16 * 4)
    roof = roofline.decode_roofline(cfg, batch=1, prompt_len=8, new_tokens=2,
                                    bandwidth=bw, peak=peak)
    self.assertAlmostEqual(roof["decode_s"],
                           max((weights + kv) / bw, step_flops / peak))
    self.assertAlmostEqual(roof["prefill_s"], prefill_flops / peak)
    self.assertAlmostEqual(roof["tokens_per_s"],
                           2 / (roof["decode_s"] + roof["prefill_s"]))


if __name__ == "__main__":
  absltest.main()
