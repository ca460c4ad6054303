"""Optimizer from `config.optim`: AdamW, warmup + decay, clipping, decay mask.

Fields (defaults in `configs/common.py`):
  lr, warmup_steps, schedule ('cosine' | 'linear' | 'constant'),
  end_lr_frac (final lr as a fraction of lr), b1, b2, eps, weight_decay,
  clip_norm (global-norm clipping; 0 disables), grad_accum (micro-batches per
  step; the trainer accumulates them with a scan, so one optimizer update is
  one step and the schedule counts updates).
"""

from collections.abc import Mapping
from typing import Any

import jax
import optax

SCHEDULES = ("cosine", "linear", "constant")


def _get(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
  return cfg.get(key, default) if hasattr(cfg, "get") else default


def make_schedule(optim_cfg: Mapping[str, Any],
                  total_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to lr, then cosine/linear decay to end_lr_frac*lr."""
  lr = float(optim_cfg["lr"])
  warmup = int(_get(optim_cfg, "warmup_steps", 0))
  kind = _get(optim_cfg, "schedule", "cosine")
  end = lr * float(_get(optim_cfg, "end_lr_frac", 0.0))
  if kind not in SCHEDULES:
    raise ValueError(f"optim.schedule={kind!r}; valid: {', '.join(SCHEDULES)}")
  decay_steps = max(total_steps - warmup, 1)
  if kind == "cosine":
    decay = optax.cosine_decay_schedule(lr, decay_steps, alpha=end / lr if lr
                                        else 0.0)
  elif kind == "linear":
    decay = optax.linear_schedule(lr, end, decay_steps)
  else:
    decay = optax.constant_schedule(lr)
  if warmup <= 0:
    return decay
  return optax.join_schedules(
      [optax.linear_schedule(0.0, lr, warmup), decay], [warmup])


def decay_mask(params: Any) -> Any:
  """True for weights that get weight decay: matrices, not norms or biases.

  Norm scales and biases are 1-D (or named `*bias*`/`*scale*`); decaying them
  towards zero hurts (the usual AdamW recipe excludes them).
  """
  def is_decayed(path, leaf):
    names = "/".join(str(getattr(k, "key", getattr(k, "name", k)))
                     for k in path).lower()
    if "bias" in names or "norm" in names or "scale" in names:
      return False
    return getattr(leaf, "ndim", 0) >= 2
  return jax.tree_util.tree_map_with_path(is_decayed, params)


def make_optimizer(optim_cfg: Mapping[str, Any],
                   total_steps: int) -> optax.GradientTransformation:
  """AdamW with warmup + decay, global-norm clipping and a decay mask."""
  schedule = make_schedule(optim_cfg, total_steps)
  parts = []
  clip = float(_get(optim_cfg, "clip_norm", 0.0) or 0.0)
  if clip > 0:
    parts.append(optax.clip_by_global_norm(clip))
  parts.append(optax.adamw(
      schedule, b1=float(_get(optim_cfg, "b1", 0.9)),
      b2=float(_get(optim_cfg, "b2", 0.95)),
      eps=float(_get(optim_cfg, "eps", 1e-8)),
      weight_decay=float(_get(optim_cfg, "weight_decay", 0.0)),
      mask=decay_mask))
  return optax.chain(*parts)
