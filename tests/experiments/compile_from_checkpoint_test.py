"""A paper preset compiled with the shapes of its checkpoint's config.json.

`python -m jaxlab.experiments.compile --config=chart_to_code:paper
--model_from=init_from --config.init_from=DIR` builds the model from DIR's
config.json (`jaxlab.io.pretrained.checkpoint_config`,
`jaxlab.configs._scale.from_checkpoint`) instead of the preset's `SHAPES`
entry. Checked here:
- Qwen2.5-VL-7B-Instruct's config.json, as transformers 4.53 saves it
  (nested `text_config`; the values of the released file), gives exactly
  the preset's model section and vision record: the preset's SHAPES are
  the released checkpoint's;
- a checkpoint of another size takes its own shapes and token ids, while
  the preset's dtypes, remat, image size and a command-line override stay;
  an LM-only preset (rerank) takes the language model alone;
- compiled for a TPU topology (libtpu), the step's parameter count equals
  transformers' model built from the same config.json;
- the errors a user can cause.
"""

import copy
import json
import os
import tempfile
import unittest

from absl.testing import absltest

from jaxlab.configs import chart_to_code
from jaxlab.configs import rerank
from jaxlab.experiments import compile as compile_cli
from jaxlab.io import pretrained
from jaxlab.train import aot

_NO_LIBTPU = "libtpu is not installed (pip install 'jaxlab[tpu]')"

# Qwen/Qwen2.5-VL-7B-Instruct's config.json as transformers 4.53 writes it
# (the fields that define the architecture; `layer_types` and dtype /
# cache flags left out).
QWEN2_5_VL_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "tie_word_embeddings": False,
    "vocab_size": 152064,
    "text_config": {
        "model_type": "qwen2_5_vl_text",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "max_position_embeddings": 128000,
        "max_window_layers": 28,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_section": [16, 24, 24],
                         "rope_type": "default", "type": "default"},
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "use_sliding_window": False,
        "vocab_size": 152064,
    },
    "vision_config": {
        "depth": 32,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "hidden_act": "silu",
        "hidden_size": 1280,
        "in_channels": 3,
        "in_chans": 3,
        "intermediate_size": 3420,
        "model_type": "qwen2_5_vl",
        "num_heads": 16,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
        "tokens_per_second": 2,
        "window_size": 112,
    },
}


def _smaller(layers=2, dim=256, heads=4, kv=2, mlp=512, vocab=1024,
             depth=2, vdim=128, vmlp=256, vheads=2):
  """The 7B's config.json with other sizes (a checkpoint of another size)."""
  hf = copy.deepcopy(QWEN2_5_VL_7B)
  hf["vocab_size"] = vocab
  hf["text_config"].update(
      hidden_size=dim, intermediate_size=mlp, num_attention_heads=heads,
      num_key_value_heads=kv, num_hidden_layers=layers, vocab_size=vocab,
      max_window_layers=layers,
      rope_scaling={"mrope_section": [8, 12, 12], "rope_type": "default",
                    "type": "default"})   # head_dim 64: 32 frequencies
  hf["vision_config"].update(depth=depth, hidden_size=vdim,
                             intermediate_size=vmlp, num_heads=vheads,
                             out_hidden_size=dim,
                             fullatt_block_indexes=[depth - 1])
  hf.update(image_token_id=vocab - 4, video_token_id=vocab - 3,
            vision_start_token_id=vocab - 2, vision_end_token_id=vocab - 1)
  return hf


def _write(root, name, hf):
  path = os.path.join(root, name)
  os.makedirs(path)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf, f)
  return path


class FromCheckpointTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.ckpt_7b = _write(cls.tmp, "qwen2_5_vl_7b", QWEN2_5_VL_7B)
    cls.hf_small = _smaller(layers=4, dim=1024, heads=16, kv=2, mlp=2816,
                            vocab=151936, depth=8, vdim=640, vmlp=1710,
                            vheads=10)
    cls.ckpt_small = _write(cls.tmp, "small", cls.hf_small)

  def _from(self, config, ckpt):
    config.init_from = ckpt
    return compile_cli.with_checkpoint_model(config)

  def test_released_config_gives_the_preset_shapes(self):
    preset = chart_to_code.get_config("paper")
    got = self._from(chart_to_code.get_config("paper"), self.ckpt_7b)
    # One field differs: the released VL config states a 128,000-token
    # context where the preset's shape (Qwen2.5-7B's language model) says
    # 32,768. No tensor shape depends on it (M-RoPE scales nothing by it).
    model = got.model.to_dict()
    self.assertEqual(model.pop("max_position_embeddings"), 128000)
    want = preset.model.to_dict()
    self.assertEqual(want.pop("max_position_embeddings"), 32768)
    self.assertEqual(model, want)
    self.assertEqual(got.scale.vision.to_dict(),
                     preset.scale.vision.to_dict())
    self.assertEqual(got.scale.model_from,
                     os.path.join(self.ckpt_7b, "config.json"))
    self.assertNotIn("model_from", preset.scale)

  def test_another_size_takes_its_shapes_and_keeps_the_presets(self):
    preset = chart_to_code.get_config("paper")
    preset.model.max_position_embeddings = 4096   # a command-line override
    got = self._from(preset.copy_and_resolve_references(), self.ckpt_small)
    m = got.model
    self.assertEqual((m.dim, m.num_layers, m.num_heads, m.num_kv_heads,
                      m.mlp_dim, m.vocab_size),
                     (1024, 4, 16, 2, 2816, 151936))
    self.assertEqual((m.vision.depth, m.vision.hidden_size,
                      m.vision.intermediate_size, m.vision.num_heads,
                      tuple(m.vision.fullatt_block_indexes),
                      m.vision.out_hidden_size),
                     (8, 640, 1710, 10, (7,), 1024))
    self.assertEqual((m.image_token_id, m.video_token_id,
                      m.vision_start_token_id),
                     (151932, 151933, 151934))
    # The preset's choices and the user's override stay.
    for k in ("name", "dtype", "param_dtype", "remat", "scan_layers"):
      self.assertEqual(m[k], preset.model[k], k)
    self.assertEqual(m.vision.dtype, "bfloat16")
    self.assertEqual(tuple(m.prefix.image_size), (1008, 1008))
    self.assertEqual(m.max_position_embeddings, 4096)
    # The vision record: the same image, the smaller tower's parameters.
    from jaxlab.models import qwen2_vl  # pylint: disable=g-import-not-at-top
    from jaxlab.models import qwen2_vl_prefix  # pylint: disable=g-import-not-at-top
    rec = got.scale.vision
    self.assertEqual(rec.vision_tokens, preset.scale.vision.vision_tokens)
    self.assertEqual(rec.params, qwen2_vl_prefix.vision_num_params(
        qwen2_vl.VisionConfig(**{k: v for k, v in m.vision.items()})))
    self.assertLess(rec.params, preset.scale.vision.params)
    self.assertEqual(rec.positions, rec.prefix_tokens + got.train.seq_len)

  def test_lm_only_preset_takes_the_language_model(self):
    got = self._from(rerank.get_config("paper"), self.ckpt_small)
    self.assertEqual(got.model.name, "decoder")
    self.assertEqual((got.model.dim, got.model.num_layers), (1024, 4))
    self.assertNotIn("vision", got.model)

  def test_errors_are_named(self):
    c = chart_to_code.get_config("paper")
    c.init_from = ""
    with self.assertRaisesRegex(ValueError, "needs config.init_from"):
      compile_cli.with_checkpoint_model(c)
    c = chart_to_code.get_config("tiny")
    c.init_from = self.ckpt_7b
    with self.assertRaisesRegex(ValueError, "paper-scale preset"):
      compile_cli.with_checkpoint_model(c)
    lm = _write(self.tmp, "lm_only", {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        **{k: v for k, v in QWEN2_5_VL_7B["text_config"].items()
           if k not in ("model_type", "rope_scaling")}})
    with self.assertRaisesRegex(ValueError, "language model alone"):
      self._from(chart_to_code.get_config("paper"), lm)
    with self.assertRaisesRegex(FileNotFoundError, "no such file"):
      pretrained.checkpoint_config(os.path.join(self.tmp, "missing"))
    with self.assertRaisesRegex(ValueError, "model_from="):
      compile_cli.run(chart_to_code.get_config("paper"), None,
                      model_from="shapes")

  @unittest.skipUnless(aot.libtpu_available(), _NO_LIBTPU)
  def test_compiled_step_has_transformers_parameter_count(self):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    hf = _smaller()
    ckpt = _write(self.tmp, "tiny_vl", hf)
    want = sum(p.numel() for p in
               transformers.Qwen2_5_VLForConditionalGeneration(
                   transformers.Qwen2_5_VLConfig(**hf)).parameters())
    del torch
    config = chart_to_code.get_config("paper")
    config.init_from = ckpt
    config.model.prefix.image_size = (224, 224)
    config.train.update(batch_size=8, seq_len=128)
    config.optim.grad_accum = 1
    report = compile_cli.run(config, "v5e:2x2", sampler=False,
                             model_from="init_from")
    self.assertEqual(report["train_step"]["params"], want)
    self.assertEqual(report["scale"]["model_from"],
                     os.path.join(ckpt, "config.json"))
    self.assertTrue(report["train_step"]["memory"]["fits"])


if __name__ == "__main__":
  absltest.main()
