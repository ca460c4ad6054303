"""pmc:paper,short on TOFU as released, from a tiny transformers checkpoint.

The TOFU copy is written by the test in the released layout: the dataset
card's `configs:` (huggingface.co/datasets/locuslab/TOFU, README.md: one
config per JSON-lines file, split `train`) and its columns (`question`,
`answer`; in the `*_perturbed` files `paraphrased_question`,
`paraphrased_answer` (forget / retain) and `perturbed_answer`, a list), as
PMC's dataloader.py and TOFU's eval_everything.yaml read them. The checks:
`data.rows` counts what the run read, and UQ / utility / TOFU model utility
/ forget quality in results.json are what the metric functions give on the
run's own generations and losses.
"""

import glob
import types
import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import datasets
import numpy as np

from jaxlab.configs import pmc as pmc_config
from jaxlab.data import tofu as tofu_data
from jaxlab.evals import tofu as tofu_evals
from jaxlab.experiments import pmc as pmc_exp
from jaxlab.experiments.pmc import methods as pmc_methods
from jaxlab.io import pretrained
from jaxlab.objectives import pmc
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 416  # >= the tiny tokenizer's 400 ids
SUBSETS = ("full", "forget01", "forget05", "forget10", "retain90", "retain95",
           "retain99", "world_facts", "real_authors", "forget01_perturbed",
           "forget05_perturbed", "forget10_perturbed", "retain_perturbed",
           "world_facts_perturbed", "real_authors_perturbed")
README = "---\nconfigs:\n" + "".join(
    f"- config_name: {s}\n  data_files: {s}.json\n" for s in SUBSETS) + "---\n"


def _author_rows(n, tag, *, perturbed=False, paraphrased=False):
  rows = []
  for i in range(n):
    r = {"question": f"Where was {tag} author {i} born?",
         "answer": f"The {tag} author {i} was born in town {i}."}
    if paraphrased:
      r["paraphrased_question"] = f"What is the birthplace of {tag} {i}?"
      r["paraphrased_answer"] = f"{tag} {i} was born in town {i}."
    if perturbed:
      r["perturbed_answer"] = [f"The {tag} author {i} was born in city {j}."
                               for j in range(3)]
    rows.append(r)
  return rows


def write_tofu(path, n_forget=10, n_retain=12, n_world=5, n_authors=4):
  """A local copy of TOFU's files with a handful of rows each."""
  os.makedirs(path, exist_ok=True)
  forget = _author_rows(n_forget, "forgotten")
  retain = _author_rows(n_retain, "kept")
  data = {
      "forget10": forget, "retain90": retain,
      "forget10_perturbed": [dict(r, **p) for r, p in zip(
          forget, _author_rows(n_forget, "forgotten", perturbed=True,
                               paraphrased=True))],
      "retain_perturbed": _author_rows(n_retain, "kept", perturbed=True,
                                       paraphrased=True),
      "world_facts": _author_rows(n_world, "world"),
      "world_facts_perturbed": _author_rows(n_world, "world",
                                            perturbed=True),
      "real_authors": _author_rows(n_authors, "real"),
      "real_authors_perturbed": _author_rows(n_authors, "real",
                                             perturbed=True),
  }
  data["forget01"], data["retain99"] = forget[:1], retain
  data["forget05"], data["retain95"] = forget[:5], retain
  data["forget01_perturbed"] = data["forget10_perturbed"][:1]
  data["forget05_perturbed"] = data["forget10_perturbed"][:5]
  data["full"] = forget + retain
  for name, rows in data.items():
    datasets.Dataset.from_list(rows).to_json(
        os.path.join(path, f"{name}.json"))  # JSON lines, as released
  with open(os.path.join(path, "README.md"), "w") as f:
    f.write(README)
  return data


class TofuDataTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hfx.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=VOCAB, num_layers=1,
                             init_std=0.05)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_retain_split_and_subsample(self):
    self.assertEqual(tofu_data.retain_split("forget05"), "retain95")
    with self.assertRaisesRegex(ValueError, "forget01, forget05, forget10"):
      tofu_data.retain_split("retain90")
    # PMC's dataloader.py: rng = np.random.default_rng(12345);
    # rints = rng.integers(low=0, high=len(dataset), size=400) when > 400.
    rng = np.random.default_rng(12345)
    self.assertEqual(tofu_data.retain_eval_indices(3600),
                     rng.integers(low=0, high=3600, size=400).tolist())
    self.assertEqual(tofu_data.retain_eval_indices(400), list(range(400)))

  def test_prompts_follow_pmc_encoding(self):
    tok = pretrained.tokenizer(self.ckpt)
    fn = tofu_data.prompt_fn(tok, system_prompt="You are a helpful "
                             "assistant.", chat_kwargs={"date_string": "x"})
    # unlearning/encoding.py encode_inference_instruct: system + user with
    # the generation prompt (the ChatML template of the tiny tokenizer).
    self.assertEqual(
        fn("Who?"), "<|im_start|>system\nYou are a helpful assistant."
        "<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n"
        "<|im_start|>assistant\n")
    plain = tofu_data.prompt_fn(tok, use_chat_template=False)
    self.assertEqual(plain("Who?"), "Question: Who?\nAnswer: ")  # Phi tags

  def test_read_counts_every_subset(self):
    d = os.path.join(self.root, "tofu_read")
    data = write_tofu(d)
    cfg = pmc_config.get_config("paper")
    cfg.data.path, cfg.data.cache_dir = d, os.path.join(self.root, "cache")
    sp = tofu_data.read(cfg.data, perturbed_tasks={"forget": "{forget}"
                                                   "_perturbed"}, max_rows=6)
    self.assertEqual(sp.rows, {"forget10": 10, "retain90": 12,
                               "forget10_perturbed": 10, "world_facts": 5,
                               "real_authors": 4})
    self.assertEqual(sp.forget_paraphrased[2].answer,
                     data["forget10_perturbed"][2]["paraphrased_answer"])
    self.assertLen(sp.perturbed["forget"], 6)
    self.assertLen(sp.retain_eval, 12)


  def test_user_errors_are_named(self):
    cfg = pmc_config.get_config("paper")
    cfg.data.source = "grain"
    with self.assertRaisesRegex(ValueError, "data.source='hf'"):
      pmc_exp.run(cfg, os.path.join(self.root, "grain"))
    cfg.tofu.system = "x"
    with self.assertRaisesRegex(ValueError, r"config.tofu has unknown"):
      pmc_exp.tofu_settings(cfg)


  def test_each_question_is_generated_once(self):
    from jaxlab.experiments.pmc import methods  # pylint: disable=g-import-not-at-top
    tok = pretrained.tokenizer(self.ckpt)
    cfg = pmc_config.get_config("paper")
    asked = []

    def fake_generate(model, ids, **kw):
      del model, kw
      asked.extend(tok.decode(i) for i in ids)
      return types.SimpleNamespace(tokens=np.asarray(
          [tok.encode(f"a{len(asked) - len(ids) + j}", add_eos=True)[:3]
           for j in range(len(ids))]))

    memo = {}
    first = methods.tofu_generate(None, tok, cfg, lambda q: q, ["x", "y"],
                                  fake_generate, memo=memo)
    again = methods.tofu_generate(None, tok, cfg, lambda q: q,
                                  ["y", "z", "x", "z"], fake_generate,
                                  memo=memo)
    self.assertLen(asked, 3)                 # x, y, then z alone
    self.assertEqual([again[2], again[0]], first)
    self.assertEqual(again[1], again[3])


class PaperShortTofuTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hfx.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=VOCAB, num_layers=1,
                             init_std=0.05)
    cls.retain_ckpt = os.path.join(cls.root, "retain_ckpt")
    hfx.make_chat_checkpoint(cls.retain_ckpt, "llama", vocab_size=VOCAB,
                             num_layers=1, init_std=0.05, seed=1)
    cls.tofu = os.path.join(cls.root, "TOFU")
    cls.data = write_tofu(cls.tofu)
    cfg = pmc_config.get_config("paper,short")
    cfg.init_from = cls.ckpt
    cfg.data.path, cfg.data.subset = cls.tofu, "forget10"
    cfg.data.cache_dir = os.path.join(cls.root, "hf_cache")
    # A test-sized run: two methods, short generations, float32.
    cfg.methods = "pmc,ga"
    cfg.model.dtype = "float32"
    cfg.unlearn.update(max_new_tokens=6, ref_max_new_tokens=6, max_len=128,
                       batch_size=4, sample_batch_size=16)
    cfg.eval.max_new_tokens = 6
    cfg.tofu.retain_from = cls.retain_ckpt
    cls.cfg = cfg
    cls.workdir = os.path.join(cls.root, "work")
    pmc_exp.run(cfg, cls.workdir)
    with open(os.path.join(cls.workdir, "results.json")) as f:
      cls.res = json.load(f)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_data_rows_count_what_was_read(self):
    # `short` caps every subset at 8 rows (data.max_rows) and TOFU's tasks
    # at 8 (tofu.eval_size); real_authors / world_facts have fewer.
    d = self.res["data"]
    self.assertEqual(d["source"], "hf")
    self.assertEqual(d["subset"], "forget10")
    self.assertEqual(d["rows"], {
        "forget10": 8, "retain90": 8, "forget10_perturbed": 8,
        "world_facts": 5, "real_authors": 4, "retain_perturbed": 8,
        "real_authors_perturbed": 4, "world_facts_perturbed": 5})
    self.assertEqual(self.res["init_from"]["path"],
                     os.path.abspath(self.ckpt))

  def _stage(self, method):
    # The stage file itself, not its key file (`io.stages` keeps the key
    # beside it as <name>.stage.json).
    # The loaded model's evaluation is one stage for every seed.
    name = "original" if method == "original" else f"seed0_{method}"
    (path,) = [p for p in glob.glob(os.path.join(
        self.workdir, f"{name}_*.json"))
               if not p.endswith(".stage.json")]
    with open(path) as f:
      return json.load(f)["eval"]

  def test_uq_and_utility_are_the_metric_functions(self):
    forget = self.data["forget10"][:8]
    para = self.data["forget10_perturbed"][:8]
    truth = {"forget": [r["answer"] for r in forget],
             "forget_paraphrased": [r["paraphrased_answer"] for r in para],
             "retain": [r["answer"] for r in self.data["retain90"][:8]],
             "world": [r["answer"] for r in self.data["world_facts"]],
             "real_authors": [r["answer"] for r in self.data["real_authors"]]}
    extra = self.res["extra"]
    for method in ("original", "pmc", "ga"):
      ev = self._stage(method)
      arts = ev["_artifacts"]
      rec = {k: pmc.mean_recall(arts[f"generations_{k}"], v)
             for k, v in truth.items()}
      uq = pmc.unlearning_quality(rec["forget"], rec["forget_paraphrased"])
      ut = pmc.utility([rec["retain"], rec["world"], rec["real_authors"]])
      self.assertAlmostEqual(extra[f"{method}/uq_mean"], uq, places=9)
      self.assertAlmostEqual(extra[f"{method}/utility_mean"], ut, places=9)
      self.assertAlmostEqual(extra[f"{method}/recall_forget_mean"],
                             rec["forget"], places=9)
      self.assertNotIn("_artifacts", extra["per_seed"]["methods"][method][0])

  def test_tofu_model_utility_and_forget_quality(self):
    with open(os.path.join(self.workdir,
                           "tofu_retain_model_forget.json")) as f:
      retain = json.load(f)
    extra = self.res["extra"]
    for method in ("original", "pmc", "ga"):
      arts = self._stage(method)["_artifacts"]
      per_task = {t: tofu_evals.task_metrics(
          t, **{k: v for k, v in arts[f"tofu_{t}"].items()
                if k != "generations"}) for t in tofu_evals.TASKS}
      self.assertAlmostEqual(extra[f"{method}/model_utility_mean"],
                             tofu_evals.model_utility(per_task), places=9)
      fq = tofu_evals.forget_quality(
          arts["tofu_forget"]["avg_paraphrased_loss"],
          arts["tofu_forget"]["average_perturb_loss"],
          retain["avg_paraphrased_loss"], retain["average_perturb_loss"])
      self.assertAlmostEqual(extra[f"{method}/forget_quality_mean"],
                             fq["forget_quality"], places=9)
      self.assertLen(arts["tofu_forget"]["average_perturb_loss"], 8)
      self.assertLen(arts["tofu_forget"]["average_perturb_loss"][0], 3)

  def test_retain_model_enters_no_stage(self):
    # The same run without the retain model reloads every stage (nothing
    # unlearned or evaluated again) and has no forget quality; forget
    # quality comes from the stages' per-item losses alone.
    work = os.path.join(self.root, "no_retain")
    shutil.copytree(self.workdir, work)
    cfg = self.cfg.copy_and_resolve_references()
    cfg.tofu.retain_from = ""
    with mock.patch.object(pmc_exp, "_unlearn_and_eval") as unlearn, \
        mock.patch.object(pmc_methods, "evaluate_tofu") as evaluate:
      pmc_exp.run(cfg, work)
      self.assertEqual((unlearn.call_count, evaluate.call_count), (0, 0))
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    extra = res["extra"]
    self.assertNotIn("pmc/forget_quality_mean", extra)
    def fq(r):
      return [(c["a"], c["b"]) for c in r["comparisons"]
              if c["column"] == "forget_quality"]
    self.assertEqual(fq(res), [])
    self.assertEqual(fq(self.res), [("PMC", "original")])
    self.assertEqual(extra["pmc/model_utility_mean"],
                     self.res["extra"]["pmc/model_utility_mean"])
    self.assertIn("pmc/forget_quality_mean", self.res["extra"])

  def test_unlearning_changed_the_model_and_the_table(self):
    orig, ga = self._stage("original"), self._stage("ga")
    self.assertNotEqual(orig["_artifacts"]["tofu_forget"]["avg_gt_loss"],
                        ga["_artifacts"]["tofu_forget"]["avg_gt_loss"])
    (table,) = [t for t in self.res["tables"] if t["id"] == "unlearning_tofu"]
    self.assertIn("PMC", json.dumps(table))
    self.assertTrue(os.path.isfile(os.path.join(self.workdir, "table.md")))


if __name__ == "__main__":
  absltest.main()
