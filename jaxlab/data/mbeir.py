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

Query instructions (`instructions=`): M-BEIR ships one instruction table,
`instructions/query_instructions.tsv` (the Hub's `instructions/` folder;
header `query_modality  cand_modality  dataset_name  dataset_id  prompt_1 ..
prompt_4`, one row per (dataset, query modality, candidate modality)).
UniIR reads it in `MBEIRDatasetBase._load_query_instructions` and picks a
query's instruction in `_get_random_query_prompt` (TIGER-AI-Lab/UniIR
`src/data/mbeir_dataset.py`, commit 98dc570c2645fec8e1fd42c7d4ac9853f46051fd):
the key is `"{dataset_id}, {query_modality}, {cand_modality}"` with
`dataset_id` the `qid` before its ":" and `cand_modality` the `modality`
of a positive drawn by `random.choice` (`shuffle_cand: True` in its
configs; in `Mode.EVAL` among the positives of the query's own dataset),
the instruction is `format_string(random.choice(prompts))` over the row's
non-empty prompts, drawn anew each time a query is read, from Python's
`random` seeded with the config's seed (`set_seed`). UniIR's query text is
then `format_string(f"{prompt} {query_txt}")`; the reranker's prompt has
its own instruction slot (spec A.1: the triple (ins, q, d)), so the
instruction goes there and the query keeps its text. `read_split` makes the
same two draws per query row, in file order, from `random.Random(seed)`;
`train_groups` draws a training group's instruction anew from the row's
prompts. "default" is `retrieval_jsonl.DEFAULT_INSTRUCTION` for every
query, "none" an empty instruction.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re

import numpy as np

from jaxlab.data import retrieval_jsonl

_QUERY_FILE = re.compile(r"mbeir_(.+)_(train|val|test)\.jsonl$")
# Where the Hub copy keeps the instruction table (UniIR's configs:
# `query_instruct_path: "instructions/query_instructions.tsv"`).
INSTRUCTIONS_FILE = os.path.join("instructions", "query_instructions.tsv")
INSTRUCTION_MODES = ("auto", "uniir", "default", "none")


def format_string(s) -> str:
  """UniIR's `format_string` (`src/data/preprocessing/utils.py`, commit
  98dc570c): stripped, carriage returns and surrounding double quotes
  removed, first character upper-cased, a period added unless it ends in
  ".", "?" or "!"."""
  s = (s or "").replace("\r", "").strip().strip('"')
  if s:
    s = s[0].upper() + s[1:]
    s = s + "." if s[-1] not in (".", "?", "!") else s
  return s


def read_instructions(path: str) -> dict[str, list[str]]:
  """UniIR's instruction table: `"{dataset_id}, {query_modality},
  {cand_modality}"` -> the row's non-empty prompts (its columns 3, 0, 1 and
  4 on; the header line skipped), as `_load_query_instructions` reads it."""
  if not os.path.isfile(path):
    raise ValueError(f"no M-BEIR instruction table at {path} (expected "
                     f"{INSTRUCTIONS_FILE} under the dataset directory, or "
                     "mbeir.instructions_file)")
  table = {}
  with open(path, encoding="utf-8") as f:
    next(f, None)
    for lineno, line in enumerate(f, start=2):
      parts = line.strip().split("\t")
      if not line.strip():
        continue
      if len(parts) < 5:
        raise ValueError(f"{path}:{lineno}: expected query_modality, "
                         "cand_modality, dataset_name, dataset_id and "
                         f"prompts (tab separated), got {len(parts)} fields")
      table[f"{parts[3]}, {parts[0]}, {parts[1]}"] = [p for p in parts[4:]
                                                      if p]
  return table


def instruction_mode(path: str, mode: str, table_path: str = "") -> str:
  """"uniir" | "default" | "none" for `mode` ("auto": "uniir" when the
  instruction table is there, else "default")."""
  if mode not in INSTRUCTION_MODES:
    raise ValueError(f"mbeir.instructions={mode!r}; valid: "
                     f"{', '.join(INSTRUCTION_MODES)}")
  if mode == "auto":
    return ("uniir" if os.path.isfile(instructions_path(path, table_path))
            else "default")
  return mode


def instructions_path(path: str, table_path: str = "") -> str:
  """The instruction table: `table_path` (absolute, or relative to the
  dataset root `path`), default `INSTRUCTIONS_FILE` under `path`."""
  return os.path.join(path, table_path or INSTRUCTIONS_FILE)


def _uniir_prompts(row: dict, pool: dict, table: dict,
                   rng: random.Random) -> list[str] | None:
  """The row's prompts (its table row) after UniIR's positive draw;
  None when the drawn positive is not in the pool."""
  qid = str(row.get("qid") or "")
  dataset_id = qid.split(":")[0] if qid else None
  pos = [str(d) for d in row.get("pos_cand_list") or ()]
  own = [d for d in pos if d.split(":")[0] == dataset_id]
  pos = own or pos
  if not pos:
    return None
  cand = pool.get(rng.choice(pos))
  if cand is None:
    return None
  key = f"{dataset_id}, {row.get('query_modality')}, {cand.get('modality')}"
  prompts = table.get(key)
  if not prompts:
    raise ValueError(f"M-BEIR query {qid}: no instruction for {key!r} in "
                     "the instruction table (keys: dataset_id, "
                     "query_modality, cand_modality)")
  return prompts


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
               pool: dict | None = None, images: bool = False,
               instructions: str = "auto", instructions_file: str = "",
               seed: int = 0) -> tuple[list[dict], int]:
  """Query rows of `split` as retrieval groups, and rows read.

  Each group: {"instruction", "query", "positives", "negatives", "task",
  "qid"} (and with UniIR's instructions "prompts", the row's formatted
  table prompts); `task` is the file's `<dataset>_task<k>` name.
  `max_rows` (0 = all) caps the query rows read over the split's files (in
  file order). `images`: keep image and image+text queries and candidates
  (their `image` an absolute file path); otherwise text ones only.
  `instructions`: "uniir" (UniIR's per-task pick, module docstring; from
  `instructions_file`, default `INSTRUCTIONS_FILE` under `path`, drawn
  with `random.Random(seed)`), "default", "none" or "auto" ("uniir" when
  the table is there).
  """
  files = sorted(glob.glob(os.path.join(path, "query", split,
                                        f"mbeir_*_{split}.jsonl")))
  if not files:
    raise FileNotFoundError(f"no M-BEIR query files under {path}/query/"
                            f"{split} (expected mbeir_<task>_{split}.jsonl)")
  pool = read_pool(path) if pool is None else pool
  mode = instruction_mode(path, instructions, instructions_file)
  table = (read_instructions(instructions_path(path, instructions_file))
           if mode == "uniir" else None)
  rng = random.Random(seed)
  fixed = {"default": retrieval_jsonl.DEFAULT_INSTRUCTION,
           "none": ""}.get(mode)
  groups, n = [], 0
  for f in files:
    task = _QUERY_FILE.search(os.path.basename(f)).group(1)
    for row in _jsonl(f):
      if max_rows and n >= max_rows:
        return groups, n
      n += 1
      prompts, instruction = None, fixed
      if table is not None:
        # UniIR's two draws for every query it reads (a positive, then a
        # prompt), kept in step whether or not the row is used here.
        prompts = _uniir_prompts(row, pool, table, rng)
        instruction = (format_string(rng.choice(prompts)) if prompts
                       else None)
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
      if not pos or instruction is None:
        continue
      g = {"instruction": instruction, "query": query, "positives": pos,
           "negatives": items(row.get("neg_cand_list")),
           "task": task, "qid": str(row["qid"]), "line": row["qid"]}
      if prompts:
        g["prompts"] = [format_string(p) for p in prompts]
      groups.append(g)
  return groups, n


def train_groups(groups: list[dict], num_negatives: int, size: int,
                 seed: int) -> list[dict]:
  """`size` training groups (cycling over `groups`), each one positive and
  `num_negatives` negatives by `retrieval_jsonl.sample_group` (the row's
  negatives, topped up with other rows' positives). A row with UniIR's
  "prompts" gets one of them drawn anew for each group (UniIR draws the
  prompt each time it reads a query)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(size):
    ex = groups[i % len(groups)]
    ins, q, docs = retrieval_jsonl.sample_group(ex, num_negatives, rng,
                                                pool=groups)
    if ex.get("prompts"):
      ins = ex["prompts"][int(rng.integers(len(ex["prompts"])))]
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
