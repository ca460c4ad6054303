"""Frequency Entropy (paper C): metrics, q/k capture, weighted RoPE."""

import math
import os
import tempfile

import unittest

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.analysis import frequency_entropy as fe
from jaxlab.io import pretrained
from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import rope
from jaxlab.testing import pretrained_fixtures


# One sequence length for every tiny-model test: the library's forwards run
# op by op, each primitive compiled once per shape (~2 s a forward for a new
# shape on the 2-core machine, ~ms for a seen one), so the tests share them.
T = 64


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
    ids = np.random.default_rng(0).integers(0, 64, (2, T))
    (q0, k0), (q1, k1) = fe.capture_qk(model, ids)
    self.assertEqual(q0.shape, (2, T, 4, 8))
    self.assertEqual(k1.shape, (2, T, 2, 8))
    blk = model.layers[0]
    x = np.asarray(blk.attn_norm(model.embed(jnp.asarray(ids))))
    q_raw = np.einsum("btd,dnh->btnh", x, np.asarray(blk.attn.q_dnh[...]))
    inv, _ = rope.inv_freq("default", head_dim=8, base=1e4)
    ang = np.arange(T)[:, None] * inv.astype(np.float64)  # [T, 4]
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
    ids = np.random.default_rng(0).integers(0, 64, (2, T))
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
    ids = np.random.default_rng(2).integers(0, 64, (2, T))
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
    ids = np.random.default_rng(3).integers(0, 64, (1, T))
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
    ids = np.random.default_rng(4).integers(0, 64, (3, T))
    logits = np.asarray(model(jnp.asarray(ids)), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp[:, :-1], ids[:, 1:, None], -1).mean()
    self.assertAlmostEqual(fe.perplexity(model, ids, batch_size=2),
                           math.exp(nll), places=4)
    sweep = fe.alpha_sweep(model, ids, np.ones((2, 4, 4), bool),
                           alphas=(0.5, 1.0))
    self.assertAlmostEqual(sweep["perplexity"][1], math.exp(nll), places=4)
    self.assertEqual(sweep["num_selected"], 32)


