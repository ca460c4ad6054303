"""Import and export Hugging Face Llama / Qwen2 / Qwen3 / Mistral checkpoints.

    model, cfg = jaxlab.io.hf.load("/ckpt/dir", dtype="bfloat16")
    logits_btv = model(input_ids_bt)                    # [B, T, V] float32
    jaxlab.io.hf.save(model, cfg, "/out/dir")           # transformers-4 dialect

A checkpoint directory holds `config.json` and either `model.safetensors` or
a sharded `model.safetensors.index.json` plus the shards it names. Tensors
are read one at a time with `safetensors.safe_open(framework="numpy")`
(bfloat16 arrives as an `ml_dtypes.bfloat16` array), so torch is never
imported and the model is never materialised with a random init first: it
is built abstractly with `nnx.eval_shape` and filled with the loaded arrays.

Both config dialects are read: transformers 4 (`rope_theta` and
`rope_scaling` at the top level, `rope_scaling.type` or `.rope_type`) and
transformers 5 (`rope_parameters` with `rope_theta` and `rope_type`). HF rope
types map to `jaxlab.nn.rope` registry names through `HF_ROPE_TYPES`.

Layout mapping (HF `nn.Linear.weight` is `[out, in]`):

  model.embed_tokens.weight            [V, D]    -> embed_vd [V, D]
  layers.i.self_attn.q_proj.weight     [N*H, D]  -> q_dnh [D, N, H]
  layers.i.self_attn.k/v_proj.weight   [K*H, D]  -> k_dkh / v_dkh [D, K, H]
  layers.i.self_attn.q/k/v_proj.bias   [N*H]     -> q_bias_nh [N, H] ...
  layers.i.self_attn.o_proj.weight     [D, N*H]  -> o_nhd [N, H, D]
  layers.i.mlp.gate/up_proj.weight     [F, D]    -> gate_df / up_df [D, F]
  layers.i.mlp.down_proj.weight        [D, F]    -> down_fd [F, D]
  layers.i.input_layernorm.weight      [D]       -> attn_norm.scale
  layers.i.post_attention_layernorm    [D]       -> mlp_norm.scale
  model.norm.weight                    [D]       -> final_norm.scale
  lm_head.weight                       [V, D]    -> lm_head_dv [D, V]
  layers.i.self_attn.q_norm/k_norm     [H]       -> q_norm/k_norm.scale (Qwen3)

Architectures: Llama; Qwen2 (q/k/v biases); Qwen3 (no biases, per-head q/k
RMSNorm, `head_dim` independent of `hidden_size`); Mistral (Llama weights
with a sliding window on every layer); Gemma 3 text (`Gemma3ForCausalLM`,
model_type gemma3_text: per-layer sliding / global attention with two RoPE
bases, q/k norm, (1 + w) norms, GeGLU, sqrt(dim) embedding scale, the
`query_pre_attn_scalar` attention scale, final logit soft-capping; its
norms map as

  layers.i.input_layernorm             [D]       -> attn_norm.scale
  layers.i.post_attention_layernorm    [D]       -> post_attn_norm.scale
  layers.i.pre_feedforward_layernorm   [D]       -> mlp_norm.scale
  layers.i.post_feedforward_layernorm  [D]       -> post_mlp_norm.scale

with the (1 + w) weights stored as is). torch is never imported.

Vision-language: a Qwen2.5-VL / Qwen2-VL checkpoint
(`Qwen2_5_VLForConditionalGeneration`, `Qwen2VLForConditionalGeneration`)
loads as `(jaxlab.models.qwen2_vl.Qwen2VL, Qwen2VLConfig)` through
`load_qwen2_vl` (both the Hub's and transformers 5's tensor names and
config dialects; mesh placement and scanned text layers as for a decoder),
and `save` of such a model writes one (`save_qwen2_vl`: transformers 5's
config layout, the Hub's tensor names).

Gemma 3's multimodal checkpoints (`Gemma3ForConditionalGeneration`, model
type gemma3: every Gemma 3 from 4B up) load their language model:
`text_config` as a `Gemma3ForCausalLM` config, and the text tensors under
transformers 5's `model.language_model.` (or the Hub's older
`language_model.model.`) prefix. The SigLIP vision tower and projector are
not read (a warning says so), so the model is the text LM, whose logits
equal the checkpoint's on text-only inputs; `save` writes it as a
`Gemma3ForCausalLM`.

Scanned models (`scan_layers=True`, e.g. `load(path, scan_layers=True)`):
the per-layer HF tensors of the layers j, j + P, ... are converted and
stacked on the host into the `[L / P, ...]` params of `scan_blocks[j]`
(placed once with the stacked sharding), and `save` splits them back, so a
scanned model reads and writes the same HF tensors as the unrolled one.
"""

from collections.abc import Callable, Mapping
import dataclasses
import json
import os
from typing import Any
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open
import safetensors.numpy

from jaxlab.models import decoder as decoder_lib
from jaxlab.models import qwen2_vl

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM",
                           "Qwen3ForCausalLM", "MistralForCausalLM")
_MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}
# Masked-diffusion LMs (spec L), imported as bidirectional decoders
# (causal=False): Dream (`DreamModel`: Qwen2 config and tensor names, its
# sampler reads the logits shifted by one position, see `diffusion_tokens`)
# and LLaDA (`LLaDAModelLM`: OLMo-style config and tensor names, mapped by
# `_LLADA_CONFIG` / `_LLADA_TENSORS`). Import only: `save` writes causal LMs.
DIFFUSION_ARCHITECTURES = ("DreamModel", "LLaDAModelLM")
SUPPORTED_ARCHITECTURES += DIFFUSION_ARCHITECTURES
_MODEL_TYPES.update({"Dream": "DreamModel", "llada": "LLaDAModelLM"})
# Gemma 3 text (`Gemma3ForCausalLM`, model_type gemma3_text): the decoder
# with its Gemma switches on (`_gemma3_config_from_hf`,
# `_gemma3_config_to_hf`).
GEMMA3 = "Gemma3ForCausalLM"
SUPPORTED_ARCHITECTURES += (GEMMA3,)
_MODEL_TYPES["gemma3_text"] = GEMMA3
# DecoderConfig fields of Gemma 3 and their value there (export checks them).
_GEMMA3_SWITCHES = {"post_norms": True, "norm_plus_one": True,
                    "qk_norm": True, "embed_scale": True,
                    "mlp_activation": "gelu_tanh", "qkv_bias": False,
                    "causal": True, "nope_layers": (),
                    "attn_logit_softcap": None}
# Gemma 3's defaults (transformers' Gemma3TextConfig).
_GEMMA3_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
# LLaDA config.json field -> the Llama field it means.
_LLADA_CONFIG = {"d_model": "hidden_size", "n_heads": "num_attention_heads",
                 "n_kv_heads": "num_key_value_heads",
                 "n_layers": "num_hidden_layers",
                 "mlp_hidden_size": "intermediate_size",
                 "max_sequence_length": "max_position_embeddings",
                 "weight_tying": "tie_word_embeddings",
                 "activation_type": "hidden_act",
                 "rope_theta": "rope_theta", "rms_norm_eps": "rms_norm_eps"}
# LLaDA fields whose non-default value the decoder cannot represent.
_LLADA_UNSUPPORTED = {"block_type": "llama", "layer_norm_type": "rms",
                      "include_bias": False, "include_qkv_bias": False,
                      "alibi": False, "attention_layer_norm": False,
                      "scale_logits": False, "input_emb_norm": False,
                      "rope": True}
# Llama tensor-name piece -> LLaDA's (model.transformer.blocks.i.*).
_LLADA_TENSORS = (
    ("model.embed_tokens.weight", "model.transformer.wte.weight"),
    ("model.norm.weight", "model.transformer.ln_f.weight"),
    ("lm_head.weight", "model.transformer.ff_out.weight"),
    ("model.layers.", "model.transformer.blocks."),
    ("input_layernorm.", "attn_norm."),
    ("post_attention_layernorm.", "ff_norm."),
    ("self_attn.o_proj.", "attn_out."),
    ("self_attn.", ""),
    ("mlp.gate_proj.", "ff_proj."),
    ("mlp.up_proj.", "up_proj."),
    ("mlp.down_proj.", "ff_out."),
)


