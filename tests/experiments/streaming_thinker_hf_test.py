"""`streaming_thinker:paper,short` evaluates StreamingCoT rows as released.

A random transformers Llama checkpoint with the tiny ChatML tokenizer beside
it (`hf_fixtures.make_chat_checkpoint`) and a local copy of
`JunlongTong/StreamingCoT` laid out as on the Hub: the dataset card's
`configs:` metadata (README.md e30d7bc: config `Eval`, split
`gsm_symbolic_p1_1k_eval` in `Eval/gsm_symbolic_p1_1k_eval.parquet`) and
rows with the fields the authors' reader takes at evaluation
(EIT-NLP/StreamingLLM StreamingThinker/dataloader_hf.py `extract_instruct`
and data/example_D2.json, snapshot 47b7bd1): `Instruct_Context`
{`instruct`, `context` (sentences ending in <EOS>)} and `answer`.
"""

import json
import os
import shutil
import tempfile

import datasets
import numpy as np
from absl.testing import absltest

from jaxlab.configs import streaming_thinker as st_config
from jaxlab.experiments import streaming_thinker as st_exp
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures

CARD = """---
configs:
- config_name: Train
  default: true
  data_files:
  - split: train
    path: Train/train.parquet
- config_name: Eval
  data_files:
  - split: gsm_symbolic_p1_1k_eval
    path: Eval/gsm_symbolic_p1_1k_eval.parquet
---
"""

ROWS = [
    {"Instruct_Context": {
        "context": "Ann has 3 apples.<EOS> She gets 4 more.<EOS>",
        "instruct": "How many apples does Ann have?"},
     "answer": "\\boxed{7}"},
    {"Instruct_Context": {
        "context": "Bo has 2 pens.<EOS> He buys 5.<EOS> He loses 1.<EOS>",
        "instruct": "How many pens are left?"},
     "answer": "\\boxed{6}"},
    {"Instruct_Context": {
        "context": "A box holds 9 eggs.<EOS>",
        "instruct": "How many eggs?"},
     "answer": "\\boxed{9}"},
]


class StreamingCoTReleasedTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", hidden_size=32,
                                     num_layers=1,
                                     max_position_embeddings=2048)
    cls.data = os.path.join(cls.root, "StreamingCoT")
    os.makedirs(os.path.join(cls.data, "Eval"))
    os.makedirs(os.path.join(cls.data, "Train"))
    with open(os.path.join(cls.data, "README.md"), "w") as f:
      f.write(CARD)
    datasets.Dataset.from_list(ROWS).to_parquet(
        os.path.join(cls.data, "Eval", "gsm_symbolic_p1_1k_eval.parquet"))
    datasets.Dataset.from_list(ROWS[:1]).to_parquet(
        os.path.join(cls.data, "Train", "train.parquet"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_segments_follow_the_authors_layout(self):
    segs = st_exp.row_segments(ROWS[0])
    self.assertEqual(segs, [
        st_exp.INSTRUCT + "<SEP>", "How many apples does Ann have?<EOQ>",
        "Ann has 3 apples.<EOS>", " She gets 4 more.<EOS>" +
        st_exp.END_INSTRUCT])
    with self.assertRaisesRegex(ValueError, "Instruct_Context"):
      st_exp.row_segments({"question": "x"})

  def test_boxed_match(self):
    self.assertEqual(st_exp.boxed_match("so \\boxed{ 7}", "\\boxed{7}"), 1.0)
    self.assertEqual(st_exp.boxed_match("so \\boxed{8}", "\\boxed{7}"), 0.0)
    self.assertEqual(st_exp.boxed_match("no box", "\\boxed{7}"), 0.0)

  def test_paper_short_run(self):
    c = st_config.get_config("paper,short")
    self.assertEqual((c.data.source, c.data.subset, c.data.split),
                     ("hf", "Eval", "gsm_symbolic_p1_1k_eval"))
    self.assertEqual(c.data.max_rows, 8)
    c.init_from = self.ckpt
    c.data.path = self.data
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.decode.max_new_tokens = 6
    c.methods = ("streaming", "batch")
    work = os.path.join(self.root, "run")
    out = st_exp.run(c, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    self.assertEqual(res["data"]["rows"], {"gsm_symbolic_p1_1k_eval": 3})
    self.assertEqual((res["data"]["source"], res["data"]["subset"]),
                     ("hf", "Eval"))
    # TTFT by hand: streaming reads only [INSTRUCT + <SEP>] before its first
    # WRITE (the seed is free); batch reads every source segment first.
    tok = pretrained.tokenizer(self.ckpt)
    lens = [[len(tok.encode(s)) for s in st_exp.row_segments(r)]
            for r in ROWS]
    m = out["methods"]
    self.assertEqual(m["streaming"]["metrics"]["ttft_tokens"],
                     float(np.mean([l[0] for l in lens])))
    self.assertEqual(m["batch"]["metrics"]["ttft_tokens"],
                     float(np.mean([sum(l) for l in lens])))
    self.assertGreater(m["batch"]["metrics"]["ttft_tokens"],
                       m["streaming"]["metrics"]["ttft_tokens"])
    for method in ("streaming", "batch"):
      self.assertBetween(m[method]["metrics"]["accuracy"], 0.0, 1.0)
      self.assertLessEqual(m[method]["metrics"]["reasoning_tokens"], 6)


if __name__ == "__main__":
  absltest.main()
