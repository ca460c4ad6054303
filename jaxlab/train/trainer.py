"""The generic training loop: sharded, resumable, loss-pluggable.

    metrics = trainer.train(config, workdir)                    # LM from config
    metrics = trainer.train(config, workdir, model=my_factory,  # experiments
                            loss_fn=my_loss, train_source=my_examples)

Recipe (ANCHORS.md section 9): a ('data', 'fsdp', 'tensor') mesh entered with
`jax.set_mesh`, logical-axis rules from `config.sharding_rules`, model and
optimizer created under `jax.jit` with out_shardings from their logical names
(born sharded), a functional `(graphdef, state)` train step compiled with
explicit in/out shardings and donation, global batches from each host's
shard via `jax.make_array_from_process_local_data`.

One step = one optimizer update on `train.batch_size` examples (split into
`optim.grad_accum` micro-batches that a `lax.scan` accumulates). Checkpoints
(every `train.checkpoint_every` steps, at the end, and on SIGINT/SIGTERM) hold the
state, the grain iterator and the RNG, so a resumed run replays exactly the
steps an uninterrupted run would take. The RNG of step s is
`fold_in(key(config.seed), s)`.
"""

from collections.abc import Callable, Sequence
import dataclasses
import functools
import json
import math
import os
import time
from typing import Any

from absl import logging
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab import parallel
from jaxlab.io import paths
from jaxlab.models import registry
from jaxlab.parallel import preemption
from jaxlab.train import checkpoint as ckpt_lib
from jaxlab.train import lora as lora_lib
from jaxlab.train import losses
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import optim


# The train step's count of target tokens (`make_train_step(count_targets=
# True)`): nonzeros of the batch's loss mask, for the throughput numbers.
TARGET_TOKENS = "perf/target_tokens"


class NonFiniteError(FloatingPointError):
  """Raised when the loss or gradient norm of a step is NaN/Inf."""


@dataclasses.dataclass
class TrainState:
  """What `build` returns: everything the loop (or an experiment) needs."""
  graphdef: Any
  state: Any                     # nnx.State of (model, optimizer)
  shardings: Any                 # NamedShardings matching `state`
  mesh: jax.sharding.Mesh
  rules: tuple
  spec: registry.ModelSpec | None
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  wrt: Any                       # nnx filter of the trained variables

  def model(self) -> nnx.Module:
    """The current model (LoRA merged in), e.g. for evaluation."""
    model, _ = nnx.merge(self.graphdef, self.state, copy=True)
    if lora_lib.has_lora(model):
      lora_lib.merge_lora(model)
    return model


# --------------------------------------------------------------------------
# Workdir and config checks.
# --------------------------------------------------------------------------


def check_workdir(workdir: str) -> str:
  """Creates `workdir` and checks it is writable; clear error otherwise.

  A local path is made absolute; a URL (`gs://BUCKET/run`, anything epath
  reaches) is kept as it is, after checking that its filesystem package is
  installed (`io.paths.check_backend`).
  """
  paths.check_backend(workdir)
  workdir = paths.resolve(workdir)
  if not paths.is_url(workdir) and os.path.isfile(workdir):
    raise ValueError(f"--workdir {workdir} is a file, not a directory; pick "
                     "a directory (it is created when missing)")
  try:
    paths.makedirs(workdir)
    probe = paths.join(workdir, f".write_test_{os.getpid()}")
    paths.write_bytes(probe, b"ok")
    paths.epath_of(probe).unlink()
  except OSError as e:
    raise ValueError(f"--workdir {workdir} is not writable "
                     f"({e.strerror or e}); pick a directory you can write "
                     "to") from None
  return workdir


