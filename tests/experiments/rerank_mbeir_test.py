"""`rerank:paper,short` on M-BEIR as released, with a tiny text checkpoint.

A random transformers Qwen2 checkpoint with the tiny ChatML tokenizer beside
it (`hf_fixtures.make_chat_checkpoint`); an M-BEIR-layout copy written here
as the TIGER-Lab/M-BEIR dataset lays it out (`query/<split>/mbeir_<task>_
<split>.jsonl` rows with `qid`, `query_txt`, `query_img_path`,
`query_modality`, `pos_cand_list`, `neg_cand_list`, `task_id`;
`cand_pool/local/mbeir_<task>_cand_pool.jsonl` rows with `did`, `txt`,
`img_path`, `modality`; UniIR's `src/data/mbeir_dataset.py` reads them).
The copy has M-BEIR's instruction table (`instructions/
query_instructions.tsv`, the released columns), so each query's instruction
is the per-task one UniIR picks (`jaxlab.testing.mbeir_reference` ports
UniIR's pick as the reference).
The run trains the CL and SFT cells with LoRA on the train queries and
reranks the test queries; the test checks the rows counted, that the
per-task nDCG@10 and their average equal sklearn's `ndcg_score` on the
run's own scores, and that the prompts the model read carry those
instructions.
"""

import json
import os
import shutil
import tempfile
from unittest import mock

import numpy as np
from absl.testing import absltest
from sklearn import metrics as sk_metrics

from jaxlab.configs import rerank as rerank_config
from jaxlab.experiments import rerank
from jaxlab.io import pretrained
from jaxlab.models import reranker as rr
from jaxlab.testing import hf_fixtures
from jaxlab.testing import mbeir_reference

WORDS = ["cat", "dog", "fish", "bird", "tree", "rock", "sun", "moon"]