class LibraryPiecesTest(parameterized.TestCase):

  def test_weighted_rope_scales_selected_q_columns_exactly(self):
    # The attenuation hook: the q columns (j, j + H/2) of each selected
    # (layer, head, pair) are multiplied by alpha^2 (float32), every other
    # parameter is bit-identical (k, v, o, the other heads and pairs).
    model = _model(qkv_bias=True)
    sel = np.zeros((2, 4, 4), bool)
    sel[0, 3, 1] = sel[1, 0, 0] = sel[1, 0, 3] = True
    weighted = fe.weighted_rope_model(model, fe.alpha_table(sel, 0.3))
    a2 = np.float32(0.3) ** 2
    for layer, (b0, b1) in enumerate(zip(model.layers, weighted.layers)):
      for name in ("q_dnh", "q_bias_nh"):
        w0 = np.asarray(getattr(b0.attn, name)[...])
        want = w0.copy()
        for h, j in np.argwhere(sel[layer]):
          want[..., h, [j, j + 4]] = w0[..., h, [j, j + 4]] * a2
        np.testing.assert_array_equal(
            np.asarray(getattr(b1.attn, name)[...]), want)
        self.assertTrue((want != w0).any())
    p0 = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    p1 = dict(nnx.to_flat_state(nnx.state(weighted, nnx.Param)))
    self.assertEqual(set(p0), set(p1))
    for key, v in p0.items():
      if key[-1] not in ("q_dnh", "q_bias_nh"):
        np.testing.assert_array_equal(np.asarray(p1[key][...]),
                                      np.asarray(v[...]), err_msg=str(key))

  def test_next_token_scores_hand_values(self):
    model = _model()
    ids = np.random.default_rng(5).integers(0, 64, (3, T))
    logits = np.asarray(model(jnp.asarray(ids)), np.float64)[:, :-1]
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, ids[:, 1:, None], -1)[..., 0].mean(-1)
    acc = (logits.argmax(-1) == ids[:, 1:]).mean(-1)
    got = fe.next_token_scores(model, ids, batch_size=2)
    np.testing.assert_allclose(got["nll"], nll, rtol=1e-5)
    np.testing.assert_array_equal(got["accuracy"], acc)
    self.assertEqual(got["tokens"], T - 1)
    self.assertAlmostEqual(fe.perplexity(model, ids), math.exp(nll.mean()),
                           places=4)
    # One table per row = each row scored alone under its own table.
    sel = np.zeros((3, 2, 4, 4), bool)
    for i in range(3):
      sel[i, :, :, i] = True  # row i: pair i of every layer and head
    tables = fe.alpha_table(sel, 0.1)
    per_row = fe.next_token_scores(model, ids, tables)
    for i in range(3):
      alone = fe.next_token_scores(model, ids[i:i + 1], tables[i])
      np.testing.assert_allclose(per_row["nll"][i], alone["nll"][0],
                                 rtol=1e-6)
    # selection_scores: baseline once per alpha; empty selections left out
    sc = fe.selection_scores(model, ids, {"none": np.zeros((2, 4, 4), bool),
                                          "one": tables[0] < 1}, (0.1, 0.5))
    self.assertEqual(set(sc), {"baseline", "one"})
    np.testing.assert_allclose(sc["baseline"][0.5]["nll"], nll, rtol=1e-5)
    np.testing.assert_allclose(sc["one"][0.1]["nll"][0], per_row["nll"][0],
                               rtol=1e-6)

  def test_quantile_random_and_arms(self):
    rng = np.random.default_rng(0)
    maps = {"spectrum": rng.random((3, 2, 10)),
            "sequence": rng.random((3, 2, 10)),
            "rope_layer": np.array([True, True, False])}
    sel = fe.fe_selections(maps, 0.1, rules=("a",),
                           quantiles=tuple(fe.QUANTILE_ARMS),
                           random_like="spectrum_low", seed=3, random_rows=4)
    self.assertEqual(list(sel), ["rule_a", "spectrum_low_q",
                                 "spectrum_high_q", "sequence_low_q",
                                 "sequence_high_q", "random_q"])
    rope = np.zeros((3, 2, 10), bool)
    rope[:2] = True
    spec = np.where(rope, maps["spectrum"], np.nan).ravel()
    order = np.argsort(np.nan_to_num(spec, nan=9.0))
    low = np.zeros(60, bool)
    low[order[:4]] = True  # 10% of the 40 RoPE-layer pairs, lowest
    np.testing.assert_array_equal(sel["spectrum_low_q"].ravel(), low)
    self.assertFalse((sel["spectrum_high_q"] & ~rope).any())
    self.assertEqual(sel["random_q"].shape, (4, 3, 2, 10))
    for i in range(4):  # row i: its own draw, seed 3 + i, inside the pool
      np.testing.assert_array_equal(
          sel["random_q"][i], fe.random_selection(rope, 4, 3 + i))
      self.assertEqual(sel["random_q"][i].sum(), 4)
      self.assertFalse((sel["random_q"][i] & ~rope).any())
    self.assertFalse(np.array_equal(sel["random_q"][0], sel["random_q"][1]))
    high = dict(maps, sequence=maps["sequence"] + 1.0)  # rule b: no pair
    self.assertEqual(fe.fe_selections(high, 0.1, rules=("a", "b"),
                                      quantiles=(), random_like=None,
                                      drop_empty=True).keys(), {"rule_a"})
    with self.assertRaisesRegex(ValueError, "cannot draw 41"):
      fe.random_selection(rope, 41, 0)
    self.assertEqual(fe.selection_labels(0.025)["sequence_high_q"],
                     "SequenceFE highest 2.5%")

  def test_maps_from_qk_and_group_means(self):
    model = _model()
    ids = np.random.default_rng(6).integers(0, 64, (3, T))
    qk = fe.capture_qk(model, ids)
    per = fe.maps_from_qk(qk, which="k", frame=16, hop=8,
                          nope_layers=(1,), per_sequence=True)
    self.assertEqual(per["spectrum"].shape, (3, 2, 2, 4))  # [B, L, K, P]
    mean = fe.fe_maps(model, ids, which="k", frame=16, hop=8)
    np.testing.assert_allclose(per["spectrum"].mean(0), mean["spectrum"],
                               rtol=1e-12)
    np.testing.assert_array_equal(per["rope_layer"], mean["rope_layer"])
    g = fe.fe_group_means({"k": per}, layer_group=1, pair_group=3)
    self.assertEqual(list(g["depth"]), ["layers 0-0", "layers 1-1"])
    self.assertEqual(list(g["pairs"]), ["pairs 0-2", "pairs 3-3"])
    np.testing.assert_allclose(g["depth"]["layers 1-1"]["k_sequence"],
                               per["sequence"][:, 1].mean((1, 2)))
    np.testing.assert_allclose(g["pairs"]["pairs 0-2"]["k_spectrum"],
                               per["spectrum"][..., :3].mean((1, 2, 3)))
    self.assertEqual(fe.rope_vs_nope(mean)["rope"],
                     float(np.nanmean(mean["sequence"][0])))


