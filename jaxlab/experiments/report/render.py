"""Rendering: cells, tables and their captions as markdown, every marked
block of the docs regenerated from docs/results/*.json, and one run's
tables from its workdir."""

from __future__ import annotations

import glob
import json
import math
import os
import shlex
from typing import Any, Iterable, Sequence

from jaxlab.experiments.report import _base
from jaxlab.experiments.report import paper_map
from jaxlab.experiments.report import stats
from jaxlab.io import paths

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


def fmt_cell(cell: dict[str, Any] | None,
             column: dict[str, Any],
             n_default: int | None = None) -> str:
  """mean ± sample std in display units; n noted when not `n_default`."""
  m, s, n = stats.mean_std(stats.values(cell))
  if n == 0:
    return "–"
  d, k = int(column.get("decimals", 3)), float(column.get("scale", 1.0))
  out = fmt_num(m * k, d)
  if column.get("spread", True) and n > 1:
    out += " ± " + fmt_num(s * k, d)
  if n_default is not None and n != n_default:
    out += f" (n = {n})"
  return out


def fmt_interval(st: stats.PairedStat,
                 decimals: int,
                 scale: float = 1.0) -> str:
  """The interval cell of a comparison: "[low, high]" or why there is none."""
  reason = stats.degenerate_reason(st)
  if reason is not None:
    return reason
  return (f"[{fmt_num(st.low * scale, decimals, sign=True)}, "
          f"{fmt_num(st.high * scale, decimals, sign=True)}]")


def _seed_list(seeds: Iterable[Any]) -> str:
  ss = sorted({s for s in seeds if s is not None})
  if not ss:
    return ""
  if ss == list(range(ss[0], ss[-1] + 1)) and len(ss) > 2:
    return f"{ss[0]}–{ss[-1]}"
  return ", ".join(str(s) for s in ss)


# -- tables ---------------------------------------------------------------------


def find_table(result: dict[str, Any],
               table_id: str,
               name: str = "") -> dict[str, Any]:
  for t in result.get("tables", []):
    if t["id"] == table_id:
      return t
  raise _base.ReportError(
      f"{name or 'result'} has no table {table_id!r}; tables: "
      f"{[t['id'] for t in result.get('tables', [])]}")


def parse_options(opts: str) -> dict[str, list[str]]:
  """`columns=a,b rows="A;B"` -> {"columns": [a, b], "rows": [A, B]}."""
  out = {}
  for tok in shlex.split(opts.strip()):
    key, sep, val = tok.partition("=")
    if not sep or key not in ("columns", "rows"):
      raise _base.ReportError(
          f"bad marker option {tok!r}; valid: columns=k1,k2 "
          "rows=\"A;B\"")
    out[key] = [
        v.strip()
        for v in val.split("," if key == "columns" else ";")
        if v.strip()
    ]
  return out


def render_table(result: dict[str, Any],
                 table_id: str,
                 *,
                 columns: Sequence[str] | None = None,
                 rows: Sequence[str] | None = None,
                 source: str = "",
                 name: str = "") -> str:
  """The generated markdown of one marker block (caption, table, diffs)."""
  table = find_table(result, table_id, name)
  cols = {c["key"]: c for c in table["columns"]}
  if columns:
    missing = [c for c in columns if c not in cols]
    if missing:
      raise _base.ReportError(f"{name}/{table_id} has no column(s) {missing}; "
                              f"columns: {list(cols)}")
    shown_cols = [cols[c] for c in columns]
  else:
    shown_cols = list(cols.values())
  by_label = {r["label"]: r for r in table["rows"]}
  if rows:
    missing = [r for r in rows if r not in by_label]
    if missing:
      raise _base.ReportError(
          f"{name}/{table_id} has no row(s) {missing}; rows: "
          f"{list(by_label)}")
    shown_rows = [by_label[r] for r in rows]
  else:
    shown_rows = list(table["rows"])
  ns, seeds = [], []
  for r in shown_rows:
    for c in shown_cols:
      cell = r["cells"].get(c["key"])
      if stats.values(cell):
        ns.append(len(stats.values(cell)))
        seeds += [
            s for s, v in zip(cell["seeds"], cell["values"]) if v is not None
        ]
  n_default = max(set(ns), key=ns.count) if ns else None
  seed_txt = _seed_list(seeds)
  if not ns:
    n_txt = "no values"
  elif len(set(ns)) == 1:
    n_txt = f"n = {n_default} seed{'s' if n_default != 1 else ''}"
  else:
    n_txt = (f"n = {n_default} seeds (other n marked in the cell)")
  spread = ("mean ± sample std (ddof 1) over "
            if n_default and n_default > 1 else "")
  caption = f"*{table['title']}: {spread}{n_txt}"
  if seed_txt:
    caption += (f" (seeds {seed_txt})" if
                ("," in seed_txt or "–" in seed_txt) else f" (seed {seed_txt})")
  caption += f"; generated from [{os.path.basename(source) or name}]" \
             f"({source}).*" if source else ".*"
  head = [table.get("row_label", "")] + [c["label"] for c in shown_cols]
  lines = [
      caption, "", "| " + " | ".join(_base.md_escape(h) for h in head) + " |",
      "|" + "---|" * len(head)
  ]
  for r in shown_rows:
    cells = [
        fmt_cell(r["cells"].get(c["key"]), c, n_default) for c in shown_cols
    ]
    lines.append("| " + " | ".join([_base.md_escape(r["label"])] + cells) +
                 " |")
  shown_keys = {c["key"] for c in shown_cols}
  shown_labels = {r["label"] for r in shown_rows}
  comps = [
      c for c in result.get("comparisons", [])
      if c["table"] == table_id and c["column"] in shown_keys and
      c["a"] in shown_labels and c["b"] in shown_labels
  ]
  if comps:
    lines += [
        "", "Paired differences (a − b over the seeds both rows have; "
        "mean and 95 % t-interval):", "",
        "| comparison | column | difference | 95 % interval | n |",
        "|---|---|---|---|---|"
    ]
    for c in comps:
      col = cols[c["column"]]
      d, k = int(col.get("decimals", 3)), float(col.get("scale", 1.0))
      st = stats.paired_interval(
          stats.paired_differences(by_label[c["a"]]["cells"].get(c["column"]),
                                   by_label[c["b"]]["cells"].get(c["column"])))
      interval = fmt_interval(st, d, k)
      lines.append(
          f"| {_base.md_escape(c.get('label') or c['a'] + ' − ' + c['b'])}"
          f" | {_base.md_escape(col['label'])} | "
          f"{fmt_num(st.mean * k, d, sign=True)} | {interval} | "
          f"{st.n} |")
  return "\n".join(lines) + "\n"


