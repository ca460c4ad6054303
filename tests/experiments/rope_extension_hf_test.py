"""`rope_extension:paper,short` on a tiny checkpoint, PG19 and RULER rows.

A random transformers Llama checkpoint (max_position_embeddings 64) with
the tiny ChatML tokenizer beside it (`hf_fixtures.make_chat_checkpoint`),
evaluated training-free at 2x and 4x its context under several RoPE
scalings. Data written here in the released layouts:
- PG19 as on the Hub (`emozilla/pg19`, the parquet copy of `deepmind/pg19`:
  `data/<split>-*.parquet`, columns short_book_title / publication_date /
  url / text as its dataset card's `dataset_info.features` list them);
- RULER rows as its generator writes them (NVIDIA/RULER
  scripts/data/synthetic/niah.py `formatted_output`: index, input, outputs,
  length, length_w_model_temp, answer_prefix, token_position_answer; saved
  by scripts/data/prepare.py as `<task>/validation.jsonl`).
Checked: `data.rows` counts the rows read; perplexity under PI and YaRN
equals transformers' own loss on the same tokens with the same
rope_scaling (linear / yarn); RULER's scores equal RULER's own
string_match_all / string_match_part (ported below) on the run's answers.
"""

import json
import math
import os
import shutil
import tempfile
from unittest import mock

import datasets
from absl.testing import absltest
import numpy as np

from jaxlab.configs import rope_extension as rope_config
from jaxlab.evals import long_context as lc
from jaxlab.experiments import rope_extension as rope_exp
from jaxlab.experiments.rope_extension import real_run
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures


# Reference: RULER scripts/eval/synthetic/constants.py (NVIDIA/RULER commit
# c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a), verbatim but for names, and
# scripts/eval/evaluate.py `postprocess_pred`.
def ref_string_match_part(preds, refs):
  score = sum([max([1.0 if r.lower() in pred.lower() else 0.0 for r in ref])
               for pred, ref in zip(preds, refs)]) / len(preds) * 100
  return round(score, 2)


def ref_string_match_all(preds, refs):
  score = sum([sum([1.0 if r.lower() in pred.lower() else 0.0 for r in ref])
               / len(ref) for pred, ref in zip(preds, refs)]) / len(preds) * 100
  return round(score, 2)


def ref_postprocess_pred(predict_str):
  import re  # pylint: disable=g-import-not-at-top
  predict_str = predict_str.strip()
  np_pattern = re.compile(r"[\x00-\x1f]")
  return np_pattern.sub("\n", predict_str).strip()


ORIGINAL = 64
LENGTHS = (128, 256)


