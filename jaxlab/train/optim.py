"""Optimizer from `config.optim`: AdamW, warmup + decay, clipping, groups.

Fields (defaults in `jaxlab/configs/common.py`, `optim_config()`; every field must be
present, so a config starts from `jaxlab/configs/common.base_config()`):
  lr, warmup_steps, schedule ('cosine' | 'linear' | 'constant'),
  end_lr_frac (final lr as a fraction of lr), b1, b2, eps, weight_decay,
  clip_norm (global-norm clipping over all trained parameters; 0 disables),
  grad_accum (micro-batches per step; the trainer accumulates them with a
  scan, so one optimizer update is one step and the schedule counts updates),
  groups (parameter groups, below).

Parameter groups (`optim.groups`, a mapping name -> fields; empty: one AdamW
for every parameter). A parameter belongs to the group whose `pattern` (a
regex, `re.search`) matches its path, the `/`-joined attribute names such as
`layers/0/attn/q_dnh` (matching two groups is an error: ConfigDicts sort
their keys, so "first match" would depend on the names); parameters no group
matches form the group `default` with the top-level fields. A group
has its own optax transform (`optax.multi_transform`), built from the
top-level fields overridden by the group's:

  pattern     regex over parameter paths (required; must match something),
  lr          the group's peak learning rate, or
  lr_mult     a multiplier of the top-level `lr` (not both),
  optimizer   'adamw' (default) | 'sgd' (plain `-lr * g`, momentum from
              `momentum`, default 0) | 'frozen' (no update),
  any of warmup_steps, schedule, end_lr_frac, b1, b2, eps, weight_decay.

E.g. dual-ascent multipliers next to weights (a negative lr ascends):

    config.optim.groups = {"multipliers": {"pattern": "lagrange",
                                           "optimizer": "sgd", "lr": -1e-2,
                                           "schedule": "constant",
                                           "warmup_steps": 0}}

Clipping (`clip_norm`) stays global and comes before the groups.
"""

from collections.abc import Mapping
import re
from typing import Any

import jax
import optax

SCHEDULES = ("cosine", "linear", "constant")
GROUP_OPTIMIZERS = ("adamw", "sgd", "frozen")
DEFAULT_GROUP = "default"
# Fields a group may override (clip_norm and grad_accum are global).
_GROUP_FIELDS = ("pattern", "lr", "lr_mult", "optimizer", "momentum",
                 "warmup_steps", "schedule", "end_lr_frac", "b1", "b2", "eps",
                 "weight_decay")


def field(optim_cfg: Mapping[str, Any], key: str, where: str = "optim") -> Any:
  """`optim_cfg[key]`, or an error naming the field and the fix."""
  if not hasattr(optim_cfg, "keys") or key not in optim_cfg:
    raise ValueError(
        f"config.{where}.{key} is missing: configs must start from "
        "jaxlab/configs/common.base_config() (its optim section: "
        "jaxlab/configs/common.optim_config(); for a sub-training, "
        "jaxlab.train.runner.optim_config(...)) and override fields there")
  return optim_cfg[key]


def make_schedule(optim_cfg: Mapping[str, Any],
                  total_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to lr, then cosine/linear decay to end_lr_frac*lr."""
  lr = float(field(optim_cfg, "lr"))
  warmup = int(field(optim_cfg, "warmup_steps"))
  kind = field(optim_cfg, "schedule")
  end = lr * float(field(optim_cfg, "end_lr_frac"))
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


def _path_name(path) -> str:
  """`layers/0/attn/q_dnh` for a pytree path (a Variable's `.value` dropped)."""
  if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and (
      path[-1].name == "value"):
    path = path[:-1]
  return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(
      k, "idx", k)))) for k in path)


def decay_mask(params: Any) -> Any:
  """True for weights that get weight decay: matrices, not norms or biases.

  Norm scales and biases are 1-D (or named `*bias*`/`*scale*`); decaying them
  towards zero hurts (the usual AdamW recipe excludes them).
  """
  def is_decayed(path, leaf):
    names = _path_name(path).lower()
    if "bias" in names or "norm" in names or "scale" in names:
      return False
    return getattr(leaf, "ndim", 0) >= 2
  return jax.tree_util.tree_map_with_path(is_decayed, params)


def _adamw(cfg: Mapping[str, Any], total_steps: int
           ) -> optax.GradientTransformation:
  return optax.adamw(
      make_schedule(cfg, total_steps), b1=float(field(cfg, "b1")),
      b2=float(field(cfg, "b2")), eps=float(field(cfg, "eps")),
      weight_decay=float(field(cfg, "weight_decay")), mask=decay_mask)


