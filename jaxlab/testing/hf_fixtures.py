"""Tiny random Hugging Face checkpoints for tests (needs torch+transformers).

    path = make_hf_checkpoint(tmp_dir, "qwen2", num_kv_heads=1)
    hf_model = load_hf_model(path)                       # torch, eval, fp32
    logits = hf_logits(hf_model, ids_bt)                 # numpy [B, T, V]
    out = hf_forward(hf_model, ids_bt, mask_bt,           # attentions, cache
                     position_ids_bt=hf_positions(mask_bt),
                     output_attentions=True)

Checkpoints are built with transformers' own `LlamaForCausalLM` /
`Qwen2ForCausalLM` from a fixed torch seed and written with
`save_pretrained` (safetensors; sharded when `max_shard_size` is given), so
they are exactly what a real download looks like, only small. Weights are
re-drawn with a larger std than HF's default 0.02 so that logits differ
visibly between tokens and parity tests are not trivially satisfied.

`config_dialect="v4"` rewrites config.json in the transformers-4 dialect
(`rope_theta` and `rope_scaling` at the top level) after saving; the default
"v5" keeps what the installed transformers writes (`rope_parameters`).

torch and transformers are imported lazily: this module is test-only and
importing it must not pull torch into code that does not call it.
"""

from collections.abc import Callable, Mapping
import getpass
import json
import os
import shutil
import tempfile
from typing import Any

import numpy as np


def inductor_cleanup() -> Callable[[], None]:
  """Call in `setUpClass`; call what it returns in `tearDownClass`.

  Importing transformers' Qwen-VL modules (torch's inductor) creates
  `$TMPDIR/torchinductor_<user>`; the returned function removes it unless
  it was there before, so a test class leaves the scratch dir as it found
  it."""
  path = os.path.join(tempfile.gettempdir(),
                      f"torchinductor_{getpass.getuser()}")
  existed = os.path.exists(path)

  def cleanup() -> None:
    if not existed:
      shutil.rmtree(path, ignore_errors=True)
  return cleanup

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "phi")
# arch -> (config class, model class) names in transformers.
_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "phi": ("PhiConfig", "PhiForCausalLM"),
}


def hf_config(arch: str = "llama", *, vocab_size: int = 97,
              hidden_size: int = 32, intermediate_size: int = 64,
              num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
              head_dim: int | None = None, tie_embeddings: bool = False,
              rope_theta: float = 10000.0,
              rope_scaling: Mapping[str, Any] | None = None,
              max_position_embeddings: int = 256, rms_norm_eps: float = 1e-6,
              sliding_window: int | None = None, **extra: Any):
  """A transformers `LlamaConfig` / `Qwen2Config` for a tiny model.

  `rope_scaling` is an HF rope dict, e.g. `{"rope_type": "yarn",
  "factor": 4.0, "original_max_position_embeddings": 64}`.
  `sliding_window` (Qwen2 only) turns the window on for every layer.
  Phi: `rms_norm_eps` is its `layer_norm_eps`, and `partial_rotary_factor`
  (in `extra`; default 0.5) goes into `rope_parameters`.
  """
  import transformers  # pylint: disable=g-import-not-at-top
  if arch not in ARCHS:
    raise ValueError(f"unknown arch {arch!r}; valid: {', '.join(ARCHS)}")
  rope = {"rope_type": "default", "rope_theta": float(rope_theta)}
  if rope_scaling is not None:
    rope = dict(rope_scaling)
    if "type" in rope:
      rope.setdefault("rope_type", rope.pop("type"))
    rope["rope_theta"] = float(rope_theta)
  kw = dict(vocab_size=vocab_size, hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_layers, num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads,
            tie_word_embeddings=tie_embeddings,
            max_position_embeddings=max_position_embeddings,
            rms_norm_eps=rms_norm_eps, rope_parameters=rope)
  if head_dim is not None:
    kw["head_dim"] = head_dim
  if arch == "phi":
    kw["layer_norm_eps"] = kw.pop("rms_norm_eps")
    rope["partial_rotary_factor"] = float(
        extra.pop("partial_rotary_factor", 0.5))
    if sliding_window is not None:
      raise ValueError("sliding_window is a Qwen2/Qwen3/Mistral option")
  config_name, model_name = _CLASSES[arch]
  cls = getattr(transformers, config_name)
  if arch == "llama" and sliding_window is not None:
    raise ValueError("sliding_window is a Qwen2/Qwen3/Mistral option")
  if arch in ("qwen2", "qwen3") and sliding_window is not None:
    kw.update(use_sliding_window=True, sliding_window=sliding_window,
              max_window_layers=0)
  if arch == "mistral":  # a window on every layer, or none
    kw["sliding_window"] = sliding_window
  kw.update(extra)
  cfg = cls(**kw)
  cfg.architectures = [model_name]
  # Eager attention: the reference does not depend on an SDPA kernel choice.
  cfg._attn_implementation = "eager"  # pylint: disable=protected-access
  return cfg


