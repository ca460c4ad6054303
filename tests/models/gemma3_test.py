"""Gemma 3 (text): jaxlab's decoder equals transformers' `Gemma3ForCausalLM`.

Tiny random float32 configs with sliding-window and global layers (window 4,
prompts of 14 tokens, so every sliding layer drops keys), their two RoPE
bases (linear rope scaling on the global layers in one config), GQA with
head_dim 16 != hidden / heads, and soft-capping on and off. Compared: the
full forward, KV-cache prefill + decode steps, the model exported by
`jaxlab.io.hf.save` and loaded by transformers, and the scanned model.

Tolerance: the logits are O(1) sums through L <= 6 blocks whose widest
contractions have D = 32, F = 48 and S <= 17 terms; float32 rounding
(eps = 1.2e-7) of the two implementations' different summation orders,
rsqrt/tanh/exp, gives O(eps * L * (D + F + S)) ~ 7e-5 in the worst case,
~2e-6 measured; `TOL` = 5e-5 sits between.
"""

import os
import shutil
import tempfile
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
import torch
from transformers import Gemma3ForCausalLM
from transformers import Gemma3TextConfig

from jaxlab.io import hf
from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import norm as norm_lib

TOL = 5e-5
VOCAB = 80
WINDOW = 4
T = 14  # prompt length > WINDOW

# name -> Gemma3TextConfig overrides.
CONFIGS = {
    # layer_types S F S F, plain RoPE on both bases.
    "pattern2": dict(num_hidden_layers=4, sliding_window_pattern=2),
    # S S F S S F, linear scaling on the global layers, final soft-capping.
    "pattern3_scaled_softcap": dict(
        num_hidden_layers=6, sliding_window_pattern=3,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        final_logit_softcapping=0.6),
    # Explicit layer_types with no period below L, untied head.
    "irregular_untied": dict(
        num_hidden_layers=4, tie_word_embeddings=False,
        layer_types=["full_attention", "sliding_attention",
                     "sliding_attention", "full_attention"]),
}


def _hf_config(**kw):
  base = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              sliding_window=WINDOW, query_pre_attn_scalar=24,
              rope_theta=1e6, rope_local_base_freq=1e4,
              max_position_embeddings=64, rms_norm_eps=1e-6,
              attn_implementation="eager", pad_token_id=0)
  base.update(kw)
  return Gemma3TextConfig(**base)


def _hf_model(seed, **kw):
  """A random float32 `Gemma3ForCausalLM` (every weight, norms included, drawn
  at random, so zero-initialised (1 + w) norms cannot hide a mapping bug)."""
  torch.manual_seed(seed)
  model = Gemma3ForCausalLM(_hf_config(**kw)).eval()
  with torch.no_grad():
    for _, p in model.named_parameters():
      p.normal_(0.0, 0.15)
  return model


def _hf_logits(model, ids, **kw):
  with torch.no_grad():
    out = model(torch.as_tensor(np.asarray(ids), dtype=torch.long), **kw)
  return out.logits.float().numpy()


def _ids(b=2, t=T, seed=0):
  return np.random.RandomState(seed).randint(0, VOCAB, (b, t)).astype(np.int32)


def setUpModule():
  global ROOT, PATHS, HF_MODELS
  ROOT = tempfile.mkdtemp()
  PATHS, HF_MODELS = {}, {}
  for i, (name, kw) in enumerate(CONFIGS.items()):
    HF_MODELS[name] = _hf_model(10 + i, **kw)
    PATHS[name] = os.path.join(ROOT, name)
    HF_MODELS[name].save_pretrained(PATHS[name])


def tearDownModule():
  shutil.rmtree(ROOT, ignore_errors=True)


# Jitted forwards: op-by-op eager dispatch of every layer (and of every
# prefill / decode step) was most of these tests' time; the computation
# checked is the same function of the same parameters.
_logits = nnx.jit(lambda m, ids, mask: m(ids, attention_mask=mask))
_forward = nnx.jit(lambda m, ids, cache: m.forward(ids, cache=cache))


def _fwd(model, ids, mask=None):
  """`model(ids, attention_mask=mask)` through one compiled function."""
  return _logits(model, jnp.asarray(ids),
                 None if mask is None else jnp.asarray(mask))


def _max_err(a, b):
  return float(np.abs(np.asarray(a) - np.asarray(b)).max())