# -- documents ------------------------------------------------------------------


def load_results(repo: str = _base.REPO) -> dict[str, dict[str, Any]]:
  out = {}
  for path in sorted(glob.glob(os.path.join(repo, _base.RESULTS_DIR,
                                            "*.json"))):
    with open(path) as f:
      out[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
  return out


def doc_paths(repo: str = _base.REPO) -> list[str]:
  out = []
  for pattern in _base.DOCS:
    out += sorted(glob.glob(os.path.join(repo, pattern)))
  return out


def render_doc(text: str,
               results: dict[str, dict[str, Any]],
               *,
               doc_dir: str,
               repo: str = _base.REPO,
               where: str = "") -> str:
  """`text` with every marker block regenerated."""
  opens, closes = (len(_base.OPEN_MARKER.findall(text)),
                   len(_base.CLOSE_MARKER.findall(text)))
  blocks = _base.MARKER.findall(text)
  if not opens == closes == len(blocks):
    raise _base.ReportError(
        f"{where}: {opens} '<!-- report: ' markers, {closes} "
        f"'<!-- /report -->' markers, {len(blocks)} well-formed "
        "blocks; every marker needs its closing marker")

  def sub(m):
    name, table_id = m.group("name"), m.group("table")
    if (name, table_id) == paper_map.PAPER_MAP:
      return (f"<!-- report: {name}/{table_id}{m.group('opts')} -->\n"
              f"{paper_map.render_paper_map(repo, doc_dir)}<!-- /report -->")
    if name not in results:
      raise _base.ReportError(f"{where}: no docs/results/{name}.json (have: "
                              f"{sorted(results)})")
    opts = parse_options(m.group("opts"))
    source = os.path.relpath(
        os.path.join(repo, _base.RESULTS_DIR, f"{name}.json"),
        doc_dir).replace(os.sep, "/")
    body = render_table(results[name],
                        table_id,
                        source=source,
                        name=name,
                        **opts)
    return (f"<!-- report: {name}/{table_id}{m.group('opts')} -->\n"
            f"{body}<!-- /report -->")

  return _base.MARKER.sub(sub, text)


def update_docs(repo: str = _base.REPO, *, check: bool = False) -> list[str]:
  """Rewrites (or with `check`, only compares) every doc; returns stale ones."""
  results = load_results(repo)
  stale = []
  for path in doc_paths(repo):
    with open(path) as f:
      text = f.read()
    new = render_doc(text,
                     results,
                     doc_dir=os.path.dirname(path),
                     repo=repo,
                     where=os.path.relpath(path, repo))
    if new != text:
      stale.append(os.path.relpath(path, repo))
      if not check:
        with open(path, "w") as f:
          f.write(new)
  return stale


# -- one run's tables ---------------------------------------------------------


def read_run(workdir: str) -> dict[str, Any]:
  """WORKDIR/results.json (a local directory or a gs:// URL)."""
  path = paths.join(workdir, "results.json")
  if not paths.exists(path):
    raise FileNotFoundError(f"no results.json in {workdir} (the run has not "
                            "finished, or this is not a run's workdir)")
  res = json.loads(paths.read_text(path))
  if "tables" not in res or "schema" not in res:
    raise _base.ReportError(
        f"{path} is not in the jaxlab/experiments/results.py schema "
        "(no 'schema'/'tables')")
  return res


# Top-level keys of results.json that are provenance, not results.
_PROVENANCE = frozenset({
    "schema", "experiment", "command", "commands", "argv", "config", "git",
    "packages", "machine", "started", "finished", "wall_time_s", "tables",
    "comparisons", "extra", "runs", "workdir", "checkpoint_dir", "plot"
})


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
  blocks = [
      render_table(res, t["id"], source=source, name=t["id"])
      for t in res.get("tables", [])
  ]
  if not blocks:
    flat = [(k, v)
            for k, v in res.items()
            if k not in _PROVENANCE and isinstance(v, (int, float, str,
                                                       bool)) and v is not None]
    if flat:
      rows = [
          f"| {_base.md_escape(k)} | "
          f"{fmt_num(v, 4) if isinstance(v, float) else _base.md_escape(v)} |"
          for k, v in flat
      ]
      blocks.append("\n".join(["| field | value |", "|---|---|", *rows]) + "\n")
    else:
      blocks.append("(no tables and no values)\n")
  return "\n".join([head, *blocks])
