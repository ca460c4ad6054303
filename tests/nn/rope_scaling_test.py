"""RoPE scalings: parity with transformers and the MrRoPE spec (D.3, D.6)."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.nn import rope

# The spec's own numeric setting (D=128, b=1e4, L=4K, S=16).
D, B, L, S = 128, 1e4, 4096, 16.0


def _hf(rope_type, *, head_dim, base, max_pos, seq_len=None, **params):
  """transformers' own (inv_freq, attention_factor) for a tiny config."""
  import transformers  # pylint: disable=g-import-not-at-top
  from transformers import modeling_rope_utils  # pylint: disable=g-import-not-at-top
  cfg = transformers.LlamaConfig(
      hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
      max_position_embeddings=max_pos,
      rope_parameters={"rope_type": rope_type, "rope_theta": base, **params})
  fn = modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type]
  inv, scale = fn(cfg, "cpu", seq_len=seq_len)
  return inv.numpy(), float(scale)


class HuggingFaceParityTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("d32", 32, 10000.0, 4.0, 128),
      ("d64_f8", 64, 500000.0, 8.0, 1024),
      ("d128_f16", 128, 10000.0, 16.0, 4096))
  def test_pi(self, head_dim, base, factor, orig):
    want, want_scale = _hf("linear", head_dim=head_dim, base=base,
                           max_pos=orig, factor=factor)
    got, scale = rope.inv_freq("pi", head_dim=head_dim, base=base,
                               factor=factor)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    self.assertEqual(scale, want_scale)

  @parameterized.named_parameters(
      ("short", 32, 4.0, 128, 100),  # within L: default frequencies
      ("at_L", 32, 4.0, 128, 128),
      ("long", 32, 4.0, 128, 700),
      ("d64", 64, 8.0, 256, 4000))
  def test_dynamic_ntk(self, head_dim, factor, orig, seq_len):
    want, want_scale = _hf("dynamic", head_dim=head_dim, base=10000.0,
                           max_pos=orig, seq_len=seq_len, factor=factor)
    got, scale = rope.inv_freq("dynamic_ntk", head_dim=head_dim, base=1e4,
                               factor=factor, original_max_position=orig,
                               seq_len=seq_len)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    self.assertEqual(scale, want_scale)
    if seq_len <= orig:
      np.testing.assert_allclose(got, rope.default_inv_freq(head_dim, 1e4),
                                 rtol=1e-6)

  @parameterized.named_parameters(
      ("plain", {}),
      ("betas", {"beta_fast": 16.0, "beta_slow": 2.0}),
      ("no_truncate", {"truncate": False}),
      ("mscale", {"mscale": 0.707, "mscale_all_dim": 0.707}),
      ("mscale_diff", {"mscale": 1.0, "mscale_all_dim": 0.5}),
      ("attention_factor", {"attention_factor": 1.3}))
  def test_yarn(self, params):
    for head_dim, base, factor, orig in [(32, 1e4, 4.0, 128),
                                         (64, 5e5, 8.0, 2048),
                                         (128, 1e4, 16.0, 4096)]:
      want, want_scale = _hf("yarn", head_dim=head_dim, base=base,
                             max_pos=int(orig * factor), factor=factor,
                             original_max_position_embeddings=orig, **params)
      got, scale = rope.inv_freq("yarn", head_dim=head_dim, base=base,
                                 factor=factor, original_max_position=orig,
                                 **params)
      np.testing.assert_allclose(got, want, rtol=2e-6)
      self.assertAlmostEqual(scale, want_scale, places=12)

  @parameterized.named_parameters(
      ("llama31", 128, 500000.0, 8.0, 8192, 1.0, 4.0),
      ("tiny", 32, 10000.0, 4.0, 128, 1.0, 4.0),
      ("other_bands", 64, 10000.0, 16.0, 512, 2.0, 8.0))
  def test_llama3(self, head_dim, base, factor, orig, low, high):
    want, want_scale = _hf("llama3", head_dim=head_dim, base=base,
                           max_pos=int(orig * factor), factor=factor,
                           original_max_position_embeddings=orig,
                           low_freq_factor=low, high_freq_factor=high)
    got, scale = rope.inv_freq("llama3", head_dim=head_dim, base=base,
                               factor=factor, original_max_position=orig,
                               low_freq_factor=low, high_freq_factor=high)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    self.assertEqual(scale, want_scale)


