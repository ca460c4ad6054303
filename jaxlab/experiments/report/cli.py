"""The command line: rewrite or check the docs, `--add` runs (merged),
`--verify` a committed result by rerunning its command, `--workdir`."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Sequence

from jaxlab.experiments import results as results_lib
from jaxlab.experiments.report import _base
from jaxlab.experiments.report import render
from jaxlab.experiments.report import stats

# -- adding and merging runs ----------------------------------------------------


def merge(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """One result from several runs of one experiment (e.g. one per seed)."""
  if len(runs) == 1:
    return runs[0]
  out = {
      k: v
      for k, v in runs[0].items()
      if k not in ("tables", "comparisons", "extra")
  }
  out["commands"] = [r["command"] for r in runs]
  out["runs"] = [{
      k: r.get(k)
      for k in ("command", "git", "machine", "started", "wall_time_s")
  }
                 for r in runs]
  out["wall_time_s"] = sum(r.get("wall_time_s") or 0 for r in runs)
  tables: dict[str, dict[str, Any]] = {}
  for r in runs:
    for t in r.get("tables", []):
      dst = tables.setdefault(t["id"], {**t, "rows": []})
      known = {c["key"] for c in dst["columns"]}
      dst["columns"] += [c for c in t["columns"] if c["key"] not in known]
      rows = {row["label"]: row for row in dst["rows"]}
      for row in t["rows"]:
        drow = rows.get(row["label"])
        if drow is None:
          drow = {"label": row["label"], "cells": {}}
          dst["rows"].append(drow)
          rows[row["label"]] = drow
        for key, cell in row["cells"].items():
          dcell = drow["cells"].setdefault(key, {"seeds": [], "values": []})
          dup = set(dcell["seeds"]) & set(cell["seeds"]) - {None}
          if dup:
            raise _base.ReportError(f"table {t['id']!r} row {row['label']!r} "
                                    f"column {key!r}: seed(s) {sorted(dup)} in "
                                    "more than one run")
          dcell["seeds"] += cell["seeds"]
          dcell["values"] += cell["values"]
  out["tables"] = list(tables.values())
  comps, seen = [], set()
  for r in runs:
    for c in r.get("comparisons", []):
      key = json.dumps(c, sort_keys=True)
      if key not in seen:
        seen.add(key)
        comps.append(c)
  out["comparisons"] = comps
  out["extra"] = {"per_run": [r.get("extra") for r in runs]}
  return out


def add(name: str, workdirs: Sequence[str], repo: str = _base.REPO) -> str:
  runs = [render.read_run(w) for w in workdirs]
  cut = [w for w, r in zip(workdirs, runs) if r.get("preempted")]
  if cut:
    raise _base.ReportError(
        f"{', '.join(cut)}: the run was preempted (results.json "
        "says \"preempted\": true); re-run its command to finish "
        "it before adding its numbers")
  res = merge(runs)
  os.makedirs(os.path.join(repo, _base.RESULTS_DIR), exist_ok=True)
  path = os.path.join(repo, _base.RESULTS_DIR, f"{name}.json")
  with open(path, "w") as f:
    json.dump(res, f, indent=1, ensure_ascii=False)
    f.write("\n")
  return path


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[stats.Shift]:
  """Every committed cell's shift in the rerun (see `stats.cell_shift`)."""
  out = []
  for t in old.get("tables", []):
    try:
      nt = render.find_table(new, t["id"])
    except _base.ReportError:
      nt = {"rows": []}
    new_rows = {r["label"]: r for r in nt["rows"]}
    for r in t["rows"]:
      nr = new_rows.get(r["label"], {"cells": {}})
      for c in t["columns"]:
        oc, ncell = r["cells"].get(c["key"]), nr["cells"].get(c["key"])
        if not stats.values(oc) and not stats.values(ncell):
          continue
        out.append(
            stats.Shift(t["id"], r["label"], c["key"], render.fmt_cell(oc, c),
                        render.fmt_cell(ncell, c),
                        stats.cell_shift(oc, ncell, c)))
  return out


_DESCRIPTION = ("Docs tables from committed results: python -m "
                "jaxlab.experiments.report")
_LAUNCHERS = ("jaxlab.main", "experiments.main")