NAME = "smollm2-135m-instruct"
# The first 128 SmolLM2 tokens of `jaxlab.data.prose.PASSAGES[13]` ("When
# Anna was nine, her grandfather let her help him repair the old clock...").
SMOL_IDS = [
    2427, 16435, 436, 7462, 28, 874, 19756, 1303, 874, 724, 1272, 7698, 260,
    1573, 9191, 338, 9318, 281, 260, 7448, 282, 650, 11992, 30, 657, 761,
    8976, 929, 1092, 1041, 436, 3988, 28, 284, 624, 6780, 10091, 1671, 436,
    4993, 351, 6588, 30, 3488, 19756, 6572, 260, 1165, 6644, 281, 260, 3433,
    284, 4342, 874, 260, 35436, 28, 253, 986, 20933, 12790, 351, 253, 4591,
    937, 418, 260, 4869, 30, 20677, 260, 2715, 28, 384, 5192, 28, 592, 14296,
    351, 5383, 4077, 338, 16231, 1592, 28, 588, 338, 971, 18760, 282, 260,
    35436, 1303, 582, 5429, 16710, 1896, 284, 4935, 260, 3288, 3703, 411, 253,
    5383, 1902, 30, 8219, 502, 2637, 260, 2891, 578, 282, 624, 1671, 284,
    8259, 357, 335, 253, 11244, 335, 260, 13544, 30, 16435]


def _numpy_fe(norms_pt, frame, hop):
  """SpectrumFE / SequenceFE of `[P, T]` signals, written out with loops."""
  win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame) / frame)
  spec, seq = [], []
  for s in norms_pt:
    frames = [s[i:i + frame] * win
              for i in range(0, len(s) - frame + 1, hop)]
    power = np.mean([np.abs(np.fft.rfft(f)) ** 2 for f in frames], axis=0)
    p = power / power.sum()
    spec.append(-(p * np.log2(p)).sum() / np.log2(frame // 2 + 1))
    power = np.abs(np.fft.fft(s)[1:len(s) // 2]) ** 2
    p = power / power.sum()
    seq.append(-(p * np.log2(p)).sum() / np.log2(len(s) // 2 - 1))
  return np.array(spec), np.array(seq)


@unittest.skipIf(pretrained.skip_reason(NAME), pretrained.skip_reason(NAME))
class SmolLM2Test(absltest.TestCase):
  """FE of the real model's post-RoPE q/k against a numpy recomputation."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # pretrained.load(NAME), converted once per test session.
    cls.model, cls.cfg = pretrained_fixtures.load(NAME)
    cls.ids = np.asarray([SMOL_IDS])
    cls.qk = fe.capture_qk(cls.model, cls.ids)

  def test_layer0_qk_are_projection_then_rope_theta_1e5(self):
    # Layer 0 from the weights: embedding, RMSNorm, projection, then the
    # half-split rotation with SmolLM2's rope_theta = 100000, head_dim 64.
    self.assertEqual((self.cfg.rope_theta, self.cfg.resolved_head_dim,
                      self.cfg.embed_scale), (1e5, 64, False))
    blk = self.model.layers[0]
    x = np.asarray(self.model.embed_vd[...], np.float64)[self.ids[0]]
    x = x / np.sqrt((x * x).mean(-1, keepdims=True) + self.cfg.norm_eps)
    x = x * np.asarray(blk.attn_norm.scale[...], np.float64)
    ang = np.arange(128)[:, None] * 1e5 ** (-np.arange(32) / 32)  # [T, 32]
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    for got, w in ((self.qk[0][0][0], blk.attn.q_dnh),
                   (self.qk[0][1][0], blk.attn.k_dkh)):
      raw = np.einsum("td,dnh->tnh", x, np.asarray(w[...], np.float64))
      a, b = raw[..., :32], raw[..., 32:]
      want = np.concatenate([a * c - b * s, b * c + a * s], -1)
      # float32 sums of 576 products: relative error well under 1e-4.
      np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(want).max())

  def test_fe_maps_match_numpy_on_a_few_heads(self):
    for which, heads in (("q", (0, 4, 8)), ("k", (0, 2))):
      maps = fe.maps_from_qk(self.qk, which=which, frame=32, hop=16)
      self.assertEqual(maps["spectrum"].shape,
                       (30, 9 if which == "q" else 3, 32))
      for layer in (0, 14, 29):
        x = np.asarray(self.qk[layer][0 if which == "q" else 1][0],
                       np.float64)
        for h in heads:
          norms = np.hypot(x[:, h, :32], x[:, h, 32:]).T  # native pairs
          spec, seq = _numpy_fe(norms, 32, 16)
          np.testing.assert_allclose(maps["spectrum"][layer, h], spec,
                                     rtol=1e-9)
          np.testing.assert_allclose(maps["sequence"][layer, h], seq,
                                     rtol=1e-9)
      self.assertTrue(np.all((maps["spectrum"] > 0) & (maps["spectrum"] < 1)))


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