def _field(cfg, dotted: str):
  """`cfg.<dotted>`; a missing field is an error naming it.

  The trainer has no defaults of its own: they live in
  `jaxlab/configs/common.base_config()`, which every config starts from.
  """
  node = cfg
  for i, part in enumerate(dotted.split(".")):
    if not hasattr(node, "keys") or part not in node:
      raise ValueError(
          f"config.{dotted} is missing (no "
          f"{'.'.join(dotted.split('.')[:i + 1])!r}): configs must start from "
          "jaxlab/configs/common.base_config(), which holds every field the trainer "
          "reads with its default")
    node = node[part]
  return node


def peak_flops_of(config, flops_known: bool) -> float | None:
  """`train.peak_flops`: > 0 given, 0 measured (when the model's FLOPs are
  known), < 0 no MFU at all (None)."""
  peak = float(_field(config, "train.peak_flops"))
  if peak > 0:
    return peak
  if peak < 0 or not flops_known:
    return None
  return metrics_lib.measured_peak_flops()


# --------------------------------------------------------------------------
# Model + optimizer creation (born sharded) and restore.
# --------------------------------------------------------------------------


def _model_spec(config, model, vocab_size) -> tuple[Any, Any]:
  """(ModelSpec or None, host-built instance or None) for `model`/config."""
  if isinstance(model, registry.ModelSpec):
    return model, None
  if isinstance(model, nnx.Module):
    return None, model
  if callable(model):
    return registry.ModelSpec(factory=model), None
  init_from = _field(config, "init_from")
  if init_from:
    from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
    # A HF directory, a .gguf file or a shipped name (`io.pretrained`).
    # Compute dtype, param dtype, remat (a bool or a policy name) and the
    # scanned layout come from the config; the architecture from the
    # checkpoint's config.json / GGUF metadata.
    instance, dcfg = pretrained.load(
        init_from, dtype=_field(config, "model.dtype"),
        param_dtype=_field(config, "model.param_dtype"),
        remat=_field(config, "model.remat"),
        scan_layers=bool(config.model.get("scan_layers", False)))
    spec = registry.ModelSpec(
        factory=None, config=dcfg,
        flops_per_token=lambda t: registry.decoder_train_flops_per_token(
            dcfg, t))
    return spec, instance
  return registry.get_spec(config.model, vocab_size=vocab_size,
                           seed=int(config.seed)), None


def model_spec(config, *, vocab_size: int | None = None
               ) -> registry.ModelSpec:
  """The `ModelSpec` `build` uses for `config.model` (no checkpoint)."""
  return registry.get_spec(config.model, vocab_size=vocab_size,
                           seed=int(config.seed))


def build(config, *, model=None, vocab_size: int | None = None,
          mesh: jax.sharding.Mesh | None = None,
          abstract_only: bool = False) -> TrainState:
  """Mesh, model and optimizer state (born sharded) for `config`.

  Must be called inside the returned mesh/rules context for use; `train`
  does this. With `abstract_only` the state holds ShapeDtypeStructs with
  shardings (a restore target) and nothing is computed.
  """
  mesh = mesh or parallel.make_mesh(config.mesh)
  rules = parallel.rules_from_config(_field(config, "sharding_rules"))
  spec, instance = _model_spec(config, model, vocab_size)
  steps = int(config.train.steps)
  tx = optim.make_optimizer(config.optim, steps)
  schedule = optim.make_schedule(config.optim, steps)
  lora_rank = int(_field(config, "lora.rank"))
  wrt = lora_lib.LoRA if lora_rank else nnx.Param

  inst_graphdef, inst_state = (nnx.split(instance) if instance is not None
                               else (None, None))

  def create(model_state):
    m = (spec.factory() if model_state is None
         else nnx.merge(inst_graphdef, model_state))
    if lora_rank:
      lora_lib.add_lora(m, rank=lora_rank,
                        alpha=float(_field(config, "lora.alpha")),
                        targets=tuple(_field(config, "lora.targets")),
                        rngs=nnx.Rngs(int(config.seed) + 1))
    return m, nnx.Optimizer(m, tx, wrt=wrt)

  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    abstract = nnx.eval_shape(lambda: create(inst_state))
    graphdef, abs_state = nnx.split(abstract)
    shardings = nnx.get_named_sharding(abs_state, mesh)
    if abstract_only:
      state = jax.tree.map(
          lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
          abs_state, shardings)
    elif inst_state is None:
      state = jax.jit(lambda: nnx.split(create(None))[1],
                      out_shardings=shardings)()
    else:
      inst_sh = nnx.get_named_sharding(inst_state, mesh)
      inst_state = jax.device_put(inst_state, inst_sh)
      state = jax.jit(lambda s: nnx.split(create(s))[1],
                      out_shardings=shardings)(inst_state)
  return TrainState(graphdef=graphdef, state=state, shardings=shardings,
                    mesh=mesh, rules=rules, spec=spec, tx=tx,
                    schedule=schedule, wrt=wrt)