def group_config(optim_cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
  """The top-level optim fields overridden by group `name`'s."""
  group = dict(field(optim_cfg, "groups")[name])
  where = f"optim.groups.{name}"
  unknown = sorted(set(group) - set(_GROUP_FIELDS))
  if unknown:
    raise ValueError(f"config.{where} has unknown field(s) {unknown}; valid: "
                     f"{', '.join(_GROUP_FIELDS)}")
  if "pattern" not in group:
    raise ValueError(f"config.{where}.pattern is missing: a regex over "
                     "parameter paths such as 'layers/0/attn/q_dnh'")
  if "lr" in group and "lr_mult" in group:
    raise ValueError(f"config.{where}: give lr or lr_mult, not both")
  out = {k: optim_cfg[k] for k in optim_cfg.keys() if k != "groups"}
  out.update(group)
  if "lr_mult" in group:
    out["lr"] = float(field(optim_cfg, "lr")) * float(group["lr_mult"])
  out.setdefault("optimizer", "adamw")
  if out["optimizer"] not in GROUP_OPTIMIZERS:
    raise ValueError(f"config.{where}.optimizer={out['optimizer']!r}; valid: "
                     f"{', '.join(GROUP_OPTIMIZERS)}")
  return out


def param_labels(optim_cfg: Mapping[str, Any]):
  """`fn(params) -> labels`: each leaf's group name (`default` if none).

  Raises (when called) if a group's pattern matches no parameter (a typo
  would otherwise silently train that group with the defaults) or a
  parameter matches two groups.
  """
  groups = field(optim_cfg, "groups")
  patterns = [(name, re.compile(str(groups[name]["pattern"])))
              for name in groups]

  def labels(params):
    used = set()

    def label(path, _):
      name = _path_name(path)
      hits = [group for group, rx in patterns if rx.search(name)]
      if len(hits) > 1:
        raise ValueError(f"parameter {name!r} matches optim.groups {hits}; "
                         "make the patterns disjoint")
      used.update(hits)
      return hits[0] if hits else DEFAULT_GROUP
    out = jax.tree_util.tree_map_with_path(label, params)
    unused = [g for g, _ in patterns if g not in used]
    if unused:
      names = [_path_name(p) for p, _ in
               jax.tree_util.tree_flatten_with_path(params)[0]]
      raise ValueError(
          f"config.optim.groups {unused}: pattern matches no parameter; "
          f"parameter paths look like {names[:4]}")
    return out
  return labels


def make_optimizer(optim_cfg: Mapping[str, Any],
                   total_steps: int) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW (or one transform per param group)."""
  parts = []
  clip = float(field(optim_cfg, "clip_norm"))
  if clip > 0:
    parts.append(optax.clip_by_global_norm(clip))
  groups = field(optim_cfg, "groups")
  if not groups:
    parts.append(_adamw(optim_cfg, total_steps))
    return optax.chain(*parts)
  if DEFAULT_GROUP in groups:
    raise ValueError(f"config.optim.groups may not be named {DEFAULT_GROUP!r}"
                     ": it holds the parameters no group matches (set the "
                     "top-level optim fields for it)")
  transforms = {DEFAULT_GROUP: _adamw(optim_cfg, total_steps)}
  for name in groups:
    gcfg = group_config(optim_cfg, name)
    kind = gcfg["optimizer"]
    if kind == "adamw":
      transforms[name] = _adamw(gcfg, total_steps)
    elif kind == "sgd":
      transforms[name] = optax.sgd(make_schedule(gcfg, total_steps),
                                   momentum=gcfg.get("momentum") or None)
    else:
      transforms[name] = optax.set_to_zero()
  parts.append(_init_on_values(
      optax.multi_transform(transforms, param_labels(optim_cfg))))
  return optax.chain(*parts)


def _init_on_values(tx: optax.GradientTransformation
                    ) -> optax.GradientTransformation:
  """`tx` initialised on raw arrays rather than `nnx.Variable`s.

  `nnx.Optimizer` initialises on Variables; `multi_transform` masks each
  group's state with `optax.MaskedNode`, which nnx cannot hold inside a
  Variable. On raw arrays the masked entries are empty pytree nodes. (The
  group state then carries no logical-axis metadata, so it is replicated
  rather than sharded like its parameter.)
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  return optax.GradientTransformation(
      lambda params: tx.init(nnx.as_pure(params)), tx.update)
