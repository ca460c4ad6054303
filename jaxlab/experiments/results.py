r"""One results schema for every experiment: `WORKDIR/results.json`.

An experiment collects its numbers per seed into `Table`s and calls `write`
at the end of `run`. `python -m jaxlab.experiments.report` turns the committed copies
(`docs/results/NAME.json`) into the README / `docs/papers/` tables (mean ±
sample std, ddof 1, over seeds; paired differences with 95 % t-intervals for
the declared `Comparison`s), so no number in a doc is typed by hand.

Example (what `jaxlab/experiments/pmc.py` does)::

    from jaxlab.experiments import results

    table = results.Table(
        "unlearning", "Unlearning on the TOFU-like facts (values x 100)",
        row_label="method",
        columns=[results.Column("recall_forget", "forget recall ↓",
                                decimals=1, scale=100),
                 results.Column("utility", "utility", decimals=1, scale=100)])
    for seed in (0, 1, 2):
      ...
      table.add("PMC", "recall_forget", seed, 0.0)   # one value per seed
      table.add("PMC", "utility", seed, 0.71)
      table.add("GD", "recall_forget", seed, 0.036)
    results.write(
        workdir, "pmc", tables=[table],
        comparisons=[results.Comparison("unlearning", "utility", "PMC", "GD")],
        extra={"lottery": {...}},     # curves etc.: anything JSON-able
        config=config, start_time=t0)

Schema of the file (schema version 1)::

    {"schema": 1,
     "experiment": "pmc",
     "command": "python -m jaxlab.main --config=jaxlab/configs/pmc.py:table "
                "--workdir=workdirs/pmc_table",       # shell-quoted sys.argv
     "argv": [...],
     "config": {...},                      # config.to_dict(), when given
     "git": {"commit": "34f833a...", "dirty": false},
     "packages": {"python": "3.11.9", "jax": "...", "jaxlib": "...", ...},
     "machine": {"cpu": "AMD EPYC ...", "cpu_count": 2, "platform": "...",
                 "jax_backend": "cpu", "device_kind": "cpu",
                 "device_count": 8},
     "started": "2026-11-30T23:40:00+00:00", "wall_time_s": 812.4,
     "tables": [{"id": "unlearning", "title": "...", "row_label": "method",
                 "columns": [{"key": "recall_forget",
                              "label": "forget recall ↓", "decimals": 1,
                              "scale": 100.0, "spread": true}, ...],
                 "rows": [{"label": "PMC",
                           "cells": {"recall_forget": {"seeds": [0, 1, 2],
                                                       "values": [0.0, 0.0,
                                                                  0.0]},
                                     ...}}, ...]}],
     "comparisons": [{"table": "unlearning", "column": "utility",
                      "a": "PMC", "b": "GD", "label": "PMC − GD"}],
     "extra": {...},
     # What the run read (when config.data names a dataset) and started
     # from (when config.init_from is set):
     "data": {"source": "hf", "path": "/data/tofu", "subset": "forget10",
              "rows": {"forget10": 400, "retain90": 3600},
              "digest": "9f2c..."},
     "init_from": {"spec": "smollm2-135m-instruct", "path": ".../x.gguf",
                   "digest": "..."}}

An experiment whose outcome is a flat dict of final values rather than
per-seed tables (`train`, `generate`) passes it as `fields`: those keys sit at
the top level next to the provenance (`results.json["loss"]`), `tables` empty.

Values are stored raw (unscaled); `Column.scale` and `Column.decimals` are
only for display. A cell's `seeds[i]` is the seed that produced `values[i]`;
comparisons pair two rows' values by seed. A cell that is not a per-seed
quantity (a constant of the setup) is stored with seed `None` entries or
added once; `report` prints it without spread when it has one value.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import Any, Iterable, Sequence

import numpy as np

from jaxlab.io import paths

SCHEMA_VERSION = 1
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy",
            "scipy", "ml_collections", "grain", "transformers", "torch")
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class Column:
  """One column of a table.

  Attributes:
    key: the name cells are stored under.
    label: the header printed in the docs.
    decimals: digits after the point in the docs.
    scale: display multiplier (100 for percentages); values stay raw.
    spread: print `± std` (False: only the mean, e.g. for a setup constant).
  """
  key: str
  label: str
  decimals: int = 3
  scale: float = 1.0
  spread: bool = True


@dataclasses.dataclass
class Comparison:
  """A claimed comparison: row `a` minus row `b` on `column`, paired by seed.

  `report` prints the mean paired difference (in the column's display units)
  and its 95 % t-interval over the seeds both rows have.
  """
  table: str
  column: str
  a: str
  b: str
  label: str = ""

  def to_json(self) -> dict[str, str]:
    d = dataclasses.asdict(self)
    d["label"] = self.label or f"{self.a} − {self.b}"
    return d


class Table:
  """Rows x columns of per-seed values (see the module docstring)."""

  def __init__(self, table_id: str, title: str, columns: Sequence[Column], *,
               row_label: str = ""):
    self.id, self.title, self.row_label = table_id, title, row_label
    self.columns = list(columns)
    self._keys = {c.key for c in self.columns}
    if len(self._keys) != len(self.columns):
      raise ValueError(f"table {table_id!r}: duplicate column keys")
    self._rows: dict[str, dict[str, dict[str, list]]] = {}

  def add_row(self, label: str) -> None:
    """Declares a row (rows print in the order they are first added)."""
    self._rows.setdefault(label, {})

  def add(self, row: str, column: str, seed: int | None, value: Any) -> None:
    """Records `value` of cell (`row`, `column`) for `seed`."""
    if column not in self._keys:
      raise ValueError(f"table {self.id!r} has no column {column!r}; "
                       f"columns: {sorted(self._keys)}")
    cell = self._rows.setdefault(row, {}).setdefault(
        column, {"seeds": [], "values": []})
    if seed is not None and seed in cell["seeds"]:
      raise ValueError(f"table {self.id!r} cell ({row!r}, {column!r}) "
                       f"already has seed {seed}")
    cell["seeds"].append(None if seed is None else int(seed))
    cell["values"].append(_num(value))

  def add_seed(self, row: str, seed: int | None,
               values: dict[str, Any]) -> None:
    """Records one seed's values of several columns of `row`."""
    for k, v in values.items():
      self.add(row, k, seed, v)

  def to_json(self) -> dict[str, Any]:
    return {"id": self.id, "title": self.title, "row_label": self.row_label,
            "columns": [dataclasses.asdict(c) for c in self.columns],
            "rows": [{"label": r, "cells": cells}
                     for r, cells in self._rows.items()]}


def mean_std(vals: Sequence[float]) -> tuple[float, float, int]:
  """(mean, sample std with ddof 1 (0 for n < 2), n): the one spread rule."""
  n = len(vals)
  if n == 0:
    return float("nan"), float("nan"), 0
  a = np.asarray(vals, np.float64)
  return float(a.mean()), (float(a.std(ddof=1)) if n > 1 else 0.0), n


def _num(v: Any) -> float | None:
  if v is None:
    return None
  v = float(v)
  return None if math.isnan(v) else v


def _version(name: str) -> str | None:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
  """Python and the installed versions of `names` (absent ones left out)."""
  out = {"python": platform.python_version()}
  for n in names:
    v = _version(n)
    if v is not None:
      out[n] = v
  return out


def git_state(repo: str = _REPO) -> dict[str, Any]:
  """{"commit": HEAD sha or None, "dirty": tracked files modified?}."""
  def git(*args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True,
                          text=True, timeout=30, check=True).stdout.strip()
  try:
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
  except (OSError, subprocess.SubprocessError):
    return {"commit": None, "dirty": None}
  return {"commit": commit, "dirty": dirty}


def cpu_model() -> str:
  """The CPU model name from /proc/cpuinfo (platform.processor() elsewhere)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.lower().startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
  """CPU model and core count, OS, and JAX's backend, device kind, count."""
  info: dict[str, Any] = {"cpu": cpu_model(), "cpu_count": os.cpu_count(),
                          "platform": platform.platform()}
  try:
    sched = os.sched_getaffinity(0)
    info["cpu_affinity"] = len(sched)
  except (AttributeError, OSError):
    pass
  try:
    import jax  # pylint: disable=g-import-not-at-top
    devs = jax.devices()
    info.update(jax_backend=jax.default_backend(),
                device_kind=devs[0].device_kind, device_count=len(devs),
                process_count=jax.process_count())
  except Exception:  # pylint: disable=broad-except
    pass
  return info


def command_line(argv: Sequence[str] | None = None) -> str:
  """`argv` (default sys.argv) as a shell command a user can paste.

  `.../jaxlab/main.py ARGS` or `.../experiments/main.py ARGS` (what
  `python -m jaxlab.main` and its alias `python -m experiments.main` leave in
  sys.argv) becomes `python -m jaxlab.main ARGS`.
  """
  argv = list(sys.argv if argv is None else argv)
  if not argv:
    return ""
  head = argv[0].replace(os.sep, "/")
  if head.endswith(("jaxlab/main.py", "experiments/main.py")):
    return shlex.join(["python", "-m", "jaxlab.main",
                       *config_names(argv[1:])])
  if head.endswith(".py"):
    rel = os.path.relpath(os.path.abspath(argv[0]), _REPO)
    mod = rel[:-3].replace(os.sep, ".")
    if not rel.startswith(".."):
      return shlex.join(["python", "-m", mod, *argv[1:]])
  return shlex.join(["python", *argv])


def config_name(value: str) -> str:
  """A `--config` value as the packaged config's name when it is one.

  `--config` values are recorded by name so that a command replays on any
  checkout: `/abs/jaxlab/configs/pmc.py:tiny` (what the launcher resolves a
  name to) and the old layouts `configs/pmc.py` and `jaxlab/configs/pmc.py`
  become `pmc:tiny` and `pmc`. A config file of the user's (not packaged,
  or another file of the same name) stays a path.
  """
  from jaxlab import configs as configs_lib  # pylint: disable=g-import-not-at-top
  path, sep, arg = value.partition(":")
  if not path.endswith(".py"):
    return value
  name = os.path.basename(path)[:-3]
  if name not in configs_lib.packaged():
    return value
  if os.path.isfile(path):
    try:
      same = os.path.samefile(path, configs_lib.resolve(name))
    except OSError:
      same = False
    # The same config of another checkout of jaxlab (e.g. /work/main/...).
    same = same or path.replace(os.sep, "/").endswith(
        f"jaxlab/configs/{name}.py")
    return name + sep + arg if same else value
  # A path that no longer exists: the configs/ and jaxlab/configs/ layouts.
  parent = os.path.basename(os.path.dirname(path))
  return name + sep + arg if parent == "configs" else value


def config_names(args: Sequence[str]) -> list[str]:
  """`args` with every `--config` value passed through `config_name`."""
  out = list(args)
  for i, a in enumerate(out):
    if a.startswith("--config="):
      out[i] = "--config=" + config_name(a[len("--config="):])
    elif a == "--config" and i + 1 < len(out):
      out[i + 1] = config_name(out[i + 1])
  return out


def _config_dict(config: Any) -> Any:
  if config is None:
    return None
  d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  return to_jsonable(d)


def build(experiment: str, *, tables: Sequence[Table] = (),
          comparisons: Sequence[Comparison] = (), extra: Any = None,
          config: Any = None, start_time: float | None = None,
          argv: Sequence[str] | None = None,
          fields: dict[str, Any] | None = None) -> dict[str, Any]:
  """The results dict (what `write` saves); see the module docstring."""
  ids = [t.id for t in tables]
  if len(set(ids)) != len(ids):
    raise ValueError(f"duplicate table ids {ids}")
  by_id = {t.id: t for t in tables}
  for c in comparisons:
    t = by_id.get(c.table)
    if t is None:
      raise ValueError(f"comparison on unknown table {c.table!r}")
    if c.column not in t._keys:  # pylint: disable=protected-access
      raise ValueError(f"comparison on unknown column {c.column!r} of "
                       f"{c.table!r}")
  now = time.time()
  res = {
      "schema": SCHEMA_VERSION,
      "experiment": experiment,
      "command": command_line(argv),
      "argv": list(sys.argv if argv is None else argv),
      "config": _config_dict(config),
      "git": git_state(),
      "packages": package_versions(),
      "machine": machine_info(),
      "started": (datetime.datetime.fromtimestamp(
          start_time, datetime.timezone.utc).isoformat(timespec="seconds")
                  if start_time is not None else None),
      "finished": datetime.datetime.fromtimestamp(
          now, datetime.timezone.utc).isoformat(timespec="seconds"),
      "wall_time_s": (round(now - start_time, 1)
                      if start_time is not None else None),
      "tables": [t.to_json() for t in tables],
      "comparisons": [c.to_json() for c in comparisons],
      "extra": to_jsonable(extra) if extra is not None else {},
  }
  if fields:
    clash = sorted(set(fields) & set(res))
    if clash:
      raise ValueError(f"results fields {clash} collide with keys of the "
                       "results.json schema")
    res.update(to_jsonable(dict(fields)))
  return res


def write(workdir: str, experiment: str, *, tables: Sequence[Table] = (),
          comparisons: Sequence[Comparison] = (), extra: Any = None,
          config: Any = None, start_time: float | None = None,
          argv: Sequence[str] | None = None,
          fields: dict[str, Any] | None = None,
          data: dict[str, Any] | None = None) -> dict[str, Any]:
  """Writes `workdir/results.json` in the standard schema; returns the dict.

  Args:
    workdir: the run's directory.
    experiment: the experiment's name (`config.experiment`).
    tables: the per-seed tables the docs show.
    comparisons: the comparisons the docs claim (paired by seed).
    extra: experiment-specific data (curves, per-round stats, ...).
    config: the run's ConfigDict (saved so a rerun can be checked).
    start_time: `time.time()` at the start of the run (for the wall time).
    argv: the command line (default `sys.argv`).
    fields: flat final values kept at the top level of the file, next to
      the provenance (`train`'s and `generate`'s metrics: `res["loss"]`);
      a name the schema uses is an error.
    data: the data's provenance, `{"source", "path", "subset", "rows":
      {split: rows read}, "digest"}` (`pipeline.lm_data`); None: the
      config's `data.path` / `data.subset` without row counts when it names
      a dataset (`data_provenance`).
  """
  res = build(experiment, tables=tables, comparisons=comparisons,
              extra=extra, config=config, start_time=start_time, argv=argv,
              fields=fields)
  init_from = config.get("init_from", "") if hasattr(config, "get") else ""
  if init_from and "init_from" not in res:
    res["init_from"] = checkpoint_provenance(str(init_from))
  data = data if data is not None else data_provenance(config)
  if data is not None and "data" not in res:
    res["data"] = to_jsonable(data)
  # A local directory or a URL (gs://...): written whole through epath.
  paths.write_text(paths.join(workdir, "results.json"),
                   json.dumps(res, indent=1, allow_nan=False,
                              ensure_ascii=False) + "\n")
  return res


def data_provenance(config: Any, rows: dict[str, int] | None = None
                    ) -> dict[str, Any] | None:
  """`{"source", "path", "subset", "rows", "digest"}` of `config.data`.

  For experiments that read the dataset themselves: `rows` (split -> rows
  read) as they counted them; the digest is the files' (`hf_source.digest`,
  `grain_source.digest`) when the path is local. None when `config.data`
  names no dataset (generated data).
  """
  data = config.get("data") if hasattr(config, "get") else None
  if data is None or not hasattr(data, "get") or not data.get("path"):
    return None
  source, path = data.get("source", ""), data.get("path", "")
  subset = data.get("subset", "") or ""
  digest = None
  try:
    if source == "hf":
      from jaxlab.data import hf_source  # pylint: disable=g-import-not-at-top
      digest = hf_source.digest(path, subset, tuple(
          s for s in (data.get("split", ""), data.get("eval_split", "")) if s))
    elif source == "grain":
      from jaxlab.data import grain_source  # pylint: disable=g-import-not-at-top
      digest = grain_source.digest(path)
  except (OSError, ValueError):
    digest = None
  return {"source": source, "path": path, "subset": subset,
          "rows": dict(rows or {}), "digest": digest}


def checkpoint_provenance(spec: str) -> dict[str, Any]:
  """`{"path", "digest"}` of the checkpoint `config.init_from` names.

  `path` is the resolved file or directory (a shipped name's file, a Hub
  id's snapshot; a trainer workdir's latest `checkpoints/N`); `digest` the
  sha256 of every file's relative name, size and mtime under it (stable
  while the files are, changed by any rewrite). An unresolvable `spec`
  (a per-seed template, a missing path) keeps `spec` with digest None.
  """
  import hashlib  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  try:
    src = pretrained.path(spec)
    if not src.endswith(".gguf"):
      src = pretrained.trainer_checkpoint(src) or src
  except (OSError, ValueError):
    return {"spec": spec, "path": spec, "digest": None}
  src = os.path.abspath(src)
  files = [src] if os.path.isfile(src) else sorted(
      os.path.join(d, f) for d, dirs, fs in os.walk(src) for f in fs
      if not f.startswith("."))
  h = hashlib.sha256()
  for f in files:
    st = os.stat(f)
    h.update(f"{os.path.relpath(f, src)}\0{st.st_size}\0"
             f"{st.st_mtime_ns}\n".encode())
  return {"spec": spec, "path": src, "digest": h.hexdigest()}


def to_jsonable(o: Any) -> Any:
  """`o` with numpy/JAX arrays and scalars as lists/floats, NaN/inf as None."""
  if isinstance(o, dict):
    return {str(k): to_jsonable(v) for k, v in o.items()}
  if isinstance(o, (list, tuple)):
    return [to_jsonable(v) for v in o]
  if isinstance(o, (str, bool)) or o is None:
    return o
  if isinstance(o, int):
    return o
  if isinstance(o, float):
    return o if math.isfinite(o) else None
  if hasattr(o, "tolist"):  # numpy / JAX arrays and scalars
    return to_jsonable(o.tolist())
  return str(o)