# --------------------------------------------------------------------------
# Train and eval steps.
# --------------------------------------------------------------------------


def _mutable_filter():
  """Model variables a loss may update and the step keeps: not the weights.

  Everything but `nnx.Param` (frozen base weights under LoRA, which
  `merge_lora` overwrites in the loss's copy) and `LoRA` factors (trained,
  updated by the optimizer): e.g. `nnx.BatchStat`, RNG counts, running
  estimates or dual variables held in an `nnx.Variable` subclass.
  """
  return nnx.Not(nnx.Any(nnx.Param, lora_lib.LoRA))


def _loss_of(graphdef_m, loss_fn, loss_cfg):
  """`f(trained, rest, batch, rng, step) -> (loss, (aux, mutated))`.

  `mutated` is the model's non-weight state after the loss ran on a merged
  copy (`_mutable_filter`), so updates the loss makes to it are kept.
  """
  def f(trained, rest, batch, rng, step):
    m = nnx.merge(graphdef_m, trained, rest, copy=True)
    if lora_lib.has_lora(m):
      lora_lib.merge_lora(m)
    loss, aux = losses.call(loss_fn, m, batch, rng=rng, config=loss_cfg,
                            step=step)
    return loss.astype(jnp.float32), (aux, nnx.state(m, _mutable_filter()))
  return f


def _target_mask(batch):
  """The batch's loss mask (`loss_mask`, else `mask`), None without one."""
  if not hasattr(batch, "get"):
    return None
  mask = batch.get("loss_mask")
  return batch.get("mask") if mask is None else mask


