"""GRPO-family policy losses and advantage estimators.

Spec: `shared/papers/A-G.md`, section G (SophiaVL-R1 / Trust-GRPO), its
"Shared building blocks" item 1 (GRPO core), and section F item 3 (MSRL uses
the same GRPO form).

Pieces (all pure functions of arrays, usable inside `jax.jit`):

* Advantage estimators, a name -> fn registry (`ADVANTAGE_ESTIMATORS`):
  "grpo"    A_i = (R_i - mean_G R) / (std_G R + eps)          (G Eq. 6)
  "dr_grpo" A_i =  R_i - mean_G R               (Dr.GRPO, arXiv 2503.20783)
  "rloo"    A_i =  R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean_G R)
* `grpo_loss`: token-level PPO-clip with a k3 KL to a frozen reference and an
  optional entropy bonus (G Eq. 7, with veRL's token-level ratios and
  `low_var_kl`), under a choice of loss aggregations.

The reward side of Trust-GRPO (trust weight, annealed thinking-reward
combination, format checks, thinking scorers) lives in
`jaxlab.rewards.thinking`; this module holds the losses only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxlab import registry

Array = jax.Array

# ----------------------------------------------------------------------------
# Advantage estimators.
# ----------------------------------------------------------------------------

AdvantageFn = Callable[..., Array]
ADVANTAGE_ESTIMATORS: registry.Registry[AdvantageFn] = registry.Registry(
    "advantage estimator")
register_advantage = ADVANTAGE_ESTIMATORS.register
get_advantage_estimator = ADVANTAGE_ESTIMATORS.get


def as_groups(rewards: Array, group_size: int) -> Array:
  """Flat `[P * G]` rewards -> `[P, G]` float32, checking that G divides."""
  rewards = jnp.asarray(rewards, jnp.float32)
  if rewards.ndim != 1:
    raise ValueError(f"rewards must be a flat [num_prompts * group_size] "
                     f"array, got shape {rewards.shape}")
  if group_size < 1 or rewards.shape[0] % group_size:
    raise ValueError(f"group_size={group_size} must divide the number of "
                     f"rewards ({rewards.shape[0]})")
  return rewards.reshape(-1, group_size)


def group_advantages(rewards: Array, group_size: int, *,
                     normalize_std: bool = True, eps: float = 1e-6,
                     std_ddof: int = 0) -> Array:
  """Group-relative advantages (G Eq. 6; Dr.GRPO when `normalize_std=False`).

  Args:
    rewards: flat `[P * G]` rewards, the G responses of a prompt contiguous.
    group_size: G.
    normalize_std: divide by the group std (GRPO) or not (Dr.GRPO).
    eps: added to the std, so a group whose rewards are all equal gets zero
      advantages (0 / eps) rather than NaN.
    std_ddof: 0 = population std (Tunix, the paper's formula read literally);
      1 = the unbiased `torch.std` used by veRL/EasyR1 [code].

  Returns:
    `[P * G]` float32 advantages, one per response (broadcast over its tokens
    by `grpo_loss`).
  """
  r_pg = as_groups(rewards, group_size)
  centred_pg = r_pg - jnp.mean(r_pg, axis=-1, keepdims=True)
  if normalize_std:
    if std_ddof and group_size <= std_ddof:
      raise ValueError(f"std_ddof={std_ddof} needs group_size > {std_ddof}")
    std_p1 = jnp.std(r_pg, axis=-1, keepdims=True, ddof=std_ddof)
    centred_pg = centred_pg / (std_p1 + eps)
  return centred_pg.reshape(-1)


@register_advantage("grpo")
def grpo_advantages(rewards, group_size, *, eps=1e-6, std_ddof=0):
  return group_advantages(rewards, group_size, normalize_std=True, eps=eps,
                          std_ddof=std_ddof)


@register_advantage("dr_grpo")
def dr_grpo_advantages(rewards, group_size, **unused):
  del unused
  return group_advantages(rewards, group_size, normalize_std=False)


@register_advantage("rloo")
def rloo_advantages(rewards, group_size, **unused):
  """Leave-one-out baseline: R_i - mean_{j != i} R_j."""
  del unused
  if group_size < 2:
    raise ValueError("rloo needs group_size >= 2")
  centred = group_advantages(rewards, group_size, normalize_std=False)
  return centred * (group_size / (group_size - 1))


# ----------------------------------------------------------------------------
# Loss.
# ----------------------------------------------------------------------------


def kl_k3(logp: Array, ref_logp: Array, clamp: float | None = 10.0) -> Array:
  """Per-token k3 estimator of KL(pi_theta || pi_ref) (veRL `low_var_kl`).

  k3 = exp(ref - logp) - (ref - logp) - 1 >= 0, unbiased under samples from
  pi_theta. d k3 / d logp = 1 - exp(ref - logp). veRL clamps the result to
  [-10, 10]; `clamp=None` disables it.
  """
  log_ratio = ref_logp - logp
  kl = jnp.exp(log_ratio) - log_ratio - 1.0
  if clamp is not None:
    kl = jnp.clip(kl, -clamp, clamp)
  return kl


def kl_k1(logp, ref_logp, clamp=None):
  del clamp
  return logp - ref_logp


def kl_k2(logp, ref_logp, clamp=None):
  del clamp
  return 0.5 * jnp.square(logp - ref_logp)


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def _agg_token_mean(x_bt, mask_bt, max_len):
  del max_len
  return jnp.sum(x_bt * mask_bt) / jnp.maximum(jnp.sum(mask_bt), 1.0)


def _agg_sequence_mean(x_bt, mask_bt, max_len):
  del max_len
  per_seq = jnp.sum(x_bt * mask_bt, -1) / jnp.maximum(jnp.sum(mask_bt, -1), 1.0)
  return jnp.mean(per_seq)


def _agg_fixed_length(x_bt, mask_bt, max_len):
  """Dr.GRPO: token sums divided by a constant B * L_max (no length bias)."""
  length = x_bt.shape[-1] if max_len is None else max_len
  return jnp.sum(x_bt * mask_bt) / (x_bt.shape[0] * length)


AGGREGATIONS = {
    "token_mean": _agg_token_mean,
    "sequence_mean": _agg_sequence_mean,
    "fixed_length": _agg_fixed_length,
}


def grpo_loss(logp: Array, old_logp: Array, ref_logp: Array | None,
              advantages: Array, mask: Array, *, clip_eps: float = 0.2,
              clip_eps_high: float | None = None, kl_beta: float = 0.04,
              kl_estimator: str = "k3", kl_clamp: float | None = 10.0,
              entropy: Array | None = None, entropy_coef: float = 0.0,
              aggregation: str = "token_mean", max_len: int | None = None
              ) -> tuple[Array, dict[str, Array]]:
  """Token-level clipped GRPO loss (G Eq. 7, negated to a loss).

  Per token t of response b, with rho = exp(logp - old_logp):

    l_bt = -min(rho A_b, clip(rho, 1 - eps, 1 + eps_high) A_b)
           + beta * KL_k3(pi_theta || pi_ref)_bt  - c_ent * H_bt

  aggregated over `mask` by `aggregation`: "token_mean" (sum / #tokens, veRL
  `token-mean`), "sequence_mean" (mean over responses of the per-response
  token mean, the paper's 1/N sum_i (1/|o_i|) sum_t), "fixed_length" (sum /
  (B * max_len), Dr.GRPO).

  Args:
    logp: `[B, T]` log pi_theta of the sampled tokens (differentiated).
    old_logp: `[B, T]` log-probs under the rollout policy (constants).
    ref_logp: `[B, T]` log-probs under the frozen reference, or None (no KL).
    advantages: `[B]` per-response or `[B, T]` per-token advantages.
    mask: `[B, T]` 1 on response tokens.
    clip_eps / clip_eps_high: lower / upper clip range (upper defaults to
      lower; DAPO-style asymmetric clipping when set).
    kl_beta: KL coefficient (0.04 in the paper and code).
    kl_estimator: "k3" (default, veRL low_var_kl), "k1" or "k2".
    kl_clamp: clamp of the k3 value (veRL uses 10).
    entropy: optional `[B, T]` per-token policy entropy for the bonus.
    entropy_coef: bonus weight (1e-3 in the SophiaVL-R1 yaml).
    aggregation: one of `AGGREGATIONS`.
    max_len: the constant length for "fixed_length" (default T).

  Returns:
    (scalar loss, metrics dict of scalars).
  """
  if aggregation not in AGGREGATIONS:
    raise ValueError(f"unknown aggregation {aggregation!r}; valid choices: "
                     f"{', '.join(AGGREGATIONS)}")
  if kl_estimator not in KL_ESTIMATORS:
    raise ValueError(f"unknown kl_estimator {kl_estimator!r}; valid choices: "
                     f"{', '.join(KL_ESTIMATORS)}")
  agg = lambda x: AGGREGATIONS[aggregation](x, mask, max_len)  # noqa: E731
  mask = mask.astype(jnp.float32)
  logp = logp.astype(jnp.float32)
  old_logp = jax.lax.stop_gradient(old_logp.astype(jnp.float32))
  adv = jnp.asarray(advantages, jnp.float32)
  if adv.ndim == 1:
    adv = adv[:, None]
  adv = jax.lax.stop_gradient(adv)
  hi = clip_eps if clip_eps_high is None else clip_eps_high

  ratio = jnp.exp(logp - old_logp)
  unclipped = ratio * adv
  clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + hi) * adv
  pg_bt = -jnp.minimum(unclipped, clipped)
  loss_bt = pg_bt
  metrics = {"pg_loss": agg(pg_bt),
             "clip_frac": agg((clipped < unclipped).astype(jnp.float32)),
             "ratio_mean": agg(ratio)}
  if ref_logp is not None:
    kl_bt = KL_ESTIMATORS[kl_estimator](
        logp, jax.lax.stop_gradient(ref_logp.astype(jnp.float32)), kl_clamp)
    loss_bt = loss_bt + kl_beta * kl_bt
    metrics["kl"] = agg(kl_bt)
  if entropy is not None:
    loss_bt = loss_bt - entropy_coef * entropy
    metrics["entropy"] = agg(entropy)
  loss = agg(loss_bt)
  metrics["loss"] = loss
  return loss, metrics


def token_logprobs_and_entropy(logits_btv: Array, tokens_bt: Array,
                               temperature: float = 1.0
                               ) -> tuple[Array, Array]:
  """log softmax(logits / temperature)[token] and the entropy, each [B, T]."""
  logp_btv = jax.nn.log_softmax(logits_btv.astype(jnp.float32) / temperature)
  logp_bt = jnp.take_along_axis(logp_btv, tokens_bt[..., None], -1)[..., 0]
  ent_bt = -jnp.sum(jnp.exp(logp_btv) * logp_btv, -1)
  return logp_bt, ent_bt


# ----------------------------------------------------------------------------
# A config-driven wrapper used by the RL learner.
# ----------------------------------------------------------------------------


def compute_advantages(rewards: Array, group_size: int, estimator: str = "grpo",
                       **kw: Any) -> Array:
  return get_advantage_estimator(estimator)(rewards, group_size, **kw)


# ----------------------------------------------------------------------------
# The `grpo` trainer loss (the GRPO learner's update is the trainer's step).
# ----------------------------------------------------------------------------

from jaxlab.train import losses as _losses  # pylint: disable=g-import-not-at-top,wrong-import-position


def policy_token_logprobs(model, ids_bt: Array, attn_bt: Array,
                          temperature: float, **forward_kw
                          ) -> tuple[Array, Array]:
  """log pi_T(x_t | x_<t) and the entropy of pi_T, each `[B, T]` (0 at t=0).

  pi_T = softmax(logits / temperature): the distribution the sampler draws
  from at `temperature`, so the PPO ratio, the KL to the reference and the
  entropy are all of the sampling distribution. The rollout computes the
  old and reference log-probs at the same temperature
  (`jaxlab.rl.rollout`), so the first update's ratio is exactly 1.
  `forward_kw` go to `model.forward` (e.g. `prefix_inputs` of an
  image-prefixed policy).
  """
  logits = model.forward(ids_bt, attention_mask=attn_bt, **forward_kw).logits
  logp, ent = token_logprobs_and_entropy(logits[:, :-1], ids_bt[:, 1:],
                                         temperature)
  pad = lambda x: jnp.pad(x, ((0, 0), (1, 0)))  # noqa: E731
  return pad(logp), pad(ent)


@_losses.register("grpo")
def grpo_policy_loss(model, batch: dict[str, Array], *, rng: Array,
                     config: Any) -> tuple[Array, dict[str, Array]]:
  """`grpo_loss` of the policy `model` on one rollout minibatch (G Eq. 7).

  batch: `ids`, `attn` `[B, T]` packed prompt + response, `mask` `[B, T]`
  response tokens, `old` `[B, T]` rollout-policy log-probs, `adv` `[B]`
  advantages, optional `ref` `[B, T]` reference log-probs (KL term),
  optional `prefix_inputs` `[B, ...]` passed to `model.forward` (the inputs
  a prefix-conditioned policy encodes, e.g. images; see `RolloutBatch`).
  config: `temperature, clip_eps, clip_eps_high, kl_beta, entropy_coef,
  aggregation` (a `jaxlab.rl.learner.GRPOConfig`, or a ConfigDict with those
  fields). "fixed_length" (Dr.GRPO) divides by the response budget
  `config.max_new_tokens` where the config has one (a constant, whatever
  the rollout's packed width: its prompt part is bucketed), else by T.
  """
  del rng
  forward_kw = ({"prefix_inputs": batch["prefix_inputs"]}
                if "prefix_inputs" in batch else {})
  logp, ent = policy_token_logprobs(model, batch["ids"], batch["attn"],
                                    config.temperature, **forward_kw)
  return grpo_loss(
      logp, batch["old"], batch.get("ref"), batch["adv"], batch["mask"],
      clip_eps=config.clip_eps, clip_eps_high=config.clip_eps_high,
      kl_beta=config.kl_beta, entropy=ent, entropy_coef=config.entropy_coef,
      aggregation=config.aggregation,
      max_len=getattr(config, "max_new_tokens", None))
