"""HF checkpoint import/export: logits parity with transformers, errors."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

from jaxlab.io import hf
from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import rope as rope_lib
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 96  # divisible by the tensor axis of the mesh test
RULES = (("batch", ("data", "fsdp")), ("vocab", "tensor"), ("embed", "fsdp"),
         ("mlp", "tensor"), ("heads", "tensor"), ("kv_heads", "tensor"),
         ("head_dim", None), ("norm", None))

# Five tiny architectures: GQA ratios 2, 1 (MHA), 4; tied and untied;
# Qwen2 qkv bias; rope theta 1e4 / 500 / 1e6; explicit head_dim; sliding
# window; single-file and sharded; both config dialects.
CONFIGS = {
    "llama_gqa2_untied_v5": dict(arch="llama"),
    "llama_mha_tied_sharded_v4": dict(
        arch="llama", num_kv_heads=4, tie_embeddings=True, rope_theta=500.0,
        max_shard_size="20KB", config_dialect="v4"),
    "qwen2_gqa4_bias_sharded_v5": dict(
        arch="qwen2", num_kv_heads=1, rope_theta=1e6, max_shard_size="20KB"),
    "qwen2_tied_headdim16_v4": dict(
        arch="qwen2", tie_embeddings=True, head_dim=16, num_layers=1,
        config_dialect="v4"),
    "qwen2_sliding_window": dict(arch="qwen2", sliding_window=4,
                                 num_layers=1),
}


def _ids(b=2, t=12, seed=0):
  return np.random.RandomState(seed).randint(0, VOCAB, (b, t)).astype(np.int32)


class HfImportParityTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.paths, cls.hf_models = {}, {}
    for name, kw in CONFIGS.items():
      path, model = hfx.make_hf_checkpoint(
          os.path.join(cls.root, name), return_model=True, seed=1,
          vocab_size=VOCAB, **kw)
      cls.paths[name], cls.hf_models[name] = path, model

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_logits_match_transformers(self, name):
    model, cfg = hf.load(self.paths[name])
    ids = _ids()
    ref = hfx.hf_logits(self.hf_models[name], ids)
    out = np.asarray(model(jnp.asarray(ids)))
    chex.assert_shape(out, (2, 12, VOCAB))
    self.assertLess(np.abs(out - ref).max(), 1e-4)
    # Logits are not degenerate: tokens and positions are distinguishable.
    self.assertGreater(np.abs(ref).max(), 1.0)
    self.assertGreater(np.abs(ref[:, 1:] - ref[:, :-1]).mean(), 0.1)
    kw = CONFIGS[name]
    self.assertEqual(cfg.tie_embeddings, kw.get("tie_embeddings", False))
    self.assertEqual(cfg.qkv_bias, kw["arch"] == "qwen2")
    self.assertEqual(cfg.rope_theta, kw.get("rope_theta", 10000.0))
    self.assertEqual(cfg.num_kv_heads, kw.get("num_kv_heads", 2))
    self.assertEqual(cfg.sliding_window, kw.get("sliding_window"))
    self.assertEqual(model.lm_head_dv is None, cfg.tie_embeddings)

  @parameterized.named_parameters(("unrolled", False), ("scanned", True))
  def test_hidden_states_match_transformers(self, scan):
    """All L + 1 `hidden_states` equal transformers' `output_hidden_states`
    with `final_norm_hidden=True` (the last one after the final norm); by
    default only the last differs: it is the stream before the norm."""
    import torch  # pylint: disable=g-import-not-at-top
    name = "llama_gqa2_untied_v5"
    model, cfg = hf.load(self.paths[name], scan_layers=scan)
    ids = _ids()
    with torch.no_grad():
      ref = self.hf_models[name](input_ids=torch.as_tensor(ids).long(),
                                 output_hidden_states=True)
    want = [h.numpy() for h in ref.hidden_states]
    self.assertLen(want, cfg.num_layers + 1)
    out = model.forward(jnp.asarray(ids), output_hidden_states=True,
                        final_norm_hidden=True)
    self.assertLen(out.hidden_states, cfg.num_layers + 1)
    # fp32: the residual stream (entries of size ~1-10 after 2 layers with
    # std-0.2 weights) carries ~1e-6 relative rounding per op.
    for i, (got, ref_h) in enumerate(zip(out.hidden_states, want)):
      np.testing.assert_allclose(np.asarray(got), ref_h, rtol=1e-5,
                                 atol=1e-5, err_msg=f"hidden_states[{i}]")
    np.testing.assert_allclose(np.asarray(out.logits), ref.logits.numpy(),
                               atol=1e-4)
    np.testing.assert_allclose(model.lm_head(out.hidden_states[-1]),
                               out.logits, atol=1e-6)
    plain = model.forward(jnp.asarray(ids), output_hidden_states=True)
    for a, b in zip(plain.hidden_states[:-1], out.hidden_states[:-1]):
      np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(model.final_norm(plain.hidden_states[-1]),
                               want[-1], rtol=1e-5, atol=1e-5)
    self.assertGreater(np.abs(np.asarray(plain.hidden_states[-1])
                              - want[-1]).max(), 0.1)
    np.testing.assert_array_equal(plain.logits, out.logits)

  def test_load_tensors_from_a_state_dict(self):
    """`hf.load_tensors` fills a model from a name -> array callback (here
    transformers' in-memory state dict) to the same logits."""
    name = "llama_mha_tied_sharded_v4"
    hf_model = self.hf_models[name]
    _, cfg = hf.load(self.paths[name])
    state = {k: v.numpy() for k, v in hf_model.state_dict().items()}
    asked = []

    def get(tensor, shape):
      asked.append(tensor)
      self.assertEqual(state[tensor].shape, shape)
      return state[tensor]

    model = hf.load_tensors(cfg, get)
    self.assertCountEqual(asked, hf.tensor_shapes(cfg))
    ids = _ids()
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(ids))),
                               hfx.hf_logits(hf_model, ids), atol=1e-4)
    with self.assertRaisesRegex(ValueError, "model.norm.weight.*shape"):
      hf.load_tensors(cfg, lambda n, shape: (
          state[n][:-1] if n == "model.norm.weight" else state[n]))

  def test_sharded_checkpoint_really_sharded(self):
    path = self.paths["qwen2_gqa4_bias_sharded_v5"]
    self.assertTrue(os.path.exists(os.path.join(path, hf.INDEX_FILE)))
    with open(os.path.join(path, hf.INDEX_FILE)) as fh:
      shards = set(json.load(fh)["weight_map"].values())
    self.assertGreater(len(shards), 1)
    with open(os.path.join(self.paths["llama_mha_tied_sharded_v4"],
                           "config.json")) as fh:
      v4 = json.load(fh)
    self.assertNotIn("rope_parameters", v4)
    self.assertEqual(v4["rope_theta"], 500.0)

  def test_param_dtype_and_bf16_compute(self):
    path = self.paths["llama_gqa2_untied_v5"]
    model, cfg = hf.load(path, dtype="bfloat16", param_dtype="float32")
    self.assertEqual(model.embed_vd[...].dtype, jnp.float32)
    self.assertEqual(cfg.dtype, "bfloat16")
    model16, _ = hf.load(path, dtype="bfloat16")
    self.assertEqual(model16.layers[0].attn.q_dnh[...].dtype, jnp.bfloat16)
    ids = _ids()
    ref = hfx.hf_logits(self.hf_models["llama_gqa2_untied_v5"], ids)
    # bf16 has ~3 significant digits; logits of size ~4 land within 0.25.
    for m in (model, model16):
      err = np.abs(np.asarray(m(jnp.asarray(ids))) - ref).max()
      self.assertLess(err, 0.25)
      self.assertGreater(err, 1e-5)  # really computed in bf16

  def test_sharded_load_on_mesh_matches(self):
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    path = self.paths["qwen2_gqa4_bias_sharded_v5"]
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    model, _ = hf.load(path, mesh=mesh, rules=RULES)
    q = model.layers[0].attn.q_dnh[...]
    self.assertEqual(q.sharding.spec, jax.sharding.PartitionSpec(
        "fsdp", "tensor", None))
    # One KV head does not split over tensor=2: replicated on that dim.
    k_bias = model.layers[0].attn.k_bias_kh[...]
    self.assertEqual(k_bias.sharding.spec, jax.sharding.PartitionSpec(
        None, None))
    ids = _ids(b=4)
    ref = hfx.hf_logits(self.hf_models["qwen2_gqa4_bias_sharded_v5"], ids)
    with jax.set_mesh(mesh):
      out = np.asarray(jax.jit(lambda m, x: m(x))(model, jnp.asarray(ids)))
    self.assertLess(np.abs(out - ref).max(), 1e-4)