class MrRoPESpecTest(parameterized.TestCase):

  def _kw(self, **kw):
    return dict(head_dim=D, base=B, factor=S, original_max_position=L, **kw)

  @parameterized.parameters("mrope_uni", "mrope_pro")
  def test_endpoints(self, method):
    lo, hi = rope.band_boundaries(head_dim=D, base=B, original_max_position=L)
    # Hand-computed: dim(32) = 128 ln(4096/(64 pi)) / (2 ln 1e4) = 20.94,
    # dim(1) = 128 ln(4096/(2 pi)) / (2 ln 1e4) = 45.0 (ceil 46).
    self.assertEqual((lo, hi), (20, 46))
    s = rope.cumulative_scale(method, **self._kw())
    self.assertAlmostEqual(s[lo], 1.0, places=12)
    self.assertAlmostEqual(s[hi], S, places=10)
    np.testing.assert_allclose(s[:lo + 1], 1.0)
    np.testing.assert_allclose(s[hi:], S)
    self.assertTrue(np.all(np.diff(s) >= -1e-12))  # monotone

  def test_uni_and_pro_closed_forms(self):
    lo, hi = 20, 46
    n = hi - lo
    t = np.clip(np.arange(D // 2) - lo, 0, n)
    np.testing.assert_allclose(
        rope.cumulative_scale("mrope_uni", **self._kw()), S ** (t / n),
        rtol=1e-12)
    np.testing.assert_allclose(
        rope.cumulative_scale("mrope_pro", **self._kw()),
        S ** (t * (t + 1) / (n * (n + 1))), rtol=1e-12)
    # Pro's eps_d = 2(1 + d - d_l)/((1 + d_h - d_l)(d_h - d_l)) sums to 1.
    eps = np.log(rope.step_ratio("mrope_pro", **self._kw())[lo:hi]) / np.log(S)
    d = np.arange(lo, hi)
    np.testing.assert_allclose(eps, 2 * (1 + d - lo) / ((1 + hi - lo) *
                                                        (hi - lo)), rtol=1e-9)
    self.assertAlmostEqual(eps.sum(), 1.0, places=12)

  def test_attention_scale(self):
    for method in ("mrope_uni", "mrope_pro", "yarn", "yarn_rotation"):
      _, scale = rope.inv_freq(method, **self._kw())
      self.assertAlmostEqual(scale, 0.1 * math.log(S) + 1, places=12)
    _, scale = rope.inv_freq("mrope_pro", head_dim=D, base=B, factor=1.0,
                             original_max_position=L)
    self.assertEqual(scale, 1.0)

  def test_pro_progressive_yarn_rotation_regressive(self):
    lo, hi = 20, 46
    log_pro = np.log(rope.step_ratio("mrope_pro", **self._kw()))[lo:hi]
    self.assertTrue(np.all(np.diff(log_pro) > 0))
    log_uni = np.log(rope.step_ratio("mrope_uni", **self._kw()))[lo:hi]
    np.testing.assert_allclose(log_uni, math.log(S) / (hi - lo), rtol=1e-9)
    # Rotation-count YaRN: lambda decreases wherever the band is active
    # (the paper's inequality); the spec's numbers: 1.15 -> 1.00.
    lam = rope.step_ratio("yarn_rotation", **self._kw())
    active = np.nonzero(lam > 1 + 1e-9)[0]
    self.assertGreater(active.size, 10)
    # The first and last steps straddle a clip of gamma (partial steps);
    # strictly inside the band every step is smaller than the one before.
    inner = lam[active[1]:active[-1]]
    self.assertTrue(np.all(np.diff(np.log(inner)) < 0))
    self.assertAlmostEqual(inner[0], 1.15, delta=0.01)
    # The HF index-ramp variant is not regressive: lambda rises 1.04 -> 1.58.
    lam_idx = rope.step_ratio("yarn", **self._kw())
    act = lam_idx[lam_idx > 1 + 1e-9]
    self.assertAlmostEqual(act[0], 1.04, delta=0.01)
    self.assertAlmostEqual(act.max(), 1.58, delta=0.01)
    self.assertTrue(np.all(np.diff(act[:-1]) > 0))

  def test_yarn_rotation_gamma(self):
    s = rope.cumulative_scale("yarn_rotation", **self._kw())
    r = L * rope.default_inv_freq(D, B) / (2 * math.pi)
    gamma = np.clip((r - 1) / 31, 0, 1)
    np.testing.assert_allclose(s, 1 / (gamma + (1 - gamma) / S), rtol=1e-12)

  def test_ntk_matches_base_rescaling(self):
    want = rope.default_inv_freq(D, B * S ** (D / (D - 2)))
    got, _ = rope.inv_freq("ntk", **self._kw())
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)
    i = np.arange(D // 2)
    np.testing.assert_allclose(rope.cumulative_scale("ntk", **self._kw()),
                               S ** (i / (D // 2 - 1)), rtol=1e-9)

  def test_turn_grid_boundary(self):
    lo, hi = rope.band_boundaries(head_dim=D, base=B, original_max_position=L,
                                  boundary="turn_grid")
    r = L * rope.default_inv_freq(D, B) / (2 * math.pi)
    self.assertGreater(r[lo], 32)
    self.assertLessEqual(r[lo + 1], 32)
    self.assertLess(r[hi], 1)
    self.assertGreaterEqual(r[hi - 1], 1)
    s = rope.cumulative_scale("mrope_pro", boundary="turn_grid", **self._kw())
    self.assertAlmostEqual(s[lo], 1.0)
    self.assertAlmostEqual(s[hi], S)

  def test_rope_bound(self):
    # B(0) = D/2 and the naive first roots of spec D.6 (none: 1.7K; S=16:
    # NTK 7.9K, Pro 14.2K, YaRN-rot 15.0K).
    inv0, _ = rope.inv_freq("default", head_dim=D, base=B)
    self.assertAlmostEqual(float(rope.rope_bound(0, inv0)), D / 2, places=9)
    m = np.arange(5)
    np.testing.assert_allclose(
        rope.rope_bound(m, inv0),
        [np.cos(k * inv0.astype(np.float64)).sum() for k in m], rtol=1e-12)
    roots = {}
    for method in ("default", "ntk", "mrope_pro", "yarn_rotation"):
      inv, _ = rope.inv_freq(method, **self._kw())
      roots[method] = rope.rope_bound_first_root(inv, max_distance=40000)
    self.assertAlmostEqual(roots["default"] / 1000, 1.7, delta=0.1)
    self.assertAlmostEqual(roots["ntk"] / 1000, 7.9, delta=0.1)
    self.assertAlmostEqual(roots["mrope_pro"] / 1000, 14.2, delta=0.1)
    self.assertAlmostEqual(roots["yarn_rotation"] / 1000, 15.0, delta=0.1)

  def test_biased_position_estimate_small_m(self):
    # Before any digit wraps (m theta_0 < 2 pi), every term equals m.
    m = np.array([0.0, 1.0, 3.0, 6.0])
    np.testing.assert_allclose(rope.biased_position_estimate(m, 8, 1e4),
                               4 * m, rtol=1e-12)


class BadInputTest(absltest.TestCase):

  def test_unknown_method_lists_choices(self):
    with self.assertRaisesRegex(ValueError, "valid choices: .*mrope_pro.*"):
      rope.inv_freq("mrope_fast", head_dim=32, base=1e4, factor=2.0)

  def test_factor_below_one(self):
    with self.assertRaisesRegex(ValueError, r">= 1 \(got 0.5\).*yarn"):
      rope.inv_freq("yarn", head_dim=32, base=1e4, factor=0.5,
                    original_max_position=128)

  def test_missing_original_length(self):
    with self.assertRaisesRegex(ValueError, "original_max_position"):
      rope.inv_freq("mrope_pro", head_dim=32, base=1e4, factor=2.0)

  def test_unknown_option(self):
    with self.assertRaisesRegex(ValueError, "valid options: .*truncate"):
      rope.inv_freq("yarn", head_dim=32, base=1e4, factor=2.0,
                    original_max_position=128, low_freq_factor=1.0)

  def test_unknown_boundary(self):
    with self.assertRaisesRegex(ValueError, "turn_grid"):
      rope.inv_freq("mrope_uni", head_dim=32, base=1e4, factor=2.0,
                    original_max_position=128, boundary="round")


if __name__ == "__main__":
  absltest.main()
