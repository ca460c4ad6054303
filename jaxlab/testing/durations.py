r"""Per-module test times from a pytest JUnit XML, kept per CPU kind.

    python -m jaxlab.testing.durations .pytest_cache/junit.xml \
        --kind="AMD EPYC" [--note="fresh clone, .ci/run at abc1234"]

`make test` writes `.pytest_cache/junit.xml` (pytest's `--junitxml`): one
`<testcase>` per test with its time (setup + call + teardown, so a class's
`setUpClass` counts in its first test). This sums those times per test
module, merges them under `--kind` into `docs/testing_durations.json` (one
column per machine kind the suite was timed on; a later run of the same kind
replaces it) and rewrites the table in `docs/testing.md` between
`<!-- durations -->` and `<!-- /durations -->`: each module's seconds on
every kind, slowest first, and each kind's total. The times are worker
seconds: with `-n 2` the suite's wall time is about half their total.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
from xml.etree import ElementTree

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DATA = os.path.join(_ROOT, "docs", "testing_durations.json")
DOC = os.path.join(_ROOT, "docs", "testing.md")
_BEGIN, _END = "<!-- durations -->", "<!-- /durations -->"


def module_seconds(junit_xml: str) -> tuple[dict[str, float], int]:
  """({test module path: summed seconds}, number of testcases)."""
  root = ElementTree.parse(junit_xml).getroot()
  per = collections.Counter()
  n = 0
  for case in root.iter("testcase"):
    # classname is "tests.pkg.module.Class" (or "tests.pkg.module" for a
    # module-level test function).
    parts = case.get("classname", "").split(".")
    if parts and parts[-1][:1].isupper():
      parts = parts[:-1]
    per["/".join(parts) + ".py"] += float(case.get("time") or 0.0)
    n += 1
  return dict(per), n


def merge(data: dict, kind: str, seconds: dict[str, float], n: int,
          note: str = "") -> dict:
  """`data` with `kind`'s column replaced by this run."""
  out = dict(data)
  out[kind] = {"note": note, "tests": n,
               "modules": {k: round(v, 1) for k, v in sorted(seconds.items())}}
  return out


def render(data: dict) -> str:
  """The markdown table: modules slowest first (by the largest column)."""
  kinds = sorted(data)
  if not kinds:
    return "(no timed run recorded)"
  mods = sorted({m for k in kinds for m in data[k]["modules"]},
                key=lambda m: (-max(data[k]["modules"].get(m, 0.0)
                                    for k in kinds), m))
  lines = ["| test module | " + " | ".join(f"{k} (s)" for k in kinds) + " |",
           "|---|" + "---:|" * len(kinds)]
  totals = []
  for k in kinds:
    total = sum(data[k]["modules"].values())
    totals.append(f"**{total:.0f}** ({data[k]['tests']} tests)")
  lines.append("| **all, worker seconds** | " + " | ".join(totals) + " |")
  for m in mods:
    cells = []
    for k in kinds:
      v = data[k]["modules"].get(m)
      cells.append("" if v is None else f"{v:.1f}")
    lines.append(f"| `{m}` | " + " | ".join(cells) + " |")
  notes = [f"- {k}: {data[k]['note']}" for k in kinds if data[k].get("note")]
  return "\n".join(notes + [""] + lines if notes else lines)


def write_doc(data: dict, doc: str = DOC) -> None:
  with open(doc) as f:
    text = f.read()
  pattern = re.compile(re.escape(_BEGIN) + ".*?" + re.escape(_END), re.S)
  if not pattern.search(text):
    raise ValueError(f"{doc} has no {_BEGIN} ... {_END} block to fill")
  block = f"{_BEGIN}\n{render(data)}\n{_END}"
  with open(doc, "w") as f:
    f.write(pattern.sub(lambda _: block, text))


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("junit_xml")
  p.add_argument("--kind", required=True,
                 help="the machine kind, e.g. 'AMD EPYC' or 'Intel Xeon'")
  p.add_argument("--note", default="", help="how the run was made")
  p.add_argument("--data", default=DATA)
  p.add_argument("--doc", default=DOC)
  args = p.parse_args(argv)
  seconds, n = module_seconds(args.junit_xml)
  if not n:
    raise SystemExit(f"{args.junit_xml} holds no testcase")
  data = {}
  if os.path.exists(args.data):
    with open(args.data) as f:
      data = json.load(f)
  data = merge(data, args.kind, seconds, n, args.note)
  with open(args.data, "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
    f.write("\n")
  write_doc(data, args.doc)
  print(f"{n} tests, {sum(seconds.values()):.0f} worker seconds, "
        f"{len(seconds)} modules -> {args.data}, {args.doc}")


if __name__ == "__main__":
  main()