class HfBf16Test(absltest.TestCase):

  def test_bf16_checkpoint_loads(self):
    with tempfile.TemporaryDirectory() as d:
      path = hfx.make_hf_checkpoint(d, "qwen2", dtype="bfloat16", seed=3,
                                     vocab_size=VOCAB)
      with open(os.path.join(path, "config.json")) as fh:
        self.assertEqual(json.load(fh)["dtype"], "bfloat16")
      model, _ = hf.load(path)  # bf16 on disk, fp32 in memory
      self.assertEqual(model.embed_vd[...].dtype, jnp.float32)
      ref_model = hfx.load_hf_model(path)  # bf16 weights upcast to fp32
      ids = _ids()
      self.assertLess(np.abs(np.asarray(model(jnp.asarray(ids)))
                             - hfx.hf_logits(ref_model, ids)).max(), 1e-4)
      emb = ref_model.model.embed_tokens.weight.detach().numpy()
      np.testing.assert_array_equal(np.asarray(model.embed_vd[...]), emb)
      # bf16 params export as bf16 and re-import bit-exactly.
      model16, cfg16 = hf.load(path, dtype="bfloat16")
      out_dir = os.path.join(d, "export")
      hf.save(model16, cfg16, out_dir)
      with safe_open(os.path.join(out_dir, "model.safetensors"),
                     framework="numpy") as fh:
        self.assertEqual(
            fh.get_slice("model.embed_tokens.weight").get_dtype(), "BF16")
      back, _ = hf.load(out_dir, dtype="bfloat16")
      chex.assert_trees_all_equal(nnx.state(back), nnx.state(model16))


