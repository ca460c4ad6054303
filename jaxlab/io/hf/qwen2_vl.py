"""Qwen2.5-VL / Qwen2-VL checkpoints <-> `jaxlab.models.qwen2_vl`.

A Qwen2.5-VL / Qwen2-VL checkpoint (`Qwen2_5_VLForConditionalGeneration`,
`Qwen2VLForConditionalGeneration`) loads as `(Qwen2VL, Qwen2VLConfig)`
through `load_qwen2_vl` (both the Hub's and transformers 5's tensor names
and config dialects; mesh placement and scanned layers, the text's and
the tower's, as for a decoder), and `save_qwen2_vl` writes one
(transformers 5's config layout, the Hub's tensor names).
`jaxlab.io.hf.load` / `save` dispatch here.

The name table (`tensor_table`) is the decoder family's for the language
model (`jaxlab.io.hf.decoder.tensor_table`, under `language_model`) plus
the vision tower's; both directions run `jaxlab.io.hf.fill`'s loop.
"""

from collections.abc import Mapping
import dataclasses
import os
from typing import Any

import jax
from flax import nnx

from jaxlab.io.hf import config as config_lib
from jaxlab.io.hf import decoder as decoder_io
from jaxlab.io.hf import files
from jaxlab.io.hf import fill
from jaxlab.models import qwen2_vl


def qwen2_vl_variant(hf: Mapping[str, Any]) -> str | None:
  """"qwen2_5_vl" / "qwen2_vl" for such a config.json, else None."""
  archs = hf.get("architectures") or []
  if len(archs) == 1 and archs[0] in qwen2_vl.ARCHITECTURES:
    return qwen2_vl.ARCHITECTURES[archs[0]]
  if not archs and hf.get("model_type") in qwen2_vl.MODEL_TYPES:
    return hf["model_type"]
  return None


def is_qwen2_vl_config(hf: Mapping[str, Any]) -> bool:
  """A Qwen2.5-VL / Qwen2-VL config.json (`qwen2_vl_variant` not None)."""
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
  tcfg = config_lib.config_from_hf(text, dtype=dtype,
                                  param_dtype=param_dtype, where=where,
                                  **overrides)
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
  # The tower scans and rematerialises as the language model does.
  vcfg = qwen2_vl.VisionConfig(
      **vkw, rope_theta=float(vrope.get("rope_theta", 10000.0)),
      dtype=dtype, param_dtype=param_dtype or dtype,
      scan_layers=tcfg.scan_layers, remat=tcfg.remat)
  return qwen2_vl.Qwen2VLConfig(
      text=tcfg, vision=vcfg,
      image_token_id=int(hf.get("image_token_id", 151655)),
      video_token_id=int(hf.get("video_token_id", 151656)),
      vision_start_token_id=int(hf.get("vision_start_token_id", 151652)),
      mrope_section=tuple(section))


def vision_table(cfg: qwen2_vl.VisionConfig, prefix: str):
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


def tensor_table(cfg: qwen2_vl.Qwen2VLConfig,
                           lm_prefix: str = "model.",
                           vis_prefix: str = "visual."):
  """jaxlab param path -> (HF name, HF shape, hf_to_ours, ours_to_hf) of
  the whole model (text tensors under `lm_prefix`, the tower's under
  `vis_prefix`; the defaults are the Hub's names)."""
  table = {}
  for p, (name, *rest) in decoder_io.tensor_table(cfg.text).items():
    if name.startswith("model."):
      name = lm_prefix + name[len("model."):]
    table[("language_model",) + p] = (name, *rest)
  table.update(vision_table(cfg.vision, vis_prefix))
  return table



def qwen2_vl_config_to_hf(cfg: qwen2_vl.Qwen2VLConfig) -> dict[str, Any]:
  """config.json of `cfg` for `Qwen2_5_VLForConditionalGeneration` /
  `Qwen2VLForConditionalGeneration` in transformers 5's layout: the text
  fields nested in `text_config`, whose `rope_parameters` hold
  `mrope_section`."""
  text = config_lib.config_to_hf(cfg.text)
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


