"""Whisper checkpoints -> `jaxlab.models.whisper.Whisper` (the encoder).

A `WhisperModel` / `WhisperForConditionalGeneration` safetensors directory
loads as `(Whisper, WhisperConfig)` through `load_whisper` (its encoder;
the decoder's tensors are not read). `jaxlab.io.hf.load` dispatches here
for such a config.json. Tensor names are transformers' state dict's:
`encoder.*` for a `WhisperModel`, `model.encoder.*` for the
conditional-generation class; both are found.

The name table maps each param of `Whisper` to its tensor and layout:
a torch `Linear` weight `[out, in]` is our kernel transposed, a `Conv1d`
weight `[out, in, k]` our `[k, in, out]`.
"""

from collections.abc import Mapping
import os
from typing import Any

import jax
from flax import nnx

from jaxlab.io.hf import files
from jaxlab.io.hf import fill
from jaxlab.models import whisper


def is_whisper_config(hf: Mapping[str, Any]) -> bool:
  """A Whisper config.json (`model_type` "whisper" or a Whisper class)."""
  archs = hf.get("architectures") or []
  return hf.get("model_type") == "whisper" or any(
      a in whisper.ARCHITECTURES for a in archs)


def whisper_config_from_hf(hf: Mapping[str, Any], *, dtype: str = "float32",
                           param_dtype: str | None = None,
                           where: str = "config.json"
                           ) -> whisper.WhisperConfig:
  """The encoder's `WhisperConfig` from a Whisper config.json."""
  need = ("num_mel_bins", "d_model", "encoder_layers",
          "encoder_attention_heads", "encoder_ffn_dim",
          "max_source_positions")
  missing = [k for k in need if k not in hf]
  if missing:
    raise ValueError(f"{where}: a Whisper config needs {', '.join(missing)}")
  try:
    return whisper.WhisperConfig(
        **{k: int(hf[k]) for k in need},
        activation_function=hf.get("activation_function", "gelu"),
        dtype=dtype, param_dtype=param_dtype or dtype)
  except ValueError as e:
    raise ValueError(f"{where}: {e}") from None


def tensor_table(cfg: whisper.WhisperConfig, prefix: str = "encoder."
                 ) -> fill.Table:
  """`Whisper` param path -> (HF name, HF shape, hf_to_ours, ours_to_hf)."""
  d, f, m = cfg.d_model, cfg.encoder_ffn_dim, cfg.num_mel_bins
  same = lambda x: x  # noqa: E731
  t = lambda x: x.T  # noqa: E731
  conv = lambda x: x.transpose(2, 1, 0)  # noqa: E731  [o,i,k] <-> [k,i,o]
  p = prefix
  table = {
      ("conv1", "kernel"): (p + "conv1.weight", (d, m, 3), conv, conv),
      ("conv1", "bias"): (p + "conv1.bias", (d,), same, same),
      ("conv2", "kernel"): (p + "conv2.weight", (d, d, 3), conv, conv),
      ("conv2", "bias"): (p + "conv2.bias", (d,), same, same),
      ("embed_positions",): (p + "embed_positions.weight",
                             (cfg.max_source_positions, d), same, same),
      ("layer_norm", "scale"): (p + "layer_norm.weight", (d,), same, same),
      ("layer_norm", "bias"): (p + "layer_norm.bias", (d,), same, same),
  }
  for i in range(cfg.encoder_layers):
    q = f"{p}layers.{i}."
    rows = {
        ("self_attn_layer_norm", "scale"): ("self_attn_layer_norm.weight",
                                            (d,), same),
        ("self_attn_layer_norm", "bias"): ("self_attn_layer_norm.bias",
                                           (d,), same),
        ("q_proj", "kernel"): ("self_attn.q_proj.weight", (d, d), t),
        ("q_proj", "bias"): ("self_attn.q_proj.bias", (d,), same),
        ("k_proj", "kernel"): ("self_attn.k_proj.weight", (d, d), t),
        ("v_proj", "kernel"): ("self_attn.v_proj.weight", (d, d), t),
        ("v_proj", "bias"): ("self_attn.v_proj.bias", (d,), same),
        ("out_proj", "kernel"): ("self_attn.out_proj.weight", (d, d), t),
        ("out_proj", "bias"): ("self_attn.out_proj.bias", (d,), same),
        ("final_layer_norm", "scale"): ("final_layer_norm.weight", (d,),
                                        same),
        ("final_layer_norm", "bias"): ("final_layer_norm.bias", (d,), same),
        ("fc1", "kernel"): ("fc1.weight", (f, d), t),
        ("fc1", "bias"): ("fc1.bias", (f,), same),
        ("fc2", "kernel"): ("fc2.weight", (d, f), t),
        ("fc2", "bias"): ("fc2.bias", (d,), same),
    }
    for path, (name, shape, conv_fn) in rows.items():
      table[("layers", i) + path] = (q + name, shape, conv_fn, conv_fn)
  # Param paths under the `Whisper` wrapper.
  return {("encoder",) + k: v for k, v in table.items()}


def load_whisper(path: str | os.PathLike, *, dtype: str = "float32",
                 param_dtype: str | None = None,
                 mesh: jax.sharding.Mesh | None = None, rules: Any = None
                 ) -> tuple[whisper.Whisper, whisper.WhisperConfig]:
  """Loads a Whisper safetensors checkpoint's encoder (no torch).

  With `mesh` (and logical-axis `rules`), every parameter is placed with
  its `NamedSharding` as it is read (kernels FSDP over `embed`, tensor
  parallel over `mlp`; norms and biases replicated). (`jaxlab.io.hf.load`
  dispatches here.)
  """
  path = os.fspath(path)
  hf_json = files.read_config(path)
  where = os.path.join(path, files.CONFIG_FILE)
  cfg = whisper_config_from_hf(hf_json, dtype=dtype, param_dtype=param_dtype,
                               where=where)
  names = files.weight_files(path)
  prefix = next((p for p in ("encoder.", "model.encoder.")
                 if p + "conv1.weight" in names), None)
  if prefix is None:
    raise ValueError(f"{path}: no Whisper encoder tensors (neither "
                     f"'encoder.conv1.weight' nor 'model.encoder.conv1."
                     f"weight') in its safetensors")
  with files.tensor_reader(path, names) as get_tensor:
    model = fill.fill(lambda: whisper.Whisper(cfg, rngs=nnx.Rngs(0)),
                      tensor_table(cfg, prefix), get_tensor, mesh=mesh,
                      rules=rules)
  return model, cfg
