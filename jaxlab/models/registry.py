"""Models by name: `config.model.name` -> a factory building the NNX module.

    factory = registry.get_factory(config.model, vocab_size=259, seed=0)
    model = factory()           # call under jit to create it born-sharded

A builder is `fn(model_cfg: ConfigDict, *, vocab_size, seed) -> ModelSpec`.
Other model families register with `@registry.register("vit")`.
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
available = _BUILDERS.names


def get_spec(model_cfg: Mapping[str, Any], **kw) -> ModelSpec:
  name = model_cfg.get("name", "decoder")
  return _BUILDERS.get(name)(model_cfg, **kw)


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


@register("decoder")
def _build_decoder(model_cfg, *, vocab_size: int | None = None,
                   seed: int = 0) -> ModelSpec:
  cfg = decoder_config(model_cfg, vocab_size=vocab_size)
  return ModelSpec(
      factory=lambda: decoder_lib.Decoder(cfg, rngs=nnx.Rngs(seed)),
      config=cfg,
      flops_per_token=lambda t: decoder_train_flops_per_token(cfg, t))


@register("vit_classifier")
def _build_vit_classifier(model_cfg, *, vocab_size: int | None = None,
                          seed: int = 0) -> ModelSpec:
  """`jaxlab.models.vit_classifier` (images -> logits; no vocabulary)."""
  del vocab_size
  from jaxlab.models import vit_classifier  # pylint: disable=g-import-not-at-top
  cfg = vit_classifier.config_from_dict(model_cfg)
  return ModelSpec(
      factory=lambda: vit_classifier.ViTClassifier(cfg, rngs=nnx.Rngs(seed)),
      config=cfg)


@register("controller")
def _build_controller(model_cfg, *, vocab_size: int | None = None,
                      seed: int = 0) -> ModelSpec:
  """Decoder fields plus a `controller` section (paper I, ControllerConfig)."""
  from jaxlab.models import controller  # pylint: disable=g-import-not-at-top
  dcfg = decoder_config({k: v for k, v in dict(model_cfg).items()
                         if k != "controller"}, vocab_size=vocab_size)
  ccfg = controller.controller_config(model_cfg.get("controller"))
  n_ctrl = len(controller.controller_layers(dcfg.num_layers, ccfg.every_p))
  return ModelSpec(
      factory=lambda: controller.ControlledDecoder(dcfg, ccfg,
                                                   rngs=nnx.Rngs(seed)),
      config=dcfg,
      flops_per_token=lambda t: decoder_train_flops_per_token(dcfg, t) + 3.0 *
      n_ctrl * controller.controller_forward_flops(dcfg.dim, ccfg))


@register("speech_tokenizer")
def _build_speech_tokenizer(model_cfg, *, vocab_size: int | None = None,
                            seed: int = 0) -> ModelSpec:
  """StableToken tokenizer (paper E); vocab_size = CTC classes incl. blank."""
  from jaxlab.models import speech_tokenizer  # pylint: disable=g-import-not-at-top
  cfg = speech_tokenizer.config_from_dict(model_cfg, vocab_size=vocab_size)
  return ModelSpec(
      factory=lambda: speech_tokenizer.SpeechTokenizer(
          cfg, rngs=nnx.Rngs(seed)),
      config=cfg)


@register("video")
def _build_video(model_cfg, *, vocab_size: int | None = None,
                 seed: int = 0) -> ModelSpec:
  """`jaxlab.models.video.VideoLM`: decoder fields + `vit` + `video`."""
  from jaxlab.models import video  # pylint: disable=g-import-not-at-top
  cfg = video.config_from_dict(model_cfg, vocab_size=vocab_size)
  return ModelSpec(factory=lambda: video.VideoLM(cfg, rngs=nnx.Rngs(seed)),
                   config=cfg)


@register("qwen2_5_vl")
def _build_qwen2_5_vl(model_cfg, *, vocab_size: int | None = None,
                      seed: int = 0) -> ModelSpec:
  """`jaxlab.models.qwen2_vl.Qwen2VL`: decoder fields + a `vision` section
  (VisionConfig fields) + image/video token ids and `mrope_section`."""
  from jaxlab.models import qwen2_vl  # pylint: disable=g-import-not-at-top
  cfg = qwen2_vl.config_from_dict(model_cfg, vocab_size=vocab_size)
  return ModelSpec(
      factory=lambda: qwen2_vl.Qwen2VL(cfg, rngs=nnx.Rngs(seed)),
      config=cfg)


@register("qwen2_vl")
def _build_qwen2_vl(model_cfg, *, vocab_size: int | None = None,
                    seed: int = 0) -> ModelSpec:
  """Qwen2-VL: like "qwen2_5_vl" with `vision.variant` "qwen2_vl" (LayerNorm,
  quick_gelu MLP, no window attention) by default."""
  from jaxlab.models import qwen2_vl  # pylint: disable=g-import-not-at-top
  cfg = qwen2_vl.config_from_dict(model_cfg, vocab_size=vocab_size,
                                  variant="qwen2_vl")
  return ModelSpec(
      factory=lambda: qwen2_vl.Qwen2VL(cfg, rngs=nnx.Rngs(seed)),
      config=cfg)
