"""Tests for jaxlab.rl (rollout + GRPO learner) on a tiny decoder."""

import jax
import numpy as np
from absl.testing import absltest
from flax import nnx

from jaxlab import parallel
from jaxlab.models import decoder as decoder_lib
from jaxlab.rl import learner as learner_lib
from jaxlab.rl import rollout as rollout_lib

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
    self.assertEqual(batch.input_ids_bt.shape, (8, 3 + 3))
    # Prompt-major order: rows 0-3 share prompt 0.
    self.assertEqual(batch.repeated_prompts[3], [1, 3])
    np.testing.assert_allclose(batch.old_logp_bt, batch.ref_logp_bt)
    m = batch.completion_mask_bt
    self.assertTrue(np.all(batch.old_logp_bt[m] < 0))
    self.assertTrue(np.all(batch.old_logp_bt[~m] == 0))

  def test_first_update_has_unit_ratio_and_zero_kl(self):
    learner = learner_lib.GRPOLearner(
        _model(), learner_lib.GRPOConfig(group_size=4, max_new_tokens=2),
        {"lr": 1e-3, "schedule": "constant"}, total_steps=1)
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
    single = learner_lib.GRPOLearner(_model(3, num_kv_heads=2), cfg, optim_cfg, total_steps=2)
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
                  for a, b in zip(p1, jax.tree.leaves(
                      nnx.state(_model(3, num_kv_heads=2), nnx.Param))))
    self.assertGreater(changed, 1e-3)   # and the weights moved

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "group_size=1"):
      learner_lib.GRPOConfig(group_size=1)
    with self.assertRaisesRegex(ValueError, "valid choices"):
      learner_lib.GRPOConfig(advantage="ppo")


if __name__ == "__main__":
  absltest.main()
