"""Gumbel-softmax, straight-through and temperature schedules (paper I.3)."""

import math

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.nn import gumbel


class GumbelTest(absltest.TestCase):

  def test_gumbel_max_frequencies_match_softmax(self):
    # argmax(pi + g) ~ Categorical(softmax(pi)) (the Gumbel-max trick).
    logits = jnp.log(jnp.array([0.5, 0.3, 0.15, 0.05]))
    y = gumbel.gumbel_softmax(jnp.broadcast_to(logits, (20000, 4)),
                              jax.random.key(0), 0.5, hard=True)
    freq = np.asarray(y).mean(0)
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.015)

  def test_noise_is_standard_gumbel(self):
    g = np.asarray(gumbel.sample_gumbel(jax.random.key(1), (50000,)))
    # Gumbel(0, 1): mean = Euler-Mascheroni, variance = pi^2 / 6.
    self.assertAlmostEqual(g.mean(), 0.5772, delta=0.02)
    self.assertAlmostEqual(g.var(), math.pi ** 2 / 6, delta=0.05)

  def test_deterministic_relaxation_and_hard_limit(self):
    logits = jnp.array([[1.0, 2.0, 0.5]])
    y = gumbel.gumbel_softmax(logits, None, 2.0)
    e = np.exp(np.array([1.0, 2.0, 0.5]) / 2.0)
    np.testing.assert_allclose(np.asarray(y)[0], e / e.sum(), rtol=1e-6)
    cold = gumbel.gumbel_softmax(logits, None, 1e-3)
    np.testing.assert_allclose(np.asarray(cold)[0], [0, 1, 0], atol=1e-6)

  def test_perturbed_logits_are_the_sample_logits(self):
    logits = jnp.array([[0.3, -1.0, 2.0], [1.5, 0.0, -0.5]])
    key, tau = jax.random.key(3), 0.25
    g = np.asarray(gumbel.sample_gumbel(key, (2, 3)))
    z = np.asarray(gumbel.perturbed_logits(logits, key, tau))
    np.testing.assert_allclose(z, (np.asarray(logits) + g) / tau, rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(jax.nn.softmax(z)),
        np.asarray(gumbel.gumbel_softmax(logits, key, tau)), rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(gumbel.perturbed_logits(logits, None, tau)),
        np.asarray(logits) / tau, rtol=1e-6)

  def test_straight_through_value_and_gradient(self):
    logits = jnp.array([0.2, 1.0, -0.3])
    w = jnp.array([1.0, -2.0, 3.0])
    hard = gumbel.gumbel_softmax(logits, None, 0.7, hard=True)
    chex.assert_trees_all_close(hard, jnp.array([0.0, 1.0, 0.0]))
    g_st = jax.grad(lambda l: jnp.sum(w * gumbel.gumbel_softmax(
        l, None, 0.7, hard=True)))(logits)
    g_soft = jax.grad(lambda l: jnp.sum(w * gumbel.gumbel_softmax(
        l, None, 0.7)))(logits)
    chex.assert_trees_all_close(g_st, g_soft, atol=1e-6)

  def test_schedules(self):
    kw = dict(tau0=1.0, tau_min=0.1, anneal_steps=600)
    t = lambda s, name: float(gumbel.temperature(s, schedule=name, **kw))
    self.assertAlmostEqual(t(0, "exponential"), 1.0, places=6)
    # Geometric halfway: tau0 * (tau_min / tau0)^(1/2).
    self.assertAlmostEqual(t(300, "exponential"), math.sqrt(0.1), places=5)
    self.assertAlmostEqual(t(600, "exponential"), 0.1, places=5)
    self.assertAlmostEqual(t(5000, "exponential"), 0.1, places=6)
    self.assertAlmostEqual(t(300, "linear"), 0.55, places=6)
    self.assertAlmostEqual(t(300, "constant"), 1.0, places=6)
    self.assertAlmostEqual(gumbel.exponential_rate(1.0, 0.1, 600),
                           math.log(10) / 600)
    with self.assertRaisesRegex(ValueError, "unknown temperature schedule"):
      gumbel.temperature(0, schedule="cosine")


if __name__ == "__main__":
  absltest.main()
