"""Qwen3 and Mistral checkpoints: logits and greedy tokens equal transformers'.

Also the file-level errors a real download can produce (a truncated
safetensors file, a malformed config.json, a mixture-of-experts config), each
naming the file.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.decoding import sampler
from jaxlab.io import hf
from jaxlab.models import decoder as decoder_lib
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 96
# Qwen3: head_dim (16) independent of hidden_size / heads (32 / 4 = 8), GQA;
# Mistral: Llama weights with a window of 4 on every layer (prompts longer
# than the window, so a missing window would change the logits).
CONFIGS = {
    "qwen3_headdim16_gqa2": dict(arch="qwen3", head_dim=16),
    "qwen3_tied_sharded": dict(arch="qwen3", tie_embeddings=True, head_dim=8,
                               num_kv_heads=1, max_shard_size="20KB"),
    "mistral_window4": dict(arch="mistral", sliding_window=4),
    "mistral_no_window_v4": dict(arch="mistral", config_dialect="v4"),
}


def _ids(b=2, t=12, seed=0):
  return np.random.RandomState(seed).randint(0, VOCAB, (b, t)).astype(np.int32)


def setUpModule():
  global ROOT, PATHS, HF_MODELS
  ROOT = tempfile.mkdtemp()
  PATHS, HF_MODELS = {}, {}
  for name, kw in CONFIGS.items():
    PATHS[name], HF_MODELS[name] = hfx.make_hf_checkpoint(
        os.path.join(ROOT, name), return_model=True, seed=3, vocab_size=VOCAB,
        **kw)


def tearDownModule():
  shutil.rmtree(ROOT, ignore_errors=True)


class ParityTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_logits_match_transformers(self, name):
    model, cfg = hf.load(PATHS[name])
    kw = CONFIGS[name]
    self.assertEqual(cfg.qk_norm, kw["arch"] == "qwen3")
    self.assertFalse(cfg.qkv_bias)
    self.assertEqual(cfg.sliding_window, kw.get("sliding_window"))
    self.assertEqual(cfg.resolved_head_dim, kw.get("head_dim", 8))
    ids = _ids()
    ref = hfx.hf_logits(HF_MODELS[name], ids)
    out = np.asarray(model(jnp.asarray(ids)))
    self.assertLess(np.abs(out - ref).max(), 1e-4)
    self.assertGreater(np.abs(ref[:, 1:] - ref[:, :-1]).mean(), 0.1)

  def test_qk_norm_scales_are_loaded(self):
    model, _ = hf.load(PATHS["qwen3_headdim16_gqa2"])
    ref = HF_MODELS["qwen3_headdim16_gqa2"].model.layers[1].self_attn
    np.testing.assert_allclose(np.asarray(model.layers[1].attn.k_norm.scale),
                               ref.k_norm.weight.detach().numpy())

  @parameterized.parameters("qwen3_headdim16_gqa2", "mistral_window4")
  def test_greedy_tokens_match_transformers(self, name):
    import torch  # pylint: disable=g-import-not-at-top
    model, _ = hf.load(PATHS[name])
    prompt = _ids(1, 6, seed=1)
    ours = sampler.generate(model, [list(prompt[0])], max_new_tokens=10)
    with torch.no_grad():
      ref = HF_MODELS[name].generate(
          torch.tensor(prompt, dtype=torch.long), max_new_tokens=10,
          do_sample=False, pad_token_id=0)
    self.assertEqual(list(ours.tokens[0]), ref[0, 6:].tolist())

  @parameterized.parameters(
      dict(qk_norm=True, sliding_window=None, arch="Qwen3ForCausalLM"),
      dict(qk_norm=False, sliding_window=3, arch="MistralForCausalLM"))
  def test_export_round_trip(self, qk_norm, sliding_window, arch):
    cfg = decoder_lib.DecoderConfig(
        vocab_size=VOCAB, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=16, mlp_dim=64, qk_norm=qk_norm,
        sliding_window=sliding_window, init_std=0.2)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(5))
    if qk_norm:
      for i, blk in enumerate(model.layers):
        blk.attn.q_norm.scale[...] = 1 + 0.2 * jax.random.normal(
            jax.random.key(i), blk.attn.q_norm.scale.shape)
    with tempfile.TemporaryDirectory() as d:
      hf.save(model, cfg, d)
      with open(os.path.join(d, "config.json")) as fh:
        self.assertEqual(json.load(fh)["architectures"], [arch])
      ids = _ids(1, 10)
      ref = hfx.hf_logits(hfx.load_hf_model(d), ids)
      ours = np.asarray(model(jnp.asarray(ids)))
      self.assertLess(np.abs(ours - ref).max(), 1e-4)


class FileErrorsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
    self.path = os.path.join(self.dir, "ckpt")
    shutil.copytree(PATHS["mistral_window4"], self.path)

  def test_truncated_safetensors_names_the_file(self):
    file = os.path.join(self.path, "model.safetensors")
    size = os.path.getsize(file)
    with open(file, "r+b") as fh:
      fh.truncate(size // 2)
    with self.assertRaisesRegex(ValueError, f"{file}: .*truncated|{file}: "
                                "not a readable safetensors file"):
      hf.load(self.path)

  def test_malformed_config_names_the_file(self):
    file = os.path.join(self.path, "config.json")
    with open(file, "w") as fh:
      fh.write('{"architectures": ["MistralForCausalLM"],')
    with self.assertRaisesRegex(ValueError, f"{file}: not valid JSON"):
      hf.load(self.path)

  def test_mixture_of_experts_names_the_field(self):
    file = os.path.join(self.path, "config.json")
    with open(file) as fh:
      c = json.load(fh)
    c["num_local_experts"] = 8
    with open(file, "w") as fh:
      json.dump(c, fh)
    with self.assertRaisesRegex(ValueError, "num_local_experts=8 "
                                r"\(mixture-of-experts layers\)"):
      hf.load(self.path)

  def test_per_layer_sliding_window_is_refused(self):
    file = os.path.join(self.path, "config.json")
    with open(file) as fh:
      c = json.load(fh)
    c["layer_types"] = ["full_attention", "sliding_attention"]
    with open(file, "w") as fh:
      json.dump(c, fh)
    with self.assertRaisesRegex(ValueError, "per-layer sliding windows"):
      hf.load(self.path)


if __name__ == "__main__":
  absltest.main()