class HfConfigTest(parameterized.TestCase):

  def _base(self, **kw):
    hf_cfg = dict(architectures=["LlamaForCausalLM"], vocab_size=64,
                  hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=4096)
    hf_cfg.update(kw)
    return hf_cfg

  @parameterized.named_parameters(
      ("linear", "linear", "pi", {"factor": 4.0}, {"factor": 4.0,
                                                    "original_max_position":
                                                        4096}),
      ("dynamic", "dynamic", "dynamic_ntk", {"factor": 2.0},
       {"factor": 2.0, "original_max_position": 4096}),
      ("yarn", "yarn", "yarn",
       {"factor": 4.0, "original_max_position_embeddings": 1024,
        "beta_fast": 16, "beta_slow": 2, "attention_factor": 1.5,
        "mscale": 0.7, "mscale_all_dim": 0.5, "truncate": False},
       {"factor": 4.0, "original_max_position": 1024, "beta_fast": 16,
        "beta_slow": 2, "attention_factor": 1.5, "mscale": 0.7,
        "mscale_all_dim": 0.5, "truncate": False}),
      ("llama3", "llama3", "llama3",
       {"factor": 8.0, "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0},
       {"factor": 8.0, "original_max_position": 8192, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0}),
  )
  def test_rope_scaling_both_dialects(self, hf_type, method, params,
                                      expected):
    v5 = self._base(rope_parameters={"rope_type": hf_type,
                                     "rope_theta": 5e5, **params})
    v4_type = self._base(rope_theta=5e5,
                         rope_scaling={"type": hf_type, **params})
    v4_rope_type = self._base(rope_theta=5e5,
                              rope_scaling={"rope_type": hf_type, **params})
    for hf_cfg in (v5, v4_type, v4_rope_type):
      cfg = hf.config_from_hf(hf_cfg)
      self.assertEqual(cfg.rope_theta, 5e5)
      self.assertEqual(dict(cfg.rope_scaling), {"method": method, **expected})
    if method not in rope_lib.available():
      self.skipTest(f"RoPE method {method!r} not registered yet in "
                    "jaxlab.nn.rope; mapping checked, tables not")
    inv, _ = cfg.rope_tables()
    self.assertEqual(inv.shape, (4,))

  def test_default_rope_and_fields(self):
    for hf_cfg in (self._base(rope_theta=123.0, rope_scaling=None),
                   self._base(rope_parameters={"rope_type": "default",
                                               "rope_theta": 123.0})):
      cfg = hf.config_from_hf(hf_cfg, dtype="bfloat16", remat=True)
      self.assertIsNone(cfg.rope_scaling)
      self.assertEqual(cfg.rope_theta, 123.0)
      self.assertEqual((cfg.dim, cfg.num_heads, cfg.num_kv_heads,
                        cfg.resolved_head_dim, cfg.mlp_dim),
                       (32, 4, 2, 8, 64))
      self.assertEqual((cfg.dtype, cfg.param_dtype, cfg.remat),
                       ("bfloat16", "bfloat16", True))

  def test_yarn_factor_fallback(self):
    cfg = hf.config_from_hf(self._base(rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e4,
        "original_max_position_embeddings": 1024}))
    self.assertEqual(cfg.rope_scaling["factor"], 4.0)

  def test_unsupported_fields(self):
    with self.assertRaisesRegex(ValueError, "LongRope|longrope"):
      hf.config_from_hf(self._base(rope_scaling={"type": "longrope"}))
    with self.assertRaisesRegex(ValueError, "hidden_act"):
      hf.config_from_hf(self._base(hidden_act="gelu"))
    with self.assertRaisesRegex(ValueError, "sliding window on only some"):
      hf.config_from_hf(self._base(
          architectures=["Qwen2ForCausalLM"], num_hidden_layers=2,
          use_sliding_window=True, sliding_window=8, max_window_layers=1))
    with self.assertRaisesRegex(ValueError, "intermediate_size"):
      hf.config_from_hf({k: v for k, v in self._base().items()
                         if k != "intermediate_size"})


class HfErrorsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

  def _ckpt(self, **kw):
    return hfx.make_hf_checkpoint(os.path.join(self.dir, "ckpt"),
                                  num_layers=1, **kw)

  def _edit_config(self, path, **fields):
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as fh:
      c = json.load(fh)
    c.update(fields)
    with open(cfg_path, "w") as fh:
      json.dump(c, fh)

  def test_unsupported_architecture(self):
    path = self._ckpt()
    self._edit_config(path, architectures=["GemmaForCausalLM"],
                      model_type="gemma")
    with self.assertRaisesRegex(
        ValueError, r"config\.json.*GemmaForCausalLM.*supported: "
        r"LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
        r"MistralForCausalLM"):
      hf.load(path)

  def test_missing_shard(self):
    path = self._ckpt(max_shard_size="10KB")
    with open(os.path.join(path, hf.INDEX_FILE)) as fh:
      shard = sorted(set(json.load(fh)["weight_map"].values()))[-1]
    os.remove(os.path.join(path, shard))
    with self.assertRaisesRegex(FileNotFoundError, shard):
      hf.load(path)

  def test_shape_mismatch(self):
    path = self._ckpt()
    self._edit_config(path, intermediate_size=48)
    with self.assertRaisesRegex(
        ValueError, r"model\.safetensors: tensor "
        r"'model\.layers\.0\.mlp\.(gate|up|down)_proj\.weight' has shape "
        r"\((64, 32|32, 64)\), expected \((48, 32|32, 48)\)"):
      hf.load(path)

  def test_missing_tensor(self):
    path = self._ckpt(tie_embeddings=True)
    self._edit_config(path, tie_word_embeddings=False)
    with self.assertRaisesRegex(ValueError, "missing tensor 'lm_head.weight'"):
      hf.load(path)

  def test_missing_config_and_weights(self):
    with self.assertRaisesRegex(FileNotFoundError, "config.json"):
      hf.load(self.dir)
    with open(os.path.join(self.dir, "config.json"), "w") as fh:
      json.dump({"architectures": ["LlamaForCausalLM"]}, fh)
    with self.assertRaisesRegex(ValueError, "missing required field"):
      hf.load(self.dir)
    path = self._ckpt()
    os.remove(os.path.join(path, "model.safetensors"))
    with self.assertRaisesRegex(FileNotFoundError, "model.safetensors"):
      hf.load(path)