def _diffusion_as_causal(hf: Mapping[str, Any], arch: str, where: str
                         ) -> dict[str, Any]:
  """A Dream / LLaDA config.json rewritten as the Qwen2 / Llama one whose
  weights it holds (the model is then made bidirectional)."""
  if arch == "DreamModel":
    return {**hf, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
  for field, want in _LLADA_UNSUPPORTED.items():
    if field in hf and hf[field] is not None and hf[field] != want:
      raise ValueError(f"{where}: {field}={hf[field]!r} is not supported for "
                       f"LLaDA checkpoints (supported: {want!r})")
  out = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
         "attention_bias": False}
  for ours, theirs in _LLADA_CONFIG.items():
    if hf.get(ours) is not None:
      out[theirs] = hf[ours]
  # The embedding matrix has `embedding_size` rows (vocab padded up).
  out["vocab_size"] = hf.get("embedding_size") or hf.get("vocab_size")
  if out.get("intermediate_size") is None and hf.get("mlp_ratio"):
    out["intermediate_size"] = int(hf["mlp_ratio"]) * int(hf["d_model"])
  for field in ("d_model", "n_heads", "n_layers"):
    if hf.get(field) is None:
      raise ValueError(f"{where}: missing required LLaDA field {field!r}")
  return out


def _tensor_names_for(arch: str, table: dict) -> dict:
  """`_hf_names` table with the tensor names `arch` uses."""
  if arch != "LLaDAModelLM":
    return table
  out = {}
  for path, (name, *rest) in table.items():
    for old, new in _LLADA_TENSORS:
      name = name.replace(old, new)
    out[path] = (name, *rest)
  return out


def diffusion_tokens(path: str | os.PathLike) -> dict[str, Any]:
  """{mask_id, eos_id, shift_logits} of a Dream / LLaDA checkpoint directory
  (`mask_token_id` / `eos_token_id` of its config.json, None if absent;
  `shift_logits`: Dream predicts token i from the logits at i - 1)."""
  hf = _read_config(os.fspath(path))
  arch = _architecture(hf, os.path.join(os.fspath(path), CONFIG_FILE))
  return {"mask_id": hf.get("mask_token_id"), "eos_id": hf.get("eos_token_id"),
          "shift_logits": arch == "DreamModel"}


# Fields that mean a model jaxlab's decoder cannot represent (mixture of
# experts), each with what it would need.
_UNSUPPORTED_FIELDS = {
    "num_experts": "mixture-of-experts layers",
    "num_local_experts": "mixture-of-experts layers",
    "n_routed_experts": "mixture-of-experts layers",
}

# HF rope_type -> jaxlab.nn.rope registry name.
HF_ROPE_TYPES = {
    "default": "default",
    "linear": "pi",
    "dynamic": "dynamic_ntk",
    "yarn": "yarn",
    "llama3": "llama3",
}
# HF rope keys passed through under the same name.
_ROPE_OPTIONS = ("beta_fast", "beta_slow", "attention_factor", "mscale",
                 "mscale_all_dim", "low_freq_factor", "high_freq_factor",
                 "truncate")

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# -- config ------------------------------------------------------------------