def rerun_command(command: str, workdir: str) -> list[str]:
  """`command` as argv with its --workdir replaced (python = this one).

  A launcher command (`python -m jaxlab.main`, or its old alias
  `experiments.main`) runs as `python -m jaxlab.main` with its `--config`
  given by name (`results.config_name`): commands recorded before the
  configs moved into the package (`--config=configs/X.py`) or with another
  checkout's absolute path replay on this one.
  """
  argv = shlex.split(command)
  if (len(argv) > 2 and os.path.basename(argv[0]).startswith("python") and
      argv[1] == "-m" and argv[2] in _LAUNCHERS):
    argv = argv[:2] + ["jaxlab.main"] + results_lib.config_names(argv[3:])
  out, i, seen = [], 0, False
  while i < len(argv):
    a = argv[i]
    if a.startswith("--workdir="):
      out.append(f"--workdir={workdir}")
      seen = True
    elif a == "--workdir" and i + 1 < len(argv):
      out.append(f"--workdir={workdir}")
      seen, i = True, i + 1
    else:
      out.append(a)
    i += 1
  if not seen:
    out.append(f"--workdir={workdir}")
  if out and os.path.basename(out[0]).startswith("python"):
    out[0] = sys.executable
  return out


def verify(name: str,
           *,
           repo: str = _base.REPO,
           threshold: float = 3.0,
           out=sys.stdout) -> int:
  """Reruns docs/results/NAME.json's command(s); prints shifts; 0/1."""
  path = os.path.join(repo, _base.RESULTS_DIR, f"{name}.json")
  with open(path) as f:
    old = json.load(f)
  commands = old.get("commands") or [old["command"]]
  runs = []
  with tempfile.TemporaryDirectory(prefix=f"verify_{name}_") as tmp:
    for i, cmd in enumerate(commands):
      wd = os.path.join(tmp, f"run{i}")
      argv = rerun_command(cmd, wd)
      print(f"$ {shlex.join(argv)}", file=out, flush=True)
      proc = subprocess.run(argv, cwd=repo, check=False)
      if proc.returncode != 0:
        print(f"rerun failed (exit {proc.returncode})", file=out)
        return 1
      runs.append(render.read_run(wd))
  return print_shifts(compare(old, merge(runs)), threshold=threshold, out=out)


def print_shifts(shifts: Sequence[stats.Shift],
                 *,
                 threshold: float = 3.0,
                 out=sys.stdout) -> int:
  """Prints one line per cell; 1 when any |shift| > threshold."""
  bad = 0
  for s in shifts:
    flag = "MOVED" if abs(s.shift) > threshold else "ok"
    bad += flag == "MOVED"
    print(
        f"{flag:5} {s.shift:+7.2f} SE  {s.table} / {s.row} / {s.column}: "
        f"{s.old} -> {s.new}",
        file=out)
  print(
      f"{bad} of {len(shifts)} cells moved by more than {threshold:g} "
      "standard errors",
      file=out)
  return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m jaxlab.experiments.report",
                              description=_DESCRIPTION)
  g = p.add_mutually_exclusive_group()
  g.add_argument("--check",
                 action="store_true",
                 help="exit 1 if a committed table differs from the "
                 "generated one")
  g.add_argument("--add",
                 nargs="+",
                 metavar=("NAME", "WORKDIR"),
                 help="copy WORKDIR/results.json (several: merged) to "
                 "docs/results/NAME.json")
  g.add_argument("--verify",
                 metavar="NAME",
                 help="rerun NAME's command and print each cell's shift")
  g.add_argument("--workdir",
                 metavar="DIR",
                 help="print DIR/results.json's tables (markdown, as the "
                 "docs show them); writes nothing")
  p.add_argument("--threshold", type=float, default=3.0)
  p.add_argument("--repo", default=_base.REPO, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  try:
    if args.workdir:
      print(render.render_workdir(args.workdir), end="")
      return 0
    if args.add:
      if len(args.add) < 2:
        p.error("--add NAME WORKDIR [WORKDIR ...]")
      print(add(args.add[0], args.add[1:], repo=args.repo))
      return 0
    if args.verify:
      return verify(args.verify, repo=args.repo, threshold=args.threshold)
    stale = render.update_docs(args.repo, check=args.check)
  except (_base.ReportError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.check:
    for s in stale:
      print(f"stale: {s} (run python -m jaxlab.experiments.report)",
            file=sys.stderr)
    return 1 if stale else 0
  for s in stale:
    print(f"rewrote {s}")
  return 0