class Gemma3ConfigTest(absltest.TestCase):

  def test_config_fields(self):
    _, cfg = hf.load(PATHS["pattern3_scaled_softcap"])
    self.assertEqual(cfg.layer_types, ("sliding_attention",) * 2 + (
        "full_attention",) + ("sliding_attention",) * 2 + ("full_attention",))
    self.assertEqual(cfg.sliding_window, WINDOW)
    self.assertEqual((cfg.rope_theta, cfg.sliding_rope_theta), (1e6, 1e4))
    self.assertEqual(dict(cfg.rope_scaling), {"method": "pi", "factor": 2.0,
                                              "original_max_position": 64})
    self.assertTrue(cfg.qk_norm and cfg.post_norms and cfg.norm_plus_one
                    and cfg.embed_scale and cfg.tie_embeddings)
    self.assertEqual(cfg.mlp_activation, "gelu_tanh")
    self.assertAlmostEqual(cfg.attn_scale, 24 ** -0.5)
    self.assertEqual(cfg.final_logit_softcap, 0.6)
    self.assertIsNone(cfg.attn_logit_softcap)
    self.assertEqual(cfg.resolved_scan_period, 3)

  def test_transformers4_dialect_reads_the_same(self):
    v5 = hf.config_from_hf(HF_MODELS["pattern3_scaled_softcap"].config
                           .to_dict())
    v4 = hf.config_from_hf({
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 6, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "sliding_window": WINDOW,
        "sliding_window_pattern": 3, "query_pre_attn_scalar": 24,
        "rope_theta": 1e6, "rope_local_base_freq": 1e4,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
        "max_position_embeddings": 64, "final_logit_softcapping": 0.6})
    self.assertEqual(v4, v5)

  def test_config_round_trip(self):
    for name in CONFIGS:
      cfg = hf.config_from_hf(HF_MODELS[name].config.to_dict())
      self.assertEqual(hf.config_from_hf(hf.config_to_hf(cfg)), cfg, name)

  def test_export_refuses_partial_gemma(self):
    cfg = hf.config_from_hf(HF_MODELS["pattern2"].config.to_dict())
    with self.assertRaisesRegex(ValueError, "post_norms"):
      hf.config_to_hf(cfg.replace(post_norms=False))
    with self.assertRaisesRegex(ValueError, "attn_logit_softcapping"):
      hf.config_to_hf(cfg.replace(attn_logit_softcap=2.0))
    with self.assertRaisesRegex(ValueError, "gelu_tanh"):
      hf.config_to_hf(decoder_lib.DecoderConfig(mlp_activation="gelu_tanh"))

  def test_attn_logit_softcapping_field_is_ignored_like_transformers(self):
    kw = dict(CONFIGS["pattern2"], attn_logit_softcapping=0.5)
    model_hf = _hf_model(10, **kw)
    ref = _hf_logits(model_hf, _ids())
    np.testing.assert_array_equal(ref, _hf_logits(HF_MODELS["pattern2"],
                                                  _ids()))
    path = os.path.join(ROOT, "field_softcap")
    model_hf.save_pretrained(path)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      model, cfg = hf.load(path)
    self.assertTrue(any("attn_logit_softcapping" in str(w.message)
                        for w in caught))
    self.assertIsNone(cfg.attn_logit_softcap)
    self.assertLess(_max_err(_fwd(model, _ids()), ref), TOL)

  def test_defaults_leave_other_models_unchanged(self):
    cfg = decoder_lib.DecoderConfig(vocab_size=64, dim=32, num_layers=1)
    block = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0)).layers[0]
    self.assertIsNone(block.post_attn_norm)
    self.assertFalse(block.attn_norm.plus_one)
    self.assertEqual(block.mlp.activation, "silu")
    self.assertIsNone(block.attn.logits_scale)
    self.assertIsNone(block.attn.logits_soft_cap)