def _architecture(hf: Mapping[str, Any], where: str) -> str:
  archs = hf.get("architectures") or []
  if not archs and hf.get("model_type") in _MODEL_TYPES:
    archs = [_MODEL_TYPES[hf["model_type"]]]
  if len(archs) != 1 or archs[0] not in SUPPORTED_ARCHITECTURES:
    found = archs or hf.get("model_type")
    raise ValueError(
        f"{where}: unsupported architecture {found!r} (field 'architectures'"
        f"/'model_type'); supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
  return archs[0]


def _rope_config(hf: Mapping[str, Any], where: str
                 ) -> tuple[float, dict[str, Any] | None]:
  """(rope_theta, jaxlab rope_scaling or None) from either config dialect."""
  params = hf.get("rope_parameters")
  if params is not None:
    if "rope_type" not in params and "type" not in params and any(
        isinstance(v, Mapping) for v in params.values()):
      raise ValueError(f"{where}: per-layer-type 'rope_parameters' are not "
                       "supported (Llama/Qwen2 use one RoPE for all layers)")
    params = dict(params)
  else:  # transformers 4 dialect
    params = dict(hf.get("rope_scaling") or {})
  theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
  if theta is None:
    theta = 10000.0
  prf = params.get("partial_rotary_factor",
                   hf.get("partial_rotary_factor", 1.0))
  if prf not in (None, 1, 1.0):
    raise ValueError(f"{where}: partial_rotary_factor={prf} is not supported "
                     "(only full rotary embeddings)")
  hf_type = params.get("rope_type", params.get("type", "default"))
  if hf_type not in HF_ROPE_TYPES:
    raise ValueError(
        f"{where}: unsupported rope type {hf_type!r} (field 'rope_type'); "
        f"supported: {', '.join(HF_ROPE_TYPES)}")
  method = HF_ROPE_TYPES[hf_type]
  if method == "default":
    return float(theta), None
  max_pos = hf.get("max_position_embeddings")
  # transformers gives a top-level original_max_position_embeddings (Phi-3
  # style) priority over the one inside the rope dict.
  original = (hf.get("original_max_position_embeddings")
              or params.get("original_max_position_embeddings") or max_pos)
  factor = params.get("factor")
  if factor is None and max_pos and original:
    factor = max_pos / original  # transformers' fallback (yarn, DeepSeek-V3)
  scaling: dict[str, Any] = {"method": method}
  if factor is not None:
    scaling["factor"] = float(factor)
  if original is not None:
    scaling["original_max_position"] = int(original)
  for key in _ROPE_OPTIONS:
    if params.get(key) is not None:
      scaling[key] = params[key]
  return float(theta), scaling


def _gemma3_rope(hf: Mapping[str, Any], where: str
                 ) -> tuple[float, dict[str, Any] | None, float]:
  """(rope_theta, rope_scaling, sliding_rope_theta) of a Gemma 3 config.

  transformers 5: `rope_parameters` per layer type ("full_attention",
  "sliding_attention"); transformers 4: `rope_theta` and `rope_scaling` of
  the global layers and `rope_local_base_freq` of the sliding ones, which
  always use plain RoPE.
  """
  params = hf.get("rope_parameters")
  if params is not None and any(isinstance(v, Mapping)
                                for v in params.values()):
    full = dict(params.get("full_attention") or {})
    local = dict(params.get("sliding_attention") or {})
  else:
    full = dict(params or hf.get("rope_scaling") or {})
    if full.get("rope_theta") is None:
      full["rope_theta"] = hf.get("rope_theta")
    local = {"rope_theta": hf.get("rope_local_base_freq")}
  if full.get("rope_theta") is None:
    full["rope_theta"] = _GEMMA3_THETA["full_attention"]
  local_type = local.get("rope_type", local.get("type", "default"))
  if local_type != "default":
    raise ValueError(f"{where}: rope type {local_type!r} on the sliding "
                     "layers is not supported (Gemma 3's local layers use "
                     "plain RoPE)")
  local_theta = local.get("rope_theta")
  if local_theta is None:
    local_theta = _GEMMA3_THETA["sliding_attention"]
  theta, scaling = _rope_config({**hf, "rope_parameters": full}, where)
  return theta, scaling, float(local_theta)


def _gemma3_config_from_hf(hf: Mapping[str, Any], *, dtype: str,
                           param_dtype: str | None, where: str,
                           **overrides: Any) -> decoder_lib.DecoderConfig:
  """`config_from_hf` of a `Gemma3ForCausalLM` (gemma3_text) config.

  Fields absent from the file take transformers' `Gemma3TextConfig`
  defaults. `attn_logit_softcapping` is dropped with a warning:
  transformers' Gemma 3 model does not apply it (only Gemma 2 does), so the
  imported model computes the logits transformers computes.
  """
  for field in ("vocab_size", "hidden_size", "intermediate_size",
                "num_hidden_layers", "num_attention_heads"):
    if hf.get(field) is None:
      raise ValueError(f"{where}: missing required field {field!r}")
  act = hf.get("hidden_activation") or hf.get("hidden_act") or (
      "gelu_pytorch_tanh")
  if act != "gelu_pytorch_tanh":
    raise ValueError(f"{where}: hidden_activation={act!r} is not supported "
                     "for Gemma 3; supported: gelu_pytorch_tanh")
  for field in ("attention_bias", "use_bidirectional_attention"):
    if hf.get(field):
      raise ValueError(f"{where}: {field}=true is not supported")
  num_layers = int(hf["num_hidden_layers"])
  layer_types = hf.get("layer_types")
  if not layer_types:
    pattern = int(hf.get("sliding_window_pattern")
                  or hf.get("_sliding_window_pattern") or 6)
    layer_types = ["sliding_attention" if (i + 1) % pattern
                   else "full_attention" for i in range(num_layers)]
  window = hf.get("sliding_window", 4096)
  if "sliding_attention" in layer_types and not window:
    raise ValueError(f"{where}: sliding_attention layers but no "
                     "sliding_window")
  theta, scaling, local_theta = _gemma3_rope(hf, where)
  if hf.get("attn_logit_softcapping") is not None:
    warnings.warn(
        f"{where}: attn_logit_softcapping={hf['attn_logit_softcapping']} is "
        "ignored, as transformers' Gemma3ForCausalLM ignores it",
        stacklevel=3)
  final_cap = hf.get("final_logit_softcapping")
  num_heads = int(hf["num_attention_heads"])
  fields = dict(
      vocab_size=int(hf["vocab_size"]),
      dim=int(hf["hidden_size"]),
      num_layers=num_layers,
      num_heads=num_heads,
      num_kv_heads=int(hf.get("num_key_value_heads", 4)),
      head_dim=int(hf.get("head_dim") or 256),
      mlp_dim=int(hf["intermediate_size"]),
      rope_theta=theta,
      rope_scaling=scaling,
      sliding_rope_theta=local_theta,
      layer_types=tuple(layer_types),
      sliding_window=int(window) if window else None,
      max_position_embeddings=int(hf.get("max_position_embeddings", 131072)),
      norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
      tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
      qk_norm=True,
      post_norms=True,
      norm_plus_one=True,
      mlp_activation="gelu_tanh",
      embed_scale=True,
      attn_scale=float(hf.get("query_pre_attn_scalar", 256)) ** -0.5,
      final_logit_softcap=None if final_cap is None else float(final_cap),
      dtype=dtype,
      param_dtype=param_dtype or dtype,
  )
  fields.update(overrides)
  return decoder_lib.DecoderConfig(**fields)


def config_from_hf(hf: Mapping[str, Any], *, dtype: str = "float32",
                   param_dtype: str | None = None, where: str = CONFIG_FILE,
                   **overrides: Any) -> decoder_lib.DecoderConfig:
  """A `DecoderConfig` from a parsed HF `config.json` (either dialect).

  Args:
    hf: the parsed config.json.
    dtype: compute dtype name ("float32", "bfloat16", "float16").
    param_dtype: parameter dtype name; defaults to `dtype`.
    where: file name used in error messages.
    **overrides: further `DecoderConfig` fields (e.g. `remat=True`).
  """
  arch = _architecture(hf, where)
  if arch == GEMMA3:
    return _gemma3_config_from_hf(hf, dtype=dtype, param_dtype=param_dtype,
                                  where=where, **overrides)
  if arch in DIFFUSION_ARCHITECTURES:
    overrides.setdefault("causal", False)
    return config_from_hf(_diffusion_as_causal(hf, arch, where), dtype=dtype,
                          param_dtype=param_dtype, where=where, **overrides)
  for field, what in _UNSUPPORTED_FIELDS.items():
    if hf.get(field):
      raise ValueError(f"{where}: {field}={hf[field]} ({what}) is not "
                       "supported by jaxlab's decoder")
  for field in ("vocab_size", "hidden_size", "intermediate_size",
                "num_hidden_layers", "num_attention_heads"):
    if hf.get(field) is None:
      raise ValueError(f"{where}: missing required field {field!r}")
  act = hf.get("hidden_act", "silu")
  if act not in ("silu", "swish"):
    raise ValueError(f"{where}: hidden_act={act!r} is not supported; "
                     "supported: silu")
  if hf.get("mlp_bias"):
    raise ValueError(f"{where}: mlp_bias=true is not supported")
  if arch != "Qwen2ForCausalLM" and hf.get("attention_bias"):
    raise ValueError(f"{where}: attention_bias=true (with o_proj bias) is not "
                     "supported")
  theta, scaling = _rope_config(hf, where)

  sliding_window = None
  if arch == "MistralForCausalLM" and hf.get("sliding_window"):
    layer_types = hf.get("layer_types")
    if layer_types and any(t != "sliding_attention" for t in layer_types):
      raise ValueError(
          f"{where}: layer_types={layer_types} mixes full and sliding "
          "attention; per-layer sliding windows are not supported")
    sliding_window = int(hf["sliding_window"])
  if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and hf.get(
      "use_sliding_window"):
    num_layers = hf["num_hidden_layers"]
    layer_types = hf.get("layer_types") or [
        "sliding_attention" if i >= hf.get("max_window_layers", 0)
        else "full_attention" for i in range(num_layers)]
    if all(t == "sliding_attention" for t in layer_types):
      sliding_window = int(hf["sliding_window"])
    elif any(t == "sliding_attention" for t in layer_types):
      raise ValueError(
          f"{where}: sliding window on only some layers (layer_types="
          f"{layer_types}, max_window_layers={hf.get('max_window_layers')}) "
          "is not supported; jaxlab's decoder applies one window to all")

  num_heads = hf["num_attention_heads"]
  fields = dict(
      vocab_size=int(hf["vocab_size"]),
      dim=int(hf["hidden_size"]),
      num_layers=int(hf["num_hidden_layers"]),
      num_heads=int(num_heads),
      num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
      head_dim=hf.get("head_dim"),
      mlp_dim=int(hf["intermediate_size"]),
      rope_theta=theta,
      rope_scaling=scaling,
      max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
      norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
      qkv_bias=arch == "Qwen2ForCausalLM",
      qk_norm=arch == "Qwen3ForCausalLM",
      sliding_window=sliding_window,
      dtype=dtype,
      param_dtype=param_dtype or dtype,
  )
  fields.update(overrides)
  return decoder_lib.DecoderConfig(**fields)


def _gemma3_like(cfg: decoder_lib.DecoderConfig) -> bool:
  """Whether `cfg` sets a switch only Gemma 3 has (export as Gemma 3)."""
  return (cfg.post_norms or cfg.norm_plus_one or cfg.embed_scale
          or cfg.mlp_activation != "silu" or cfg.attn_scale is not None
          or cfg.attn_logit_softcap is not None
          or cfg.final_logit_softcap is not None)


def _rope_scaling_to_hf(cfg: decoder_lib.DecoderConfig
                        ) -> dict[str, Any] | None:
  """HF `rope_scaling` (transformers-4 dialect) of `cfg.rope_scaling`."""
  if cfg.rope_scaling is None:
    return None
  options = dict(cfg.rope_scaling)
  method = options.pop("method")
  inverse = {v: k for k, v in HF_ROPE_TYPES.items()}
  if method not in inverse:
    raise ValueError(f"RoPE scaling {method!r} has no transformers "
                     f"equivalent; exportable: {', '.join(inverse)}")
  if method == "default":
    return None
  rs = {"rope_type": inverse[method]}
  if "original_max_position" in options:
    rs["original_max_position_embeddings"] = options.pop(
        "original_max_position")
  rs.update(options)
  return rs


def _gemma3_config_to_hf(cfg: decoder_lib.DecoderConfig) -> dict[str, Any]:
  """transformers-4 dialect `Gemma3ForCausalLM` (gemma3_text) config.json."""
  wrong = {name: getattr(cfg, name) for name, want in _GEMMA3_SWITCHES.items()
           if getattr(cfg, name) != want}
  if wrong:
    raise ValueError(
        f"a decoder with Gemma switches exports as Gemma3ForCausalLM, which "
        f"needs {_GEMMA3_SWITCHES}; this config has {wrong}"
        + (" (transformers' Gemma 3 does not apply attn_logit_softcapping)"
           if "attn_logit_softcap" in wrong else ""))
  specs = cfg.layer_specs
  sliding = [spec.sliding_window is not None for spec in specs]
  if any(sliding) and cfg.sliding_rope_theta is None and (
      cfg.rope_scaling is not None):
    raise ValueError("Gemma 3's sliding layers use plain RoPE; this config "
                     f"applies rope_scaling={dict(cfg.rope_scaling)} to them "
                     "(set sliding_rope_theta)")
  hd = cfg.resolved_head_dim
  qpas = hd if cfg.attn_scale is None else cfg.attn_scale ** -2
  if abs(qpas - round(qpas)) > 1e-6 * qpas:
    raise ValueError(f"attn_scale={cfg.attn_scale}: Gemma 3's "
                     "query_pre_attn_scalar (attn_scale ** -2) must be an "
                     f"integer, got {qpas}")
  local_theta = (cfg.rope_theta if cfg.sliding_rope_theta is None
                 else cfg.sliding_rope_theta)
  return {
      "architectures": [GEMMA3],
      "model_type": "gemma3_text",
      "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.dim,
      "intermediate_size": cfg.mlp_dim,
      "num_hidden_layers": cfg.num_layers,
      "num_attention_heads": cfg.num_heads,
      "num_key_value_heads": cfg.num_kv_heads,
      "head_dim": hd,
      "hidden_activation": "gelu_pytorch_tanh",
      "max_position_embeddings": cfg.max_position_embeddings,
      "rms_norm_eps": cfg.norm_eps,
      "rope_theta": cfg.rope_theta,
      "rope_local_base_freq": local_theta,
      "rope_scaling": _rope_scaling_to_hf(cfg),
      "layer_types": ["sliding_attention" if s else "full_attention"
                      for s in sliding],
      "sliding_window": cfg.sliding_window,
      "query_pre_attn_scalar": int(round(qpas)),
      "attn_logit_softcapping": None,
      "final_logit_softcapping": cfg.final_logit_softcap,
      "attention_bias": False,
      "tie_word_embeddings": cfg.tie_embeddings,
      "torch_dtype": cfg.param_dtype,
  }


def config_to_hf(cfg: decoder_lib.DecoderConfig) -> dict[str, Any]:
  """transformers-4 dialect config.json.

  The architecture follows the config: any Gemma switch (post_norms,
  norm_plus_one, embed_scale, a GeGLU MLP, attn_scale, soft-capping) ->
  Gemma 3 (`Gemma3ForCausalLM`, all of its switches required), q/k norm ->
  Qwen3, qkv bias -> Qwen2, a sliding window otherwise -> Mistral, else
  Llama.
  """
  if _gemma3_like(cfg):
    return _gemma3_config_to_hf(cfg)
  if not cfg.causal:
    raise ValueError("a bidirectional decoder (causal=False) has no "
                     "Llama/Qwen2 equivalent")
  if cfg.nope_layers:
    raise ValueError(f"nope_layers={cfg.nope_layers} has no Llama/Qwen2 "
                     "equivalent")
  if cfg.sliding_rope_theta is not None or any(
      spec.sliding_window != cfg.sliding_window for spec in cfg.layer_specs):
    raise ValueError(f"per-layer attention (layer_types={cfg.layer_types}, "
                     f"sliding_rope_theta={cfg.sliding_rope_theta}) has no "
                     "Llama/Qwen2/Mistral equivalent")
  if cfg.qk_norm and cfg.qkv_bias:
    raise ValueError("q/k norm together with qkv biases has no transformers "
                     "architecture (Qwen3 has no biases)")
  if cfg.qk_norm:
    arch = "Qwen3ForCausalLM"
  elif cfg.qkv_bias:
    arch = "Qwen2ForCausalLM"
  elif cfg.sliding_window is not None:
    arch = "MistralForCausalLM"
  else:
    arch = "LlamaForCausalLM"
  model_type = {v: k for k, v in _MODEL_TYPES.items()}[arch]
  hf: dict[str, Any] = {
      "architectures": [arch],
      "model_type": model_type,
      "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.dim,
      "intermediate_size": cfg.mlp_dim,
      "num_hidden_layers": cfg.num_layers,
      "num_attention_heads": cfg.num_heads,
      "num_key_value_heads": cfg.num_kv_heads,
      "head_dim": cfg.resolved_head_dim,
      "hidden_act": "silu",
      "max_position_embeddings": cfg.max_position_embeddings,
      "rms_norm_eps": cfg.norm_eps,
      "rope_theta": cfg.rope_theta,
      "rope_scaling": None,
      "tie_word_embeddings": cfg.tie_embeddings,
      "torch_dtype": cfg.param_dtype,
  }
  if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
    hf["use_sliding_window"] = cfg.sliding_window is not None
    hf["sliding_window"] = cfg.sliding_window
    hf["max_window_layers"] = 0
    if arch == "Qwen3ForCausalLM":
      hf["attention_bias"] = False
  else:
    hf["attention_bias"] = False
    hf["mlp_bias"] = False
    if arch == "MistralForCausalLM":
      hf["sliding_window"] = cfg.sliding_window
  if cfg.rope_scaling is not None:
    options = dict(cfg.rope_scaling)
    method = options.pop("method")
    inverse = {v: k for k, v in HF_ROPE_TYPES.items()}
    if method not in inverse:
      raise ValueError(f"RoPE scaling {method!r} has no transformers "
                       f"equivalent; exportable: {', '.join(inverse)}")
    if method != "default":
      rs = {"rope_type": inverse[method]}
      if "original_max_position" in options:
        rs["original_max_position_embeddings"] = options.pop(
            "original_max_position")
      rs.update(options)
      hf["rope_scaling"] = rs
  return hf


# -- weights -----------------------------------------------------------------


def _hf_names(cfg: decoder_lib.DecoderConfig
              ) -> dict[tuple[Any, ...], tuple[str, tuple[int, ...],
                                               Callable, Callable]]:
  """jaxlab param path -> (HF name, HF shape, hf_to_ours, ours_to_hf)."""
  d, v, f = cfg.dim, cfg.vocab_size, cfg.mlp_dim
  n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
  same = lambda x: x  # pylint: disable=unnecessary-lambda-assignment
  t = lambda x: x.T  # pylint: disable=unnecessary-lambda-assignment

  def in_proj(heads):  # [heads*H, D] <-> [D, heads, H]
    return (lambda x: x.T.reshape(d, heads, h),
            lambda x: x.reshape(d, heads * h).T)

  def bias(heads):
    return (lambda x: x.reshape(heads, h), lambda x: x.reshape(heads * h))

  out_proj = (lambda x: x.T.reshape(n, h, d), lambda x: x.reshape(n * h, d).T)
  table = {
      ("embed_vd",): ("model.embed_tokens.weight", (v, d), same, same),
      ("final_norm", "scale"): ("model.norm.weight", (d,), same, same),
  }
  if not cfg.tie_embeddings:
    table[("lm_head_dv",)] = ("lm_head.weight", (v, d), t, t)
  for i in range(cfg.num_layers):
    p = f"model.layers.{i}."
    rows = {
        ("attn_norm", "scale"): ("input_layernorm.weight", (d,), same, same),
        ("mlp_norm", "scale"): ("post_attention_layernorm.weight", (d,),
                                same, same),
        ("attn", "q_dnh"): ("self_attn.q_proj.weight", (n * h, d),
                            *in_proj(n)),
        ("attn", "k_dkh"): ("self_attn.k_proj.weight", (k * h, d),
                            *in_proj(k)),
        ("attn", "v_dkh"): ("self_attn.v_proj.weight", (k * h, d),
                            *in_proj(k)),
        ("attn", "o_nhd"): ("self_attn.o_proj.weight", (d, n * h), *out_proj),
        ("mlp", "gate_df"): ("mlp.gate_proj.weight", (f, d), t, t),
        ("mlp", "up_df"): ("mlp.up_proj.weight", (f, d), t, t),
        ("mlp", "down_fd"): ("mlp.down_proj.weight", (d, f), t, t),
    }
    if cfg.post_norms:  # Gemma: post-attention / pre- and post-MLP norms
      rows[("mlp_norm", "scale")] = ("pre_feedforward_layernorm.weight",
                                     (d,), same, same)
      rows[("post_attn_norm", "scale")] = ("post_attention_layernorm.weight",
                                           (d,), same, same)
      rows[("post_mlp_norm", "scale")] = (
          "post_feedforward_layernorm.weight", (d,), same, same)
    if cfg.qk_norm:
      rows[("attn", "q_norm", "scale")] = ("self_attn.q_norm.weight", (h,),
                                           same, same)
      rows[("attn", "k_norm", "scale")] = ("self_attn.k_norm.weight", (h,),
                                           same, same)
    if cfg.qkv_bias:
      rows[("attn", "q_bias_nh")] = ("self_attn.q_proj.bias", (n * h,),
                                     *bias(n))
      rows[("attn", "k_bias_kh")] = ("self_attn.k_proj.bias", (k * h,),
                                     *bias(k))
      rows[("attn", "v_bias_kh")] = ("self_attn.v_proj.bias", (k * h,),
                                     *bias(k))
    for path, row in rows.items():
      table[("layers", i) + path] = (p + row[0],) + row[1:]
  return table


def _layer_paths(cfg: decoder_lib.DecoderConfig, param_path: tuple
                 ) -> list[tuple[Any, ...]] | None:
  """Unrolled paths ("layers", i, ...) of the layers stacked in a scanned
  param ("scan_blocks", j, ...), in stacking order; None for other params."""
  if not param_path or param_path[0] != "scan_blocks":
    return None
  return [("layers", i) + tuple(param_path[2:])
          for i in cfg.scan_layer_ids(int(param_path[1]))]


def _weight_files(path: str) -> dict[str, str]:
  """HF tensor name -> file path (single file or sharded index)."""
  index_path = os.path.join(path, INDEX_FILE)
  single_path = os.path.join(path, SINGLE_FILE)
  if os.path.exists(index_path):
    with open(index_path) as fh:
      index = json.load(fh)
    if "weight_map" not in index:
      raise ValueError(f"{index_path}: missing field 'weight_map'")
    files = {}
    for name, shard in index["weight_map"].items():
      shard_path = os.path.join(path, shard)
      if not os.path.exists(shard_path):
        raise FileNotFoundError(
            f"shard file {shard_path} (listed in {index_path} for tensor "
            f"{name!r}) does not exist")
      files[name] = shard_path
    return files
  if os.path.exists(single_path):
    with _open_safetensors(single_path) as fh:
      return {name: single_path for name in fh.keys()}
  found = sorted(os.listdir(path))
  raise FileNotFoundError(
      f"no {SINGLE_FILE} or {INDEX_FILE} in {path} (found: {found}); only "
      "safetensors checkpoints are supported")


def _read_config(path: str) -> dict[str, Any]:
  config_path = os.path.join(path, CONFIG_FILE)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"checkpoint directory {path} does not exist")
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{config_path} not found: a HF checkpoint "
                            "directory needs a config.json")
  try:
    with open(config_path, encoding="utf-8") as fh:
      hf = json.load(fh)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{config_path}: not valid JSON ({e})") from None
  if not isinstance(hf, dict):
    raise ValueError(f"{config_path}: expected a JSON object, got "
                     f"{type(hf).__name__}")
  return hf


