"""A GRPO-family learner: rollout -> group rewards -> advantages -> updates.

    learner = GRPOLearner(policy, GRPOConfig(group_size=8), optim_cfg,
                          total_steps=100)
    metrics = learner.step(prompts, reward_fn, key=key)
    learner.policy                     # the current weights (an nnx.Module)

`reward_fn(batch: RolloutBatch, step: int) -> (rewards [P*G], metrics)`
receives the whole rollout batch (all groups), so group-level rewards such as
Trust-GRPO's gamma (`jaxlab.rewards.thinking.combine_trust_rewards`) plug in
directly.

The outer loop lives here once, `GRPOLearner.train` (as tunix's
`RLLearner.train`): each step takes the next dict of `prompt_batches`
(`prompts` plus per-prompt fields such as `answers`), rolls out, calls
`reward_fn(prompts=, completions=, step=, group_size=, **fields)` with every
field repeated G times (row-aligned with the completions, as tunix's reward
functions get the dataset's columns), updates, evaluates every
`eval_every` steps, and with `checkpoint_dir` saves (orbax) and resumes:

    history = learner.train(batches, reward_fn, steps=100,
                            key=jax.random.key(0), checkpoint_dir=ckpt)

Each rollout batch is used for `num_iterations` optimisation steps
(mu in the GRPO paper; the PPO ratio moves away from 1 after the first),
each over `num_minibatches` minibatches of whole rows.

Every update is the generic trainer's step (`jaxlab.train.runner.StepRunner`
over `trainer.make_train_step`) on the registered `grpo` loss
(`jaxlab.objectives.grpo.grpo_policy_loss`): the optimizer from
`jaxlab.train.optim` (AdamW, warmup, global-norm clipping via optax,
parameter groups), the state born sharded on the mesh and donated,
`optim.grad_accum` micro-batches per update. The log-probs of the rollout
(old) and reference policies are computed at the sampling temperature, like
the loss's: the GRPO loss scores the sampling distribution softmax(z / T).

Spec: shared/papers/A-G.md, G items 5-7 and "Shared building blocks" 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.objectives import grpo  # registers the `grpo` loss
from jaxlab.parallel import preemption
from jaxlab.rl import rollout as rollout_lib
from jaxlab.train import runner as runner_lib

RewardFn = Callable[[rollout_lib.RolloutBatch, int],
                    tuple[np.ndarray, Mapping[str, Any]]]
# train()'s reward function: keyword fields -> rewards or (rewards, metrics).
FieldRewardFn = Callable[..., Any]
EvalFn = Callable[["GRPOLearner", int], Mapping[str, Any] | None]


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
    stop_ids: further stop tokens (a checkpoint's other eos ids).
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
  stop_ids: tuple[int, ...] = ()

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


class GRPOLearner:
  """Owns the policy's train state (the trainer's), and a frozen reference.

  `optim_cfg`: a `config.optim` section, or a mapping of the fields to change
  in `jaxlab.train.runner.optim_config` (constant lr, no warmup, no decay,
  clipping at 1; the rest from `jaxlab/configs/common.optim_config()`); the
  schedule counts updates (`total_steps * num_iterations * num_minibatches`).

  With `mesh`, the policy's weights are placed on it by their logical axis
  names under `rules` (default `jaxlab/configs/common.sharding_rules()`) and every
  update's minibatch is split over the batch axes ('data', 'fsdp'); the same
  code then runs data-, FSDP- and tensor-parallel. Minibatch rows must divide
  by data * fsdp * optim.grad_accum (`parallel.mesh_from_config(config,
  batch=rows)` gives such a mesh from `config.mesh`). Rollouts (the KV-cache
  sampler and the teacher-forced log-probs) run under the same mesh and
  rules, on the sharded weights. Without a mesh the learner uses one device.
  """

  def __init__(self, policy: nnx.Module, cfg: GRPOConfig,
               optim_cfg: Mapping[str, Any], *, total_steps: int,
               mesh: jax.sharding.Mesh | None = None,
               rules: Any = None, seed: int = 0):
    self.cfg = cfg
    self.mesh = mesh
    if rules is None:
      from jaxlab.train import defaults as common  # pylint: disable=g-import-not-at-top
      rules = common.sharding_rules()
    self.rules = parallel.rules_from_config(rules)
    if "lr" not in optim_cfg:
      raise ValueError("GRPOLearner: optim_cfg needs an lr (a config.optim "
                       "section or a mapping of optim fields)")
    optim = runner_lib.optim_config(**dict(optim_cfg))
    self.runner = runner_lib.StepRunner(
        policy, loss="grpo", loss_config=cfg, optim=optim,
        steps=total_steps * cfg.num_iterations * cfg.num_minibatches,
        seed=seed, mesh=mesh, rules=self.rules)
    self.ref = None
    if cfg.kl_beta > 0:
      # A copy of the initial weights (the runner's buffers are donated).
      graphdef, state = nnx.split(self.runner.model())
      self.ref = nnx.merge(graphdef, jax.tree.map(jnp.copy, state))
    self.step_count = 0

  @property
  def policy(self) -> nnx.Module:
    """The current policy (for sampling, evaluation); stale after `update`."""
    return self.runner.model()

  def _mesh_ctx(self):
    if self.mesh is None:
      return contextlib.nullcontext()
    return self.runner._ctx()  # pylint: disable=protected-access

  def rollout(self, prompts, key, *,
              prefix_inputs=None) -> rollout_lib.RolloutBatch:
    """G samples per prompt; `prefix_inputs` (one row per prompt) for a
    prefix-LM policy (`jaxlab.rl.rollout.rollout`'s prefix hook)."""
    c = self.cfg
    with self._mesh_ctx():
      return rollout_lib.rollout(
          self.policy, self.ref, prompts, group_size=c.group_size,
          max_new_tokens=c.max_new_tokens, temperature=c.temperature,
          top_p=c.top_p, eos_id=c.eos_id, pad_id=c.pad_id, key=key,
          stop_ids=tuple(c.stop_ids), prefix_inputs=prefix_inputs)

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
    if batch.prefix_inputs is not None:
      arrays["prefix_inputs"] = batch.prefix_inputs
    n = len(adv)
    if n % c.num_minibatches:
      raise ValueError(f"{n} rows do not split into {c.num_minibatches} "
                       "minibatches")
    mb = n // c.num_minibatches
    history = []
    for it in range(c.num_iterations):
      k_it = jax.random.fold_in(key, it)
      perm = np.asarray(jax.random.permutation(k_it, n))
      for j in range(c.num_minibatches):
        rows = perm[j * mb:(j + 1) * mb]
        history.append(self.runner.step(
            {k: v[rows] for k, v in arrays.items()}, 0,
            rng=jax.random.fold_in(k_it, j)))
    out = {k: float(np.mean([h[k] for h in history])) for k in history[0]}
    out["adv_abs_mean"] = float(np.mean(np.abs(adv)))
    return out

  def step(self, prompts, reward_fn: RewardFn, *, key: jax.Array,
           prefix_inputs=None) -> dict[str, Any]:
    """One RL step: rollout, rewards on the whole batch, updates."""
    k_roll, k_upd = jax.random.split(key)
    batch = self.rollout(prompts, k_roll, prefix_inputs=prefix_inputs)
    out = reward_fn(batch, self.step_count)
    rewards, reward_metrics = (out if isinstance(out, tuple) and len(out) == 2
                               else (out, {}))
    rewards = np.asarray(rewards, np.float32)
    if rewards.shape != (len(batch.completions),):
      raise ValueError(f"reward_fn returned shape {rewards.shape}, expected "
                       f"({len(batch.completions)},)")
    metrics = self.update(batch, rewards, k_upd)
    metrics["reward_mean"] = float(rewards.mean())
    metrics.update(reward_metrics)
    self.step_count += 1
    return metrics

  # ------------------------------------------------------------------------
  # The outer loop.
  # ------------------------------------------------------------------------

  def train(self, prompt_batches: Iterable[Mapping[str, Any]],
            reward_fn: FieldRewardFn, *, steps: int, key: jax.Array,
            eval_fn: EvalFn | None = None, eval_every: int = 0,
            checkpoint_dir: str | None = None,
            checkpoint_every: int = 0,
            on_row: Callable[[dict[str, Any]], None] | None = None
            ) -> list[dict[str, Any]]:
    """`steps` RL steps over `prompt_batches`; returns the history.

    Step i (0-based within this call) takes the next dict of
    `prompt_batches`: `prompts` (P token-id lists), optionally
    `prefix_inputs` (`[P, ...]`, the rollout's prefix hook, not passed to
    the reward) and any per-prompt fields (P values each: answers, question
    ids, charts, ...). It samples with key `fold_in(key, i)` (split into
    rollout and update keys as `step` does) and calls

        reward_fn(prompts=[P*G prompts], completions=[P*G token lists],
                  step=learner step count, group_size=G,
                  **{field: its P values each repeated G times})

    (row r belongs to prompt r // G, as tunix repeats a batch's columns),
    which returns rewards `[P*G]` or (rewards, metrics). After step i,
    when `eval_every` > 0 and (i + 1) is a multiple of it or the last step,
    `eval_fn(self, i + 1)` runs; a returned mapping becomes a history row.

    Returns a list of rows: `{"step": i + 1, **step metrics}` per step and
    `{"step": i + 1, "eval": {...}}` per evaluation, in order; `on_row`
    (optional) gets each new row as it is made (streamed metrics files).

    With `checkpoint_dir` the policy and optimizer state (the trainer's
    state), the learner's step count, this call's progress, `key` and the
    history are saved with orbax (`jaxlab.train.checkpoint.Checkpointer`)
    every `checkpoint_every` steps (0: only at the end) and after the last
    step. A later call with the same directory, on a learner built as the
    first one was (same initial policy, config and optimizer), restores the
    latest checkpoint, skips the batches already used and continues: its
    result equals an uninterrupted run's. Use one directory per `train`
    call. A stateful `reward_fn` (counters) is not saved. After Ctrl-C or
    SIGTERM (`jaxlab.parallel.preemption`) a run with `checkpoint_dir`
    saves at the end of the step and raises `preemption.Preempted`.
    """
    steps = int(steps)
    if steps < 0:
      raise ValueError(f"GRPOLearner.train: steps={steps} must be >= 0")
    history: list[dict[str, Any]] = []
    done = 0
    ckpt = None
    key_data = np.asarray(jax.random.key_data(key)).tolist()
    if checkpoint_dir:
      from jaxlab.train import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
      ckpt = ckpt_lib.Checkpointer(checkpoint_dir, keep=2, async_save=False)
      latest = ckpt.latest_step()
      if latest is not None:
        done, history = self._restore(ckpt, latest, key_data)
        if done > steps:
          raise ValueError(
              f"GRPOLearner.train: {checkpoint_dir} holds a run of {done} "
              f"steps, more than steps={steps}; use a fresh checkpoint_dir")
    batches = iter(prompt_batches)
    for _ in range(done):  # the batches the restored steps used
      next(batches, None)
    try:
      for i in range(done, steps):
        try:
          batch = dict(next(batches))
        except StopIteration:
          raise ValueError(f"GRPOLearner.train: prompt_batches ran out after "
                           f"{i} batches; steps={steps}") from None
        metrics = self._train_step(batch, reward_fn,
                                   jax.random.fold_in(key, i))
        rows = [{"step": i + 1, **metrics}]
        if on_row is not None:
          on_row(rows[0])
        if eval_every and ((i + 1) % int(eval_every) == 0 or i + 1 == steps):
          ev = eval_fn(self, i + 1) if eval_fn is not None else None
          if ev is not None:
            rows.append({"step": i + 1, "eval": dict(ev)})
            if on_row is not None:
              on_row(rows[-1])
        history.extend(rows)
        stop = ckpt is not None and preemption.requested()
        if ckpt is not None and (i + 1 == steps or stop or (
            checkpoint_every and (i + 1) % int(checkpoint_every) == 0)):
          self._save(ckpt, i + 1, steps, key_data, history)
        if stop and i + 1 < steps:
          raise preemption.Preempted(
              f"{preemption.reason()}: GRPO stopped after step {i + 1} of "
              f"{steps}; saved in {checkpoint_dir}, a rerun resumes")
    finally:
      if ckpt is not None:
        ckpt.close()
    return history

  def _train_step(self, batch: dict[str, Any], reward_fn: FieldRewardFn,
                  key: jax.Array) -> dict[str, Any]:
    if "prompts" not in batch:
      raise ValueError("GRPOLearner.train: each batch needs 'prompts' (token "
                       f"id lists); got fields {sorted(batch)}")
    prompts = [list(p) for p in batch.pop("prompts")]
    prefix_inputs = batch.pop("prefix_inputs", None)
    g, n = self.cfg.group_size, len(prompts)
    fields = {}
    for name, v in batch.items():
      if not hasattr(v, "__len__") or isinstance(v, (str, bytes)) or len(
          v) != n:
        raise ValueError(f"GRPOLearner.train: batch field {name!r} must hold "
                         f"one value per prompt ({n}), got {str(v)[:60]!r}")
      fields[name] = (np.repeat(v, g, axis=0) if isinstance(v, np.ndarray)
                      else [x for x in v for _ in range(g)])

    def rewards(rb, step_count):
      return reward_fn(prompts=rb.repeated_prompts,
                       completions=rb.completions, step=step_count,
                       group_size=g, **fields)
    return self.step(prompts, rewards, key=key, prefix_inputs=prefix_inputs)

  def _abstract_state(self):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
        self.runner._state)  # pylint: disable=protected-access

  def _save(self, ckpt, done: int, steps: int, key_data, history) -> None:
    meta = {"done": int(done), "steps": int(steps),
            "step_count": int(self.step_count), "key": key_data,
            "history": json.loads(json.dumps(history, default=_jsonable))}
    ckpt.save(self.step_count, self.runner._state, None, meta)  # pylint: disable=protected-access
    ckpt.wait()

  def _restore(self, ckpt, latest: int, key_data) -> tuple[int, list]:
    state, meta = ckpt.restore(latest, self._abstract_state())
    if meta.get("key") != key_data:
      raise ValueError(
          f"GRPOLearner.train: {ckpt.directory} was written by a run with "
          "another key; pass the same key to resume or a fresh "
          "checkpoint_dir")
    self.runner._state = state  # pylint: disable=protected-access
    self.runner._model = None  # pylint: disable=protected-access
    self.step_count = int(meta["step_count"])
    return int(meta["done"]), list(meta["history"])


def _jsonable(x):
  if isinstance(x, np.ndarray):
    return x.tolist()
  if isinstance(x, np.generic):
    return x.item()
  if isinstance(x, jax.Array):
    return np.asarray(x).tolist()
  return str(x)
