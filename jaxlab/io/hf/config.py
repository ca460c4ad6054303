"""Hugging Face config.json <-> `DecoderConfig` of the decoder families.

Llama, Qwen2 (q/k/v biases), Qwen3 (no biases, per-head q/k RMSNorm,
`head_dim` independent of `hidden_size`), Mistral (Llama weights with a
sliding window on every layer), Gemma 3 text (`Gemma3ForCausalLM`,
model_type gemma3_text: per-layer sliding / global attention with two RoPE
bases, q/k norm, (1 + w) norms, GeGLU, sqrt(dim) embedding scale, the
`query_pre_attn_scalar` attention scale, final logit soft-capping), and
the masked-diffusion LMs Dream and LLaDA (bidirectional decoders). Gemma
3's multimodal config (`Gemma3ForConditionalGeneration`) is recognised
here; `jaxlab.io.hf.decoder` reads its language model.

Both config dialects are read: transformers 4 (`rope_theta` and
`rope_scaling` at the top level, `rope_scaling.type` or `.rope_type`) and
transformers 5 (`rope_parameters` with `rope_theta` and `rope_type`). HF rope
types map to `jaxlab.nn.rope` registry names through `HF_ROPE_TYPES`.
`config_to_hf` writes the transformers-4 dialect.

Layers without RoPE are read in Llama 4's form (`nope_layers_from_hf`:
`no_rope_layers`, one 1/0 per layer, or `no_rope_layer_interval`) into
`DecoderConfig.nope_layers`; a Llama-architecture config.json carrying
`no_rope_layers` loads with those NoPE layers (transformers' Llama classes
ignore the field; Llama 4's own MoE checkpoints are not loadable here, but
their layer pattern is read the same way).

Phi (`PhiForCausalLM`, model_type phi: Phi-1, Phi-1.5, Phi-2) is the
decoder with its Phi switches on (`_PHI_SWITCHES`): LayerNorm with biases,
one input norm feeding attention and MLP in parallel, partial rotary
(`partial_rotary_factor`, 0.5 when absent, as transformers' `PhiConfig`),
q/k/v and output projection biases, a non-gated fc1 -> gelu_new -> fc2 MLP
with biases, an LM head bias, optional LayerNorm q/k norms
(`qk_layernorm`).
"""

from collections.abc import Mapping
import os
from typing import Any
import warnings

from jaxlab.io.hf import files
from jaxlab.models import decoder as decoder_lib

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM",
                           "Qwen3ForCausalLM", "MistralForCausalLM")
_MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}
# Masked-diffusion LMs (spec L), imported as bidirectional decoders
# (causal=False): Dream (`DreamModel`: Qwen2 config and tensor names, its
# sampler reads the logits shifted by one position, see `diffusion_tokens`)
# and LLaDA (`LLaDAModelLM`: OLMo-style config and tensor names, mapped by
# `_LLADA_CONFIG` here and `jaxlab.io.hf.decoder.LLADA_TENSORS`). Import
# only: `save` writes causal LMs.
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
# Phi (`PhiForCausalLM`, model_type phi): `_phi_config_from_hf`,
# `_phi_config_to_hf`; DecoderConfig fields of Phi and their value there.
PHI = "PhiForCausalLM"
SUPPORTED_ARCHITECTURES += (PHI,)
_MODEL_TYPES["phi"] = PHI
_PHI_SWITCHES = {"norm": "layernorm", "parallel_block": True,
                 "mlp_gated": False, "mlp_bias": True, "qkv_bias": True,
                 "attn_out_bias": True, "lm_head_bias": True,
                 "post_norms": False, "norm_plus_one": False,
                 "embed_scale": False, "causal": True, "nope_layers": (),
                 "attn_scale": None, "attn_logit_softcap": None,
                 "final_logit_softcap": None, "sliding_window": None,
                 "layer_types": (), "sliding_rope_theta": None}
# HF activation names -> `jaxlab.nn.mlp.ACTIVATIONS` (gelu_new and
# gelu_pytorch_tanh are both the tanh approximation).
_PHI_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                    "gelu": "gelu"}
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


def diffusion_tokens(path: str | os.PathLike) -> dict[str, Any]:
  """{mask_id, eos_id, shift_logits} of a Dream / LLaDA checkpoint directory
  (`mask_token_id` / `eos_token_id` of its config.json, None if absent;
  `shift_logits`: Dream predicts token i from the logits at i - 1)."""
  hf = files.read_config(path)
  arch = architecture(hf, os.path.join(os.fspath(path), files.CONFIG_FILE))
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


def architecture(hf: Mapping[str, Any], where: str) -> str:
  """The one supported architecture a config.json names (or its
  model_type implies); a ValueError naming `where` otherwise."""
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