def _open_safetensors(file: str):
  """`safe_open` whose errors (truncated, corrupt header) name the file."""
  try:
    return safe_open(file, framework="numpy")
  except Exception as e:  # safetensors raises its own SafetensorError
    raise ValueError(f"{file}: not a readable safetensors file ({e}); the "
                     "download may be incomplete") from None


def _fit_sharding(sharding: jax.sharding.NamedSharding,
                  shape: tuple[int, ...]) -> jax.sharding.NamedSharding:
  """Replicates the dims a sharding does not divide evenly.

  Real checkpoints often have fewer KV heads than the tensor axis has
  devices (or an odd vocabulary); those dims stay replicated rather than
  failing.
  """
  spec = list(sharding.spec) + [None] * (len(shape) - len(sharding.spec))
  for i, axes in enumerate(spec):
    if axes is None:
      continue
    names = axes if isinstance(axes, tuple) else (axes,)
    ways = int(np.prod([sharding.mesh.shape[a] for a in names]))
    if shape[i] % ways:
      spec[i] = None
  return jax.sharding.NamedSharding(sharding.mesh,
                                    jax.sharding.PartitionSpec(*spec))


def load(path: str | os.PathLike, *, dtype: str = "float32",
         param_dtype: str | None = None, mesh: jax.sharding.Mesh | None = None,
         rules: Any = None, **config_overrides: Any
         ) -> tuple[decoder_lib.Decoder, decoder_lib.DecoderConfig]:
  """Loads a HF Llama / Qwen2 / Qwen3 / Mistral / Gemma 3 checkpoint dir
  (a Gemma 3 multimodal one as its language model; a Qwen2.5-VL / Qwen2-VL
  one as `qwen2_vl.Qwen2VL`).

  Args:
    path: directory with config.json and model.safetensors (or a sharded
      model.safetensors.index.json and its shards).
    dtype: compute dtype ("float32", "bfloat16", "float16").
    param_dtype: parameter dtype; defaults to `dtype`.
    mesh, rules: optional mesh and logical-axis rules; with them, every
      parameter is placed with its `NamedSharding` as it is read (a dim the
      mesh axes do not divide, e.g. 2 KV heads on 4 tensor devices, stays
      replicated).
    **config_overrides: further `DecoderConfig` fields (e.g. `remat=True`,
      `attention_impl="cudnn"`, `scan_layers=True`: a scanned model whose
      stacked params are the layers' HF tensors stacked).

  Returns:
    (model, cfg): the filled `Decoder` and its `DecoderConfig`.

  Raises:
    FileNotFoundError: missing directory, config.json or shard file.
    ValueError: unsupported architecture/field, missing tensor or a tensor
      whose shape differs from the config's.
  """
  path = os.fspath(path)
  hf_json = _read_config(path)
  if is_qwen2_vl_config(hf_json):  # (Qwen2VL, Qwen2VLConfig)
    return load_qwen2_vl(path, dtype=dtype, param_dtype=param_dtype,
                         mesh=mesh, rules=rules, **config_overrides)
  rename = lambda name: name  # pylint: disable=unnecessary-lambda-assignment
  files = None
  if is_gemma3_multimodal_config(hf_json):
    files = _weight_files(path)
    hf_json, rename = _gemma3_language_model(hf_json, path, files)
  cfg = config_from_hf(hf_json, dtype=dtype,
                       param_dtype=param_dtype,
                       where=os.path.join(path, CONFIG_FILE),
                       **config_overrides)
  files = _weight_files(path) if files is None else files
  where_index = os.path.join(path, INDEX_FILE if os.path.exists(
      os.path.join(path, INDEX_FILE)) else SINGLE_FILE)
  handles: dict[str, Any] = {}

  def read(name, hf_shape):
    """One HF tensor (host numpy), its name and shape checked."""
    name = rename(name)
    if name not in files:
      raise ValueError(f"{where_index}: missing tensor {name!r}")
    file = files[name]
    if file not in handles:
      handles[file] = _open_safetensors(file).__enter__()
    found_shape = tuple(handles[file].get_slice(name).get_shape())
    if found_shape != hf_shape:
      raise ValueError(
          f"{file}: tensor {name!r} has shape {found_shape}, expected "
          f"{hf_shape} from {CONFIG_FILE}")
    try:
      return handles[file].get_tensor(name)
    except Exception as e:  # a shard cut short after its header
      raise ValueError(f"{file}: cannot read tensor {name!r} ({e}); the "
                       "file may be truncated") from None

  try:
    model = load_tensors(cfg, read, mesh=mesh, rules=rules,
                         architecture=_architecture(hf_json, CONFIG_FILE))
  finally:
    for fh in handles.values():
      fh.__exit__(None, None, None)
  return model, cfg


