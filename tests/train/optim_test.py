"""Optimizer pieces: schedule values, decay mask, clipping."""

from absl.testing import absltest
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab.train import optim


def cfg(**kw):
  base = dict(lr=1.0, warmup_steps=10, schedule="cosine", end_lr_frac=0.0,
              weight_decay=0.5, clip_norm=1.0)
  base.update(kw)
  return ml_collections.ConfigDict(base)


class OptimTest(absltest.TestCase):

  def test_warmup_then_cosine_and_linear(self):
    s = optim.make_schedule(cfg(), total_steps=110)
    self.assertAlmostEqual(float(s(0)), 0.0)
    self.assertAlmostEqual(float(s(5)), 0.5)
    self.assertAlmostEqual(float(s(10)), 1.0)
    # Cosine half-way through the 100 decay steps: 0.5 * (1 + cos(pi/2)).
    self.assertAlmostEqual(float(s(60)), 0.5, places=5)
    self.assertAlmostEqual(float(s(110)), 0.0, places=5)
    lin = optim.make_schedule(cfg(schedule="linear", end_lr_frac=0.2), 110)
    self.assertAlmostEqual(float(lin(60)), 0.6, places=5)
    with self.assertRaisesRegex(ValueError, "optim.schedule='step'"):
      optim.make_schedule(cfg(schedule="step"), 10)

  def test_decay_mask_skips_norms_and_biases(self):
    params = {"attn": {"q_dnh": jnp.ones((2, 2, 2)),
                       "q_bias_nh": jnp.ones((2, 2))},
              "attn_norm": {"scale": jnp.ones(2)},
              "embed_vd": jnp.ones((3, 2))}
    mask = optim.decay_mask(params)
    self.assertEqual(mask, {"attn": {"q_dnh": True, "q_bias_nh": False},
                            "attn_norm": {"scale": False}, "embed_vd": True})

  def test_one_step_matches_hand_computed_adamw_with_clipping(self):
    # warmup 0, constant lr 0.1: grads are clipped to norm 1, Adam's first
    # step moves each weight by lr * sign(g), decay adds lr * wd * w
    # (matrix only, not the norm scale).
    tx = optim.make_optimizer(cfg(lr=0.1, warmup_steps=0,
                                  schedule="constant", weight_decay=0.5,
                                  clip_norm=1.0), total_steps=10)
    params = {"w": jnp.full((2, 2), 2.0), "norm": {"scale": jnp.ones(2)}}
    grads = {"w": jnp.full((2, 2), 3.0), "norm": {"scale": jnp.full(2, -4.0)}}
    updates, _ = tx.update(grads, tx.init(params), params)
    new = optax.apply_updates(params, updates)
    np.testing.assert_allclose(new["w"], 2.0 - 0.1 * (1 + 0.5 * 2.0),
                               rtol=1e-5)
    np.testing.assert_allclose(new["norm"]["scale"], 1.0 + 0.1, rtol=1e-5)


if __name__ == "__main__":
  absltest.main()
