"""`uncertainty:paper,short` end to end on TriviaQA's released layout.

Layout (huggingface.co/datasets/mandarjoshi/trivia_qa, README `configs:`
since commit 279d93a "Add rc.nocontext data files"): config `rc.nocontext`,
`rc.nocontext/{train,validation,test}-00000-of-00001.parquet`, columns
`question`, `question_id`, `question_source`, `entity_pages`,
`search_results` (empty without context) and `answer` = {`aliases`,
`normalized_aliases`, `matched_wiki_entity_name`,
`normalized_matched_wiki_entity_name`, `normalized_value`, `type`,
`value`}. The checkpoint is a tiny random transformers llama with a tiny
BPE tokenizer in the same directory; it answers and judges entailment.
"""

import importlib.util
import json
import os
import shutil
import tempfile

from absl.testing import absltest
import datasets
import numpy as np

from jaxlab.configs import uncertainty as uncertainty_cfg
from jaxlab.experiments import uncertainty
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 416
QA = [("Which planet is the Red Planet?", "Mars", ["Mars", "Planet Mars"]),
      ("Who wrote Hamlet?", "William Shakespeare",
       ["William Shakespeare", "Shakespeare"]),
      ("What is the capital of France?", "Paris", ["Paris"]),
      ("How many legs has a spider?", "8", ["8", "Eight"]),
      ("Which gas do plants absorb?", "Carbon dioxide",
       ["Carbon dioxide", "CO2"]),
      ("What colour is the sky?", "Blue", ["Blue"])]


def _rows(qa):
  empty_pages = {"doc_source": [], "filename": [], "title": [],
                 "wiki_context": []}
  empty_search = {"description": [], "filename": [], "rank": [],
                  "title": [], "url": [], "search_context": []}
  return {
      "question": [q for q, _, _ in qa],
      "question_id": [f"tq{i}" for i in range(len(qa))],
      "question_source": ["http://www.example.org"] * len(qa),
      "entity_pages": [empty_pages] * len(qa),
      "search_results": [empty_search] * len(qa),
      "answer": [{"aliases": al, "normalized_aliases": [a.lower()
                                                        for a in al],
                  "matched_wiki_entity_name": "",
                  "normalized_matched_wiki_entity_name": "",
                  "normalized_value": v.lower(), "type": "WikipediaEntity",
                  "value": v} for _, v, al in qa]}


