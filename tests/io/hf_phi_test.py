"""Phi (`PhiForCausalLM`, the architecture of Phi-1.5 and of TOFU's
fine-tuned checkpoints) through `jaxlab.io.hf`: logits equal transformers'.

Tiny random checkpoints written by transformers' own `PhiForCausalLM`
(LayerNorm with biases, one input norm feeding attention and MLP in
parallel, partial rotary, biased q/k/v/dense and fc1/fc2, gelu_new, an LM
head bias, optionally LayerNorm q/k norms) load and give transformers'
float32 logits within 2^8 eps(float32) * max|logit|: with and without
padding (left-padded rows, positions counted over real tokens), unrolled
and scanned, decoding greedily through the KV cache, through
`io.pretrained.load`, and after `io.hf.save` (read back by transformers).
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.decoding import sampler
from jaxlab.io import hf
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 96
EPS32 = float(np.finfo(np.float32).eps)
# Phi-1.5's shape in miniature: MHA, rotary on half of each head (0.5, the
# default). Then GQA with LayerNorm q/k norms, rotary on 6 of 8 dims, tied
# embeddings (the LM head bias stays its own), transformers-4 config.json;
# and full rotary.
CONFIGS = {
    "phi15_rotary_half": dict(num_kv_heads=4, partial_rotary_factor=0.5),
    "phi_qk_layernorm_gqa_tied_v4": dict(
        num_kv_heads=2, partial_rotary_factor=0.75, qk_layernorm=True,
        tie_embeddings=True, config_dialect="v4"),
    "phi_full_rotary": dict(num_kv_heads=4, partial_rotary_factor=1.0),
}


def _ids(b=2, t=12, seed=0):
  return np.random.RandomState(seed).randint(0, VOCAB, (b, t)).astype(np.int32)


def _atol(ref):
  return 2 ** 8 * EPS32 * float(np.abs(ref).max())


def setUpModule():
  global ROOT, PATHS, HF_MODELS, CLEANUP
  CLEANUP = hfx.inductor_cleanup()
  ROOT = tempfile.mkdtemp()
  PATHS, HF_MODELS = {}, {}
  for name, kw in CONFIGS.items():
    PATHS[name], HF_MODELS[name] = hfx.make_hf_checkpoint(
        os.path.join(ROOT, name), "phi", return_model=True, seed=3,
        vocab_size=VOCAB, **kw)


def tearDownModule():
  shutil.rmtree(ROOT, ignore_errors=True)
  CLEANUP()


class PhiParityTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_logits_match_transformers(self, name):
    model, cfg = hf.load(PATHS[name])
    kw = CONFIGS[name]
    self.assertEqual((cfg.norm, cfg.parallel_block, cfg.mlp_gated,
                      cfg.mlp_bias, cfg.attn_out_bias, cfg.lm_head_bias,
                      cfg.qkv_bias, cfg.mlp_activation),
                     ("layernorm", True, False, True, True, True, True,
                      "gelu_tanh"))
    self.assertEqual(cfg.partial_rotary_factor, kw["partial_rotary_factor"])
    self.assertEqual(cfg.rotary_dim, int(8 * kw["partial_rotary_factor"]))
    self.assertEqual(cfg.qk_norm, kw.get("qk_layernorm", False))
    self.assertEqual(cfg.num_kv_heads, kw["num_kv_heads"])
    self.assertEqual(cfg.tie_embeddings, kw.get("tie_embeddings", False))
    self.assertEqual(cfg.norm_eps, 1e-6)
    self.assertIsNone(model.layers[0].mlp_norm)
    ids = _ids()
    ref = hfx.hf_logits(HF_MODELS[name], ids)
    out = np.asarray(model(jnp.asarray(ids)))
    chex.assert_shape(out, (2, 12, VOCAB))
    np.testing.assert_allclose(out, ref, rtol=0, atol=_atol(ref))
    # Not degenerate: tokens and positions are distinguishable.
    self.assertGreater(np.abs(ref[:, 1:] - ref[:, :-1]).mean(), 0.1)
    # num_params counts what transformers counts (biases, LayerNorms).
    params = jax.tree.leaves(nnx.state(model, nnx.Param))
    self.assertEqual(sum(x.size for x in params), cfg.num_params())
    self.assertEqual(cfg.num_params(), sum(
        p.numel() for p in HF_MODELS[name].parameters()))

  @parameterized.named_parameters(("unrolled", False), ("scanned", True))
  def test_left_padded_batch_matches_transformers(self, scan):
    """Left padding with positions counted over the real tokens (what
    `generate` does): equal logits at every real token."""
    name = "phi15_rotary_half"
    model, _ = hf.load(PATHS[name], scan_layers=scan)
    ids = _ids(3, 10, seed=2)
    mask = np.ones((3, 10), np.int32)
    mask[1, :4] = 0
    mask[2, :7] = 0
    ref = hfx.hf_forward(HF_MODELS[name], ids, mask,
                         position_ids_bt=hfx.hf_positions(mask)).logits.numpy()
    out = np.asarray(model(jnp.asarray(ids), attention_mask=jnp.asarray(mask)))
    real = mask.astype(bool)
    np.testing.assert_allclose(out[real], ref[real], rtol=0, atol=_atol(ref))
    # The padded rows' real tokens equal the same tokens alone, unpadded.
    alone = np.asarray(model(jnp.asarray(ids[2:, 7:])))
    np.testing.assert_allclose(out[2, 7:], alone[0], rtol=0,
                               atol=_atol(alone))

  def test_greedy_tokens_match_transformers(self):
    """KV-cache decoding (partial rotary on the cached keys) follows
    transformers' greedy `generate`."""
    import torch  # pylint: disable=g-import-not-at-top
    name = "phi_qk_layernorm_gqa_tied_v4"
    model, _ = hf.load(PATHS[name])
    prompt = _ids(1, 6, seed=1)
    ours = sampler.generate(model, [list(prompt[0])], max_new_tokens=10)
    with torch.no_grad():
      ref = HF_MODELS[name].generate(
          torch.tensor(prompt, dtype=torch.long), max_new_tokens=10,
          do_sample=False, pad_token_id=0)
    self.assertEqual(list(ours.tokens[0]), ref[0, 6:].tolist())

  def test_pretrained_load_dispatches_to_phi(self):
    name = "phi15_rotary_half"
    model, cfg = pretrained.load(PATHS[name])
    self.assertTrue(cfg.parallel_block)
    ids = _ids()
    ref = hfx.hf_logits(HF_MODELS[name], ids)
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(ids))), ref,
                               rtol=0, atol=_atol(ref))

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_save_round_trip_through_transformers(self, name):
    model, cfg = hf.load(PATHS[name])
    with tempfile.TemporaryDirectory() as d:
      hf.save(model, cfg, d)
      with open(os.path.join(d, "config.json")) as fh:
        exported = json.load(fh)
      self.assertEqual(exported["architectures"], ["PhiForCausalLM"])
      self.assertEqual(exported["partial_rotary_factor"],
                       cfg.partial_rotary_factor)
      ids = _ids()
      ref = hfx.hf_logits(hfx.load_hf_model(d), ids)
      ours = np.asarray(model(jnp.asarray(ids)))
      np.testing.assert_allclose(ours, ref, rtol=0, atol=_atol(ref))
      back, back_cfg = hf.load(d)
      self.assertEqual(back_cfg, cfg)
      chex.assert_trees_all_equal(nnx.state(back), nnx.state(model))


