"""Gemma 3 GGUF import: parity with transformers and its own GGUF loader.

Tiny random `Gemma3ForCausalLM` models are written as GGUF files the way
llama.cpp's converter (`convert_hf_to_gguf.py`, `Gemma3Model`) writes them:
`general.architecture = gemma3`, tensor names from gguf-py's own
`get_tensor_name_map(MODEL_ARCH.GEMMA3)` (not jaxlab's table), every
`*norm.weight` stored as 1 + w, the embedding trimmed to the vocabulary,
no `output.weight` when tied, `gemma3.attention.sliding_window`,
`gemma3.rope.freq_base` of the global layers and `final_logit_softcapping`
when set, and a Gemma sentencepiece vocabulary (byte fallback, control
tokens, a run-of-spaces token, a chat template). What llama.cpp fixes
rather than stores (every 6th layer global, local RoPE base 10000,
query_pre_attn_scalar = head_dim) is what the source models use.

Checked: jaxlab's `gguf.load` gives the source model's logits and the
`DecoderConfig` `hf.load` gives for its safetensors checkpoint; transformers'
own GGUF loader (`from_pretrained(dir, gguf_file=...)`) gives the same
logits as jaxlab on the F32 file and on a Q8_0 one; the tokenizer equals
transformers' GGUF tokenizer; `to_hf` writes a checkpoint transformers
reads back.

Tolerance: logits of magnitude ~1-3 through 6-7 blocks of float32 sums over
at most 512 terms (q/k/v width 2 x 256); the two implementations' rounding
orders differ by O(eps * depth * sqrt(terms)) ~ 1e-5; 1e-4 leaves room and
is far below the 1e-2+ a wrong norm offset, window or scale causes.
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

from jaxlab.io import gguf as gguf_io
from jaxlab.io import hf
from jaxlab.testing import hf_fixtures as hfx

try:
  import gguf  # pylint: disable=g-import-not-at-top
except ImportError:
  gguf = None
try:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
except ImportError:
  torch = transformers = None
HAVE_ACCELERATE = importlib.util.find_spec("accelerate") is not None

TOL = 1e-4
T = 12  # > WINDOW: the sliding layers drop keys
WINDOW = 4

# -- a Gemma-style sentencepiece vocabulary ------------------------------------

_CONTROL, _UNKNOWN, _NORMAL, _BYTE = 3, 2, 1, 6
_SPECIALS = [("<pad>", _CONTROL), ("<eos>", _CONTROL), ("<bos>", _CONTROL),
             ("<unk>", _UNKNOWN), ("<mask>", _CONTROL),
             ("<start_of_turn>", _CONTROL),
             ("<end_of_turn>", _CONTROL)]
_PIECES = (["\u2581"] + list("abcdefghijklmnopqrstuvwxyz,.!?'") + [
    "  ", "th", "he", "in", "er", "an", "\u2581t", "\u2581a", "\u2581th",
    "\u2581the", "\u2581in", "\u2581an", "\u2581and", "re", "on", "at",
    "\u2581w", "\u2581wh", "\u2581what", "\u2581is", "\u2581he", "ll",
    "\u2581he" + "llo", "\u2581s", "ea", "\u2581sea"])
TOKENS = ([t for t, _ in _SPECIALS]
          + [f"<0x{b:02X}>" for b in range(256)] + _PIECES)
TOKEN_TYPES = ([k for _, k in _SPECIALS] + [_BYTE] * 256
               + [_NORMAL] * len(_PIECES))
VOCAB = len(TOKENS)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")

# name -> Gemma3TextConfig fields. What a GGUF states is free; the rest
# follows llama.cpp's fixed Gemma 3 rules.
CONFIGS = {
    # The transformers-parity model: query_pre_attn_scalar = head_dim = 256
    # (transformers' GGUF loader keeps its default 256), layers S S S S S F.
    "tied_headdim256": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=6,
        num_attention_heads=2, num_key_value_heads=1, head_dim=256,
        query_pre_attn_scalar=256, rope_theta=1e6),
    # Untied head, final soft-capping, linear RoPE scaling on the global
    # layers and 7 layers (S S S S S F S: the pattern wraps).
    "untied_softcap_scaled": dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=7,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        query_pre_attn_scalar=16, rope_theta=5e5,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        final_logit_softcapping=2.5, tie_word_embeddings=False,
        rms_norm_eps=1e-5),
}


def _hf_model(seed, **kw):
  """A random float32 `Gemma3ForCausalLM`; every weight (norms included)
  drawn at random, so a missing (1 + w) offset changes the logits."""
  base = dict(vocab_size=VOCAB, sliding_window=WINDOW,
              sliding_window_pattern=gguf_io.GEMMA3_SWA_PATTERN,
              rope_local_base_freq=gguf_io.GEMMA3_SWA_ROPE_BASE,
              max_position_embeddings=128, rms_norm_eps=1e-6,
              attn_implementation="eager", pad_token_id=0, bos_token_id=2,
              eos_token_id=1)
  base.update(kw)
  torch.manual_seed(seed)
  model = transformers.Gemma3ForCausalLM(
      transformers.Gemma3TextConfig(**base)).eval()
  with torch.no_grad():
    for _, p in model.named_parameters():
      p.normal_(0.0, 0.15)
  return model


def write_gemma3_gguf(path: str, model, *, quant: str | None = None) -> str:
  """`model` as llama.cpp's `convert_hf_to_gguf.py` writes a Gemma 3."""
  cfg = model.config
  full = cfg.rope_parameters["full_attention"]
  w = gguf.GGUFWriter(path, "gemma3")
  w.add_block_count(cfg.num_hidden_layers)
  w.add_context_length(cfg.max_position_embeddings)
  w.add_embedding_length(cfg.hidden_size)
  w.add_feed_forward_length(cfg.intermediate_size)
  w.add_head_count(cfg.num_attention_heads)
  w.add_head_count_kv(cfg.num_key_value_heads)
  w.add_key_length(cfg.head_dim)
  w.add_value_length(cfg.head_dim)
  w.add_rope_freq_base(float(full["rope_theta"]))
  if full.get("rope_type", "default") == "linear":
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(float(full["factor"]))
  w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
  w.add_sliding_window(cfg.sliding_window)
  if cfg.final_logit_softcapping:
    w.add_final_logit_softcapping(cfg.final_logit_softcapping)
  # The vocabulary (llama.cpp's `_set_vocab_sentencepiece`).
  w.add_tokenizer_model("llama")
  w.add_token_list(TOKENS)
  w.add_token_scores([-float(i) for i in range(VOCAB)])
  w.add_token_types(TOKEN_TYPES)
  w.add_bos_token_id(2)
  w.add_eos_token_id(1)
  w.add_unk_token_id(3)
  w.add_pad_token_id(0)
  w.add_add_bos_token(True)
  w.add_add_eos_token(False)
  w.add_add_space_prefix(False)
  w.add_chat_template(CHAT_TEMPLATE)
  names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3,
                                   cfg.num_hidden_layers)
  for name, p in model.state_dict().items():
    if name == "lm_head.weight" and cfg.tie_word_embeddings:
      continue
    x = p.detach().numpy().astype(np.float32)
    if name.endswith("norm.weight"):
      x = x + np.float32(1.0)  # Gemma3RMSNorm's (1 + w), stored added
    g = names.get_name(name, try_suffixes=(".weight", ".bias"))
    assert g is not None, name
    if quant and x.ndim == 2:
      qt = gguf.GGMLQuantizationType[quant]
      w.add_tensor(g, gguf.quants.quantize(x, qt), raw_dtype=qt)
    else:
      w.add_tensor(g, x)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def _ids(b=2, t=T, seed=0):
  return np.random.RandomState(seed).randint(0, VOCAB, (b, t)).astype(np.int32)