GEMMA3_MULTIMODAL = "Gemma3ForConditionalGeneration"
# Where its text tensors live: transformers 5, then the Hub's older layout.
_GEMMA3_TEXT_PREFIXES = (("model.", "model.language_model."),
                         ("model.", "language_model.model."))


def is_gemma3_multimodal_config(hf: Mapping[str, Any]) -> bool:
  """A `Gemma3ForConditionalGeneration` (model_type gemma3) config.json."""
  archs = hf.get("architectures") or []
  return (GEMMA3_MULTIMODAL in archs
          or (not archs and hf.get("model_type") == "gemma3"))


def _gemma3_language_model(hf: Mapping[str, Any], path: str,
                           files: Mapping[str, str]
                           ) -> tuple[dict[str, Any], Callable[[str], str]]:
  """(the `Gemma3ForCausalLM` config of its `text_config`, HF text tensor
  name -> the name in this checkpoint's files) of a Gemma 3 multimodal
  checkpoint whose tensors are `files` (`_weight_files`); warns that its
  vision tower is not loaded."""
  where = os.path.join(path, CONFIG_FILE)
  text = dict(hf.get("text_config") or {})
  if not text.get("hidden_size"):
    raise ValueError(f"{where}: {GEMMA3_MULTIMODAL} without a text_config "
                     "(hidden_size missing)")
  text.update(architectures=[GEMMA3], model_type="gemma3_text")
  # The embedding tie is the outer config's (transformers reads it there).
  text.setdefault("tie_word_embeddings", hf.get("tie_word_embeddings", True))
  prefixes = [p for p in _GEMMA3_TEXT_PREFIXES
              if f"{p[1]}embed_tokens.weight" in files]
  if not prefixes:
    raise ValueError(
        f"{path}: no Gemma 3 language-model tensors (looked for "
        + " or ".join(f"{p[1]}embed_tokens.weight"
                      for p in _GEMMA3_TEXT_PREFIXES) + ")")
  ours, theirs = prefixes[0]
  warnings.warn(f"{path}: {GEMMA3_MULTIMODAL}: loading its language model "
                "only (Gemma3ForCausalLM); the vision tower and projector "
                "are not read", stacklevel=3)

  def rename(name: str) -> str:
    return theirs + name[len(ours):] if name.startswith(ours) else name
  return text, rename


