"""Models by name: `config.model.name` -> a factory building the NNX module.

    factory = registry.get_factory(config.model, vocab_size=259, seed=0)
    model = factory()           # call under jit to create it born-sharded

A builder is `fn(model_cfg: ConfigDict, *, vocab_size, seed) -> ModelSpec`.
A model family registers its builder in its own module, next to the class
(`@registry.register("vit_classifier")` in `jaxlab/models/vit_classifier.py`);
the registry finds it by package walk: a name it does not know yet makes it
import every module of `jaxlab.models` (plugin directories included, see
`jaxlab.registry`), so a new model is a new file. "decoder" is built here.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from flax import nnx

from jaxlab import registry
from jaxlab.models import decoder as decoder_lib


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """How to build a model plus what the trainer needs to know about it."""
  factory: Callable[[], nnx.Module]
  config: Any = None
  # Training FLOPs per token for MFU (None: unknown, MFU not reported).
  flops_per_token: Callable[[int], float] | None = None


Builder = Callable[..., ModelSpec]
_BUILDERS: registry.Registry[Builder] = registry.Registry("model")
register = _BUILDERS.register


def discover() -> tuple[str, ...]:
  """Imports every module of `jaxlab.models` (their builders register);
  returns the registered names."""
  registry.import_package_modules(__name__.rpartition(".")[0])
  return _BUILDERS.names()


def available() -> tuple[str, ...]:
  """Every registered model name (after discovery)."""
  return discover()


def get_builder(name: str) -> Builder:
  """The builder registered as `name` (discovering the model modules first
  when it is not registered yet); unknown: one error listing the names."""
  if name not in _BUILDERS:
    discover()
  return _BUILDERS.get(name)


def get_spec(model_cfg: Mapping[str, Any], **kw) -> ModelSpec:
  return get_builder(model_cfg.get("name", "decoder"))(model_cfg, **kw)


def num_frames(model_cfg: Mapping[str, Any]) -> int:
  """Frames per clip of a video model's `config.model`: `video.num_frames`
  (name "video", `jaxlab.models.video`) or `prefix.num_frames` (the
  Qwen2.5-VL prefix LM, `jaxlab.models.qwen2_vl_prefix`)."""
  for section in ("video", "prefix"):
    sub = model_cfg.get(section)
    if sub is not None and "num_frames" in sub:
      return int(sub["num_frames"])
  raise ValueError(f"config.model (name {model_cfg.get('name', 'decoder')!r})"
                   " has no video.num_frames or prefix.num_frames: not a "
                   "video model")


def decoder_config(model_cfg: Mapping[str, Any], *,
                   vocab_size: int | None = None) -> decoder_lib.DecoderConfig:
  """`config.model` fields (minus `name`) -> DecoderConfig; unknown = error."""
  fields = {f.name for f in dataclasses.fields(decoder_lib.DecoderConfig)}
  kw = {}
  for key, value in dict(model_cfg).items():
    if key == "name":
      continue
    if key not in fields:
      raise ValueError(f"model.{key} is not a DecoderConfig field; valid: "
                       f"{', '.join(sorted(fields))}")
    if hasattr(value, "to_dict"):
      value = value.to_dict()
    if isinstance(value, list):
      value = tuple(value)
    kw[key] = value
  if vocab_size is not None and kw.get("vocab_size") in (None, 0, -1):
    kw["vocab_size"] = vocab_size
  return decoder_lib.DecoderConfig(**kw)


def decoder_train_flops_per_token(cfg: decoder_lib.DecoderConfig,
                                  seq_len: int) -> float:
  """6 N (matmul params, incl. LM head) + 6 L T H_q d_head (attention).

  The usual PaLM/Chinchilla estimate: forward 2 flops per weight per token,
  backward twice that; attention scores and values add 2*2*T*d per layer per
  token forward (counted causal-unmasked, as MFU conventions do).
  """
  hd = cfg.resolved_head_dim
  n_matmul = cfg.num_params() - cfg.vocab_size * cfg.dim * (
      0 if cfg.tie_embeddings else 1)  # input embedding is a gather
  if cfg.tie_embeddings:
    n_matmul = cfg.num_params()
  attn = 12 * cfg.num_layers * seq_len * cfg.num_heads * hd
  return 6.0 * n_matmul + attn


def decoder_forward_flops(cfg, tokens: int, context: int) -> float:
  """FLOPs of `tokens` new tokens each attending to `context` positions.

  2 per matmul weight per token (LM head included, embedding lookup not),
  plus 4 * d_head * H per attended position per layer (scores and values).
  """
  n_matmul = cfg.num_params() - (0 if cfg.tie_embeddings
                                 else cfg.vocab_size * cfg.dim)
  attn = 4 * cfg.num_layers * cfg.num_heads * cfg.resolved_head_dim
  return tokens * (2.0 * n_matmul + attn * context)


@register("decoder")
def _build_decoder(model_cfg, *, vocab_size: int | None = None,
                   seed: int = 0) -> ModelSpec:
  cfg = decoder_config(model_cfg, vocab_size=vocab_size)
  return ModelSpec(
      factory=lambda: decoder_lib.Decoder(cfg, rngs=nnx.Rngs(seed)),
      config=cfg,
      flops_per_token=lambda t: decoder_train_flops_per_token(cfg, t))
