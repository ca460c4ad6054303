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
from jaxlab import progress
from jaxlab.train import losses as losses_lib
from jaxlab.train import optim as optim_lib
from jaxlab.train import trainer as trainer_lib


def optim_config(*, lr: float, warmup_steps: int = 0,
                 weight_decay: float = 0.0, schedule: str = "constant",
                 clip_norm: float = 1.0, end_lr_frac: float = 0.0,
                 **fields) -> ml_collections.ConfigDict:
  """A `config.optim` for a sub-training: `jaxlab.train.defaults.optim_config()`
  with the sub-training's usual values (constant lr, no warmup, no decay,
  clipping at 1) and any other optim field (`b2`, `groups`, `grad_accum`,
  ...) overridden by keyword; an unknown field is an error."""
  from jaxlab.train import defaults as common  # pylint: disable=g-import-not-at-top
  out = common.optim_config()
  fields.update(lr=float(lr), warmup_steps=int(warmup_steps),
                weight_decay=float(weight_decay), schedule=schedule,
                clip_norm=float(clip_norm), end_lr_frac=float(end_lr_frac))
  for k, v in fields.items():
    if k not in out:
      raise ValueError(f"optim_config: unknown optim field {k!r}; valid: "
                       f"{', '.join(sorted(out.keys()))}")
    out[k] = v
  return out


