"""Tests for jaxlab.rl (rollout + GRPO learner) on a tiny decoder."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import nnx

from jaxlab import parallel
from jaxlab.decoding import sampler
from jaxlab.models import decoder as decoder_lib
from jaxlab.objectives import grpo
from jaxlab.rl import learner as learner_lib
from jaxlab.rl import rollout as rollout_lib
from jaxlab.train import losses
from jaxlab.train import optim as optim_lib
from jaxlab.train import runner

_TARGET = 7


def _model(seed=0, num_kv_heads=1):
  cfg = decoder_lib.DecoderConfig(vocab_size=12, dim=32, num_layers=1,
                                  num_heads=2, num_kv_heads=num_kv_heads,
                                  mlp_dim=64,
                                  max_position_embeddings=16)
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(seed))


def _reward(batch, step):
  del step
  r = np.array([float(c[0] == _TARGET) for c in batch.completions], np.float32)
  return r, {"hit": float(r.mean())}


class LearnerTest(absltest.TestCase):

  def test_rollout_shapes_and_logprobs(self):
    model = _model()
    batch = rollout_lib.rollout(model, model, [[1, 3], [1, 4, 5]],
                                group_size=4, max_new_tokens=3,
                                key=jax.random.key(0))
    self.assertLen(batch.completions, 8)
    # Packed: the longest prompt (3) rounded up to a power of two, then
    # max_new_tokens; a batch whose longest prompt is 4 has the same shape
    # (one compilation of the log-probs and the update for both).
    self.assertEqual(batch.input_ids_bt.shape, (8, 4 + 3))
    longer = rollout_lib.rollout(model, model, [[1, 3, 4, 5], [1, 4]],
                                 group_size=4, max_new_tokens=3,
                                 key=jax.random.key(1))
    self.assertEqual(longer.input_ids_bt.shape, (8, 4 + 3))
    # Prompt-major order: rows 0-3 share prompt 0.
    self.assertEqual(batch.repeated_prompts[3], [1, 3])
    np.testing.assert_allclose(batch.old_logp_bt, batch.ref_logp_bt)
    m = batch.completion_mask_bt
    self.assertTrue(np.all(batch.old_logp_bt[m] < 0))
    self.assertTrue(np.all(batch.old_logp_bt[~m] == 0))

  def test_first_update_has_unit_ratio_and_zero_kl(self):
    learner = learner_lib.GRPOLearner(
        _model(), learner_lib.GRPOConfig(group_size=4, max_new_tokens=2),
        {"lr": 1e-3}, total_steps=1)
    m = learner.step([[1, 2]] * 4, _reward, key=jax.random.key(1))
    self.assertAlmostEqual(m["ratio_mean"], 1.0, places=5)
    self.assertAlmostEqual(m["kl"], 0.0, places=6)
    self.assertEqual(m["clip_frac"], 0.0)

  def test_learns_rewarded_token(self):
    learner = learner_lib.GRPOLearner(
        _model(1), learner_lib.GRPOConfig(group_size=8, max_new_tokens=1,
                                          num_iterations=2, kl_beta=0.0),
        {"lr": 1e-2, "schedule": "constant"}, total_steps=25)
    prompts = [[1, 2], [1, 3], [1, 4], [1, 5]]
    hits = [learner.step(prompts, _reward, key=jax.random.key(s))["hit"]
            for s in range(25)]
    self.assertLess(np.mean(hits[:3]), 0.3)
    self.assertGreater(np.mean(hits[-3:]), 0.8)

  def test_mesh_update_matches_single_device(self):
    """One learner step on a (data=2, fsdp=2, tensor=2) mesh == 1 device."""
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    cfg = learner_lib.GRPOConfig(group_size=4, max_new_tokens=3,
                                 num_iterations=2, kl_beta=0.04)
    optim_cfg = {"lr": 1e-2, "schedule": "constant"}
    init = _model(3, num_kv_heads=2)
    # The initial weights, kept on the host (the learners donate theirs).
    init_params = [np.asarray(x)
                   for x in jax.tree.leaves(nnx.state(init, nnx.Param))]
    single = learner_lib.GRPOLearner(init, cfg, optim_cfg, total_steps=2)
    mesh = parallel.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    sharded = learner_lib.GRPOLearner(_model(3, num_kv_heads=2), cfg, optim_cfg,
                                      total_steps=2, mesh=mesh)
    gate = sharded.policy.layers[0].mlp.gate_df[...]
    self.assertEqual(gate.sharding.spec, jax.P("fsdp", "tensor"))
    # The same rollout batch for both (sampled once, on one device); the
    # mesh learner's teacher-forced log-probs of it agree too.
    batch = single.rollout([[1, 2], [1, 3]], jax.random.key(4))
    with sharded._mesh_ctx():  # pylint: disable=protected-access
      logp_mesh = rollout_lib.teacher_forced_logp(
          sharded.policy, batch.input_ids_bt, batch.attention_mask_bt,
          batch.completion_mask_bt)
    np.testing.assert_allclose(logp_mesh, batch.old_logp_bt, atol=1e-5)
    rewards = np.array([1, 0, 0, 1, 0.5, 0, 1, 0], np.float32)
    m1 = single.update(batch, rewards, jax.random.key(5))
    m8 = sharded.update(batch, rewards, jax.random.key(5))
    for k in ("loss", "pg_loss", "kl", "grad_norm", "clip_frac"):
      self.assertAlmostEqual(m1[k], m8[k], places=5, msg=k)
    self.assertGreater(m1["grad_norm"], 1e-3)   # a real update happened
    p1 = jax.tree.leaves(nnx.state(single.policy, nnx.Param))
    p8 = jax.tree.leaves(nnx.state(sharded.policy, nnx.Param))
    # Adam divides by sqrt(v): float reduction-order differences in tiny
    # gradient entries move a weight by up to ~1 % of one lr (1e-2) step.
    for a, b in zip(p1, p8):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)
    changed = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                  for a, b in zip(p1, init_params))
    self.assertGreater(changed, 1e-3)   # and the weights moved

  def test_old_and_ref_logprobs_are_at_the_sampling_temperature(self):
    model = _model(2)
    t = 0.5
    batch = rollout_lib.rollout(model, model, [[1, 3], [1, 4]], group_size=2,
                                max_new_tokens=3, temperature=t,
                                key=jax.random.key(0))
    ids, attn, comp = (batch.input_ids_bt, batch.attention_mask_bt,
                       batch.completion_mask_bt)
    # Both references in one compiled call, not op by op.
    want, at_one = nnx.jit(lambda mdl: (
        sampler.token_logprobs(mdl, ids, attn, loss_mask_bt=comp,
                               temperature=t),
        sampler.token_logprobs(mdl, ids, attn, loss_mask_bt=comp)))(model)
    want = np.asarray(want)
    np.testing.assert_allclose(batch.old_logp_bt, want, atol=1e-5)
    np.testing.assert_allclose(batch.ref_logp_bt, want, atol=1e-5)
    self.assertGreater(float(np.abs(np.asarray(at_one) - want).max()), 1e-2)
    # The loss scores the same distribution: the first ratio is exactly 1
    # and the KL to the (identical) reference is 0 at T = 0.5 too.
    learner = learner_lib.GRPOLearner(
        _model(2), learner_lib.GRPOConfig(group_size=2, max_new_tokens=3,
                                          temperature=t),
        {"lr": 1e-3}, total_steps=1)
    # The rollout's shapes above: its sampler / log-prob compilations reused.
    m = learner.step([[1, 3], [1, 4]], _reward, key=jax.random.key(1))
    self.assertAlmostEqual(m["ratio_mean"], 1.0, places=5)
    self.assertAlmostEqual(m["kl"], 0.0, places=6)

  def test_update_is_the_grpo_loss_gradient_applied_by_optax(self):
    """The learner's update == grad of the registered `grpo` loss + AdamW."""
    cfg = learner_lib.GRPOConfig(group_size=4, max_new_tokens=3,
                                 temperature=0.7, kl_beta=0.04,
                                 entropy_coef=1e-2, clip_eps_high=0.28)
    optim = {"lr": 1e-2, "weight_decay": 0.1, "clip_norm": 0.05,
             "b2": 0.99}
    learner = learner_lib.GRPOLearner(_model(5), cfg, optim, total_steps=1)
    batch = learner.rollout([[1, 2], [1, 3]], jax.random.key(6))
    rewards = np.array([1, 0, 0, 1, 0.5, 0, 1, 0], np.float32)
    m = learner.update(batch, rewards, jax.random.key(7))

    ref = _model(5)  # the initial weights (value_and_grad leaves them)
    adv = grpo.compute_advantages(jnp.asarray(rewards), 4, "grpo")
    arrays = {"ids": batch.input_ids_bt, "attn": batch.attention_mask_bt,
              "mask": batch.completion_mask_bt, "old": batch.old_logp_bt,
              "ref": batch.ref_logp_bt, "adv": adv}
    loss_fn = losses.get("grpo")
    (loss, _), grads = nnx.jit(nnx.value_and_grad(  # compiled, not op by op
        lambda mdl: loss_fn(mdl, arrays, rng=None, config=cfg),
        has_aux=True))(ref)
    tx = optim_lib.make_optimizer(runner.optim_config(**optim), 1)
    params = nnx.state(ref, nnx.Param)
    g = nnx.state(grads, nnx.Param)

    @jax.jit  # the reference AdamW step compiled once, not op by op
    def adamw(params, g):
      updates, _ = tx.update(g, tx.init(params), params)
      return optax.apply_updates(params, updates), optax.tree.norm(g)

    want, g_norm = adamw(params, g)
    self.assertAlmostEqual(m["loss"], float(loss), places=5)
    self.assertAlmostEqual(m["grad_norm"], float(g_norm), places=4)
    self.assertGreater(m["grad_norm"], 0.05)  # the clipping was active
    got = nnx.state(learner.policy, nnx.Param)
    # Adam's first step is ~lr * sign(g): a tiny gradient entry summed in
    # another row order moves by up to ~1e-3 of one lr (1e-2) step.
    chex.assert_trees_all_close(got, want, atol=1e-4)
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(got),
                                jax.tree.leaves(params)))
    self.assertGreater(moved, 5e-3)

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "group_size=1"):
      learner_lib.GRPOConfig(group_size=1)
    with self.assertRaisesRegex(ValueError, "valid choices"):
      learner_lib.GRPOConfig(advantage="ppo")


if __name__ == "__main__":
  absltest.main()
