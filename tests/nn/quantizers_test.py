"""Voting-LFQ / LFQ / VQ (jaxlab.nn.quantizers) and the StableToken losses."""

import math

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn import quantizers as q
from jaxlab.objectives import stabletoken as obj


class BitsIndexTest(absltest.TestCase):

  def test_round_trip_for_every_index(self):
    bits = 12
    idx = jnp.arange(2 ** bits)
    codes = q.index_to_bits(idx, bits)
    chex.assert_shape(codes, (2 ** bits, bits))
    np.testing.assert_array_equal(q.bits_to_index(codes), np.arange(2 ** bits))
    # Little-endian: bit j of k is (k >> j) & 1 (numpy's binary repr reversed).
    want = np.array([[int(c) for c in np.binary_repr(k, bits)[::-1]]
                     for k in range(2 ** bits)])
    np.testing.assert_array_equal(np.asarray(codes) > 0, want == 1)
    np.testing.assert_array_equal(q.codebook(bits), codes)

  def test_hand_examples(self):
    self.assertEqual(int(q.bits_to_index(jnp.array([1., -1., 1.]))), 5)
    self.assertEqual(int(q.bits_to_index(jnp.array([0, 0, 0, 1]))), 8)
    np.testing.assert_array_equal(q.index_to_bits(6, 3), [-1., 1., 1.])

  def test_bad_bits(self):
    with self.assertRaisesRegex(ValueError, "bits must be in"):
      q.index_to_bits(0, 0)


class VoteTest(absltest.TestCase):

  def test_hard_vote_is_bitwise_majority(self):
    rng = np.random.default_rng(0)
    for n in (1, 3, 5, 7):
      codes = rng.choice([-1.0, 1.0], size=(200, n, 13))
      plus = (codes > 0).sum(1)
      want = np.where(plus > n / 2, 1.0, -1.0)
      np.testing.assert_array_equal(q.majority_bits(jnp.asarray(codes)), want)
      np.testing.assert_array_equal(
          q.bits_to_index(q.majority_bits(jnp.asarray(codes))),
          q.bits_to_index(jnp.asarray(want)))

  def test_ties_go_to_minus_one(self):
    # Even n only (VotingLFQ refuses it): 2 of 4 voters -> s = 0 -> bit 0.
    codes = jnp.array([[1., 1.], [1., -1.], [-1., 1.], [-1., -1.]])
    np.testing.assert_array_equal(q.soft_vote(codes, axis=0), [0., 0.])
    np.testing.assert_array_equal(q.majority_bits(codes, axis=0), [-1., -1.])

  def test_sign_code_and_ste_gradient(self):
    p = jnp.array([[-0.3, 0.0, 2.0], [0.1, -1.0, 0.5]])     # [n=2, d=3]
    np.testing.assert_array_equal(q.sign_ste(p), [[-1, 1, 1], [1, -1, 1]])
    # d/dp of sum(soft vote * w) through the STE is w / n per branch.
    w = jnp.array([1.0, 2.0, 3.0])
    g = jax.grad(lambda p: jnp.sum(q.soft_vote(q.sign_ste(p), axis=0) * w))(p)
    np.testing.assert_allclose(g, np.tile(w / 2, (2, 1)))


class VotingLFQTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.layer = q.VotingLFQ(8, n_voters=5, bits=6, num_clean=3,
                            rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    cls.h = jnp.asarray(rng.standard_normal((3, 7, 8)), jnp.float32)
    cls.h_noisy = jnp.asarray(rng.standard_normal((3, 7, 8)), jnp.float32)

  def test_inference_indices_are_the_majority_of_branch_signs(self):
    out = self.layer(self.h, train=False)
    p = np.einsum("btd,dnk->btnk", np.asarray(self.h),
                  np.asarray(self.layer.w[...])) + np.asarray(self.layer.b[...])
    np.testing.assert_allclose(out.branch_pre, p, rtol=1e-5, atol=1e-5)
    signs = np.where(p >= 0, 1, -1)
    maj = np.where(signs.sum(2) > 0, 1, -1)
    want = (np.where(maj > 0, 1, 0) * 2 ** np.arange(6)).sum(-1)
    np.testing.assert_array_equal(out.indices, want)
    np.testing.assert_array_equal(out.code, maj)     # hard vote fed out
    np.testing.assert_array_equal(
        out.branch_indices, (np.where(signs > 0, 1, 0)
                             * 2 ** np.arange(6)).sum(-1))
    # Training feeds the soft vote s in {-1, -0.6, ..., 1}.
    out_t = self.layer(self.h, train=True)
    np.testing.assert_allclose(out_t.code, signs.mean(2), atol=1e-6)
    np.testing.assert_array_equal(out_t.indices, out.indices)

  def test_routing_sends_the_noisy_encoding_to_marked_branches(self):
    mask = q.noisy_branch_mask(jax.random.key(3), 3, 5, 3)
    np.testing.assert_array_equal(np.asarray(mask).sum(-1), [2, 2, 2])
    out = self.layer(self.h, train=True, h_noisy=self.h_noisy,
                     route_mask=mask)
    clean = self.layer.branch_projections(self.h)
    noisy = self.layer.branch_projections(self.h_noisy)
    m = np.asarray(mask)[:, None, :, None]
    np.testing.assert_allclose(out.branch_pre, np.where(m, noisy, clean),
                               atol=1e-6)
    # Different samples get different minorities (random per sample).
    masks = q.noisy_branch_mask(jax.random.key(0), 64, 5, 3)
    self.assertGreater(len({tuple(r) for r in np.asarray(masks)}), 3)

  def test_even_voter_count_is_one_clear_error(self):
    with self.assertRaisesRegex(ValueError,
                                r"n_voters must be a positive odd.*n_voters=4"):
      q.VotingLFQ(8, n_voters=4, bits=6, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, r"num_clean must be in \[0, "
                                r"n_voters=5\], got num_clean=6"):
      q.VotingLFQ(8, n_voters=5, bits=6, num_clean=6, rngs=nnx.Rngs(0))

  def test_single_branch_is_plain_lfq(self):
    lfq = q.VotingLFQ(8, n_voters=1, bits=6, rngs=nnx.Rngs(2))
    out = lfq(self.h, train=True)
    np.testing.assert_array_equal(out.code, np.where(
        np.asarray(out.branch_pre[..., 0, :]) >= 0, 1., -1.))
    np.testing.assert_array_equal(out.indices, out.branch_indices[..., 0])


class VQTest(absltest.TestCase):

  def test_nearest_codeword_and_aux_loss(self):
    vq = q.VectorQuantizer(2, codebook_size=3, code_dim=2, beta=0.25,
                           rngs=nnx.Rngs(0))
    vq.project_in.kernel[...] = jnp.eye(2)
    vq.project_in.bias[...] = jnp.zeros(2)
    vq.embedding[...] = jnp.array([[0., 0.], [1., 1.], [-2., 0.]])
    h = jnp.array([[[0.9, 0.8], [-1.5, 0.5]]])
    out = vq(h, train=True)
    np.testing.assert_array_equal(out.indices, [[1, 2]])
    np.testing.assert_allclose(out.code, [[[1., 1.], [-2., 0.]]])
    # squared errors: (0.01 + 0.04) + (0.25 + 0.25) = 0.55 over 4 dims.
    np.testing.assert_allclose(out.aux_loss, 1.25 * 0.55 / 4, rtol=1e-5)


class LossTest(absltest.TestCase):

  def test_consensus_hand_value_and_stop_gradient(self):
    p = jnp.array([1., 2., 6.]).reshape(1, 1, 3, 1)       # n = 3, d = 1
    self.assertAlmostEqual(float(obj.consensus_loss(p)), 14 / 3, places=5)
    g = jax.grad(lambda p: obj.consensus_loss(p))(p).ravel()
    np.testing.assert_allclose(g, 2 * np.array([-2., -1., 3.]) / 3, rtol=1e-6)
    g_full = jax.grad(lambda p: obj.consensus_loss(p, stop_gradient=False))(
        p).ravel()
    # Without sg the mean's gradient cancels: sum of the gradients is 0.
    self.assertAlmostEqual(float(g_full.sum()), 0.0, places=6)
    # A mask drops the frames it marks invalid.
    p2 = jnp.concatenate([p, 100 * p], axis=1)
    self.assertAlmostEqual(float(obj.consensus_loss(
        p2, jnp.array([[True, False]]))), 14 / 3, places=4)

  def test_commitment_hand_value(self):
    p = jnp.array([1., 2., 6.]).reshape(1, 1, 3, 1)
    soft = jnp.ones((1, 1, 1))
    self.assertAlmostEqual(float(obj.commitment_loss(p, soft)), 26 / 3,
                           places=5)

  def test_lfq_entropy_hand_value(self):
    # d = 1, T = 1: P(+1) = sigmoid(4p): p = +-0.25 -> sigmoid(+-1).
    p = jnp.array([0.25, -0.25]).reshape(1, 2, 1, 1)
    loss, m = obj.lfq_entropy_loss(p, temperature=1.0)
    s = 1 / (1 + math.exp(-1))
    h = -(s * math.log(s) + (1 - s) * math.log(1 - s))
    self.assertAlmostEqual(float(m["sample_entropy"]), h, places=5)
    self.assertAlmostEqual(float(m["batch_entropy"]), math.log(2), places=5)
    self.assertAlmostEqual(float(loss), h - math.log(2), places=5)
    # Two bits, all four codes used equally and confidently -> -ln 4.
    codes = q.codebook(2).reshape(1, 4, 1, 2)
    loss4, _ = obj.lfq_entropy_loss(codes, temperature=0.01)
    self.assertAlmostEqual(float(loss4), -math.log(4), places=4)

  def test_ctc_hand_value(self):
    logits = jnp.zeros((1, 2, 3))               # uniform over {blank, 1, 2}
    loss = obj.ctc_loss(logits, jnp.ones((1, 2), bool), jnp.array([[1]]),
                        jnp.ones((1, 1), bool))
    # Paths (1,1), (0,1), (1,0): probability 3/9.
    self.assertAlmostEqual(float(loss), math.log(3), places=5)


if __name__ == "__main__":
  absltest.main()