def mesh_for(config: Any, batch_size: int,
             optim: Any = None) -> jax.sharding.Mesh:
  """The mesh of a sub-training of `batch_size` rows per update in an
  experiment with `config`: `parallel.mesh_from_config(config, batch=rows)`,
  rows = `batch_size // optim.grad_accum` (one micro-batch; `optim`
  default `config.optim`). Pass it with `rules=config.sharding_rules`."""
  optim = config.get("optim") if optim is None else optim
  accum = int(optim.get("grad_accum", 1)) if optim is not None else 1
  return parallel.mesh_from_config(config,
                                   batch=int(batch_size) // max(accum, 1))


_STEP_CACHE: dict[Any, Callable] = {}


class StepRunner:
  """The generic trainer's state and jitted step, driven by an outer loop.

  Why not `trainer.train`: PMC samples from the *current* weights between two
  updates and builds the next batch from those samples (the monotone cache),
  an RL learner rolls out between updates, and the in-experiment
  sub-trainings (pre-training the tiny LM, FIM model, solvers, scorers) need
  no checkpoints or metric files. So the outer loop lives with the caller,
  but each update is the trainer's: `trainer.build` (optimizer and parameter
  groups from `jaxlab.train.optim`, state born on a mesh),
  `trainer.make_train_step` (loss from the `jaxlab.train.losses` registry or
  a callable of the same signature, the loss's `step`, non-weight state the
  loss updates kept, state donated, `optim.grad_accum` micro-batches).

  `optim` is a complete `config.optim` section (`optim_config(...)` or
  `jaxlab/configs/common.base_config().optim`). The default mesh (`mesh=None`)
  is one device. Pass `mesh` (an experiment passes
  `parallel.mesh_from_config(config, batch=rows)`, a mesh whose batch axes
  divide its batch) and the logical-axis `rules` (default
  `jaxlab/configs/common.sharding_rules()`; an experiment passes
  `config.sharding_rules`) to shard the update like the trainer does: the
  model state is placed by its logical axis names (`trainer.build`, as
  `parallel.shard_params`), every batch by `parallel.batch_sharding`, and
  the step runs under `jax.set_mesh(mesh)` and `nnx.logical_axis_rules`
  (batch rows must divide by mesh.data * mesh.fsdp * optim.grad_accum).
  `lora` (fields of
  `config.lora`: rank, alpha, targets) adds LoRA factors and trains only
  them, as the trainer does; `model()` then holds them unmerged.
  """

  def __init__(self, model: nnx.Module, *, loss: str | Callable,
               loss_config: Any, optim: ml_collections.ConfigDict,
               steps: int, seed: int = 0,
               mesh: jax.sharding.Mesh | None = None, rules: Any = None,
               lora: Any = None):
    from jaxlab.train import defaults as common  # pylint: disable=g-import-not-at-top
    self._target = model
    self.mesh = mesh or parallel.make_mesh(
        {"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    cfg = common.base_config()
    cfg.seed = int(seed)
    cfg.optim = ml_collections.ConfigDict(dict(optim))
    cfg.train.steps = max(int(steps), 1)
    if rules is not None:
      cfg.sharding_rules = tuple(rules)
    if lora is not None:  # a `config.lora` section: train only LoRA factors
      cfg.lora.update(dict(lora))
    self.grad_accum = int(optim_lib.field(cfg.optim, "grad_accum"))
    self.ts = trainer_lib.build(cfg, model=model, mesh=self.mesh)
    loss_fn = losses_lib.get(loss) if isinstance(loss, str) else loss
    self.batch_sharding = parallel.batch_sharding(
        self.mesh, self.ts.rules, leading=1 if self.grad_accum > 1 else 0)
    # Experiments build many runners for the same model shape, loss and
    # optimizer (one per seed and method); reusing the jitted step reuses
    # its compilation, which dominates the miniatures' CPU time. The cached
    # step merges with the first runner's graphdef, whose optax transform
    # is built from the same optim config and step count, so it computes
    # the same update.
    cache_key = (loss, repr(loss_config), cfg.optim.to_json_best_effort(),
                 int(steps), nnx.graphdef(model), self.mesh, self.ts.rules,
                 repr(cfg.lora))
    self._step = _STEP_CACHE.get(cache_key)
    if self._step is None:
      with self._ctx():
        self._step = trainer_lib.make_train_step(
            self.ts, loss_fn, loss_config, grad_accum=self.grad_accum,
            batch_sharding=self.batch_sharding)
      _STEP_CACHE[cache_key] = self._step
    self._key = jax.random.key(int(seed))
    self.steps = max(int(steps), 1)
    self._done = 0  # updates through this runner (progress lines)
    self._state = self.ts.state
    self._model = None

  def _ctx(self):
    stack = contextlib.ExitStack()
    stack.enter_context(jax.set_mesh(self.mesh))
    stack.enter_context(nnx.logical_axis_rules(self.ts.rules))
    return stack

  def step(self, batch: dict[str, Any], step: int, *,
           rng: jax.Array | None = None) -> dict[str, float]:
    """One optimizer update on `batch` (host or device arrays, global rows).

    `rng` defaults to `fold_in(key(seed), step)`; `step` only seeds the rng,
    the loss's `step` is the optimizer's update count. Returns float metrics.
    """
    ga = self.grad_accum
    if ga > 1:
      def split(x):
        if x.shape[0] % ga:
          raise ValueError(f"batch of {x.shape[0]} rows does not split into "
                           f"optim.grad_accum={ga} micro-batches")
        return x.reshape(ga, x.shape[0] // ga, *x.shape[1:])
      batch = jax.tree.map(split, batch)
    self._model = None  # the old state's buffers are donated below
    with self._ctx():
      self._state, metrics = self._step(
          self._state, batch,
          jax.random.fold_in(self._key, step) if rng is None else rng)
    out = {k: float(v) for k, v in jax.device_get(metrics).items()}
    self._done += 1
    progress.update(self._done, self.steps, loss=out.get("loss"))
    return out

  @property
  def update_count(self) -> int:
    """Optimizer updates done so far (the `step` the loss receives next)."""
    return int(nnx.merge(self.ts.graphdef, self._state)[1].step[...])

  def model(self) -> nnx.Module:
    """The current model (for sampling); invalid after the next `step`."""
    if self._model is None:
      self._model = nnx.merge(self.ts.graphdef, self._state)[0]
    return self._model

  def write_back(self) -> nnx.Module:
    """Copies the trained weights into the model given at construction."""
    nnx.update(self._target, nnx.state(self.model()))
    return self._target


def train_on_batches(runner: StepRunner,
                     batch_fn: Callable[[int], dict[str, Any]], *,
                     steps: int) -> list[dict[str, float]]:
  """`steps` updates of `runner`, step i on `batch_fn(i)` (batches built
  from the current weights or a generator: warm starts, DPO pairs).
  Returns every step's metrics."""
  return [runner.step(batch_fn(i), i) for i in range(int(steps))]


def train_on_arrays(runner: StepRunner, data: dict[str, np.ndarray], *,
                    steps: int, batch_size: int, seed: int,
                    log_every: int = 0, log: Callable[[int, float], None]
                    | None = None) -> list[dict[str, float]]:
  """`steps` updates of `runner` on minibatches drawn from `[N, ...]` arrays.

  Each step draws `batch_size` rows uniformly with replacement
  (`np.random.default_rng(seed).integers`) from every array of `data`.
  Returns the loss curve: step 0, every `log_every`-th step and the last
  (`log(step, loss)` is called for each logged point when given).
  """
  n = len(next(iter(data.values())))
  if n == 0:
    raise ValueError("train_on_arrays got an empty data set")
  rng = np.random.default_rng(int(seed))
  curve = []
  for step in range(int(steps)):
    idx = rng.integers(0, n, int(batch_size))
    metrics = runner.step({k: v[idx] for k, v in data.items()}, step)
    if (log_every and step % int(log_every) == 0) or step == steps - 1:
      curve.append({"step": step, "loss": metrics["loss"]})
      if log is not None:
        log(step, metrics["loss"])
  return curve


def train_lm(model, data: dict[str, np.ndarray], *, steps: int,
             batch_size: int, lr: float | None = None, warmup_steps: int = 0,
             weight_decay: float = 0.0, clip_norm: float = 1.0, seed: int = 0,
             log_every: int = 0, optim: Any = None,
             mesh: jax.sharding.Mesh | None = None,
             rules: Any = None) -> list[dict[str, float]]:
  """Masked next-token training (`lm` loss) on `inputs/targets/loss_mask`.

  `data` holds `[N, T]` arrays (e.g. `encode_for_lm` or `fim.encode_batch`);
  minibatches are drawn by epoch-wise shuffling. The update is the
  trainer's (`StepRunner`): with `optim` (a whole `config.optim` section)
  exactly that optimizer; otherwise AdamW from `jaxlab.train.optim` with
  `lr`, linear warmup then cosine decay to 0 and global-norm clipping.
  `mesh` / `rules` shard the update (see `StepRunner`; None: one device).
  Trains `model` in place and returns the logged losses.
  """
  n = len(data["inputs"])
  if n == 0:
    raise ValueError("train_lm got an empty data set")
  if optim is None:
    if lr is None:
      raise ValueError("train_lm needs lr= or a whole optim= section")
    optim = optim_config(lr=lr, warmup_steps=warmup_steps,
                         weight_decay=weight_decay, schedule="cosine",
                         clip_norm=clip_norm, end_lr_frac=0.0)
  elif lr is not None:
    raise ValueError("train_lm takes lr= or optim=, not both")
  runner = StepRunner(model, loss="lm", loss_config=None, optim=optim,
                      steps=steps, seed=seed, mesh=mesh, rules=rules)
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