def _phi_config_from_hf(hf: Mapping[str, Any], *, dtype: str,
                        param_dtype: str | None, where: str,
                        **overrides: Any) -> decoder_lib.DecoderConfig:
  """`config_from_hf` of a `PhiForCausalLM` (phi) config.

  Fields absent from the file take transformers' `PhiConfig` defaults
  (partial_rotary_factor 0.5, layer_norm_eps 1e-5, gelu_new). The rotary
  factor is read from the top level (transformers 4) or from
  `rope_parameters` (transformers 5).
  """
  for field in ("vocab_size", "hidden_size", "intermediate_size",
                "num_hidden_layers", "num_attention_heads"):
    if hf.get(field) is None:
      raise ValueError(f"{where}: missing required field {field!r}")
  act = hf.get("hidden_act") or "gelu_new"
  if act not in _PHI_ACTIVATIONS:
    raise ValueError(f"{where}: hidden_act={act!r} is not supported for Phi; "
                     f"supported: {', '.join(_PHI_ACTIVATIONS)}")
  params = hf.get("rope_parameters")
  prf = None
  if isinstance(params, Mapping):
    prf = params.get("partial_rotary_factor")
    params = {k: v for k, v in params.items() if k != "partial_rotary_factor"}
  if prf is None:
    prf = hf.get("partial_rotary_factor")
  if prf is None:
    prf = 0.5  # transformers' PhiConfig default
  rope_hf = {k: v for k, v in hf.items() if k != "partial_rotary_factor"}
  if params is not None:
    rope_hf["rope_parameters"] = params
  theta, scaling = _rope_config(rope_hf, where)
  num_heads = int(hf["num_attention_heads"])
  dim = int(hf["hidden_size"])
  head_dim = int(hf.get("head_dim") or dim // num_heads)
  if hf.get("qk_layernorm") and head_dim != dim // num_heads:
    raise ValueError(f"{where}: qk_layernorm with head_dim={head_dim} != "
                     "hidden_size // num_attention_heads is not supported")
  fields = dict(
      vocab_size=int(hf["vocab_size"]),
      dim=dim,
      num_layers=int(hf["num_hidden_layers"]),
      num_heads=num_heads,
      num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
      head_dim=head_dim,
      mlp_dim=int(hf["intermediate_size"]),
      rope_theta=theta,
      rope_scaling=scaling,
      partial_rotary_factor=float(prf),
      max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
      norm_eps=float(hf.get("layer_norm_eps", 1e-5)),
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
      qk_norm=bool(hf.get("qk_layernorm", False)),
      mlp_activation=_PHI_ACTIVATIONS[act],
      dtype=dtype,
      param_dtype=param_dtype or dtype,
      **{k: v for k, v in _PHI_SWITCHES.items()
         if k not in ("causal", "nope_layers", "layer_types")},
  )
  fields.update(overrides)
  return decoder_lib.DecoderConfig(**fields)


# Llama 4's iRoPE layer pattern (transformers' `Llama4TextConfig`,
# transformers 5.25 `models/llama4/configuration_llama4.py`): `no_rope_layers`
# is a list with one entry per layer (at least `num_hidden_layers` long),
# 1 = the layer uses RoPE, 0 = a NoPE layer (`Llama4TextAttention.use_rope =
# config.no_rope_layers[layer_idx]`). When it is absent or empty, the layers
# with `(i + 1) % no_rope_layer_interval == 0` are NoPE (interval 4 by
# default: every 4th layer).
LLAMA4_TEXT = "llama4_text"
NOPE_INTERVAL_DEFAULT = 4


def nope_layers_from_hf(hf: Mapping[str, Any], where: str = files.CONFIG_FILE
                        ) -> tuple[int, ...]:
  """The layers without RoPE that a config.json declares (Llama 4's form).

  Reads `no_rope_layers` (1 = RoPE, 0 = NoPE, per layer) or, for Llama 4
  text configs (model_type `llama4_text`, or `llama4` through its
  `text_config`) without it, `no_rope_layer_interval` (default 4). Other
  configs without these fields have none: ().
  """
  if hf.get("model_type") == "llama4" and isinstance(
      hf.get("text_config"), Mapping):
    hf = {"model_type": LLAMA4_TEXT, **hf["text_config"]}
  n = hf.get("num_hidden_layers")
  flags = hf.get("no_rope_layers")
  interval = hf.get("no_rope_layer_interval")
  if not flags and interval is None and hf.get("model_type") != LLAMA4_TEXT:
    return ()
  if n is None:
    raise ValueError(f"{where}: missing required field 'num_hidden_layers'")
  n = int(n)
  if flags:
    flags = list(flags)
    if len(flags) < n or any(int(f) not in (0, 1) for f in flags):
      raise ValueError(
          f"{where}: no_rope_layers={flags} must hold a 0 (NoPE) or 1 (RoPE) "
          f"for each of the {n} layers")
    return tuple(i for i in range(n) if int(flags[i]) == 0)
  interval = NOPE_INTERVAL_DEFAULT if interval is None else int(interval)
  if interval < 1:
    raise ValueError(f"{where}: no_rope_layer_interval={interval} must be >= 1")
  return tuple(i for i in range(n) if (i + 1) % interval == 0)


def config_from_hf(hf: Mapping[str, Any], *, dtype: str = "float32",
                   param_dtype: str | None = None,
                   where: str = files.CONFIG_FILE,
                   **overrides: Any) -> decoder_lib.DecoderConfig:
  """A `DecoderConfig` from a parsed HF `config.json` (either dialect).

  Args:
    hf: the parsed config.json.
    dtype: compute dtype name ("float32", "bfloat16", "float16").
    param_dtype: parameter dtype name; defaults to `dtype`.
    where: file name used in error messages.
    **overrides: further `DecoderConfig` fields (e.g. `remat=True`).
  """
  arch = architecture(hf, where)
  if arch == PHI:
    return _phi_config_from_hf(hf, dtype=dtype, param_dtype=param_dtype,
                               where=where, **overrides)
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
      nope_layers=nope_layers_from_hf(hf, where),
      dtype=dtype,
      param_dtype=param_dtype or dtype,
  )
  fields.update(overrides)
  return decoder_lib.DecoderConfig(**fields)


