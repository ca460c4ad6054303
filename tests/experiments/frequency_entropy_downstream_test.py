"""`frequency_entropy:paper,short` end to end with the downstream evaluation.

What `python -m jaxlab.main --config=frequency_entropy:paper,short
--config.init_from=CKPT --config.data.path=WIKITEXT
--config.downstream.tasks.hellaswag.path=H ...` runs, on:

* a tiny random Llama checkpoint whose config.json carries Llama 4's
  `no_rope_layers` (1 = RoPE, 0 = NoPE; two layers, the last NoPE as in
  Llama 4's every-4th pattern), so its NoPE layer comes from the
  checkpoint;
* a WikiText-103-layout copy (Salesforce/wikitext, `wikitext-103-raw-v1/
  {train,test}-*.parquet`, column `text`);
* HellaSwag (Rowan/hellaswag: `data/validation-*.parquet`; dataset card
  features ind, activity_label, ctx_a, ctx_b, ctx, endings, source_id,
  split, split_type, label as a string), TruthfulQA (truthfulqa/
  truthful_qa `multiple_choice/validation-*.parquet`: question,
  mc1_targets / mc2_targets = {choices, labels}) and MMLU (cais/mmlu
  `all/test-*.parquet`: question, subject, choices, answer 0-3) rows.

`results.json`'s `data.rows` must count what was read, and each reported
accuracy equal a recomputation here: every choice's log-likelihood from a
plain unbatched forward of its own tokens (followed by pads only, which a
causal model does not see), the tokens cut as
lm-evaluation-harness's `_encode_pair` does, under the model the
experiment's selection (rules a+b on the native query FE, RoPE layers
only) attenuates by alpha 0.1.
"""

import json
import os
import shutil
import tempfile

import datasets
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from jaxlab.analysis import frequency_entropy as fe
from jaxlab.configs import frequency_entropy as fe_config
from jaxlab.experiments import frequency_entropy as fe_exp
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures

LINE = (" The {w} river flows north through the valley , and the town of "
        "{w} stands on its banks . It was founded in {y} . \n")
WORDS = ("Avon", "Tay", "Dee", "Wye", "Usk", "Exe", "Cam", "Ure")


def _wiki(start, n):
  out = []
  for i in range(start, start + n):
    out += ["", f" = {WORDS[i % 8]} = \n", "",
            LINE.format(w=WORDS[i % 8], y=1100 + 7 * i)]
  return out


HELLASWAG = {
    "ind": [4, 9, 12],
    "activity_label": ["Removing ice from car", "Home and Garden",
                       "Baking cookies"],
    "ctx_a": ["Then, the man writes over the snow covering the window.",
              "[header] How to grow a lawn [title] Rake the soil.",
              "A woman pours flour into a bowl."],
    "ctx_b": ["then", "[step] loosen the top layer", "she"],
    "ctx": ["", "", ""],
    "endings": [[", the man adds wax to the windshield.",
                 ", a person boards a ski lift.",
                 ", the man puts on a coat.",
                 ", the man continues removing the snow on his car."],
                ["Then water it.", "Plant seeds [title] now.",
                 "Wait a week.", "Mow it twice."],
                ["adds sugar and stirs.", "leaves the room.",
                 "paints the wall blue.", "reads a book about cats."]],
    "source_id": ["activitynet~a", "wikihow~b", "activitynet~c"],
    "split": ["val"] * 3, "split_type": ["indomain"] * 3,
    "label": ["3", "0", "0"],
}
TRUTHFULQA = {
    "question": ["What happens if you eat watermelon seeds?"],
    "mc1_targets": [{"choices": ["The seeds pass through you.",
                                 "You grow watermelons."],
                     "labels": [1, 0]}],
    "mc2_targets": [{"choices": ["Nothing happens.",
                                 "The seeds pass through you.",
                                 "You grow watermelons."],
                     "labels": [1, 1, 0]}],
}
MMLU = {
    "question": ["What is 2 + 2?", "Which organ pumps blood?",
                 "Find the degree of Q(sqrt(2)) over Q."],
    "subject": ["elementary_mathematics", "anatomy", "abstract_algebra"],
    "choices": [["3", "4", "5", "6"], ["Lung", "Liver", "Heart", "Skin"],
                ["0", "4", "2", "6"]],
    "answer": [1, 2, 2],
}


