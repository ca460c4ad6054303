"""Direct Preference Optimization (Rafailov et al. 2023, eq. 7).

    L_DPO = -E[ log sigmoid( beta * ( (log pi(y_w|x) - log pi_ref(y_w|x))
                                    - (log pi(y_l|x) - log pi_ref(y_l|x)) ) ) ]

with y_w the chosen and y_l the rejected response, sequence log-probs summed
over the response tokens (prompt masked), and pi_ref a frozen reference (the
model the tuning starts from). The implicit reward of a response is
r(x, y) = beta * (log pi(y|x) - log pi_ref(y|x)).

`dpo_loss` is the pure function of the four per-sequence log-probs; the
trainer loss `dpo` (`jaxlab.train.losses`) reads batch keys

  chosen_inputs / chosen_targets / chosen_mask       [B, T]
  rejected_inputs / rejected_targets / rejected_mask [B, T]
  ref_chosen_logp / ref_rejected_logp                [B]

(the reference log-probs precomputed once with `reference_logps`, as NPO's
reference NLL is: the reference is frozen, so they never change) and
`config.beta` (default 0.1, the paper's usual value). Used by the
B-calibration miniature (paper N: DPO breaks calibration) and reusable by any
preference-tuning experiment.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.train import losses as losses_lib

DEFAULT_BETA = 0.1


def dpo_loss(policy_chosen_logp: jax.Array, policy_rejected_logp: jax.Array,
             ref_chosen_logp: jax.Array, ref_rejected_logp: jax.Array, *,
             beta: float = DEFAULT_BETA
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """DPO loss (eq. 7), batch mean, and its diagnostics.

  Args:
    policy_chosen_logp / policy_rejected_logp: `[B]` summed log pi(y|x).
    ref_chosen_logp / ref_rejected_logp: `[B]` summed log pi_ref(y|x).
    beta: inverse temperature of the implicit reward (> 0).

  Returns:
    (loss, metrics) with metrics `reward_accuracy` (share of pairs whose
    chosen implicit reward is larger), `reward_margin` (mean chosen minus
    rejected implicit reward), `chosen_reward`, `rejected_reward`.
  """
  if beta <= 0:
    raise ValueError(f"dpo beta must be > 0, got {beta}")
  chosen_reward = beta * (policy_chosen_logp - ref_chosen_logp)
  rejected_reward = beta * (policy_rejected_logp - ref_rejected_logp)
  margin = chosen_reward - rejected_reward
  loss = -jnp.mean(jax.nn.log_sigmoid(margin))
  metrics = {
      "reward_accuracy": jnp.mean((margin > 0).astype(jnp.float32)),
      "reward_margin": jnp.mean(margin),
      "chosen_reward": jnp.mean(chosen_reward),
      "rejected_reward": jnp.mean(rejected_reward),
  }
  return loss.astype(jnp.float32), metrics


def sequence_logp(model, inputs_bt: jax.Array, targets_bt: jax.Array,
                  mask_bt: jax.Array) -> jax.Array:
  """`[B]` summed log p(target tokens) over `mask` (teacher forced)."""
  nll_b, _ = losses_lib.sequence_nll(model(inputs_bt), targets_bt, mask_bt)
  return -nll_b


_sequence_logp_jit = jax.jit(sequence_logp)


def reference_logps(ref_model, batch: dict[str, Any], *,
                    batch_size: int = 256) -> dict[str, np.ndarray]:
  """The frozen reference's `ref_chosen_logp`, `ref_rejected_logp` `[B]`.

  `batch` holds the `chosen_*` / `rejected_*` arrays of the `dpo` loss;
  computed in chunks of `batch_size` rows.
  """
  out = {}
  for side in ("chosen", "rejected"):
    n = len(batch[f"{side}_inputs"])
    parts = []
    for i in range(0, n, batch_size):
      sl = slice(i, i + batch_size)
      parts.append(np.asarray(_sequence_logp_jit(
          ref_model, jnp.asarray(batch[f"{side}_inputs"][sl]),
          jnp.asarray(batch[f"{side}_targets"][sl]),
          jnp.asarray(batch[f"{side}_mask"][sl]))))
    out[f"ref_{side}_logp"] = np.concatenate(parts).astype(np.float32)
  return out


@losses_lib.register("dpo")
def dpo_trainer_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                     config: Any = None):
  """The `dpo` trainer loss: `dpo_loss` on teacher-forced sequence log-probs.

  Chosen and rejected rows go through the model in one forward pass.
  """
  del rng
  beta = DEFAULT_BETA
  if config is not None and "beta" in config:
    beta = float(config["beta"])
  b = batch["chosen_inputs"].shape[0]
  cat = lambda k: jnp.concatenate(  # pylint: disable=g-long-lambda
      [batch[f"chosen_{k}"], batch[f"rejected_{k}"]], axis=0)
  logp = sequence_logp(model, cat("inputs"), cat("targets"), cat("mask"))
  return dpo_loss(logp[:b], logp[b:], batch["ref_chosen_logp"],
                  batch["ref_rejected_logp"], beta=beta)