def _err(a, b):
  return float(np.abs(np.asarray(a) - np.asarray(b)).max())


@absltest.skipIf(gguf is None, "the gguf package is not installed")
@absltest.skipIf(transformers is None, "needs torch + transformers")
class Gemma3GGUFTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hfx.inductor_cleanup()
    cls.root = tempfile.mkdtemp()
    cls.models, cls.files, cls.dirs = {}, {}, {}
    for i, (name, kw) in enumerate(CONFIGS.items()):
      cls.models[name] = _hf_model(20 + i, **kw)
      d = os.path.join(cls.root, name)
      os.makedirs(d)
      cls.files[name] = write_gemma3_gguf(
          os.path.join(d, "model.gguf"), cls.models[name])
      cls.dirs[name] = os.path.join(cls.root, name + "_hf")
      cls.models[name].save_pretrained(cls.dirs[name])

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_logits_match_source_model(self, name):
    model, _ = gguf_io.load(self.files[name])
    ids = _ids()
    ref = hfx.hf_logits(self.models[name], ids)
    out = np.asarray(model(jnp.asarray(ids)))
    self.assertLess(_err(out, ref), TOL)
    self.assertGreater(np.abs(ref[:, 1:] - ref[:, :-1]).mean(), 0.1)

  @parameterized.named_parameters(*[(n, n) for n in CONFIGS])
  def test_config_equals_hf_load_of_the_safetensors(self, name):
    from_gguf = gguf_io.load_config(self.files[name])
    with open(os.path.join(self.dirs[name], "config.json")) as fh:
      from_hf = hf.config_from_hf(json.load(fh))
    self.assertEqual(dataclasses.asdict(from_gguf),
                     dataclasses.asdict(from_hf))
    kw = CONFIGS[name]
    layers = kw["num_hidden_layers"]
    self.assertEqual(from_gguf.layer_types, tuple(
        "full_attention" if i % 6 == 5 else "sliding_attention"
        for i in range(layers)))
    self.assertEqual(from_gguf.sliding_window, WINDOW)
    self.assertEqual((from_gguf.rope_theta, from_gguf.sliding_rope_theta),
                     (kw["rope_theta"], 1e4))
    self.assertTrue(from_gguf.post_norms and from_gguf.norm_plus_one
                    and from_gguf.qk_norm and from_gguf.embed_scale)
    self.assertAlmostEqual(from_gguf.attn_scale, kw["head_dim"] ** -0.5)
    self.assertEqual(from_gguf.final_logit_softcap,
                     kw.get("final_logit_softcapping"))
    self.assertEqual(from_gguf.tie_embeddings,
                     kw.get("tie_word_embeddings", True))
    self.assertEqual(from_gguf.resolved_head_dim, kw["head_dim"])
    if "rope_scaling" in kw:
      self.assertEqual(from_gguf.rope_scaling["method"], "pi")
      self.assertEqual(from_gguf.rope_scaling["factor"], 2.0)

  def test_norm_weights_are_stored_plus_one(self):
    ckpt = gguf_io.GGUFCheckpoint(self.files["tied_headdim256"])
    sd = self.models["tied_headdim256"].state_dict()
    for name in ("model.norm.weight",
                 "model.layers.0.input_layernorm.weight",
                 "model.layers.0.post_attention_layernorm.weight",
                 "model.layers.3.pre_feedforward_layernorm.weight",
                 "model.layers.5.post_feedforward_layernorm.weight",
                 "model.layers.2.self_attn.q_norm.weight",
                 "model.layers.2.self_attn.k_norm.weight"):
      np.testing.assert_allclose(ckpt.tensor(name), sd[name].numpy(),
                                 atol=1e-7, err_msg=name)
    reader = gguf.GGUFReader(self.files["tied_headdim256"])
    raw = {t.name: np.asarray(t.data) for t in reader.tensors}
    np.testing.assert_allclose(raw["blk.3.ffn_norm.weight"],
                               sd["model.layers.3.pre_feedforward_layernorm"
                                  ".weight"].numpy() + 1, atol=1e-7)

  @absltest.skipUnless(HAVE_ACCELERATE, "transformers' GGUF loader needs "
                       "accelerate")
  def test_transformers_gguf_loader_gives_the_same_logits(self):
    name = "tied_headdim256"
    d = os.path.dirname(self.files[name])
    q8 = write_gemma3_gguf(os.path.join(d, "model.Q8_0.gguf"),
                           self.models[name], quant="Q8_0")
    ids = _ids()
    source = hfx.hf_logits(self.models[name], ids)
    for fname in ("model.gguf", "model.Q8_0.gguf"):
      ref = transformers.AutoModelForCausalLM.from_pretrained(
          d, gguf_file=fname, dtype=torch.float32,
          attn_implementation="eager").eval()
      self.assertEqual(type(ref).__name__, "Gemma3ForCausalLM")
      ref_logits = hfx.hf_logits(ref, ids)
      ours = np.asarray(gguf_io.load(os.path.join(d, fname))[0](
          jnp.asarray(ids)))
      print(f"\n[gguf] gemma3 {fname}: jaxlab vs transformers' GGUF loader "
            f"max |diff| {_err(ours, ref_logits):.2e} (max |logit| "
            f"{np.abs(ref_logits).max():.2f})", file=sys.stderr)
      self.assertLess(_err(ours, ref_logits), TOL, msg=fname)
    # Q8_0 rounding moves the logits visibly, so the quantised comparison
    # is not the F32 one again.
    self.assertGreater(_err(ours, source), 1e-3)
    self.assertEqual(gguf_io.GGUFCheckpoint(q8).quant_type(
        "model.layers.0.mlp.down_proj.weight"), "Q8_0")

  @absltest.skipUnless(HAVE_ACCELERATE, "transformers' GGUF loader needs "
                       "accelerate")
  def test_tokenizer_equals_transformers_gguf_tokenizer(self):
    path = self.files["tied_headdim256"]
    tok = gguf_io.tokenizer(path, os.path.join(self.root, "tok"))
    ref = transformers.AutoTokenizer.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path))
    texts = ["hello the sea", " what is  the sea?", "and, in the end!",
             "caf\u00e9 \u65e5\u672c", "<start_of_turn>user\nhi<end_of_turn>"]
    for text in texts:
      ids = tok.encode(text)
      self.assertEqual(ids, ref.encode(text, add_special_tokens=False),
                       msg=text)
      self.assertNotIn(3, ids, msg=text)  # byte fallback, not <unk>
    msgs = [{"role": "user", "content": "what is the sea?"},
            {"role": "assistant", "content": "the sea."},
            {"role": "user", "content": "and?"}]
    got = tok.apply_chat_template(msgs, add_generation_prompt=True)
    self.assertEqual(got, ref.apply_chat_template(
        msgs, tokenize=True, return_dict=False, add_generation_prompt=True))
    self.assertEqual(got[0], 2)  # <bos>
    self.assertEqual(tok.eos_id, 1)
    self.assertEqual(tok.vocab_size, VOCAB)
    self.assertEqual(len(ref), VOCAB)

  @absltest.skipUnless(HAVE_ACCELERATE, "transformers' GGUF loader needs "
                       "accelerate")
  def test_pretrained_door_without_torch(self):
    """`io.pretrained.load` / `.tokenizer` of the file with torch blocked
    == the source model's logits and transformers' GGUF tokenizer."""
    path = self.files["untied_softcap_scaled"]
    ids = _ids(b=1)
    text = "what is the sea? caf\u00e9"
    code = (
        "import sys, json; sys.modules['torch'] = None\n"
        "import numpy as np\n"
        "from jaxlab.io import pretrained\n"
        f"model, cfg = pretrained.load({path!r})\n"
        f"tok = pretrained.tokenizer({path!r})\n"
        f"logits = np.asarray(model(np.asarray({ids.tolist()!r})))\n"
        f"print(json.dumps([logits.tolist(), tok.encode({text!r}), "
        "cfg.final_logit_softcap]))\n")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu",
             "JAXLAB_CACHE": os.path.join(self.root, "cache")})
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    logits, encoded, cap = json.loads(proc.stdout.strip().splitlines()[-1])
    ref = hfx.hf_logits(self.models["untied_softcap_scaled"], ids)
    self.assertLess(_err(np.asarray(logits, np.float32), ref), TOL)
    self.assertEqual(cap, 2.5)
    ref_tok = transformers.AutoTokenizer.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path))
    self.assertEqual(encoded, ref_tok.encode(text, add_special_tokens=False))

  def test_to_hf_directory_loads_in_transformers(self):
    name = "untied_softcap_scaled"
    out = gguf_io.to_hf(self.files[name], os.path.join(self.root, "to_hf"))
    ids = _ids()
    ref = hfx.hf_logits(self.models[name], ids)
    back = hfx.hf_logits(hfx.load_hf_model(out), ids)
    self.assertLess(_err(back, ref), 1e-5)
    with open(os.path.join(out, "config.json")) as fh:
      self.assertEqual(hf.config_from_hf(json.load(fh)),
                       gguf_io.load_config(self.files[name]))


