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
from jaxlab.nn import dtypes

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
  dt = dtypes.at_least_float32(logits_btv.dtype)
  nll_bt = optax.softmax_cross_entropy_with_integer_labels(
      logits_btv.astype(dt), targets_bt)
  mask = mask_bt.astype(dt)
  return jnp.sum(nll_bt * mask, axis=-1), jnp.sum(mask, axis=-1)


def masked_token_nll(logits_btv: jax.Array, targets_bt: jax.Array,
                     mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Sum of token NLL over `mask` and the number of masked-in tokens."""
  nll_b, count_b = sequence_nll(logits_btv, targets_bt, mask_bt)
  return jnp.sum(nll_b), jnp.sum(count_b)


def chunked_token_nll(unembed: Callable[[jax.Array], jax.Array],
                      h_btd: jax.Array, targets_bt: jax.Array,
                      mask_bt: jax.Array, chunk_size: int
                      ) -> tuple[jax.Array, jax.Array]:
  """`masked_token_nll` of `unembed(h)` without all `[B, T, V]` logits.

  The B*T token rows are cut into chunks of `chunk_size` (padded with
  masked-out rows); a `lax.scan` computes each chunk's logits `[C, V]`,
  its cross-entropy and masked sum, and `jax.checkpoint` makes the backward
  pass recompute a chunk's logits instead of keeping them, so at most one
  chunk of float32 logits (and its softmax gradient) is live at a time.
  Same value and gradient as the plain loss up to float summation order.

  Args:
    unembed: `h [..., D] -> float32 logits [..., V]` (final norm + LM head,
      e.g. `Decoder.unembed`).
    h_btd: last hidden states `[B, T, D]` (before the final norm).
    targets_bt: int targets `[B, T]`.
    mask_bt: loss mask `[B, T]`.
    chunk_size: token rows per chunk (> 0).

  Returns:
    (sum of masked NLL, number of masked-in tokens), float32 scalars.
  """
  b, t, d = h_btd.shape
  n = b * t
  c = int(min(chunk_size, n))
  pad = (-n) % c
  h = jnp.pad(h_btd.reshape(n, d), ((0, pad), (0, 0)))
  y = jnp.pad(targets_bt.reshape(n), (0, pad))
  dt = dtypes.at_least_float32(h_btd.dtype)
  m = jnp.pad(mask_bt.reshape(n).astype(dt), (0, pad))
  k = (n + pad) // c

  @jax.checkpoint
  def chunk_nll(h_cd, y_c, m_c):
    logits = unembed(h_cd).astype(dt)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, y_c)
    return jnp.sum(nll * m_c)

  def body(total, xs):
    return total + chunk_nll(*xs), None

  total, _ = jax.lax.scan(
      body, jnp.zeros((), dt),
      (h.reshape(k, c, d), y.reshape(k, c), m.reshape(k, c)))
  return total, jnp.sum(m)


@register("lm")
def lm_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
            config: Any = None):
  """Next-token cross-entropy, token-mean over `batch["loss_mask"]`.

  batch: `inputs [B, T]`, `targets [B, T]`, optional `loss_mask [B, T]`,
  `positions [B, T]`, `segment_ids [B, T]` (packed sequences).

  `config.chunk_size` (default 0: off, the plain loss over full logits):
  compute the LM head and cross-entropy over chunks of that many tokens
  (`chunked_token_nll`) so the `[B, T, V]` float32 logits are never all
  live; needs a model with `forward(..., output_hidden_states=True)` and
  `unembed` (the `Decoder`).
  """
  del rng
  chunk = (int(config.get("chunk_size", 0) or 0)
           if hasattr(config, "get") else 0)
  mask = batch.get("loss_mask")
  if mask is None:
    mask = jnp.ones_like(batch["targets"], dtype=jnp.float32)
  kwargs = dict(positions=batch.get("positions"),
                segment_ids=batch.get("segment_ids"))
  if chunk > 0:
    if not (hasattr(model, "unembed") and hasattr(model, "forward")):
      raise ValueError(
          f"config.loss.chunk_size={chunk} needs a model with `forward` and "
          f"`unembed` (a Decoder); {type(model).__name__} has not: set "
          "config.loss.chunk_size=0")
    # The logits `forward` also computes are unused: jit drops them.
    out = model.forward(batch["inputs"], output_hidden_states=True, **kwargs)
    total, count = chunked_token_nll(model.unembed, out.hidden_states[-1],
                                     batch["targets"], mask, chunk)
  else:
    logits = model(batch["inputs"], **kwargs)
    total, count = masked_token_nll(logits, batch["targets"], mask)
  loss = total / jnp.maximum(count, 1.0)
  return loss, {"tokens": count}
