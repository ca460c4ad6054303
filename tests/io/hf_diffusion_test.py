"""Import of diffusion-LM checkpoints (Dream, LLaDA) through jaxlab.io.hf.

Dream: a transformers Qwen2 checkpoint relabelled `DreamModel` (Dream is
Qwen2 with full attention); the reference is transformers' Qwen2 run with an
all-allowed 4D mask. LLaDA: a jaxlab model's tensors written under LLaDA's
own names and config fields (the table below is written from LLaDA's
`modeling_llada.py`, independently of jaxlab.io.hf).
"""

import json
import os
import tempfile

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import safetensors.numpy

from jaxlab.io import hf
from jaxlab.testing import diffusion_fixtures
from jaxlab.testing import hf_fixtures
from jaxlab.testing import tiny_models

IDS = np.array([[3, 17, 5, 60, 9, 1, 30, 44], [11, 2, 7, 7, 8, 50, 61, 0]])


class DreamImportTest(absltest.TestCase):

  def test_dream_matches_bidirectional_qwen2(self):
    import torch  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory() as tmp:
      path, ref = hf_fixtures.make_hf_checkpoint(
          tmp, "qwen2", vocab_size=64, return_model=True)
      with open(os.path.join(path, "config.json")) as fh:
        cfg_json = json.load(fh)
      cfg_json.update(architectures=["DreamModel"], model_type="Dream",
                      mask_token_id=63, eos_token_id=2)
      with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(cfg_json, fh)
      model, cfg = hf.load(path)
      tokens = hf.diffusion_tokens(path)
    self.assertFalse(cfg.causal)
    self.assertTrue(cfg.qkv_bias)
    self.assertEqual(tokens, {"mask_id": 63, "eos_id": 2,
                              "shift_logits": True})
    b, t = IDS.shape
    with torch.no_grad():
      want = ref(input_ids=torch.as_tensor(IDS),
                 attention_mask=torch.zeros(b, 1, t, t)).logits.numpy()
    got = np.asarray(model(jnp.asarray(IDS)))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    # Bidirectional: the first position sees the future (differs from causal).
    causal = np.asarray(model(jnp.asarray(IDS), causal=True))
    self.assertGreater(np.abs(causal[:, 0] - got[:, 0]).max(), 1e-3)


# LLaDA's tensor names (modeling_llada.py) per HF Llama name: the shared
# fixture's table.
_llada_name = diffusion_fixtures.llada_name


class LLaDAImportTest(absltest.TestCase):

  def test_llada_names_and_config(self):
    src = tiny_models.tiny_decoder(1, causal=False, vocab_size=64)
    c = src.cfg
    with tempfile.TemporaryDirectory() as tmp:
      llama_dir = os.path.join(tmp, "llama")
      hf.save(tiny_models.tiny_decoder(1, vocab_size=64), c.replace(
          causal=True), llama_dir)
      tensors = safetensors.numpy.load_file(
          os.path.join(llama_dir, "model.safetensors"))
      llada_dir = os.path.join(tmp, "llada")
      os.makedirs(llada_dir)
      safetensors.numpy.save_file(
          {_llada_name(k): v for k, v in tensors.items()},
          os.path.join(llada_dir, "model.safetensors"))
      llada_cfg = {
          "architectures": ["LLaDAModelLM"], "model_type": "llada",
          "d_model": c.dim, "n_heads": c.num_heads,
          "n_kv_heads": c.num_kv_heads, "n_layers": c.num_layers,
          "mlp_hidden_size": c.mlp_dim, "vocab_size": 60,
          "embedding_size": c.vocab_size, "rope_theta": c.rope_theta,
          "rms_norm_eps": c.norm_eps, "max_sequence_length": 128,
          "weight_tying": False, "block_type": "llama",
          "layer_norm_type": "rms", "include_bias": False,
          "activation_type": "silu", "mask_token_id": 63,
          "eos_token_id": 2}
      with open(os.path.join(llada_dir, "config.json"), "w") as fh:
        json.dump(llada_cfg, fh)
      model, cfg = hf.load(llada_dir)
      tokens = hf.diffusion_tokens(llada_dir)
      with open(os.path.join(llada_dir, "config.json"), "w") as fh:
        json.dump({**llada_cfg, "block_type": "sequential"}, fh)
      with self.assertRaisesRegex(ValueError, "block_type='sequential'"):
        hf.load(llada_dir)
    self.assertFalse(cfg.causal)
    self.assertEqual((cfg.vocab_size, cfg.max_position_embeddings), (64, 128))
    self.assertEqual(tokens, {"mask_id": 63, "eos_id": 2,
                              "shift_logits": False})
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(IDS))),
                               np.asarray(src(jnp.asarray(IDS))),
                               rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
