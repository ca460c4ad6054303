"""UniIR's M-BEIR query-instruction pick, ported as the tests' reference.

`uniir_query_txts(entries, cand_pool, instructions, seed)` is the
instruction (and query text) UniIR's loader gives each query row;
`jaxlab.data.mbeir` is checked against it (tests/data/mbeir_test.py) and
the M-BEIR real-run test (tests/experiments/rerank_mbeir_test.py) checks
what its model read. `write_table` writes an instruction table in the
released layout (`instructions/query_instructions.tsv` of TIGER-Lab/M-BEIR:
header `query_modality, cand_modality, dataset_name, dataset_id, prompt_1
.. prompt_4`, tab separated; the columns as in the copy at
KedarnathKC/Modality-Aware-MLLM-Retriever `datasetUtils/
query_instructions.tsv`, commit c5cd0918), `TABLE` one with prompts of our
own.
"""

import os
import random


# -- reference: TIGER-AI-Lab/UniIR, commit 98dc570c2645fec8e1fd42c7d4ac9853f
# 46051fd: `src/data/preprocessing/utils.py` format_string and
# `src/data/mbeir_dataset.py` MBEIRDatasetBase._load_query_instructions,
# _get_random_query_prompt and MBEIRMainDataset.__getitem__ (Mode.EVAL,
# shuffle_cand=True as in its configs), the global `random` seeded once.

def uniir_format_string(s):
  s = (s or "").replace("\r", "").strip().strip('"')
  if s:
    s = s[0].upper() + s[1:]
    s = s + "." if s[-1] not in [".", "?", "!"] else s
  return s


def uniir_load_query_instructions(path):
  prompts_dict = {}
  with open(path, "r") as f:
    next(f)
    for line in f.readlines():
      parts = line.strip().split("\t")
      key = f"{parts[3]}, {parts[0]}, {parts[1]}"
      prompts_dict[key] = [p for p in parts[4:] if p]
  return prompts_dict


def uniir_query_txts(entries, cand_pool, instructions, seed):
  """qid -> (query_prompt, query_txt_with_prompt) for each entry in order."""
  random.seed(seed)
  out = {}
  for e in entries:
    query_txt = e.get("query_txt") or ""
    qid = e.get("qid", None)
    query_dataset_id = qid.split(":")[0] if qid else None
    pos_cand_list = [d for d in e.get("pos_cand_list", [])
                     if d.split(":")[0] == query_dataset_id]
    pos_cand = cand_pool.get(random.choice(pos_cand_list))
    key = f"{query_dataset_id}, {e['query_modality']}, {pos_cand['modality']}"
    prompt = uniir_format_string(random.choice(instructions[key]))
    out[qid] = (prompt, uniir_format_string(f"{prompt} {query_txt}"))
  return out

# -- end of the reference.


TABLE = [
    ("query_modality", "cand_modality", "dataset_name", "dataset_id",
     "prompt_1", "prompt_2", "prompt_3", "prompt_4"),
    ("text", "text", "WebQA", "2", "find the passage answering this",
     "Which snippet answers the question?", '"Quoted prompt"',
     "  retrieve a wiki paragraph!  "),
    ("text", "image", "MSCOCO", "9", "show an image for the caption",
     "Pick the photo.", "", ""),
    ("image", "text", "MSCOCO", "9", "caption this image", "Describe it",
     "Which caption fits?", "A caption for the scene"),
]


def write_table(path, rows=TABLE):
  """`rows` (the header first) as a tab-separated table at `path`."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    for r in rows:
      f.write("\t".join(r) + "\n")
