"""Tests of the Trust-GRPO rewards in jaxlab.rewards.thinking (by hand)."""

import math

import chex
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.rewards import thinking


class TrustTest(parameterized.TestCase):

  def test_gamma_hand_made_groups(self):
    rt = jnp.array([
        [0.9, 0.8, 0.2, 0.1],    # correct ones think better -> 1
        [0.2, 0.4, 0.9, 0.7],    # wrong ones think better: exp(.3 - .8)
        [0.5, 0.5, 0.5, 0.5],    # equal -> 1
        [0.1, 0.2, 0.3, 0.4],    # no correct response -> 1 (code (d))
    ])
    correct = jnp.array([[1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0],
                         [0, 0, 0, 0]], bool)
    g = thinking.trust_weight(rt, correct)
    np.testing.assert_allclose(g, [1.0, math.exp(-0.5), 1.0, 1.0], rtol=1e-6)
    # Equal means that differ only by float32 rounding do not fire.
    g3 = thinking.trust_weight(jnp.full((5,), 0.9), jnp.array([1, 1, 1, 0, 0],
                                                          bool))
    self.assertEqual(float(g3), 1.0)
    g2 = thinking.trust_weight(rt[1], correct[1], scale=2.0)   # logged (e)
    np.testing.assert_allclose(g2, math.exp(-1.0), rtol=1e-6)

  def test_combined_reward_paper_mode(self):
    cfg = thinking.TrustConfig.paper(alpha=0.3)
    ro = jnp.array([1., 1., 0., 0., 0., 0., 0., 0.])
    rt = jnp.array([0.2, 0.4, 0.9, 0.7, 0.5, 0.1, 0.3, 0.9])
    r, m = thinking.combine_trust_rewards(ro, rt, 4, step=10, cfg=cfg,
                                      total_steps=100)
    w0 = math.exp(-0.5) * 0.3 * math.exp(-0.1)
    w1 = 0.3 * math.exp(-0.1)       # group 2 has no correct answer: gamma 1
    np.testing.assert_allclose(
        r, np.concatenate([ro[:4] + w0 * rt[:4], ro[4:] + w1 * rt[4:]]),
        rtol=1e-6)
    np.testing.assert_allclose(m["gamma"], [math.exp(-0.5), 1.0], rtol=1e-6)

  def test_code_switches(self):
    ro = jnp.array([1., 1., 1., 1., 0.3, 0.1, 1., 0.25])
    rt = jnp.array([0.5, 0.5, 0.5, 0.5, 0.8, 2.0, jnp.nan, 0.6])
    cfg = thinking.TrustConfig(alpha=0.3, anneal_T=12000.0)
    r, m = thinking.combine_trust_rewards(ro, rt, 4, step=0, cfg=cfg)
    # (b) all-correct group: no thinking reward at all.
    np.testing.assert_allclose(r[:4], ro[:4])
    # (c) R^o 0.1 < 0.2 -> R^t 0; (f) NaN -> 0 and 2.0 clipped (then zeroed).
    np.testing.assert_allclose(m["thinking"][4:], [0.8, 0.0, 0.0, 0.6])
    # mu_c = 0 (only the NaN one is correct), mu_w = (0.8 + 0 + 0.6) / 3.
    gamma = math.exp(0.0 - 1.4 / 3)
    np.testing.assert_allclose(m["gamma"][1], gamma, rtol=1e-6)
    np.testing.assert_allclose(r[4:], ro[4:] + gamma * 0.3 *
                               np.array([0.8, 0.0, 0.0, 0.6]), rtol=1e-6)
    # (a) anneal constant: T=12000 in code; at step 6000 factor exp(-0.5).
    r2, _ = thinking.combine_trust_rewards(ro, rt, 4, step=6000, cfg=cfg)
    np.testing.assert_allclose(r2[4] - ro[4], gamma * 0.3 * 0.8 *
                               math.exp(-0.5), rtol=1e-5)
    with self.assertRaisesRegex(ValueError, "total_steps"):
      thinking.combine_trust_rewards(ro, rt, 4, 1, thinking.TrustConfig.paper())

  def test_no_trust_no_anneal(self):
    cfg = thinking.TrustConfig.paper(use_trust=False, anneal=False)
    ro = jnp.array([1., 0.])
    rt = jnp.array([0.0, 1.0])
    r, _ = thinking.combine_trust_rewards(ro, rt, 2, step=500, cfg=cfg)
    np.testing.assert_allclose(r, [1.0, 0.3])

  def test_format_checker(self):
    ok = "<think>2+2 is 4</think> <answer>4</answer>"
    self.assertEqual(thinking.parse_think_answer(ok), ("2+2 is 4", "4"))
    for bad in ("<answer>4</answer>", "<think>a</think>",
                "<think>a<answer>5</answer></think><answer>4</answer>",
                "x <think>a</think><answer>4</answer>",
                "<think>a</think><answer>4</answer><answer>5</answer>"):
      self.assertIsNone(thinking.parse_think_answer(bad), bad)
    np.testing.assert_array_equal(thinking.format_reward([ok, "no"]), [1., 0.])

  def test_rule_scorer_and_balancer(self):
    scorer = thinking.RuleBasedThinkingScorer(good={"because": 0.3},
                                          bad={"guess": 0.4})
    s = scorer(["q"] * 3, ["because x", "I guess", "a\na\na"])
    np.testing.assert_allclose(s, [0.8, 0.1, 0.3], rtol=1e-6)
    scores = np.concatenate([np.full(50, 0.05), np.full(5, 0.55),
                             np.full(9, 0.95)])
    idx = thinking.balance_by_bins(scores)
    chex.assert_shape(idx, (15,))
    np.testing.assert_array_equal(np.bincount(
        (scores[idx] * 10).astype(int), minlength=10)[[0, 5, 9]], [5, 5, 5])


if __name__ == "__main__":
  absltest.main()
