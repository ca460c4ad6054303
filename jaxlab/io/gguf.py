"""Import llama.cpp GGUF checkpoints (Llama, Qwen2/3, Gemma 3) sans torch.

    model, cfg = jaxlab.io.gguf.load("model.Q4_K_M.gguf")   # same as hf.load
    tok = jaxlab.io.gguf.tokenizer("model.Q4_K_M.gguf")      # HF tokenizer
    python -m jaxlab.io.gguf --to_hf model.gguf OUT_DIR      # HF checkpoint

The file is read with the `gguf` package (llama.cpp's gguf-py: a memory-mapped
`GGUFReader`, no torch). The route is GGUF -> a HF `config.json` dict plus
HF-named float tensors (`read_hf`) -> the mapping `jaxlab.io.hf` already has
(`hf.config_from_hf` and its tensor table), so a GGUF loads into exactly the
model its HF checkpoint would, and `to_hf` writes that checkpoint.

Dequantisation is ours, in numpy: each ggml block type is a numpy structured
dtype (the C struct of ggml-quants.h: fp16 scales, packed nibbles / high
bits / 6-bit sub-block scales) and a few vectorised lines over all blocks of
a tensor at once. gguf-py's `quants.dequantize` is the reference the tests
hold every type to, bit for bit, on random blocks; ours is kept so the set of
types jaxlab accepts is explicit (`QUANT_TYPES`: F32, F16, BF16, Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) and anything else is one error naming the
type, and so the decoding of a block can be read next to its layout. Tensors
are dequantised one at a time, when the model is filled (a 7B Q4 file is not
expanded to float all at once).

Architectures (`general.architecture`): `llama` (Llama, and Mistral when
`llama.attention.sliding_window` is set), `qwen2`, `qwen3`, and the
masked-diffusion `dream` (Qwen2 weights) and `llada` (Llama weights), both
loaded bidirectional (`llama.cpp`'s `{arch}.attention.causal` = false; see
`diffusion_tokens`), and `gemma3` (Gemma 3 text, `Gemma3ForCausalLM`: the
decoder `hf.load` builds for its safetensors checkpoint, see
`_gemma3_hf_config`). Llama 3.1+ RoPE scaling, stored by llama.cpp only as
the `rope_freqs.weight` divisors, is turned back into HF's `llama3`
rope_scaling (`llama3_rope_scaling`). Mixture-of-experts, partial rotary and
other architectures are refused, naming the field.

Gemma 3 (llama.cpp's `convert_hf_to_gguf.py` `Gemma3Model` and
`llama-model.cpp` LLM_ARCH_GEMMA3): the converter adds 1 to every
`*norm.weight` (Gemma's RMSNorm scales by 1 + w; llama.cpp's by w), so 1 is
subtracted here, as transformers' GGUF loader does (its
`Gemma2TensorProcessor`, used for gemma3). The file holds the global
layers' `rope.freq_base` (and `rope.scaling.*`), `attention.sliding_window`
and `final_logit_softcapping` if set; what llama.cpp fixes instead is set as
it sets it: every 6th layer global and the others sliding when a window is
given (all global otherwise), local RoPE base 10000 unscaled, and
query_pre_attn_scalar = head_dim (n_embd / n_head for the 62-layer 27B).
The sqrt(dim) embedding scale, GeGLU and q/k norms are Gemma 3's own.

Layouts. GGUF lists dims innermost first (`ne0` = the `in` dim of a linear),
so a GGUF tensor of shape [in, out] is the HF `[out, in]` matrix row-major.
llama.cpp's converter permutes the rows of `attn_q` / `attn_k` of the
`llama` architecture from HF's rotate-half RoPE layout to the interleaved
(GPT-J) one, per head: row `h*H + 2*i + j` holds HF row `h*H + j*H/2 + i`.
`_unpermute` undoes it (also for `llada`, which the converter permutes the
same way); `qwen2` / `qwen3` / `dream` use NeoX RoPE and are not permuted.

  token_embd.weight          -> model.embed_tokens.weight
  output_norm.weight         -> model.norm.weight
  output.weight              -> lm_head.weight (absent: tied embeddings)
  blk.i.attn_norm / ffn_norm -> layers.i.input_layernorm / post_attention_..
  blk.i.attn_q/k/v (.bias)   -> layers.i.self_attn.q/k/v_proj (Q/K unpermuted)
  blk.i.attn_output          -> layers.i.self_attn.o_proj
  blk.i.attn_q/k_norm        -> layers.i.self_attn.q/k_norm (Qwen3)
  blk.i.ffn_gate/up/down     -> layers.i.mlp.gate/up/down_proj

and for `gemma3` (norms stored as 1 + w):

  blk.i.attn_norm            -> layers.i.input_layernorm
  blk.i.post_attention_norm  -> layers.i.post_attention_layernorm
  blk.i.ffn_norm             -> layers.i.pre_feedforward_layernorm
  blk.i.post_ffw_norm        -> layers.i.post_feedforward_layernorm
  blk.i.attn_q/k_norm        -> layers.i.self_attn.q/k_norm

The tokenizer and chat template come from the `tokenizer.ggml.*` /
`tokenizer.chat_template` metadata, read here with `gguf` and turned into a
`tokenizers` backend by transformers' own GGUF vocabulary conversion
(`tokenizer_fields`, `save_tokenizer`): no torch anywhere. It is saved as a
normal tokenizer directory (written to a temporary directory, then renamed)
and opened with `jaxlab.data.tokenizers.from_pretrained`. Only `tokenizer` /
`to_hf` need transformers; `load` does not.
"""