def tensor_shapes(cfg: decoder_lib.DecoderConfig, *,
                  architecture: str | None = None
                  ) -> dict[str, tuple[int, ...]]:
  """HF tensor name -> HF-layout shape of every tensor a `cfg` model is
  made of: the names `load_tensors` asks for and `save` writes
  (`architecture`: the config.json architecture whose tensor names to use,
  e.g. "LLaDAModelLM"; None: the Llama-family names)."""
  table = _tensor_names_for(architecture or "", _hf_names(cfg))
  return {name: shape for name, shape, _, _ in table.values()}


def load_tensors(cfg: decoder_lib.DecoderConfig,
                 get_tensor: Callable[[str, tuple[int, ...]], Any], *,
                 mesh: jax.sharding.Mesh | None = None, rules: Any = None,
                 architecture: str | None = None) -> decoder_lib.Decoder:
  """A `Decoder` of `cfg` filled from HF-layout tensors given by name.

  The loader behind `load` (safetensors) and `jaxlab.io.gguf.load`: any
  other source of transformers-named tensors (another file format, an
  in-memory state dict) fills a model the same way.

  Args:
    cfg: the architecture (e.g. from `config_from_hf`).
    get_tensor: `get_tensor(name, shape) -> array`: the HF tensor `name`
      (e.g. "model.layers.0.self_attn.q_proj.weight") in transformers'
      layout, whose expected HF shape is `shape` (`tensor_shapes(cfg)`
      lists them all). It should raise a ValueError naming its source when
      the tensor is missing or has another shape; a returned array of the
      wrong shape raises a ValueError here. It is called once per tensor
      (per layer of a scanned param), so a source can read lazily.
    mesh, rules: optional mesh and logical-axis rules; every parameter is
      placed with its `NamedSharding` as it is converted (a dim the mesh
      axes do not divide stays replicated).
    architecture: as in `tensor_shapes` (the names asked for).

  Returns:
    The filled `Decoder` (params in `cfg.param_dtype`; a scanned config's
    stacked params are the layers' tensors stacked on the host).
  """
  abstract = nnx.eval_shape(lambda: decoder_lib.Decoder(cfg,
                                                        rngs=nnx.Rngs(0)))
  graphdef, abs_state = nnx.split(abstract)
  shardings = None
  if mesh is not None:
    with nnx.logical_axis_rules(rules or ()):
      shardings = dict(nnx.to_flat_state(
          nnx.get_named_sharding(abs_state, mesh)))
  table = _tensor_names_for(architecture or "", _hf_names(cfg))
  target_np_dtype = np.dtype(decoder_lib.to_dtype(cfg.param_dtype))

  def read(param_path):
    """One unrolled param, converted from its HF tensor (host numpy)."""
    if param_path not in table:
      raise ValueError(f"internal: no HF tensor mapped to {param_path}")
    name, hf_shape, to_ours, _ = table[param_path]
    raw = np.asarray(get_tensor(name, hf_shape))
    if tuple(raw.shape) != tuple(hf_shape):
      raise ValueError(f"tensor {name!r} has shape {tuple(raw.shape)}, "
                       f"expected {tuple(hf_shape)}")
    return to_ours(raw).astype(target_np_dtype)

  flat = []
  for param_path, var in nnx.to_flat_state(abs_state):
    stacked = _layer_paths(cfg, param_path)
    if stacked is None:
      arr = read(param_path)
    else:  # scanned: the layers' tensors stacked on the host
      arr = np.stack([read(p) for p in stacked])
    expected = var.get_value().shape
    assert arr.shape == expected, (param_path, arr.shape, expected)
    if shardings is not None:
      value = jax.device_put(arr, _fit_sharding(
          shardings[param_path].get_value(), arr.shape))
    else:
      value = jnp.asarray(arr)
    flat.append((param_path, var.replace(value)))
  return nnx.merge(graphdef, nnx.from_flat_state(flat))


def _put_hf_tensor(tensors: dict, table, param_path, piece_path, piece
                   ) -> None:
  """`tensors[HF name] = ` our `piece` (of `param_path`) in HF's layout,
  checked against the table's HF shape (`save` and `save_qwen2_vl`)."""
  if piece_path not in table:
    raise ValueError(f"parameter {param_path} has no HF equivalent")
  name, hf_shape, _, to_hf = table[piece_path]
  arr = np.ascontiguousarray(to_hf(piece))
  if arr.shape != hf_shape:
    raise ValueError(f"parameter {param_path} gives {name!r} of shape "
                     f"{arr.shape}, expected {hf_shape}")
  tensors[name] = arr


def save(model: decoder_lib.Decoder, cfg: decoder_lib.DecoderConfig,
         path: str | os.PathLike) -> str:
  """Writes `config.json` (transformers-4 dialect) and `model.safetensors`.

  Tensors keep the parameter dtype (bfloat16 stays bfloat16). The result
  loads with `transformers.AutoModelForCausalLM.from_pretrained` and with
  `load`.
  """
  path = os.fspath(path)
  if isinstance(cfg, qwen2_vl.Qwen2VLConfig):  # Qwen2.5-VL / Qwen2-VL
    return save_qwen2_vl(model, cfg, path)
  hf_config = config_to_hf(cfg)
  os.makedirs(path, exist_ok=True)
  table = _hf_names(cfg)
  tensors = {}
  for param_path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    value = np.asarray(var.get_value())
    stacked = _layer_paths(model.cfg, param_path)
    # A scanned param holds the layers `stacked` along its first axis.
    pieces = ([(param_path, value)] if stacked is None
              else list(zip(stacked, value)))
    for piece_path, piece in pieces:
      _put_hf_tensor(tensors, table, param_path, piece_path, piece)
  safetensors.numpy.save_file(tensors, os.path.join(path, SINGLE_FILE),
                              metadata={"format": "pt"})
  with open(os.path.join(path, CONFIG_FILE), "w") as fh:
    json.dump(hf_config, fh, indent=2)
  return path


# -- Qwen2.5-VL / Qwen2-VL (jaxlab.models.qwen2_vl) ---------------------


def qwen2_vl_variant(hf: Mapping[str, Any]) -> str | None:
  """"qwen2_5_vl" / "qwen2_vl" for such a config.json, else None."""
  archs = hf.get("architectures") or []
  if len(archs) == 1 and archs[0] in qwen2_vl.ARCHITECTURES:
    return qwen2_vl.ARCHITECTURES[archs[0]]
  if not archs and hf.get("model_type") in qwen2_vl.MODEL_TYPES:
    return hf["model_type"]
  return None


def is_qwen2_vl_config(hf: Mapping[str, Any]) -> bool:
  return qwen2_vl_variant(hf) is not None


