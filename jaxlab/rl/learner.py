"""A GRPO-family learner: rollout -> group rewards -> advantages -> updates.

    learner = GRPOLearner(policy, GRPOConfig(group_size=8), optim_cfg,
                          total_steps=100)
    metrics = learner.step(prompts, reward_fn, key=key)

`reward_fn(batch: RolloutBatch, step: int) -> (rewards [P*G], metrics)`
receives the whole rollout batch (all groups), so group-level rewards such as
Trust-GRPO's gamma (`jaxlab.rewards.thinking.combine_trust_rewards`) plug in
directly. Each rollout batch is used for `num_iterations` optimisation steps
(mu in the GRPO paper; the PPO ratio moves away from 1 after the first),
each over `num_minibatches` minibatches of whole rows. The optimizer comes
from `jaxlab.train.optim.make_optimizer` (AdamW, warmup, clipping).

Spec: shared/papers/A-G.md, G items 5-7 and "Shared building blocks" 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.objectives import grpo
from jaxlab.rl import rollout as rollout_lib
from jaxlab.train import optim

RewardFn = Callable[[rollout_lib.RolloutBatch, int],
                    tuple[np.ndarray, Mapping[str, Any]]]


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
  """GRPO hyperparameters (SophiaVL-R1 yaml values where they exist).

  Attributes:
    group_size: G responses per prompt (8).
    num_iterations: optimisation passes over each rollout batch (mu).
    num_minibatches: minibatches per pass.
    advantage: estimator name in `grpo.ADVANTAGE_ESTIMATORS`.
    clip_eps / clip_eps_high: PPO clip range (0.2).
    kl_beta: k3 KL coefficient (0.04); 0 skips the reference model.
    entropy_coef: entropy bonus (1e-3 in the yaml).
    aggregation: loss aggregation in `grpo.AGGREGATIONS`.
    max_new_tokens / temperature / top_p / eos_id / pad_id: sampling.
  """
  group_size: int = 8
  num_iterations: int = 1
  num_minibatches: int = 1
  advantage: str = "grpo"
  clip_eps: float = 0.2
  clip_eps_high: float | None = None
  kl_beta: float = 0.04
  entropy_coef: float = 1e-3
  aggregation: str = "token_mean"
  max_new_tokens: int = 16
  temperature: float = 1.0
  top_p: float | None = None
  eos_id: int | None = None
  pad_id: int = 0

  def __post_init__(self):
    if self.group_size < 2:
      raise ValueError(f"GRPOConfig.group_size={self.group_size} must be >= 2")
    if self.num_iterations < 1 or self.num_minibatches < 1:
      raise ValueError("GRPOConfig.num_iterations and num_minibatches must "
                       "be >= 1")
    grpo.get_advantage_estimator(self.advantage)
    if self.aggregation not in grpo.AGGREGATIONS:
      raise ValueError(f"GRPOConfig.aggregation={self.aggregation!r}; valid: "
                       f"{', '.join(grpo.AGGREGATIONS)}")


def _loss(model, batch, cfg: GRPOConfig):
  logits = model.forward(batch["ids"], attention_mask=batch["attn"]).logits
  logp, ent = grpo.token_logprobs_and_entropy(logits[:, :-1], batch["ids"][:, 1:],
                                              cfg.temperature)
  pad = lambda x: jnp.pad(x, ((0, 0), (1, 0)))  # noqa: E731
  return grpo.grpo_loss(
      pad(logp), batch["old"], batch.get("ref"), batch["adv"], batch["mask"],
      clip_eps=cfg.clip_eps, clip_eps_high=cfg.clip_eps_high,
      kl_beta=cfg.kl_beta, entropy=pad(ent), entropy_coef=cfg.entropy_coef,
      aggregation=cfg.aggregation)


@functools.partial(nnx.jit, static_argnums=3)
def _train_step(model, optimizer, batch, cfg):
  (loss, metrics), grads = nnx.value_and_grad(_loss, has_aux=True)(
      model, batch, cfg)
  optimizer.update(model, grads)
  metrics["grad_norm"] = optax_global_norm(grads)
  return metrics


def optax_global_norm(tree) -> jax.Array:
  leaves = jax.tree_util.tree_leaves(tree)
  return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32)))
                      for x in leaves))


class GRPOLearner:
  """Owns the policy, a frozen reference copy and the optimizer.

  With `mesh`, the policy's weights are placed on it by their logical axis
  names (`jaxlab.parallel.shard_params` under `rules`) and every update's
  minibatch is split over the batch axes ('data', 'fsdp'); the same code then
  runs data-, FSDP- and tensor-parallel. Minibatch rows must divide by
  data * fsdp.
  """

  def __init__(self, policy: nnx.Module, cfg: GRPOConfig,
               optim_cfg: Mapping[str, Any], *, total_steps: int,
               mesh: jax.sharding.Mesh | None = None,
               rules: Any = None):
    self.cfg = cfg
    self.mesh = mesh
    self.rules = parallel.rules_from_config(rules)
    if mesh is not None:
      with self._mesh_ctx():
        policy = parallel.shard_params(policy, mesh)
    self.policy = policy
    self.ref = nnx.clone(policy) if cfg.kl_beta > 0 else None
    tx = optim.make_optimizer(optim_cfg, total_steps * cfg.num_iterations *
                              cfg.num_minibatches)
    with self._mesh_ctx():
      self.optimizer = nnx.Optimizer(policy, tx, wrt=nnx.Param)
    self.step_count = 0

  def _mesh_ctx(self):
    if self.mesh is None:
      return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(jax.set_mesh(self.mesh))
    stack.enter_context(nnx.logical_axis_rules(self.rules))
    return stack

  def _put(self, x: np.ndarray) -> jax.Array:
    if self.mesh is None:
      return jnp.asarray(x)
    return jax.device_put(x, parallel.batch_sharding(self.mesh, self.rules))

  def rollout(self, prompts, key) -> rollout_lib.RolloutBatch:
    c = self.cfg
    with self._mesh_ctx():
      return rollout_lib.rollout(
          self.policy, self.ref, prompts, group_size=c.group_size,
          max_new_tokens=c.max_new_tokens, temperature=c.temperature,
          top_p=c.top_p, eos_id=c.eos_id, pad_id=c.pad_id, key=key)

  def update(self, batch: rollout_lib.RolloutBatch, rewards: np.ndarray,
             key: jax.Array) -> dict[str, float]:
    """`num_iterations` passes of minibatch updates on one rollout batch."""
    c = self.cfg
    adv = np.asarray(grpo.compute_advantages(
        jnp.asarray(rewards, jnp.float32), c.group_size, c.advantage))
    arrays = {"ids": batch.input_ids_bt, "attn": batch.attention_mask_bt,
              "mask": batch.completion_mask_bt, "old": batch.old_logp_bt,
              "adv": adv}
    if batch.ref_logp_bt is not None:
      arrays["ref"] = batch.ref_logp_bt
    n = len(adv)
    if n % c.num_minibatches:
      raise ValueError(f"{n} rows do not split into {c.num_minibatches} "
                       "minibatches")
    mb = n // c.num_minibatches
    history = []
    for it in range(c.num_iterations):
      perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, it), n))
      for j in range(c.num_minibatches):
        rows = perm[j * mb:(j + 1) * mb]
        sub = {k: self._put(v[rows]) for k, v in arrays.items()}
        with self._mesh_ctx():
          history.append(_train_step(self.policy, self.optimizer, sub, c))
    out = {k: float(np.mean([float(h[k]) for h in history]))
           for k in history[0]}
    out["adv_abs_mean"] = float(np.mean(np.abs(adv)))
    return out

  def step(self, prompts, reward_fn: RewardFn, *, key: jax.Array
           ) -> dict[str, Any]:
    """One RL step: rollout, rewards on the whole batch, updates."""
    k_roll, k_upd = jax.random.split(key)
    batch = self.rollout(prompts, k_roll)
    rewards, reward_metrics = reward_fn(batch, self.step_count)
    rewards = np.asarray(rewards, np.float32)
    if rewards.shape != (len(batch.completions),):
      raise ValueError(f"reward_fn returned shape {rewards.shape}, expected "
                       f"({len(batch.completions)},)")
    metrics = self.update(batch, rewards, k_upd)
    metrics["reward_mean"] = float(rewards.mean())
    metrics.update(reward_metrics)
    self.step_count += 1
    return metrics
