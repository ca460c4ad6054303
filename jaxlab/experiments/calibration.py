"""B-calibration (paper N): see jaxlab/configs/calibration.py.

Toy (default), per seed: a tiny LM pre-trained with cross-entropy on
aleatoric QA; B-calibration (M samples at T = 1, B = the last number) and
the learnability probe of `base` (direct prompt " A:"), `rl` (GRPO copy,
reward 1[B(z) = mode]), `dpo` (DPO copy, mode ≻ other) and `cot` (the base
model prompted " T:"). `config.init_from` (preset `smollm2`), per seed: a
subset of `data.short_qa`, M answers sampled through the chat template,
B-calibration under each collapsing function of `config.collapse`.
`config.data.source == "hf"` (preset `paper`: GSM8K as released,
`data.subset=main`, split `test`; `config.data.schema` picks the dataset,
`SCHEMAS`): every row of `pipeline.read_split`, M answers per question
through the checkpoint's chat template (the harness's "Question: ...\n
Answer:" prompt when the tokenizer has none), each cut at the harness's
stop strings. Per dataset (`benchmark`) a semantic B and a grader:
`gsm8k` (openai/gsm8k `main`): the harness's extracted final answer
(`jaxlab.evals.gsm8k`, `config.gsm8k.filter`) and its exact match with the
row's `answer`; `openmathinstruct2` (nvidia/OpenMathInstruct-2): the
final answer math-verify parses, answers one class when math-verify
verifies them equal, correct when it verifies the row's `expected_answer`
(`jaxlab.evals.math_answers`); `trivia_qa` (mandarjoshi/trivia_qa
`rc.nocontext`) and `simpleqa` (basicv8vc/SimpleQA): the reply's short
answer under TriviaQA's normalisation, correct on an exact match with a
reference (`jaxlab.evals.qa_match`). Writes WORKDIR/results.json (table
`calibration`; `data.rows` counts the rows read), reliability.png and
completions.jsonl (every sample, its class and label).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from typing import Any

from flax import nnx
import jax
import numpy as np

from jaxlab import parallel
from jaxlab.data import pipeline
from jaxlab.data import qa_rows
from jaxlab.data import short_qa
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import aleatoric
from jaxlab.evals import calibration as cal
from jaxlab.evals import gsm8k
from jaxlab.evals import math_answers
from jaxlab.evals import qa_match
from jaxlab.evals import uncertainty as unc
from jaxlab.experiments import log as log_lib
from jaxlab.io import pretrained
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import self_generated as sg
from jaxlab.rl import mode_tuning
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib

VARIANTS = ("base", "rl", "dpo", "cot")
LABELS = {"base": "base (direct)", "rl": "RL (GRPO → mode)",
          "dpo": "DPO (mode ≻ other)", "cot": "base + CoT prompt",
          "semantic": "B = extracted answer", "normalized":
          "B = normalised reply", "exact": "B = exact reply string"}
STYLE = {"base": aleatoric.DIRECT, "rl": aleatoric.DIRECT,
         "dpo": aleatoric.DIRECT, "cot": aleatoric.COT}
# Collapsing functions of the pretrained preset: fn(question, reply).
COLLAPSE = {"semantic": short_qa.canonical,
            "normalized": lambda q, t: cal.collapse_normalized("", t),
            "exact": lambda q, t: cal.collapse_exact("", t)}


def evaluate(model, tok, task, style: str, cfg, seed: int) -> dict:
  """B-calibration of `model` in `style` (spec N.2-4) and its probe KL."""
  e, r = cfg.eval, cfg.eval.references_per_question
  rng = np.random.default_rng(50_000 + seed)
  prompts = [task.prompt(q, style, int(rng.integers(len(
      aleatoric.QUESTION_TEMPLATES)))) for q in task.questions]
  samples = cal.sample_answers(
      model, tok, prompts, num_samples=e.num_samples,
      temperature=e.temperature, max_new_tokens=e.max_new_tokens,
      batch_size=e.sample_batch_size, key=jax.random.key(20_000 + seed))
  refs = task.references(r, seed=30_000 + seed)
  data = cal.b_calibration_data(
      [p for p in prompts for _ in range(r)],
      [s for s in samples for _ in range(r)],
      [y for ys in refs for y in ys], collapse="numeric")
  f, y = data["confidence"], data["correct"]
  # p*(prediction | x): the accuracy the plurality has in expectation.
  preds = [cal.b_confidence(cal.collapse_all("", s, "numeric"))[1]
           for s in samples]
  expected = [dict(zip((str(v) for v in q.values), q.probs)).get(p, 0.0)
              for q, p in zip(task.questions, preds)]
  pool = [str(v) for v in task.value_pool]
  pi = np.array([[d.get(v, 0.0) for v in pool] + [1.0 - sum(
      d.get(v, 0.0) for v in pool)] for d in data["distributions"][::r]])
  p = cfg.probe
  probe_kl = cal.probe_heldout_kl(
      model, tok, prompts, pi, [ord("a") + i for i in range(len(pool) + 1)],
      steps=p.steps, batch_size=p.batch_size, lr=p.lr, rank=p.rank,
      alpha=p.alpha, train_frac=p.train_frac, seed=seed)
  return {**cal.calibration_metrics(f, y, num_bins=e.num_bins),
          "expected_accuracy": float(np.mean(expected)),
          "probe_kl": probe_kl, "_conf": f.tolist(), "_correct": y.tolist()}


def run_seed(cfg, seed: int, log) -> tuple[dict, dict]:
  tok = tokenizers.ByteTokenizer()
  task = aleatoric.make_task(**dict(cfg.task))
  base = decoder.Decoder(model_registry.decoder_config(
      cfg.model, vocab_size=tok.vocab_size), rngs=nnx.Rngs(seed))
  p = dict(cfg.pretrain)
  prompts, responses = task.training_pairs(
      (aleatoric.DIRECT, aleatoric.COT), p.pop("samples_per_question"),
      seed=seed)
  data = sg.encode_for_lm(tok, prompts, responses, max_len=p.pop("max_len"))
  loss = runner.train_lm(
      base, data, seed=seed, log_every=50, rules=cfg.sharding_rules,
      mesh=parallel.mesh_from_config(cfg, batch=int(p["batch_size"])),
      **p)[-1]["loss"]
  log(f"seed {seed}: pre-trained, final loss {loss:.3f}")
  out, extra = {}, {"pretrain_loss": loss}
  for v in [v for v in cfg.variants.split(",") if v]:
    model = base
    if v in ("rl", "dpo"):
      model, hist = (mode_tuning.grpo_toward_mode if v == "rl" else
                     mode_tuning.dpo_toward_mode)(base, tok, task, cfg, seed)
      extra.update({"rl_reward": hist} if v == "rl" else
                   {"dpo_last": hist[-1]})
    out[v] = evaluate(model, tok, task, STYLE[v], cfg, seed)
  return out, extra


def run_seed_pretrained(cfg, seed: int, log) -> tuple[dict, dict]:
  model, _ = pretrained.load(cfg.init_from, cache=True)
  tok = pretrained.tokenizer(cfg.init_from)
  qs = short_qa.question_set(tuple(cfg.qa.categories.split(",")),
                             num_questions=cfg.qa.num_questions, seed=seed)
  e, m = cfg.eval, cfg.eval.num_samples
  texts, _ = unc.generate_answers(
      model, tok, [x for x in short_qa.encode_chat(tok, qs, cfg.qa.system)
                   for _ in range(m)], key=jax.random.key(20_000 + seed),
      temperature=e.temperature, max_new_tokens=e.max_new_tokens,
      batch_size=e.sample_batch_size, pad_multiple=e.get("pad_multiple"))
  texts = [texts[i * m:(i + 1) * m] for i in range(len(qs))]
  acc = float(np.mean([short_qa.grade(q, t) for q, ts in zip(qs, texts)
                       for t in ts]))  # of single samples: does the task
  out = {}
  for b in cfg.collapse.split(","):
    d = cal.b_calibration_graded(
        texts, [[COLLAPSE[b](q, t) for t in ts] for q, ts in zip(qs, texts)],
        lambda i, t: short_qa.grade(qs[i], t))
    out[b] = {**cal.calibration_metrics(d["confidence"], d["correct"],
                                        num_bins=e.num_bins),
              "sample_accuracy": acc, "_conf": d["confidence"].tolist(),
              "_correct": d["correct"].tolist()}
  return out, {"examples": texts[:4]}


def gsm8k_collapsers(filter_name: str) -> dict:
  """The collapsing functions of a GSM8K run: the harness's normalised
  extracted answer (`semantic`) and the surface strings."""
  return {"semantic": lambda q, t: gsm8k.answer_class(t, filter_name),
          "normalized": COLLAPSE["normalized"], "exact": COLLAPSE["exact"]}


def _columns(rows, name: str, keys: tuple[str, str], hint: str) -> list:
  rows = [rows[i] for i in range(len(rows))]
  if rows and not set(keys) <= set(rows[0]):
    raise ValueError(f"{name} rows need columns {keys[0]!r} and {keys[1]!r} "
                     f"({hint}); got {sorted(rows[0])}")
  return rows


def gsm8k_questions(rows, question_key: str = "question",
                    answer_key: str = "answer") -> tuple[list[str], list[str]]:
  """(questions, answers) of GSM8K rows as released (`question`, `answer`
  ending in `#### n`; `config.data.question_key` / `answer_key`)."""
  rows = _columns(rows, "GSM8K", (question_key, answer_key),
                  "config.data.question_key / answer_key; as released, "
                  "openai/gsm8k")
  return [r[question_key] for r in rows], [r[answer_key] for r in rows]


def omi2_questions(rows) -> tuple[list[str], list[str]]:
  """(problems, expected answers) of OpenMathInstruct-2 rows as released
  (nvidia/OpenMathInstruct-2: `problem`, `generated_solution`,
  `expected_answer`, `problem_source`)."""
  rows = _columns(rows, "OpenMathInstruct-2", ("problem", "expected_answer"),
                  "as released, nvidia/OpenMathInstruct-2")
  return [r["problem"] for r in rows], [r["expected_answer"] for r in rows]


def qa_questions(rows, schema: str) -> tuple[list[str], list[list[str]]]:
  """(questions, reference answers) of short-answer QA rows as released
  (`jaxlab.data.qa_rows`: `trivia_qa`, `simpleqa`). TriviaQA's references
  are its official evaluation's ground truths, `answer.normalized_aliases`,
  with `value` and `aliases` (equal after normalisation); a row without
  any answer is not asked."""
  items, _ = qa_rows.items(rows, schema)
  refs = [list(x.answers) for x in items]
  if schema == "trivia_qa":
    adapt = qa_rows.ADAPTERS[schema][0]
    kept = [rows[i]["answer"] for i in range(len(rows))
            if adapt(rows[i]).answers]
    refs = [list(dict.fromkeys([*(a.get("normalized_aliases") or []), *r]))
            for a, r in zip(kept, refs)]
  return [x.question for x in items], refs


# config.data.schema: the released datasets a run can read.
SCHEMAS = ("gsm8k", "openmathinstruct2", "trivia_qa", "simpleqa")


@dataclasses.dataclass(frozen=True)
class Benchmark:
  """How a released dataset is asked and scored in a B-calibration run.

  `read(rows, config)` -> (questions, references); `answer_class(text)` is
  the semantic B of one completion (a hashable class, None when it gives
  no answer), or with `equivalent` set a (label, key) pair whose keys are
  compared by `equivalent` (the class is the label of the first sampled
  answer equivalent to it); `is_correct(text, reference)` grades one
  completion.
  """
  read: Callable[[Any, Any], tuple[list[str], list]]
  answer_class: Callable[[str], Any]
  is_correct: Callable[[str, Any], bool]
  equivalent: Callable[[Any, Any], bool] | None = None


def benchmark(config) -> Benchmark:
  """The `Benchmark` of `config.data.schema` (default `gsm8k`)."""
  schema = config.data.get("schema", "gsm8k") or "gsm8k"
  if schema == "gsm8k":
    filt = config.gsm8k.filter
    return Benchmark(
        read=lambda rows, c: gsm8k_questions(
            rows, c.data.get("question_key", "question"),
            c.data.get("answer_key", "answer")),
        answer_class=lambda t: gsm8k.answer_class(t, filt),
        is_correct=lambda t, a: gsm8k.is_correct(t, a, filt))
  if schema == "openmathinstruct2":
    return Benchmark(
        read=lambda rows, c: omi2_questions(rows),
        answer_class=math_answers.answer_class,
        is_correct=lambda t, a: math_answers.is_correct(
            t, math_answers.boxed(a)),
        equivalent=math_answers.equivalent)
  if schema in ("trivia_qa", "simpleqa"):
    return Benchmark(read=lambda rows, c: qa_questions(rows, schema),
                     answer_class=qa_match.answer_class,
                     is_correct=qa_match.is_correct)
  raise ValueError(f"config.data.schema={schema!r}; valid: "
                   f"{', '.join(SCHEMAS)}")


def semantic_classes(texts, bench: Benchmark) -> list:
  """The semantic B of each completion of one question (see `Benchmark`)."""
  if bench.equivalent is None:
    return [bench.answer_class(t) for t in texts]
  reps, out = [], []
  for t in texts:
    got = bench.answer_class(t)
    if got is None:
      out.append(None)
      continue
    label, key = got
    same = next((l for l, k in reps if bench.equivalent(k, key)), None)
    if same is None:
      reps.append((label, key))
    out.append(label if same is None else same)
  return out


def gsm8k_prompts(tok, questions, system: str) -> list:
  """Chat-template ids asking each question (with `system`), or the
  harness's zero-shot "Question: {q}\nAnswer:" text for a tokenizer
  without a chat template (a base model)."""
  if getattr(tok, "chat_template", None):
    return short_qa.encode_chat(tok, questions, system)
  return [f"Question: {q}\nAnswer:" for q in questions]


def system_prompt(config) -> str:
  """The system line a released dataset's questions are asked with."""
  schema = config.data.get("schema", "gsm8k") or "gsm8k"
  if schema == "gsm8k":
    return config.gsm8k.system
  return config.systems[schema]


