"""`calibration:paper,short` on OpenMathInstruct-2, TriviaQA and SimpleQA.

Each dataset is written by the test in its released layout, the run goes
through `jaxlab.main.run_experiment` with the `paper,short` config locked as
the command line has it (`--config.data.schema=... --config.data.path=...`),
and what it reports is recomputed from the samples it saved
(completions.jsonl) with the references: TriviaQA's official exact match
(jaxlab/testing/triviaqa_reference.py), math-verify (the PyPI package) and
relplot's smECE.

Layouts:
* TriviaQA (huggingface.co/datasets/mandarjoshi/trivia_qa, README
  `configs:` since commit 279d93a): config `rc.nocontext`,
  `rc.nocontext/{split}-00000-of-00001.parquet`, columns `question`,
  `question_id`, `question_source`, `entity_pages`, `search_results` and
  `answer` = {`aliases`, `normalized_aliases`, `matched_wiki_entity_name`,
  `normalized_matched_wiki_entity_name`, `normalized_value`, `type`,
  `value`} (as tests/experiments/uncertainty_hf_test.py writes it).
* SimpleQA (huggingface.co/datasets/basicv8vc/SimpleQA, commit e319282:
  README.md with metadata only and `simple_qa_test_set.csv` at the root,
  OpenAI simple-evals' file: columns `metadata` (a dict's repr with
  `topic`, `answer_type`, `urls`), `problem`, `answer`); `datasets` reads
  the file as split `test` (its name). The rows are SimpleQA's first
  questions as quoted in NVIDIA NeMo-RL's tests/functional/
  test_simpleqa_dataset.sh (the urls are placeholders).
* OpenMathInstruct-2 (huggingface.co/datasets/nvidia/OpenMathInstruct-2,
  card: fields `problem`, `generated_solution`, `expected_answer`,
  `problem_source`; splits `train`, `train_1M`, `train_2M`, `train_5M`;
  commit 083d329 lists `data/train-000NN-of-00016.parquet`): config
  `default`, `data/{split}-00000-of-00001.parquet`, the split in the file
  name.
"""

import ast
import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import datasets
import math_verify

from jaxlab import main
from jaxlab.configs import calibration as calibration_cfg
from jaxlab.data import pipeline
from jaxlab.experiments import calibration
from jaxlab.testing import calibration_reference as cref
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import triviaqa_reference as tqa_ref

VOCAB = 416
TRIVIA = [("Which planet is the Red Planet?", "Mars", ["Mars", "Planet Mars"]),
          ("Who wrote Hamlet?", "William Shakespeare",
           ["William Shakespeare", "Shakespeare"]),
          ("What is the capital of France?", "Paris", ["Paris"]),
          ("How many legs has a spider?", "8", ["8", "Eight"])]
SIMPLEQA = [
    ("Science and technology", "Person",
     "Who received the IEEE Frank Rosenblatt Award in 2010?", "Michio Sugeno"),
    ("Science and technology", "Person",
     "Who was awarded the Oceanography Society's Jerlov Award in 2018?",
     "Annick Bricaud"),
    ("Geography", "Place", "What's the name of the women's liberal arts "
     "college in Cambridge, Massachusetts?", "Radcliffe College"),
    ("Sports", "Person",
     "In whose honor was the Leipzig 1877 tournament organized?",
     "Adolf Anderssen")]
OMI2 = [
    ("8 coins are simultaneously flipped. What is the probability that heads "
     "are showing on at most 2 of them?", "\\frac{37}{256}", "math"),
    ("Tom has 5 apples and eats 2. How many are left?", "3",
     "augmented_gsm8k"),
    ("What is 0.5 written as a fraction?", "\\frac{1}{2}", "augmented_math"),
    ("Compute $2^{10}$.", "1024", "math")]


def _trivia_rows(qa):
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
      "answer": [{"aliases": al,
                  "normalized_aliases": [tqa_ref.ref_normalize(a)
                                         for a in al],
                  "matched_wiki_entity_name": "",
                  "normalized_matched_wiki_entity_name": "",
                  "normalized_value": tqa_ref.ref_normalize(v),
                  "type": "WikipediaEntity", "value": v}
                 for _, v, al in qa]}


