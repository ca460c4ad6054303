"""Frequency Entropy (paper C): metrics, q/k capture, weighted RoPE."""

import math
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.analysis import frequency_entropy as fe
from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import rope


def _model(nope_layers=(1,), qkv_bias=False):
  cfg = decoder_lib.DecoderConfig(
      vocab_size=64, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
      mlp_dim=64, nope_layers=nope_layers, qkv_bias=qkv_bias)
  model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
  if qkv_bias:  # non-zero biases so the bias path is exercised
    for blk in model.layers:
      blk.attn.q_bias_nh[...] = 0.1 * jnp.ones_like(blk.attn.q_bias_nh[...])
  return model


class MetricsTest(parameterized.TestCase):

  def test_sequence_fe_pure_sinusoid_is_zero(self):
    n = np.arange(4096)
    s = 3.0 + np.sin(2 * np.pi * 37 * n / 4096)  # DC is dropped
    self.assertLess(float(fe.sequence_fe(s)), 1e-9)

  def test_sequence_fe_white_noise_is_near_one(self):
    rng = np.random.default_rng(0)
    vals = fe.sequence_fe(rng.standard_normal((16, 4096)))
    # Exponential periodogram ordinates: E[H] = log2 K - (1-gamma)/ln 2
    # bits, i.e. ~0.944 for K = 2047.
    expected = 1 - (1 - 0.5772156649) / math.log(2) / math.log2(2047)
    self.assertAlmostEqual(float(vals.mean()), expected, delta=0.01)
    self.assertTrue(np.all((vals > 0.9) & (vals <= 1.0)))

  def test_sequence_fe_two_equal_tones(self):
    n = np.arange(256)
    s = np.sin(2 * np.pi * 5 * n / 256) + np.cos(2 * np.pi * 17 * n / 256)
    # Two equal bins: H = 1 bit, divided by log2(127).
    self.assertAlmostEqual(float(fe.sequence_fe(s)), 1 / math.log2(127),
                           places=9)

  def test_spectrum_fe_hann_tone_hand_value(self):
    # A bin-centred tone under a periodic Hann window leaks into k0-1, k0,
    # k0+1 with amplitudes 1/4, 1/2, 1/4: p = (1/6, 2/3, 1/6).
    frame, hop = 128, 64
    n = np.arange(1024)
    s = np.cos(2 * np.pi * 8 * n / frame)
    p = np.array([1 / 6, 2 / 3, 1 / 6])
    want = -(p * np.log2(p)).sum() / math.log2(frame // 2 + 1)
    self.assertAlmostEqual(float(fe.spectrum_fe(s, frame, hop)), want,
                           places=9)
    # A constant under a rectangular window is pure DC: 0.
    self.assertAlmostEqual(
        float(fe.spectrum_fe(np.ones(1024), frame, hop, "rect")), 0.0,
        places=12)

  def test_spectrum_fe_matches_scipy_stft(self):
    from scipy import signal  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(1)
    s = np.abs(rng.standard_normal((3, 4096))).cumsum(-1) % 7
    _, _, z = signal.stft(s, window="hann", nperseg=1024, noverlap=512,
                          boundary=None, padded=False, detrend=False)
    self.assertEqual(z.shape[-1], 7)  # the paper's T = 7 frames, K = 513
    power = (np.abs(z) ** 2).mean(-1)
    p = power / power.sum(-1, keepdims=True)
    want = -(p * np.log2(p)).sum(-1) / math.log2(513)
    np.testing.assert_allclose(fe.spectrum_fe(s, 1024, 512), want,
                               rtol=1e-10)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "valid choices: hann"):
      fe.spectrum_fe(np.ones(64), 16, 8, window="kaiser")
    with self.assertRaisesRegex(ValueError, "valid choices: native"):
      fe.pair_norms(np.ones((1, 2, 1, 4)), "interleaved")
    with self.assertRaisesRegex(ValueError, "frame"):
      fe.spectrum_fe(np.ones(64), 128, 8)
    with self.assertRaisesRegex(ValueError, "a, b, c, a\\+b"):
      fe.select_pairs({"spectrum": np.ones((1, 1, 1)),
                       "sequence": np.ones((1, 1, 1))}, rule="d")


