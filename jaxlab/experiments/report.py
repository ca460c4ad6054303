r"""Docs tables from committed results: `python -m jaxlab.experiments.report`.

Every results table in README.md and docs/papers/*.md sits between markers

    <!-- report: NAME/TABLE_ID [columns=k1,k2,...] [rows="A;B;..."] -->
    ...generated; do not edit...
    <!-- /report -->

where NAME is `docs/results/NAME.json` (a run's `results.json`, schema of
`jaxlab/experiments/results.py`) and TABLE_ID one of its tables; `columns=` picks
columns by key and `rows=` (`;`-separated) picks rows by label, each in the
order given. The block holds a caption (what the numbers are, n, the seeds,
the source file), the table with every cell as mean ± sample standard
deviation (ddof 1) over seeds, and, for each comparison declared on the
shown rows and columns, the paired difference (a − b, same seeds) with its
95 % t-interval (scipy.stats.t, n − 1 degrees of freedom). A degenerate
comparison shows its difference and, in place of the interval, why it has
none: "n = 2: no interval" (fewer than 3 common seeds) or "identical in
every seed" (the differences do not vary, so the interval has zero width).

    python -m jaxlab.experiments.report                 # rewrite every marked table
    python -m jaxlab.experiments.report --check         # exit 1 if a doc is stale
    python -m jaxlab.experiments.report --add NAME WORKDIR [WORKDIR ...]
    python -m jaxlab.experiments.report --verify NAME [--threshold 3]
    python -m jaxlab.experiments.report --workdir=DIR     # one run's tables

`--add` copies WORKDIR/results.json to docs/results/NAME.json; several
workdirs (e.g. one run per seed) are merged: cells concatenate their seeds,
`commands` lists every run's command; a preempted run (`"preempted": true`)
is refused. `--workdir` prints one run's tables (a local directory or a
gs:// URL) the way the docs render them, without writing anything.
`--verify` reruns the committed command(s) into a temporary workdir (same
config: the command carries the config name, preset and overrides; the
old `--config=configs/X.py` form is replayed as `--config=X`) and prints every cell's shift from the
committed value in standard errors,

    shift = (mean_new − mean_old) / sqrt(s_old² / n_old + s_new² / n_new),

with s the sample std (0 for n < 2) and the denominator floored at half the
cell's displayed resolution (0.5 · 10^-decimals / scale), so cells with no
spread (constants, or values identical over seeds) count as moved only when
the change shows in the printed table. It exits 1 when any |shift| > 3 or a
committed cell is missing from the rerun.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Iterable, Sequence

import numpy as np
from scipy import stats

from jaxlab.experiments import results as results_lib
from jaxlab.io import paths

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS_DIR = os.path.join("docs", "results")
DOCS = ("README.md", os.path.join("docs", "*.md"),
        os.path.join("docs", "papers", "*.md"))

MARKER = re.compile(
    r"<!-- report: (?P<name>[\w.-]+)/(?P<table>[\w.-]+)(?P<opts>[^\n]*?)"
    r"\s*-->\n(?P<body>.*?)<!-- /report -->", re.S)
OPEN_MARKER = re.compile(r"<!-- report: ")
CLOSE_MARKER = re.compile(r"<!-- /report -->")


class ReportError(ValueError):
  """A marker that names a missing result, table, column or row."""


# -- statistics -----------------------------------------------------------------


def values(cell: dict[str, Any] | None) -> list[float]:
  """The finite values of a cell (None = missing / NaN, left out)."""
  if not cell:
    return []
  return [float(v) for v in cell["values"] if v is not None]


mean_std = results_lib.mean_std


def paired_differences(cell_a: dict[str, Any] | None,
                       cell_b: dict[str, Any] | None) -> list[float]:
  """a − b over the seeds both cells have (finite values), in seed order."""
  if not cell_a or not cell_b:
    return []
  b = {s: v for s, v in zip(cell_b["seeds"], cell_b["values"])
       if s is not None and v is not None}
  return [float(v) - b[s] for s, v in zip(cell_a["seeds"], cell_a["values"])
          if s is not None and v is not None and s in b]


# Fewest paired seeds whose t-interval the tables show: at n = 2 the
# interval rests on one degree of freedom (t_{0.975, 1} = 12.7) and one
# spread estimate, which says little.
MIN_INTERVAL_SEEDS = 3
# Differences whose range is below this (relative to max(1, max |d|)) count
# as identical: float rounding of a − b, not a spread between seeds.
IDENTICAL_RTOL = 1e-9


@dataclasses.dataclass
class PairedStat:
  """Paired differences d = a − b over n seeds.

  Attributes:
    mean: mean of d.
    std: sample std of d (ddof 1; 0 for n < 2).
    n: seeds both cells have.
    low, high: the t-interval (NaN for n < 2).
    identical: n >= 1 and every d equal (up to `IDENTICAL_RTOL`).
  """
  mean: float
  std: float
  n: int
  low: float
  high: float
  identical: bool = False


def paired_interval(diffs: Sequence[float],
                    level: float = 0.95) -> PairedStat:
  """Mean paired difference and its two-sided t-interval (n − 1 dof).

      mean(d) ± t_{(1 + level) / 2, n − 1} · s_d / sqrt(n)

  The interval is computed for every n >= 2; whether the tables show it is
  `degenerate_reason`'s call.
  """
  m, s, n = mean_std(diffs)
  identical = n >= 1 and (max(diffs) - min(diffs) <= IDENTICAL_RTOL * max(
      1.0, max(abs(d) for d in diffs)))
  if n < 2:
    return PairedStat(m, s, n, float("nan"), float("nan"), identical)
  half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * s / math.sqrt(n)
  return PairedStat(m, s, n, m - half, m + half, identical)


def degenerate_reason(st: PairedStat) -> str | None:
  """Why a paired comparison has no informative interval, or None.

  n < `MIN_INTERVAL_SEEDS`, or differences identical in every seed (s_d = 0:
  the t-interval has zero width, which says only that the differences were
  the same, not that the mean difference is known exactly).
  """
  if st.n == 0:
    return "no seed in both rows"
  if st.n < MIN_INTERVAL_SEEDS:
    return f"n = {st.n}: no interval"
  if st.identical:
    return "identical in every seed"
  return None


# -- formatting -----------------------------------------------------------------


def fmt_num(x: float, decimals: int, *, sign: bool = False) -> str:
  """`x` with `decimals` digits; no "-0.0"; `sign` adds "+" to positives."""
  if x is None or not math.isfinite(x):
    return "n/a"
  s = f"{x:.{decimals}f}"
  if float(s) == 0:
    s = s.lstrip("-")
  elif sign and not s.startswith("-"):
    s = "+" + s
  return s


def fmt_cell(cell: dict[str, Any] | None, column: dict[str, Any],
             n_default: int | None = None) -> str:
  """mean ± sample std in display units; n noted when not `n_default`."""
  m, s, n = mean_std(values(cell))
  if n == 0:
    return "–"
  d, k = int(column.get("decimals", 3)), float(column.get("scale", 1.0))
  out = fmt_num(m * k, d)
  if column.get("spread", True) and n > 1:
    out += " ± " + fmt_num(s * k, d)
  if n_default is not None and n != n_default:
    out += f" (n = {n})"
  return out


def fmt_interval(st: PairedStat, decimals: int, scale: float = 1.0) -> str:
  """The interval cell of a comparison: "[low, high]" or why there is none."""
  reason = degenerate_reason(st)
  if reason is not None:
    return reason
  return (f"[{fmt_num(st.low * scale, decimals, sign=True)}, "
          f"{fmt_num(st.high * scale, decimals, sign=True)}]")


def _md_escape(text: str) -> str:
  return str(text).replace("|", "\\|")


def _seed_list(seeds: Iterable[Any]) -> str:
  ss = sorted({s for s in seeds if s is not None})
  if not ss:
    return ""
  if ss == list(range(ss[0], ss[-1] + 1)) and len(ss) > 2:
    return f"{ss[0]}–{ss[-1]}"
  return ", ".join(str(s) for s in ss)


# -- tables ---------------------------------------------------------------------


def find_table(result: dict[str, Any], table_id: str,
               name: str = "") -> dict[str, Any]:
  for t in result.get("tables", []):
    if t["id"] == table_id:
      return t
  raise ReportError(f"{name or 'result'} has no table {table_id!r}; tables: "
                    f"{[t['id'] for t in result.get('tables', [])]}")


def parse_options(opts: str) -> dict[str, list[str]]:
  """`columns=a,b rows="A;B"` -> {"columns": [a, b], "rows": [A, B]}."""
  out = {}
  for tok in shlex.split(opts.strip()):
    key, sep, val = tok.partition("=")
    if not sep or key not in ("columns", "rows"):
      raise ReportError(f"bad marker option {tok!r}; valid: columns=k1,k2 "
                        "rows=\"A;B\"")
    out[key] = [v.strip() for v in val.split("," if key == "columns"
                                               else ";") if v.strip()]
  return out


def render_table(result: dict[str, Any], table_id: str, *,
                 columns: Sequence[str] | None = None,
                 rows: Sequence[str] | None = None, source: str = "",
                 name: str = "") -> str:
  """The generated markdown of one marker block (caption, table, diffs)."""
  table = find_table(result, table_id, name)
  cols = {c["key"]: c for c in table["columns"]}
  if columns:
    missing = [c for c in columns if c not in cols]
    if missing:
      raise ReportError(f"{name}/{table_id} has no column(s) {missing}; "
                        f"columns: {list(cols)}")
    shown_cols = [cols[c] for c in columns]
  else:
    shown_cols = list(cols.values())
  by_label = {r["label"]: r for r in table["rows"]}
  if rows:
    missing = [r for r in rows if r not in by_label]
    if missing:
      raise ReportError(f"{name}/{table_id} has no row(s) {missing}; rows: "
                        f"{list(by_label)}")
    shown_rows = [by_label[r] for r in rows]
  else:
    shown_rows = list(table["rows"])
  ns, seeds = [], []
  for r in shown_rows:
    for c in shown_cols:
      cell = r["cells"].get(c["key"])
      if values(cell):
        ns.append(len(values(cell)))
        seeds += [s for s, v in zip(cell["seeds"], cell["values"])
                  if v is not None]
  n_default = max(set(ns), key=ns.count) if ns else None
  seed_txt = _seed_list(seeds)
  if not ns:
    n_txt = "no values"
  elif len(set(ns)) == 1:
    n_txt = f"n = {n_default} seed{'s' if n_default != 1 else ''}"
  else:
    n_txt = (f"n = {n_default} seeds (other n marked in the cell)")
  spread = ("mean ± sample std (ddof 1) over " if n_default and
            n_default > 1 else "")
  caption = f"*{table['title']}: {spread}{n_txt}"
  if seed_txt:
    caption += (f" (seeds {seed_txt})" if ("," in seed_txt or "–" in seed_txt)
                else f" (seed {seed_txt})")
  caption += f"; generated from [{os.path.basename(source) or name}]" \
             f"({source}).*" if source else ".*"
  head = [table.get("row_label", "")] + [c["label"] for c in shown_cols]
  lines = [caption, "",
           "| " + " | ".join(_md_escape(h) for h in head) + " |",
           "|" + "---|" * len(head)]
  for r in shown_rows:
    cells = [fmt_cell(r["cells"].get(c["key"]), c, n_default)
             for c in shown_cols]
    lines.append("| " + " | ".join([_md_escape(r["label"])] + cells) + " |")
  shown_keys = {c["key"] for c in shown_cols}
  shown_labels = {r["label"] for r in shown_rows}
  comps = [c for c in result.get("comparisons", [])
           if c["table"] == table_id and c["column"] in shown_keys
           and c["a"] in shown_labels and c["b"] in shown_labels]
  if comps:
    lines += ["", "Paired differences (a − b over the seeds both rows have; "
              "mean and 95 % t-interval):", "",
              "| comparison | column | difference | 95 % interval | n |",
              "|---|---|---|---|---|"]
    for c in comps:
      col = cols[c["column"]]
      d, k = int(col.get("decimals", 3)), float(col.get("scale", 1.0))
      st = paired_interval(paired_differences(
          by_label[c["a"]]["cells"].get(c["column"]),
          by_label[c["b"]]["cells"].get(c["column"])))
      interval = fmt_interval(st, d, k)
      lines.append(f"| {_md_escape(c.get('label') or c['a'] + ' − ' + c['b'])}"
                   f" | {_md_escape(col['label'])} | "
                   f"{fmt_num(st.mean * k, d, sign=True)} | {interval} | "
                   f"{st.n} |")
  return "\n".join(lines) + "\n"


# -- documents ------------------------------------------------------------------


def load_results(repo: str = REPO) -> dict[str, dict[str, Any]]:
  out = {}
  for path in sorted(glob.glob(os.path.join(repo, RESULTS_DIR, "*.json"))):
    with open(path) as f:
      out[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
  return out


def doc_paths(repo: str = REPO) -> list[str]:
  out = []
  for pattern in DOCS:
    out += sorted(glob.glob(os.path.join(repo, pattern)))
  return out


# -- the paper map (README) from each paper doc's front matter ---------------

PAPER_MAP = ("papers", "map")  # the marker `<!-- report: papers/map -->`
STATUSES = ("claim holds", "holds partly", "not shown at this scale",
            "does not hold")
PAPER_FIELDS = ("id", "title", "code", "config", "colab", "status", "verdict")


def parse_front_matter(text: str, where: str = "") -> list[dict[str, str]]:
  """The papers a doc covers, from its front matter.

  A doc starts with

      ---
      papers:
      - id: L
        title: DPad, diffusion-LM decoding with suffix dropout
        code: jaxlab/decoding/diffusion.py, jaxlab/objectives/llada.py
        config: dpad
        colab: colabs/dpad.ipynb
        status: holds partly
        verdict: one line, no wider than the doc's paired intervals
      ---

  (one `- id:` entry per paper; every field of `PAPER_FIELDS` once;
  `status` one of `STATUSES`). A doc without front matter covers no paper.
  """
  lines = text.splitlines()
  if not lines or lines[0].strip() != "---":
    return []
  try:
    end = lines.index("---", 1)
  except ValueError:
    raise ReportError(f"{where}: front matter opened by '---' is never "
                      "closed") from None
  body = lines[1:end]
  if not body or body[0].strip() != "papers:":
    raise ReportError(f"{where}: front matter must start with 'papers:'")
  papers: list[dict[str, str]] = []
  for n, line in enumerate(body[1:], start=3):
    if not line.strip():
      continue
    m = re.fullmatch(r"(- |  )(\w+): (.+)", line)
    if not m:
      raise ReportError(f"{where}:{n}: expected '- id: X' or '  key: value',"
                        f" got {line!r}")
    if m.group(1) == "- ":
      if m.group(2) != "id":
        raise ReportError(f"{where}:{n}: a paper entry starts with '- id:'")
      papers.append({})
    elif not papers:
      raise ReportError(f"{where}:{n}: field before the first '- id:'")
    key, value = m.group(2), m.group(3).strip()
    if key not in PAPER_FIELDS:
      raise ReportError(f"{where}:{n}: unknown field {key!r}; fields: "
                        f"{', '.join(PAPER_FIELDS)}")
    if key in papers[-1]:
      raise ReportError(f"{where}:{n}: field {key!r} given twice")
    papers[-1][key] = value
  for p in papers:
    missing = [f for f in PAPER_FIELDS if f not in p]
    if missing:
      raise ReportError(f"{where}: paper {p.get('id')}: missing "
                        f"{', '.join(missing)}")
    if p["status"] not in STATUSES:
      raise ReportError(f"{where}: paper {p['id']}: status {p['status']!r} "
                        f"is not one of: {'; '.join(STATUSES)}")
  return papers


def paper_docs(repo: str = REPO) -> list[tuple[str, dict[str, str]]]:
  """(doc path, paper) for every paper of docs/papers/*.md, sorted by id;
  an id claimed by two docs is an error. The `docs/papers/` folders of the
  plugin directories (`JAXLAB_PLUGIN_PATH`, `jaxlab.registry`) count too:
  a new paper's doc is found, never listed."""
  from jaxlab import registry  # pylint: disable=g-import-not-at-top
  out, seen = [], {}
  paths = sorted(glob.glob(os.path.join(repo, "docs", "papers", "*.md")))
  for d in registry.plugin_subdirs("docs", "papers"):
    paths += sorted(glob.glob(os.path.join(d, "*.md")))
  for path in paths:
    with open(path) as f:
      where = os.path.relpath(path, repo)
      for paper in parse_front_matter(f.read(), where):
        if paper["id"] in seen:
          raise ReportError(f"paper {paper['id']} is in both {seen[paper['id']]}"
                            f" and {where}")
        seen[paper["id"]] = where
        out.append((path, paper))
  return sorted(out, key=lambda x: x[1]["id"])


def render_paper_map(repo: str = REPO, doc_dir: str = REPO) -> str:
  """The README's paper map: one row per paper's front matter."""
  rows = ["| paper | status | verdict | code | config | colab | doc |",
          "|---|---|---|---|---|---|---|"]

  def rel(path: str) -> str:
    return os.path.relpath(os.path.join(repo, path), doc_dir).replace(
        os.sep, "/")

  for path, p in paper_docs(repo):
    code = ", ".join(f"`{c.strip()}`" for c in p["code"].split(","))
    colab = p["colab"]
    doc = os.path.relpath(path, doc_dir).replace(os.sep, "/")
    rows.append(
        f"| {p['id']}. {_md_escape(p['title'])} | {p['status']} | "
        f"{_md_escape(p['verdict'])} | {code} | `{p['config']}` | "
        f"[{os.path.basename(colab)}]({rel(colab)}) | "
        f"[{os.path.basename(doc)}]({doc}) |")
  n = len(rows) - 2
  return (f"*{n} papers, generated from the front matter of docs/papers/*.md "
          "(status: " + " / ".join(STATUSES) + ").*\n\n"
          + "\n".join(rows) + "\n")


def render_doc(text: str, results: dict[str, dict[str, Any]], *,
               doc_dir: str, repo: str = REPO, where: str = "") -> str:
  """`text` with every marker block regenerated."""
  opens, closes = (len(OPEN_MARKER.findall(text)),
                   len(CLOSE_MARKER.findall(text)))
  blocks = MARKER.findall(text)
  if not opens == closes == len(blocks):
    raise ReportError(f"{where}: {opens} '<!-- report: ' markers, {closes} "
                      f"'<!-- /report -->' markers, {len(blocks)} well-formed "
                      "blocks; every marker needs its closing marker")

  def sub(m):
    name, table_id = m.group("name"), m.group("table")
    if (name, table_id) == PAPER_MAP:
      return (f"<!-- report: {name}/{table_id}{m.group('opts')} -->\n"
              f"{render_paper_map(repo, doc_dir)}<!-- /report -->")
    if name not in results:
      raise ReportError(f"{where}: no docs/results/{name}.json (have: "
                        f"{sorted(results)})")
    opts = parse_options(m.group("opts"))
    source = os.path.relpath(os.path.join(repo, RESULTS_DIR, f"{name}.json"),
                             doc_dir).replace(os.sep, "/")
    body = render_table(results[name], table_id, source=source, name=name,
                        **opts)
    return (f"<!-- report: {name}/{table_id}{m.group('opts')} -->\n"
            f"{body}<!-- /report -->")

  return MARKER.sub(sub, text)


def update_docs(repo: str = REPO, *, check: bool = False) -> list[str]:
  """Rewrites (or with `check`, only compares) every doc; returns stale ones."""
  results = load_results(repo)
  stale = []
  for path in doc_paths(repo):
    with open(path) as f:
      text = f.read()
    new = render_doc(text, results, doc_dir=os.path.dirname(path), repo=repo,
                     where=os.path.relpath(path, repo))
    if new != text:
      stale.append(os.path.relpath(path, repo))
      if not check:
        with open(path, "w") as f:
          f.write(new)
  return stale


# -- adding and merging runs ----------------------------------------------------


def merge(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """One result from several runs of one experiment (e.g. one per seed)."""
  if len(runs) == 1:
    return runs[0]
  out = {k: v for k, v in runs[0].items()
         if k not in ("tables", "comparisons", "extra")}
  out["commands"] = [r["command"] for r in runs]
  out["runs"] = [{k: r.get(k) for k in ("command", "git", "machine",
                                        "started", "wall_time_s")}
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
            raise ReportError(f"table {t['id']!r} row {row['label']!r} "
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


def read_run(workdir: str) -> dict[str, Any]:
  """WORKDIR/results.json (a local directory or a gs:// URL)."""
  path = paths.join(workdir, "results.json")
  if not paths.exists(path):
    raise FileNotFoundError(f"no results.json in {workdir} (the run has not "
                            "finished, or this is not a run's workdir)")
  res = json.loads(paths.read_text(path))
  if "tables" not in res or "schema" not in res:
    raise ReportError(f"{path} is not in the jaxlab/experiments/results.py schema "
                      "(no 'schema'/'tables')")
  return res


# Top-level keys of results.json that are provenance, not results.
_PROVENANCE = frozenset({
    "schema", "experiment", "command", "commands", "argv", "config", "git",
    "packages", "machine", "started", "finished", "wall_time_s", "tables",
    "comparisons", "extra", "runs", "workdir", "checkpoint_dir", "plot"})


def render_workdir(workdir: str) -> str:
  """Every table of WORKDIR/results.json as the docs show it (markdown).

  A run without tables (`train`, `generate`: final values at the top level)
  shows them as a two-column table. Nothing is written.
  """
  res = read_run(workdir)
  source = paths.join(workdir, "results.json")
  head = f"# {res.get('experiment', '?')}: {source}\n"
  if res.get("preempted"):
    head += ("\n**Preempted** (stopped by a signal before the end; re-run its "
             "command to resume): the numbers are partial.\n")
  blocks = [render_table(res, t["id"], source=source, name=t["id"])
            for t in res.get("tables", [])]
  if not blocks:
    flat = [(k, v) for k, v in res.items() if k not in _PROVENANCE
            and isinstance(v, (int, float, str, bool)) and v is not None]
    if flat:
      rows = [f"| {_md_escape(k)} | "
              f"{fmt_num(v, 4) if isinstance(v, float) else _md_escape(v)} |"
              for k, v in flat]
      blocks.append("\n".join(["| field | value |", "|---|---|", *rows])
                    + "\n")
    else:
      blocks.append("(no tables and no values)\n")
  return "\n".join([head, *blocks])


def add(name: str, workdirs: Sequence[str], repo: str = REPO) -> str:
  runs = [read_run(w) for w in workdirs]
  cut = [w for w, r in zip(workdirs, runs) if r.get("preempted")]
  if cut:
    raise ReportError(f"{', '.join(cut)}: the run was preempted (results.json "
                      "says \"preempted\": true); re-run its command to finish "
                      "it before adding its numbers")
  res = merge(runs)
  os.makedirs(os.path.join(repo, RESULTS_DIR), exist_ok=True)
  path = os.path.join(repo, RESULTS_DIR, f"{name}.json")
  with open(path, "w") as f:
    json.dump(res, f, indent=1, ensure_ascii=False)
    f.write("\n")
  return path


# -- verifying ------------------------------------------------------------------


@dataclasses.dataclass
class Shift:
  table: str
  row: str
  column: str
  old: str
  new: str
  shift: float  # in standard errors; inf: missing in the rerun


def cell_shift(old: dict[str, Any] | None, new: dict[str, Any] | None,
               column: dict[str, Any]) -> float:
  """(mean_new − mean_old) / sqrt(s_old²/n_old + s_new²/n_new), floored.

  The denominator is at least half the displayed resolution,
  0.5 · 10^-decimals / scale. A cell the rerun lacks shifts by inf; one that
  is empty in both, by 0.
  """
  mo, so, no = mean_std(values(old))
  mn, sn, nn = mean_std(values(new))
  if no == 0 and nn == 0:
    return 0.0
  if no == 0 or nn == 0:
    return math.inf
  se = math.sqrt(so ** 2 / no + sn ** 2 / nn)
  floor = 0.5 * 10.0 ** (-int(column.get("decimals", 3))) / float(
      column.get("scale", 1.0))
  return (mn - mo) / max(se, floor)


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Shift]:
  """Every committed cell's shift in the rerun (see `cell_shift`)."""
  out = []
  for t in old.get("tables", []):
    try:
      nt = find_table(new, t["id"])
    except ReportError:
      nt = {"rows": []}
    new_rows = {r["label"]: r for r in nt["rows"]}
    for r in t["rows"]:
      nr = new_rows.get(r["label"], {"cells": {}})
      for c in t["columns"]:
        oc, ncell = r["cells"].get(c["key"]), nr["cells"].get(c["key"])
        if not values(oc) and not values(ncell):
          continue
        out.append(Shift(t["id"], r["label"], c["key"], fmt_cell(oc, c),
                         fmt_cell(ncell, c), cell_shift(oc, ncell, c)))
  return out


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
  if (len(argv) > 2 and os.path.basename(argv[0]).startswith("python")
      and argv[1] == "-m" and argv[2] in _LAUNCHERS):
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


def verify(name: str, *, repo: str = REPO, threshold: float = 3.0,
           out=sys.stdout) -> int:
  """Reruns docs/results/NAME.json's command(s); prints shifts; 0/1."""
  path = os.path.join(repo, RESULTS_DIR, f"{name}.json")
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
      runs.append(read_run(wd))
  return print_shifts(compare(old, merge(runs)), threshold=threshold,
                      out=out)


def print_shifts(shifts: Sequence[Shift], *, threshold: float = 3.0,
                 out=sys.stdout) -> int:
  """Prints one line per cell; 1 when any |shift| > threshold."""
  bad = 0
  for s in shifts:
    flag = "MOVED" if abs(s.shift) > threshold else "ok"
    bad += flag == "MOVED"
    print(f"{flag:5} {s.shift:+7.2f} SE  {s.table} / {s.row} / {s.column}: "
          f"{s.old} -> {s.new}", file=out)
  print(f"{bad} of {len(shifts)} cells moved by more than {threshold:g} "
        "standard errors", file=out)
  return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m jaxlab.experiments.report",
                              description=__doc__.split("\n\n")[0])
  g = p.add_mutually_exclusive_group()
  g.add_argument("--check", action="store_true",
                 help="exit 1 if a committed table differs from the "
                 "generated one")
  g.add_argument("--add", nargs="+", metavar=("NAME", "WORKDIR"),
                 help="copy WORKDIR/results.json (several: merged) to "
                 "docs/results/NAME.json")
  g.add_argument("--verify", metavar="NAME",
                 help="rerun NAME's command and print each cell's shift")
  g.add_argument("--workdir", metavar="DIR",
                 help="print DIR/results.json's tables (markdown, as the "
                 "docs show them); writes nothing")
  p.add_argument("--threshold", type=float, default=3.0)
  p.add_argument("--repo", default=REPO, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  try:
    if args.workdir:
      print(render_workdir(args.workdir), end="")
      return 0
    if args.add:
      if len(args.add) < 2:
        p.error("--add NAME WORKDIR [WORKDIR ...]")
      print(add(args.add[0], args.add[1:], repo=args.repo))
      return 0
    if args.verify:
      return verify(args.verify, repo=args.repo, threshold=args.threshold)
    stale = update_docs(args.repo, check=args.check)
  except (ReportError, FileNotFoundError) as e:
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


if __name__ == "__main__":
  sys.exit(main())