def phi_like(cfg: decoder_lib.DecoderConfig) -> bool:
  """Whether `cfg` sets a switch only Phi has (Phi tensor names, export as
  `PhiForCausalLM`)."""
  return (cfg.norm == "layernorm" or cfg.parallel_block
          or not cfg.mlp_gated or cfg.mlp_bias or cfg.attn_out_bias
          or cfg.lm_head_bias or cfg.partial_rotary_factor != 1)


def _phi_config_to_hf(cfg: decoder_lib.DecoderConfig) -> dict[str, Any]:
  """transformers-4 dialect `PhiForCausalLM` config.json."""
  wrong = {name: getattr(cfg, name) for name, want in _PHI_SWITCHES.items()
           if getattr(cfg, name) != want}
  inverse = {"gelu_tanh": "gelu_new", "gelu": "gelu"}
  if cfg.mlp_activation not in inverse:
    wrong["mlp_activation"] = cfg.mlp_activation
  if cfg.qk_norm and cfg.resolved_head_dim != cfg.dim // cfg.num_heads:
    wrong["head_dim"] = cfg.resolved_head_dim
  if wrong:
    raise ValueError(
        f"a decoder with Phi switches exports as {PHI}, which needs "
        f"{_PHI_SWITCHES} (mlp_activation gelu_tanh or gelu); this config "
        f"has {wrong}")
  return {
      "architectures": [PHI],
      "model_type": "phi",
      "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.dim,
      "intermediate_size": cfg.mlp_dim,
      "num_hidden_layers": cfg.num_layers,
      "num_attention_heads": cfg.num_heads,
      "num_key_value_heads": cfg.num_kv_heads,
      "hidden_act": inverse[cfg.mlp_activation],
      "max_position_embeddings": cfg.max_position_embeddings,
      "layer_norm_eps": cfg.norm_eps,
      "rope_theta": cfg.rope_theta,
      "rope_scaling": _rope_scaling_to_hf(cfg),
      "partial_rotary_factor": cfg.partial_rotary_factor,
      "qk_layernorm": cfg.qk_norm,
      "tie_word_embeddings": cfg.tie_embeddings,
      "torch_dtype": cfg.param_dtype,
  }


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

  The architecture follows the config: any Phi switch (LayerNorm, parallel
  block, non-gated MLP, biases, partial rotary) -> Phi (`PhiForCausalLM`,
  all of its switches required), any Gemma switch (post_norms,
  norm_plus_one, embed_scale, a GeGLU MLP, attn_scale, soft-capping) ->
  Gemma 3 (`Gemma3ForCausalLM`, all of its switches required), q/k norm ->
  Qwen3, qkv bias -> Qwen2, a sliding window otherwise -> Mistral, else
  Llama.
  """
  if phi_like(cfg):
    return _phi_config_to_hf(cfg)
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
  hf["rope_scaling"] = _rope_scaling_to_hf(cfg)
  return hf


GEMMA3_MULTIMODAL = "Gemma3ForConditionalGeneration"


def is_gemma3_multimodal_config(hf: Mapping[str, Any]) -> bool:
  """A `Gemma3ForConditionalGeneration` (model_type gemma3) config.json."""
  archs = hf.get("architectures") or []
  return (GEMMA3_MULTIMODAL in archs
          or (not archs and hf.get("model_type") == "gemma3"))
