"""A prefix LM: embeddings of another modality before the text of a decoder.

    model = ImagePrefixLM(dec_cfg, vit_cfg, rngs=nnx.Rngs(0))   # images
    out = model.forward(ids_bt, attention_mask=mask_bt,         # DecoderOutput
                        prefix_inputs=images_bhwc)              # logits of ids
    logits_btv = model(images_bhwc, ids_bt)
    result = model.generate(images_bhwc, prompts, max_new_tokens=8,
                            eos_id=2)                           # sampler's

`PrefixLM` is the shared part: a subclass holds its decoder as `decoder`
and defines `prefix_embeds(prefix_inputs) -> [B, P, D]` (images through a
ViT here, frames through a ViT and temporal blocks in
`jaxlab.models.video.VideoLM`); `forward` feeds `[prefix; token
embeddings]` through `Decoder.forward(inputs_embeds=...)` and returns the
logits of the T ids only, with position ids counted over [prefix; real
ids] exactly as `jaxlab.decoding.sampler.generate(prefix_embeds=...)`
counts them. `forward(ids, attention_mask, prefix_inputs=x)` is the
signature the GRPO loss (`jaxlab.objectives.grpo.policy_token_logprobs`)
and the rollout's prefix hook (`jaxlab.rl.rollout.rollout(prefix_inputs=)`)
call, so a prefix LM trains from rollout batches that carry its inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.models import decoder as decoder_lib
from jaxlab.models import vit as vit_lib


def prefix_forward(decoder: decoder_lib.Decoder, prefix_embeds: jax.Array,
                   input_ids_bt: jax.Array,
                   attention_mask: jax.Array | None = None,
                   **decoder_kwargs) -> decoder_lib.DecoderOutput:
  """`decoder` over `[prefix_embeds; embed(ids)]`, logits of the T ids.

  `attention_mask [B, T]` marks the real ids (right padding); the P prefix
  rows are always attended. Row t of the logits predicts ids[:, t + 1].
  """
  b, p = prefix_embeds.shape[:2]
  h = jnp.concatenate(
      [prefix_embeds, decoder.embed(input_ids_bt).astype(prefix_embeds.dtype)],
      axis=1)
  mask = None if attention_mask is None else jnp.concatenate(
      [jnp.ones((b, p), bool), attention_mask.astype(bool)], axis=1)
  out = decoder.forward(inputs_embeds=h, attention_mask=mask,
                        **decoder_kwargs)
  return dataclasses.replace(out, logits=out.logits[:, p:])


class PrefixLM(nnx.Module):
  """Base of decoder LMs read after a prefix of embeddings.

  Subclasses set `self.decoder` (a `Decoder`) and define `prefix_embeds`;
  `PREFIX_INPUTS` names their inputs in errors, `PREFIX_UNIT` one of them.
  """

  PREFIX_INPUTS = "prefix inputs"
  PREFIX_UNIT = "prefix input"

  def prefix_embeds(self, prefix_inputs: jax.Array) -> jax.Array:
    raise NotImplementedError

  def forward(self, input_ids_bt: jax.Array,
              attention_mask: jax.Array | None = None, *,
              prefix_inputs: jax.Array | None = None,
              prefix_embeds: jax.Array | None = None,
              **decoder_kwargs) -> decoder_lib.DecoderOutput:
    """Decoder output over `[prefix; ids]`; logits of the T ids only.

    The prefix is `prefix_embeds [B, P, D]` or, computed here so the
    encoder trains with the decoder, `prefix_embeds(prefix_inputs)`. Row t
    of the logits predicts ids[:, t + 1] (and row -1 the next token).
    Other keywords go to `Decoder.forward` (hidden states then cover the
    prefix too).
    """
    if (prefix_inputs is None) == (prefix_embeds is None):
      raise ValueError(f"{type(self).__name__}.forward needs exactly one of "
                       f"prefix_inputs ({self.PREFIX_INPUTS}) and "
                       "prefix_embeds")
    if prefix_embeds is None:
      prefix_embeds = self.prefix_embeds(prefix_inputs)
    return prefix_forward(self.decoder, prefix_embeds, input_ids_bt,
                          attention_mask, **decoder_kwargs)

  def __call__(self, prefix_inputs: jax.Array, input_ids_bt: jax.Array,
               attention_mask: jax.Array | None = None) -> jax.Array:
    """Logits `[B, T, V]` of the ids given the prefix inputs."""
    return self.forward(input_ids_bt, attention_mask,
                        prefix_inputs=prefix_inputs).logits

  def generate(self, prefix_inputs, prompts: Sequence[Sequence[int]], **kw):
    """`jaxlab.decoding.sampler.generate` of the decoder after the prefix.

    `prefix_inputs` (host or device, float) has one row per prompt; the
    keywords are the sampler's (`max_new_tokens`, `temperature`, `eos_id`,
    `key`, ...). Returns the sampler's `GenerateResult` (new tokens only).
    """
    from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
    x = jnp.asarray(prefix_inputs, jnp.float32)
    if x.shape[0] != len(prompts):
      raise ValueError(f"{x.shape[0]} {self.PREFIX_UNIT}s for {len(prompts)}"
                       f" prompts; give one {self.PREFIX_UNIT} per prompt")
    prefix = encode_prefix(self, x)
    return sampler.generate(self.decoder, prompts, prefix_embeds=prefix, **kw)


@nnx.jit
def encode_prefix(model: PrefixLM, prefix_inputs: jax.Array) -> jax.Array:
  """Jitted `model.prefix_embeds(x)` (one compile per input shape)."""
  return model.prefix_embeds(prefix_inputs)


class ImagePrefixLM(PrefixLM):
  """ViT patch tokens (projected to the decoder width) + a decoder LM.

  The image policy of the chart-to-code miniature (paper F): the image's
  `num_patches` ViT tokens are the prefix. Images `[B, H, W, C]` in [0, 1].
  """

  PREFIX_INPUTS = "images [B, H, W, C]"
  PREFIX_UNIT = "image"

  def __init__(self, dec_cfg: decoder_lib.DecoderConfig,
               vit_cfg: vit_lib.ViTConfig, *, rngs: nnx.Rngs):
    if vit_cfg.out_dim != dec_cfg.dim:
      raise ValueError(f"vit out_dim={vit_cfg.out_dim} must equal the "
                       f"decoder width model.dim={dec_cfg.dim}")
    # ViT first, then the decoder: the initialisation order of the policy
    # before it moved here (same seeds, same weights).
    self.vit = vit_lib.ViTEncoder(vit_cfg, rngs=rngs)
    self.dec = decoder_lib.Decoder(dec_cfg, rngs=rngs)
    self.num_prefix = vit_cfg.num_patches

  @property
  def decoder(self) -> decoder_lib.Decoder:
    # Stored as `dec` (the parameter paths of saved policies).
    return self.dec

  def prefix_embeds(self, images_bhwc: jax.Array) -> jax.Array:
    """Images `[B, H, W, C]` in [0, 1] -> prefix `[B, P, D]`."""
    return self.vit(images_bhwc)

  def logits(self, images_bhwc, ids_bt):
    """Logits `[B, T, V]` where row t predicts ids[:, t + 1]."""
    return self.forward(ids_bt, prefix_inputs=images_bhwc).logits


def image_prefix_lm(model_cfg, vit_cfg, *, vocab_size: int,
                    seed: int) -> ImagePrefixLM:
  """`ImagePrefixLM` from a `config.model` section (decoder fields) and a
  `ViTConfig` field mapping (its `out_dim` is the decoder width)."""
  from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
  dec_cfg = registry.decoder_config(model_cfg, vocab_size=vocab_size)
  vit = vit_lib.ViTConfig(**dict(vit_cfg), out_dim=dec_cfg.dim)
  return ImagePrefixLM(dec_cfg, vit, rngs=nnx.Rngs(seed))


# `config.model` names of the Qwen-VL prefix LMs
# (`jaxlab.models.qwen2_vl_prefix`).
QWEN_VL_PREFIX_NAMES = ("qwen2_5_vl_prefix", "qwen2_vl_prefix")


def build_image_prefix_lm(model_cfg, vit_cfg, *, vocab_size: int,
                          seed: int) -> PrefixLM:
  """An image prefix LM by `model_cfg.name`: a Qwen-VL prefix name builds
  `Qwen2VLPrefixLM` through the registry (its `vision` / `prefix`
  sections; `vit_cfg` unused), any other `image_prefix_lm`."""
  if model_cfg.get("name") in QWEN_VL_PREFIX_NAMES:
    from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
    return registry.get_spec(model_cfg, vocab_size=vocab_size,
                             seed=seed).factory()
  return image_prefix_lm(model_cfg, vit_cfg, vocab_size=vocab_size,
                         seed=seed)
