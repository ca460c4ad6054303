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

A text retrieval task (`write_mbeir_copy`): each prose paragraph of the
topics cut after its first sentence, the sentence the query and the rest of
the paragraph its one positive candidate ("which passage continues this
sentence?"), laid out as M-BEIR is released (`jaxlab.data.mbeir`: query
files per split, a local candidate pool, the UniIR instruction table), so
the reranking paper's M-BEIR path reads it unchanged. Hard negatives
(`neg_cand_list`) are continuations of other paragraphs of the same topic;
topics, not paragraphs, are split between train and test, so no test
query's topic was seen in training:

    python -m jaxlab.data.pydoc_text --layout=mbeir /tmp/pydoc_mbeir

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


# The M-BEIR copy (`write_mbeir_copy`). M-BEIR numbers its datasets 0-9
# (qid / did "<dataset_id>:<n>") and its tasks 0-8 (task 0: text query ->
# text candidate); this dataset takes the next free id.
MBEIR_DATASET = "pydoc"
MBEIR_DATASET_ID = 10
MBEIR_TASK = 0
# One prompt row of the UniIR instruction table (query_modality,
# cand_modality, dataset_name, dataset_id, prompt_1..4).
MBEIR_PROMPTS = (
    "Retrieve the passage of the Python reference that continues this "
    "sentence.",
    "Find the text that follows this sentence in the Python documentation.")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*\"'(])")


def continuation_pairs(*, min_query_words: int = 6,
                       min_rest_words: int = 12, max_query_words: int = 0,
                       max_rest_words: int = 0) -> list[dict[str, str]]:
  """(topic, query, positive) per prose paragraph of the topics (sorted
  order): the paragraph's first sentence and the sentences after it.
  Headings, grammar and code blocks, one-sentence paragraphs and pairs
  shorter than the `min_*` words are skipped; `max_*` (0 = no cap) keep
  the first words of a longer side."""
  from pydoc_data import topics  # pylint: disable=g-import-not-at-top

  def cap(words, n):
    return " ".join(words[:n] if n else words)

  out = []
  for name in sorted(topics.topics):
    for par in _paragraphs(topics.topics[name]):
      if par.startswith(" = ") or "\n" in par.rstrip("\n"):
        continue  # a heading, or grammar / code kept line by line
      sents = _SENTENCE_END.split(par.strip())
      if len(sents) < 2:
        continue
      q, rest = sents[0].split(), " ".join(sents[1:]).split()
      if len(q) < min_query_words or len(rest) < min_rest_words:
        continue
      out.append({"topic": name, "query": cap(q, max_query_words),
                  "positive": cap(rest, max_rest_words)})
  return out


def write_mbeir_copy(dest: str, *, test_every: int = 4,
                     hard_negatives: int = 2, max_query_words: int = 24,
                     max_rest_words: int = 40, seed: int = 0
                     ) -> dict[str, int]:
  """Writes `continuation_pairs` in M-BEIR's released layout under `dest`.

  `query/{train,test}/mbeir_pydoc_task0_{split}.jsonl` (`qid`,
  `query_txt`, `query_img_path` null, `query_modality` "text",
  `pos_cand_list` [its continuation], `neg_cand_list` (up to
  `hard_negatives` continuations of other paragraphs of its topic, drawn
  with `seed`), `task_id` 0), `cand_pool/local/mbeir_pydoc_task0_cand_pool
  .jsonl` (`did`, `txt`, `img_path` null, `modality` "text"; one candidate
  per pair) and `instructions/query_instructions.tsv` (one row,
  `MBEIR_PROMPTS`). Every `test_every`-th topic (sorted order) is a test
  topic. Returns the query rows written per split.
  """
  import json  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  if test_every < 2:
    raise ValueError(f"test_every={test_every}: every topic would be a "
                     "test topic; pass 2 or more")
  pairs = continuation_pairs(max_query_words=max_query_words,
                             max_rest_words=max_rest_words)
  names = sorted({p["topic"] for p in pairs})
  test_topics = set(names[test_every - 1::test_every])
  ds = MBEIR_DATASET_ID
  by_topic: dict[str, list[int]] = {}
  for i, p in enumerate(pairs):
    by_topic.setdefault(p["topic"], []).append(i)
  rng = np.random.default_rng(seed)
  task = f"mbeir_{MBEIR_DATASET}_task{MBEIR_TASK}"
  rows = {"train": [], "test": []}
  for i, p in enumerate(pairs):
    others = [j for j in by_topic[p["topic"]] if j != i]
    k = min(hard_negatives, len(others))
    neg = sorted(rng.choice(others, k, replace=False).tolist()) if k else []
    split = "test" if p["topic"] in test_topics else "train"
    rows[split].append({
        "qid": f"{ds}:{i + 1}", "query_txt": p["query"],
        "query_img_path": None, "query_modality": "text",
        "pos_cand_list": [f"{ds}:{i + 1}"],
        "neg_cand_list": [f"{ds}:{j + 1}" for j in neg],
        "task_id": MBEIR_TASK})

  def dump(path, items):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      for r in items:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")

  for split, items in rows.items():
    dump(os.path.join(dest, "query", split, f"{task}_{split}.jsonl"), items)
  dump(os.path.join(dest, "cand_pool", "local", f"{task}_cand_pool.jsonl"),
       [{"did": f"{ds}:{i + 1}", "txt": p["positive"], "img_path": None,
         "modality": "text"} for i, p in enumerate(pairs)])
  table = os.path.join(dest, "instructions", "query_instructions.tsv")
  os.makedirs(os.path.dirname(table), exist_ok=True)
  with open(table, "w", encoding="utf-8") as f:
    f.write("\t".join(["query_modality", "cand_modality", "dataset_name",
                       "dataset_id", "prompt_1", "prompt_2", "prompt_3",
                       "prompt_4"]) + "\n")
    f.write("\t".join(["text", "text", MBEIR_DATASET, str(ds),
                       *MBEIR_PROMPTS, "", ""]) + "\n")
  return {k: len(v) for k, v in rows.items()}


def main(argv: list[str] | None = None) -> int:
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog="python -m jaxlab.data.pydoc_text")
  p.add_argument("dest")
  p.add_argument("--layout", choices=("wikitext", "pg19", "mbeir"),
                 default="wikitext")
  p.add_argument("--min_chars", type=int, default=PG19_MIN_CHARS,
                 help="pg19: the shortest document, in characters")
  args = p.parse_args(sys.argv[1:] if argv is None else argv)
  if args.layout == "mbeir":
    n = write_mbeir_copy(args.dest)
    print(f"{args.dest}: M-BEIR layout, {n['train']} train and {n['test']} "
          f"test queries from the Python {python_version()} documentation")
    return 0
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