def qwen2_vl_config_from_hf(hf: Mapping[str, Any], *, dtype: str = "float32",
                            param_dtype: str | None = None,
                            where: str = "config.json", **overrides
                            ) -> qwen2_vl.Qwen2VLConfig:
  """`qwen2_vl.Qwen2VLConfig` from a Qwen2.5-VL / Qwen2-VL config.json
  (transformers 5 nested `text_config` or the older flat text fields)."""
  text = dict(hf.get("text_config") or {})
  if not text.get("hidden_size"):
    text = {k: v for k, v in hf.items() if k not in ("vision_config",
                                                     "text_config")}
  rope = dict(text.get("rope_parameters") or text.get("rope_scaling")
              or hf.get("rope_scaling") or {})
  section = rope.get("mrope_section", (16, 24, 24))
  rtype = rope.get("rope_type", rope.get("type", "default"))
  if rtype not in ("default", "mrope"):
    raise ValueError(f"{where}: rope type {rtype!r} is not supported for "
                     "Qwen2.5-VL (multimodal RoPE only)")
  theta = rope.get("rope_theta", text.get("rope_theta",
                                          hf.get("rope_theta", 1e6)))
  tie = hf.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
  text.update({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
               "rope_parameters": {"rope_type": "default",
                                   "rope_theta": theta},
               "tie_word_embeddings": tie})
  text.pop("rope_scaling", None)
  tcfg = config_from_hf(text, dtype=dtype, param_dtype=param_dtype,
                               where=where, **overrides)
  variant = qwen2_vl_variant(hf) or "qwen2_5_vl"
  v = dict(hf.get("vision_config") or {})
  if "in_chans" in v:  # the Hub's config.json spelling
    v.setdefault("in_channels", v.pop("in_chans"))
  if variant == "qwen2_vl":  # embed_dim = tower width, hidden_size = LM's
    embed = int(v.get("embed_dim", 1280))
    v = {**v, "hidden_size": embed,
         "out_hidden_size": int(v.get("hidden_size", tcfg.dim)),
         "intermediate_size": int(embed * v.get("mlp_ratio", 4)),
         "hidden_act": v.get("hidden_act", "quick_gelu"),
         "fullatt_block_indexes": ()}
    v.pop("window_size", None)
  act = v.get("hidden_act", "silu")
  if act not in qwen2_vl.ACTIVATIONS:
    raise ValueError(f"{where}: vision hidden_act={act!r} unsupported; "
                     f"supported: {', '.join(qwen2_vl.ACTIVATIONS)}")
  vrope = v.get("rope_parameters") or {}
  fields = {f.name for f in dataclasses.fields(qwen2_vl.VisionConfig)}
  vkw = {k: v[k] for k in fields if k in v and v[k] is not None}
  vkw.pop("rope_theta", None)
  vkw["variant"] = variant
  vcfg = qwen2_vl.VisionConfig(
      **vkw, rope_theta=float(vrope.get("rope_theta", 10000.0)),
      dtype=dtype, param_dtype=param_dtype or dtype)
  return qwen2_vl.Qwen2VLConfig(
      text=tcfg, vision=vcfg,
      image_token_id=int(hf.get("image_token_id", 151655)),
      video_token_id=int(hf.get("video_token_id", 151656)),
      vision_start_token_id=int(hf.get("vision_start_token_id", 151652)),
      mrope_section=tuple(section))


def _qwen2_vl_vision_names(cfg: qwen2_vl.VisionConfig, prefix: str):
  """jaxlab path under `visual` -> (HF name, HF shape, hf_to_ours,
  ours_to_hf)."""
  d, f = cfg.hidden_size, cfg.intermediate_size
  m = d * cfg.spatial_merge_size ** 2
  layer_norm = cfg.variant == "qwen2_vl"
  same = lambda x: x  # pylint: disable=unnecessary-lambda-assignment
  t = lambda x: x.T  # pylint: disable=unnecessary-lambda-assignment
  conv = (d, cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size,
          cfg.patch_size)
  table = {
      ("patch_embed", "kernel"): (
          "patch_embed.proj.weight", conv, lambda x: x.reshape(d, -1).T,
          lambda x: x.T.reshape(conv)),
      ("merger", "ln_q", "scale"): ("merger.ln_q.weight", (d,), same),
      ("merger", "fc1", "kernel"): ("merger.mlp.0.weight", (m, m), t),
      ("merger", "fc1", "bias"): ("merger.mlp.0.bias", (m,), same),
      ("merger", "fc2", "kernel"): ("merger.mlp.2.weight",
                                    (cfg.out_hidden_size, m), t),
      ("merger", "fc2", "bias"): ("merger.mlp.2.bias",
                                  (cfg.out_hidden_size,), same),
  }
  if layer_norm:
    table[("merger", "ln_q", "bias")] = ("merger.ln_q.bias", (d,), same)
  for i in range(cfg.depth):
    rows = {
        ("norm1", "scale"): ("norm1.weight", (d,), same),
        ("norm2", "scale"): ("norm2.weight", (d,), same),
        ("qkv", "kernel"): ("attn.qkv.weight", (3 * d, d), t),
        ("qkv", "bias"): ("attn.qkv.bias", (3 * d,), same),
        ("proj", "kernel"): ("attn.proj.weight", (d, d), t),
        ("proj", "bias"): ("attn.proj.bias", (d,), same),
    }
    if layer_norm:
      rows.update({
          ("norm1", "bias"): ("norm1.bias", (d,), same),
          ("norm2", "bias"): ("norm2.bias", (d,), same),
          ("fc1", "kernel"): ("mlp.fc1.weight", (f, d), t),
          ("fc1", "bias"): ("mlp.fc1.bias", (f,), same),
          ("fc2", "kernel"): ("mlp.fc2.weight", (d, f), t),
          ("fc2", "bias"): ("mlp.fc2.bias", (d,), same),
      })
    else:
      rows.update({
          ("gate_proj", "kernel"): ("mlp.gate_proj.weight", (f, d), t),
          ("gate_proj", "bias"): ("mlp.gate_proj.bias", (f,), same),
          ("up_proj", "kernel"): ("mlp.up_proj.weight", (f, d), t),
          ("up_proj", "bias"): ("mlp.up_proj.bias", (f,), same),
          ("down_proj", "kernel"): ("mlp.down_proj.weight", (d, f), t),
          ("down_proj", "bias"): ("mlp.down_proj.bias", (d,), same),
      })
    for path, row in rows.items():
      table[("blocks", i) + path] = (f"blocks.{i}." + row[0],) + row[1:]
  # Every other entry is the identity or a transpose: its own inverse.
  table = {k: v if len(v) == 4 else v + (v[2],) for k, v in table.items()}
  return {("visual",) + k: (prefix + v[0],) + v[1:] for k, v in table.items()}


def _qwen2_vl_tensor_table(cfg: qwen2_vl.Qwen2VLConfig,
                           lm_prefix: str = "model.",
                           vis_prefix: str = "visual."):
  """jaxlab param path -> (HF name, HF shape, hf_to_ours, ours_to_hf) of
  the whole model (text tensors under `lm_prefix`, the tower's under
  `vis_prefix`; the defaults are the Hub's names)."""
  table = {}
  for p, (name, *rest) in _hf_names(cfg.text).items():
    if name.startswith("model."):
      name = lm_prefix + name[len("model."):]
    table[("language_model",) + p] = (name, *rest)
  table.update(_qwen2_vl_vision_names(cfg.vision, vis_prefix))
  return table


def load_qwen2_vl(path: str | os.PathLike, *, dtype: str = "float32",
                  param_dtype: str | None = None,
                  mesh: jax.sharding.Mesh | None = None, rules: Any = None,
                  **config_overrides
                  ) -> tuple[qwen2_vl.Qwen2VL, qwen2_vl.Qwen2VLConfig]:
  """Loads a HF Qwen2.5-VL / Qwen2-VL safetensors checkpoint (no torch).

  Both tensor layouts are read: the Hub's (`visual.*`, `model.layers.*`,
  `lm_head`) and transformers 5's `save_pretrained` (`model.visual.*`,
  `model.language_model.*`, `lm_head`). `config_overrides` go to the text
  `DecoderConfig` (e.g. `scan_layers=True`). With `mesh` (and logical-axis
  `rules`), every parameter is placed with its `NamedSharding` as it is
  read: the language model's by its logical axes, as `load` places a
  decoder (dims the mesh does not divide stay replicated); the vision
  tower's, which carry no logical axes, replicated. (`jaxlab.io.hf.load`
  dispatches here.)"""
  path = os.fspath(path)
  hf_json = _read_config(path)
  where = os.path.join(path, CONFIG_FILE)
  cfg = qwen2_vl_config_from_hf(hf_json, dtype=dtype,
                                param_dtype=param_dtype, where=where,
                                **config_overrides)
  files = _weight_files(path)
  if "model.language_model.embed_tokens.weight" in files:
    lm_prefix, vis_prefix = "model.language_model.", "model.visual."
  else:
    lm_prefix, vis_prefix = "model.", "visual."
  table = _qwen2_vl_tensor_table(cfg, lm_prefix, vis_prefix)
  if not cfg.text.tie_embeddings and "lm_head.weight" not in files:
    raise ValueError(f"{path}: missing tensor 'lm_head.weight'")
  abstract = nnx.eval_shape(lambda: qwen2_vl.Qwen2VL(cfg, rngs=nnx.Rngs(0)))
  graphdef, abs_state = nnx.split(abstract)
  shardings = None
  if mesh is not None:
    with nnx.logical_axis_rules(rules or ()):
      shardings = dict(nnx.to_flat_state(
          nnx.get_named_sharding(abs_state, mesh)))
  handles = {}
  flat = []

  def read(key, pdt):
    if key not in table:
      raise ValueError(f"internal: no HF tensor mapped to {key}")
    name, shape, to_ours, _ = table[key]
    if name not in files:
      raise ValueError(f"{path}: missing tensor {name!r}")
    file = files[name]
    if file not in handles:
      handles[file] = _open_safetensors(file).__enter__()
    raw = handles[file].get_tensor(name)
    if tuple(raw.shape) != shape:
      raise ValueError(f"{file}: tensor {name!r} has shape {raw.shape}, "
                       f"expected {shape}")
    return np.asarray(to_ours(raw)).astype(pdt)

  try:
    for param_path, var in nnx.to_flat_state(abs_state):
      key = tuple(param_path)
      pdt = np.dtype(var.get_value().dtype)
      stacked = (_layer_paths(cfg.text, key[1:])
                 if key[0] == "language_model" else None)
      if stacked is None:
        arr = read(key, pdt)
      else:  # scanned text layers: the layers' tensors stacked on the host
        arr = np.stack([read(("language_model",) + p, pdt)
                        for p in stacked])
      assert arr.shape == var.get_value().shape, (key, arr.shape)
      if shardings is None:
        value = jnp.asarray(arr)
      else:
        value = jax.device_put(arr, _fit_sharding(
            shardings[param_path].get_value(), arr.shape))
      flat.append((param_path, var.replace(value)))
  finally:
    for fh in handles.values():
      fh.__exit__(None, None, None)
  return nnx.merge(graphdef, nnx.from_flat_state(flat)), cfg


