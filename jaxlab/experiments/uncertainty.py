"""Paper J: which uncertainty flags an LM's wrong answers? (see its config)

Per seed: one greedy answer per question decides correctness, R answers
sampled at T = 1 give log-likelihoods and clusters (`evals.uncertainty`),
every estimator (`analysis.hallucination`) is scored by AUROC / AURAC. Toy:
a tiny LM trained on `data.synthetic.facts`; `config.init_from` (preset
`smollm2`): a chat model on `data.short_qa`. Writes results.json, a plot.

`config.data.source == "hf"` (preset `paper`): questions of a released QA
set (`data.schema`: trivia_qa / nq_open / squad / svamp, one adapter each
in `jaxlab.data.qa_rows`) from `data.eval_split`, asked with the SE code's
few-shot prompt (`qa_prompt.num_few_shot` examples drawn from the first
`qa_prompt.pool` rows of `data.split`); answers cut at the SE code's stop
strings; the greedy answer is correct when its best SQuAD F1 against the
references is >= 50 % (the SE code's "squad" metric); clusters by
bidirectional entailment with an LM prompted as the SE code's
EntailmentLlama (`cluster.entailment="lm"`, the checkpoint of
`cluster.entailment_from`, default `init_from`) or, as in the miniature,
normalised string match (`"string"`). `data.rows` counts the rows read.
"""

from __future__ import annotations

import os
import time

from flax import nnx
import jax
import numpy as np

from jaxlab.analysis import hallucination
from jaxlab.data import pipeline
from jaxlab.data import qa_rows
from jaxlab.data import short_qa
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import facts as facts_lib
from jaxlab.evals import uncertainty as unc
from jaxlab.experiments import log as log_lib
from jaxlab.io import pretrained
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import self_generated as sg
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib

score_questions = hallucination.score_questions  # the old name
last_word = unc.last_word
KEYS = {"last_word": last_word, "full": None}


def _questions(fs: facts_lib.FactSet, counts: dict, seed: int):
  rng, out = np.random.default_rng(seed), []
  for group, pool in (("known", fs.retain), ("paraphrased",
                                             fs.retain_paraphrased),
                      ("heldout", fs.forget)):
    idx = rng.choice(len(pool), min(counts[group] or len(pool), len(pool)),
                     replace=False)
    out += [(group, pool[i]) for i in sorted(idx)]
  return out


def toy_questions(cfg, seed: int, log):
  """(model, tokenizer, prompts, (group, question, truth) per prompt, answer
  keys, grader, setup) of the tiny facts LM."""
  tok = tokenizers.ByteTokenizer()
  fs = facts_lib.make_fact_set(**dict(cfg.facts), seed=seed)
  model = decoder.Decoder(model_registry.decoder_config(
      cfg.model, vocab_size=tok.vocab_size), rngs=nnx.Rngs(seed))
  train = fs.retain + fs.world  # the held-out people are never seen
  p = dict(cfg.pretrain)
  data = sg.encode_for_lm(tok, [facts_lib.qa_prompt(x.question) for x in
                                train], [x.answer for x in train],
                          max_len=p.pop("max_len"))
  logs = (runner.train_lm(model, data, seed=seed, log_every=50, **p)
          if p["steps"] > 0 else [{"loss": float("nan")}])  # 0: untrained
  log(f"seed {seed}: trained, final loss {logs[-1]['loss']:.4f}")
  qs = _questions(fs, dict(cfg.questions), seed)
  ent = unc.StringMatchEntailment(cfg.cluster.mode, KEYS[cfg.cluster.key])
  return (model, tok, [facts_lib.qa_prompt(x.question) for _, x in qs],
          [(g, x.question, x.value) for g, x in qs], [ent.key] * len(qs),
          lambda i, g: ent.key(g) == ent.key(qs[i][1].value),
          {"final_loss": logs[-1]["loss"]})


