"""Tests for jaxlab.objectives.dpo: hand-computed values, closed-form gradient,
and the registered trainer loss against the pure function."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from jaxlab.objectives import dpo
from jaxlab.testing import tiny_models
from jaxlab.train import losses


class DpoLossTest(absltest.TestCase):

  def test_hand_computed_value(self):
    # Pair 1: chosen +1 over ref, rejected -1 -> margin beta*2 = 1 (beta .5).
    # Pair 2: chosen -0.5, rejected +0.5 -> margin -0.5.
    pc = jnp.array([-1.0, -3.5]); rc = jnp.array([-2.0, -3.0])
    pr = jnp.array([-4.0, -1.5]); rr = jnp.array([-3.0, -2.0])
    loss, m = dpo.dpo_loss(pc, pr, rc, rr, beta=0.5)
    want = -(math.log(1 / (1 + math.exp(-1.0)))
             + math.log(1 / (1 + math.exp(0.5)))) / 2
    self.assertAlmostEqual(float(loss), want, places=6)
    self.assertAlmostEqual(float(m["reward_accuracy"]), 0.5)
    self.assertAlmostEqual(float(m["reward_margin"]), 0.25, places=6)
    # Policy == reference: margin 0 -> log 2 whatever beta.
    loss0, _ = dpo.dpo_loss(rc, rr, rc, rr, beta=3.0)
    self.assertAlmostEqual(float(loss0), math.log(2.0), places=6)

  def test_gradient_matches_closed_form(self):
    # dL/d logpi(y_w) = -beta sigmoid(-h) / B, dL/d logpi(y_l) = +beta
    # sigmoid(-h) / B, with h = beta * ((pc - rc) - (pr - rr)).
    rng = np.random.default_rng(0)
    pc, pr, rc, rr = (jnp.asarray(rng.normal(size=5) * 3 - 10, jnp.float32)
                      for _ in range(4))
    beta = 0.3
    g_c, g_r = jax.grad(lambda a, b: dpo.dpo_loss(a, b, rc, rr, beta=beta)[0],
                        argnums=(0, 1))(pc, pr)
    h = beta * ((pc - rc) - (pr - rr))
    sig = 1 / (1 + np.exp(np.asarray(h)))
    np.testing.assert_allclose(g_c, -beta * sig / 5, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g_r, beta * sig / 5, rtol=1e-5, atol=1e-7)

  def test_bad_beta(self):
    with self.assertRaisesRegex(ValueError, "beta must be > 0"):
      dpo.dpo_loss(jnp.zeros(1), jnp.zeros(1), jnp.zeros(1), jnp.zeros(1),
                   beta=0.0)

  def test_registered_loss_equals_pure_function(self):
    model = tiny_models.tiny_decoder()
    rng = np.random.default_rng(1)
    b, t = 3, 6
    batch = {}
    for side in ("chosen", "rejected"):
      ids = rng.integers(0, 64, (b, t + 1)).astype(np.int32)
      mask = np.zeros((b, t), np.float32)
      mask[:, 2:] = 1.0
      batch.update({f"{side}_inputs": ids[:, :-1],
                    f"{side}_targets": ids[:, 1:], f"{side}_mask": mask})
    ref = tiny_models.tiny_decoder(seed=1)
    batch.update(dpo.reference_logps(ref, batch))
    batch = jax.tree.map(jnp.asarray, batch)

    def seq_logp(m, side):
      logits = m(batch[f"{side}_inputs"])
      lp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
      tok = jnp.take_along_axis(lp, batch[f"{side}_targets"][..., None],
                                -1)[..., 0]
      return jnp.sum(tok * batch[f"{side}_mask"], -1)

    @jax.jit
    def both(m, r):
      loss, _ = losses.get("dpo")(m, batch, rng=None, config={"beta": 0.2})
      want, _ = dpo.dpo_loss(seq_logp(m, "chosen"), seq_logp(m, "rejected"),
                             batch["ref_chosen_logp"],
                             batch["ref_rejected_logp"], beta=0.2)
      return loss, want, seq_logp(r, "chosen")

    loss, want, ref_chosen = both(model, ref)
    chex.assert_trees_all_close(batch["ref_chosen_logp"], ref_chosen,
                                atol=1e-4)
    self.assertAlmostEqual(float(loss), float(want), places=4)


if __name__ == "__main__":
  absltest.main()