def _squad_reference():
  path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "evals",
                      "uncertainty_lm_test.py")
  spec = importlib.util.spec_from_file_location("se_reference", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module._ref_correct  # pylint: disable=protected-access


class UncertaintyHfTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hfx.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=VOCAB, num_layers=1,
                             init_std=0.05, max_position_embeddings=512)
    cls.data = os.path.join(cls.root, "trivia_qa")
    os.makedirs(os.path.join(cls.data, "rc.nocontext"))
    for split, qa in (("train", QA[:3]), ("validation", QA[2:])):
      datasets.Dataset.from_dict(_rows(qa)).to_parquet(os.path.join(
          cls.data, "rc.nocontext", f"{split}-00000-of-00001.parquet"))
    with open(os.path.join(cls.data, "README.md"), "w") as f:
      f.write("---\nconfigs:\n- config_name: rc.nocontext\n  data_files:\n"
              "  - split: train\n    path: rc.nocontext/train-*\n"
              "  - split: validation\n    path: rc.nocontext/validation-*\n"
              "---\n")
    cls.ref_correct = staticmethod(_squad_reference())

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _config(self):
    c = uncertainty_cfg.get_config("paper,short")
    c.init_from = self.ckpt
    c.data.path = self.data
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.qa_prompt.num_few_shot = 2
    c.sampling.update(max_new_tokens=6, batch_size=16, pad_multiple=64)
    c.cluster.max_new_tokens = 4
    c.qtn.update(grid_size=16, num_operators=39, num_modes=4)
    c.lambdas = (5.0, 25.0)
    return c

  def test_paper_short_preset(self):
    c = uncertainty_cfg.get_config("paper,short")
    self.assertEqual((c.data.source, c.data.path, c.data.subset,
                      c.data.split, c.data.eval_split, c.data.schema,
                      c.data.max_rows),
                     ("hf", "mandarjoshi/trivia_qa", "rc.nocontext", "train",
                      "validation", "trivia_qa", 8))
    self.assertEqual((c.cluster.entailment, c.sampling.num_samples,
                      c.qa_prompt.num_few_shot), ("lm", 2, 5))

  def test_trivia_qa_end_to_end_with_lm_entailment(self):
    workdir = os.path.join(self.root, "run")
    extra = uncertainty.run(self._config(), workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      saved = json.load(f)
    self.assertEqual(saved["data"]["rows"], {"validation": 4, "train": 3})
    self.assertEqual((saved["data"]["source"], saved["data"]["path"],
                      saved["data"]["subset"]),
                     ("hf", self.data, "rc.nocontext"))
    rec = extra["per_seed"][0]
    ex = rec["examples"]
    self.assertEqual([e["question"] for e in ex], [q for q, _, _ in QA[2:]])
    self.assertEqual([e["truth"] for e in ex], [al for _, _, al in QA[2:]])
    for e in ex:
      self.assertEqual(e["correct"], bool(self.ref_correct(e["greedy"],
                                                           e["truth"])))
      self.assertLen(e["samples"], 2)
      # Greedy clusters: ids in [0, R), the first sample opens cluster 0.
      self.assertEqual(e["ids"][0], 0)
      self.assertLessEqual(max(e["ids"]), 1)
      for t in e["samples"] + [e["greedy"]]:
        self.assertNotIn("\n", t)   # cut at the SE code's stop strings
    self.assertAlmostEqual(rec["setup"]["accuracy"],
                           np.mean([e["correct"] for e in ex]))
    self.assertIn("SE", rec["metrics"])

  def test_other_released_sets_with_string_match(self):
    """NQ-Open, SQuAD 2.0 and SVAMP in their released layouts (cards:
    google-research-datasets/nq_open config `nq_open`,
    `nq_open/{split}-00000-of-00001.parquet`; rajpurkar/squad_v2 config
    `squad_v2`, `squad_v2/{split}-...`; ChilleD/SVAMP config `default`,
    `data/{train,test}-...`), clustered by the miniature's string match."""
    nq = {"question": ["who wrote hamlet", "capital of france",
                       "largest ocean"],
          "answer": [["Shakespeare"], ["Paris"], ["Pacific", "Pacific Ocean"]]}
    squad = {"id": ["a", "b", "c"], "title": ["t"] * 3,
             "context": ["Paris is in France."] * 3,
             "question": ["Where is Paris?", "Who?", "What is Paris?"],
             "answers": [{"text": ["France"], "answer_start": [12]},
                         {"text": [], "answer_start": []},
                         {"text": ["a city"], "answer_start": [0]}]}
    svamp = {"ID": ["chal-1", "chal-2", "chal-3"],
             "Body": ["Jo has 3 bags of 2.", "Al had 9 and lost 4.",
                      "Sue has 5."],
             "Question": ["How many in all?", "How many left?",
                          "How many?"],
             "Equation": ["( 3.0 * 2.0 )", "( 9.0 - 4.0 )", "( 5.0 )"],
             "Answer": [6.0, 5.0, 5.0],
             "Type": ["Multiplication", "Subtraction", "Common-Division"]}
    cases = (("nq_open", "nq_open", nq, "nq_open/{}-00000-of-00001.parquet",
              "validation", 3),
             ("squad", "squad_v2", squad,
              "squad_v2/{}-00000-of-00001.parquet", "validation", 2),
             ("svamp", "", svamp, "data/{}-00000-of-00001.parquet", "test",
              3))
    for schema, subset, cols, rel, eval_split, n_items in cases:
      root = os.path.join(self.root, schema)
      for split in ("train", eval_split):
        os.makedirs(os.path.dirname(os.path.join(root, rel.format(split))),
                    exist_ok=True)
        datasets.Dataset.from_dict(cols).to_parquet(
            os.path.join(root, rel.format(split)))
      c = self._config()
      c.data.update({"path": root, "subset": subset, "schema": schema,
                     "eval_split": eval_split})
      c.cluster.entailment = "string"
      extra = uncertainty.run(c, os.path.join(self.root, f"run_{schema}"))
      with open(os.path.join(self.root, f"run_{schema}",
                             "results.json")) as f:
        saved = json.load(f)
      self.assertEqual(saved["data"]["rows"], {eval_split: 3, "train": 3},
                       schema)
      ex = extra["per_seed"][0]["examples"]
      self.assertLen(ex, n_items, schema)   # SQuAD's unanswerable dropped
      for e in ex:
        self.assertEqual(e["correct"], bool(self.ref_correct(e["greedy"],
                                                             e["truth"])))
        norm = [uncertainty.unc.normalise_answer(t) for t in e["samples"]]
        self.assertEqual(e["ids"][1] == e["ids"][0], norm[1] == norm[0])
    self.assertEqual([e["truth"] for e in ex], [["6"], ["5"], ["5"]])

  def test_errors_are_named(self):
    c = self._config()
    c.cluster.entailment = "deberta"
    with self.assertRaisesRegex(ValueError, "cluster.entailment='deberta'"):
      uncertainty.run(c, os.path.join(self.root, "bad"))
    c = self._config()
    c.data.schema = "svamp"
    with self.assertRaisesRegex(ValueError, "svamp rows need columns"):
      uncertainty.run(c, os.path.join(self.root, "bad2"))


if __name__ == "__main__":
  absltest.main()