class Gemma3ParityTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_logits_match_transformers(self, name):
    model, _ = hf.load(PATHS[name])
    ids = _ids()
    ref = _hf_logits(HF_MODELS[name], ids)
    self.assertLess(_max_err(_fwd(model, ids), ref), TOL)
    # The reference is not degenerate: logits vary along the sequence.
    self.assertGreater(np.abs(ref[:, 1:] - ref[:, :-1]).mean(), 0.05)

  def test_window_and_bases_matter(self):
    """Sanity of the comparison: without the window, or with one RoPE base,
    the logits differ from transformers' by far more than TOL."""
    name = "pattern3_scaled_softcap"
    model, cfg = hf.load(PATHS[name])
    ref = _hf_logits(HF_MODELS[name], _ids())
    for change in (dict(sliding_window=64), dict(sliding_rope_theta=None),
                   dict(final_logit_softcap=None)):
      other, _ = hf.load(PATHS[name], **change)
      self.assertGreater(_max_err(_fwd(other, _ids()), ref), 100 * TOL,
                         change)
    del model, cfg

  def test_final_softcap_is_active(self):
    name = "pattern3_scaled_softcap"
    model, _ = hf.load(PATHS[name])
    uncapped, _ = hf.load(PATHS[name], final_logit_softcap=None)
    out = np.asarray(_fwd(model, _ids()))
    raw = np.asarray(_fwd(uncapped, _ids()))
    self.assertGreater(np.abs(raw).max(), 0.6)   # the cap bites
    self.assertLess(np.abs(out).max(), 0.6)
    np.testing.assert_allclose(out, 0.6 * np.tanh(raw / 0.6), atol=TOL)

  @parameterized.parameters(0.5, 2.0)
  def test_attention_softcap_matches_transformers_eager(self, cap):
    # transformers' eager attention soft-caps when given `softcap` (Gemma 2's
    # rule: tanh after the scale, before the mask).
    name = "pattern2"
    model, _ = hf.load(PATHS[name], attn_logit_softcap=cap)
    ids = _ids()
    ref = _hf_logits(HF_MODELS[name], ids, softcap=cap)
    self.assertLess(_max_err(_fwd(model, ids), ref), TOL)
    plain = _hf_logits(HF_MODELS[name], ids)
    self.assertGreater(_max_err(ref, plain), 100 * TOL)

  def test_left_padded_batch_matches_transformers(self):
    name = "pattern3_scaled_softcap"
    model, _ = hf.load(PATHS[name])
    ids = _ids(seed=5)
    mask = np.ones_like(ids)
    mask[1, :5] = 0  # row 1: 5 pads, then 9 > WINDOW real tokens
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    ref = _hf_logits(HF_MODELS[name], ids,
                     attention_mask=torch.as_tensor(mask),
                     position_ids=torch.as_tensor(positions))
    out = np.asarray(_fwd(model, ids, mask))
    real = mask.astype(bool)
    self.assertLess(_max_err(out[real], ref[real]), TOL)
    # Row 1's real tokens equal the unpadded prompt's logits.
    alone = np.asarray(_fwd(model, ids[1:, 5:]))
    self.assertLess(_max_err(out[1, 5:], alone[0]), TOL)

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_kv_cache_prefill_and_decode(self, name):
    model, _ = hf.load(PATHS[name])
    # A prompt of T - steps = 11 > WINDOW tokens and 3 decode steps: the
    # full forward is then at the [2, T] shape test_logits_match_transformers
    # compiled for the same config (one compile fewer per config).
    steps = 3
    p_len = T - steps
    ids = _ids(t=T, seed=1)
    full = np.asarray(_fwd(model, ids))
    ref = _hf_logits(HF_MODELS[name], ids)
    self.assertLess(_max_err(full, ref), TOL)
    cache = model.init_cache(batch=2, max_len=T + 2)
    out = _forward(model, jnp.asarray(ids[:, :p_len]), cache)
    got = [np.asarray(out.logits)]
    cache = out.cache
    for s in range(steps):
      out = _forward(model, jnp.asarray(ids[:, p_len + s:p_len + s + 1]),
                     cache)
      cache = out.cache
      got.append(np.asarray(out.logits))
    got = np.concatenate(got, axis=1)
    self.assertLess(_max_err(got, full), TOL)
    self.assertLess(_max_err(got, ref), TOL)

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_scanned_equals_unrolled(self, name):
    model, _ = hf.load(PATHS[name])
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # the irregular pattern warns
      scanned, cfg = hf.load(PATHS[name], scan_layers=True)
    self.assertTrue(cfg.scan_layers)
    ids = jnp.asarray(_ids())
    want = _fwd(model, ids)
    self.assertLess(_max_err(_fwd(scanned, ids), want), TOL)
    # With a cache as well.
    cache = scanned.init_cache(batch=2, max_len=T + 1)
    out = _forward(scanned, ids[:, :T - 1], cache)
    out = _forward(scanned, ids[:, T - 1:], out.cache)
    self.assertLess(_max_err(out.logits, want[:, T - 1:]), TOL)
    # Stacking the unrolled model gives the same function.
    self.assertLess(_max_err(_fwd(decoder_lib.stack_layers(model), ids),
                             want), TOL)

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_export_then_transformers_agrees(self, name):
    model, cfg = hf.load(PATHS[name])
    out_dir = os.path.join(ROOT, "export_" + name)
    hf.save(model, cfg, out_dir)
    # Our reader gets back the same parameters, bit for bit.
    again, cfg2 = hf.load(out_dir)
    self.assertEqual(cfg2, cfg)
    for (p1, v1), (p2, v2) in zip(
        nnx.to_flat_state(nnx.state(model, nnx.Param)),
        nnx.to_flat_state(nnx.state(again, nnx.Param))):
      self.assertEqual(p1, p2)
      np.testing.assert_array_equal(np.asarray(v1.get_value()),
                                    np.asarray(v2.get_value()))
    reloaded = Gemma3ForCausalLM.from_pretrained(
        out_dir, attn_implementation="eager").eval()
    self.assertEqual(reloaded.config.layer_types,
                     HF_MODELS[name].config.layer_types)
    ids = _ids(seed=2)
    ref = _hf_logits(HF_MODELS[name], ids)
    np.testing.assert_array_equal(_hf_logits(reloaded, ids), ref)
    self.assertLess(_max_err(_fwd(model, ids), ref), TOL)

  def test_export_of_a_scanned_native_model(self):
    """A model built in jaxlab (scanned, random (1 + w) norms) exports to a
    checkpoint transformers computes the same logits from."""
    cfg = hf.config_from_hf(HF_MODELS["pattern2"].config.to_dict()).replace(
        scan_layers=True, init_std=0.15)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(7))
    # Norm scales start at 0 (identity); draw them too.
    key = jax.random.key(3)
    for _, module in nnx.iter_graph(model):
      if isinstance(module, norm_lib.RMSNorm):
        key, sub = jax.random.split(key)
        module.scale.set_value(
            0.15 * jax.random.normal(sub, module.scale.get_value().shape))
    out_dir = os.path.join(ROOT, "export_native")
    hf.save(model, cfg, out_dir)
    reloaded = Gemma3ForCausalLM.from_pretrained(
        out_dir, attn_implementation="eager").eval()
    ids = _ids(seed=4)
    self.assertLess(_max_err(_fwd(model, ids),
                             _hf_logits(reloaded, ids)), TOL)