def _write_jsonl(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")


def _write_mbeir(root):
  """Two text->text tasks; each query's positive is "a <word>" document.

  One image query and one image candidate are there too (skipped by the
  text-only run, counted as rows read)."""
  tasks = {"webqa_task1": "1", "nights_task4": "4"}
  # The instruction table in the released layout (dataset ids 1 and 4 are
  # this copy's; prompts of our own).
  mbeir_reference.write_table(
      os.path.join(root, "instructions", "query_instructions.tsv"),
      [mbeir_reference.TABLE[0],
       ("text", "text", "One", "1", "find the text about it",
        "Which text is about it?", "", ""),
       ("text", "text", "Four", "4", "pick the matching text",
        "Look for a match", "Same thing please", ""),
       ("image", "text", "One", "1", "caption it", "", "", ""),
       ("image", "text", "Four", "4", "caption that", "", "", "")])
  counts, written = {}, {}
  for ds, task_id in tasks.items():
    pool = [{"did": f"{task_id}:{i}", "txt": f"about the {w}",
             "img_path": None, "modality": "text"}
            for i, w in enumerate(WORDS)]
    pool.append({"did": f"{task_id}:99", "txt": None,
                 "img_path": "mbeir_images/x.jpg", "modality": "image"})
    _write_jsonl(os.path.join(root, "cand_pool", "local",
                              f"mbeir_{ds}_cand_pool.jsonl"), pool)
    for split, idx in (("train", range(0, 6)), ("test", range(3, 8))):
      rows = [{"qid": f"{task_id}:{split}{i}",
               "query_txt": f"where is the {WORDS[i]}?",
               "query_img_path": None, "query_modality": "text",
               "query_src_content": None,
               "pos_cand_list": [f"{task_id}:{i}"],
               "neg_cand_list": [f"{task_id}:{(i + 1) % 8}"],
               "task_id": int(task_id)} for i in idx]
      rows.append({"qid": f"{task_id}:{split}img",
                   "query_txt": None, "query_img_path": "mbeir_images/q.jpg",
                   "query_modality": "image", "query_src_content": None,
                   "pos_cand_list": [f"{task_id}:0"], "neg_cand_list": [],
                   "task_id": int(task_id)})
      _write_jsonl(os.path.join(root, "query", split,
                                f"mbeir_{ds}_{split}.jsonl"), rows)
      counts[split] = counts.get(split, 0) + len(rows)
      written[(split, ds)] = rows
  return counts, written


class RerankMbeirTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "qwen2", hidden_size=32,
                                     num_layers=1,
                                     max_position_embeddings=512)
    cls.data = os.path.join(cls.root, "M-BEIR")
    cls.counts, cls.written = _write_mbeir(cls.data)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_paper_short_runs_and_scores_ndcg(self):
    c = rerank_config.get_config("paper,short")
    self.assertEqual(c.cells, "sft/sft,cl/cl")
    c.init_from = self.ckpt
    c.data.path = self.data
    c.data.max_rows = 0          # every row written here (short caps at 8)
    # The tiny BPE vocabulary has no "yes" / "no" piece: two of its merges
    # stand in as the label tokens (a real checkpoint has the words).
    hf_tok = pretrained.tokenizer(self.ckpt).hf
    yes, no = hf_tok.convert_ids_to_tokens([331, 338])
    c.reranker.labels.update(yes_token=yes, no_token=no,
                             label_tokens_pos=(yes,), label_tokens_neg=(no,),
                             num_label_tokens=2)
    c.task.update(num_negatives=3, eval_candidates=4)
    # Room for the paper's system line, the instruction and the query in
    # the tiny (near character-level) vocabulary.
    c.prompt.max_len = c.train.seq_len = 192
    self.assertEqual(c.mbeir.instructions, "auto")
    wd = os.path.join(self.root, "wd")
    fed = []
    encode = rr.encode_pair

    def spy(instruction, query, document, tok, *args, **kw):
      ids, imgs = encode(instruction, query, document, tok, *args, **kw)
      fed.append((instruction, query["text"], tok.decode(ids)))
      return ids, imgs

    with mock.patch.object(rr, "encode_pair", spy):
      rerank.run(c, wd)
    with open(os.path.join(wd, "results.json")) as f:
      res = json.load(f)
    self.assertEqual(res["data"]["rows"], self.counts)
    self.assertEqual(res["data"]["path"], self.data)
    extra = res["extra"]
    labels = np.array(extra["labels"])
    tasks = np.array(extra["eval_tasks"])
    self.assertEqual(sorted(extra["tasks"]), ["nights_task4", "webqa_task1"])
    self.assertEqual(labels.shape, (10, 4))   # 5 text queries a task
    # The instructions: UniIR's pick (the ported reference) for each test
    # query, in the order the run read them (sorted files).
    self.assertEqual(extra["instructions"], "uniir")
    pool = {}
    for name in os.listdir(os.path.join(self.data, "cand_pool", "local")):
      with open(os.path.join(self.data, "cand_pool", "local", name)) as f:
        pool.update({r["did"]: r for r in map(json.loads, f)})
    rows = [r for ds in sorted(["nights_task4", "webqa_task1"])
            for r in self.written[("test", ds)]]
    table = mbeir_reference.uniir_load_query_instructions(os.path.join(
        self.data, "instructions", "query_instructions.tsv"))
    ref = mbeir_reference.uniir_query_txts(rows, pool, table,
                                           c.task.eval_seed)
    want = [ref[r["qid"]][0] for r in rows if r["query_modality"] == "text"]
    self.assertEqual(extra["eval_instructions"], want)
    self.assertGreater(len(set(want)), 2)
    # What the model read: every prompt (train and eval) holds its query's
    # task instruction, one of that task's table prompts.
    allowed = {"Find the text about it.", "Which text is about it?",
               "Pick the matching text.", "Look for a match.",
               "Same thing please."}
    self.assertNotEmpty(fed)
    for ins, query, text in fed:
      self.assertIn(ins, allowed)
      self.assertIn(f"<Instruct>: {ins}\n<Query>: {query}", text)
    for ins in want:
      self.assertTrue(any(f[0] == ins for f in fed))
    self.assertEqual(len(extra["runs"]), 2)
    for r in extra["runs"]:
      scores = np.array(r["scores"])
      per = []
      for task in sorted(set(tasks)):
        sel = tasks == task
        ref = sk_metrics.ndcg_score(labels[sel], scores[sel], k=10)
        np.testing.assert_allclose(r[f"ndcg@10/{task}"], ref, atol=1e-6)
        per.append(ref)
      np.testing.assert_allclose(r["ndcg@10"], np.mean(per), atol=1e-6)
      self.assertTrue(np.isfinite(r["final_loss"]))


if __name__ == "__main__":
  absltest.main()
