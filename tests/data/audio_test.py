"""Audio front-end: log-mel vs librosa, SNR of mixtures, WAV I/O, synthetic
speech (jaxlab.data.audio, jaxlab.data.synthetic.speech)."""

import os
import tempfile

from absl.testing import absltest
import librosa
import numpy as np

from jaxlab.data import audio
from jaxlab.data.synthetic import speech

# Log-mel parity: absolute tolerance in log10 units (float32 STFT in JAX vs
# librosa's float64/complex64 path).
LOG10_ATOL = 2e-3


class LogMelTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cfg = speech.SpeechConfig(min_phones=4, max_phones=4, max_frames=3)
    cls.wave = speech.make_split(cfg, 1, seed=0)["waves"][0]

  def test_filterbank_matches_librosa(self):
    for n_mels, fmax in ((40, None), (80, 7600.0)):
      want = librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels,
                                 fmax=fmax)
      got = audio.mel_filterbank(n_fft=400, n_mels=n_mels, fmax=fmax)
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8)

  def test_log_mel_matches_librosa(self):
    w = self.wave
    for pad_mode in ("constant", "reflect"):
      ref = librosa.feature.melspectrogram(
          y=w, sr=16000, n_fft=400, hop_length=160, n_mels=40, power=2.0,
          center=True, pad_mode=pad_mode).T
      ref_log = np.log10(np.maximum(ref, 1e-10))
      got = np.asarray(audio.log_mel(w, n_mels=40, pad_mode=pad_mode,
                                     whisper_norm=False))
      self.assertEqual(got.shape, (audio.num_frames(w.size), 40))
      np.testing.assert_allclose(got, ref_log, atol=LOG10_ATOL)
    # Whisper's normalisation on top of the librosa spectrogram.
    want = (np.maximum(ref_log, ref_log.max() - 8.0) + 4.0) / 4.0
    got = np.asarray(audio.log_mel(w[None], n_mels=40, pad_mode="reflect"))
    np.testing.assert_allclose(got[0], want, atol=LOG10_ATOL / 4)


class PerturbationTest(absltest.TestCase):

  def test_noise_at_target_snr_measures_that_snr(self):
    rng = np.random.default_rng(0)
    t = np.arange(16000) / 16000
    clean = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    clips = [rng.standard_normal(5000).astype(np.float32)]
    for kind in ("gaussian", "pink", "brown", "clip"):
      for snr in (0.0, 12.5, 25.0):
        noisy = audio.perturb(clean, kind, snr, rng, clips=clips)
        self.assertAlmostEqual(audio.snr_db(clean, noisy), snr, places=3,
                               msg=kind)

  def test_noise_colours_have_their_spectral_slope(self):
    rng = np.random.default_rng(1)
    for exponent, fn in ((0.0, audio.white_noise), (1.0, audio.pink_noise),
                         (2.0, audio.brown_noise)):
      x = fn(rng, 1 << 16)
      self.assertAlmostEqual(audio.power(x), 1.0, places=4)
      psd = np.abs(np.fft.rfft(x)) ** 2
      f = np.fft.rfftfreq(x.size)
      band = (f > 1e-3) & (f < 0.4)
      slope = np.polyfit(np.log(f[band]), np.log(psd[band]), 1)[0]
      self.assertAlmostEqual(slope, -exponent, delta=0.1)

  def test_bit_crush_levels(self):
    x = np.array([0.0, 0.1, 0.3, -0.99, 0.99, 1.0], np.float32)
    y = audio.bit_crush(x, 3)                     # levels k / 4, k in -4..3
    np.testing.assert_allclose(y, [0.0, 0.0, 0.25, -1.0, 0.75, 0.75])
    with self.assertRaisesRegex(ValueError, "depth must be in"):
      audio.bit_crush(x, 0)

  def test_random_perturbation_draws_every_kind_in_range(self):
    rng = np.random.default_rng(2)
    w = rng.standard_normal(800).astype(np.float32) * 0.1
    seen = {}
    for _ in range(200):
      _, kind, value = audio.random_perturbation(
          w, rng, clips=[rng.standard_normal(300).astype(np.float32)])
      lo, hi = audio.TRAIN_PERTURBATIONS[kind]
      self.assertBetween(value, lo, hi)
      seen[kind] = seen.get(kind, 0) + 1
    self.assertEqual(set(seen), set(audio.PERTURBATIONS))
    self.assertGreater(min(seen.values()), 20)    # ~40 each when uniform


class WavTest(absltest.TestCase):

  def test_round_trip_and_other_sample_rate(self):
    d = tempfile.mkdtemp()
    t = np.arange(8000) / 8000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    p16 = os.path.join(d, "a16.wav")
    audio.write_wav(p16, tone)
    np.testing.assert_allclose(audio.read_wav(p16), tone, atol=1 / 32768)
    p8 = os.path.join(d, "a8.wav")
    audio.write_wav(p8, tone, sample_rate=8000)
    with self.assertRaisesRegex(
        ValueError, r"sampled at 8000 Hz but 16000 Hz is expected; pass "
        r"resample=True"):
      audio.read_wav(p8)
    up = audio.read_wav(p8, resample=True)
    self.assertEqual(up.size, 16000)
    spec = np.abs(np.fft.rfft(up))
    self.assertAlmostEqual(np.argmax(spec) * 16000 / up.size, 440, delta=2)


class SyntheticSpeechTest(absltest.TestCase):

  def test_split_layout_and_determinism(self):
    cfg = speech.SpeechConfig(min_phones=3, max_phones=5, min_frames=2,
                              max_frames=3)
    a = speech.make_split(cfg, 6, seed=4)
    b = speech.make_split(cfg, 6, seed=4)
    np.testing.assert_array_equal(a["waves"], b["waves"])
    self.assertEqual(a["waves"].shape, (6, cfg.max_samples))
    for i in range(6):
      lab = a["labels"][i][a["label_mask"][i]]
      self.assertTrue(np.all(lab[1:] != lab[:-1]))       # no repeats
      self.assertBetween(lab.size, 3, 5)
      frames = a["frames"][i][:lab.size].sum() + 2 * cfg.edge_frames
      self.assertEqual(a["num_samples"][i], frames * cfg.token_samples)
      self.assertEqual(np.abs(a["waves"][i, a["num_samples"][i]:]).max(), 0)
      self.assertBetween(np.abs(a["waves"][i]).max(), 0.3, 0.7)


if __name__ == "__main__":
  absltest.main()
