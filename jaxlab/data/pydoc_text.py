r"""English prose every CPython ships, as a local copy in WikiText's layout.

Perplexity needs human-written text; on a machine that downloads nothing,
WikiText-2 (`Salesforce/wikitext`) cannot be read. CPython's own
documentation is on every machine: `pydoc_data.topics.topics` holds the
Language Reference sections `help()` shows (about 460k characters of
prose, grammar and small code examples, written by the Python
documentation authors). `write_local_copy` lays it out as WikiText-2 is
released on the Hub (Salesforce/wikitext, tree main/wikitext-2-raw-v1:
`wikitext-2-raw-v1/test-00000-of-00001.parquet`, one string column
`text`), so the paper path that reads WikiText-2 reads it unchanged:

    python -m jaxlab.data.pydoc_text /tmp/pydoc_wikitext
    python -m jaxlab.main --config=lestd:smollm2 \
        --config.data.path=/tmp/pydoc_wikitext --workdir=/tmp/lestd_sm

Rows follow WikiText's conventions: a section title is a heading row
" = Title = \n", each paragraph is one row ending in "\n" (a prose
paragraph's hard-wrapped lines joined by spaces; an indented block, grammar
or code, keeps its line breaks). Topics are in sorted order, so the copy is
the same for a given Python version (`python_version()` names it).
"""

from __future__ import annotations

import os
import platform
import re
import sys

SUBSET = "pydoc-topics"
SPLIT = "test"


def python_version() -> str:
  """The CPython version whose documentation the rows come from."""
  return platform.python_version()


def _paragraphs(text: str) -> list[str]:
  out = []
  for block in re.split(r"\n\s*\n", text):
    lines = [ln.rstrip() for ln in block.split("\n") if ln.strip()]
    if not lines:
      continue
    # "Title\n*****" / "Title\n=====": a WikiText heading row
    if len(lines) == 2 and re.fullmatch(r"[*=\-~^]+", lines[1].strip()):
      out.append(f" = {lines[0].strip()} = \n")
      continue
    if any(ln.startswith((" ", "\t")) for ln in lines):
      out.append("\n".join(lines) + "\n")  # grammar / code: keep the lines
    else:
      out.append(" ".join(ln.strip() for ln in lines) + "\n")
  return out


def rows() -> list[str]:
  """The `text` rows: every topic's paragraphs, topics in sorted order."""
  from pydoc_data import topics  # pylint: disable=g-import-not-at-top
  out = []
  for name in sorted(topics.topics):
    out += _paragraphs(topics.topics[name])
  return out


def write_local_copy(dest: str, *, subset: str = SUBSET,
                     split: str = SPLIT) -> str:
  """Writes `dest/subset/{split}-00000-of-00001.parquet` (column `text`).

  WikiText-2's released file layout, so `config.data.path=dest`,
  `config.data.subset=subset`, split `split` read it through
  `jaxlab.data.pipeline.read_split`. Returns the parquet file's path.
  """
  import datasets  # pylint: disable=g-import-not-at-top
  folder = os.path.join(dest, subset)
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f"{split}-00000-of-00001.parquet")
  datasets.Dataset.from_dict({"text": rows()}).to_parquet(path)
  return path


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if len(argv) != 1:
    print("usage: python -m jaxlab.data.pydoc_text DEST", file=sys.stderr)
    return 2
  path = write_local_copy(argv[0])
  print(f"{path}: {len(rows())} rows of the Python {python_version()} "
        "documentation")
  return 0


if __name__ == "__main__":
  sys.exit(main())
