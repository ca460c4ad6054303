"""Optimizer pieces: schedule values, decay mask, clipping, param groups."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.configs import common
from jaxlab.train import optim


def cfg(**kw):
  base = common.optim_config()
  base.update(lr=1.0, warmup_steps=10, schedule="cosine", end_lr_frac=0.0,
              weight_decay=0.5, clip_norm=1.0)
  base.update(**kw)
  return base


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


class ParamGroupTest(absltest.TestCase):

  def _params(self):
    return {"w_dd": jnp.full((2, 2), 2.0), "bias_d": jnp.zeros(2),
            "lagrange": jnp.array([1.0, -1.0])}

  def _grads(self):
    return {"w_dd": jnp.array([[3.0, -1.0], [0.5, 2.0]]),
            "bias_d": jnp.array([1.0, -2.0]),
            "lagrange": jnp.array([0.25, 4.0])}

  def test_each_group_gets_its_own_lr_and_transform(self):
    # Base AdamW at lr 0.2 (wd 0.5 on matrices only), the weight matrix at
    # lr_mult 0.1, the multipliers by plain SGD ascent at lr -0.5; no
    # clipping. Adam's first step is lr * g / |g| (bias-corrected), plus
    # lr * wd * w on matrices.
    c = cfg(lr=0.2, warmup_steps=0, schedule="constant", clip_norm=0.0,
            weight_decay=0.5, groups={
                "weights": {"pattern": r"^w_", "lr_mult": 0.1},
                "duals": {"pattern": "lagrange", "optimizer": "sgd",
                          "lr": -0.5, "weight_decay": 0.0}})
    tx = optim.make_optimizer(c, total_steps=10)
    params, grads = self._params(), self._grads()
    state = tx.init(params)
    updates, state = tx.update(grads, state, params)
    new = optax.apply_updates(params, updates)
    g = self._grads()
    np.testing.assert_allclose(
        new["w_dd"], 2.0 - 0.02 * (np.sign(g["w_dd"]) + 0.5 * 2.0),
        rtol=1e-5)
    np.testing.assert_allclose(new["bias_d"], -0.2 * np.sign(g["bias_d"]),
                               rtol=1e-5)
    np.testing.assert_allclose(new["lagrange"],
                               np.array([1.0, -1.0]) + 0.5 * g["lagrange"],
                               rtol=1e-6)
    # A second SGD step is again exactly -lr * g (no state, constant lr).
    updates, _ = tx.update(grads, state, new)
    np.testing.assert_allclose(
        optax.apply_updates(new, updates)["lagrange"],
        np.array([1.0, -1.0]) + 2 * 0.5 * g["lagrange"], rtol=1e-6)

  def test_frozen_group_and_clipping_is_global(self):
    # clip_norm 1 scales every gradient by 1/|g| over *all* leaves (the
    # frozen one included), then SGD at lr 1 moves by exactly that.
    c = cfg(lr=1.0, warmup_steps=0, schedule="constant", clip_norm=1.0,
            groups={"rest": {"pattern": "w_|bias", "optimizer": "sgd"},
                    "duals": {"pattern": "lagrange", "optimizer": "frozen"}})
    tx = optim.make_optimizer(c, total_steps=10)
    params, grads = self._params(), self._grads()
    updates, _ = tx.update(grads, tx.init(params), params)
    norm = np.sqrt(sum(float(np.sum(np.square(v))) for v in grads.values()))
    new = optax.apply_updates(params, updates)
    np.testing.assert_allclose(new["w_dd"], 2.0 - grads["w_dd"] / norm,
                               rtol=1e-5)
    np.testing.assert_allclose(new["lagrange"], params["lagrange"])

  def test_group_errors_name_the_field(self):
    params = self._params()
    with self.assertRaisesRegex(ValueError, r"\['typo'\].*matches no"):
      tx = optim.make_optimizer(
          cfg(groups={"typo": {"pattern": "nothing_here"}}), 10)
      tx.init(params)
    with self.assertRaisesRegex(ValueError, "matches optim.groups"):
      optim.make_optimizer(cfg(groups={"a": {"pattern": "w"},
                                       "b": {"pattern": "_dd"}}),
                           10).init(params)
    with self.assertRaisesRegex(ValueError, "optim.groups.a.pattern"):
      optim.make_optimizer(cfg(groups={"a": {"lr": 1.0}}), 10)
    with self.assertRaisesRegex(ValueError, "lr or lr_mult"):
      optim.make_optimizer(cfg(groups={"a": {"pattern": "w", "lr": 1.0,
                                             "lr_mult": 2.0}}), 10)
    with self.assertRaisesRegex(ValueError, "unknown field"):
      optim.make_optimizer(cfg(groups={"a": {"pattern": "w",
                                             "clip_norm": 2.0}}), 10)

  def test_missing_field_says_start_from_base_config(self):
    c = cfg()
    del c["b2"]
    with self.assertRaisesRegex(ValueError,
                                r"config.optim.b2 is missing.*base_config"):
      optim.make_optimizer(c, 10)


if __name__ == "__main__":
  absltest.main()