def pretrained_questions(cfg, seed: int, log):
  """The same for `cfg.init_from` on `data.short_qa` (chat template)."""
  model, _ = pretrained.load(cfg.init_from, cache=True)
  tok = pretrained.tokenizer(cfg.init_from)
  qs = short_qa.question_set(tuple(cfg.qa.categories.split(",")),
                             num_questions=cfg.qa.num_questions, seed=seed)
  return (model, tok, short_qa.encode_chat(tok, qs, cfg.qa.system),
          [(x.category, x.text, x.answers[0]) for x in qs],
          [lambda t, x=x: short_qa.cluster_key(x, t) for x in qs],
          lambda i, g: short_qa.grade(qs[i], g), {})


def run_seed(cfg, seed: int, log) -> dict:
  build = pretrained_questions if cfg.get("init_from") else toy_questions
  model, tok, prompts, info, keys, grade, setup = build(cfg, seed, log)
  s, key = cfg.sampling, jax.random.key(10_000 + seed)
  out = unc.sample_and_cluster(
      model, tok, prompts, keys, num_samples=s.num_samples,
      key=key, temperature=s.temperature,
      max_new_tokens=s.max_new_tokens, batch_size=s.batch_size,
      strict=cfg.cluster.strict, pad_multiple=s.get("pad_multiple"))
  ids, greedy = out["ids"], out["greedy"]
  correct = np.array([grade(i, g) for i, g in enumerate(greedy)])
  metrics, residual = hallucination.evaluate(
      out["loglik"], ids, correct, cfg, jax.random.fold_in(key, 2), seed)
  setup.update(unc.group_summary(correct, [g for g, _, _ in info], ids),
               qtn_eigenstate_residual=residual)
  log(f"seed {seed}: {setup}; AUROC " + ", ".join(
      f"{k} {v['auroc']:.3f}" for k, v in metrics.items()))
  return {"seed": seed, "setup": setup, "metrics": metrics, "examples": [
      dict(zip(("group", "question", "truth"), info[i]), greedy=greedy[i],
           samples=out["texts"][i], ids=ids[i].tolist())
      for i in range(0, len(prompts), max(1, len(prompts) // 6))]}


# The SE code's stop sequences ("default"): an answer ends at the first.
STOP = ("\n\n\n\n", "\n\n\n", "\n\n", "\n", "Question:", "Context:",
        "Answer:")
ENTAILMENT = ("lm", "string")


def read_qa(cfg, log):
  """(few-shot prompt prefix per seed fn, eval items, rows read) of the
  released QA set of `cfg.data`."""
  schema = cfg.data.get("schema", "trivia_qa")
  rows = pipeline.read_split(cfg.data, cfg.data.eval_split)
  items, dropped = qa_rows.items(rows, schema)
  pool_rows = pipeline.read_split(cfg.data, cfg.data.split,
                                  max_rows=int(cfg.qa_prompt.pool))
  pool, _ = qa_rows.items(pool_rows, schema)
  if len(pool) < cfg.qa_prompt.num_few_shot:
    raise ValueError(f"qa_prompt.num_few_shot={cfg.qa_prompt.num_few_shot}"
                     f" examples wanted, {len(pool)} answerable rows in the "
                     f"first qa_prompt.pool={cfg.qa_prompt.pool} rows of "
                     f"{cfg.data.split!r}")
  log(f"read {len(rows)} {schema} rows of {cfg.data.eval_split!r} "
      f"({dropped} without an answer dropped), {len(pool_rows)} of "
      f"{cfg.data.split!r} for the few-shot prompt")

  def few_shot(seed: int) -> str:
    idx = np.random.default_rng(seed).choice(
        len(pool), int(cfg.qa_prompt.num_few_shot), replace=False)
    return qa_rows.few_shot_prompt([pool[i] for i in sorted(idx)])
  return few_shot, items, {cfg.data.eval_split: len(rows),
                           cfg.data.split: len(pool_rows)}


def run_seed_hf(cfg, seed: int, log, model, tok, entail, few_shot, items
                ) -> dict:
  """One seed of the released-data run (module docstring)."""
  s, key = cfg.sampling, jax.random.key(10_000 + seed)
  prefix = few_shot(seed)
  prompts = [qa_rows.prompt(x, prefix) for x in items]
  kw = dict(max_new_tokens=s.max_new_tokens, batch_size=s.batch_size,
            pad_multiple=s.get("pad_multiple"), stop=STOP)
  greedy, _ = unc.generate_answers(model, tok, prompts, key=key,
                                   temperature=0.0, **kw)
  r = s.num_samples
  texts, ll = unc.generate_answers(
      model, tok, [p for p in prompts for _ in range(r)],
      key=jax.random.fold_in(key, 1), temperature=s.temperature, **kw)
  texts = [[t.strip() for t in texts[i * r:(i + 1) * r]]
           for i in range(len(items))]
  if entail is None:
    ids = np.stack([unc.semantic_ids(ts, unc.StringMatchEntailment(
        cfg.cluster.mode), strict=cfg.cluster.strict) for ts in texts])
  else:
    ids = unc.lm_semantic_ids(texts, [x.question for x in items], entail,
                              strict=cfg.cluster.strict)
  correct = np.array([unc.squad_correct(g.strip(), x.answers)
                      for g, x in zip(greedy, items)])
  metrics, residual = hallucination.evaluate(
      ll.reshape(len(items), r), ids, correct, cfg,
      jax.random.fold_in(key, 2), seed)
  setup = unc.group_summary(correct, [cfg.data.get("schema", "")] *
                            len(items), ids)
  setup["qtn_eigenstate_residual"] = residual
  log(f"seed {seed}: {setup}; AUROC " + ", ".join(
      f"{k} {v['auroc']:.3f}" for k, v in metrics.items()))
  return {"seed": seed, "setup": setup, "metrics": metrics, "examples": [
      {"question": x.question, "truth": list(x.answers), "greedy": g,
       "correct": bool(c), "samples": ts, "ids": i.tolist()}
      for x, g, c, ts, i in zip(items, greedy, correct, texts, ids)]}


COLUMNS = (("auroc", "AUROC ↑"), ("aurac", "AURAC ↑"),
           ("acc80", "accuracy @ 80 % answered ↑"),
           ("acc90", "accuracy @ 90 % answered ↑"))
SETUP_COLUMNS = (
    ("acc_known", "greedy accuracy: known"), ("acc_paraphrased", "known, new "
     "paraphrase"), ("acc_heldout", "held-out (confabulated)"),
    ("incorrect_frac", "incorrect fraction"), ("clusters_known", "clusters / "
     "question: known"), ("clusters_heldout", "clusters / question: held-out"))


def results_tables(per_seed: list, cfg) -> tuple[list, list]:
  real = cfg.get("init_from")
  est = results_lib.Table(
      "estimators", f"Hallucination detection on {real or 'the tiny facts LM'}"
      " (positive = greedy answer incorrect)",
      [results_lib.Column(k, lab, 3) for k, lab in COLUMNS] +
      [results_lib.Column(k, f"AUROC 90 % bootstrap {w}", 3, spread=False)
       for k, w in (("auroc_lo", "low"), ("auroc_hi", "high"))],
      row_label="estimator")
  hf = cfg.get("data") is not None and cfg.data.get("source") == "hf"
  cols = SETUP_COLUMNS if not real else [
      ("accuracy", "greedy accuracy (all)"), ("incorrect_frac",
                                              "incorrect fraction"),
      ("clusters_mean", "clusters / question")] + ([] if hf else [
          (f"acc_{c}", f"greedy accuracy: {c}")
          for c in cfg.qa.categories.split(",")])
  setup = results_lib.Table("setup", f"What {real or 'the tiny LM'} knows",
                            [results_lib.Column(k, lab, 2)
                             for k, lab in cols], row_label="model")
  for rec in per_seed:
    for est_name, m in rec["metrics"].items():
      est.add_seed(est_name, rec["seed"], {k: m[k] for k in (
          "auroc", "aurac", "acc80", "acc90", "auroc_lo", "auroc_hi")})
    setup.add_seed(real or "tiny LM", rec["seed"],
                   {k: rec["setup"][k] for k, _ in cols if k in rec["setup"]})
  plus = f"SE_R+ λ={cfg.compare_lambda:g}"
  comps = [results_lib.Comparison("estimators", col, a, b)
           for col in ("auroc", "aurac")
           for a, b in ((plus, "SE"), (plus, "SE_R (Rényi-2)"),
                        ("SE_R (Rényi-2)", "SE"), ("SE", "NE"))]
  return [setup, est], comps


PLOT_ROWS = ("NE", "DSE", "SE", "SE_R (Rényi-2)")


def plot_rejection(per_seed: list, cfg, path: str) -> str:
  rows = PLOT_ROWS + (f"SE_R+ λ={cfg.compare_lambda:g}",)
  return unc.plot_rejection(
      {n: [rec["metrics"][n]["curve"] for rec in per_seed] for n in rows},
      path, f"Rejection accuracy (mean of {len(per_seed)} seed(s))")


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  log = log_lib.logger("uncertainty")
  if config.cluster.key not in KEYS:
    raise ValueError(f"config.cluster.key must be one of {sorted(KEYS)}, got "
                     f"{config.cluster.key!r}")
  if config.compare_lambda not in tuple(config.lambdas):
    raise ValueError(f"config.compare_lambda={config.compare_lambda} must be "
                     f"one of config.lambdas {tuple(config.lambdas)}")
  hf = config.get("data") is not None and config.data.get("source") == "hf"
  data = None
  if hf:
    if not config.get("init_from"):
      raise ValueError("config.data.source='hf' needs a checkpoint: set "
                       "--config.init_from")
    if config.cluster.get("entailment", "lm") not in ENTAILMENT:
      raise ValueError(f"config.cluster.entailment="
                       f"{config.cluster.entailment!r}; valid: "
                       f"{', '.join(ENTAILMENT)}")
    few_shot, items, rows = read_qa(config, log)
    data = results_lib.data_provenance(config, rows=rows)
    model, _ = pretrained.load(config.init_from)
    tok = pretrained.tokenizer(config.init_from)
    entail = None
    if config.cluster.entailment == "lm":
      src = config.cluster.get("entailment_from", "") or config.init_from
      emodel, etok = ((model, tok) if src == config.init_from else
                      (pretrained.load(src)[0], pretrained.tokenizer(src)))
      entail = unc.LMEntailment(
          emodel, etok, max_new_tokens=config.cluster.max_new_tokens,
          batch_size=config.sampling.batch_size,
          pad_multiple=config.sampling.get("pad_multiple"))
    per_seed = [run_seed_hf(config, int(s), log, model, tok, entail,
                            few_shot, items) for s in config.seeds]
  else:
    per_seed = [run_seed(config, int(s), log) for s in config.seeds]
  tables, comps = results_tables(per_seed, config)
  plot = plot_rejection(per_seed, config,
                        os.path.join(workdir, "rejection_accuracy.png"))
  summary = {f"{name}/{k}_{w}": v for name in per_seed[0]["metrics"]
             for k in ("auroc", "aurac") for w, v in zip(
                 ("mean", "std"), results_lib.mean_std(
                     [r["metrics"][name][k] for r in per_seed])[:2])}
  extra = {"summary": summary, "per_seed": per_seed, "plot": plot,
           "quantiles": unc.QUANTILES.tolist()}
  results_lib.write(workdir, "uncertainty", tables=tables, comparisons=comps,
                    extra=extra, config=config, start_time=t0, data=data)
  return extra


def plot_from_results(results_json: str, path: str) -> str:
  """The rejection-accuracy plot of a committed (possibly merged) results
  file: `python -m jaxlab.experiments.uncertainty RESULTS.json OUT.png`."""
  import json  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  with open(results_json) as f:
    res = json.load(f)
  per_seed = [rec for e in res["extra"].get("per_run", [res["extra"]])
              for rec in e["per_seed"]]
  return plot_rejection(per_seed, ml_collections.ConfigDict(res["config"]),
                        path)


if __name__ == "__main__":
  import sys  # pylint: disable=g-import-not-at-top
  print(plot_from_results(sys.argv[1], sys.argv[2]))