def qwen2_vl_config_to_hf(cfg: qwen2_vl.Qwen2VLConfig) -> dict[str, Any]:
  """config.json of `cfg` for `Qwen2_5_VLForConditionalGeneration` /
  `Qwen2VLForConditionalGeneration` in transformers 5's layout: the text
  fields nested in `text_config`, whose `rope_parameters` hold
  `mrope_section`."""
  text = config_to_hf(cfg.text)
  if text["architectures"] != ["Qwen2ForCausalLM"]:
    raise ValueError(
        "the language model of a Qwen2-VL / Qwen2.5-VL export must be a "
        f"Qwen2 decoder (qkv biases, one RoPE); this one exports as "
        f"{text['architectures'][0]}")
  if text.get("rope_scaling") is not None:
    raise ValueError(f"rope_scaling={dict(cfg.text.rope_scaling)} cannot be "
                     "combined with multimodal RoPE in transformers")
  variant = cfg.vision.variant
  for key in ("architectures", "model_type", "rope_scaling", "rope_theta",
              "torch_dtype", "tie_word_embeddings"):
    text.pop(key, None)
  section = list(cfg.mrope_section)
  theta = cfg.text.rope_theta
  text_v5 = {**text, "model_type": variant + "_text",
             "rope_parameters": {"rope_type": "default",
                                 "rope_theta": theta,
                                 "mrope_section": section}}
  v = cfg.vision
  if variant == "qwen2_vl":
    vision = {"depth": v.depth, "embed_dim": v.hidden_size,
              "hidden_size": v.out_hidden_size,
              "mlp_ratio": v.intermediate_size // v.hidden_size,
              "num_heads": v.num_heads, "in_channels": v.in_channels,
              "patch_size": v.patch_size,
              "spatial_merge_size": v.spatial_merge_size,
              "temporal_patch_size": v.temporal_patch_size,
              "hidden_act": v.hidden_act}
    if v.intermediate_size % v.hidden_size:
      raise ValueError(f"vision intermediate_size={v.intermediate_size} is "
                       f"not a multiple of embed_dim={v.hidden_size} "
                       "(transformers' Qwen2-VL has an integer mlp_ratio)")
  else:
    vision = {"depth": v.depth, "hidden_size": v.hidden_size,
              "intermediate_size": v.intermediate_size,
              "num_heads": v.num_heads, "in_channels": v.in_channels,
              "patch_size": v.patch_size,
              "spatial_merge_size": v.spatial_merge_size,
              "temporal_patch_size": v.temporal_patch_size,
              "window_size": v.window_size,
              "out_hidden_size": v.out_hidden_size,
              "fullatt_block_indexes": list(v.fullatt_block_indexes),
              "tokens_per_second": v.tokens_per_second,
              "hidden_act": v.hidden_act}
  if v.rope_theta != 10000.0:
    raise ValueError(f"vision rope_theta={v.rope_theta}: transformers' "
                     "Qwen-VL towers use 10000")
  if v.norm_eps != 1e-6:
    raise ValueError(f"vision norm_eps={v.norm_eps}: transformers' Qwen-VL "
                     "towers use 1e-6")
  return {
      "architectures": [qwen2_vl.MODEL_TYPES[variant]],
      "model_type": variant,
      "text_config": text_v5,
      "vision_config": vision,
      "image_token_id": cfg.image_token_id,
      "video_token_id": cfg.video_token_id,
      "vision_start_token_id": cfg.vision_start_token_id,
      "tie_word_embeddings": cfg.text.tie_embeddings,
      "torch_dtype": cfg.text.param_dtype,
  }


def _lora_deltas(model: nnx.Module) -> dict[tuple[Any, ...], np.ndarray]:
  """Param path -> (alpha / r) A @ B of the LoRA factors `<name>_lora_a` /
  `<name>_lora_b` next to it (`jaxlab.train.lora`: A `[in..., r]`, B `[r,
  out...]`, the scale in A's `lora_scale` metadata; stacked per layer when
  A's first logical axis is "layers")."""
  flat = {tuple(p): v for p, v in nnx.to_flat_state(nnx.state(model))}
  out = {}
  for path, var in flat.items():
    name = path[-1]
    if not (isinstance(name, str) and name.endswith("_lora_a")):
      continue
    base = path[:-1] + (name[:-len("_lora_a")],)
    a = np.asarray(var.get_value(), np.float32)
    b = np.asarray(flat[path[:-1] + (base[-1] + "_lora_b",)].get_value(),
                   np.float32)
    meta = var.get_metadata()
    axes = tuple(meta.get("out_sharding") or ())
    if axes and axes[0] == "layers":
      delta = np.stack([np.tensordot(x, y, axes=1) for x, y in zip(a, b)])
    else:
      delta = np.tensordot(a, b, axes=1)
    out[base] = delta * np.float32(meta["lora_scale"])
  return out


def save_qwen2_vl(model: qwen2_vl.Qwen2VL, cfg: qwen2_vl.Qwen2VLConfig,
                  path: str | os.PathLike) -> str:
  """Writes `config.json` (`qwen2_vl_config_to_hf`) and `model.safetensors`
  with the Hub's tensor names (`visual.*`, `model.layers.*`,
  `lm_head.weight`), which transformers' `from_pretrained` and
  `load_qwen2_vl` read. Tensors keep the parameter dtype. A weight with LoRA
  factors (`jaxlab.train.lora.add_lora`) is written as the weight the
  trainer computes with, W + (alpha / r) A @ B (`_lora_deltas`).
  (`jaxlab.io.hf.save` dispatches here.)"""
  path = os.fspath(path)
  hf_config = qwen2_vl_config_to_hf(cfg)
  table = _qwen2_vl_tensor_table(cfg)
  deltas = _lora_deltas(model)
  tensors = {}
  for param_path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    param_path = tuple(param_path)
    value = np.asarray(var.get_value())
    if param_path in deltas:
      value = value + deltas.pop(param_path).astype(value.dtype)
    stacked = None
    if param_path[0] == "language_model":
      stacked = _layer_paths(cfg.text, param_path[1:])
    pieces = ([(param_path, value)] if stacked is None else
              [(("language_model",) + p, x) for p, x in zip(stacked, value)])
    for piece_path, piece in pieces:
      _put_hf_tensor(tensors, table, param_path, piece_path, piece)
  os.makedirs(path, exist_ok=True)
  safetensors.numpy.save_file(tensors, os.path.join(path, SINGLE_FILE),
                              metadata={"format": "pt"})
  with open(os.path.join(path, CONFIG_FILE), "w") as fh:
    json.dump(hf_config, fh, indent=2)
  return path
