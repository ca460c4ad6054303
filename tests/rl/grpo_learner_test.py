"""Tests for jaxlab.rl (rollout + GRPO learner) on a tiny decoder."""

import jax
import numpy as np
from absl.testing import absltest
from flax import nnx

from jaxlab.models import decoder as decoder_lib
from jaxlab.rl import learner as learner_lib
from jaxlab.rl import rollout as rollout_lib

_TARGET = 7


def _model(seed=0):
  cfg = decoder_lib.DecoderConfig(vocab_size=12, dim=32, num_layers=1,
                                  num_heads=2, num_kv_heads=1, mlp_dim=64,
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

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "group_size=1"):
      learner_lib.GRPOConfig(group_size=1)
    with self.assertRaisesRegex(ValueError, "valid choices"):
      learner_lib.GRPOConfig(advantage="ppo")


if __name__ == "__main__":
  absltest.main()