def run_seed_released(cfg, seed: int, log, model, tok, bench: Benchmark,
                      questions, answers) -> tuple[dict, dict, list[dict]]:
  """B-calibration of `model`'s sampled answers to a released dataset's
  questions: M samples at T each, cut at the harness's stop strings,
  classes under each B of `config.collapse` (`semantic`: the benchmark's
  extracted answer), correct = the benchmark's grade of the plurality
  class's first sample."""
  e, m = cfg.eval, cfg.eval.num_samples
  prompts = gsm8k_prompts(tok, questions, system_prompt(cfg))
  texts, _ = unc.generate_answers(
      model, tok, [x for x in prompts for _ in range(m)],
      key=jax.random.key(20_000 + seed), temperature=e.temperature,
      max_new_tokens=e.max_new_tokens, batch_size=e.sample_batch_size,
      pad_multiple=e.get("pad_multiple"))
  texts = [[gsm8k.cut(t) for t in texts[i * m:(i + 1) * m]]
           for i in range(len(questions))]

  def grade(i: int, text: str) -> bool:
    return bench.is_correct(text, answers[i])

  acc = float(np.mean([grade(i, t) for i, ts in enumerate(texts)
                       for t in ts]))
  collapse = {"semantic": lambda ts: semantic_classes(ts, bench),
              "normalized": lambda ts: [COLLAPSE["normalized"]("", t)
                                        for t in ts],
              "exact": lambda ts: [COLLAPSE["exact"]("", t) for t in ts]}
  out, records = {}, [
      {"seed": seed, "index": i, "question": q, "answer": a,
       "completions": ts, "confidence": {}, "correct": {}, "classes": {}}
      for i, (q, a, ts) in enumerate(zip(questions, answers, texts))]
  for b in cfg.collapse.split(","):
    classes = [collapse[b](ts) for ts in texts]
    d = cal.b_calibration_graded(texts, classes, grade)
    out[b] = {**cal.calibration_metrics(d["confidence"], d["correct"],
                                        num_bins=e.num_bins),
              "sample_accuracy": acc, "_conf": d["confidence"].tolist(),
              "_correct": d["correct"].tolist()}
    for r, cs, c, y in zip(records, classes, d["confidence"], d["correct"]):
      r["classes"][b], r["confidence"][b], r["correct"][b] = (
          cs, float(c), bool(y))
  log(f"seed {seed}: {len(questions)} questions x {m} samples, "
      f"sample accuracy {acc:.3f}")
  return out, {"examples": texts[:4]}, records