def hf_perplexity(ckpt, rope_parameters, ids_bt):
  """exp(mean loss) of transformers' model under `rope_parameters`."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  cfg = transformers.AutoConfig.from_pretrained(ckpt)
  cfg.rope_parameters = dict(rope_parameters, rope_theta=10000.0)
  cfg.max_position_embeddings = ids_bt.shape[1]
  model = transformers.AutoModelForCausalLM.from_pretrained(
      ckpt, config=cfg, dtype=torch.float32,
      attn_implementation="eager").eval()
  nll = []
  with torch.no_grad():
    for row in ids_bt:
      ids = torch.as_tensor(row[None], dtype=torch.long)
      nll.append(float(model(input_ids=ids, labels=ids).loss))
  return math.exp(float(np.mean(nll)))


class RopeExtensionHfTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", hidden_size=32,
                                     num_heads=4, num_kv_heads=2,
                                     max_position_embeddings=ORIGINAL)
    rng = np.random.default_rng(0)
    texts = [lc.haystack_text(rng, 80), "A short book.",
             lc.haystack_text(rng, 80)]
    cls.data = os.path.join(cls.root, "pg19")
    os.makedirs(os.path.join(cls.data, "data"))
    datasets.Dataset.from_dict({
        "short_book_title": [f"Book {i}" for i in range(len(texts))],
        "publication_date": [1900 + i for i in range(len(texts))],
        "url": [f"http://www.gutenberg.org/ebooks/{i}"
                for i in range(len(texts))],
        "text": texts}).to_parquet(os.path.join(
            cls.data, "data", "test-00000-of-00001.parquet"))
    cls.texts = texts
    cls.ruler = os.path.join(cls.root, "ruler")
    prefix = {"niah_single_1": (" The special magic numbers for {q} "
                                "mentioned in the provided text are"),
              "qa_1": " Answer:"}
    cls.n_ruler = 0
    for task, pre in prefix.items():
      os.makedirs(os.path.join(cls.ruler, task))
      with open(os.path.join(cls.ruler, task, "validation.jsonl"), "w") as f:
        for i in range(3):
          value = str(1000 + 7 * i)
          text = (lc.haystack_text(rng, i) + f" The special magic "
                  f"number for key{i} is: {value}. " +
                  lc.haystack_text(rng, 1) + " What is it?")
          f.write(json.dumps({
              "index": i, "input": text, "outputs": [value, "the"],
              "length": 128, "length_w_model_temp": 128,
              "answer_prefix": pre.format(q=f"key{i}"),
              "token_position_answer": 40}) + "\n")
          cls.n_ruler += 1
    c = rope_config.get_config("paper,short")
    c.init_from = cls.ckpt
    c.data.path = cls.data
    c.data.cache_dir = os.path.join(cls.root, "hf_cache")
    c.methods = ("default", "pi", "yarn", "mrope_pro")
    c.task.eval_lengths = LENGTHS
    c.task.eval_docs = 2
    c.task.eval_batch_size = 2
    c.task.dtype = "float32"
    # The long forwards block by block (the smollm2 preset's kernel): the
    # perplexities below are still checked against transformers.
    c.task.attention_impl = "chunked"
    c.ruler.path = cls.ruler
    c.ruler.max_new_tokens = 4
    cls.config = c
    cls.workdir = os.path.join(cls.root, "work")
    cls.out = rope_exp.run(c, cls.workdir)
    with open(os.path.join(cls.workdir, "results.json")) as f:
      cls.results = json.load(f)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_rows_read_and_lengths(self):
    data = self.results["data"]
    self.assertEqual(data["source"], "hf")
    self.assertEqual(data["rows"], {"test": 3, "ruler": self.n_ruler})
    self.assertEqual(self.out["original_len"], ORIGINAL)
    self.assertEqual(self.out["lengths"], list(LENGTHS))
    # The short book is skipped; both long ones are scored at each length.
    self.assertEqual(self.out["docs_per_length"], {"128": 2, "256": 2})

  def _tokens(self, n):
    tok = pretrained.tokenizer(self.ckpt)
    ids = [tok.encode(t, add_bos=True) for t in self.texts]
    return np.stack([np.asarray(x[:n]) for x in ids if len(x) >= n])

  def test_perplexity_equals_transformers(self):
    ppl = self.out["perplexity"]
    # PI at 2x: transformers' "linear" with factor 2.
    want = hf_perplexity(self.ckpt, {"rope_type": "linear", "factor": 2.0},
                         self._tokens(128))
    self.assertAlmostEqual(ppl["pi"][0] / want, 1.0, delta=2e-5)
    # YaRN at 4x: transformers' "yarn", factor 4 from the original 64.
    want = hf_perplexity(self.ckpt, {"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings":
                                         ORIGINAL}, self._tokens(256))
    self.assertAlmostEqual(ppl["yarn"][1] / want, 1.0, delta=2e-5)
    # Plain RoPE: transformers' default.
    want = hf_perplexity(self.ckpt, {"rope_type": "default"},
                         self._tokens(256))
    self.assertAlmostEqual(ppl["default"][1] / want, 1.0, delta=2e-5)
    for m in self.config.methods:
      self.assertTrue(all(math.isfinite(v) and v > 1 for v in ppl[m]), m)

  def test_document_perplexities_pair_the_methods(self):
    docs, pooled = self.out["perplexity_docs"], self.out["perplexity"]
    # PI at 2x, document by document: transformers' "linear" on that row.
    for d, row in enumerate(self._tokens(128)):
      want = hf_perplexity(self.ckpt, {"rope_type": "linear", "factor": 2.0},
                           row[None])
      self.assertAlmostEqual(docs["pi"][0][d] / want, 1.0, delta=2e-5)
    # Equal token counts: the pooled perplexity is the geometric mean of
    # the documents' (exp of the mean log).
    for m in self.config.methods:
      for j, _ in enumerate(LENGTHS):
        self.assertLen(docs[m][j], 2)
        self.assertAlmostEqual(
            math.exp(np.mean(np.log(docs[m][j]))) / pooled[m][j], 1.0,
            delta=1e-9)
    tables = {t["id"]: t for t in self.results["tables"]}
    rows = {r["label"]: r["cells"] for r in tables["perplexity_docs"]["rows"]}
    self.assertEqual(rows["PI"]["n128"]["seeds"], [0, 1])
    self.assertEqual(rows["PI"]["n128"]["values"], docs["pi"][0])
    ruler = {r["label"]: r["cells"] for r in tables["ruler_rows"]["rows"]}
    self.assertEqual(
        ruler["YaRN (HF ramp)"]["niah_single_1"]["values"],
        [100 * r["score"] for r in self.out["ruler_rows"]["yarn"]
         if r["task"] == "niah_single_1"])
    # MrRoPE-Pro against each other method, paired by document and by row.
    got = {(c["table"], c["column"], c["a"], c["b"])
           for c in self.results["comparisons"]}
    for other in ("none", "PI", "YaRN (HF ramp)"):
      for n in LENGTHS:
        self.assertIn(("perplexity_docs", f"n{n}", "MrRoPE-Pro", other), got)
      self.assertIn(("ruler_rows", "qa_1", "MrRoPE-Pro", other), got)

  def test_ruler_scores_equal_reference(self):
    for m in self.config.methods:
      rows = self.out["ruler_rows"][m]
      self.assertLen(rows, self.n_ruler)
      # S comes from the shortest evaluation length holding prompt + answer.
      tok = pretrained.tokenizer(self.ckpt)
      for task in ("niah_single_1", "qa_1"):
        with open(os.path.join(self.ruler, task, "validation.jsonl")) as f:
          for line, r in zip(f, [r for r in rows if r["task"] == task]):
            row = json.loads(line)
            need = len(tok.encode(row["input"] + row["answer_prefix"],
                                  add_bos=True)) + 4
            self.assertEqual(r["eval_len"], min(
                [n for n in LENGTHS if n >= need], default=need))
      self.assertIn(128, [r["eval_len"] for r in rows])
      for task, fn in (("niah_single_1", ref_string_match_all),
                       ("qa_1", ref_string_match_part)):
        got = [r for r in rows if r["task"] == task]
        refs = []
        with open(os.path.join(self.ruler, task, "validation.jsonl")) as f:
          refs = [json.loads(line)["outputs"] for line in f]
        want = fn([ref_postprocess_pred(r["pred"]) for r in got], refs)
        self.assertAlmostEqual(self.out["ruler_scores"][m][task], want,
                               places=6)

  def test_row_score_equals_reference_on_written_answers(self):
    cases = [("niah_single_1", " 1007 and The", ["1007", "the"]),
             ("niah_multikey_2", "\x01 1007\n", ["1007", "2000"]),
             ("vt", "VAR A, var b ", ["VAR A", "VAR B", "VAR C"]),
             ("qa_2", "Paris.", ["London", "paris"]),
             ("qa_1", "Rome", ["London", "Paris"])]
    for task, pred, refs in cases:
      fn = (ref_string_match_part if task.startswith("qa")
            else ref_string_match_all)
      want = fn([ref_postprocess_pred(pred)], [refs])
      # RULER rounds a task's score to 2 decimals.
      self.assertEqual(round(100 * lc.ruler_row_score(task, pred, refs), 2),
                       want, msg=task)
    with self.assertRaisesRegex(ValueError, "unknown RULER task"):
      lc.ruler_row_score("summaries", "x", ["x"])

  def test_smollm2_preset(self):
    c = rope_config.get_config("smollm2")
    self.assertEqual(c.init_from, "smollm2-135m-instruct")
    self.assertEqual((c.data.source, c.data.split, c.data.text_key),
                     ("hf", "test", "text"))
    self.assertEqual(c.results_name, "rope_extension_smollm2")
    self.assertEqual(tuple(c.methods),
                     ("default", "pi", "ntk", "yarn", "mrope_pro"))
    # Past SmolLM2's 8,192-token context, through the chunked kernel.
    self.assertTrue(all(n > 8192 for n in c.task.eval_lengths))
    self.assertEqual(c.task.attention_impl, "chunked")
    # RULER rows of ~12K tokens prefill at 12,288, not at 16,384.
    self.assertEqual(c.ruler.pad_multiple, 1024)
    c = rope_config.get_config("smollm2,ruler")
    self.assertEqual((c.results_name, c.data.path, c.ruler.pad_multiple),
                     ("rope_extension_smollm2_ruler", "", 1024))

  def test_each_part_alone_reuses_the_stages(self):
    # RULER alone (no data.path) in the same workdir: each method's RULER
    # stage is reloaded, nothing is recomputed, and only RULER's tables
    # are written; then perplexity alone, its stages reloaded too.
    c = self.config.copy_and_resolve_references()
    c.data.path = ""
    work = os.path.join(self.root, "ruler_only")
    shutil.copytree(self.workdir, work)
    with mock.patch.object(real_run.sampler, "generate") as gen, \
        mock.patch.object(real_run, "document_perplexities") as ppl:
      out = rope_exp.run(c, work)
      self.assertEqual((gen.call_count, ppl.call_count), (0, 0))
    self.assertEqual(out["ruler_rows"], self.out["ruler_rows"])
    self.assertEqual(out["perplexity"], {})
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    self.assertEqual({t["id"] for t in res["tables"]}, {"ruler", "ruler_rows"})
    self.assertEqual((res["data"]["source"], res["data"]["rows"]),
                     ("ruler", {"ruler": self.n_ruler}))
    self.assertLen(res["data"]["digest"], 64)
    c = self.config.copy_and_resolve_references()
    c.ruler.path = ""
    with mock.patch.object(real_run, "document_perplexities") as ppl:
      out = rope_exp.run(c, work)
      self.assertEqual(ppl.call_count, 0)
    self.assertEqual(out["perplexity_docs"], self.out["perplexity_docs"])
    self.assertEqual(out["ruler_rows"], {})
    # A changed RULER field re-answers the rows, not the perplexities.
    c = self.config.copy_and_resolve_references()
    c.ruler.max_new_tokens = 3
    c.methods = ("yarn",)
    with mock.patch.object(real_run, "document_perplexities") as ppl:
      out = rope_exp.run(c, work)
      self.assertEqual(ppl.call_count, 0)
    self.assertNotEqual(out["ruler_rows"]["yarn"],
                        self.out["ruler_rows"]["yarn"])
    self.assertLen(out["ruler_rows"]["yarn"], self.n_ruler)
    # Rows rewritten under the same path (the first row of each task
    # dropped, a new one appended) reload the rows answered before and
    # answer only the new one.
    c = self.config.copy_and_resolve_references()
    c.ruler.path = os.path.join(self.root, "ruler_rewritten")
    shutil.copytree(self.ruler, c.ruler.path)
    c.methods = ("yarn",)
    new_inputs = []
    for task in ("niah_single_1", "qa_1"):
      file = os.path.join(c.ruler.path, task, "validation.jsonl")
      with open(file) as f:
        rows = [json.loads(line) for line in f]
      new = dict(rows[0], input=rows[0]["input"].replace("1000", "4321"),
                 outputs=["4321", "the"])
      with open(file, "w") as f:
        for r in rows[1:] + [new]:
          f.write(json.dumps(r) + "\n")
      new_inputs.append(new["input"] + new["answer_prefix"])
    tok = pretrained.tokenizer(self.ckpt)
    with mock.patch.object(real_run.sampler, "generate",
                           wraps=real_run.sampler.generate) as gen:
      second = rope_exp.run(c, work)["ruler_rows"]["yarn"]
    asked = [tok.decode(p) for call in gen.call_args_list
             for p in call.args[1]]
    self.assertLen(asked, 2)  # (the tokenizer may prepend its BOS text)
    self.assertCountEqual(
        [next(x for x in new_inputs if a.endswith(x)) for a in asked],
        new_inputs)
    # The reloaded rows are the first run's answers to the same rows.
    first = self.out["ruler_rows"]["yarn"]
    self.assertLen(second, 6)
    self.assertEqual(second[0:2] + second[3:5], first[1:3] + first[4:6])

  def test_user_errors_are_named(self):
    c = self.config.copy_and_resolve_references()
    c.ruler.path = os.path.join(self.root, "missing")
    with self.assertRaisesRegex(ValueError, "ruler.path=.*no jsonl file"):
      real_run.ruler_rows(c)
    c.ruler.path = self.data  # a directory of another layout
    with self.assertRaisesRegex(ValueError, "no jsonl file"):
      real_run.ruler_rows(c)
    c.ruler.path, c.data.path = "", ""
    with self.assertRaisesRegex(ValueError, "needs data.path .* or "
                                "ruler.path"):
      rope_exp.run(c, os.path.join(self.root, "none"))
    c.data.path = self.data
    c.data.text_key = "book_text"
    tok = pretrained.tokenizer(self.ckpt)
    with self.assertRaisesRegex(ValueError, "no column 'book_text'"):
      real_run.text_documents(c, tok, LENGTHS)
    c.data.text_key = "text"
    with self.assertRaisesRegex(ValueError, "no row has 100000 tokens"):
      real_run.text_documents(c, tok, (100000,))


if __name__ == "__main__":
  absltest.main()