def layer_paths(cfg: qwen2_vl.Qwen2VLConfig, param_path: tuple
                ) -> list[tuple[Any, ...]] | None:
  """`decoder.layer_paths` of the language model's scanned params (under
  `language_model`), and for a scanned tower's `("visual", "scan_blocks",
  0, ...)` the unrolled `("visual", "blocks", i, ...)` of its depth blocks;
  None for every other param."""
  if tuple(param_path[:2]) == ("visual", "scan_blocks"):
    return [("visual", "blocks", i) + tuple(param_path[3:])
            for i in range(cfg.vision.depth)]
  if not param_path or param_path[0] != "language_model":
    return None
  stacked = decoder_io.layer_paths(cfg.text, tuple(param_path[1:]))
  return (None if stacked is None
          else [("language_model",) + p for p in stacked])


def load_qwen2_vl(path: str | os.PathLike, *, dtype: str = "float32",
                  param_dtype: str | None = None,
                  mesh: jax.sharding.Mesh | None = None, rules: Any = None,
                  **config_overrides
                  ) -> tuple[qwen2_vl.Qwen2VL, qwen2_vl.Qwen2VLConfig]:
  """Loads a HF Qwen2.5-VL / Qwen2-VL safetensors checkpoint (no torch).

  Both tensor layouts are read: the Hub's (`visual.*`, `model.layers.*`,
  `lm_head`) and transformers 5's `save_pretrained` (`model.visual.*`,
  `model.language_model.*`, `lm_head`). `config_overrides` go to the text
  `DecoderConfig` (e.g. `scan_layers=True`, `remat="full"`; the vision
  tower follows them, its blocks' tensors stacked `[depth, ...]`). With
  `mesh` (and logical-axis `rules`), every parameter is placed with its
  `NamedSharding` as it is read: the language model's by its logical axes,
  as `load` places a decoder (dims the mesh does not divide stay
  replicated), the vision tower's by theirs. (`jaxlab.io.hf.load`
  dispatches here.)"""
  path = os.fspath(path)
  hf_json = files.read_config(path)
  where = os.path.join(path, files.CONFIG_FILE)
  cfg = qwen2_vl_config_from_hf(hf_json, dtype=dtype,
                                param_dtype=param_dtype, where=where,
                                **config_overrides)
  names = files.weight_files(path)
  if "model.language_model.embed_tokens.weight" in names:
    lm_prefix, vis_prefix = "model.language_model.", "model.visual."
  else:
    lm_prefix, vis_prefix = "model.", "visual."
  table = tensor_table(cfg, lm_prefix, vis_prefix)
  with files.tensor_reader(path, names) as get_tensor:
    model = fill.fill(lambda: qwen2_vl.Qwen2VL(cfg, rngs=nnx.Rngs(0)),
                      table, get_tensor,
                      layer_paths=lambda p: layer_paths(cfg, p),
                      mesh=mesh, rules=rules)
  return model, cfg


def save_qwen2_vl(model: qwen2_vl.Qwen2VL, cfg: qwen2_vl.Qwen2VLConfig,
                  path: str | os.PathLike) -> str:
  """Writes `config.json` (`qwen2_vl_config_to_hf`) and `model.safetensors`
  with the Hub's tensor names (`visual.*`, `model.layers.*`,
  `lm_head.weight`), which transformers' `from_pretrained` and
  `load_qwen2_vl` read. Tensors keep the parameter dtype. A weight with LoRA
  factors (`jaxlab.train.lora.add_lora`) is written as the weight the
  trainer computes with, W + (alpha / r) A @ B (`fill.to_tensors` folds
  them with `merge_lora`). (`jaxlab.io.hf.save` dispatches here.)"""
  hf_config = qwen2_vl_config_to_hf(cfg)
  tensors = fill.to_tensors(model, tensor_table(cfg),
                            layer_paths=lambda p: layer_paths(cfg, p))
  return files.write(path, tensors, hf_config)
