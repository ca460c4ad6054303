"""Tests for jaxlab.objectives.grpo against NumPy references of the formulas."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.objectives import grpo


def np_advantages(r, g, normalize=True, eps=1e-6, ddof=0):
  r = np.asarray(r, np.float64).reshape(-1, g)
  a = r - r.mean(-1, keepdims=True)
  if normalize:
    a = a / (r.std(-1, ddof=ddof, keepdims=True) + eps)
  return a.reshape(-1)


def np_grpo_loss(logp, old, ref, adv, mask, eps=0.2, beta=0.04, agg="token_mean"):
  ratio = np.exp(logp - old)
  a = adv[:, None]
  pg = -np.minimum(ratio * a, np.clip(ratio, 1 - eps, 1 + eps) * a)
  kl = np.exp(ref - logp) - (ref - logp) - 1
  l = pg + beta * kl
  if agg == "token_mean":
    return (l * mask).sum() / mask.sum()
  if agg == "sequence_mean":
    return np.mean((l * mask).sum(1) / mask.sum(1))
  return (l * mask).sum() / (l.shape[0] * l.shape[1])


class AdvantageTest(parameterized.TestCase):

  def test_hand_computed_group(self):
    # Group [1, 0, 0, 1]: mean .5, population std .5 -> +-1.
    a = grpo.group_advantages(jnp.array([1., 0., 0., 1.]), 4, eps=0.0)
    np.testing.assert_allclose(a, [1, -1, -1, 1], atol=1e-6)

  @parameterized.parameters((True, 0), (False, 0), (True, 1))
  def test_matches_numpy(self, normalize, ddof):
    r = np.random.default_rng(0).normal(size=24).astype(np.float32)
    a = grpo.group_advantages(jnp.asarray(r), 6, normalize_std=normalize,
                              std_ddof=ddof)
    np.testing.assert_allclose(a, np_advantages(r, 6, normalize, ddof=ddof),
                               rtol=1e-5, atol=1e-5)

  def test_all_equal_rewards_give_zero_not_nan(self):
    r = jnp.array([0.7] * 4 + [0., 1., 0., 1.])
    for name in ("grpo", "dr_grpo", "rloo"):
      a = grpo.compute_advantages(r, 4, name)
      self.assertTrue(bool(jnp.all(jnp.isfinite(a))), name)
      np.testing.assert_allclose(a[:4], 0.0, atol=1e-7)

  def test_rloo_is_leave_one_out(self):
    r = np.array([1., 3., 2., 6.])
    a = grpo.compute_advantages(jnp.asarray(r), 4, "rloo")
    ref = [r[i] - np.mean(np.delete(r, i)) for i in range(4)]
    np.testing.assert_allclose(a, ref, rtol=1e-6)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "valid choices: dr_grpo, grpo"):
      grpo.get_advantage_estimator("ppo")
    with self.assertRaisesRegex(ValueError, "group_size=3 must divide"):
      grpo.group_advantages(jnp.ones(8), 3)


class LossTest(parameterized.TestCase):

  def _inputs(self, seed=0, b=6, t=5):
    rng = np.random.default_rng(seed)
    logp = rng.normal(-1.5, 0.5, (b, t)).astype(np.float32)
    old = (logp + rng.normal(0, 0.3, (b, t))).astype(np.float32)  # some clip
    ref = (logp + rng.normal(0, 0.2, (b, t))).astype(np.float32)
    adv = rng.normal(size=b).astype(np.float32)
    mask = (rng.random((b, t)) > 0.3).astype(np.float32)
    mask[:, 0] = 1
    return logp, old, ref, adv, mask

  @parameterized.parameters("token_mean", "sequence_mean", "fixed_length")
  def test_matches_numpy(self, agg):
    logp, old, ref, adv, mask = self._inputs()
    loss, metrics = grpo.grpo_loss(*map(jnp.asarray, (logp, old, ref, adv,
                                                      mask)), aggregation=agg)
    np.testing.assert_allclose(loss, np_grpo_loss(logp, old, ref, adv, mask,
                                                  agg=agg), rtol=1e-5)
    self.assertGreater(float(metrics["clip_frac"]), 0.0)  # clip is exercised

  def test_clip_cases_by_hand(self):
    # ratio 1.5, A=+1 -> clipped to 1.2; ratio 0.5, A=+1 -> unclipped 0.5;
    # ratio 0.5, A=-1 -> clipped -(-0.8)=0.8 ; ratio 1.5, A=-1 -> 1.5.
    logp = jnp.log(jnp.array([[1.5], [0.5], [0.5], [1.5]]))
    old = jnp.zeros((4, 1))
    adv = jnp.array([1., 1., -1., -1.])
    loss, _ = grpo.grpo_loss(logp, old, None, adv, jnp.ones((4, 1)),
                             aggregation="sequence_mean")
    np.testing.assert_allclose(loss, np.mean([-1.2, -0.5, 0.8, 1.5]),
                               rtol=1e-6)

  def test_kl_gradient_matches_analytic(self):
    logp, _, ref, _, mask = self._inputs(1)
    f = lambda lp: grpo.grpo_loss(lp, lp, jnp.asarray(ref), jnp.zeros(6),
                                  jnp.asarray(mask), kl_beta=0.5)[0]
    g = jax.grad(f)(jnp.asarray(logp))
    # d/dlogp of beta * k3 = beta * (1 - exp(ref - logp)), token mean.
    analytic = 0.5 * (1 - np.exp(ref - logp)) * mask / mask.sum()
    np.testing.assert_allclose(g, analytic, rtol=1e-4, atol=1e-7)

  def test_policy_gradient_at_ratio_one(self):
    # At logp == old_logp the gradient of the pg term is -A / #tokens.
    logp, _, _, adv, mask = self._inputs(2)
    f = lambda lp: grpo.grpo_loss(lp, jax.lax.stop_gradient(lp), None,
                                  jnp.asarray(adv), jnp.asarray(mask))[0]
    g = jax.grad(f)(jnp.asarray(logp))
    np.testing.assert_allclose(g, -adv[:, None] * mask / mask.sum(),
                               rtol=1e-5, atol=1e-7)

  def test_entropy_bonus_and_jit(self):
    logp, old, ref, adv, mask = self._inputs(3)
    ent = np.abs(logp)
    f = jax.jit(lambda *a: grpo.grpo_loss(*a[:5], entropy=a[5],
                                          entropy_coef=0.1)[0])
    with_ent = f(logp, old, ref, adv, mask, ent)
    base = np_grpo_loss(logp, old, ref, adv, mask)
    np.testing.assert_allclose(
        with_ent, base - 0.1 * (ent * mask).sum() / mask.sum(), rtol=1e-5)

  def test_token_logprobs_and_entropy(self):
    logits = jax.random.normal(jax.random.key(0), (2, 3, 7))
    tokens = jnp.array([[1, 2, 3], [0, 6, 5]])
    lp, ent = grpo.token_logprobs_and_entropy(logits, tokens)
    ref = jax.nn.log_softmax(logits)
    np.testing.assert_allclose(lp[1, 1], ref[1, 1, 6], rtol=1e-6)
    np.testing.assert_allclose(
        ent[0, 2], -np.sum(np.exp(ref[0, 2]) * ref[0, 2]), rtol=1e-5)

  def test_bad_aggregation(self):
    with self.assertRaisesRegex(ValueError, "token_mean, sequence_mean"):
      grpo.grpo_loss(*[jnp.ones((1, 1))] * 4, jnp.ones((1, 1)),
                     aggregation="sum")



class PolicyLossTest(absltest.TestCase):

  def test_fixed_length_divides_by_the_response_budget(self):
    """Dr.GRPO's "fixed_length" in `grpo_policy_loss` divides by B x the
    config's `max_new_tokens` (the response budget), not by the packed
    width T (prompt bucket + budget). At ratio 1, without KL or entropy,
    each response token contributes -adv: loss = -sum_b adv_b n_b /
    (B x budget), n_b the response tokens of row b."""
    from unittest import mock  # pylint: disable=g-import-not-at-top
    from jaxlab.rl import learner  # pylint: disable=g-import-not-at-top
    b, t, budget = 2, 12, 4                  # 8 prompt slots + 4
    logp = jnp.full((b, t), -1.5)
    mask = np.zeros((b, t), np.float32)
    mask[0, 8:12] = 1                        # 4 response tokens
    mask[1, 8:10] = 1                        # 2 (ended early)
    batch = {"ids": jnp.zeros((b, t), jnp.int32),
             "attn": jnp.ones((b, t), jnp.int32), "mask": jnp.asarray(mask),
             "old": logp, "adv": jnp.array([0.5, -2.0])}
    cfg = learner.GRPOConfig(aggregation="fixed_length", kl_beta=0.0,
                             entropy_coef=0.0, max_new_tokens=budget)
    with mock.patch.object(grpo, "policy_token_logprobs",
                           return_value=(logp, jnp.zeros((b, t)))):
      loss, _ = grpo.grpo_policy_loss(None, batch, rng=None, config=cfg)
    want = -(0.5 * 4 + -2.0 * 2) / (b * budget)   # 0.25, not 2/24
    self.assertAlmostEqual(float(loss), want, places=6)


if __name__ == "__main__":
  absltest.main()