import argparse
from collections.abc import Mapping
import json
import os
import sys
import tempfile
from typing import Any

import jax
import ml_dtypes
import numpy as np

from jaxlab.io import hf as hf_io
from jaxlab.models import decoder as decoder_lib

# GGUF general.architecture -> the HF architecture whose weights it holds.
# The masked-diffusion LMs load as bidirectional decoders (`causal=False`,
# from `{arch}.attention.causal`): Dream has Qwen2's tensors; LLaDA has
# Llama's (permuted like Llama's), held here under Llama names.
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "dream": "DreamModel",
                 "llada": "LlamaForCausalLM", "gemma3": "Gemma3ForCausalLM"}
_MODEL_TYPES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                "Qwen3ForCausalLM": "qwen3", "MistralForCausalLM": "mistral",
                "DreamModel": "Dream", "Gemma3ForCausalLM": "gemma3_text"}
# Architectures whose Q/K rows llama.cpp permutes for its interleaved RoPE.
_PERMUTED = ("llama", "llada")

QK_K = 256  # super-block size of the K-quants

# -- dequantisation ------------------------------------------------------------

_F16 = "<f2"
# ggml type name -> (elements per block, numpy structured dtype of a block);
# field order and sizes are the C structs of ggml-common.h.
_BLOCKS = {
    "Q8_0": (32, np.dtype([("d", _F16), ("qs", "i1", 32)])),
    "Q4_0": (32, np.dtype([("d", _F16), ("qs", "u1", 16)])),
    "Q4_1": (32, np.dtype([("d", _F16), ("m", _F16), ("qs", "u1", 16)])),
    "Q5_0": (32, np.dtype([("d", _F16), ("qh", "<u4"), ("qs", "u1", 16)])),
    "Q5_1": (32, np.dtype([("d", _F16), ("m", _F16), ("qh", "<u4"),
                           ("qs", "u1", 16)])),
    "Q4_K": (QK_K, np.dtype([("d", _F16), ("dmin", _F16),
                             ("scales", "u1", 12), ("qs", "u1", QK_K // 2)])),
    "Q5_K": (QK_K, np.dtype([("d", _F16), ("dmin", _F16),
                             ("scales", "u1", 12), ("qh", "u1", QK_K // 8),
                             ("qs", "u1", QK_K // 2)])),
    "Q6_K": (QK_K, np.dtype([("ql", "u1", QK_K // 2), ("qh", "u1", QK_K // 4),
                             ("scales", "i1", QK_K // 16), ("d", _F16)])),
}
_FLOATS = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
           "BF16": np.dtype("<u2")}
QUANT_TYPES = tuple(_FLOATS) + tuple(_BLOCKS)


def _f32(x: np.ndarray) -> np.ndarray:
  return x.astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
  """[..., n] packed bytes -> [..., 2n] values: low nibbles, then high ones
  (ggml packs element j with element j + n of a 2n-element group)."""
  return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits(qh: np.ndarray, count: int) -> np.ndarray:
  """[n] little-endian uint32 -> [n, count] bit j of each word, as uint8."""
  shifts = np.arange(count, dtype=np.uint32)
  return ((qh[:, None] >> shifts) & 1).astype(np.uint8)


def _k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Q4_K / Q5_K: 12 bytes -> 8 six-bit (scale, min) pairs per super-block.

  Bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7;
  bytes 4-7 the same for the mins; bytes 8-11 the low 4 bits of scale 4-7
  (low nibble) and min 4-7 (high nibble).
  """
  a, b, c = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
  sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 6) << 4)], axis=-1)
  mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 6) << 4)], axis=-1)
  return sc, mn


def _blocks_q8_0(b):
  return _f32(b["d"])[:, None] * _f32(b["qs"])


def _blocks_q4_0(b):
  return _f32(b["d"])[:, None] * (_f32(_nibbles(b["qs"])) - 8.0)


def _blocks_q4_1(b):
  return (_f32(b["d"])[:, None] * _f32(_nibbles(b["qs"]))
          + _f32(b["m"])[:, None])


def _q5(b) -> np.ndarray:
  return _nibbles(b["qs"]) | (_high_bits(b["qh"], 32) << 4)


def _blocks_q5_0(b):
  return _f32(b["d"])[:, None] * (_f32(_q5(b)) - 16.0)


def _blocks_q5_1(b):
  return _f32(b["d"])[:, None] * _f32(_q5(b)) + _f32(b["m"])[:, None]


def _k_quant(b, q: np.ndarray) -> np.ndarray:
  """y = d * scale_s * q - dmin * min_s, 8 sub-blocks of 32 (q [n, 8, 32])."""
  sc, mn = _k_scales(b["scales"])
  d = (_f32(b["d"])[:, None] * _f32(sc))[..., None]
  m = (_f32(b["dmin"])[:, None] * _f32(mn))[..., None]
  return (d * _f32(q) - m).reshape(-1, QK_K)


def _q4k_low(b) -> np.ndarray:
  """4 chunks of 32 bytes: low nibbles -> sub-block 2c, high -> 2c + 1."""
  qs = b["qs"].reshape(-1, 4, 32)
  return np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32)


def _blocks_q4_k(b):
  return _k_quant(b, _q4k_low(b))


def _blocks_q5_k(b):
  # Bit s of qh[l] is the fifth bit of element l of sub-block s.
  hi = (b["qh"][:, None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1
  return _k_quant(b, _q4k_low(b) | (hi << 4))


def _blocks_q6_k(b):
  # Two halves of 128: ql low nibbles give elements 0-63, high ones 64-127;
  # qh's 2-bit fields (shift 0, 2, 4, 6) the top bits of the 4 runs of 32.
  ql = b["ql"].reshape(-1, 2, 64)
  qh = b["qh"].reshape(-1, 2, 1, 32)
  low = _nibbles(ql)                                          # [n, 2, 128]
  high = ((qh >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 3).reshape(
      -1, 2, 128)
  q = (low | (high << 4)).astype(np.int8) - np.int8(32)
  d = (_f32(b["d"])[:, None] * _f32(b["scales"]))[..., None]  # [n, 16, 1]
  return (d * _f32(q.reshape(-1, QK_K // 16, 16))).reshape(-1, QK_K)


_DECODERS = {"Q8_0": _blocks_q8_0, "Q4_0": _blocks_q4_0, "Q4_1": _blocks_q4_1,
             "Q5_0": _blocks_q5_0, "Q5_1": _blocks_q5_1, "Q4_K": _blocks_q4_k,
             "Q5_K": _blocks_q5_k, "Q6_K": _blocks_q6_k}


def dequantize(raw: np.ndarray, qtype: str, shape: tuple[int, ...],
               where: str = "tensor") -> np.ndarray:
  """Float32 array of `shape` (row-major, innermost dim last) from the raw
  bytes (or typed F32/F16 values) of one ggml tensor of type `qtype`.

  Raises:
    ValueError: a type outside `QUANT_TYPES` (named), or a byte count that
      does not match `shape`.
  """
  if qtype not in QUANT_TYPES:
    raise ValueError(f"{where}: unsupported GGUF tensor type {qtype}; "
                     f"supported: {', '.join(QUANT_TYPES)}")
  data = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
  count = int(np.prod(shape))
  if qtype in _FLOATS:
    values = data.view(_FLOATS[qtype])
    if qtype == "BF16":
      values = values.view(ml_dtypes.bfloat16)
    out = values.astype(np.float32)
  else:
    block, dtype = _BLOCKS[qtype]
    if count % block or data.size != count // block * dtype.itemsize:
      raise ValueError(f"{where}: {data.size} bytes of {qtype} do not hold "
                       f"shape {shape} ({block}-element blocks of "
                       f"{dtype.itemsize} bytes)")
    out = _DECODERS[qtype](data.view(dtype))
  if out.size != count:
    raise ValueError(f"{where}: {out.size} {qtype} values, expected shape "
                     f"{shape}")
  return out.reshape(shape)


# -- reading -------------------------------------------------------------------


def _reader(path: str):
  import gguf  # pylint: disable=g-import-not-at-top
  if not os.path.isfile(path):
    raise FileNotFoundError(f"GGUF file {path} does not exist")
  try:
    return gguf.GGUFReader(path, "r")
  except Exception as e:  # a bad magic number, a truncated header
    raise ValueError(f"{path}: not a readable GGUF file ({e})") from None


# The vocabulary arrays: only the tokenizer conversion reads them.
_VOCAB_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges",
               "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
               "tokenizer.ggml.precompiled_charsmap")


def metadata(reader, *, vocab: bool = False) -> dict[str, Any]:
  """GGUF key -> value (strings, numbers, lists); the vocabulary arrays
  (`_VOCAB_KEYS`) only with `vocab=True`."""
  out = {}
  for key, field in reader.fields.items():
    if key.startswith("GGUF.") or (not vocab and key in _VOCAB_KEYS):
      continue
    out[key] = field.contents()
  return out


def _scalar(meta: Mapping[str, Any], key: str, where: str, default=None,
            required: bool = False):
  value = meta.get(key, default)
  if value is None and required:
    raise ValueError(f"{where}: missing metadata {key!r}")
  if isinstance(value, list):  # per-layer values (e.g. head_count_kv)
    if len(set(value)) > 1:
      raise ValueError(f"{where}: per-layer {key}={value} is not supported "
                       "(jaxlab's decoder uses one value for all layers)")
    value = value[0]
  return value


def hf_config(meta: Mapping[str, Any], tensor_shapes: Mapping[str, tuple],
              where: str = "GGUF") -> dict[str, Any]:
  """The HF config.json (transformers-4 dialect) a GGUF's metadata means.

  Args:
    meta: `metadata(reader)`.
    tensor_shapes: GGUF tensor name -> HF-order shape (for the vocabulary
      size and whether `output.weight` exists, i.e. untied embeddings).
    where: file name used in error messages.
  """
  arch = meta.get("general.architecture")
  if arch not in ARCHITECTURES:
    raise ValueError(
        f"{where}: unsupported GGUF architecture {arch!r} (metadata "
        f"'general.architecture'); supported: {', '.join(ARCHITECTURES)}")
  a = lambda key, **kw: _scalar(meta, f"{arch}.{key}", where, **kw)  # pylint: disable=unnecessary-lambda-assignment
  if a("expert_count", default=0):
    raise ValueError(f"{where}: {arch}.expert_count={a('expert_count')} "
                     "(mixture-of-experts layers) is not supported")
  dim = int(a("embedding_length", required=True))
  heads = int(a("attention.head_count", required=True))
  kv_heads = int(a("attention.head_count_kv", default=heads))
  head_dim = int(a("attention.key_length", default=dim // heads))
  value_dim = int(a("attention.value_length", default=head_dim))
  if value_dim != head_dim:
    raise ValueError(f"{where}: {arch}.attention.value_length={value_dim} "
                     f"differs from key_length={head_dim}; not supported")
  rope_dims = int(a("rope.dimension_count", default=head_dim))
  if rope_dims != head_dim:
    raise ValueError(f"{where}: {arch}.rope.dimension_count={rope_dims} < "
                     f"head dim {head_dim} (partial rotary) is not supported")
  if "token_embd.weight" not in tensor_shapes:
    raise ValueError(f"{where}: missing tensor 'token_embd.weight'")
  vocab = int(tensor_shapes["token_embd.weight"][0])
  hf_arch = ARCHITECTURES[arch]
  if arch == "gemma3":
    return _gemma3_hf_config(meta, a, tensor_shapes, vocab=vocab, dim=dim,
                             heads=heads, kv_heads=kv_heads,
                             head_dim=head_dim, where=where)
  window = a("attention.sliding_window")
  if window and arch == "llama":
    hf_arch = "MistralForCausalLM"  # Llama weights, a window on every layer
  elif window:
    raise ValueError(f"{where}: {arch}.attention.sliding_window={window} is "
                     "not supported for this architecture")
  out: dict[str, Any] = {
      "architectures": [hf_arch],
      "model_type": _MODEL_TYPES[hf_arch],
      "vocab_size": vocab,
      "hidden_size": dim,
      "intermediate_size": int(a("feed_forward_length", required=True)),
      "num_hidden_layers": int(a("block_count", required=True)),
      "num_attention_heads": heads,
      "num_key_value_heads": kv_heads,
      "head_dim": head_dim,
      "hidden_act": "silu",
      "max_position_embeddings": int(a("context_length", default=2048)),
      "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon",
                              default=1e-6)),
      "rope_theta": float(a("rope.freq_base", default=10000.0)),
      "rope_scaling": _rope_scaling(a, where, arch),
      "tie_word_embeddings": "output.weight" not in tensor_shapes,
      "torch_dtype": "float32",
  }
  if hf_arch == "MistralForCausalLM":
    out["sliding_window"] = int(window)
  if hf_arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"):
    out["attention_bias"] = False
  if hf_arch in ("LlamaForCausalLM", "MistralForCausalLM"):
    out["mlp_bias"] = False
  if hf_arch in ("Qwen2ForCausalLM", "DreamModel"):
    out["use_sliding_window"] = False
  _token_ids(meta, out)
  return out


def _token_ids(meta: Mapping[str, Any], out: dict[str, Any]) -> None:
  for ours, key in (("bos_token_id", "bos_token_id"),
                    ("eos_token_id", "eos_token_id"),
                    ("pad_token_id", "padding_token_id"),
                    ("mask_token_id", "mask_token_id")):
    if meta.get(f"tokenizer.ggml.{key}") is not None:
      out[ours] = int(meta[f"tokenizer.ggml.{key}"])


# llama.cpp's Gemma 3 (llama-model.cpp, LLM_ARCH_GEMMA3): every 6th layer
# global, the others sliding (`set_swa_pattern(6)`) when the file has a
# window; the sliding layers' RoPE base fixed at 10000, unscaled; the
# attention scale 1/sqrt(head_dim), except the 62-layer 27B's
# 1/sqrt(n_embd / n_head) (gemma_pytorch's query_pre_attn_scalar).
GEMMA3_SWA_PATTERN = 6
GEMMA3_SWA_ROPE_BASE = 10000.0
_GEMMA3_27B_LAYERS = 62


def _gemma3_hf_config(meta: Mapping[str, Any], a, tensor_shapes, *,
                      vocab: int, dim: int, heads: int, kv_heads: int,
                      head_dim: int, where: str) -> dict[str, Any]:
  """The `Gemma3ForCausalLM` (gemma3_text) config.json of a `gemma3` GGUF.

  What the file states is read (`gemma3.*`: sizes, `rope.freq_base` and
  `rope.scaling.*` of the global layers, `attention.sliding_window`,
  `final_logit_softcapping`, `attn_logit_softcapping`); what llama.cpp fixes
  for the architecture rather than storing is set as llama.cpp sets it
  (`GEMMA3_SWA_PATTERN`, `GEMMA3_SWA_ROPE_BASE` unless
  `rope.freq_base_swa` is given, `query_pre_attn_scalar` from the head
  size). A file without a window (or window 0) has only global layers,
  as llama.cpp then runs it.
  """
  layers = int(a("block_count", required=True))
  window = int(a("attention.sliding_window", default=0) or 0)
  if window > 0:
    layer_types = ["sliding_attention" if i % GEMMA3_SWA_PATTERN
                   < GEMMA3_SWA_PATTERN - 1 else "full_attention"
                   for i in range(layers)]
  else:
    layer_types = ["full_attention"] * layers
  scalar = dim // heads if layers == _GEMMA3_27B_LAYERS else head_dim

  def f32(key, default=None):
    # GGUF stores these as float32: 1e-6 reads back as 9.99999997e-07.
    # The shortest decimal of that float32 is the value the converter was
    # given (what the checkpoint's config.json says).
    value = a(key, default=default)
    return None if value is None else float(str(np.float32(value)))

  out: dict[str, Any] = {
      "architectures": [ARCHITECTURES["gemma3"]],
      "model_type": _MODEL_TYPES[ARCHITECTURES["gemma3"]],
      "vocab_size": vocab,
      "hidden_size": dim,
      "intermediate_size": int(a("feed_forward_length", required=True)),
      "num_hidden_layers": layers,
      "num_attention_heads": heads,
      "num_key_value_heads": kv_heads,
      "head_dim": head_dim,
      "hidden_activation": "gelu_pytorch_tanh",
      "max_position_embeddings": int(a("context_length", default=131072)),
      "rms_norm_eps": f32("attention.layer_norm_rms_epsilon", 1e-6),
      "rope_theta": f32("rope.freq_base", 1_000_000.0),
      "rope_scaling": _rope_scaling(a, where, "gemma3"),
      "rope_local_base_freq": f32("rope.freq_base_swa",
                                  GEMMA3_SWA_ROPE_BASE),
      "layer_types": layer_types,
      "sliding_window": window if window > 0 else None,
      "query_pre_attn_scalar": scalar,
      "final_logit_softcapping": f32("final_logit_softcapping"),
      "attn_logit_softcapping": f32("attn_logit_softcapping"),
      "tie_word_embeddings": "output.weight" not in tensor_shapes,
      "torch_dtype": "float32",
  }
  _token_ids(meta, out)
  return out


def _rope_scaling(a, where: str, arch: str) -> dict[str, Any] | None:
  kind = a("rope.scaling.type", default="none")
  factor = a("rope.scaling.factor", default=a("rope.scale_linear"))
  if kind == "none" and factor not in (None, 1, 1.0):
    kind = "linear"  # older files: only rope.scale_linear
  if kind == "none":
    return None
  if kind not in ("linear", "yarn"):
    raise ValueError(f"{where}: unsupported RoPE scaling {kind!r} (metadata "
                     f"'{arch}.rope.scaling.type'); supported: none, linear, "
                     "yarn")
  out: dict[str, Any] = {"rope_type": kind, "factor": float(factor or 1.0)}
  original = a("rope.scaling.original_context_length")
  if original:
    out["original_max_position_embeddings"] = int(original)
  if kind == "yarn":
    for key, hf_key in (("yarn_beta_fast", "beta_fast"),
                        ("yarn_beta_slow", "beta_slow")):
      if a(f"rope.scaling.{key}") is not None:
        out[hf_key] = float(a(f"rope.scaling.{key}"))
  return out


ROPE_FREQS = "rope_freqs.weight"


def _llama3_factors(theta: float, head_dim: int, factor: float, low: float,
                    high: float, original: int) -> np.ndarray:
  """Per-frequency divisors of HF's `llama3` RoPE (what llama.cpp stores
  as `rope_freqs.weight`)."""
  inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
  wavelen = 2 * np.pi / inv_freq
  smooth = (original / wavelen - low) / (high - low)
  mid = 1.0 / ((1 - smooth) / factor + smooth)
  return np.where(wavelen < original / high, 1.0,
                  np.where(wavelen > original / low, factor, mid))


def llama3_rope_scaling(factors: np.ndarray, theta: float, head_dim: int,
                        where: str = ROPE_FREQS) -> dict[str, Any] | None:
  """HF `llama3` rope_scaling recovered from llama.cpp's `rope_freqs`.

  llama.cpp stores Llama 3.1+ RoPE scaling only as the per-frequency
  divisors. `factor` is their maximum. The divisors depend on (low, high,
  original) only through high / low and original / low (band edges
  original / high and original / low, smoothing original / wavelen - low
  over high - low), so `low_freq_factor` = 1 loses nothing (and is what
  every Llama 3.x release uses); the transition band, linear in
  1 / wavelength after inversion, then gives `high_freq_factor` and
  `original_max_position_embeddings`. The result is checked by recomputing
  every divisor.

  Raises:
    ValueError: divisors that no such `llama3` scaling reproduces.
  """
  r = np.asarray(factors, np.float64).reshape(-1)
  if r.shape != (head_dim // 2,):
    raise ValueError(f"{where}: {r.size} RoPE factors, expected "
                     f"{head_dim // 2} (head_dim / 2)")
  factor = float(r.max())
  if np.allclose(r, 1.0):
    return None
  inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
  wavelen = 2 * np.pi / inv_freq
  band = (r > 1 + 1e-4) & (r < factor * (1 - 1e-4))
  fit = None
  if band.sum() >= 2 and factor > 1:
    smooth = (1 / r[band] - 1 / factor) / (1 - 1 / factor)
    slope, intercept = np.polyfit(1 / wavelen[band], smooth, 1)
    if intercept < 0 and slope > 0:
      high = round(float(1 - 1 / intercept), 3)  # intercept = -1/(high - 1)
      original = int(round(slope * (high - 1)))
      fit = dict(factor=factor, low=1.0, high=high, original=original)
  if fit is None or not np.allclose(
      _llama3_factors(theta, head_dim, **fit), r, rtol=1e-4):
    raise ValueError(
        f"{where}: RoPE frequency factors (min {r.min():.4g}, max "
        f"{r.max():.4g}, {r.size} values) match no Llama-3 scaling; other "
        "per-frequency factors are not supported")
  return {"rope_type": "llama3", "factor": fit["factor"],
          "low_freq_factor": 1.0, "high_freq_factor": fit["high"],
          "original_max_position_embeddings": fit["original"]}


_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
# Gemma 3 (gguf-py MODEL_ARCH.GEMMA3): `ffn_norm` is the pre-MLP norm and
# two post-norms follow attention and the MLP.
_GEMMA3_LAYER_NAMES = {
    **_LAYER_NAMES,
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}


def _layer_names(arch: str | None) -> dict[str, str]:
  return _GEMMA3_LAYER_NAMES if arch == "gemma3" else _LAYER_NAMES


def hf_name(name: str, where: str = "GGUF", arch: str | None = None) -> str:
  """The HF tensor name of a llama.cpp one (`blk.3.attn_q.weight` ->
  `model.layers.3.self_attn.q_proj.weight`) in a file of GGUF architecture
  `arch` (Gemma 3 names its norms differently)."""
  if name in _GLOBAL_NAMES:
    return _GLOBAL_NAMES[name]
  names = _layer_names(arch)
  parts = name.split(".", 2)
  if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and (
      parts[2] in names):
    return f"model.layers.{parts[1]}.{names[parts[2]]}"
  raise ValueError(f"{where}: tensor {name!r} has no equivalent in jaxlab's "
                   "decoder")


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
  """llama.cpp's interleaved-RoPE row order of a Q/K weight (or bias) ->
  HF's rotate-half order, per head."""
  rows = w.shape[0]
  head_dim = rows // heads
  return (w.reshape(heads, head_dim // 2, 2, *w.shape[1:]).swapaxes(1, 2)
          .reshape(w.shape))


class GGUFCheckpoint:
  """A GGUF file seen as a HF checkpoint: `config` (config.json dict) and
  `tensor(hf_name)` -> float32 numpy in HF layout, dequantised on demand."""

  def __init__(self, path: str | os.PathLike):
    self.path = os.fspath(path)
    self._reader = _reader(self.path)
    self.metadata = metadata(self._reader)
    arch = self.metadata.get("general.architecture")
    self._tensors = {}
    shapes = {}
    rope_freqs = None
    for t in self._reader.tensors:
      shape = tuple(int(x) for x in reversed(t.shape.tolist()))
      shapes[t.name] = shape
      if t.name == ROPE_FREQS:
        rope_freqs = t
        continue
      self._tensors[hf_name(t.name, self.path, arch)] = (t, shape)
    self.config = hf_config(self.metadata, shapes, self.path)
    self.architecture = self.metadata["general.architecture"]
    # llama.cpp's flag for the bidirectional (masked-diffusion) models.
    self.causal = bool(_scalar(self.metadata,
                               f"{self.architecture}.attention.causal",
                               self.path, default=True))
    if rope_freqs is not None:
      factors = dequantize(rope_freqs.data, rope_freqs.tensor_type.name,
                           shapes[ROPE_FREQS], where=self.path)
      self.config["rope_scaling"] = llama3_rope_scaling(
          factors, self.config["rope_theta"], self.config["head_dim"],
          where=f"{self.path}: tensor {ROPE_FREQS!r}")
    # llama.cpp stores Gemma's (1 + w) RMSNorm weights as 1 + w (its
    # converter adds 1 to every `*norm.weight`); HF and jaxlab store w.
    self._norm_shift = self.architecture == "gemma3"
    self._permute = {}
    if self.metadata["general.architecture"] in _PERMUTED:
      n = self.config["num_attention_heads"]
      k = self.config["num_key_value_heads"]
      for i in range(self.config["num_hidden_layers"]):
        for proj, heads in (("q", n), ("k", k)):
          for kind in ("weight", "bias"):
            self._permute[f"model.layers.{i}.self_attn.{proj}_proj.{kind}"] = (
                heads)
    for t, _ in self._tensors.values():  # one error for any unsupported type
      if t.tensor_type.name not in QUANT_TYPES:
        raise ValueError(
            f"{self.path}: tensor {t.name!r} has unsupported GGUF type "
            f"{t.tensor_type.name}; supported: {', '.join(QUANT_TYPES)}")

  def names(self) -> list[str]:
    return list(self._tensors)

  def __contains__(self, name: str) -> bool:
    return name in self._tensors

  def shape(self, name: str) -> tuple[int, ...]:
    return self._tensors[name][1]

  def quant_type(self, name: str) -> str:
    return self._tensors[name][0].tensor_type.name

  def tensor(self, name: str) -> np.ndarray:
    """Float32 HF-layout tensor `name`."""
    if name not in self._tensors:
      raise ValueError(f"{self.path}: missing tensor {name!r}")
    t, shape = self._tensors[name]
    out = dequantize(t.data, t.tensor_type.name, shape,
                     where=f"{self.path}: tensor {t.name!r}")
    if name in self._permute:
      out = _unpermute(out, self._permute[name])
    if self._norm_shift and name.endswith("norm.weight"):
      out = out - np.float32(1.0)
    return out


def _config(ckpt, dtype, param_dtype, overrides):
  if not ckpt.causal:
    overrides.setdefault("causal", False)
  return hf_io.config_from_hf(ckpt.config, dtype=dtype,
                              param_dtype=param_dtype, where=ckpt.path,
                              **overrides)


def load_config(path: str | os.PathLike, *, dtype: str = "float32",
                param_dtype: str | None = None, **config_overrides: Any
                ) -> decoder_lib.DecoderConfig:
  """The `DecoderConfig` `load` builds for the file, reading no tensor."""
  return _config(GGUFCheckpoint(path), dtype, param_dtype, config_overrides)


def load(path: str | os.PathLike, *, dtype: str = "float32",
         param_dtype: str | None = None, mesh: jax.sharding.Mesh | None = None,
         rules: Any = None, **config_overrides: Any
         ) -> tuple[decoder_lib.Decoder, decoder_lib.DecoderConfig]:
  """Loads a GGUF file as a `Decoder`; the contract of `jaxlab.io.hf.load`.

  Args:
    path: the .gguf file.
    dtype: compute dtype ("float32", "bfloat16", "float16").
    param_dtype: parameter dtype; defaults to `dtype`. Quantised weights are
      dequantised to float32 and then cast.
    mesh, rules: optional mesh and logical-axis rules; every parameter is
      placed with its `NamedSharding` as it is dequantised (dims the mesh does
      not divide stay replicated).
    **config_overrides: further `DecoderConfig` fields (`remat=True`,
      `scan_layers=True`, ...).

  Returns:
    (model, cfg).

  Raises:
    FileNotFoundError: no such file.
    ValueError: not a GGUF file, unsupported architecture / tensor type /
      metadata (each named), missing tensor or a shape the config disagrees
      with.
  """
  ckpt = GGUFCheckpoint(path)
  cfg = _config(ckpt, dtype, param_dtype, config_overrides)

  def gguf_name(name):
    return _gguf_name(name, ckpt.architecture)

  def read(name, hf_shape):
    if name not in ckpt:
      raise ValueError(f"{ckpt.path}: missing tensor {name!r} (GGUF "
                       f"{gguf_name(name)!r})")
    found = ckpt.shape(name)
    if found != hf_shape:
      raise ValueError(f"{ckpt.path}: tensor {gguf_name(name)!r} has shape "
                       f"{found} (HF order), expected {hf_shape} from the "
                       "metadata")
    return ckpt.tensor(name)

  # The HF tensor table hf.load / hf.save use.
  extra = sorted(set(ckpt.names()) - set(hf_io.tensor_shapes(cfg)))
  if extra:
    raise ValueError(f"{ckpt.path}: tensors {[gguf_name(n) for n in extra]} "
                     f"are not used by the {ckpt.config['architectures'][0]} "
                     "config the metadata gives")
  return hf_io.load_tensors(cfg, read, mesh=mesh, rules=rules), cfg


def diffusion_tokens(path: str | os.PathLike) -> dict[str, Any]:
  """{mask_id, eos_id, shift_logits} of a GGUF file, as
  `jaxlab.io.hf.diffusion_tokens` gives them for a checkpoint directory
  (`tokenizer.ggml.mask_token_id` / `eos_token_id`, None if absent;
  `diffusion.shift_logits`, default: Dream shifts, LLaDA does not)."""
  meta = metadata(_reader(os.fspath(path)))
  shift = meta.get("diffusion.shift_logits")
  if shift is None:
    shift = meta.get("general.architecture") == "dream"
  return {"mask_id": meta.get("tokenizer.ggml.mask_token_id"),
          "eos_id": meta.get("tokenizer.ggml.eos_token_id"),
          "shift_logits": bool(shift)}


def _gguf_name(hf_tensor: str, arch: str | None = None) -> str:
  for ours, theirs in _GLOBAL_NAMES.items():
    if theirs == hf_tensor:
      return ours
  for ours, theirs in _layer_names(arch).items():
    suffix = "." + theirs
    if hf_tensor.endswith(suffix) and hf_tensor.startswith("model.layers."):
      return f"blk.{hf_tensor.split('.')[2]}.{ours}"
  return hf_tensor


# -- tokenizer and HF export ---------------------------------------------------


# llama.cpp metadata key (after "tokenizer.") -> the name transformers' GGUF
# tokenizer conversion reads (its GGUF_TOKENIZER_MAPPING).
_TOKENIZER_KEYS = {
    "ggml.model": "tokenizer_type", "ggml.pre": "pre_tokenizer_type",
    "ggml.tokens": "tokens", "ggml.scores": "scores",
    "ggml.token_type": "token_type", "ggml.merges": "merges",
    "ggml.precompiled_charsmap": "precompiled_charsmap",
    "ggml.bos_token_id": "bos_token_id", "ggml.eos_token_id": "eos_token_id",
    "ggml.unknown_token_id": "unk_token_id",
    "ggml.padding_token_id": "pad_token_id",
    "ggml.add_space_prefix": "add_prefix_space",
}
_TOKENIZER_CONFIG_KEYS = {"chat_template": "chat_template",
                          "ggml.add_bos_token": "add_bos_token",
                          "ggml.add_eos_token": "add_eos_token"}
_SPECIAL_TOKENS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                   "unk_token": "unknown_token_id",
                   "pad_token": "padding_token_id"}


def tokenizer_fields(path: str | os.PathLike
                     ) -> tuple[str, dict[str, Any], dict[str, Any]]:
  """(architecture, tokenizer dict, tokenizer_config) of a GGUF's
  `tokenizer.*` metadata, read with `gguf` (no torch): what transformers'
  `get_gguf_tokenizer` returns, without its torch-based reader."""
  path = os.fspath(path)
  meta = metadata(_reader(path), vocab=True)
  if "tokenizer.ggml.model" not in meta:
    raise ValueError(f"{path}: no tokenizer in the metadata (no "
                     "'tokenizer.ggml.model')")
  tok = {name: meta[f"tokenizer.{key}"] for key, name in _TOKENIZER_KEYS.items()
         if f"tokenizer.{key}" in meta}
  if isinstance(tok.get("precompiled_charsmap"), list):
    tok["precompiled_charsmap"] = bytes(tok["precompiled_charsmap"])
  config = {name: meta[f"tokenizer.{key}"]
            for key, name in _TOKENIZER_CONFIG_KEYS.items()
            if f"tokenizer.{key}" in meta}
  if tok.get("tokenizer_type") == "llama":
    # llama.cpp adds BOS to a sentencepiece vocabulary that does not say
    # otherwise (transformers' conversion does the same).
    config.setdefault("add_bos_token", True)
  for name, key in _SPECIAL_TOKENS.items():
    token_id = meta.get(f"tokenizer.ggml.{key}")
    config[name] = (tok["tokens"][token_id] if token_id is not None
                    else None)
  return meta["general.architecture"], tok, config


def _convert_tokenizer(architecture: str, tok: dict[str, Any]):
  """transformers' own GGUF vocabulary -> `tokenizers.Tokenizer` conversion
  (torch-free: it needs `tokenizers` only); its module moved in v5."""
  try:
    from transformers.integrations.gguf import gguf_tokenizer_mapping as conv  # pylint: disable=g-import-not-at-top
  except ImportError:  # transformers 4.x
    from transformers.integrations import ggml as conv  # pylint: disable=g-import-not-at-top
  return conv.convert_gguf_tokenizer(architecture, tok)


def save_tokenizer(path: str | os.PathLike, out_dir: str | os.PathLike
                   ) -> str:
  """Writes the GGUF's tokenizer (vocabulary, merges, special tokens, chat
  template from `tokenizer.*` metadata) as HF tokenizer files in `out_dir`.

  No torch: the metadata is read with `gguf` (`tokenizer_fields`), the
  `tokenizers` backend is built by transformers' GGUF conversion, and the
  files are written by `PreTrainedTokenizerFast.save_pretrained`. The files
  go to a temporary sibling directory first, renamed into place when
  complete, so a failed conversion leaves no half-written `out_dir` (an
  existing `out_dir`, e.g. `to_hf`'s, only gains the finished files).
  """
  import shutil  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  path, out_dir = os.fspath(path), os.fspath(out_dir)
  architecture, tok, config = tokenizer_fields(path)
  backend, extra = _convert_tokenizer(architecture, tok)
  config = {k: v for k, v in {**config, **extra}.items() if v is not None}
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=backend,
                                              **config)
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=".tokenizer_tmp_", dir=parent)
  try:
    fast.save_pretrained(tmp)
    if not os.path.isdir(out_dir):
      os.replace(tmp, out_dir)
    else:
      for name in os.listdir(tmp):
        os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return out_dir


def tokenizer(path: str | os.PathLike,
              out_dir: str | os.PathLike | None = None):
  """The GGUF's tokenizer as a jaxlab tokenizer (`tokenizers.from_pretrained`
  of the files `save_tokenizer` writes; a temporary directory by default)."""
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  if out_dir is None:
    out_dir = tempfile.mkdtemp(prefix="gguf_tokenizer_")
  return tokenizers.from_pretrained(save_tokenizer(path, out_dir))


def to_hf(path: str | os.PathLike, out_dir: str | os.PathLike, *,
          dtype: str = "float32", with_tokenizer: bool = True) -> str:
  """Writes a standard HF checkpoint directory from a GGUF file.

  config.json (transformers-4 dialect), model.safetensors (dequantised,
  Q/K rows in HF order, `dtype` "float32" / "bfloat16" / "float16"),
  generation_config.json and the tokenizer files (when the GGUF has a
  tokenizer: `tokenizer.ggml.model` in its metadata).
  """
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  out_dir = os.fspath(out_dir)
  ckpt = GGUFCheckpoint(path)
  if ckpt.architecture == "llada":
    raise ValueError(f"{ckpt.path}: LLaDA GGUF files cannot be exported: its "
                     "HF checkpoints use their own config fields and tensor "
                     "names (trust_remote_code); load it with `load`")
  hf_io.config_from_hf(ckpt.config, where=ckpt.path)  # same checks as load
  if os.path.exists(out_dir) and os.listdir(out_dir):
    raise ValueError(f"{out_dir}: exists and is not empty; give a new "
                     "directory to write the HF checkpoint into")
  import shutil  # pylint: disable=g-import-not-at-top
  target = np.dtype(decoder_lib.to_dtype(dtype))
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  # Everything goes to a temporary sibling first: a failed conversion leaves
  # no half-written `out_dir`.
  tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.tmp_",
                         dir=parent)
  try:
    tensors = {name: np.ascontiguousarray(ckpt.tensor(name).astype(target))
               for name in ckpt.names()}
    safetensors.numpy.save_file(
        tensors, os.path.join(tmp, hf_io.SINGLE_FILE),
        metadata={"format": "pt"})
    del tensors
    config = dict(ckpt.config, torch_dtype=dtype)
    with open(os.path.join(tmp, hf_io.CONFIG_FILE), "w") as fh:
      json.dump(config, fh, indent=2)
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id",
                                         "pad_token_id") if k in config}
    with open(os.path.join(tmp, "generation_config.json"), "w") as fh:
      json.dump(generation, fh, indent=2)
    if with_tokenizer and "tokenizer.ggml.model" in ckpt.metadata:
      save_tokenizer(ckpt.path, tmp)
    if os.path.isdir(out_dir):
      os.rmdir(out_dir)  # empty (checked above)
    os.replace(tmp, out_dir)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return out_dir


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m jaxlab.io.gguf",
      description="Convert a llama.cpp GGUF file to a HF checkpoint "
      "directory (safetensors + tokenizer files).")
  parser.add_argument("--to_hf", nargs=2, metavar=("IN_GGUF", "OUT_DIR"),
                      required=True)
  parser.add_argument("--dtype", default="float32",
                      choices=("float32", "bfloat16", "float16"))
  args = parser.parse_args(argv)
  try:
    out = to_hf(args.to_hf[0], args.to_hf[1], dtype=args.dtype)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