class Gemma3MetadataTest(absltest.TestCase):
  """llama.cpp's fixed Gemma 3 rules, on metadata alone."""

  def _config(self, layers, window, dim=5376, heads=32, head_dim=128):
    meta = {"general.architecture": "gemma3",
            "gemma3.block_count": layers, "gemma3.embedding_length": dim,
            "gemma3.feed_forward_length": 4 * dim,
            "gemma3.attention.head_count": heads,
            "gemma3.attention.head_count_kv": 16,
            "gemma3.attention.key_length": head_dim,
            "gemma3.attention.value_length": head_dim}
    if window is not None:
      meta["gemma3.attention.sliding_window"] = window
    return gguf_io.hf_config(meta, {"token_embd.weight": (262144, dim)})

  def test_27b_attention_scale_is_dim_over_heads(self):
    self.assertEqual(self._config(62, 1024)["query_pre_attn_scalar"], 168)
    self.assertEqual(self._config(34, 1024)["query_pre_attn_scalar"], 128)

  def test_no_window_means_all_global(self):
    for window in (None, 0):
      hf_cfg = self._config(8, window)
      self.assertEqual(hf_cfg["layer_types"], ["full_attention"] * 8)
      cfg = hf.config_from_hf(hf_cfg)
      self.assertIsNone(cfg.sliding_window)
    self.assertEqual(self._config(8, 512)["layer_types"],
                     ["sliding_attention"] * 5 + ["full_attention"]
                     + ["sliding_attention"] * 2)


if __name__ == "__main__":
  absltest.main()
