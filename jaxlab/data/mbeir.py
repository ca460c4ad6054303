"""M-BEIR (UniIR's universal retrieval benchmark) as released.

The layout read here is the one of the `TIGER-Lab/M-BEIR` dataset on the
Hub and of the TIGER-Lab/UniIR loaders (`src/data/mbeir_dataset.py`; also
`docs/experiments-uniir-mbeir.md` in castorini/pyserini, which reads the
same files):

  query/{train,val,test}/mbeir_<dataset>_task<k>_<split>.jsonl
      one query a line: `qid`, `query_txt`, `query_img_path`,
      `query_modality` ("text" | "image" | "image,text"), `pos_cand_list`
      and `neg_cand_list` (candidate `did`s), `task_id`
  cand_pool/local/mbeir_<dataset>_task<k>_cand_pool.jsonl   (and
  cand_pool/global/mbeir_union_<split>_cand_pool.jsonl)
      one candidate a line: `did`, `txt`, `img_path`, `modality`

  mbeir_images/...   the images; `img_path` / `query_img_path` are relative
      to the dataset root (UniIR's `MBEIRDatasetBase.
      _load_and_preprocess_image`: `os.path.join(mbeir_data_dir,
      query_img_path)`, opened with PIL and converted to RGB).

`read_split` turns the query rows into the group rows of
`jaxlab.data.retrieval_jsonl` ({"instruction", "query", "positives",
"negatives"} with `{"text", "image"}` items), so its `sample_group` draws
the training groups. With `images=False` (a text LM reranker) only queries
whose `query_modality` is "text" and candidates whose `modality` is "text"
are kept; with `images=True` (a vision-language reranker) every modality is
kept and an item's `image` is the absolute path of its image file under
the dataset root (read when a batch is collated). Skipped rows are counted
in `rows` all the same: they were read.
"""

from __future__ import annotations

import glob
import json
import os
import re

import numpy as np

from jaxlab.data import retrieval_jsonl

_QUERY_FILE = re.compile(r"mbeir_(.+)_(train|val|test)\.jsonl$")


def _jsonl(path: str):
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if line.strip():
        try:
          yield json.loads(line)
        except json.JSONDecodeError as e:
          raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg})"
                           ) from None


def read_pool(path: str) -> dict[str, dict]:
  """did -> candidate row, over every `cand_pool/**/*.jsonl` under `path`."""
  files = sorted(glob.glob(os.path.join(path, "cand_pool", "**", "*.jsonl"),
                           recursive=True))
  if not files:
    raise FileNotFoundError(f"no M-BEIR candidate pool under {path}/"
                            "cand_pool (expected cand_pool/local/"
                            "mbeir_*_cand_pool.jsonl)")
  pool = {}
  for f in files:
    for row in _jsonl(f):
      pool[str(row["did"])] = row
  return pool


def _image(root: str, rel) -> str | None:
  """Absolute path of an `img_path` (relative to the dataset root, as
  UniIR joins it); None when the row has none."""
  if not rel:
    return None
  full = os.path.join(root, rel)
  if not os.path.isfile(full):
    raise ValueError(f"M-BEIR image {rel!r} not found under {root} (the "
                     "images go in the dataset directory, e.g. "
                     "mbeir_images/...)")
  return full


def _item(root: str, text, img_rel, images: bool) -> dict | None:
  """{"text", "image"} of a query or candidate; None when it has nothing
  the reranker can read (an image without `images`)."""
  text = text or None
  if not images:
    return {"text": text, "image": None} if text else None
  img = _image(root, img_rel)
  if text is None and img is None:
    return None
  return {"text": text, "image": img}


def read_split(path: str, split: str, *, max_rows: int = 0,
               pool: dict | None = None, images: bool = False
               ) -> tuple[list[dict], int]:
  """Query rows of `split` as retrieval groups, and rows read.

  Each group: {"instruction", "query", "positives", "negatives", "task",
  "qid"}; `task` is the file's `<dataset>_task<k>` name. `max_rows` (0 =
  all) caps the query rows read over the split's files (in file order).
  `images`: keep image and image+text queries and candidates (their
  `image` an absolute file path); otherwise text ones only.
  """
  files = sorted(glob.glob(os.path.join(path, "query", split,
                                        f"mbeir_*_{split}.jsonl")))
  if not files:
    raise FileNotFoundError(f"no M-BEIR query files under {path}/query/"
                            f"{split} (expected mbeir_<task>_{split}.jsonl)")
  pool = read_pool(path) if pool is None else pool
  groups, n = [], 0
  for f in files:
    task = _QUERY_FILE.search(os.path.basename(f)).group(1)
    for row in _jsonl(f):
      if max_rows and n >= max_rows:
        return groups, n
      n += 1
      if not images and row.get("query_modality") != "text":
        continue
      query = _item(path, row.get("query_txt"), row.get("query_img_path"),
                    images)
      if query is None:
        continue

      def items(dids):
        out = []
        for d in dids or ():
          c = pool.get(str(d))
          if c is None or (not images and c.get("modality") != "text"):
            continue
          it = _item(path, c.get("txt"), c.get("img_path"), images)
          if it is not None:
            out.append(it)
        return out

      pos = items(row.get("pos_cand_list"))
      if not pos:
        continue
      groups.append({"instruction": retrieval_jsonl.DEFAULT_INSTRUCTION,
                     "query": query,
                     "positives": pos,
                     "negatives": items(row.get("neg_cand_list")),
                     "task": task, "qid": str(row["qid"]),
                     "line": row["qid"]})
  return groups, n


def train_groups(groups: list[dict], num_negatives: int, size: int,
                 seed: int) -> list[dict]:
  """`size` training groups (cycling over `groups`), each one positive and
  `num_negatives` negatives by `retrieval_jsonl.sample_group` (the row's
  negatives, topped up with other rows' positives)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(size):
    ex = groups[i % len(groups)]
    ins, q, docs = retrieval_jsonl.sample_group(ex, num_negatives, rng,
                                                pool=groups)
    out.append({"instruction": ins, "query": q, "positives": docs[:1],
                "negatives": docs[1:]})
  return out


def eval_lists(groups: list[dict], num_candidates: int, seed: int
               ) -> tuple[list[tuple], np.ndarray, np.ndarray]:
  """Per query a list of `num_candidates` documents (its positives, its
  negatives, topped up with other queries' positives of the same task),
  shuffled; returns (instruction, query, docs) triples, labels `[Q, C]`
  (1 = positive) and the task of each query."""
  rng = np.random.default_rng(seed)
  out, labels, tasks = [], [], []
  for g in groups:
    pos = g["positives"][:num_candidates]
    negs = list(g["negatives"])
    others = [p for h in groups if h is not g and h["task"] == g["task"]
              for p in h["positives"] if p not in pos]
    if len(pos) + len(negs) < num_candidates:
      need = num_candidates - len(pos) - len(negs)
      if len(others) < need:
        raise ValueError(
            f"M-BEIR query {g['qid']}: {len(pos) + len(negs)} candidates and "
            f"{len(others)} more in its task; eval_candidates="
            f"{num_candidates} needs more")
      negs += [others[i] for i in rng.choice(len(others), need,
                                             replace=False)]
    docs = pos + negs[:num_candidates - len(pos)]
    lab = np.array([1] * len(pos) + [0] * (len(docs) - len(pos)), np.int32)
    order = rng.permutation(len(docs))
    out.append((g["instruction"], g["query"], [docs[i] for i in order]))
    labels.append(lab[order])
    tasks.append(g["task"])
  return out, np.stack(labels), np.array(tasks)
