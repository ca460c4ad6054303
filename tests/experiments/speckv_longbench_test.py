"""`speckv:paper,short` on LongBench as released, with a tiny checkpoint.

A random transformers Llama checkpoint with a tiny BPE tokenizer (ChatML
template) beside it; a LongBench-layout copy written here as its data.zip
lays the rows out (`data/<task>.jsonl`, one `test` split per task; the
fields of THUDM/LongBench's rows: `input`, `context`, `answers`, `length`,
`dataset`, `language`, `all_classes`, `_id`). The run reads the task's rows,
builds LongBench's prompts (one truncated in the middle), runs every method
at two budgets and scores each answer with LongBench's metric; the saved
predictions are re-scored and the full-cache answers re-generated here.
"""

import json
import os
import shutil
import tempfile

import datasets
from absl.testing import absltest

from jaxlab.configs import speckv as speckv_config
from jaxlab.decoding import sampler
from jaxlab.evals import longbench as lb
from jaxlab.experiments import speckv
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures

FOX = "The quick brown fox jumps over the lazy dog. "
COUNT = "Once upon a time, there was a tiny model that learned to count. "
HOTPOT = {
    "input": ["What jumps?", "Who learned to count?", "What is fib?",
              "What is 2 + 3?"],
    "context": [FOX * 6, COUNT * 3 + FOX * 2, FOX * 40, FOX * 3 + COUNT],
    "answers": [["the fox", "fox"], ["a tiny model"], ["a function"], ["5"]],
    "length": [54, 60, 360, 40],
    "dataset": ["hotpotqa"] * 4, "language": ["en"] * 4,
    "all_classes": [None] * 4, "_id": ["h0", "h1", "h2", "h3"],
}
CLASSES = ["Abbreviation", "Animal", "City", "Description of something"]
TREC = {
    "input": ["What is a fox?", "Where is Zurich?", "What is NASA?"],
    "context": ["Question: What is a dog?\nType: Animal\n" * 8] * 3,
    "answers": [["Animal"], ["City"], ["Abbreviation"]],
    "length": [80, 80, 80], "dataset": ["trec"] * 3, "language": ["en"] * 3,
    "all_classes": [CLASSES] * 3, "_id": ["t0", "t1", "t2"],
}


class SpeckvLongBenchTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=400,
                                     hidden_size=32, num_layers=2,
                                     max_position_embeddings=1024)
    cls.data = os.path.join(cls.root, "LongBench")
    os.makedirs(os.path.join(cls.data, "data"))
    datasets.Dataset.from_dict(HOTPOT).to_json(
        os.path.join(cls.data, "data", "hotpotqa.jsonl"))
    datasets.Dataset.from_dict(TREC).to_json(
        os.path.join(cls.data, "data", "trec.jsonl"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _config(self, task):
    c = speckv_config.get_config("paper,short")
    c.init_from = self.ckpt
    c.data.path = self.data
    c.data.subset = task
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.task.update(max_length=320, max_new_tokens=6, batch_size=4)
    c.methods.update(budgets=(40, 56), window=8, kernel=3, pc_window=16,
                     pc_kernel=4, pc_keep_window=8, pc_start_layer=0)
    return c

  def _run(self, task):
    work = os.path.join(self.root, task)
    extra = speckv.run(self._config(task), work)
    with open(os.path.join(work, "results.json")) as f:
      return extra, json.load(f)

  def test_hotpotqa_rows_prompts_scores(self):
    extra, res = self._run("hotpotqa")
    c = self._config("hotpotqa")
    self.assertEqual(res["data"]["rows"], {"test": 4})
    self.assertEqual((res["data"]["source"], res["data"]["subset"]),
                     ("hf", "hotpotqa"))
    self.assertLen(res["data"]["digest"], 64)
    recs = extra["per_seed"]
    self.assertEqual([r["_id"] for r in recs], HOTPOT["_id"])
    tok = pretrained.tokenizer(self.ckpt)
    prompts = [lb.prompt_ids(tok, "hotpotqa",
                             {k: HOTPOT[k][i] for k in HOTPOT},
                             max_length=320) for i in range(4)]
    self.assertEqual([r["prompt_tokens"] for r in recs],
                     [len(p) for p, _ in prompts])
    self.assertEqual([r["truncated"] for r in recs],
                     [False, False, True, False])
    # Every saved score is LongBench's metric of the saved prediction, and
    # the tables' per-row values and the task scores follow from them.
    tables = {t["id"]: t for t in res["tables"]}
    names, budgets = c.methods.names, [str(b) for b in c.methods.budgets]
    for name in names:
      for b in budgets:
        preds = [r["pred"][name][b] for r in recs]
        want = [max(lb.qa_f1_score(p, a) for a in answers)
                for p, answers in zip(preds, HOTPOT["answers"])]
        self.assertEqual([r["score"][name][b] for r in recs], want)
        self.assertEqual(extra["task_scores"][name][b],
                         lb.task_score("hotpotqa", preds, HOTPOT["answers"]))
        row = next(x for x in tables[f"budget_{b}"]["rows"]
                   if x["label"] == name)
        self.assertEqual(row["cells"]["score"]["values"], want)
    # The full cache's answers are plain greedy decoding of the prompts.
    target, _ = pretrained.load(self.ckpt)
    out = sampler.generate(target, [p for p, _ in prompts], max_new_tokens=6,
                           eos_id=tok.eos_id, stop_ids=tuple(tok.eos_ids))
    self.assertEqual([r["pred"]["full"][budgets[0]] for r in recs],
                     [lb.answer_text(tok, "hotpotqa", t, tok.eos_ids)
                      for t in out.tokens])
    for r in recs:  # the full cache agrees with itself
      self.assertEqual(r["agree"]["full"], {b: 1.0 for b in budgets})

  def test_trec_classification_with_all_classes(self):
    extra, res = self._run("trec")
    self.assertEqual(res["data"]["rows"], {"test": 3})
    self.assertEqual(extra["draft"]["first_layers"], 1)  # half of 2
    again, _ = self._run("trec")  # eval.json is reused
    self.assertEqual(again["per_seed"], extra["per_seed"])
    self.assertEqual(extra["metric"], "classification_score")
    for r in extra["per_seed"]:
      self.assertEqual(r["all_classes"], CLASSES)
      for name, per_b in r["pred"].items():
        for b, p in per_b.items():
          self.assertEqual(r["score"][name][b],
                           lb.score("trec", p, r["answers"], CLASSES))


if __name__ == "__main__":
  absltest.main()