HELLASWAG_TRAIN = {
    k: [v[i % 3] + (f" {i}" if k == "ctx_a" else "") if isinstance(
        v[0], str) else v[i % 3] for i in range(6)]
    for k, v in HELLASWAG.items()}
HELLASWAG_TRAIN.update(split=["train"] * 6, ind=list(range(20, 26)))
MMLU_DEV = {
    "question": [f"Dev question {i} on {s}?" for s in (
        "abstract_algebra", "anatomy", "elementary_mathematics")
                 for i in range(5)],
    "subject": [s for s in ("abstract_algebra", "anatomy",
                            "elementary_mathematics") for _ in range(5)],
    "choices": [[f"c{i}{x}" for x in "abcd"] for i in range(15)],
    "answer": [i % 4 for i in range(15)],
}


def _write(d, rel, columns):
  path = os.path.join(d, rel)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  datasets.Dataset.from_dict(columns).to_parquet(path)


def _ref_pair(hf_tok, context, continuation):
  """lm-evaluation-harness `_encode_pair` (lm_eval/api/model.py, 4e7e0d4)."""
  n = len(context) - len(context.rstrip())
  if n:
    continuation, context = context[-n:] + continuation, context[:-n]
  whole = hf_tok.encode(context + continuation)
  ctx = hf_tok.encode(context)
  return ctx, whole[len(ctx):]


@nnx.jit
def _forward_logits(model, ids):
  return model.forward(ids).logits


def _ref_loglik(model, hf_tok, context, continuation, max_length=256):
  """Sum of log p(continuation tokens); the input cut to the model's
  window as `HFLM._loglikelihood_tokens`: (ctx + cont)[-(max + 1):][:-1].

  One unbatched forward of the input alone, jitted at one length: the input
  is followed by pad tokens up to `max_length`, which a causal model's
  logits at the input's positions do not see (no attention mask is
  passed, nothing precedes the input), so they are its logits unpadded
  (an eager forward per input compiled every op at each new length).
  """
  ctx, cont = _ref_pair(hf_tok, context, continuation)
  inp = (ctx + cont)[-(max_length + 1):][:-1]
  ids = np.zeros((1, max_length), np.int32)
  ids[0, :len(inp)] = inp
  logits = _forward_logits(model, jnp.asarray(ids))[0, :len(inp)]
  logp = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32)))
  logp = logp[len(inp) - len(cont):]
  return float(sum(logp[i, t] for i, t in enumerate(cont)))


class FrequencyEntropyDownstreamTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=400,
                                     hidden_size=32, num_layers=2,
                                     init_std=0.2,
                                     max_position_embeddings=256)
    cfg_path = os.path.join(cls.ckpt, "config.json")
    with open(cfg_path) as f:
      hf = json.load(f)
    # Llama 4's pattern (every 4th layer NoPE), cut to two layers: one
    # RoPE layer to select in, the NoPE layer 1 never selected.
    hf["no_rope_layers"] = [1, 0]
    with open(cfg_path, "w") as f:
      json.dump(hf, f)
    cls.wiki = os.path.join(cls.root, "wikitext")
    _write(cls.wiki, "wikitext-103-raw-v1/train-00000-of-00001.parquet",
           {"text": _wiki(0, 8)})
    _write(cls.wiki, "wikitext-103-raw-v1/test-00000-of-00001.parquet",
           {"text": _wiki(10, 8)})
    cls.hs = os.path.join(cls.root, "hellaswag")
    _write(cls.hs, "data/validation-00000-of-00001.parquet", HELLASWAG)
    cls.tqa = os.path.join(cls.root, "truthful_qa")
    _write(cls.tqa, "multiple_choice/validation-00000-of-00001.parquet",
           TRUTHFULQA)
    cls.mmlu = os.path.join(cls.root, "mmlu")
    _write(cls.mmlu, "all/test-00000-of-00001.parquet", MMLU)
    # The few-shot splits: Rowan/hellaswag `data/train-*.parquet`, cais/mmlu
    # `all/dev-*.parquet` (5 rows per subject, subject-sorted). "dev" is not
    # a split name `datasets` infers from file names: cais/mmlu's dataset
    # card declares it (README.md `configs:`, config_name all, data_files
    # split test -> all/test-*, validation, dev -> all/dev-*,
    # auxiliary_train), as written here.
    _write(cls.hs, "data/train-00000-of-00001.parquet", HELLASWAG_TRAIN)
    _write(cls.mmlu, "all/dev-00000-of-00001.parquet", MMLU_DEV)
    with open(os.path.join(cls.mmlu, "README.md"), "w") as f:
      f.write("---\nconfigs:\n- config_name: all\n  data_files:\n"
              "  - split: test\n    path: all/test-*\n"
              "  - split: dev\n    path: all/dev-*\n---\n")

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _config(self):
    c = fe_config.get_config("paper,short")
    c.init_from = self.ckpt
    c.data.path = self.wiki
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.fe.update(probe_len=32, eval_len=16, frame=16, hop=8, num_probe_seqs=2,
                num_eval_seqs=2, alphas=(0.1,), batch_size=2)
    t = c.downstream.tasks
    t.hellaswag.path = self.hs
    t.truthfulqa_mc1.path = ""          # skipped
    t.truthfulqa_mc2.path = self.tqa
    t.mmlu.path = self.mmlu
    c.downstream.max_rows = 2           # `short` caps it at 8; fewer here
    return c

  def test_num_fewshot_reads_the_fewshot_splits(self):
    c = self._config()
    self.assertEqual((c.downstream.num_fewshot, c.downstream.fewshot_seed),
                     (0, 1234))
    self.assertEqual({n: t.fewshot_split for n, t in
                      c.downstream.tasks.items()},
                     {"hellaswag": "train", "truthfulqa_mc1": "",
                      "truthfulqa_mc2": "", "mmlu": "dev"})
    c.downstream.num_fewshot = 2
    items, rows = fe_exp.read_downstream(c)
    self.assertEqual(rows, {"hellaswag:train": 6, "hellaswag:validation": 2,
                            "truthfulqa_mc2:validation": 1, "mmlu:dev": 15,
                            "mmlu:test": 2})
    rec = lambda cols: [{k: v[i] for k, v in cols.items()}
                        for i in range(len(next(iter(cols.values()))))]
    mmlu = rec(MMLU)[:2]
    self.assertEqual(items["mmlu"], fe_exp.mc_data.items(
        mmlu, "mmlu", subset="all", num_fewshot=2,
        fewshot_rows=rec(MMLU_DEV)))
    self.assertIn("Dev question 1 on elementary_mathematics?\nA. c11a\n"
                  "B. c11b\nC. c11c\nD. c11d\nAnswer: D\n\nWhat is 2 + 2?",
                  items["mmlu"][0].context)
    self.assertEqual(items["hellaswag"], fe_exp.mc_data.items(
        rec(HELLASWAG)[:2], "hellaswag", num_fewshot=2,
        fewshot_rows=rec(HELLASWAG_TRAIN), seed=1234))
    self.assertEqual(items["hellaswag"][0].context.count("\n\n"), 2)
    self.assertEqual(items["truthfulqa_mc2"], fe_exp.mc_data.items(
        rec(TRUTHFULQA), "truthfulqa_mc2"))  # zero-shot, as the harness
    c.downstream.tasks.mmlu.fewshot_split = ""
    with self.assertRaisesRegex(ValueError, "fewshot_split is empty"):
      fe_exp.read_downstream(c)

  def test_paper_short_runs_and_reports_recomputable_accuracy(self):
    c = self._config()
    self.assertEqual((c.downstream.rule, c.downstream.alpha), ("a+b", 0.1))
    work = os.path.join(self.root, "run")
    from jaxlab import main  # pylint: disable=g-import-not-at-top
    out = main.run_experiment(c, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    _, _, wiki_rows = fe_exp.probe_texts(c, pretrained.tokenizer(self.ckpt))
    self.assertEqual(res["data"]["rows"], {
        **wiki_rows, "hellaswag:validation": 2, "truthfulqa_mc2:validation": 1,
        "mmlu:test": 2})
    self.assertEqual(out["nope_layers"], [1])   # from the checkpoint

    # The selection, recomputed: rules a+b on the native query FE of the
    # probe windows, never in the NoPE layer.
    model, _ = pretrained.load(self.ckpt)
    self.assertEqual(model.cfg.nope_layers, (1,))
    tok = pretrained.tokenizer(self.ckpt)
    probe, _, _ = fe_exp.probe_texts(c, tok)
    maps = fe.maps_from_qk(fe.capture_qk(model, probe), which="q",
                           pairing="native", frame=16, hop=8,
                           nope_layers=(1,), per_sequence=True)
    native = {k: np.nanmean(v, 0) if v.ndim > 1 else v
              for k, v in maps.items()}
    sel = fe.select_pairs(native, "a+b")
    self.assertFalse(sel[1].any())
    down = out["downstream"]
    self.assertEqual(down["num_selected"], int(sel.sum()))
    self.assertGreater(down["num_selected"], 0)
    models = {"base": model, "att": fe.weighted_rope_model(
        model, fe.alpha_table(sel, 0.1))}

    ctx_hs = [("Removing ice from car: Then, the man writes over the snow "
               "covering the window. Then"),
              ("Home and Garden: How to grow a lawn. Rake the soil. loosen "
               "the top layer")]
    tasks = {
        "hellaswag": [(ctx_hs[i], HELLASWAG["endings"][i], int(
            HELLASWAG["label"][i])) for i in range(2)],
        "mmlu": [(("The following are multiple choice questions (with "
                   f"answers) about {MMLU['subject'][i].replace('_', ' ')}."
                   f"\n\n{MMLU['question'][i]}\n" + "\n".join(
                       f"{l}. {x}" for l, x in zip("ABCD", MMLU["choices"][i]))
                   + "\nAnswer:"), ["A", "B", "C", "D"], MMLU["answer"][i])
                 for i in range(2)],
    }
    tables = {t["id"]: t for t in res["tables"]}
    rows = {r["label"]: r["cells"] for r in tables["downstream"]["rows"]}
    labels = {"base": "no attenuation", "att": "rule a+b, alpha 0.1"}
    self.assertEqual(set(rows), set(labels.values()))
    for key, m in models.items():
      cells = rows[labels[key]]
      for name, qs in tasks.items():
        accs, norms = [], []
        for ctx, choices, gold in qs:
          ll = np.array([_ref_loglik(m, tok.hf, ctx, " " + ch)
                         for ch in choices])
          accs.append(float(np.argmax(ll) == gold))
          norms.append(float(np.argmax(ll / np.array(
              [len(ch) for ch in choices])) == gold))
        self.assertEqual(cells[f"{name}_acc"]["values"], accs, (key, name))
        self.assertEqual(cells[f"{name}_acc"]["seeds"], [0, 1])
        self.assertAlmostEqual(down["tasks"][name][key]["acc"],
                               np.mean(accs))
        if name == "hellaswag":
          self.assertEqual(cells["hellaswag_acc_norm"]["values"], norms)
      # TruthfulQA mc2: the true choices' share of exp(ll).
      ctx = fe_exp.mc_data.truthfulqa_context(TRUTHFULQA["question"][0])
      ll = np.array([_ref_loglik(m, tok.hf, ctx, " " + ch) for ch in
                     TRUTHFULQA["mc2_targets"][0]["choices"]])
      self.assertGreater(len(tok.hf.encode(ctx)), 256)  # it was cut
      p = np.exp(ll) / np.exp(ll).sum()
      self.assertAlmostEqual(cells["truthfulqa_mc2_mc2"]["values"][0],
                             p[0] + p[1], places=5)
    self.assertNotIn("truthfulqa_mc1", down["tasks"])
    comps = [(x["table"], x["column"]) for x in res["comparisons"]
             if x["table"] == "downstream"]
    self.assertCountEqual(comps, [("downstream", k) for k in (
        "hellaswag_acc", "hellaswag_acc_norm", "truthfulqa_mc2_mc2",
        "mmlu_acc")])


if __name__ == "__main__":
  absltest.main()