if __name__ == "__main__":
  absltest.main()


class Gemma3MultimodalCheckpointTest(absltest.TestCase):
  """A `Gemma3ForConditionalGeneration` checkpoint (Gemma 3 4B and up) loads
  its language model: text-only logits equal transformers' multimodal
  model's, from transformers 5's tensor names and the Hub's older ones.
  (No final soft-cap in this config: transformers' multimodal class does not
  apply `final_logit_softcapping`, its CausalLM does; released Gemma 3
  checkpoints set it to null.)"""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    from transformers import Gemma3Config  # pylint: disable=g-import-not-at-top
    from transformers import Gemma3ForConditionalGeneration  # pylint: disable=g-import-not-at-top
    from transformers import SiglipVisionConfig  # pylint: disable=g-import-not-at-top
    torch.manual_seed(3)
    config = Gemma3Config(
        text_config=_hf_config(num_hidden_layers=6, sliding_window_pattern=3,
                               rope_scaling={"rope_type": "linear",
                                             "factor": 2.0}),
        vision_config=SiglipVisionConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, image_size=28, patch_size=14),
        mm_tokens_per_image=4, image_token_index=VOCAB - 1,
        boi_token_index=VOCAB - 2, eoi_token_index=VOCAB - 3)
    cls.ref = Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
      for _, p in cls.ref.named_parameters():
        p.normal_(0.0, 0.15)
    cls.dir = tempfile.mkdtemp()
    cls.ref.save_pretrained(cls.dir)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    super().tearDownClass()

  def test_text_logits_match_the_multimodal_model(self):
    with self.assertWarnsRegex(UserWarning, "language model only"):
      model, cfg = hf.load(self.dir)
    self.assertIsInstance(model, decoder_lib.Decoder)
    self.assertEqual(cfg.num_layers, 6)
    self.assertEqual(cfg.sliding_window, WINDOW)
    self.assertEqual(cfg.rope_scaling["factor"], 2.0)
    ids = np.minimum(_ids(seed=4), VOCAB - 4)  # no image / boi / eoi ids
    want = _hf_logits(self.ref, ids)
    self.assertLess(_max_err(_fwd(model, ids), want), TOL)

  def test_hub_tensor_names_load_the_same(self):
    # The Hub's transformers-4 files: language_model.model.*, vision_tower.*
    import safetensors.numpy as stn  # pylint: disable=g-import-not-at-top
    old = os.path.join(self.dir, "hub")
    os.makedirs(old, exist_ok=True)
    shutil.copy(os.path.join(self.dir, "config.json"), old)
    tensors = stn.load_file(os.path.join(self.dir, "model.safetensors"))
    renamed = {}
    for k, v in tensors.items():
      if k.startswith("model.language_model."):
        k = "language_model.model." + k[len("model.language_model."):]
      elif k.startswith("model."):
        k = k[len("model."):]
      renamed[k] = v
    self.assertIn("language_model.model.embed_tokens.weight", renamed)
    stn.save_file(renamed, os.path.join(old, "model.safetensors"))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      a, _ = hf.load(self.dir)
      b, _ = hf.load(old)
    ids = jnp.asarray(np.minimum(_ids(seed=5), VOCAB - 4))
    np.testing.assert_array_equal(np.asarray(_fwd(a, ids)),
                                  np.asarray(_fwd(b, ids)))
    os.remove(os.path.join(old, "model.safetensors"))
    stn.save_file({"x": np.zeros(2, np.float32)},
                  os.path.join(old, "model.safetensors"))
    with self.assertRaisesRegex(ValueError, "no Gemma 3 language-model"):
      hf.load(old)
