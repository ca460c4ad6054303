"""Whisper checkpoints: a tiny random `WhisperModel` /
`WhisperForConditionalGeneration` saved by transformers loads through
`jaxlab.io.hf.load`, and `encode(input_features=f)` equals transformers'
encoder last hidden state within 2^8 * eps(float32) * scale; the log-mel
features equal `WhisperFeatureExtractor`'s."""

import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.data import audio
from jaxlab.io import hf
from jaxlab.models import whisper
from jaxlab.testing.speech_fixtures import make_whisper_checkpoint

EPS32 = float(np.finfo(np.float32).eps)


def sample_waves(rng, lengths):
  """Speech-like waves: two harmonics and noise, at 16 kHz."""
  out = []
  for n in lengths:
    t = np.arange(n) / audio.SAMPLE_RATE
    w = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(
        2 * np.pi * 1370 * t) + 0.02 * rng.standard_normal(n))
    out.append(w.astype(np.float32))
  return out


class WhisperLoadTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  @parameterized.parameters(False, True)
  def test_encode_equals_transformers(self, conditional):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    make_whisper_checkpoint(self.dir, conditional=conditional)
    model, cfg = hf.load(self.dir)
    self.assertIsInstance(model, whisper.Whisper)
    self.assertEqual((cfg.num_mel_bins, cfg.d_model, cfg.encoder_layers,
                      cfg.num_frames), (16, 32, 2, 100))
    f = np.random.default_rng(0).normal(size=(2, 16, 100)).astype(np.float32)
    cls = (transformers.WhisperForConditionalGeneration if conditional
           else transformers.WhisperModel)
    ref_model = cls.from_pretrained(self.dir).eval()
    encoder = ref_model.get_encoder()
    with torch.no_grad():
      want = encoder(torch.from_numpy(f)).last_hidden_state.numpy()
    got = np.asarray(model.encode(input_features=f))
    self.assertEqual(got.shape, (2, 50, 32))
    scale = float(np.max(np.abs(want)))
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=2 ** 8 * EPS32 * scale)

  def test_sharded_load_equals_unsharded(self):
    import jax  # pylint: disable=g-import-not-at-top
    from jaxlab.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
    make_whisper_checkpoint(self.dir)
    model, _ = hf.load(self.dir)
    mesh = jax.make_mesh((1, 8, 1), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    sharded, _ = hf.load(self.dir, mesh=mesh,
                         rules=mesh_lib.DEFAULT_RULES)
    fc1 = sharded.encoder.layers[0].fc1.kernel[...]
    self.assertEqual(fc1.sharding.spec[0], "fsdp")    # [embed, mlp]
    self.assertEqual(fc1.addressable_shards[0].data.shape, (4, 64))
    f = np.random.default_rng(2).normal(size=(2, 16, 100)).astype(np.float32)
    want = np.asarray(model.encode(input_features=f))
    with jax.set_mesh(mesh):
      got = np.asarray(jax.jit(lambda m, x: m.encode(input_features=x))(
          sharded, f))
    np.testing.assert_allclose(got, want, rtol=0, atol=2 ** 8 * EPS32
                               * float(np.abs(want).max()))

  def test_wrong_frames_is_a_clear_error(self):
    make_whisper_checkpoint(self.dir)
    model, _ = hf.load(self.dir)
    with self.assertRaisesRegex(ValueError, "100 .2 \\* max_source"):
      model.encode(input_features=np.zeros((1, 16, 64), np.float32))

  def test_tokenizer_takes_the_checkpoint_encoder(self):
    make_whisper_checkpoint(self.dir)
    model, cfg = hf.load(self.dir)
    tcfg = whisper.WhisperTokenizerConfig(whisper=cfg, quantize_after=1,
                                          vocab_size=5, bits=4)
    tok = whisper.tokenizer_from_whisper(model, tcfg)
    np.testing.assert_array_equal(tok.encoder.layers[1].fc1.kernel[...],
                                  model.encoder.layers[1].fc1.kernel[...])
    # The blocks below the quantizer are the checkpoint's: h equals the
    # pooled hidden state after block 1 of the loaded encoder.
    f = np.random.default_rng(1).normal(size=(1, 100, 16)).astype(np.float32)
    h, mask = tok.encode(f, np.array([100]))
    x = model.encoder.blocks(model.encoder.stem(f), 0, 1)
    want = np.asarray(x).reshape(1, 25, 2, 32).mean(2)
    np.testing.assert_allclose(np.asarray(h), want, rtol=0, atol=1e-6)
    self.assertEqual(int(mask.sum()), 25)


class WhisperFeaturesTest(absltest.TestCase):

  def test_equal_whisper_feature_extractor(self):
    import transformers  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(0)
    waves = sample_waves(rng, [8000, 16000, 20000])  # short, exact, cut
    fe = transformers.WhisperFeatureExtractor(feature_size=16, chunk_length=1)
    want = fe(waves, sampling_rate=16000, return_tensors="np").input_features
    got, lengths = audio.whisper_features(waves, n_mels=16,
                                          num_samples=16000)
    got = np.swapaxes(got, 1, 2)
    self.assertEqual(got.shape, want.shape)
    np.testing.assert_array_equal(lengths, [50, 100, 100])
    # Tolerance from the arithmetic: a float32 n-point FFT's error is about
    # log2(n) eps relative to the frame's energy, so a mel band at the
    # (max - 8) clamp, 1e-8 of the top power (1e-4 of its amplitude), gets
    # a relative power error of up to 2 log2(400) eps / 1e-4; in log10 units
    # that is / ln 10, and Whisper's map divides by 4.
    tol = 2 * np.log2(400) * EPS32 / 1e-4 / np.log(10) / 4
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


if __name__ == "__main__":
  absltest.main()
