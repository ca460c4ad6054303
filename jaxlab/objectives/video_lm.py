"""Video-conditioned next-token loss (the `video_lm` loss).

batch: `frames [B, F, H, W, C]` (float in [0, 1]), `inputs [B, T]`,
`targets [B, T]` (inputs shifted by one), `loss_mask [B, T]` (1 on the
answer tokens to learn), optional `attention_mask [B, T]` (1 on real input
tokens; right padding). The model is a `jaxlab.models.video.VideoLM` (or
any module with `forward(ids, attention_mask, prefix_inputs=frames)`
returning logits of the ids): the frames are its `inputs_embeds` prefix and
the ViT and temporal blocks train with the decoder.
"""

from typing import Any

import jax
import jax.numpy as jnp

from jaxlab.train import losses


def video_lm_logits(model, batch: dict[str, jax.Array]) -> jax.Array:
  """Logits `[B, T, V]` of `batch["inputs"]` after the frame prefix."""
  return model.forward(batch["inputs"], batch.get("attention_mask"),
                       prefix_inputs=batch["frames"]).logits


@losses.register("video_lm")
def video_lm_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                  config: Any = None):
  """Token-mean NLL of `targets` over `loss_mask`, given the frames.

  Also reports `answer_acc`: the fraction of masked tokens whose argmax
  equals the target (teacher-forced token accuracy).
  """
  del rng, config
  logits = video_lm_logits(model, batch)
  mask = batch.get("loss_mask")
  if mask is None:
    mask = jnp.ones_like(batch["targets"], dtype=jnp.float32)
  mask = mask.astype(jnp.float32)
  total, count = losses.masked_token_nll(logits, batch["targets"], mask)
  hit = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32)
  acc = jnp.sum(hit * mask) / jnp.maximum(jnp.sum(mask), 1.0)
  return total / jnp.maximum(count, 1.0), {"tokens": count,
                                           "answer_acc": acc}
