"""The model registry's builders of `jaxlab.models.qwen2_vl` ("qwen2_5_vl",
"qwen2_vl"), found by the registry's package walk of `jaxlab.models`."""

from flax import nnx

from jaxlab.models import qwen2_vl
from jaxlab.models import registry


@registry.register("qwen2_5_vl")
def _build_qwen2_5_vl(model_cfg, *, vocab_size: int | None = None,
                      seed: int = 0) -> registry.ModelSpec:
  """`jaxlab.models.qwen2_vl.Qwen2VL`: decoder fields + a `vision` section
  (VisionConfig fields) + image/video token ids and `mrope_section`."""
  cfg = qwen2_vl.config_from_dict(model_cfg, vocab_size=vocab_size)
  return registry.ModelSpec(
      factory=lambda: qwen2_vl.Qwen2VL(cfg, rngs=nnx.Rngs(seed)),
      config=cfg)


@registry.register("qwen2_vl")
def _build_qwen2_vl(model_cfg, *, vocab_size: int | None = None,
                    seed: int = 0) -> registry.ModelSpec:
  """Qwen2-VL: like "qwen2_5_vl" with `vision.variant` "qwen2_vl" (LayerNorm,
  quick_gelu MLP, no window attention) by default."""
  cfg = qwen2_vl.config_from_dict(model_cfg, vocab_size=vocab_size,
                                  variant="qwen2_vl")
  return registry.ModelSpec(
      factory=lambda: qwen2_vl.Qwen2VL(cfg, rngs=nnx.Rngs(seed)),
      config=cfg)