def make_hf_model(arch: str = "llama", *, seed: int = 0,
                  init_std: float = 0.2, **config_kw: Any):
  """A random tiny transformers causal LM in fp32 eval mode."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  cfg = hf_config(arch, **config_kw)
  torch.manual_seed(seed)
  cls = getattr(transformers, _CLASSES[arch][1])
  model = cls(cfg).to(torch.float32).eval()
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("norm.weight"):
        # Norm scales near 1 but not exactly, so a dropped scale shows.
        p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
      else:
        p.copy_(init_std * torch.randn(p.shape, generator=gen))
  if cfg.tie_word_embeddings:
    model.tie_weights()
  return model


def to_v4_dialect(path: str | os.PathLike) -> None:
  """Rewrites `path/config.json` in the transformers-4 config dialect."""
  config_path = os.path.join(os.fspath(path), "config.json")
  with open(config_path) as fh:
    hf = json.load(fh)
  rope = dict(hf.pop("rope_parameters", None) or {})
  hf["rope_theta"] = rope.pop("rope_theta", 10000.0)
  if "partial_rotary_factor" in rope:  # Phi: a top-level field in v4
    hf["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
  rope_type = rope.pop("rope_type", "default")
  hf["rope_scaling"] = None if rope_type == "default" else {
      "type": rope_type, **rope}
  hf["transformers_version"] = "4.46.0"
  with open(config_path, "w") as fh:
    json.dump(hf, fh, indent=2)


def make_hf_checkpoint(path: str | os.PathLike, arch: str = "llama", *,
                       vocab_size: int = 97, hidden_size: int = 32,
                       intermediate_size: int = 64, num_layers: int = 2,
                       num_heads: int = 4, num_kv_heads: int = 2,
                       head_dim: int | None = None,
                       tie_embeddings: bool = False,
                       rope_theta: float = 10000.0,
                       rope_scaling: Mapping[str, Any] | None = None,
                       max_position_embeddings: int = 256,
                       sliding_window: int | None = None,
                       max_shard_size: str | int | None = None,
                       config_dialect: str = "v5", dtype: str = "float32",
                       seed: int = 0, init_std: float = 0.2,
                       return_model: bool = False, **extra: Any):
  """Builds a random tiny HF checkpoint and `save_pretrained`s it to `path`.

  Args:
    path: output directory (created).
    arch: "llama", "qwen2" (qkv bias), "qwen3" (q/k norm), "mistral" or
      "phi" (Phi-1.5's PhiForCausalLM).
    vocab_size ... max_position_embeddings: the architecture.
    sliding_window: Qwen2/Qwen3/Mistral; a window on every layer.
    max_shard_size: e.g. "20KB" to write a sharded checkpoint with
      `model.safetensors.index.json`; None for a single file.
    config_dialect: "v5" (rope_parameters) or "v4" (top-level rope_theta /
      rope_scaling).
    dtype: "float32" or "bfloat16" storage dtype of the saved tensors.
    seed: torch seed of the random weights.
    init_std: std of the random weights.
    return_model: also return the in-memory fp32 transformers model.
    **extra: further HF config fields.

  Returns:
    `path` (a str), or `(path, hf_model)` with `return_model=True`.
  """
  import torch  # pylint: disable=g-import-not-at-top
  if config_dialect not in ("v4", "v5"):
    raise ValueError(f"config_dialect must be 'v4' or 'v5', got "
                     f"{config_dialect!r}")
  path = os.fspath(path)
  model = make_hf_model(
      arch, seed=seed, init_std=init_std, vocab_size=vocab_size,
      hidden_size=hidden_size, intermediate_size=intermediate_size,
      num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
      head_dim=head_dim, tie_embeddings=tie_embeddings, rope_theta=rope_theta,
      rope_scaling=rope_scaling,
      max_position_embeddings=max_position_embeddings,
      sliding_window=sliding_window, **extra)
  to_save = model
  if dtype == "bfloat16":
    import copy  # pylint: disable=g-import-not-at-top
    to_save = copy.deepcopy(model).to(torch.bfloat16)
  elif dtype != "float32":
    raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
  kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
  to_save.save_pretrained(path, safe_serialization=True, **kw)
  if config_dialect == "v4":
    to_v4_dialect(path)
  return (path, model) if return_model else path


def make_chat_checkpoint(path: str | os.PathLike, arch: str = "llama", *,
                         vocab_size: int = 416, num_layers: int = 1,
                         init_std: float = 0.05, **config_kw: Any) -> str:
  """A tiny random checkpoint with the tiny ChatML tokenizer beside it.

  What a real-run test starts from: one directory that `io.pretrained.load`
  reads as the model and `pretrained.tokenizer` as its tokenizer
  (`tokenizer_fixtures.make_hf_tokenizer`: 400 ids, so `vocab_size` >= 400;
  416 rounds it up to a multiple of 16). `config_kw` goes to
  `make_hf_checkpoint`. Returns `path`.
  """
  from jaxlab.testing import tokenizer_fixtures  # pylint: disable=g-import-not-at-top
  tokenizer_fixtures.make_hf_tokenizer(path)
  return make_hf_checkpoint(path, arch, vocab_size=vocab_size,
                            num_layers=num_layers, init_std=init_std,
                            **config_kw)


def load_hf_model(path: str | os.PathLike):
  """Loads a checkpoint with transformers (fp32, eager attention, eval)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.AutoModelForCausalLM.from_pretrained(
      os.fspath(path), dtype=torch.float32,
      attn_implementation="eager").eval()


def hf_logits(model, input_ids_bt, attention_mask_bt=None) -> np.ndarray:
  """Float32 numpy logits `[B, T, V]` of a transformers model."""
  import torch  # pylint: disable=g-import-not-at-top
  ids = torch.as_tensor(np.asarray(input_ids_bt), dtype=torch.long)
  kw = {}
  if attention_mask_bt is not None:
    kw["attention_mask"] = torch.as_tensor(np.asarray(attention_mask_bt),
                                           dtype=torch.long)
  with torch.no_grad():
    return model(input_ids=ids, **kw).logits.float().numpy()


def hf_positions(attention_mask_bt) -> np.ndarray:
  """Position ids counted over real tokens (padding clipped to 0), the
  convention of `jaxlab.models.decoder.Decoder.default_positions` and of
  transformers' `generate` for left-padded batches."""
  mask = np.asarray(attention_mask_bt).astype(np.int64)
  return np.maximum(np.cumsum(mask, axis=1) - 1, 0)


def hf_forward(model, input_ids_bt, attention_mask_bt=None, *,
               position_ids_bt=None, past_key_values=None,
               output_attentions: bool = False, use_cache: bool = False):
  """One transformers forward (no grad); returns its output object.

  `attention_mask_bt` covers the cached tokens too when `past_key_values`
  is given (transformers' convention); `output_attentions=True` needs the
  eager attention implementation (what `load_hf_model` / `make_hf_model`
  give), whose probabilities `out.attentions` are `[B, N, T, S]` per layer.
  """
  import torch  # pylint: disable=g-import-not-at-top
  kw = dict(output_attentions=output_attentions, use_cache=use_cache)
  if attention_mask_bt is not None:
    kw["attention_mask"] = torch.as_tensor(np.asarray(attention_mask_bt),
                                           dtype=torch.long)
  if position_ids_bt is not None:
    kw["position_ids"] = torch.as_tensor(np.asarray(position_ids_bt),
                                         dtype=torch.long)
  if past_key_values is not None:
    kw["past_key_values"] = past_key_values
  ids = torch.as_tensor(np.asarray(input_ids_bt), dtype=torch.long)
  with torch.no_grad():
    return model(input_ids=ids, **kw)


# ViT / DeiT image classifiers: arch -> (config class, model class).
VIT_CLASSES = {
    "vit": ("ViTConfig", "ViTForImageClassification"),
    "deit": ("DeiTConfig", "DeiTForImageClassification"),
    "deit_teacher": ("DeiTConfig", "DeiTForImageClassificationWithTeacher"),
}


def make_vit_checkpoint(path: str | os.PathLike, arch: str = "vit", *,
                        image_size: int = 16, patch_size: int = 4,
                        hidden_size: int = 32, num_layers: int = 2,
                        num_heads: int = 2, intermediate_size: int = 64,
                        num_labels: int = 10, seed: int = 0,
                        init_std: float = 0.2,
                        preprocessor: Mapping[str, Any] | None = None,
                        return_model: bool = False, **extra: Any):
  """A random tiny transformers ViT / DeiT classifier `save_pretrained` to
  `path` (arch: "vit", "deit", "deit_teacher"; weights drawn with std
  `init_std` from torch seed `seed`). With `preprocessor` (a dict), it is
  written as `preprocessor_config.json` beside the weights. Returns `path`
  (or `(path, hf_model)` with `return_model=True`)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  if arch not in VIT_CLASSES:
    raise ValueError(f"arch must be one of {sorted(VIT_CLASSES)}, got "
                     f"{arch!r}")
  cfg_cls, model_cls = (getattr(transformers, n) for n in VIT_CLASSES[arch])
  cfg = cfg_cls(image_size=image_size, patch_size=patch_size,
                hidden_size=hidden_size, num_hidden_layers=num_layers,
                num_attention_heads=num_heads,
                intermediate_size=intermediate_size, num_labels=num_labels,
                **extra)
  torch.manual_seed(seed)
  model = model_cls(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("bias") and "norm" not in name:
        p.normal_(0.0, init_std)
      elif "layernorm" in name and name.endswith("weight"):
        p.uniform_(0.5, 1.5)
      else:
        p.normal_(0.0, init_std)
  path = os.fspath(path)
  model.save_pretrained(path, safe_serialization=True)
  if preprocessor is not None:
    with open(os.path.join(path, "preprocessor_config.json"), "w") as fh:
      json.dump(dict(preprocessor), fh, indent=2)
  return (path, model) if return_model else path
