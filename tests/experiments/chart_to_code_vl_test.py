"""chart_to_code:tiny,vl end to end: the Qwen2.5-VL prefix-LM policy."""

import json
import shutil
import tempfile

from absl.testing import absltest
from flax import nnx
import numpy as np

from jaxlab.configs import chart_to_code as c2c_configs
from jaxlab.experiments import chart_to_code as c2c
from jaxlab.models import qwen2_vl_prefix


class VLPresetTest(absltest.TestCase):

  def test_tiny_vl_runs_all_phases(self):
    config = c2c_configs.get_config("tiny,vl")
    # The colab's CI shrink of `tiny`: every phase still runs (SFT with two
    # curve points, both GRPO stages, three evaluations), on fewer steps,
    # charts and prompts.
    config.charts.eval_size = 2
    config.rl.prompts_per_step = 1
    config.sft.update(steps=10, eval_every=5)
    # Built abstractly (shapes only): the run builds the real one.
    policy = nnx.eval_shape(lambda: c2c.make_policy(config, seed=0))
    self.assertIsInstance(policy, qwen2_vl_prefix.Qwen2VLPrefixLM)
    # 32x32 chart, patch 4, 2x2 merge: 16 vision tokens + start / end.
    self.assertEqual(policy.num_prefix, 18)
    workdir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, workdir)
    flat = c2c.run(config, workdir)
    with open(f"{workdir}/results.json") as f:
      run = json.load(f)["extra"]["runs"][0]
    self.assertEqual(set(run["phases"]), {"sft", "text_exec",
                                          "text_vis_exec"})
    self.assertTrue(all(np.isfinite(v) for v in flat.values()))
    hist = run["sft_history"]
    self.assertLess(hist[-1]["train_loss"], hist[0]["train_loss"])


if __name__ == "__main__":
  absltest.main()
