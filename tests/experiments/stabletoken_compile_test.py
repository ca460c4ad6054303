"""`stabletoken:paper` compiles for its TPU topology from this CPU: the
Whisper-large-v3 tokenizer (`config.model` "whisper_tokenizer") under the
`stabletoken` loss on 30 s windows, here cut to 2 narrower blocks (one
before the quantizer, one after) and a batch of 16 (one example per chip):
XLA's TPU compile time grows with both. The full preset's numbers:
docs/bench/tpu_presets.json."""

import unittest

from absl.testing import absltest

from jaxlab.configs import stabletoken as st_config
from jaxlab.models import registry
from jaxlab.train import aot

_NO_LIBTPU = "libtpu (jaxlab[tpu]) is not installed"


def whisper_tokenizer_params(m, d, f, layers, positions, n, bits, vocab):
  """Hand count: conv stem, positions, blocks, final LN, Voting-LFQ
  (W [d, n, bits], b [n, bits], project_out bits -> d), CTC head."""
  stem = 3 * m * d + d + 3 * d * d + d + positions * d
  block = 4 * d + (3 * d * d + 3 * d) + d * d + d * f + f + f * d + d
  quant = d * n * bits + n * bits + bits * d + d
  return stem + layers * block + 2 * d + quant + d * vocab + vocab


class PaperPresetTest(absltest.TestCase):

  def test_paper_model_is_whisper_large_v3(self):
    c = st_config.get_config("paper")
    spec = registry.get_spec(c.model)
    cfg = spec.config
    w = cfg.whisper
    # openai/whisper-large-v3 config.json.
    self.assertEqual((w.num_mel_bins, w.d_model, w.encoder_layers,
                      w.encoder_attention_heads, w.encoder_ffn_dim,
                      w.max_source_positions), (128, 1280, 32, 20, 5120, 1500))
    self.assertEqual((cfg.quantize_after, cfg.n_voters, 2 ** cfg.bits),
                     (16, 5, 8192))
    self.assertEqual(c.train.seq_len, 3000)   # 30 s of 100 Hz frames
    self.assertEqual(cfg.num_params(), whisper_tokenizer_params(
        128, 1280, 5120, 32, 1500, 5, 13, 29))
    self.assertEqual(c.scale.loss, "stabletoken")

  @unittest.skipUnless(aot.libtpu_available(), _NO_LIBTPU)
  def test_compiles_for_the_topology(self):
    from jaxlab.experiments import compile as compile_cli  # pylint: disable=g-import-not-at-top
    c = st_config.get_config("paper")
    self.assertEqual(c.scale.topology, "v5p:2x2x4")
    self.assertEqual(c.train.batch_size, 32)
    c.model.update(encoder_layers=2, quantize_after=1, d_model=256,
                   encoder_attention_heads=4, encoder_ffn_dim=1024)
    c.train.batch_size = batch = 16
    report = compile_cli.run(c, None, sampler=False)
    step = report["train_step"]
    self.assertEqual(report["chips"], 16)
    self.assertTrue(step["memory"]["fits"])
    params = whisper_tokenizer_params(128, 256, 1024, 2, 1500, 5, 13, 29)
    self.assertEqual(step["params"], params)
    # The params and Adam's two moments, fp32, FSDP over the 16 chips: the
    # kernels are sharded (norms, biases and the small quantizer are not).
    args = step["memory"]["argument_bytes"]
    self.assertGreaterEqual(args, 3 * 4 * params // 16)
    self.assertLess(args, 3 * 4 * params // 4)
    # The batch: 16 examples of two [3000, 128] float32 log-mels, over 16.
    self.assertGreaterEqual(step["batch_bytes_per_chip"],
                            batch // 16 * 2 * 3000 * 128 * 4)
    self.assertEqual(step["tokens_per_step"], batch * 3000)


if __name__ == "__main__":
  absltest.main()
