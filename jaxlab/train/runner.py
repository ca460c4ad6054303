"""The generic step runner: the trainer's update driven by an outer loop.

Sub-trainings inside experiments (SFT phases, PMC unlearning, reranker and
probe training, the GRPO learner's updates) do not read a fixed data source
through the trainer's grain pipeline and need no checkpoints or metric files,
but each of their updates is the trainer's: `trainer.build` (optimizer from
`jaxlab.train.optim`, state born on a mesh) and `trainer.make_train_step`
(loss from the `jaxlab.train.losses` registry, state donated, gradient
accumulation, clipping via optax). `StepRunner` holds that state and step;
`train_lm` is plain masked next-token training on encoded arrays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.train import losses as losses_lib
from jaxlab.train import trainer as trainer_lib


def optim_config(*, lr: float, warmup_steps: int = 0,
                 weight_decay: float = 0.0, schedule: str = "constant",
                 clip_norm: float = 1.0, end_lr_frac: float = 0.0
                 ) -> ml_collections.ConfigDict:
  """A `config.optim` for `jaxlab.train.optim.make_optimizer` (AdamW)."""
  return ml_collections.ConfigDict({
      "lr": float(lr), "warmup_steps": int(warmup_steps),
      "schedule": schedule, "end_lr_frac": float(end_lr_frac),
      "weight_decay": float(weight_decay), "clip_norm": float(clip_norm),
      "grad_accum": 1})


_STEP_CACHE: dict[Any, Callable] = {}


class StepRunner:
  """The generic trainer's state and jitted step, driven by an outer loop.

  Why not `trainer.train`: PMC samples from the *current* weights between two
  updates and builds the next batch from those samples (the monotone cache),
  so its data is not a fixed source that the trainer's grain pipeline could
  iterate, and the in-experiment sub-trainings (pre-training the tiny LM,
  FIM model, solvers) need no checkpoints or metric files. So the outer loop
  lives here, but each update is the trainer's: `trainer.build` (optimizer
  from `jaxlab.train.optim`, state born on a mesh), `trainer.make_train_step`
  (loss from the `jaxlab.train.losses` registry, state donated).

  The default mesh is one device: the loop alternates with the KV-cache
  sampler, and the tiny models of the miniatures gain nothing from sharding.
  Pass `mesh` to shard the update like the trainer does (batch rows must then
  divide by mesh.data * mesh.fsdp).
  """

  def __init__(self, model: nnx.Module, *, loss: str | Callable,
               loss_config: Any, optim: ml_collections.ConfigDict,
               steps: int, seed: int = 0,
               mesh: jax.sharding.Mesh | None = None):
    self._target = model
    self.mesh = mesh or parallel.make_mesh(
        {"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    cfg = ml_collections.ConfigDict({
        "seed": int(seed), "optim": optim,
        "train": {"steps": max(int(steps), 1)}})
    self.ts = trainer_lib.build(cfg, model=model, mesh=self.mesh)
    loss_fn = losses_lib.get(loss) if isinstance(loss, str) else loss
    batch_sh = parallel.batch_sharding(self.mesh, self.ts.rules)
    # Experiments build many runners for the same model shape, loss and
    # optimizer (one per seed and method); reusing the jitted step reuses
    # its compilation, which dominates the miniatures' CPU time. The cached
    # step merges with the first runner's graphdef, whose optax transform
    # is built from the same optim config and step count, so it computes
    # the same update.
    cache_key = (loss,
                 repr(loss_config), optim.to_json_best_effort()
                 if hasattr(optim, "to_json_best_effort") else repr(optim),
                 int(steps), nnx.graphdef(model), self.mesh)
    self._step = _STEP_CACHE.get(cache_key)
    if self._step is None:
      with self._ctx():
        self._step = trainer_lib.make_train_step(
            self.ts, loss_fn, loss_config, grad_accum=1,
            batch_sharding=batch_sh)
      _STEP_CACHE[cache_key] = self._step
    self._key = jax.random.key(int(seed))
    self._state = self.ts.state
    self._model = None

  def _ctx(self):
    stack = contextlib.ExitStack()
    stack.enter_context(jax.set_mesh(self.mesh))
    stack.enter_context(nnx.logical_axis_rules(self.ts.rules))
    return stack

  def step(self, batch: dict[str, np.ndarray], step: int
           ) -> dict[str, float]:
    """One optimizer update on `batch`; returns float metrics."""
    self._model = None  # the old state's buffers are donated below
    with self._ctx():
      self._state, metrics = self._step(
          self._state, batch, jax.random.fold_in(self._key, step))
    return {k: float(v) for k, v in jax.device_get(metrics).items()}

  def model(self) -> nnx.Module:
    """The current weights (for sampling); invalid after the next `step`."""
    if self._model is None:
      self._model = nnx.merge(self.ts.graphdef, self._state)[0]
    return self._model

  def write_back(self) -> nnx.Module:
    """Copies the trained weights into the model given at construction."""
    nnx.update(self._target, nnx.state(self.model()))
    return self._target


def train_lm(model, data: dict[str, np.ndarray], *, steps: int,
             batch_size: int, lr: float, warmup_steps: int = 0,
             weight_decay: float = 0.0, clip_norm: float = 1.0, seed: int = 0,
             log_every: int = 0) -> list[dict[str, float]]:
  """Masked next-token training (`lm` loss) on `inputs/targets/loss_mask`.

  `data` holds `[N, T]` arrays (e.g. `encode_for_lm` or `fim.encode_batch`);
  minibatches are drawn by epoch-wise shuffling. The update is the
  trainer's (`StepRunner`): AdamW from `jaxlab.train.optim`, linear warmup
  then cosine decay to 0, global-norm clipping. Trains `model` in place and
  returns the logged losses.
  """
  n = len(data["inputs"])
  if n == 0:
    raise ValueError("train_lm got an empty data set")
  runner = StepRunner(
      model, loss="lm", loss_config=None,
      optim=optim_config(lr=lr, warmup_steps=warmup_steps,
                         weight_decay=weight_decay, schedule="cosine",
                         clip_norm=clip_norm),
      steps=steps, seed=seed)
  rng = np.random.default_rng(seed)
  order = np.array([], np.int64)
  logs = []
  for step in range(steps):
    while len(order) < batch_size:
      order = np.concatenate([order, rng.permutation(n)])
    idx, order = order[:batch_size], order[batch_size:]
    m = runner.step({k: data[k][idx]
                     for k in ("inputs", "targets", "loss_mask")}, step)
    if log_every and (step % log_every == 0 or step == steps - 1):
      logs.append({"step": step, "loss": m["loss"]})
  runner.write_back()
  return logs