class CaptureTest(absltest.TestCase):

  def test_capture_matches_manual_projection_and_rotation(self):
    model = _model()
    ids = np.random.default_rng(0).integers(0, 64, (2, 48))
    (q0, k0), (q1, k1) = fe.capture_qk(model, ids)
    self.assertEqual(q0.shape, (2, 48, 4, 8))
    self.assertEqual(k1.shape, (2, 48, 2, 8))
    blk = model.layers[0]
    x = np.asarray(blk.attn_norm(model.embed(jnp.asarray(ids))))
    q_raw = np.einsum("btd,dnh->btnh", x, np.asarray(blk.attn.q_dnh[...]))
    inv, _ = rope.inv_freq("default", head_dim=8, base=1e4)
    ang = np.arange(48)[:, None] * inv.astype(np.float64)  # [T, 4]
    c, s = np.cos(ang)[None, :, None], np.sin(ang)[None, :, None]
    a, b = q_raw[..., :4], q_raw[..., 4:]
    want = np.concatenate([a * c - b * s, b * c + a * s], -1)
    np.testing.assert_allclose(q0, want, atol=1e-5)
    # Native pairs are rotation-invariant: post-RoPE norms = pre-RoPE norms.
    np.testing.assert_allclose(fe.pair_norms(q0), np.hypot(a, b), rtol=1e-4)
    # Adjacent (non-native) pairs are not.
    self.assertGreater(np.abs(fe.pair_norms(q0, "adjacent") - fe.pair_norms(
        q_raw, "adjacent")).max(), 1e-2)

  def test_fe_maps_shapes_and_nope_flags(self):
    model = _model()
    ids = np.random.default_rng(0).integers(0, 64, (2, 64))
    maps = fe.fe_maps(model, ids, frame=16, hop=8)
    self.assertEqual(maps["spectrum"].shape, (2, 4, 4))
    self.assertEqual(maps["sequence"].shape, (2, 4, 4))
    np.testing.assert_array_equal(maps["rope_layer"], [True, False])
    # Equals the metric applied to the captured signal directly.
    q, _ = fe.capture_qk(model, ids)[1]
    s = np.moveaxis(fe.pair_norms(q), 1, -1)  # [B, N, P, T]
    np.testing.assert_allclose(maps["sequence"][1],
                               fe.sequence_fe(s).mean(0), rtol=1e-12)

  def test_heatmap_png(self):
    with tempfile.TemporaryDirectory() as d:
      path = fe.plot_fe_heatmaps(np.random.rand(3, 4, 16),
                                 os.path.join(d, "fe.png"))
      with open(path, "rb") as f:
        self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class SelectionAndAttenuationTest(parameterized.TestCase):

  def test_rules_and_thresholds(self):
    maps = {"spectrum": np.array([[[0.1, 0.3, 0.5, np.nan]]]),
            "sequence": np.array([[[0.9, 0.5, 0.7, 0.2]]]),
            "rope_layer": np.array([True])}
    np.testing.assert_array_equal(fe.select_pairs(maps, "a")[0, 0],
                                  [False, False, True, False])
    np.testing.assert_array_equal(fe.select_pairs(maps, "b")[0, 0],
                                  [False, True, False, True])
    np.testing.assert_array_equal(fe.select_pairs(maps, "c")[0, 0],
                                  [True, False, False, False])
    np.testing.assert_array_equal(fe.select_pairs(maps, "a+b")[0, 0],
                                  [False, True, True, True])
    np.testing.assert_array_equal(
        fe.select_pairs(maps, "a", thresholds={"a": 0.2})[0, 0],
        [False, True, True, False])
    maps["rope_layer"] = np.array([False])
    self.assertFalse(fe.select_pairs(maps, "a+b").any())
    v = np.arange(100.0)
    t = fe.quantile_threshold(v, 0.1, "below")
    self.assertEqual(fe.threshold_mask(v, t, "below").sum(), 10)
    t = fe.quantile_threshold(v, 0.25, "above")
    self.assertEqual(fe.threshold_mask(v, t, "above").sum(), 25)
    np.testing.assert_array_equal(
        fe.alpha_table(np.array([True, False]), 0.1),
        np.array([0.1, 1.0], np.float32))

  @parameterized.parameters("magnitude", "angle")
  def test_alpha_one_is_bit_identical(self, mode):
    model = _model(qkv_bias=True)
    ids = np.random.default_rng(2).integers(0, 64, (2, 40))
    base = np.asarray(model(jnp.asarray(ids)))
    alpha = fe.alpha_table(np.ones((2, 4, 4), bool), 1.0)
    got = np.asarray(fe.attenuated_forward(model, ids, alpha, mode).logits)
    np.testing.assert_array_equal(got, base)
    # and an attenuation that is not 1 does change the logits
    alpha = fe.alpha_table(np.ones((2, 4, 4), bool), 0.5)
    got = np.asarray(fe.attenuated_forward(model, ids, alpha, mode).logits)
    self.assertGreater(np.abs(got - base).max(), 1e-4)
    # the original model is untouched
    np.testing.assert_array_equal(np.asarray(model(jnp.asarray(ids))), base)

  def test_magnitude_mode_scales_pair_logit_terms(self):
    model = _model(qkv_bias=True)
    ids = np.random.default_rng(3).integers(0, 64, (1, 32))
    sel = np.zeros((2, 4, 4), bool)
    sel[0, 1, 2] = True  # layer 0, head 1, pair 2
    weighted = fe.weighted_rope_model(model, fe.alpha_table(sel, 0.3))
    (q, k), _ = fe.capture_qk(model, ids)
    (qw, kw), _ = fe.capture_qk(weighted, ids)
    np.testing.assert_array_equal(kw, k)
    pair = np.zeros(8, bool)
    pair[[2, 6]] = True  # half-split pair 2 = dims 2 and 6
    np.testing.assert_allclose(qw[:, :, 1, pair], 0.09 * q[:, :, 1, pair],
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(qw[:, :, 1, ~pair], q[:, :, 1, ~pair])
    np.testing.assert_array_equal(qw[:, :, [0, 2, 3]], q[:, :, [0, 2, 3]])
    # Per pair, <alpha R q, alpha R k> = alpha^2 <R q, R k>.
    qj, kj = q[0, :, 1][:, pair], k[0, :, 0][:, pair]  # head 1 -> kv head 0
    qwj = qw[0, :, 1][:, pair]
    np.testing.assert_allclose(qwj @ kj.T, 0.09 * (qj @ kj.T), rtol=1e-4,
                               atol=1e-8)

  def test_magnitude_mode_refuses_qk_norm(self):
    # qk_norm renormalises q before RoPE, so scaling q columns is not alpha.
    cfg = decoder_lib.DecoderConfig(
        vocab_size=64, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
        mlp_dim=64, qk_norm=True)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "qk_norm"):
      fe.weighted_rope_model(model, np.ones((2, 4, 4), np.float32))

  def test_angle_mode_needs_shared_heads(self):
    alpha = np.ones((2, 4, 4), np.float32)
    alpha[0, 1, 0] = 0.5
    with self.assertRaisesRegex(ValueError, "shared by the heads"):
      fe.rope_pair_weights_from_alpha(alpha)

  def test_perplexity_hand_value_and_sweep(self):
    model = _model()
    ids = np.random.default_rng(4).integers(0, 64, (3, 20))
    logits = np.asarray(model(jnp.asarray(ids)), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp[:, :-1], ids[:, 1:, None], -1).mean()
    self.assertAlmostEqual(fe.perplexity(model, ids, batch_size=2),
                           math.exp(nll), places=4)
    sweep = fe.alpha_sweep(model, ids, np.ones((2, 4, 4), bool),
                           alphas=(0.5, 1.0))
    self.assertAlmostEqual(sweep["perplexity"][1], math.exp(nll), places=4)
    self.assertEqual(sweep["num_selected"], 32)


class SpecPresetTest(absltest.TestCase):

  def test_spec_preset_is_spec_c_model(self):
    from jaxlab.configs import frequency_entropy as fe_config  # pylint: disable=g-import-not-at-top
    c = fe_config.get_config("spec")
    self.assertEqual((c.model.num_layers, c.model.dim, c.train.seq_len,
                      c.fe.frame, c.fe.hop), (4, 128, 512, 128, 64))
    self.assertEqual(c.model.dim // c.model.num_heads, 32)  # 16 pairs
    self.assertEqual(tuple(c.model.nope_layers), (3,))
    self.assertEqual(c.train.steps, 300)


if __name__ == "__main__":
  absltest.main()