def make_train_step(ts: TrainState, loss_fn: Callable, loss_cfg: Any, *,
                    grad_accum: int, batch_sharding,
                    count_targets: bool = False) -> Callable:
  """Jitted `step(state, batch, rng) -> (state, metrics)`, state donated.

  With grad_accum > 1 the batch arrives as `[A, B/A, ...]` and micro-batch
  gradients are averaged by a scan (one optimizer update per step).

  The loss gets `step` (int32 scalar: optimizer updates before this one, the
  count the lr schedule reads) when its signature accepts it
  (`losses.call`). Non-weight model variables the loss updates (batch
  statistics, dual variables, counters: `_mutable_filter`) are kept in the
  returned state; with grad_accum > 1 each micro-batch sees the previous
  one's update.

  With `count_targets` the metrics also hold `TARGET_TOKENS`: the number of
  nonzeros of the whole batch's `loss_mask` (else `mask`; absent when the
  batch has neither), an int32 sum computed on device with the step.
  """
  graphdef, wrt = ts.graphdef, ts.wrt

  def step(state, batch, rng):
    model, opt = nnx.merge(graphdef, state)
    gd_m, trained, rest = nnx.split(model, wrt, ...)
    count = opt.step[...].astype(jnp.int32)
    grad_fn = jax.value_and_grad(_loss_of(gd_m, loss_fn, loss_cfg),
                                 has_aux=True)
    if grad_accum == 1:
      (loss, (aux, mutated)), grads = grad_fn(trained, rest, batch, rng,
                                              count)
    else:
      def body(carry, xs):
        g_acc, l_acc, a_acc, rest_i = carry
        mb, i = xs
        (l, (a, mut)), g = grad_fn(trained, rest_i, mb,
                                   jax.random.fold_in(rng, i), count)
        m = nnx.merge(gd_m, trained, rest_i)
        nnx.update(m, mut)
        rest_i = nnx.split(m, wrt, ...)[2]
        g_acc, l_acc, a_acc = jax.tree.map(jnp.add, (g_acc, l_acc, a_acc),
                                           (g, l, a))
        return (g_acc, l_acc, a_acc, rest_i), None
      zeros = jax.tree.map(jnp.zeros_like, trained)
      aux_shape = jax.eval_shape(
          lambda: grad_fn(trained, rest,
                          jax.tree.map(lambda x: x[0], batch), rng,
                          count)[0][1][0])
      init = (zeros, jnp.zeros((), jnp.float32),
              jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), aux_shape),
              rest)
      (grads, loss, aux, rest), _ = jax.lax.scan(
          body, init, (batch, jnp.arange(grad_accum)))
      grads, loss, aux = jax.tree.map(lambda x: x / grad_accum,
                                      (grads, loss, aux))
      mutated = nnx.state(nnx.merge(gd_m, trained, rest), _mutable_filter())
    nnx.update(model, mutated)
    grad_norm = optax.tree.norm(grads)
    opt.update(model, grads)
    metrics = {"loss": loss, "grad_norm": grad_norm, **aux}
    mask = _target_mask(batch) if count_targets else None
    if mask is not None:
      metrics[TARGET_TOKENS] = jnp.sum(mask != 0, dtype=jnp.int32)
    return nnx.state((model, opt)), metrics

  return jax.jit(step, in_shardings=(ts.shardings, batch_sharding, None),
                 out_shardings=(ts.shardings, None), donate_argnums=0)


def make_eval_step(ts: TrainState, loss_fn: Callable, loss_cfg: Any, *,
                   batch_sharding) -> Callable:
  """Jitted `step(state, batch, rng) -> metrics` (state changes dropped)."""
  graphdef = ts.graphdef

  def step(state, batch, rng):
    model, opt = nnx.merge(graphdef, state)
    if lora_lib.has_lora(model):
      lora_lib.merge_lora(model)
    loss, aux = losses.call(loss_fn, model, batch, rng=rng, config=loss_cfg,
                            step=opt.step[...].astype(jnp.int32))
    return {"loss": loss.astype(jnp.float32), **aux}

  return jax.jit(step, in_shardings=(ts.shardings, batch_sharding, None))


# --------------------------------------------------------------------------
# Data.
# --------------------------------------------------------------------------


