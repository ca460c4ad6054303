"""`calibration:paper,short` on a GSM8K Hub-layout copy and a tiny checkpoint.

GSM8K's released layout (huggingface.co/datasets/openai/gsm8k, README
`configs:` metadata since commit 60b4b82 "Add socratic data files"):
config `main` with data_files `main/train-*` and `main/test-*` (parquet,
`main/{split}-00000-of-00001.parquet`), columns `question` and `answer`,
the answer's last line `#### <number>`. The rows below are written by the
test in that schema. The checkpoint is a tiny random transformers llama with
a tiny BPE tokenizer and a ChatML chat template in the same directory.
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest

from jaxlab.configs import calibration as calibration_cfg
from jaxlab.evals import gsm8k
from jaxlab.experiments import calibration
from jaxlab.io import pretrained
from jaxlab.testing import calibration_reference
from jaxlab.testing import gsm8k_reference
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 416  # >= the tokenizer's 400 ids
ROWS = [
    ("Natalia sold clips to 48 of her friends in April, and then she sold "
     "half as many clips in May. How many clips did Natalia sell altogether "
     "in April and May?",
     "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = "
     "<<48+24=72>>72 clips altogether in April and May.\n#### 72"),
    ("Weng earns $12 an hour for babysitting. Yesterday, she just did 50 "
     "minutes of babysitting. How much did she earn?",
     "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, "
     "she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"),
    ("A shop sold 1,000 pens on Monday and 250 on Tuesday. How many pens did "
     "it sell?", "1000 + 250 = <<1000+250=1250>>1250\n#### 1,250"),
    ("The temperature was 3 degrees and fell by 10 degrees. What is it now?",
     "3 - 10 = <<3-10=-7>>-7\n#### -7"),
    ("Tom has 5 apples and eats 2. How many are left?",
     "5 - 2 = <<5-2=3>>3\n#### 3"),
    ("A book costs $8 and a pen $2. What do 2 books and 1 pen cost?",
     "2 * 8 + 2 = <<2*8+2=18>>18\n#### 18"),
    ("Sam runs 3 miles a day for 7 days. How far does he run?",
     "3 * 7 = <<3*7=21>>21\n#### 21"),
    ("There are 9 birds and 4 fly away. How many remain?",
     "9 - 4 = <<9-4=5>>5\n#### 5"),
    ("A class has 20 students; half are girls. How many girls?",
     "20 / 2 = <<20/2=10>>10\n#### 10"),
    ("Ann reads 12 pages a day. How many in 3 days?",
     "12 * 3 = <<12*3=36>>36\n#### 36"),
]


_plurality_first = calibration_reference.plurality_first


class CalibrationGsm8kTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hfx.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=VOCAB, num_layers=1,
                             init_std=0.05)
    cls.data = os.path.join(cls.root, "gsm8k")
    gsm8k_reference.write_gsm8k(cls.data, {"train": ROWS[:3], "test": ROWS})
    cls.ref_score = staticmethod(gsm8k_reference.ref_score)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _config(self, **eval_updates):
    c = calibration_cfg.get_config("paper,short")
    c.init_from = self.ckpt
    c.data.path = self.data
    c.data.subset = "main"
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.eval.update(max_new_tokens=12, pad_multiple=32, **eval_updates)
    return c

  def _records(self, workdir):
    with open(os.path.join(workdir, "completions.jsonl")) as f:
      return [json.loads(line) for line in f]

  def _check_labels(self, records):
    """Every saved label is the harness's extraction + exact match applied
    to the saved completions of the plurality class."""
    for r in records:
      texts = r["completions"]
      self.assertEqual(r["classes"]["semantic"],
                       [gsm8k.answer_class(t) for t in texts])
      for b in ("semantic", "normalized", "exact"):
        conf, first = _plurality_first(texts, r["classes"][b])
        self.assertAlmostEqual(r["confidence"][b], conf)
        self.assertEqual(r["correct"][b], bool(self.ref_score(
            first, r["answer"], "flexible-extract")), (b, texts))

  def test_paper_short_runs_on_the_released_layout(self):
    workdir = os.path.join(self.root, "run")
    res = calibration.run(self._config(), workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      saved = json.load(f)
    # short: max_rows = 8 of the test split, read once for the one seed.
    self.assertEqual(saved["data"]["rows"], {"test": 8})
    self.assertEqual((saved["data"]["source"], saved["data"]["path"],
                      saved["data"]["subset"]), ("hf", self.data, "main"))
    self.assertTrue(saved["data"]["digest"])
    records = self._records(workdir)
    self.assertLen(records, 8)
    self.assertEqual([r["question"] for r in records],
                     [q for q, _ in ROWS[:8]])
    self.assertEqual([r["answer"] for r in records],
                     [a for _, a in ROWS[:8]])
    for r in records:
      self.assertLen(r["completions"], 2)   # short: M = 2
    self._check_labels(records)
    for b in ("semantic", "normalized", "exact"):
      acc = sum(r["correct"][b] for r in records) / 8
      self.assertAlmostEqual(res["per_seed"][b][0]["accuracy"], acc)
      conf = sum(r["confidence"][b] for r in records) / 8
      self.assertAlmostEqual(res["per_seed"][b][0]["confidence"], conf)

  def test_labels_and_prompts_with_chosen_completions(self):
    """The wiring with completions chosen to cover the harness's cases (a
    random tiny model rarely writes the right number)."""
    tok = pretrained.tokenizer(self.ckpt)
    # Per question, M = 4 completions (cut at "Question:" first).
    chosen = {
        0: ["It is 72.", "#### 72", "Answer: 70", "72\nQuestion: 1"],
        1: ["$10.", "she earned $10.00", "10 dollars", "I think 12"],
        2: ["1,250 pens", "#### 1250", "1250", "no idea"],
        3: ["-7 degrees", "it is 7", "7", "#### 7"],
    }
    seen = []

    def fake_generate(model, tokenizer, prompts, **kwargs):
      del model, tokenizer, kwargs
      seen.extend(prompts)
      texts = [chosen[i // 4][i % 4] for i in range(len(prompts))]
      return texts, [0.0] * len(texts)

    c = self._config(num_samples=4)
    c.data.max_rows = 4
    workdir = os.path.join(self.root, "chosen")
    with mock.patch.object(calibration.unc, "generate_answers",
                           fake_generate):
      res = calibration.run(c, workdir)
    # Prompts: the checkpoint's chat template with the preset's system line.
    want = [tok.apply_chat_template(
        [{"role": "system", "content": c.gsm8k.system},
         {"role": "user", "content": q}]) for q, _ in ROWS[:4]]
    self.assertEqual(seen, [p for p in want for _ in range(4)])
    records = self._records(workdir)
    self._check_labels(records)
    # By hand (flexible-extract, B = the extracted final number):
    # q0: classes 72, 72, 70, 72 ("Question: 1" cut) -> 0.75, correct.
    # q1: 10, 10.00, 10, 12 -> 0.5 ("10"), correct.
    # q2: 1250 x3, none -> 0.75, correct ("1,250" target).
    # q3: -7, 7, 7, 7 -> 0.75 ("7"), wrong.
    sem = [(r["confidence"]["semantic"], r["correct"]["semantic"])
           for r in records]
    self.assertEqual(sem, [(0.75, True), (0.5, True), (0.75, True),
                           (0.75, False)])
    self.assertEqual(records[0]["completions"][3], "72\n")
    self.assertAlmostEqual(res["per_seed"]["semantic"][0]["accuracy"], 0.75)
    # Every sample: 3 + 2 ("10.00" is not "10") + 3 + 1 right of 16.
    self.assertAlmostEqual(
        res["per_seed"]["semantic"][0]["sample_accuracy"], 9 / 16)
    with open(os.path.join(workdir, "results.json")) as f:
      self.assertEqual(json.load(f)["data"]["rows"], {"test": 4})

  def test_errors_are_named(self):
    with self.assertRaisesRegex(ValueError, "columns 'question' and 'answer'"):
      calibration.gsm8k_questions([{"problem": "1 + 1?", "solution": "2"}])
    c = self._config()
    c.init_from = ""
    with self.assertRaisesRegex(ValueError, "needs a checkpoint"):
      calibration.run(c, os.path.join(self.root, "no_ckpt"))
    c = self._config()
    c.gsm8k.filter = "strict"
    with self.assertRaisesRegex(ValueError, "gsm8k.filter='strict'; valid: "
                                "strict-match, flexible-extract"):
      calibration.run(c, os.path.join(self.root, "bad_filter"))


if __name__ == "__main__":
  absltest.main()
