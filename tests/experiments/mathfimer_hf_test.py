"""`mathfimer:paper,short` end to end on released layouts, tiny checkpoint.

Layouts written by the test (read from the dataset cards):
* GSM8K (huggingface.co/datasets/openai/gsm8k README `configs:`): config
  `main`, `main/{train,test}-00000-of-00001.parquet`, columns `question`,
  `answer` (last line `#### <number>`).
* NuminaMath-CoT (huggingface.co/datasets/AI-MO/NuminaMath-CoT, config
  `default`: `data/train-*`, `data/test-*` parquet): `source`, `problem`,
  `solution`, `messages`.
* MATH (hendrycks/competition_math as parquet, e.g. the card of
  SuperSecureHuman/competition_math_hf_dataset: config `default`,
  `data/{train,test}-*`): `problem`, `level`, `type`, `solution`.
The checkpoint is a tiny random transformers llama with a tiny BPE
tokenizer (ChatML template) in the same directory.
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import datasets
import math_verify
import numpy as np

from jaxlab.configs import mathfimer as mathfimer_cfg
from jaxlab.data import math_rows
from jaxlab.experiments import mathfimer
from jaxlab.objectives import fim
from jaxlab.testing import gsm8k_reference
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 416  # >= the tokenizer's 400 ids
GSM8K = [
    ("Tom has 5 apples and eats 2. How many are left?",
     "Tom starts with 5 apples.\nHe eats 2 of them.\n"
     "5 - 2 = <<5-2=3>>3\n#### 3"),
    ("Sam runs 3 miles a day for 7 days. How far does he run?",
     "Each day Sam runs 3 miles.\nThere are 7 days.\n"
     "3 * 7 = <<3*7=21>>21\n#### 21"),
    ("There are 9 birds and 4 fly away. How many remain?",
     "9 - 4 = <<9-4=5>>5 birds remain\n#### 5"),
    ("Ann reads 12 pages a day. How many in 3 days?",
     "12 * 3 = <<12*3=36>>36\n#### 36"),
    ("A class has 20 students; half are girls. How many girls?",
     "Half of 20 is 20 / 2.\n20 / 2 = <<20/2=10>>10\n#### 10"),
]
NUMINA = [
    ("cn_k12", "Find x if 2x = 6.",
     "We divide both sides by 2.\nSo x = 6 / 2.\nThus x = 3.\n"
     "The answer is $\\boxed{3}$."),
    ("orca_math", "What is 4 + 5?\nGive a number.",
     "Add the two numbers.\n4 + 5 = 9.\nThe answer is $\\boxed{9}$."),
    ("math", "What is 10 - 7?",
     "Subtract 7 from 10.\n10 - 7 = 3.\nSo the answer is $\\boxed{3}$."),
]
MATH = [
    ("What is $\\frac{1}{2} + \\frac{1}{4}$?", "Level 1", "Prealgebra",
     "We write $\\frac{1}{2} = \\frac{2}{4}$. Then the sum is "
     "$\\frac{3}{4}$. So the answer is $\\boxed{\\frac{3}{4}}$."),
    ("Solve $x + 3 = 5$.", "Level 1", "Algebra",
     "Subtract 3 from both sides. We get $x = 2$. The answer is "
     "$\\boxed{2}$."),
    ("What is $2^3$?", "Level 1", "Algebra",
     "Multiply 2 by itself three times.\n$2 \\cdot 2 \\cdot 2 = 8$.\n"
     "So $2^3 = \\boxed{8}$."),
]


def _write(root, layout, columns, readme=None):
  """Parquet splits under `root` (`layout`: split -> relative file)."""
  for split, rel in layout.items():
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    datasets.Dataset.from_dict(columns[split]).to_parquet(
        os.path.join(root, rel))
  if readme:
    with open(os.path.join(root, "README.md"), "w") as f:
      f.write(readme)


class MathFimerHfTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hfx.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=VOCAB, num_layers=1,
                             init_std=0.05, max_position_embeddings=512)
    cls.gsm8k = os.path.join(cls.root, "gsm8k")
    def cols(rs):
      return {"question": [q for q, _ in rs], "answer": [a for _, a in rs]}
    _write(cls.gsm8k, {s: f"main/{s}-00000-of-00001.parquet"
                       for s in ("train", "test")},
           {"train": cols(GSM8K[:3]), "test": cols(GSM8K[2:])},
           "---\nconfigs:\n- config_name: main\n  data_files:\n"
           "  - split: train\n    path: main/train-*\n  - split: test\n"
           "    path: main/test-*\n---\n")
    cls.numina = os.path.join(cls.root, "numina")
    ncols = {"source": [s for s, _, _ in NUMINA],
             "problem": [p for _, p, _ in NUMINA],
             "solution": [x for _, _, x in NUMINA],
             "messages": [[{"role": "user", "content": p},
                           {"role": "assistant", "content": x}]
                          for _, p, x in NUMINA]}
    _write(cls.numina, {"train": "data/train-00000-of-00001.parquet",
                        "test": "data/test-00000-of-00001.parquet"},
           {"train": ncols, "test": {k: v[:1] for k, v in ncols.items()}})
    cls.math = os.path.join(cls.root, "math")
    def mcols(rs):
      return {k: [r[i] for r in rs] for i, k in enumerate(
          ("problem", "level", "type", "solution"))}
    _write(cls.math, {s: f"data/{s}-00000-of-00001.parquet"
                      for s in ("train", "test")},
           {"train": mcols(MATH[:2]), "test": mcols(MATH)})
    cls.ref_score = staticmethod(gsm8k_reference.ref_score)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _config(self, **data):
    c = mathfimer_cfg.get_config("paper,short")
    c.init_from = self.ckpt
    c.data.update({"path": self.gsm8k, "subset": "main",
                   "cache_dir": os.path.join(self.root, "hf_cache"), **data})
    c.fim_data.path = self.numina
    c.fim.max_new_tokens = 6
    c.fim_train.update(batch_size=8, max_len=160)
    c.solver_train.update(batch_size=8, max_len=160)
    c.eval.update(max_new_tokens=10, batch_size=8)
    return c

  def _records(self, workdir):
    with open(os.path.join(workdir, "solver_outputs.jsonl")) as f:
      return [json.loads(line) for line in f]

  def test_paper_short_preset(self):
    c = mathfimer_cfg.get_config("paper,short")
    self.assertEqual((c.data.source, c.data.path, c.data.subset,
                      c.data.split, c.data.eval_split, c.data.schema),
                     ("hf", "openai/gsm8k", "main", "train", "test",
                      "gsm8k"))
    self.assertEqual(c.init_from, "Qwen/Qwen2.5-Math-7B")
    self.assertEqual((c.fim_data.path, c.fim_data.max_rows),
                     ("AI-MO/NuminaMath-CoT", 8))
    self.assertEqual((c.data.max_rows, c.fim.rounds, tuple(c.seeds),
                      c.fim_train.steps, c.solver_train.steps),
                     (8, 1, (0,), 2, 2))

  def test_gsm8k_end_to_end(self):
    workdir = os.path.join(self.root, "gsm8k_run")
    summary = mathfimer.run(self._config(), workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      saved = json.load(f)
    self.assertEqual(saved["data"]["rows"],
                     {"train": 3, "test": 3, "fim_data:train": 3})
    self.assertEqual((saved["data"]["source"], saved["data"]["path"],
                      saved["data"]["subset"]), ("hf", self.gsm8k, "main"))
    self.assertEqual(summary["fim_data"]["path"], self.numina)
    # FIM examples: 3 distinct masks of each NuminaMath solution (H.2).
    steps = [len(fim.split_steps(x.lines, min_chars=8))
             for x in math_rows.items(
                 [{"problem": p, "solution": s} for _, p, s in NUMINA],
                 "numina")]
    self.assertEqual(steps, [4, 3, 3])
    self.assertEqual(summary["fim"]["seed0"]["examples"],
                     sum(min(3, n) for n in steps))
    # Expansion: every gap between adjacent steps of the train solutions.
    train_steps = [len(fim.split_steps(a, min_chars=8)) for _, a in GSM8K[:3]]
    self.assertEqual(saved["extra"]["round1/insertion_rate_mean"] +
                     saved["extra"]["round1/rejection_rate_mean"], 1.0)
    records = self._records(workdir)
    self.assertLen(records, 2 * 3)   # (original, expanded_r1) x 3 questions
    for r in records:
      self.assertEqual(r["em_strict"], bool(self.ref_score(
          r["completion"], r["reference"], "strict-match")))
      self.assertEqual(r["em_flexible"], bool(self.ref_score(
          r["completion"], r["reference"], "flexible-extract")))
    for name in ("original", "expanded_r1"):
      got = [r for r in records if r["solver"] == name]
      self.assertEqual([r["question"] for r in got],
                       [q for q, _ in GSM8K[2:]])
      for k in ("em_strict", "em_flexible"):
        self.assertAlmostEqual(summary[f"{name}/{k}_mean"],
                               np.mean([r[k] for r in got]))
    self.assertAlmostEqual(summary["original/train_steps_per_solution_mean"],
                           np.mean(train_steps))
    self.assertIn("solvers", [t["id"] for t in saved["tables"]])

  def test_math_with_a_chosen_fill(self):
    """MATH rows, math-verify grades; a fill that always writes one new
    step, so every gap gets an insertion (steps 2n - 1 after a round)."""
    c = self._config(path=self.math, subset="", schema="math")

    def fake_fill_fn(model, tok, **kwargs):
      del model, tok, kwargs
      return lambda prompts: ["Now we check the work carefully."] * len(
          prompts)

    workdir = os.path.join(self.root, "math_run")
    with mock.patch.object(mathfimer.fim, "make_fill_fn", fake_fill_fn):
      summary = mathfimer.run(c, workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      saved = json.load(f)
    self.assertEqual(saved["data"]["rows"],
                     {"train": 2, "test": 3, "fim_data:train": 3})
    items = math_rows.items([{"problem": p, "solution": s}
                             for p, _, _, s in MATH[:2]], "math")
    n = [len(fim.split_steps(x.lines, min_chars=8)) for x in items]
    self.assertEqual(n, [3, 3])   # sentence split of one-paragraph solutions
    self.assertAlmostEqual(saved["extra"]["round1/insertion_rate_mean"], 1.0)
    self.assertAlmostEqual(
        summary["expanded_r1/train_steps_per_solution_mean"],
        np.mean([2 * k - 1 for k in n]))
    records = self._records(workdir)
    self.assertLen(records, 2 * 3)
    for r in records:
      ref = math_verify.verify(math_verify.parse(r["reference"]),
                               math_verify.parse(r["completion"]))
      self.assertEqual(r["accuracy"], bool(ref))
    for name in ("original", "expanded_r1"):
      self.assertAlmostEqual(summary[f"{name}/accuracy_mean"], np.mean(
          [r["accuracy"] for r in records if r["solver"] == name]))

  def test_errors_are_named(self):
    c = self._config()
    c.init_from = ""
    with self.assertRaisesRegex(ValueError, "needs a checkpoint"):
      mathfimer.run(c, os.path.join(self.root, "no_ckpt"))
    c = self._config(schema="numina")
    with self.assertRaisesRegex(ValueError, "'gsm8k' or 'math'"):
      mathfimer.run(c, os.path.join(self.root, "bad_schema"))
    with self.assertRaisesRegex(ValueError, "columns 'problem' and "
                                "'solution'"):
      math_rows.items([{"question": "q", "answer": "a"}], "math")


if __name__ == "__main__":
  absltest.main()
