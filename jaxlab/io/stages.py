"""Cached experiment stages, reused only by a run that would compute the same.

An experiment that trains a model and then evaluates it saves both, so a
killed or extended run resumes instead of training again. A saved stage is
reused only when the config fields that determine it are the same: each
artefact has a digest of those fields beside it (`PATH.stage.json`), and a
run whose digest differs recomputes the stage and overwrites it (changing
`--config.optim.b2` retrains; changing a decode setting re-evaluates the
same trained model):

    train_key = stages.key(config, ("model", "task", "loss", "optim",
                                    "train"), exclude=("task.eval_docs",),
                           seed=seed)
    model, curve = stages.cached(
        os.path.join(seed_dir, "params.npz"), train_key,
        lambda: train(config, seed), kind="npz",
        init=lambda: build(config, seed))
    rec = stages.cached(
        os.path.join(seed_dir, "eval.json"),
        stages.key(config, ("decode",), train=stages.digest(train_key)),
        lambda: evaluate(model, config))

The artefacts keep their plain formats (a `jaxlab.io.params` .npz without
meta, a JSON file holding the value itself), so readers that do not know
about stages still read them. A file without its digest (e.g. written
before stages existed) is recomputed. After Ctrl-C or SIGTERM
(`jaxlab.parallel.preemption`) `cached` starts no new stage and saves no
stage that the signal cut short: it raises `preemption.Preempted`, which the
launcher turns into a clean exit. The digest is `jaxlab.io.params`'s
`config_key` over the same fields (plus `exclude` and the keywords).

A stage whose variants should coexist (a run with another pre-training
config keeps the first one's model for a later rerun) names its file with
the digest (`keyed_path`: `WORKDIR/pretrained_seed0_<digest>.npz`); one
model trained in place is `params_file`. This module is the one cache of
the library: every experiment's reusable stages go through `cached`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import hashlib
import json
import os
from typing import Any

from jaxlab.io import params as params_io
from jaxlab import progress
from jaxlab.parallel import preemption

SUFFIX = ".stage.json"
KINDS = ("json", "npz")


def _json(value: Any) -> str:
  return json.dumps(value, sort_keys=True, default=str)


def key(config: Any, fields: Sequence[str], *, exclude: Sequence[str] = (),
        **extra: Any) -> dict[str, Any]:
  """What a stage depends on: the top-level `fields` of `config` (sections
  as dicts, `params.config_key`), less the dotted paths of `exclude`
  (fields of a section that do not determine the stage, e.g.
  "task.eval_stories"), plus `extra` (seed, method, an upstream stage's
  digest, ...). A field `config` lacks is an error (a typo would key on
  nothing)."""
  if isinstance(fields, str):
    raise TypeError("stages.key: fields must be a sequence of names, not "
                    f"the string {fields!r}")
  missing = [f for f in fields if f not in config]
  if missing:
    raise ValueError(f"stages.key: config has no field(s) {missing}")
  out, _ = params_io.config_key(config, *fields)
  for path in exclude:
    *parents, leaf = path.split(".")
    node = out
    for p in parents:
      node = node.get(p) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
      raise ValueError(f"stages.key: exclude={path!r} is not a field of "
                       f"{list(fields)}")
    del node[leaf]
  for k, v in extra.items():
    if k in out:
      raise ValueError(f"stages.key: keyword {k!r} is also a config field")
    out[k] = v
  return json.loads(_json(out))


def digest(stage_key: Mapping[str, Any]) -> str:
  """8 hex digits of `stage_key` (the same as `params.config_key`'s)."""
  return hashlib.sha256(_json(stage_key).encode()).hexdigest()[:8]


def _sidecar(path: str) -> str:
  return path + SUFFIX


def _read_sidecar(path: str) -> dict[str, Any] | None:
  try:
    with open(_sidecar(path)) as f:
      out = json.load(f)
  except (OSError, ValueError):
    return None
  return out if isinstance(out, dict) else None


def stored_digest(path: str) -> str | None:
  """The digest saved beside `path`, or None (no file, or no digest)."""
  side = _read_sidecar(path)
  if side is None or not os.path.isfile(path):
    return None
  return side.get("digest")


def is_current(path: str, stage_key: Mapping[str, Any]) -> bool:
  """Whether `path` holds the stage computed for `stage_key`."""
  return stored_digest(path) == digest(stage_key)


def _write_json(path: str, value: Any, **kw) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(value, f, **kw)
  os.replace(tmp, path)


def _forget(paths) -> None:
  for p in paths:  # the old digest goes first: a kill mid-write recomputes
    if os.path.exists(_sidecar(p)):
      os.remove(_sidecar(p))


def _mark(paths, stage_key, info=None) -> None:
  for p in paths:
    _write_json(_sidecar(p), {"digest": digest(stage_key), "key": stage_key,
                              "info": info}, indent=1, default=str)


def _stop_if_cut_short(path: str) -> None:
  """Raises `preemption.Preempted` without saving when a signal arrived
  during the stage: its loops may have stopped early (the trainer saves its
  checkpoint and returns), so the result is not the stage's. A re-run
  resumes the stage (from the trainer's checkpoint, when it has one)."""
  if preemption.requested():
    raise preemption.Preempted(
        f"{preemption.reason()}: stopped during the stage {path}; not saved")


def _label(path: str) -> str:
  """A stage's progress label: its artefact's last two path parts."""
  return "/".join(os.path.normpath(path).split(os.sep)[-2:])


def cached(path: str, stage_key: Mapping[str, Any],
           compute: Callable[[], Any], *, kind: str = "json",
           init: Callable[[], Any] | None = None) -> Any:
  """`compute()`'s result, saved at `path`; reloaded while `stage_key` holds.

  Args:
    path: the artefact (e.g. `seed0/eval.json`, `seed0/params.npz`; for a
      dict of models, a pattern with `{name}`: `seed0/{name}.npz`).
    stage_key: what the stage depends on (`key(...)`); its digest is saved
      in `PATH.stage.json` with the artefact.
    compute: kind "json": returns a JSON value. Kind "npz": returns
      `(model, info)`, `model` an `nnx.Module` or a dict name -> Module
      (trained), `info` a JSON value kept beside it (a learning curve).
    kind: "json" or "npz".
    init: kind "npz": returns the untrained model(s) (same structure) that
      a saved stage is loaded into.

  Returns:
    The value (JSON), or `(model, info)` (npz), computed or reloaded.

  Raises:
    preemption.Preempted: Ctrl-C / SIGTERM arrived (`parallel.preemption`)
      before the stage, or during it (then nothing is saved for it).
  """
  if kind not in KINDS:
    raise ValueError(f"stages.cached: kind={kind!r}; valid: "
                     f"{', '.join(KINDS)}")
  if kind == "json":
    if is_current(path, stage_key):
      with open(path) as f:
        return json.load(f)
    _forget([path])
    preemption.check()  # Ctrl-C / SIGTERM: stop at this stage boundary
    progress.stage(_label(path))
    value = compute()
    _stop_if_cut_short(path)
    _write_json(path, value, indent=1, default=float)
    _mark([path], stage_key)
    with open(path) as f:  # as a rerun gets it (tuples as lists, ...)
      return json.load(f)
  if init is None:
    raise ValueError("stages.cached(kind='npz') needs init: the untrained "
                     "model(s) to load a saved stage into")
  multi = "{name}" in path
  skeleton = init() if multi else None
  files = ({n: path.format(name=n) for n in skeleton} if multi
           else {None: path})
  if all(is_current(p, stage_key) for p in files.values()):
    if skeleton is None:
      skeleton = init()
    for n, p in files.items():
      params_io.load(skeleton if n is None else skeleton[n], p)
    return skeleton, _read_sidecar(next(iter(files.values())))["info"]
  _forget(files.values())
  preemption.check()
  progress.stage(_label(path))
  model, info = compute()
  _stop_if_cut_short(path)
  if multi and set(model) != set(files):
    raise ValueError(f"stages.cached: compute() gave models {sorted(model)}, "
                     f"init() {sorted(files)}")
  for n, p in files.items():
    params_io.save(model if n is None else model[n], p)
  _mark(files.values(), stage_key, info)
  return model, info


def keyed_path(parent: str, name: str, stage_key: Mapping[str, Any],
               ext: str) -> str:
  """`parent/NAME_<digest>.EXT`: a stage file named by its key's digest, so
  the stages of runs with different keys sit side by side (each reloaded by
  a run with its key) instead of overwriting one another."""
  return os.path.join(parent, f"{name}_{digest(stage_key)}.{ext}")


def params_file(model: Any, path: str | None, stage_key: Mapping[str, Any],
                train: Callable[[], Any]) -> Any:
  """`cached(kind="npz")` for one model trained in place.

  When `path` holds weights saved under `stage_key`, loads them into
  `model` and returns the JSON value saved beside them; else `train()`
  updates `model` in place and returns that value (a learning curve), and
  both are saved. `path` None: only trains (nothing cached).
  """
  if not path:
    return train()
  _, info = cached(path, stage_key, lambda: (model, train()), kind="npz",
                   init=lambda: model)
  return info


def run_seeds(seeds: Sequence[int], fn: Callable[[int], Any], *,
              workdir: str, config: Any = None,
              exclude: Sequence[str] = ("seeds",), name: str = "seed",
              write: Callable[[list[int], list[Any]], None] | None = None
              ) -> list[Any]:
  """The per-seed runner every experiment shares: `fn(seed)` per seed.

  Each seed's JSON result is a "json" stage (`cached`) at
  `WORKDIR/seeds/<name>_<seed>.json`, keyed by the seed and, with
  `config`, every top-level field of `config` but `exclude` (the seed list,
  and fields that only label the output): a rerun reloads the seeds that
  finished under the same config and computes the rest; a changed config
  recomputes. After every seed, `write(seeds done, their results)` runs
  (the experiment rewrites its results.json there), so a killed run keeps
  its finished seeds and a rerun resumes at the next one; Ctrl-C / SIGTERM
  stops at a seed boundary (`preemption.Preempted`). Returns the results
  in seed order, as JSON reads them back (tuples as lists).
  """
  if config is not None:
    fields = [f for f in config.keys() if f not in set(exclude)]
    base = key(config, fields)
  else:
    base = {}
  done, out = [], []
  for i, seed in enumerate(seeds):
    seed = int(seed)
    progress.say(f"{name} {seed} ({i + 1}/{len(seeds)})")
    out.append(cached(os.path.join(workdir, "seeds", f"{name}_{seed}.json"),
                      {"config": base, "seed": seed},
                      lambda seed=seed: fn(seed)))
    done.append(seed)
    if write is not None:
      write(list(done), list(out))
  return out


def directory(parent: str, name: str, stage_key: Mapping[str, Any]) -> str:
  """`parent/NAME_<digest>/`, created, with the key in its `stage.json`.

  For a stage whose state is a directory (the trainer's checkpoints and
  metrics.jsonl): a run with the same key resumes there, one with another
  key starts in another directory.
  """
  out = os.path.join(parent, f"{name}_{digest(stage_key)}")
  os.makedirs(out, exist_ok=True)
  _write_json(os.path.join(out, "stage.json"),
              {"digest": digest(stage_key), "key": stage_key}, indent=1,
              default=str)
  return out


class Plan:
  """The two stages most experiments cache: a trained model, then its eval.

  `train_fields` (less `train_exclude`) determine the trained model, with
  the seed and any keyword given to `train_key`; `eval_fields` plus the
  trained model's digest determine the evaluation. One declaration serves
  both keys, so an experiment cannot key its eval on a stale train key:

      PLAN = stages.Plan(("model", "task", "optim", "train"),
                         ("methods", "task"), train_exclude=("task.samples",))
      model, curve = stages.cached(path, PLAN.train_key(config, seed), ...)
      rec = stages.cached(eval_path, PLAN.eval_key(config, seed), ...)
  """

  def __init__(self, train_fields: Sequence[str], eval_fields: Sequence[str],
               *, train_exclude: Sequence[str] = (),
               eval_exclude: Sequence[str] = ()):
    self.train_fields = tuple(train_fields)
    self.eval_fields = tuple(eval_fields)
    self.train_exclude = tuple(train_exclude)
    self.eval_exclude = tuple(eval_exclude)

  def train_key(self, config: Any, seed: int, **extra: Any) -> dict[str, Any]:
    """What the trained model depends on (`extra`: e.g. the method)."""
    return key(config, self.train_fields, exclude=self.train_exclude,
               seed=int(seed), **extra)

  def eval_key(self, config: Any, seed: int, *, train_extra=None,
               **extra: Any) -> dict[str, Any]:
    """What the evaluation depends on: `eval_fields`, `extra` and the digest
    of `train_key(config, seed, **train_extra)`."""
    return key(config, self.eval_fields, exclude=self.eval_exclude,
               train=digest(self.train_key(config, seed,
                                           **(train_extra or {}))), **extra)
