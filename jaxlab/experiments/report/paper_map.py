"""The README's paper map, generated from each paper doc's front matter
(`docs/papers/*.md`)."""

from __future__ import annotations

import glob
import os
import re

from jaxlab.experiments.report import _base

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
    raise _base.ReportError(f"{where}: front matter opened by '---' is never "
                            "closed") from None
  body = lines[1:end]
  if not body or body[0].strip() != "papers:":
    raise _base.ReportError(f"{where}: front matter must start with 'papers:'")
  papers: list[dict[str, str]] = []
  for n, line in enumerate(body[1:], start=3):
    if not line.strip():
      continue
    m = re.fullmatch(r"(- |  )(\w+): (.+)", line)
    if not m:
      raise _base.ReportError(
          f"{where}:{n}: expected '- id: X' or '  key: value',"
          f" got {line!r}")
    if m.group(1) == "- ":
      if m.group(2) != "id":
        raise _base.ReportError(
            f"{where}:{n}: a paper entry starts with '- id:'")
      papers.append({})
    elif not papers:
      raise _base.ReportError(f"{where}:{n}: field before the first '- id:'")
    key, value = m.group(2), m.group(3).strip()
    if key not in PAPER_FIELDS:
      raise _base.ReportError(f"{where}:{n}: unknown field {key!r}; fields: "
                              f"{', '.join(PAPER_FIELDS)}")
    if key in papers[-1]:
      raise _base.ReportError(f"{where}:{n}: field {key!r} given twice")
    papers[-1][key] = value
  for p in papers:
    missing = [f for f in PAPER_FIELDS if f not in p]
    if missing:
      raise _base.ReportError(f"{where}: paper {p.get('id')}: missing "
                              f"{', '.join(missing)}")
    if p["status"] not in STATUSES:
      raise _base.ReportError(
          f"{where}: paper {p['id']}: status {p['status']!r} "
          f"is not one of: {'; '.join(STATUSES)}")
  return papers


def paper_docs(repo: str = _base.REPO) -> list[tuple[str, dict[str, str]]]:
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
          raise _base.ReportError(
              f"paper {paper['id']} is in both {seen[paper['id']]}"
              f" and {where}")
        seen[paper["id"]] = where
        out.append((path, paper))
  return sorted(out, key=lambda x: x[1]["id"])


def render_paper_map(repo: str = _base.REPO, doc_dir: str = _base.REPO) -> str:
  """The README's paper map: one row per paper's front matter."""
  rows = [
      "| paper | status | verdict | code | config | colab | doc |",
      "|---|---|---|---|---|---|---|"
  ]

  def rel(path: str) -> str:
    return os.path.relpath(os.path.join(repo, path),
                           doc_dir).replace(os.sep, "/")

  for path, p in paper_docs(repo):
    code = ", ".join(f"`{c.strip()}`" for c in p["code"].split(","))
    colab = p["colab"]
    doc = os.path.relpath(path, doc_dir).replace(os.sep, "/")
    rows.append(f"| {p['id']}. {_base.md_escape(p['title'])} | {p['status']} | "
                f"{_base.md_escape(p['verdict'])} | {code} | `{p['config']}` | "
                f"[{os.path.basename(colab)}]({rel(colab)}) | "
                f"[{os.path.basename(doc)}]({doc}) |")
  n = len(rows) - 2
  return (f"*{n} papers, generated from the front matter of docs/papers/*.md "
          "(status: " + " / ".join(STATUSES) + ").*\n\n" + "\n".join(rows) +
          "\n")
