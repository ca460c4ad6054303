"""Every checkpoint family loads and saves through `jaxlab.io.hf.fill`.

One tiny transformers-written checkpoint per family (Llama, Qwen2, Qwen3,
Mistral, Gemma 3 text, Dream, Qwen2.5-VL, Qwen2-VL). For each: `hf.load`
calls `fill.fill` once, whose table names exactly the checkpoint's tensors;
`fill.to_tensors` of the loaded model gives back the file's tensors bit for
bit (so each layout conversion is inverted exactly); save -> load gives the
same parameters; and the scanned model reads and writes the same tensors.
LoRA adapters are folded on save as `merge_lora` folds them.
"""

import dataclasses
import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
from flax import nnx
import safetensors.numpy

from jaxlab.io import hf
from jaxlab.io.hf import decoder as decoder_io
from jaxlab.io.hf import fill
from jaxlab.io.hf import qwen2_vl as qwen2_vl_io
from jaxlab.nn import lora
from jaxlab.testing import hf_fixtures as hfx

FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma3", "dream",
            "qwen2_5_vl", "qwen2_vl")
SAVABLE = tuple(f for f in FAMILIES if f != "dream")  # Dream: import only


def _perturb(model):
  """A torch model's weights drawn at random (norms near 1), in place."""
  import torch  # pylint: disable=g-import-not-at-top
  gen = torch.Generator().manual_seed(0)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = 0.2 * torch.randn(p.shape, generator=gen)
      p.copy_(1 + noise if "norm" in name or "ln_q" in name else noise)
  return model.eval()


def _vl_config(variant):
  import transformers  # pylint: disable=g-import-not-at-top
  text = dict(vocab_size=64, hidden_size=32, intermediate_size=48,
              num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128,
              rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                               "mrope_section": [2, 1, 1]})
  tokens = dict(image_token_id=60, video_token_id=61,
                vision_start_token_id=62, vision_end_token_id=63)
  if variant == "qwen2_vl":
    return transformers.Qwen2VLConfig(
        text_config=text, vision_config=dict(
            depth=2, embed_dim=16, hidden_size=32, mlp_ratio=2, num_heads=2,
            patch_size=2, temporal_patch_size=2, spatial_merge_size=2,
            in_channels=3), **tokens)
  return transformers.Qwen2_5_VLConfig(
      text_config=text, vision_config=dict(
          depth=2, hidden_size=16, intermediate_size=24, num_heads=2,
          patch_size=2, temporal_patch_size=2, spatial_merge_size=2,
          window_size=8, out_hidden_size=32, fullatt_block_indexes=[1],
          in_channels=3), **tokens)


def _write(family, path):
  """A tiny random checkpoint of `family` written by transformers."""
  import transformers  # pylint: disable=g-import-not-at-top
  if family in ("llama", "qwen2", "qwen3", "mistral", "dream"):
    arch = "qwen2" if family == "dream" else family
    hfx.make_hf_checkpoint(path, arch, vocab_size=64, num_layers=3,
                           sliding_window=8 if family == "mistral" else None)
    if family == "dream":
      with open(os.path.join(path, "config.json")) as fh:
        config = json.load(fh)
      config.update(architectures=["DreamModel"], model_type="Dream",
                    mask_token_id=63)
      with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(config, fh)
    return
  if family == "gemma3":
    model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, sliding_window=4, sliding_window_pattern=2,
        max_position_embeddings=64, tie_word_embeddings=False))
  elif family == "qwen2_5_vl":
    model = transformers.Qwen2_5_VLForConditionalGeneration(
        _vl_config(family))
  else:
    model = transformers.Qwen2VLForConditionalGeneration(_vl_config(family))
  _perturb(model).save_pretrained(path)


def _tensors(path):
  out = {}
  for f in sorted(os.listdir(path)):
    if f.endswith(".safetensors"):
      out.update(safetensors.numpy.load_file(os.path.join(path, f)))
  return out


def _table_and_layers(model, cfg, names):
  """The family's name table (with `names`' prefixes) and layer_paths."""
  if family_is_vl(cfg):
    prefixes = (("model.language_model.", "model.visual.")
                if "model.language_model.embed_tokens.weight" in names
                else ("model.", "visual."))
    return (qwen2_vl_io.tensor_table(cfg, *prefixes),
            lambda p: qwen2_vl_io.layer_paths(cfg, p))
  return (decoder_io.tensor_table(cfg),
          lambda p: decoder_io.layer_paths(model.cfg, p))


def family_is_vl(cfg):
  return hasattr(cfg, "vision")


def _resolved(cfg):
  """`cfg` with its text decoder's head_dim resolved."""
  if family_is_vl(cfg):
    return dataclasses.replace(cfg, text=_resolved(cfg.text))
  return cfg.replace(head_dim=cfg.resolved_head_dim)


