"""The video papers' `vl` presets (issue #32): VideoReasonBench (R) and VUDG
(S) train and decode their video LM on the Qwen2.5-VL architecture."""

import json
import math
import os
import tempfile

from absl.testing import absltest
from flax import nnx

from jaxlab import main
from jaxlab.configs import video_reason as vr_configs
from jaxlab.configs import vudg as vudg_configs
from jaxlab.models import qwen2_vl_prefix
from jaxlab.models import registry


def _numbers(x):
  """Every number in a JSON tree."""
  if isinstance(x, dict):
    for v in x.values():
      yield from _numbers(v)
  elif isinstance(x, list):
    for v in x:
      yield from _numbers(v)
  elif isinstance(x, (int, float)) and not isinstance(x, bool):
    yield x


class VideoVLPresetsTest(absltest.TestCase):

  def test_presets_build_the_qwen_prefix_lm(self):
    for config in (vr_configs.get_config("tiny,smoke,vl"),
                   vudg_configs.get_config("smoke,vl")):
      self.assertEqual(config.model.name, "qwen2_5_vl_prefix")
      self.assertEqual(registry.num_frames(config.model),
                       config.model.prefix.num_frames)
      # Shapes only: the class and its config are what is checked.
      model = nnx.eval_shape(registry.get_spec(config.model,
                                               vocab_size=300).factory)
      self.assertIsInstance(model, qwen2_vl_prefix.Qwen2VLPrefixLM)
      self.assertEqual(model.prefix.kind, "video")
      self.assertEqual(model.cfg.text.vocab_size, 304)

  def test_runs_end_to_end(self):
    for name, config in (("video_reason",
                          vr_configs.get_config("tiny,smoke,vl")),
                         ("vudg", vudg_configs.get_config("smoke,vl"))):
      with tempfile.TemporaryDirectory() as d:
        main.run_experiment(config, d)
        with open(os.path.join(d, "results.json")) as fh:
          res = json.load(fh)
      self.assertEqual(res["experiment"], name)
      self.assertTrue(res["tables"], name)
      values = [v for v in _numbers(res["tables"])
                if not (isinstance(v, float) and math.isnan(v))]
      self.assertNotEmpty(values, name)
      self.assertTrue(all(math.isfinite(v) for v in values), name)


if __name__ == "__main__":
  absltest.main()