COLUMNS = (
    results_lib.Column("smece", "smECE ↓", 3),
    results_lib.Column("binned_ece", "binned ECE (10 bins)", 3),
    results_lib.Column("accuracy", "accuracy", 3),
    results_lib.Column("confidence", "mean B-confidence", 3),
    results_lib.Column("overconfidence", "confidence − accuracy", 3),
    results_lib.Column("expected_accuracy", "p*(plurality)", 3),
    results_lib.Column("probe_kl", "probe KL (held-out)", 3),
    results_lib.Column("sample_accuracy", "accuracy of single samples", 3),
)


def results_tables(per_seed: dict, seeds, cfg=None) -> tuple[list, list]:
  real = cfg is not None and cfg.get("init_from")
  cols = [c for c in COLUMNS if c.key not in (
      ("expected_accuracy", "probe_kl") if real else ("sample_accuracy",))]
  title = (f"B-calibration of {cfg.init_from}'s sampled answers (M samples "
           "at T = 1, graded against the reference answers)" if real else
           "B-calibration of the tiny LM (B = last number, M samples at T = 1)")
  t = results_lib.Table("calibration", title, cols, row_label=(
      "collapsing function B" if real else "model / style"))
  for v, rows in per_seed.items():
    for seed, r in zip(seeds, rows):
      t.add_seed(LABELS[v], seed, {c.key: r[c.key] for c in cols})
  ref = "semantic" if real else "base"
  comps = [results_lib.Comparison("calibration", col, LABELS[a], LABELS[ref])
           for a in per_seed if a != ref and ref in per_seed
           for col in ("smece", "overconfidence")]
  return [t], comps


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  real = config.get("init_from")
  released = config.get("data") is not None and config.data.get("source") == "hf"
  if released and not real:
    raise ValueError("config.data.source='hf' (a released dataset) needs a "
                     "checkpoint: set --config.init_from")
  bench = benchmark(config) if released else None
  if released and config.gsm8k.filter not in gsm8k.FILTERS:
    raise ValueError(f"config.gsm8k.filter={config.gsm8k.filter!r}; valid: "
                     f"{', '.join(gsm8k.FILTERS)}")
  field, valid = ("collapse", COLLAPSE) if real else ("variants", VARIANTS)
  names = [v for v in config[field].split(",") if v]
  if set(names) - set(valid):
    raise ValueError(f"config.{field} has unknown "
                     f"{sorted(set(names) - set(valid))}; valid: "
                     f"{', '.join(valid)}")
  t0 = time.time()
  log = log_lib.logger("calibration")
  per_seed, extra, records, data = {v: [] for v in names}, {}, [], None
  if released:
    rows = pipeline.read_split(config.data)
    questions, answers = bench.read(rows, config)
    data = results_lib.data_provenance(
        config, rows={config.data.split: len(rows)})
    model, _ = pretrained.load(config.init_from, cache=True)
    tok = pretrained.tokenizer(config.init_from)
    log(f"read {len(rows)} rows of {config.data.path} "
        f"({config.data.get('subset', '')}, {config.data.split})")
  for seed in config.seeds:
    if released:
      out, extra[f"seed{seed}"], recs = run_seed_released(
          config, int(seed), log, model, tok, bench, questions, answers)
      records += recs
    else:
      out, extra[f"seed{seed}"] = (run_seed_pretrained if real else
                                   run_seed)(config, int(seed), log)
    for v, r in out.items():
      per_seed[v].append(r)
      log(f"seed {seed}: {v}: " + ", ".join(
          f"{k} {x:.3f}" for k, x in r.items() if not k.startswith("_")))
  plot = cal.plot_reliability_grid(
      {LABELS[v]: (np.concatenate([r["_conf"] for r in rows]),
                   np.concatenate([r["_correct"] for r in rows]))
       for v, rows in per_seed.items()},
      os.path.join(workdir, "reliability.png"),
      num_bootstrap=config.eval.num_bootstrap)
  tables, comparisons = results_tables(per_seed, list(config.seeds), config)
  summary = {f"{v}/{k}_{w}": x for v, rows in per_seed.items()
             for k in rows[0] if not k.startswith("_") for w, x in zip(
                 ("mean", "std"), results_lib.mean_std([r[k] for r in rows]))}
  results = {"summary": summary, "plot": plot, "extra": extra,
             "seeds": [int(s) for s in config.seeds], "per_seed": {
                 v: [{k: x for k, x in r.items() if not k.startswith("_")}
                     for r in rows] for v, rows in per_seed.items()}}
  if released:
    with open(os.path.join(workdir, "completions.jsonl"), "w") as f:
      for r in records:
        f.write(json.dumps(r) + "\n")
  results_lib.write(workdir, "calibration", tables=tables,
                    comparisons=comparisons, extra=results, config=config,
                    start_time=t0, data=data)
  return results