def _first_line(text):
  """The reply's short answer, written here independently: the text before
  the harness's stop strings, its first non-blank line."""
  for stop in ("Question:", "</s>", "<|im_end|>"):
    text = text.split(stop)[0]
  return next((x.strip() for x in text.split("\n") if x.strip()), "")


def _ref_qa_class(text):
  return tqa_ref.ref_normalize(_first_line(text)) or None


def _ref_math_classes(texts):
  """math-verify's answers, one class per group of answers it verifies
  equal (the label of the group's first answer)."""
  reps, out = [], []
  for t in texts:
    p = math_verify.parse(t)
    if not p:
      out.append(None)
      continue
    label = next((l for l, q in reps if math_verify.verify(q, p)), None)
    if label is None:
      label = str(p[-1])
      reps.append((label, p))
    out.append(label)
  return out


class CalibrationReleasedTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hfx.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=VOCAB, num_layers=1,
                             init_std=0.05)
    # TriviaQA rc.nocontext.
    cls.trivia = os.path.join(cls.root, "trivia_qa")
    os.makedirs(os.path.join(cls.trivia, "rc.nocontext"))
    for split, qa in (("train", TRIVIA[:2]), ("validation", TRIVIA)):
      datasets.Dataset.from_dict(_trivia_rows(qa)).to_parquet(os.path.join(
          cls.trivia, "rc.nocontext", f"{split}-00000-of-00001.parquet"))
    with open(os.path.join(cls.trivia, "README.md"), "w") as f:
      f.write("---\nconfigs:\n- config_name: rc.nocontext\n  data_files:\n"
              "  - split: train\n    path: rc.nocontext/train-*\n"
              "  - split: validation\n    path: rc.nocontext/validation-*\n"
              "---\n")
    # SimpleQA: one CSV at the root.
    cls.simpleqa = os.path.join(cls.root, "SimpleQA")
    os.makedirs(cls.simpleqa)
    with open(os.path.join(cls.simpleqa, "README.md"), "w") as f:
      f.write("---\nlicense: mit\ntask_categories:\n- question-answering\n"
              "language:\n- en\n---\n")
    datasets.Dataset.from_dict({
        "metadata": [repr({"topic": t, "answer_type": k, "urls": [
            f"https://example.org/{i}"]})
                     for i, (t, k, _, _) in enumerate(SIMPLEQA)],
        "problem": [q for _, _, q, _ in SIMPLEQA],
        "answer": [a for _, _, _, a in SIMPLEQA]}).to_csv(
            os.path.join(cls.simpleqa, "simple_qa_test_set.csv"), index=False)
    # OpenMathInstruct-2: data/{split}-*.parquet.
    cls.omi2 = os.path.join(cls.root, "OpenMathInstruct-2")
    os.makedirs(os.path.join(cls.omi2, "data"))
    with open(os.path.join(cls.omi2, "README.md"), "w") as f:
      f.write("---\nlicense: cc-by-4.0\n---\n# OpenMathInstruct-2 (test)\n")
    for split, rows in (("train", OMI2), ("train_1M", OMI2)):
      datasets.Dataset.from_dict({
          "problem": [p for p, _, _ in rows],
          "generated_solution": [f"Working it out, the answer is "
                                 f"$\\boxed{{{a}}}$." for _, a, _ in rows],
          "expected_answer": [a for _, a, _ in rows],
          "problem_source": [s for _, _, s in rows]}).to_parquet(
              os.path.join(cls.omi2, "data",
                           f"{split}-00000-of-00001.parquet"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _config(self, schema, path, subset, split):
    """`calibration:paper,short` locked, then the command line's overrides
    (--config.init_from / data.schema / data.path / ...)."""
    c = calibration_cfg.get_config("paper,short")
    c.lock()
    c.init_from = self.ckpt
    c.data.schema = schema
    c.data.path = path
    c.data.subset = subset
    c.data.split = split
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.eval.update(max_new_tokens=12, pad_multiple=32)
    return c

  def _trivia_config(self):
    return self._config("trivia_qa", self.trivia, "rc.nocontext",
                        "validation")

  def _simpleqa_config(self):
    return self._config("simpleqa", self.simpleqa, "", "test")

  def _omi2_config(self):
    return self._config("openmathinstruct2", self.omi2, "", "train_1M")

  def _records(self, workdir):
    with open(os.path.join(workdir, "completions.jsonl")) as f:
      return [json.loads(line) for line in f]

  def _check_run(self, c, workdir, ref_classes, ref_grade, n_rows):
    """Runs `c` through jaxlab.main; checks data.rows and every reported
    number against the references applied to the saved samples."""
    res = main.run_experiment(c, workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      saved = json.load(f)
    self.assertEqual(saved["data"]["rows"], {c.data.split: n_rows})
    self.assertEqual((saved["data"]["source"], saved["data"]["path"],
                      saved["data"]["subset"]),
                     ("hf", c.data.path, c.data.subset))
    records = self._records(workdir)
    self.assertLen(records, n_rows)
    for r in records:
      self.assertLen(r["completions"], c.eval.num_samples)
      self.assertEqual(r["classes"]["semantic"],
                       ref_classes(r["completions"]))
    all_grades = [ref_grade(r, t) for r in records for t in r["completions"]]
    for b in ("semantic", "normalized", "exact"):
      got = res["per_seed"][b][0]
      conf, correct = cref.recompute(records, b, ref_grade)
      self.assertEqual([r["confidence"][b] for r in records], list(conf))
      self.assertEqual([r["correct"][b] for r in records],
                       [bool(y) for y in correct])
      self.assertAlmostEqual(got["accuracy"], correct.mean())
      self.assertAlmostEqual(got["confidence"], conf.mean())
      self.assertAlmostEqual(got["smece"], cref.relplot_smece(conf, correct),
                             delta=1e-4)
      self.assertAlmostEqual(got["sample_accuracy"],
                             sum(all_grades) / len(all_grades))
    return records

  def test_trivia_qa_through_main(self):
    c = self._trivia_config()
    records = self._check_run(
        c, os.path.join(self.root, "trivia_run"),
        lambda ts: [_ref_qa_class(t) for t in ts],
        lambda r, t: tqa_ref.ref_exact_match(
            _first_line(t), [tqa_ref.ref_normalize(a) for a in r["answer"]]),
        n_rows=4)
    self.assertEqual([r["question"] for r in records],
                     [q for q, _, _ in TRIVIA])
    # The references: the row's normalized_aliases, value and aliases.
    self.assertEqual(records[0]["answer"], ["mars", "planet mars", "Mars",
                                            "Planet Mars"])

  def test_simpleqa_through_main(self):
    c = self._simpleqa_config()
    records = self._check_run(
        c, os.path.join(self.root, "simpleqa_run"),
        lambda ts: [_ref_qa_class(t) for t in ts],
        lambda r, t: tqa_ref.ref_exact_match(
            _first_line(t), [tqa_ref.ref_normalize(a) for a in r["answer"]]),
        n_rows=4)
    self.assertEqual([(r["question"], r["answer"]) for r in records],
                     [(q, [a]) for _, _, q, a in SIMPLEQA])

  def test_openmathinstruct2_through_main(self):
    c = self._omi2_config()
    records = self._check_run(
        c, os.path.join(self.root, "omi2_run"), _ref_math_classes,
        lambda r, t: math_verify.verify(
            math_verify.parse(f"\\boxed{{{r['answer']}}}"),
            math_verify.parse(t)),
        n_rows=4)
    self.assertEqual([(r["question"], r["answer"]) for r in records],
                     [(p, a) for p, a, _ in OMI2])

  def _chosen(self, c, chosen, name):
    """Runs `c` with the sampler replaced by `chosen[i]` (M = 4 each)."""
    seen = []

    def fake_generate(model, tokenizer, prompts, **kwargs):
      del model, tokenizer, kwargs
      seen.extend(prompts)
      return [chosen[i // 4][i % 4] for i in range(len(prompts))], [0.0] * len(
          prompts)

    c.eval.num_samples = 4
    c.data.max_rows = len(chosen)
    workdir = os.path.join(self.root, name)
    with mock.patch.object(calibration.unc, "generate_answers",
                           fake_generate):
      res = calibration.run(c, workdir)
    self.assertLen(seen, 4 * len(chosen))
    with open(os.path.join(workdir, "results.json")) as f:
      self.assertEqual(json.load(f)["data"]["rows"],
                       {c.data.split: len(chosen)})
    sem = [(r["confidence"]["semantic"], r["correct"]["semantic"])
           for r in self._records(workdir)]
    return res["per_seed"]["semantic"][0], sem

  def test_trivia_qa_labels_by_hand(self):
    got, sem = self._chosen(self._trivia_config(), {
        0: ["Mars.", "The planet Mars\nyes", "mars", "Venus"],
        1: ["Shakespeare", "Shakespeare!", "‘Shakespeare’", "Marlowe"],
        2: ["Lyon", "Lyon", "Paris", "Question: x"],
    }, "trivia_chosen")
    # q0: mars, planet mars, mars, venus -> 0.5 "mars", correct.
    # q1: shakespeare x3, marlowe -> 0.75, correct (an alias).
    # q2: lyon x2, paris, none -> 0.5 "lyon", wrong.
    self.assertEqual(sem, [(0.5, True), (0.75, True), (0.5, False)])
    self.assertAlmostEqual(got["accuracy"], 2 / 3)
    self.assertAlmostEqual(got["sample_accuracy"], (3 + 3 + 1) / 12)

  def test_simpleqa_labels_by_hand(self):
    got, sem = self._chosen(self._simpleqa_config(), {
        0: ["Michio Sugeno", "Sugeno", "michio sugeno.", "Michio  Sugeno"],
        1: ["Annick Bricaud", "A. Bricaud", "Bricaud", "Walter Munk"],
        2: ["Radcliffe College", "Radcliffe", "Harvard", "Radcliffe"],
    }, "simpleqa_chosen")
    # q0: "michio sugeno" x3, "sugeno" -> 0.75, correct.
    # q1: "A. Bricaud" -> "bricaud" (TriviaQA drops the lone article "a"):
    #     annick bricaud, bricaud x2, walter munk -> 0.5 "bricaud", wrong.
    # q2: radcliffe college, radcliffe x2, harvard -> 0.5, wrong.
    self.assertEqual(sem, [(0.75, True), (0.5, False), (0.5, False)])
    self.assertAlmostEqual(got["accuracy"], 1 / 3)
    self.assertAlmostEqual(got["sample_accuracy"], (3 + 1 + 1) / 12)

  def test_openmathinstruct2_labels_by_hand(self):
    got, sem = self._chosen(self._omi2_config(), {
        0: ["The probability is \\boxed{\\frac{37}{256}}.", "37/256",
            "It is 0.14453125", "\\boxed{\\frac{1}{8}}"],
        1: ["\\boxed{2}", "There are 3 left.", "3", "\\boxed{2}"],
        2: ["\\boxed{0.5}", "$\\frac{1}{2}$", "\\boxed{1/3}", "no idea"],
    }, "omi2_chosen")
    # q0: 37/256 = 0.14453125 (one class of 3), 1/8 -> 0.75, correct.
    # q1: 2, 3, 3, 2: a tie, the class sampled first (2) -> 0.5, wrong.
    # q2: 0.5 = 1/2 (one class), 1/3, none -> 0.5, correct.
    self.assertEqual(sem, [(0.75, True), (0.5, False), (0.5, True)])
    self.assertAlmostEqual(got["accuracy"], 2 / 3)
    self.assertAlmostEqual(got["sample_accuracy"], (3 + 2 + 2) / 12)

  def test_errors_are_named(self):
    c = self._trivia_config()
    c.data.schema = "squad"
    with self.assertRaisesRegex(ValueError, "config.data.schema='squad'; "
                                "valid: gsm8k, openmathinstruct2, trivia_qa, "
                                "simpleqa"):
      calibration.run(c, os.path.join(self.root, "bad_schema"))
    with self.assertRaisesRegex(ValueError, "columns 'problem' and "
                                "'expected_answer'"):
      calibration.omi2_questions([{"question": "1 + 1?", "answer": "2"}])
    with self.assertRaisesRegex(ValueError, "simpleqa rows need columns "
                                "problem, answer"):
      calibration.qa_questions([{"question": "q", "answer": "a"}],
                               "simpleqa")

  def test_simpleqa_csv_reads_as_released(self):
    c = self._simpleqa_config()
    rows = pipeline.read_split(c.data)
    self.assertEqual(sorted(rows[0]), ["answer", "metadata", "problem"])
    self.assertEqual(ast.literal_eval(rows[0]["metadata"])["topic"],
                     "Science and technology")


if __name__ == "__main__":
  absltest.main()
