"""Paper-scale presets: the released models' shapes, and every `:paper`
config a valid compile target (`jaxlab.configs._scale`)."""

import importlib

from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.configs import _scale as scale
from jaxlab.experiments.bench import tpu_presets
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import qwen2_vl_prefix
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
        # bf16 over fp32 master weights, scanned, remat'd (a vision preset:
        # its language model).
        if "vision" in mod.PAPER:
          dcfg = qwen2_vl_prefix.config_from_dict(c.model)[0].text
        else:
          dcfg = registry.decoder_config(c.model)
        for k, v in scale.SHAPES[c.scale.shape].items():
          if k not in mod.PAPER.get("model_overrides", {}):
            self.assertEqual(getattr(dcfg, k), v, (name, k))
        self.assertEqual((dcfg.dtype, dcfg.param_dtype, dcfg.scan_layers),
                         ("bfloat16", "float32", True))
        self.assertEqual(c.train.batch_size % c.optim.grad_accum, 0)
        self.assertEqual(c.mesh.fsdp, -1)


# Qwen2.5-VL-3B / -7B `vision_config` (config.json of the released
# checkpoints); out_hidden_size is the language model's width.
QWEN25_VL_TOWER = dict(depth=32, hidden_size=1280, intermediate_size=3420,
                       num_heads=16, patch_size=14, spatial_merge_size=2,
                       temporal_patch_size=2, window_size=112,
                       fullatt_block_indexes=(7, 15, 23, 31),
                       tokens_per_second=2, hidden_act="silu", in_channels=3)
# name -> (kind, (H, W), frames, loss, merged vision tokens by hand:
# (H / 28) * (W / 28) * ceil(frames / 2)).
VISION_PRESETS = {
    "chart_to_code": ("image", (1008, 1008), 1, "prefix_lm_nll", 36 * 36),
    "trust_grpo": ("image", (448, 448), 1, "prefix_lm_nll", 16 * 16),
    "video_reason": ("video", (448, 448), 32, "video_lm", 16 * 16 * 16),
    "vudg": ("video", (336, 420), 16, "video_lm", 12 * 15 * 8),
}


class VisionPresetsTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(k, k) for k in VISION_PRESETS])
  def test_vision_preset_is_the_whole_qwen2_5_vl(self, name):
    kind, size, frames, loss, tokens = VISION_PRESETS[name]
    c = importlib.import_module(f"jaxlab.configs.{name}").get_config("paper")
    self.assertEqual(c.model.name, "qwen2_5_vl_prefix")
    for k, v in QWEN25_VL_TOWER.items():
      self.assertEqual(c.model.vision[k], v, (name, k))
    self.assertEqual(c.model.vision.out_hidden_size, 3584)  # the 7B's LM
    self.assertEqual((c.model.vision.dtype, c.model.vision.param_dtype),
                     ("bfloat16", "float32"))
    self.assertEqual((c.model.prefix.kind, tuple(c.model.prefix.image_size),
                      c.model.prefix.num_frames), (kind, size, frames))
    self.assertEqual(c.scale.loss, loss)
    self.assertEqual(c.scale.vision.vision_tokens, tokens)
    self.assertEqual(c.scale.vision.positions,
                     tokens + 2 + c.train.seq_len)
    self.assertIn("vision tower included", c.scale.note)
    # The model builds: the released vocabulary keeps Qwen's vision ids.
    vl_cfg, prefix = qwen2_vl_prefix.config_from_dict(c.model)
    self.assertEqual(vl_cfg.text.vocab_size, 152064)
    self.assertEqual((vl_cfg.image_token_id, vl_cfg.video_token_id,
                      vl_cfg.vision_start_token_id,
                      prefix.vision_end_token_id),
                     (151655, 151656, 151652, 151653))
    self.assertEqual(prefix.task_vocab_size, 0)

  def test_tower_params_are_the_released_count(self):
    # Qwen2.5-VL-7B's `visual.*` tensors, by hand: patch embedding 1176 x
    # 1280; 32 blocks of 2 RMSNorms, qkv (1280 x 3840 + 3840), proj (1280^2
    # + 1280), SwiGLU (3 x 1280 x 3420 + 2 x 3420 + 1280); the merger's
    # ln_q, 5120^2 + 5120 and 5120 x 3584 + 3584.
    block = (2 * 1280 + 1280 * 3840 + 3840 + 1280 * 1280 + 1280
             + 3 * 1280 * 3420 + 2 * 3420 + 1280)
    want = (1176 * 1280 + 32 * block + 1280 + 5120 * 5120 + 5120
            + 5120 * 3584 + 3584)
    c = importlib.import_module("jaxlab.configs.chart_to_code").get_config(
        "paper")
    self.assertEqual(c.scale.vision.params, want)
    # The LM alone is the released Qwen2.5-7B count (RELEASED_PARAMS).
    vl_cfg, _ = qwen2_vl_prefix.config_from_dict(c.model)
    self.assertEqual(vl_cfg.text.num_params(), RELEASED_PARAMS["qwen2_5_7b"])

  def test_rerank_stays_the_language_model(self):
    c = importlib.import_module("jaxlab.configs.rerank").get_config("paper")
    self.assertEqual(c.model.name, "decoder")
    self.assertNotIn("vision", c.scale)
    self.assertIn("not in the compiled program", c.scale.note)

  def test_bad_vision_arguments_are_named(self):
    from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
    kw = dict(shape="qwen2_5_7b", topology="v5e:2x2", seq_len=8,
              batch_size=1, paper="-")
    for vision, msg in (
        (dict(kind="audio", image_size=448), "vision kind='audio'"),
        (dict(kind="image"), "needs image_size"),
        (dict(kind="video", image_size=448), "needs num_frames"),
        (dict(kind="image", image_size=450), "multiples of"),
        (dict(kind="image", image_size=448, shape="clip"),
         "unknown vision shape 'clip'"),
        (dict(kind="image", image_size=448, fps=2), "unknown keys")):
      with self.assertRaisesRegex(ValueError, msg):
        scale.apply(common.base_config(), vision=vision, **kw)


if __name__ == "__main__":
  absltest.main()
