"""Controller training loss (paper I, spec item 6), registered as "controller".

    L = L_task + λ_op L_op + λ_sem L_sem + λ_ent(t) L_ent + λ_spar L_spar

  L_task  token-mean next-token NLL over `batch["loss_mask"]` (answers).
  L_op    cross-entropy -log y_o* of the selection y against the
          simulator's opcode o* per position (`batch["op_targets"]`, -1 =
          none), averaged over every controller; only with λ_op > 0 and
          targets in the batch (trace supervision is optional). y is the
          relaxed Gumbel sample softmax((π + g)/τ), taken before any
          straight-through rounding (the spec: "cross-entropy of y").
          `op_loss_on="pi"` takes it on softmax(π) instead (no noise, no
          τ): the loss before this switch existed, which produced the
          committed docs/results/controller.json.
  L_sem   [inferred] conservation: on the share of the mixture that declares
          registers unchanged (COMPARE + NOOP), ‖R' - R‖².
  L_ent   entropy of y, weight rising linearly from ent_weight_start to
          ent_weight_end over ent_steps (annealed, spec I.6).
  L_spar  entropy of the write address β plus ‖ΔS‖² (spec I.6).

Defaults are the spec's [inferred] λ_op = 0.5, λ_sem = 0.1, λ_ent 0.01 ->
0.1, λ_spar = 1e-3, and L_op on y. The loss also trains a plain `Decoder`
(the vanilla baseline): then only L_task is computed. Metrics:
`task_loss`, `op_loss`, `op_acc` (trace alignment of the argmax op),
`entropy`, `sem`, `spar`, `tau`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from jaxlab.models import controller as controller_lib
from jaxlab.train import losses

# What L_op's cross-entropy is taken on: the selection y (spec I.6) or the
# selector's noise-free softmax(π).
OP_LOSS_ON = ("y", "pi")
DEFAULTS = dict(op_weight=0.5, op_loss_on="y", sem_weight=0.1,
                ent_weight_start=0.01, ent_weight_end=0.1, ent_steps=1000,
                spar_weight=1e-3)


def default_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(name="controller", **DEFAULTS))


def _get(config: Any, key: str):
  if config is not None and key in config:
    return config[key]
  return DEFAULTS[key]


def _entropy(p: jax.Array) -> jax.Array:
  return -jnp.sum(p * jnp.log(jnp.clip(p, 1e-9, 1.0)), axis=-1)


def trace_alignment(trace, op_targets_bt: jax.Array) -> jax.Array:
  """Fraction of (position, controller) pairs with target >= 0 where the
  executed op (argmax of y) equals the simulator's op."""
  valid = (op_targets_bt >= 0).astype(jnp.float32)
  hits = sum(jnp.sum((tr["op"] == op_targets_bt) * valid) for tr in trace)
  return hits / jnp.maximum(len(trace) * jnp.sum(valid), 1.0)


@losses.register("controller")
def controller_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                    config: Any = None, step=0):
  """Spec I.6 loss; `step` drives the temperature and the entropy weight."""
  mask = batch.get("loss_mask")
  if mask is None:
    mask = jnp.ones_like(batch["targets"], dtype=jnp.float32)
  mask = mask.astype(jnp.float32)
  if not isinstance(model, controller_lib.ControlledDecoder):
    logits = model(batch["inputs"], positions=batch.get("positions"))
    total, count = losses.masked_token_nll(logits, batch["targets"], mask)
    loss = total / jnp.maximum(count, 1.0)
    return loss, {"task_loss": loss, "tokens": count}

  out = model.forward(batch["inputs"], step=step, rng=rng, output_trace=True,
                      positions=batch.get("positions"))
  total, count = losses.masked_token_nll(out.logits, batch["targets"], mask)
  task = total / jnp.maximum(count, 1.0)
  valid_bt = (batch["inputs"] != -1).astype(jnp.float32)
  if "op_targets" in batch:
    valid_bt = (batch["op_targets"] >= 0).astype(jnp.float32)
  denom = jnp.maximum(jnp.sum(valid_bt), 1.0)

  def avg(x_bt):
    return jnp.sum(x_bt * valid_bt) / denom

  ent = sum(avg(_entropy(tr["y"])) for tr in out.trace) / len(out.trace)
  spar = sum(avg(_entropy(tr["beta"]) + tr["delta_sq"])
             for tr in out.trace) / len(out.trace)
  sem = sum(avg((tr["y"][..., controller_lib.COMPARE] +
                 tr["y"][..., controller_lib.NOOP]) *
                tr["register_change_sq"]) for tr in out.trace) / len(out.trace)
  ent_steps = max(int(_get(config, "ent_steps")), 1)
  frac = jnp.clip(jnp.asarray(step, jnp.float32) / ent_steps, 0.0, 1.0)
  ent_w = (_get(config, "ent_weight_start") + frac *
           (_get(config, "ent_weight_end") - _get(config, "ent_weight_start")))
  loss = (task + _get(config, "sem_weight") * sem + ent_w * ent +
          _get(config, "spar_weight") * spar)
  metrics = {"task_loss": task, "tokens": count, "entropy": ent,
             "tau": out.trace[0]["tau"], "sem": sem, "spar": spar}
  op_w = float(_get(config, "op_weight"))
  if "op_targets" in batch:
    op_on = _get(config, "op_loss_on")
    if op_on not in OP_LOSS_ON:
      raise ValueError(f"loss.op_loss_on must be one of {OP_LOSS_ON} (the "
                       f"selection y, spec I.6, or softmax(π)), got "
                       f"{op_on!r}")
    tgt = batch["op_targets"]
    safe = jnp.maximum(tgt, 0)
    op_loss = 0.0
    for tr in out.trace:
      logp = jax.nn.log_softmax(
          tr["y_logits" if op_on == "y" else "logits"], axis=-1)
      nll = -jnp.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
      op_loss = op_loss + avg(nll)
    op_loss = op_loss / len(out.trace)
    metrics["op_loss"] = op_loss
    metrics["op_acc"] = trace_alignment(out.trace, tgt)
    if op_w > 0:
      loss = loss + op_w * op_loss
  return loss, metrics
