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

Long documents (`write_pg19_copy`): the same topics, in the same order,
cut into "books" of at least `min_chars` characters each, laid out as PG19
is released on the Hub (emozilla/pg19, tree main: `data/test-*.parquet`
with columns `short_book_title`, `publication_date`, `url`, `text`), for
the long-context perplexity that reads PG19 (`rope_extension`):

    python -m jaxlab.data.pydoc_text --layout=pg19 /tmp/pydoc_pg19

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


PG19_MIN_CHARS = 60_000


def books(min_chars: int = PG19_MIN_CHARS) -> list[dict[str, object]]:
  """PG19-schema rows: the topics in sorted order, each topic's text as
  `pydoc_data` has it, joined by blank lines into documents of at least
  `min_chars` characters (the remainder, shorter, is dropped). The title
  names the first and last topic; `publication_date` is 0 (a
  documentation set has no year of first publication)."""
  from pydoc_data import topics  # pylint: disable=g-import-not-at-top
  major_minor = ".".join(python_version().split(".")[:2])
  out, parts, names = [], [], []
  for name in sorted(topics.topics):
    parts.append(topics.topics[name].strip("\n"))
    names.append(name)
    text = "\n\n".join(parts)
    if len(text) >= min_chars:
      out.append({
          "short_book_title": (f"Python {python_version()} reference, "
                               f"topics {names[0]} to {names[-1]}"),
          "publication_date": 0,
          "url": f"https://docs.python.org/{major_minor}/reference/",
          "text": text})
      parts, names = [], []
  return out


def write_pg19_copy(dest: str, *, split: str = SPLIT,
                    min_chars: int = PG19_MIN_CHARS) -> str:
  """Writes `dest/data/{split}-00000-of-00001.parquet` in PG19's schema.

  `config.data.path=dest` (no subset), split `split`, column `text` read it
  through `jaxlab.data.pipeline.read_split`. Returns the file's path.
  """
  import datasets  # pylint: disable=g-import-not-at-top
  rows_ = books(min_chars)
  features = datasets.Features({
      "short_book_title": datasets.Value("string"),
      "publication_date": datasets.Value("int32"),
      "url": datasets.Value("string"), "text": datasets.Value("string")})
  folder = os.path.join(dest, "data")
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f"{split}-00000-of-00001.parquet")
  datasets.Dataset.from_list(rows_, features=features).to_parquet(path)
  return path


def main(argv: list[str] | None = None) -> int:
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog="python -m jaxlab.data.pydoc_text")
  p.add_argument("dest")
  p.add_argument("--layout", choices=("wikitext", "pg19"),
                 default="wikitext")
  p.add_argument("--min_chars", type=int, default=PG19_MIN_CHARS,
                 help="pg19: the shortest document, in characters")
  args = p.parse_args(sys.argv[1:] if argv is None else argv)
  if args.layout == "pg19":
    path = write_pg19_copy(args.dest, min_chars=args.min_chars)
    print(f"{path}: {len(books(args.min_chars))} documents of the Python "
          f"{python_version()} documentation")
    return 0
  path = write_local_copy(args.dest)
  print(f"{path}: {len(rows())} rows of the Python {python_version()} "
        "documentation")
  return 0


if __name__ == "__main__":
  sys.exit(main())
