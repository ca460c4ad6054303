"""Registry of training losses: the trainer's one plug-in point.

A loss is `fn(model, batch, *, rng, config) -> (loss, metrics)`:

  model:   the NNX model being trained (a `Decoder` or any module the
           experiment builds),
  batch:   dict of arrays (global, sharded on the batch axis),
  rng:     a `jax.random` key for this step (dropout, sampling, masks),
  config:  the experiment's `config.loss` ConfigDict (static under jit),

returning a scalar float32 loss and a dict of scalar metrics (logged with the
loss). A loss that also takes a keyword `step` (or `**kwargs`) receives the
int32 number of optimizer updates before this one (0 at the first; the count
the lr schedule reads), e.g. for annealed temperatures or weights; the
trainer calls every loss through `call`, so older losses keep working.
A loss may update non-weight variables of the model (an `nnx.BatchStat`, an
`nnx.Variable` subclass holding a running estimate); the trainer keeps the
new values for the next step. Papers register their objectives here by name, e.g. in
`jaxlab/objectives/rerank.py`:

    @losses.register("rerank")
    def rerank_loss(model, batch, *, rng, config): ...

and a config selects it with `config.loss.name = "rerank"`.
"""

from collections.abc import Callable
import inspect
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab import registry

LossFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]
LOSSES: registry.Registry[LossFn] = registry.Registry("loss")
register = LOSSES.register
get = LOSSES.get
available = LOSSES.names


def accepts_step(loss_fn: Callable) -> bool:
  """Whether `loss_fn` takes a `step` keyword (or `**kwargs`)."""
  try:
    params = inspect.signature(loss_fn).parameters.values()
  except (TypeError, ValueError):
    return False
  return any(p.name == "step" and p.kind in (p.KEYWORD_ONLY,
                                             p.POSITIONAL_OR_KEYWORD)
             or p.kind == p.VAR_KEYWORD for p in params)


def call(loss_fn: Callable, model, batch, *, rng, config, step):
  """`loss_fn(model, batch, rng=, config=[, step=])`: `step` if it takes it."""
  if accepts_step(loss_fn):
    return loss_fn(model, batch, rng=rng, config=config, step=step)
  return loss_fn(model, batch, rng=rng, config=config)


def sequence_nll(logits_btv: jax.Array, targets_bt: jax.Array,
                 mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Per-sequence summed NLL `[B]` over `mask` and the token counts `[B]`."""
  nll_bt = optax.softmax_cross_entropy_with_integer_labels(
      logits_btv.astype(jnp.float32), targets_bt)
  mask = mask_bt.astype(jnp.float32)
  return jnp.sum(nll_bt * mask, axis=-1), jnp.sum(mask, axis=-1)


def masked_token_nll(logits_btv: jax.Array, targets_bt: jax.Array,
                     mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Sum of token NLL over `mask` and the number of masked-in tokens."""
  nll_b, count_b = sequence_nll(logits_btv, targets_bt, mask_bt)
  return jnp.sum(nll_b), jnp.sum(count_b)


@register("lm")
def lm_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
            config: Any = None):
  """Next-token cross-entropy, token-mean over `batch["loss_mask"]`.

  batch: `inputs [B, T]`, `targets [B, T]`, optional `loss_mask [B, T]`,
  `positions [B, T]`, `segment_ids [B, T]` (packed sequences).
  """
  del rng, config
  mask = batch.get("loss_mask")
  if mask is None:
    mask = jnp.ones_like(batch["targets"], dtype=jnp.float32)
  logits = model(batch["inputs"], positions=batch.get("positions"),
                 segment_ids=batch.get("segment_ids"))
  total, count = masked_token_nll(logits, batch["targets"], mask)
  loss = total / jnp.maximum(count, 1.0)
  return loss, {"tokens": count}