class PhiConfigTest(absltest.TestCase):

  def _hf(self, **kw):
    c = {"architectures": ["PhiForCausalLM"], "model_type": "phi",
         "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 1, "num_attention_heads": 4}
    c.update(kw)
    return c

  def test_defaults_are_phi_config_defaults(self):
    cfg = hf.config_from_hf(self._hf())
    self.assertEqual((cfg.partial_rotary_factor, cfg.rotary_dim,
                      cfg.norm_eps, cfg.mlp_activation, cfg.num_kv_heads,
                      cfg.tie_embeddings), (0.5, 4, 1e-5, "gelu_tanh", 4,
                                            False))

  def test_partial_rotary_factor_from_either_dialect(self):
    v4 = hf.config_from_hf(self._hf(partial_rotary_factor=0.25,
                                    rope_theta=500.0))
    v5 = hf.config_from_hf(self._hf(rope_parameters={
        "rope_type": "default", "rope_theta": 500.0,
        "partial_rotary_factor": 0.25}))
    self.assertEqual(v4, v5)
    self.assertEqual((v4.rotary_dim, v4.rope_theta), (2, 500.0))

  def test_unsupported_activation_names_the_field(self):
    with self.assertRaisesRegex(ValueError, "hidden_act='relu'"):
      hf.config_from_hf(self._hf(hidden_act="relu"))


if __name__ == "__main__":
  absltest.main()
