"""LLaDA masked-diffusion objective (spec L, "LLaDA training objective").

A masked diffusion LM is the decoder in bidirectional mode (`causal=False`)
that predicts the clean tokens under a MASK token. Training (Nie et al.,
LLaDA, eq. 3):

  L(theta) = -E_{t ~ U(0,1), x0, xt} [ 1/t * sum_{i: xt^i = MASK}
                                        log p_theta(x0^i | xt) ] / T,

with every token of x0 masked independently with probability t. As in
LLaDA's reference `forward_process`, t is drawn per sequence and moved away
from 0 by `p_mask = (1 - eps) * t + eps` (eps = 1e-3) so that 1/p_mask stays
bounded; the loss is the 1/p_mask-weighted cross-entropy summed over masked
positions divided by the number of positions that could be masked (B * T for
pre-training).

SFT variant (LLaDA sec. 2.3): the prompt is never masked and each sequence's
sum is divided by its answer length (EOS padding counts as answer, so the
model learns to stop), then averaged over the batch.

Registered in `jaxlab.train.losses` as `llada` and `llada_sft`; the
`config.loss` section needs `mask_id` (and may set `eps`).
"""

from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab.train import losses

DEFAULT_EPS = 1e-3


def _field(config: Any, name: str, default: Any = None) -> Any:
  if config is None:
    value = None
  elif isinstance(config, dict):
    value = config.get(name)
  else:
    value = getattr(config, name, None) if name in config else None
  if value is None:
    if default is None:
      raise ValueError(f"config.loss.{name} is required by the llada loss "
                       "(the MASK token id of the model's vocabulary)")
    return default
  return value


def forward_process(rng: jax.Array, shape: tuple[int, int], *,
                    eps: float = DEFAULT_EPS,
                    maskable_bt: jax.Array | None = None
                    ) -> tuple[jax.Array, jax.Array]:
  """(masked `[B, T]` bool, p_mask `[B]`): LLaDA's forward process.

  t ~ U(0, 1) per sequence, p_mask = (1 - eps) t + eps, and position i is
  masked iff u_i < p_mask (u_i ~ U(0, 1)) and it is maskable.
  """
  b, t = shape
  k_t, k_u = jax.random.split(rng)
  p_mask = (1.0 - eps) * jax.random.uniform(k_t, (b,)) + eps
  masked = jax.random.uniform(k_u, (b, t)) < p_mask[:, None]
  if maskable_bt is not None:
    masked = masked & maskable_bt.astype(bool)
  return masked, p_mask


def weighted_masked_nll(logits_btv: jax.Array, targets_bt: jax.Array,
                        masked_bt: jax.Array, p_mask_b: jax.Array
                        ) -> jax.Array:
  """Per-sequence sum over masked positions of NLL / p_mask, `[B]`."""
  nll = optax.softmax_cross_entropy_with_integer_labels(
      logits_btv.astype(jnp.float32), targets_bt)
  return jnp.sum(jnp.where(masked_bt, nll, 0.0), axis=-1) / p_mask_b


def _noised_logits(model, x0_bt, masked_bt, mask_id, batch):
  xt = jnp.where(masked_bt, jnp.asarray(mask_id, x0_bt.dtype), x0_bt)
  return model(xt, positions=batch.get("positions"), causal=False)


@losses.register("llada")
def llada_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
               config: Any = None):
  """LLaDA pre-training loss (eq. 3).

  batch: `inputs [B, T]` clean tokens; optional `loss_mask [B, T]` (1 =
  position may be masked and counts in the normaliser; default all).
  config: `mask_id` (required), `eps` (default 1e-3).
  """
  mask_id = int(_field(config, "mask_id"))
  eps = float(_field(config, "eps", DEFAULT_EPS))
  x0 = batch["inputs"]
  maskable = batch.get("loss_mask")
  masked, p_mask = forward_process(rng, x0.shape, eps=eps,
                                   maskable_bt=maskable)
  logits = _noised_logits(model, x0, masked, mask_id, batch)
  per_seq = weighted_masked_nll(logits, x0, masked, p_mask)
  denom = (jnp.asarray(x0.size, jnp.float32) if maskable is None
           else jnp.maximum(jnp.sum(maskable.astype(jnp.float32)), 1.0))
  loss = jnp.sum(per_seq) / denom
  return loss, {"masked_tokens": jnp.sum(masked.astype(jnp.float32)),
                "mean_p_mask": jnp.mean(p_mask)}


@losses.register("llada_sft")
def llada_sft_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                   config: Any = None):
  """LLaDA SFT loss: prompts never masked, per-answer-length normalisation.

  batch: `inputs [B, T]`, `prompt_mask [B, T]` (1 on prompt tokens, which
  are never masked); optional `loss_mask [B, T]` (0 = padding that is
  neither masked nor counted; default all answer tokens count).
  """
  mask_id = int(_field(config, "mask_id"))
  eps = float(_field(config, "eps", DEFAULT_EPS))
  x0 = batch["inputs"]
  if "prompt_mask" not in batch:
    raise ValueError("the llada_sft loss needs batch['prompt_mask'] (1 on "
                     "prompt tokens)")
  answer = ~batch["prompt_mask"].astype(bool)
  if batch.get("loss_mask") is not None:
    answer = answer & batch["loss_mask"].astype(bool)
  masked, p_mask = forward_process(rng, x0.shape, eps=eps, maskable_bt=answer)
  logits = _noised_logits(model, x0, masked, mask_id, batch)
  per_seq = weighted_masked_nll(logits, x0, masked, p_mask)
  answer_len = jnp.maximum(jnp.sum(answer.astype(jnp.float32), axis=-1), 1.0)
  loss = jnp.mean(per_seq / answer_len)
  return loss, {"masked_tokens": jnp.sum(masked.astype(jnp.float32)),
                "mean_p_mask": jnp.mean(p_mask)}
