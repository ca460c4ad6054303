"""Image classification cross-entropy (the `classification` loss).

batch: `images [B, H, W, C]` (float in [0, 1]), `labels [B]` (int). The model
maps images to logits `[B, C]` (e.g. `jaxlab.models.vit_classifier`). As in
Vulcan's code (papers/O-S.md O.1), a class-subset task keeps the full C-way
head: labels keep their original ids and the loss is over all C logits.
"""

from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab.train import losses


def cross_entropy(logits_bc: jax.Array, labels_b: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """(mean CE over the batch, accuracy) of argmax over all C logits."""
  logits_bc = logits_bc.astype(jnp.float32)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits_bc, labels_b)
  acc = jnp.mean((jnp.argmax(logits_bc, -1) == labels_b).astype(jnp.float32))
  return jnp.mean(ce), acc


@losses.register("classification")
def classification_loss(model, batch: dict[str, jax.Array], *,
                        rng: jax.Array, config: Any = None):
  """Mean softmax cross-entropy of `model(images)` against `labels`."""
  del rng, config
  ce, acc = cross_entropy(model(batch["images"]), batch["labels"])
  return ce, {"accuracy": acc}
