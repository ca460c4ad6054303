"""Paper-scale presets: the released models' shapes, and every `:paper`
config a valid compile target (`jaxlab.configs._scale`)."""

import importlib

from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.configs import _scale as scale
from jaxlab.experiments.bench import tpu_presets
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry

# Parameter counts of the released checkpoints (safetensors totals on their
# Hugging Face model cards / `sum(p.numel())` in transformers): a wrong
# width, depth, head count, vocabulary or tying changes them.
RELEASED_PARAMS = {
    "llama3_2_1b": 1_235_814_400,
    "llama3_2_3b": 3_212_749_824,
    "llama3_8b": 8_030_261_248,
    "llama2_7b": 6_738_415_616,
    "llama2_13b": 13_015_864_320,
    "qwen2_5_0_5b": 494_032_768,
    "qwen2_5_3b": 3_085_938_688,
    "qwen2_5_7b": 7_615_616_512,
    "qwen2_5_14b": 14_770_033_664,
    "qwen3_4b": 4_022_468_096,
    "qwen3_8b": 8_190_735_360,
    "llada_8b": 8_015_581_184,
    "mistral_7b": 7_241_732_096,
}


class ShapesTest(parameterized.TestCase):

  def test_every_shape_has_its_released_count(self):
    self.assertEqual(set(scale.SHAPES), set(RELEASED_PARAMS))
    for name, fields in scale.SHAPES.items():
      self.assertEqual(decoder_lib.DecoderConfig(**fields).num_params(),
                       RELEASED_PARAMS[name], name)

  def test_unknown_shape_and_program_are_named(self):
    from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(ValueError, "unknown shape 'gpt5'"):
      scale.apply(common.base_config(), shape="gpt5", topology="v5e:2x2",
                  seq_len=8, batch_size=1, paper="-")
    with self.assertRaisesRegex(ValueError, "program='infer'"):
      scale.apply(common.base_config(), shape="llama3_8b", program="infer",
                  topology="v5e:2x2", seq_len=8, batch_size=1, paper="-")


class PaperPresetsTest(parameterized.TestCase):

  def test_presets_are_found(self):
    names = tpu_presets.paper_configs()
    for name in ("rope_extension", "dpad", "mathfimer", "pmc", "rerank"):
      self.assertIn(name, names)

  def test_each_preset_is_a_compile_target(self):
    for name in tpu_presets.paper_configs():
      mod = importlib.import_module(f"jaxlab.configs.{name}")
      c = mod.get_config("paper")
      with self.subTest(name):
        self.assertIn(c.scale.shape, scale.SHAPES)
        self.assertIn(c.scale.program, scale.PROGRAMS)
        self.assertIn(":", c.scale.topology)
        self.assertTrue(c.scale.paper)
        # The model section is exactly the released shape (+ overrides) in
        # bf16 over fp32 master weights, scanned, remat'd.
        dcfg = registry.decoder_config(c.model)
        for k, v in scale.SHAPES[c.scale.shape].items():
          if k not in mod.PAPER.get("model_overrides", {}):
            self.assertEqual(getattr(dcfg, k), v, (name, k))
        self.assertEqual((dcfg.dtype, dcfg.param_dtype, dcfg.scan_layers),
                         ("bfloat16", "float32", True))
        self.assertEqual(c.train.batch_size % c.optim.grad_accum, 0)
        self.assertEqual(c.mesh.fsdp, -1)


if __name__ == "__main__":
  absltest.main()