def _params(model):
  return {p: np.asarray(v.get_value())
          for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def setUpModule():
  global ROOT, PATHS
  ROOT = tempfile.mkdtemp()
  PATHS = {}
  cleanup = hfx.inductor_cleanup()
  try:
    for family in FAMILIES:
      PATHS[family] = os.path.join(ROOT, family)
      _write(family, PATHS[family])
  finally:
    cleanup()


def tearDownModule():
  shutil.rmtree(ROOT, ignore_errors=True)


class FillLoopTest(parameterized.TestCase):

  def _load_spied(self, path, **kw):
    """`hf.load(path)` and the calls it made to `fill.fill`."""
    with mock.patch.object(fill, "fill", wraps=fill.fill) as spy:
      model, cfg = hf.load(path, **kw)
    return model, cfg, spy

  @parameterized.parameters(*FAMILIES)
  def test_load_goes_through_the_one_fill_loop(self, family):
    path = PATHS[family]
    file_tensors = _tensors(path)
    model, cfg, spy = self._load_spied(path)
    spy.assert_called_once()
    (_, table, _), _ = spy.call_args
    # The table the loop read names exactly the checkpoint's tensors.
    self.assertEqual({row[0] for row in table.values()}, set(file_tensors))
    self.assertEqual(family_is_vl(cfg), family.endswith("vl"))
    if family == "dream":
      self.assertFalse(cfg.causal)
    # The inverse loop gives back the file bit for bit.
    table, layers = _table_and_layers(model, cfg, file_tensors)
    back = fill.to_tensors(model, table, layer_paths=layers)
    self.assertEqual(set(back), set(file_tensors))
    for name, want in file_tensors.items():
      self.assertEqual(back[name].dtype, want.dtype, name)
      np.testing.assert_array_equal(back[name], want, err_msg=name)

  @parameterized.parameters(*SAVABLE)
  def test_save_then_load_gives_the_same_params(self, family):
    model, cfg = hf.load(PATHS[family])
    with tempfile.TemporaryDirectory() as d:
      with mock.patch.object(fill, "to_tensors",
                             wraps=fill.to_tensors) as spy:
        hf.save(model, cfg, d)
      spy.assert_called_once()
      model2, cfg2, load_spy = self._load_spied(d)
      load_spy.assert_called_once()
    # The export writes the resolved head_dim; nothing else changes.
    self.assertEqual(_resolved(cfg2), _resolved(cfg))
    want, got = _params(model), _params(model2)
    self.assertEqual(set(got), set(want))
    for p in want:
      np.testing.assert_array_equal(got[p], want[p], err_msg=str(p))

  @parameterized.parameters("llama", "gemma3", "qwen2_5_vl", "qwen2_vl")
  def test_scanned_model_reads_and_writes_the_same_tensors(self, family):
    path = PATHS[family]
    file_tensors = _tensors(path)
    model, cfg, spy = self._load_spied(path, scan_layers=True)
    spy.assert_called_once()
    text = cfg.text if family_is_vl(cfg) else cfg
    self.assertTrue(text.scan_layers)
    prefix = ("language_model",) if family_is_vl(cfg) else ()
    self.assertIn(prefix + ("scan_blocks",),
                  {p[:len(prefix) + 1] for p in _params(model)})
    if family_is_vl(cfg):  # the tower's blocks stacked too, none unrolled
      self.assertTrue(cfg.vision.scan_layers)
      heads = {p[:2] for p in _params(model)}
      self.assertIn(("visual", "scan_blocks"), heads)
      self.assertNotIn(("visual", "blocks"), heads)
    table, layers = _table_and_layers(model, cfg, file_tensors)
    back = fill.to_tensors(model, table, layer_paths=layers)
    self.assertEqual(set(back), set(file_tensors))
    for name, want in file_tensors.items():
      np.testing.assert_array_equal(back[name], want, err_msg=name)

  def test_mesh_placement_equals_the_unsharded_load(self):
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    mesh = jax.make_mesh((2, 4), ("fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rules = (("batch", "fsdp"), ("embed", "fsdp"), ("vocab", "tensor"),
             ("mlp", "tensor"), ("heads", "tensor"), ("kv_heads", "tensor"),
             ("head_dim", None), ("norm", None))
    plain, _ = hf.load(PATHS["llama"])
    sharded, _ = hf.load(PATHS["llama"], mesh=mesh, rules=rules)
    q = sharded.layers[0].attn.q_dnh.get_value()
    self.assertEqual(tuple(q.sharding.spec), ("fsdp", "tensor", None))
    # 2 KV heads on 4 tensor devices: that dim stays replicated.
    k = sharded.layers[0].attn.k_dkh.get_value()
    self.assertEqual(tuple(k.sharding.spec), ("fsdp", None, None))
    want, got = _params(plain), _params(sharded)
    for p in want:
      np.testing.assert_array_equal(got[p], want[p], err_msg=str(p))

  @parameterized.parameters("qwen2", "qwen2_5_vl")
  def test_save_folds_lora_as_merge_lora(self, family):
    model, cfg = hf.load(PATHS[family])
    lora.add_lora(model, rank=2, alpha=4.0, targets=("q_dnh", "up_df"),
                  rngs=nnx.Rngs(0))
    # B = 0 at init: give it values so the fold shows.
    rng = np.random.default_rng(0)
    for _, var in nnx.to_flat_state(nnx.state(model, lora.LoRA)):
      var.set_value(rng.standard_normal(var.get_value().shape).astype(
          np.float32))
    merged = lora.merge_lora(nnx.clone(model))
    with tempfile.TemporaryDirectory() as d:
      hf.save(model, cfg, d)
      reloaded, _ = hf.load(d)
    want, got = _params(merged), _params(reloaded)
    self.assertEqual(set(got), set(want))
    for p in want:
      np.testing.assert_array_equal(got[p], want[p], err_msg=str(p))
    # The fold moved the adapted weights (and only those).
    base = _params(model)
    q = (("language_model",) if family.endswith("vl") else ()) + (
        "layers", 0, "attn", "q_dnh")
    self.assertGreater(np.abs(got[q] - base[q]).max(), 0.1)
    moved = {p[-1] for p in want if not np.array_equal(got[p], base[p])}
    self.assertEqual(moved, {"q_dnh", "up_df"})

if __name__ == "__main__":
  absltest.main()
