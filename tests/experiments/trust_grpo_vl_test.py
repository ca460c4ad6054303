"""trust_grpo's `vl` preset: the visual thinking task and a Qwen2.5-VL
policy through the warm start, GRPO and the evaluation.

Hand-computed values: the pixels `render_operands` lights, the capacity
bound, the visual warm-start batch; then `trust_grpo:smoke,vl` end to end.
"""

import json
import shutil
import tempfile

from absl.testing import absltest
from flax import nnx
import numpy as np

from jaxlab.configs import trust_grpo as trust_configs
from jaxlab.data.synthetic import thinking_task
from jaxlab.experiments import trust_grpo
from jaxlab.models import qwen2_vl_prefix
from jaxlab.models import registry


class VisualTaskTest(absltest.TestCase):

  def test_render_operands_lights_hand_computed_cells(self):
    img = thinking_task.render_operands(2, 3, 16)
    self.assertEqual(img.shape, (16, 16, 3))
    want = np.zeros((16, 16), np.float32)
    # 4 cells a row, a 2x2 square at offset 1 in each 4x4 patch; a in rows
    # 0..7, b in rows 8..15.
    for r, c in [(1, 1), (1, 5), (9, 1), (9, 5), (9, 9)]:
      want[r:r + 2, c:c + 2] = 1.0
    np.testing.assert_array_equal(img[..., 0], want)
    np.testing.assert_array_equal(img[..., 0], img[..., 2])
    # 8 cells per half of 16 x 16: a ninth does not fit.
    self.assertEqual(thinking_task.operand_capacity(16), 8)
    with self.assertRaisesRegex(ValueError, "do not fit 8 cells"):
      thinking_task.render_operands(9, 0, 16)
    with self.assertRaisesRegex(ValueError, "multiple of 8"):
      thinking_task.render_operands(1, 1, 12)

  def test_visual_task_prompt_images_and_warm_start_batch(self):
    cfg = trust_configs.get_config("vl")
    task = thinking_task.make_task(cfg.task)
    self.assertTrue(task.visual)
    q = task.questions.index((3, 1))
    self.assertEqual(task.prompt(q), [thinking_task.BOS])
    self.assertLen(task.prompt(q, visual=False), 3)
    np.testing.assert_array_equal(task.images([q])[0],
                                  thinking_task.render_operands(3, 1, 16))
    batch = thinking_task.format_batch(
        task, np.random.default_rng(0), batch_size=8, hack_prob=0.5)
    self.assertEqual(batch["images"].shape, (8, 16, 16, 3))
    self.assertEqual(batch["ids"].shape, (8, 4))
    np.testing.assert_array_equal(batch["ids"][:, 0], thinking_task.BOS)
    np.testing.assert_array_equal(batch["mask"][:, 0], 0.0)
    np.testing.assert_array_equal(batch["mask"][:, 1:], 1.0)
    # The image row is the question: the lit cells count its operands.
    lit = batch["images"][..., 0].reshape(8, 2, 8, 16).sum((2, 3)) / 4
    for row, (a, b) in zip(lit, [task.questions[i] for i in
                                 np.random.default_rng(0).integers(
                                     0, 25, 8)]):
      np.testing.assert_array_equal(row, [a, b])
    with self.assertRaisesRegex(ValueError, "modulus=10"):
      thinking_task.make_task(dict(cfg.task, modulus=10))


class VLPresetTest(absltest.TestCase):

  def test_smoke_vl_runs_warm_start_grpo_and_eval(self):
    config = trust_configs.get_config("smoke,vl")
    config.variants = ("trust",)
    config.rl.prompts_per_step = 5
    config.grpo.group_size = 4
    # Two RL steps (the second samples from the updated policy, so its KL
    # to the reference is > 0 on every iteration) and two evaluations.
    config.rl.update(steps=2, eval_every=2)
    # Built abstractly (shapes only): the run builds the real one.
    policy = nnx.eval_shape(registry.get_spec(config.model, vocab_size=24,
                                              seed=0).factory)
    self.assertIsInstance(policy, qwen2_vl_prefix.Qwen2VLPrefixLM)
    # 16x16 image, patch 4, 2x2 merge: 4 vision tokens + start / end.
    self.assertEqual(policy.num_prefix, 6)
    workdir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, workdir)
    flat = trust_grpo.run(config, workdir)
    for k in ("acc", "acc_hackable", "sampled_hack_rate_informative"):
      self.assertBetween(flat[f"trust/{k}"], 0.0, 1.0)
    self.assertGreater(flat["trust/kl"], 0.0)  # GRPO moved the policy
    with open(f"{workdir}/results.json") as f:
      self.assertEqual(json.load(f)["experiment"], "trust_grpo")


if __name__ == "__main__":
  absltest.main()