class HfExportTest(absltest.TestCase):

  def test_round_trip_through_transformers(self):
    cfg = decoder_lib.DecoderConfig(
        vocab_size=VOCAB, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
        mlp_dim=64, qkv_bias=True, rope_theta=2000.0, init_std=0.2)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(7))
    # Non-trivial biases and norm scales so a dropped one shows.
    for blk in model.layers:
      for seed, name in enumerate(("q_bias_nh", "k_bias_kh", "v_bias_kh")):
        b = getattr(blk.attn, name)
        b[...] = jax.random.normal(jax.random.key(seed), b.shape) * 0.3
      blk.mlp_norm.scale[...] = blk.mlp_norm.scale[...] * 1.3
    with tempfile.TemporaryDirectory() as d:
      hf.save(model, cfg, d)
      with open(os.path.join(d, "config.json")) as fh:
        exported = json.load(fh)
      self.assertEqual(exported["architectures"], ["Qwen2ForCausalLM"])
      self.assertEqual(exported["rope_theta"], 2000.0)
      ids = _ids()
      ours = np.asarray(model(jnp.asarray(ids)))
      ref = hfx.hf_logits(hfx.load_hf_model(d), ids)
      self.assertLess(np.abs(ours - ref).max(), 1e-4)
      back, back_cfg = hf.load(d)
      self.assertEqual(back_cfg.replace(init_std=cfg.init_std, head_dim=None),
                       cfg)
      chex.assert_trees_all_equal(nnx.state(back), nnx.state(model))

  def test_export_rejects_bidirectional(self):
    cfg = decoder_lib.DecoderConfig(vocab_size=16, dim=16, num_layers=1,
                                    num_heads=2, num_kv_heads=1, mlp_dim=32,
                                    causal=False)
    with self.assertRaisesRegex(ValueError, "causal=False"):
      hf.config_to_hf(cfg)


class NoTorchImportTest(absltest.TestCase):

  def test_load_does_not_import_torch(self):
    with tempfile.TemporaryDirectory() as d:
      path = hfx.make_hf_checkpoint(d, "qwen2", num_layers=1,
                                    max_shard_size="10KB")
      code = (
          "import sys\n"
          "from jaxlab.io import hf\n"
          f"model, cfg = hf.load({path!r})\n"
          "import numpy as np\n"
          "assert model(np.zeros((1, 3), np.int32)).shape == (1, 3, 97)\n"
          "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
          "assert not bad, bad\n"
          "print('NO_TORCH_OK')\n")
      env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
      proc = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=300,
                            check=False)
      self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
      self.assertIn("NO_TORCH_OK", proc.stdout)


if __name__ == "__main__":
  absltest.main()