def _global_batch(local: dict[str, np.ndarray], sharding, grad_accum: int):
  def put(x):
    x = np.asarray(x)
    if grad_accum > 1:
      x = x.reshape(grad_accum, x.shape[0] // grad_accum, *x.shape[1:])
    return jax.make_array_from_process_local_data(sharding, x)
  return jax.tree.map(put, local)


def _default_sources(config, train_source, eval_source):
  """LM examples from `config.data` unless the caller gave sources."""
  if train_source is not None:
    return train_source, eval_source, None, None
  from jaxlab.data import pipeline  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  tok = pretrained.data_tokenizer(_field(config, "data.tokenizer"),
                                  path=_field(config, "data.tokenizer_path"),
                                  init_from=_field(config, "init_from"))
  tr, ev, prov = pipeline.lm_data(config.data,
                                  seq_len=int(config.train.seq_len),
                                  tokenizer=tok)
  return tr, (eval_source if eval_source is not None else ev), tok, prov


# --------------------------------------------------------------------------
# The loop.
# --------------------------------------------------------------------------


def train(config, workdir: str, *, model: Any = None,
          loss_fn: Callable | None = None,
          train_source: Sequence[Any] | grain.MapDataset | None = None,
          eval_source: Sequence[Any] | grain.MapDataset | None = None,
          mesh: jax.sharding.Mesh | None = None) -> dict[str, Any]:
  """Trains per `config` in `workdir`, resuming from its latest checkpoint.

  Args:
    config: ConfigDict built from `jaxlab/configs/common.base_config()` (`seed`,
      `model`, `data`, `loss`, `optim`, `train`, `mesh`, `sharding_rules`,
      `lora`, `init_from`); the trainer has no defaults of its own.
    workdir: where checkpoints, metrics.jsonl and TensorBoard events go.
    model: None (build `config.model` by name, or import `config.init_from`),
      a zero-arg factory (called under jit: born sharded), a
      `registry.ModelSpec`, or a built `nnx.Module` (sharded after the fact).
    loss_fn: `fn(model, batch, *, rng, config[, step])`; default
      `losses.get(config.loss.name)`.
    train_source / eval_source: random-access sequences (or grain
      MapDatasets) of examples, dicts of fixed-shape numpy arrays; default:
      LM examples from `config.data`.
    mesh: use this mesh instead of one built from `config.mesh` (e.g. a
      sub-mesh of the available devices).

  Returns:
    Final metrics: `step`, `loss`, `grad_norm`, `eval/...`, `data` (the
    provenance of `config.data`: source, path, subset, rows read per split,
    digest; absent when the caller gave the sources), and `preempted` (True when SIGINT / SIGTERM stopped the run after saving a
    checkpoint at the step reached; the launcher then exits 0).

  Raises:
    NonFiniteError: a step's loss or grad norm is NaN/Inf (names the step;
      checkpoints up to the previous save are kept).
    ValueError: unwritable workdir, a checkpoint of another model shape,
      bad config values, a config field missing (not from base_config()).
  """
  parallel.maybe_initialize_distributed()
  workdir = check_workdir(workdir)
  loss_fn = loss_fn or losses.get(_field(config, "loss.name"))
  tcfg = config.train
  steps, batch_size = int(tcfg.steps), int(tcfg.batch_size)
  grad_accum = int(_field(config, "optim.grad_accum"))
  if batch_size < 1:
    raise ValueError(f"train.batch_size={batch_size} must be at least 1 "
                     "(examples per optimizer step)")
  if grad_accum < 1:
    raise ValueError(f"optim.grad_accum={grad_accum} must be at least 1")
  if batch_size % grad_accum:
    raise ValueError(f"train.batch_size={batch_size} must be divisible by "
                     f"optim.grad_accum={grad_accum}")
  train_source, eval_source, tokenizer, data_prov = _default_sources(
      config, train_source, eval_source)
  vocab = None
  if tokenizer is not None:
    from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
    vocab = tokenizers.padded_vocab_size(tokenizer.vocab_size)

  mesh = mesh or parallel.make_mesh(config.mesh)
  n_batch_shards = mesh.shape["data"] * mesh.shape["fsdp"]
  if (batch_size // grad_accum) % n_batch_shards:
    raise ValueError(
        f"train.batch_size/optim.grad_accum={batch_size // grad_accum} must be "
        f"divisible by mesh.data*mesh.fsdp={n_batch_shards}")
  ckpt = ckpt_lib.Checkpointer(
      paths.join(workdir, "checkpoints"),
      keep=int(_field(config, "train.keep_checkpoints")),
      async_save=bool(_field(config, "train.async_checkpoint")))
  latest = ckpt.latest_step()
  ts = build(config, model=model, vocab_size=vocab, mesh=mesh,
             abstract_only=latest is not None)
  rules = ts.rules
  batch_sh = parallel.batch_sharding(mesh, rules,
                                     leading=1 if grad_accum > 1 else 0)
  eval_sh = parallel.batch_sharding(mesh, rules)
  seed = int(config.seed)
  # Each process reads only its rows of every global batch (the rows its
  # devices hold), so the global batch is the same for any process count.
  micro = batch_size // grad_accum
  rows = parallel.mesh.process_batch_rows(
      batch_sh, (grad_accum, micro) if grad_accum > 1 else (micro,),
      axis=1 if grad_accum > 1 else 0)
  rows = [a * micro + r for a in range(grad_accum) for r in rows]
  train_ds = _pipeline_dataset(train_source, batch_size, seed, train=True,
                               local_rows=rows, data_cfg=config.data)
  data_iter = iter(train_ds)
  base_key = jax.random.key(seed)

  start = 0
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    if latest is not None:
      ts.state, meta = ckpt.restore(latest, ts.state, data_iter)
      start = int(meta["step"])
      if not meta.get("data_restored", True):
        # Saved by another number of processes: the iterator position is
        # the step (one batch per step on the same global stream).
        _seek(data_iter, start)
      saved_key = np.asarray(meta.get("rng", []), np.uint32)
      if saved_key.size:
        base_key = jax.random.wrap_key_data(saved_key)
      _log(f"Resuming from {ckpt.directory}/{latest} (step {start}).")

    flops_tok = (ts.spec.flops_per_token(int(tcfg.seq_len))
                 if ts.spec is not None and ts.spec.flops_per_token else None)
    # Slots (B*T, padding included): the FLOPs spent. Target tokens (the
    # loss mask's) are counted by the step (TARGET_TOKENS).
    tokens_per_step = batch_size * int(tcfg.seq_len)
    writer = metrics_lib.MetricsWriter(
        workdir, total_steps=steps, tokens_per_step=tokens_per_step,
        flops_per_step=None if flops_tok is None else flops_tok *
        tokens_per_step,
        peak_flops=peak_flops_of(config, flops_tok is not None),
        tensorboard=bool(_field(config, "train.tensorboard")))
    writer.truncate_after(start)

    train_step = make_train_step(ts, loss_fn, config.loss,
                                 grad_accum=grad_accum, batch_sharding=batch_sh,
                                 count_targets=True)
    eval_step = make_eval_step(ts, loss_fn, config.loss, batch_sharding=eval_sh)
    eval_batch = int(_field(config, "train.eval_batch_size"))
    eval_ds = (_pipeline_dataset(
        eval_source, eval_batch, seed, train=False,
        local_rows=parallel.mesh.process_batch_rows(eval_sh, (eval_batch,)),
        data_cfg=config.data)
               if eval_source is not None else None)
    max_eval = int(_field(config, "train.eval_batches"))

    eval_key = jax.random.fold_in(base_key, 2**31 - 1)

    def run_eval(state, step):
      totals, n = {}, 0
      for i, local in enumerate(eval_ds):
        if max_eval and i >= max_eval:
          break
        out = eval_step(state, _global_batch(local, eval_sh, 1),
                        jax.random.fold_in(eval_key, i))
        for k, v in jax.device_get(out).items():
          totals[k] = totals.get(k, 0.0) + float(v)
        n += 1
      del step
      return {f"eval/{k}": v / max(n, 1) for k, v in totals.items()}

    key_data = np.asarray(jax.random.key_data(base_key)).tolist()
    meta = {"rng": key_data, "config": config.to_json_best_effort()
            if hasattr(config, "to_json_best_effort") else str(config)}
    log_every = max(int(_field(config, "train.log_every")), 1)
    eval_every = int(_field(config, "train.eval_every"))
    ckpt_every = int(_field(config, "train.checkpoint_every"))
    sleep_s = float(_field(config, "train.debug_step_sleep_s"))
    state, last, saved_at = ts.state, {}, latest
    preempted = False
    _log(f"Training {steps} steps on mesh ({parallel.mesh.describe(mesh)})"
         + (f" over {jax.process_count()} processes"
            if jax.process_count() > 1 else "") + f"; workdir {workdir}")
    # SIGINT (Ctrl-C) / SIGTERM set a flag (`parallel.preemption`); the
    # loop saves and stops at the next step boundary.
    with preemption.handling():
      for step in range(start + 1, steps + 1):
        local = next(data_iter)
        batch = _global_batch(local, batch_sh, grad_accum)
        state, out = train_step(state, batch, jax.random.fold_in(base_key,
                                                                 step))
        out = jax.device_get(out)
        n_targets = out.pop(TARGET_TOKENS, None)
        if step == start + 1:
          writer.start(step)  # throughput excludes compilation
        elif n_targets is not None:
          writer.count_targets(step, n_targets)  # tok/s over real tokens
        if not (math.isfinite(float(out["loss"])) and
                math.isfinite(float(out["grad_norm"]))):
          ckpt.close()
          good = ckpt.latest_step()
          raise NonFiniteError(
              f"non-finite loss ({float(out['loss'])}) or gradient norm "
              f"({float(out['grad_norm'])}) at step {step}; stopping. The "
              f"last good checkpoint is step {good} in {ckpt.directory}. "
              "Lower optim.lr, check the data, or raise optim.clip_norm.")
        last = {k: float(v) for k, v in out.items()}
        row = {}
        if step % log_every == 0 or step == steps:
          row.update(last)
          row["lr"] = float(ts.schedule(step - 1))
          row.update(writer.perf(step))
        if eval_ds is not None and ((eval_every and step % eval_every == 0)
                                    or step == steps):
          ev = run_eval(state, step)
          last.update(ev)
          row.update(ev)
        if row:
          writer.write(step, row)
        if sleep_s:
          time.sleep(sleep_s)
        # Single process: the SIGINT/SIGTERM flag. Multi-process: orbax's
        # preemption sync point, so every host stops at the same step.
        stop = ((preemption.requested() and jax.process_count() == 1)
                or ckpt.reached_preemption(step))
        if (ckpt_every and step % ckpt_every == 0) or step == steps or stop:
          ckpt.save(step, state, data_iter, meta)
          saved_at = step
        if stop:
          preempted = True
          _log(f"{preemption.reason() or 'SIGTERM'}: saved checkpoint at "
               f"step {step}; exiting.")
          break
    ckpt.close()
    writer.close()
  ts.state = state
  if not last:  # nothing left to train: report the last logged row
    rows = metrics_lib.read_metrics(workdir)
    last = {k: v for r in rows for k, v in r.items()
            if k != "step" and not k.startswith("perf/")}
  result = {"step": step if steps > start else start, **last,
            "preempted": preempted, "workdir": workdir,
            "checkpoint_dir": ckpt.directory, "checkpoint_step": saved_at}
  if data_prov is not None:
    result["data"] = data_prov
  result["train_state"] = ts
  return result


def _pipeline_dataset(source, batch: int, seed: int, *, train: bool,
                      local_rows=None, data_cfg=None):
  from jaxlab.data import pipeline  # pylint: disable=g-import-not-at-top
  data_cfg = data_cfg if data_cfg is not None else {}
  return pipeline.batched_dataset(
      source, global_batch=batch, seed=seed, shuffle=train, repeat=train,
      local_rows=local_rows, prefetch=int(data_cfg.get("prefetch", 4)),
      read_threads=int(data_cfg.get("read_threads", 0) or 0))


def _seek(data_iter, step: int) -> None:
  """Positions a batch iterator after `step` batches (grain index state)."""
  state = data_iter.get_state()
  if not isinstance(state, dict) or "next_index" not in state:
    raise ValueError("cannot resume the data iterator of a checkpoint written "
                     "by another number of processes: unknown iterator state "
                     f"{state!r}")
  data_iter.set_state(dict(state, next_index=int(step)))


def _log(msg: str) -> None:
  """Prints a progress message on process 0 only."""
  if jax.process_index() == 0:
    print(msg, flush=True)
