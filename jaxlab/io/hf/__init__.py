"""Import and export Hugging Face safetensors checkpoints.

    model, cfg = jaxlab.io.hf.load("/ckpt/dir", dtype="bfloat16")
    logits_btv = model(input_ids_bt)                    # [B, T, V] float32
    jaxlab.io.hf.save(model, cfg, "/out/dir")           # transformers-4 dialect

One job per module:

  files     the checkpoint directory: config.json, the safetensors (single
            or sharded), `tensor_reader`, `write`;
  fill      the one conversion loop: `fill` builds a module abstractly and
            fills it from a name table (shapes checked, scanned layers
            stacked, each param placed with its sharding), `to_tensors` is
            its inverse (LoRA folded through `jaxlab.nn.lora`);
  config    config.json <-> `DecoderConfig` (Llama, Qwen2, Qwen3, Mistral,
            Gemma 3, Phi, Dream, LLaDA; both transformers dialects, RoPE);
  decoder   the decoder families' name table, `load_tensors`, load / save;
  qwen2_vl  Qwen2.5-VL / Qwen2-VL: config mapping, name table, load / save;
  vit       ViT / DeiT image classifiers (`ViTClassifier`).

A new family is a module with a config mapping and a name table over
`fill` (see `qwen2_vl`), plus its dispatch in `load` / `save` here. torch
is never imported. The names below are the package's public API.
"""

import os
from typing import Any

import jax

from jaxlab.io.hf import config
from jaxlab.io.hf import decoder
from jaxlab.io.hf import files
from jaxlab.io.hf import fill
from jaxlab.io.hf import qwen2_vl
from jaxlab.io.hf import vit
from jaxlab.io.hf import whisper
from jaxlab.io.hf.config import architecture
from jaxlab.io.hf.config import config_from_hf
from jaxlab.io.hf.config import config_to_hf
from jaxlab.io.hf.config import DIFFUSION_ARCHITECTURES
from jaxlab.io.hf.config import diffusion_tokens
from jaxlab.io.hf.config import GEMMA3
from jaxlab.io.hf.config import GEMMA3_MULTIMODAL
from jaxlab.io.hf.config import HF_ROPE_TYPES
from jaxlab.io.hf.config import is_gemma3_multimodal_config
from jaxlab.io.hf.config import SUPPORTED_ARCHITECTURES
from jaxlab.io.hf.decoder import load_tensors
from jaxlab.io.hf.decoder import tensor_shapes
from jaxlab.io.hf.decoder import tensor_table
from jaxlab.io.hf.files import CONFIG_FILE
from jaxlab.io.hf.files import INDEX_FILE
from jaxlab.io.hf.files import read_config
from jaxlab.io.hf.files import SINGLE_FILE
from jaxlab.io.hf.fill import fit_sharding
from jaxlab.io.hf.qwen2_vl import is_qwen2_vl_config
from jaxlab.io.hf.qwen2_vl import load_qwen2_vl
from jaxlab.io.hf.qwen2_vl import qwen2_vl_config_from_hf
from jaxlab.io.hf.qwen2_vl import qwen2_vl_config_to_hf
from jaxlab.io.hf.qwen2_vl import qwen2_vl_variant
from jaxlab.io.hf.qwen2_vl import save_qwen2_vl
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import qwen2_vl as qwen2_vl_lib

__all__ = [
    "CONFIG_FILE", "DIFFUSION_ARCHITECTURES", "GEMMA3", "GEMMA3_MULTIMODAL",
    "HF_ROPE_TYPES", "INDEX_FILE", "SINGLE_FILE", "SUPPORTED_ARCHITECTURES",
    "architecture", "config", "config_from_hf", "config_to_hf", "decoder",
    "diffusion_tokens", "files", "fill", "fit_sharding",
    "is_gemma3_multimodal_config", "is_qwen2_vl_config", "load",
    "load_qwen2_vl", "load_tensors", "qwen2_vl", "qwen2_vl_config_from_hf",
    "qwen2_vl_config_to_hf", "qwen2_vl_variant", "read_config", "save",
    "save_qwen2_vl", "tensor_shapes", "tensor_table", "vit", "whisper",
]


def load(path: str | os.PathLike, *, dtype: str = "float32",
         param_dtype: str | None = None, mesh: jax.sharding.Mesh | None = None,
         rules: Any = None, **config_overrides: Any
         ) -> tuple[decoder_lib.Decoder, decoder_lib.DecoderConfig]:
  """Loads a HF Llama / Qwen2 / Qwen3 / Mistral / Gemma 3 / Phi / Dream / LLaDA
  checkpoint dir (a Gemma 3 multimodal one as its language model; a
  Qwen2.5-VL / Qwen2-VL one as `jaxlab.models.qwen2_vl.Qwen2VL`; a ViT /
  DeiT image classifier as `jaxlab.models.vit_classifier.ViTClassifier`,
  `vit.load_vit`; a Whisper one as its encoder,
  `jaxlab.models.whisper.Whisper`).

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
    (model, cfg): the filled `Decoder` and its `DecoderConfig` (or
    `Qwen2VL` and `Qwen2VLConfig`).

  Raises:
    FileNotFoundError: missing directory, config.json or shard file.
    ValueError: unsupported architecture/field, missing tensor or a tensor
      whose shape differs from the config's.
  """
  if whisper.is_whisper_config(read_config(path)):  # (Whisper, its config)
    return whisper.load_whisper(path, dtype=dtype, param_dtype=param_dtype,
                                mesh=mesh, rules=rules)
  if vit.is_vit_config(read_config(path)):  # ViT / DeiT classifiers
    return vit.load_vit(path, dtype=dtype, param_dtype=param_dtype,
                        mesh=mesh, rules=rules, **config_overrides)
  if is_qwen2_vl_config(read_config(path)):  # (Qwen2VL, Qwen2VLConfig)
    return load_qwen2_vl(path, dtype=dtype, param_dtype=param_dtype,
                         mesh=mesh, rules=rules, **config_overrides)
  return decoder.load_decoder(path, dtype=dtype, param_dtype=param_dtype,
                              mesh=mesh, rules=rules, **config_overrides)


def save(model: Any, cfg: Any, path: str | os.PathLike) -> str:
  """Writes `config.json` and `model.safetensors` of a `Decoder` (the
  transformers-4 dialect; `decoder.save_decoder`) or a `Qwen2VL`
  (`save_qwen2_vl`); returns `path`.

  Tensors keep the parameter dtype (bfloat16 stays bfloat16); a weight with
  LoRA adapters is written merged, W + (alpha / r) A @ B. The result loads
  with transformers' `from_pretrained` and with `load`.
  """
  if isinstance(cfg, qwen2_vl_lib.Qwen2VLConfig):  # Qwen2.5-VL / Qwen2-VL
    return save_qwen2_vl(model, cfg, path)
  if isinstance(cfg, vit.vc.ViTClassifierConfig):  # ViT / DeiT classifier
    return vit.save_vit(model, cfg, path)
  return decoder.save_decoder(model, cfg, path)
