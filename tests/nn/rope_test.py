"""Default RoPE frequencies and apply_rope against NumPy."""

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

from jaxlab.nn import rope


class DefaultInvFreqTest(parameterized.TestCase):

  def test_hand_computed(self):
    # theta_i = base^(-2i/d): d=4, base=100 -> [1, 100^-0.5].
    np.testing.assert_allclose(rope.default_inv_freq(4, 100.0), [1.0, 0.1])
    inv, scale = rope.inv_freq("default", head_dim=8, base=10000.0)
    np.testing.assert_allclose(inv, [1.0, 0.1, 0.01, 0.001], rtol=1e-6)
    self.assertEqual(inv.dtype, np.float32)
    self.assertEqual(scale, 1.0)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "even head_dim"):
      rope.default_inv_freq(5, 10000.0)
    with self.assertRaisesRegex(ValueError, "unknown RoPE .* valid choices:"
                                r".*default"):
      rope.inv_freq("no_such_method", head_dim=8, base=1e4)


class ApplyRopeTest(parameterized.TestCase):

  @parameterized.parameters((8, 10000.0), (16, 500.0))
  def test_matches_numpy_rotation(self, h, base):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(2, 5, 3, h)).astype(np.float32)
    pos = np.array([[0, 1, 2, 3, 4], [7, 100, 3, 0, 2048]])
    inv, scale = rope.inv_freq("default", head_dim=h, base=base)
    cos, sin = rope.cos_sin(jnp.asarray(pos), inv, scale)
    out = np.asarray(rope.apply_rope(jnp.asarray(x), cos, sin))
    # Reference: pair i = (dim i, dim i + h/2) rotated by pos * theta_i.
    ref = np.empty_like(x, dtype=np.float64)
    half = h // 2
    for i in range(half):
      a = pos[:, :, None] * base ** (-2.0 * i / h)
      c, s = np.cos(a), np.sin(a)
      ref[..., i] = x[..., i] * c - x[..., i + half] * s
      ref[..., i + half] = x[..., i + half] * c + x[..., i] * s
    np.testing.assert_allclose(out, ref, atol=2e-4)  # fp32 angles up to 2048
    # Rotations keep norms.
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1),
                               np.linalg.norm(x, axis=-1), rtol=1e-5)

  def test_scores_depend_on_relative_position_only(self):
    rng = np.random.RandomState(1)
    q = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
    inv, _ = rope.inv_freq("default", head_dim=8, base=100.0)

    def score(m, n):
      cq, sq = rope.cos_sin(jnp.asarray([[m]]), inv)
      ck, sk = rope.cos_sin(jnp.asarray([[n]]), inv)
      return float(jnp.sum(rope.apply_rope(q, cq, sq) *
                           rope.apply_rope(k, ck, sk)))

    self.assertAlmostEqual(score(5, 2), score(13, 10), places=4)
    self.assertAlmostEqual(score(0, 0), float(jnp.sum(q * k)), places=5)
    self.assertGreater(abs(score(5, 2) - score(5, 4)), 1e-3)

  def test_scale_and_pair_weights(self):
    inv = np.array([1.0, 0.5], np.float32)
    pos = jnp.asarray([[3]])
    cos, sin = rope.cos_sin(pos, inv, attention_scale=2.0,
                            pair_weights_h=jnp.asarray([1.0, 0.0]))
    np.testing.assert_allclose(cos[0, 0], 2 * np.cos([3.0, 0.0, 3.0, 0.0]),
                               rtol=1e-6)
    np.testing.assert_allclose(sin[0, 0], 2 * np.sin([3.0, 0.0, 3.0, 0.0]),
                               atol=1e-6)

  def test_keeps_dtype(self):
    x = jnp.ones((1, 2, 1, 4), jnp.bfloat16)
    cos, sin = rope.cos_sin(jnp.asarray([[0, 1]]),
                            rope.default_inv_freq(4, 1e4))
    self.assertEqual(rope.apply_rope(x, cos, sin).dtype, jnp.bfloat16)


if __name__ == "__main__":
  absltest.main()
