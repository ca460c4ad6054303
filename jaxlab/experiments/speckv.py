"""Experiment "speckv": draft-based approximate inference (paper M).

Toy presets: per seed, train a target and a smaller draft on word-level
RULER-like prompts (`evals.ruler_task`), then every method answers held-out
prompts at each budget C_max (`approx_inference.evaluate`), plus the
draft/target SpecPC importance correlation. Stages: `seed{N}/{target,
draft}.npz` under `train_key`, `seed{N}/eval.json` under `eval_key`.

`config.init_from` (`smollm2` preset): that checkpoint is the target, its
first `draft_layers` layers the draft (`early_exit.first_layers`), prompts
chat needles in English haystacks (samples = seeds), scored by
`approx_inference.evaluate_shared` (one target prefill per prompt for every
KV method and budget); `eval.json` is cached under `PRETRAINED_PLAN`.

`config.data.source == "hf"` (`paper` preset): LongBench as released
(`run_longbench`): the rows of task `data.subset` (`pipeline.read_split`),
prompts built as LongBench's pred.py builds them with the checkpoint's own
tokenizer (`evals.longbench.prompt_ids`: the task's format, middle
truncation to `task.max_length` tokens, its chat rule), every method of
`methods.names` at every budget through `approx_inference.shared_answers`
(greedy, `task.max_new_tokens` or the task's LongBench length, stopping at
the tokenizer's eos ids), each answer scored with the task's LongBench
metric (`evals.longbench.score`). The draft is the target's first
`draft_layers` layers (0: half of them); `config.draft_from` (a separate
draft checkpoint) is not read yet. `eval.json` (predictions and scores per
row) is cached under `LONGBENCH_PLAN`; results.json's tables have one
record per row (the table mean x 100 is the LongBench task score), `data`
the rows read.
"""

import os
import time
from typing import Any

import numpy as np
from absl import logging
from flax import nnx

from jaxlab.data import pipeline
from jaxlab.data.word_tokenizer import WordTokenizer
from jaxlab.evals import long_context as lc
from jaxlab.evals import longbench as lb
from jaxlab.evals.approx_inference import (
    evaluate, evaluate_shared, importance_correlation, shared_answers)
from jaxlab.evals.ruler_task import held_out, training_arrays
from jaxlab.experiments import results as results_lib
from jaxlab.io import params as params_io
from jaxlab.io import pretrained
from jaxlab.io import stages
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import early_exit
from jaxlab.models import registry as model_registry
from jaxlab.train import runner as runner_lib


def build_models(config, vocab_size: int, seed: int):
  target_cfg = model_registry.decoder_config(config.model,
                                             vocab_size=vocab_size)
  draft_cfg = target_cfg.replace(**dict(config.draft))
  return (decoder_lib.Decoder(target_cfg, rngs=nnx.Rngs(int(seed))),
          decoder_lib.Decoder(draft_cfg, rngs=nnx.Rngs(int(seed) + 1000)))


def train_lm(model, data: dict[str, np.ndarray], config, seed: int
             ) -> list[dict[str, float]]:
  """`runner.train_lm` with the whole `config.optim` and `config.train`,
  on `config.mesh` fitted to the batch (`runner.mesh_for`)."""
  return runner_lib.train_lm(
      model, data, steps=int(config.train.steps),
      batch_size=int(config.train.batch_size), seed=int(seed),
      optim=config.optim, log_every=int(config.train.log_every),
      mesh=runner_lib.mesh_for(config, int(config.train.batch_size)),
      rules=config.sharding_rules)


def train_models(config, tok, seed: int):
  """(target, draft, {"target": curve, "draft": curve}) via `train_lm`."""
  data = training_arrays(tok, config, seed)
  target, draft = build_models(config, tok.vocab_size, seed)
  curves = {name: train_lm(model, data, config, seed)
            for name, model in (("target", target), ("draft", draft))}
  return target, draft, curves


save_params, load_params = params_io.save, params_io.load

# Trained models: both models, the task (not the held-out count), optimizer,
# training, seed; their eval also the methods and the whole task.
TRAIN_FIELDS = ("model", "draft", "task", "optim", "train")
TRAIN_EXCLUDE = ("task.samples",)
EVAL_FIELDS = ("methods", "task")
PLAN = stages.Plan(TRAIN_FIELDS, EVAL_FIELDS, train_exclude=TRAIN_EXCLUDE)
train_key, eval_key = PLAN.train_key, PLAN.eval_key
PRETRAINED_PLAN = stages.Plan(("init_from", "draft_layers"),
                              ("task", "methods"))
# LongBench: the checkpoint and draft; the prompts, methods and rows read.
LONGBENCH_PLAN = stages.Plan(("init_from", "draft_layers"),
                             ("task", "methods", "data"))


def seed_models(config, tok, seed: int, seed_dir: str):
  """Trained (target, draft, curves): `seed_dir/{target,draft}.npz` when
  they were trained with this `train_key`, else trained (and saved)."""

  def train():
    target, draft, curves = train_models(config, tok, seed)
    return {"target": target, "draft": draft}, curves

  def init():
    target, draft = build_models(config, tok.vocab_size, seed)
    return {"target": target, "draft": draft}

  models, curves = stages.cached(os.path.join(seed_dir, "{name}.npz"),
                                 train_key(config, seed), train, kind="npz",
                                 init=init)
  return models["target"], models["draft"], curves


def _col(key, label, digits=1, scale=100, **kw):
  return results_lib.Column(key, label, digits, scale, **kw)


COLUMNS = [_col("exact", "exact %"), _col("part_recall", "part recall %"),
           _col("exact_q_first", "exact q-first %"),
           _col("exact_q_last", "exact q-last %"),
           _col("exact_niah", "exact NIAH %"), _col("exact_vt", "exact VT %"),
           _col("peak_cache", "peak cache", 0, 1.0, spread=False),
           _col("decode_cache", "decode cache", 0, 1.0, spread=False)]
PRETRAINED_COLUMNS = [_col("correct", "correct %"),
                      _col("agree", "= full answer %")]
LONGBENCH_COLUMNS = [_col("score", "LongBench score", 2),
                     _col("agree", "= full answer %")]
COMPARISONS = (("speckv", "snapkv", "exact"),
               ("speckv", "snapkv", "exact_q_first"),
               ("specpc", "random", "exact"), ("specpc", "last_n", "exact"),
               ("speckv_pc", "speckv", "exact"),
               ("speckv", "snapkv", "correct"),
               ("speckv_oracle", "snapkv", "correct"),
               ("specpc", "snapkv", "correct"), ("specpc", "last_n", "correct"),
               ("snapkv", "streaming", "correct"),
               ("speckv", "snapkv", "score"), ("specpc", "snapkv", "score"),
               ("specpc", "last_n", "score"), ("snapkv", "streaming", "score"))


def _tables(config, per_seed, columns, caption, get):
  """One `budget_{b}` table per budget; rows = methods, seeds = records."""
  tables, comparisons, names = [], [], set(config.methods.names)
  cols = {c.key for c in columns}
  for b in config.methods.budgets:
    table = results_lib.Table(f"budget_{b}", caption(b), columns,
                              row_label="method")
    for rec in per_seed:
      for name in config.methods.names:
        table.add_seed(name, rec["seed"], get(rec, name, str(b)))
    tables.append(table)
    comparisons += [results_lib.Comparison(table.id, col, a, ref)
                    for a, ref, col in COMPARISONS
                    if a in names and ref in names and col in cols]
  return tables, comparisons


def run_pretrained(config, workdir: str, t0: float) -> dict[str, Any]:
  t = config.task

  def evaluate_all():
    target, _ = pretrained.load(config.init_from, cache=True)
    draft = early_exit.first_layers(target, int(config.draft_layers))
    tok = pretrained.tokenizer(config.init_from)
    n = int(t.samples)
    examples = [lc.chat_needle_example(
        tok, length=int(t.length), depth=(i + 0.5) / n, digits=int(t.digits),
        rng=np.random.default_rng([int(t.data_seed), i])) for i in range(n)]
    recs = evaluate_shared(target, draft, config, tok, examples)
    return [dict(r, seed=i, depth=ex.depth, answer=ex.answer)
            for i, (r, ex) in enumerate(zip(recs, examples))]

  per_seed = stages.cached(os.path.join(workdir, "eval.json"),
                           PRETRAINED_PLAN.eval_key(config, 0), evaluate_all)
  tables, comparisons = _tables(
      config, per_seed, PRETRAINED_COLUMNS,
      lambda b: (f"C_max = {b} of {t.length} prompt tokens, "
                 f"{config.init_from} (draft: its first "
                 f"{config.draft_layers} layers); seeds = needle samples"),
      lambda rec, name, b: {k: rec[k][name][b] for k in ("correct", "agree")})
  extra = {"seeds": [r["seed"] for r in per_seed], "per_seed": per_seed}
  results_lib.write(workdir, "speckv_smollm2", tables=tables,
                    comparisons=comparisons, extra=extra, config=config,
                    start_time=t0)
  return extra


def draft_of(config, target):
  """The draft: the target's first `config.draft_layers` layers (0: half)."""
  n = int(config.get("draft_layers", 0)) or max(1, target.cfg.num_layers // 2)
  return early_exit.first_layers(target, n), n


def longbench_record(tok, task: str, index: int, row, ids: list[int],
                     truncated: bool, answers, stop_ids) -> dict[str, Any]:
  """One row's record: every method's decoded prediction and its LongBench
  score per budget, and whether it equals the full cache's prediction."""
  pred = {name: {b: lb.answer_text(tok, task, toks, stop_ids)
                 for b, toks in per_b.items()}
          for name, per_b in answers.items()}
  full = next(iter(pred["full"].values())) if "full" in pred else None
  classes = row.get("all_classes") or ()
  return {
      "seed": int(index), "_id": row.get("_id", ""),
      "length": row.get("length"), "prompt_tokens": len(ids),
      "truncated": bool(truncated), "answers": list(row["answers"]),
      "all_classes": list(classes), "pred": pred,
      "score": {name: {b: lb.score(task, p, row["answers"], classes)
                       for b, p in per_b.items()}
                for name, per_b in pred.items()},
      "agree": {name: {b: float(p == full) for b, p in per_b.items()}
                for name, per_b in pred.items()} if full is not None else {}}


def run_longbench(config, workdir: str, t0: float) -> dict[str, Any]:
  """LongBench as released (module docstring): rows of task `data.subset`,
  every method and budget, LongBench's metric per answer."""
  task = lb.check_task(config.data.subset)
  split = config.data.get("split", "") or "test"
  rows = pipeline.read_split(config.data, split)
  if not len(rows):
    raise ValueError(f"data.path={config.data.path!r}, data.subset={task!r}"
                     f": split {split!r} has no rows")
  t = config.task
  max_new = int(t.max_new_tokens) or lb.max_new_tokens(task)
  batch = max(1, int(t.batch_size))
  if config.get("draft_from"):
    logging.warning("speckv: draft_from=%r is not read yet; the draft is the "
                    "target's first draft_layers layers (0: half)",
                    config.draft_from)

  def evaluate_all():
    target, _ = pretrained.load(config.init_from, cache=True)
    draft, n_layers = draft_of(config, target)
    tok = pretrained.tokenizer(config.init_from)
    stops = tuple(getattr(tok, "eos_ids", ())) or (tok.eos_id,)
    built = [lb.prompt_ids(tok, task, rows[i], max_length=int(t.max_length))
             for i in range(len(rows))]
    # Batches of similar lengths (left-padded together); records by row.
    order = sorted(range(len(rows)), key=lambda i: len(built[i][0]))
    recs = {}
    for k in range(0, len(order), batch):
      chunk = order[k:k + batch]
      answers = shared_answers(target, draft, config,
                               [built[i][0] for i in chunk], max_new=max_new,
                               eos_id=tok.eos_id, stop_ids=stops)
      for j, i in enumerate(chunk):
        recs[i] = longbench_record(
            tok, task, i, rows[i], built[i][0], built[i][1],
            {n: {b: toks[j] for b, toks in per_b.items()}
             for n, per_b in answers.items()}, stops)
    return [dict(recs[i], draft_layers=n_layers)
            for i in range(len(rows))]

  per_seed = stages.cached(os.path.join(workdir, "eval.json"),
                           LONGBENCH_PLAN.eval_key(config, 0), evaluate_all)
  n_draft = per_seed[0]["draft_layers"]
  tables, comparisons = _tables(
      config, per_seed, LONGBENCH_COLUMNS,
      lambda b: (f"LongBench {task} ({len(rows)} rows; seeds = rows): "
                 f"C_max = {b}, {config.init_from} (draft: its first "
                 f"{n_draft} layers); score = LongBench's "
                 f"{lb.METRICS[task].__name__} of each answer"),
      lambda rec, name, b: {"score": rec["score"][name][b],
                            "agree": rec["agree"].get(name, {}).get(
                                b, float("nan"))})
  task_scores = {
      name: {str(int(b)): lb.task_score(
          task, [r["pred"][name][str(int(b))] for r in per_seed],
          [r["answers"] for r in per_seed],
          per_seed[0]["all_classes"])
             for b in config.methods.budgets}
      for name in config.methods.names}
  extra = {"task": task, "metric": lb.METRICS[task].__name__,
           "draft": {"init_from": config.init_from,
                     "first_layers": n_draft},
           "max_new_tokens": max_new, "task_scores": task_scores,
           "seeds": [r["seed"] for r in per_seed], "per_seed": per_seed}
  results_lib.write(workdir, "speckv_longbench", tables=tables,
                    comparisons=comparisons, extra=extra, config=config,
                    start_time=t0,
                    data=results_lib.data_provenance(
                        config, rows={split: len(rows)}))
  return extra


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  if config.get("data") and config.data.get("source", "") == "hf":
    return run_longbench(config, workdir, t0)
  if config.get("init_from"):
    return run_pretrained(config, workdir, t0)
  tok = WordTokenizer()
  examples = held_out(tok, config)
  per_seed = []
  for seed in config.seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    def evaluate_seed(seed=seed, seed_dir=seed_dir):
      target, draft, curves = seed_models(config, tok, seed, seed_dir)
      # Timed (a second call): bench kv_compression reads seed 0's latencies.
      metrics = evaluate(target, draft, config, tok, examples, timing=True)
      rho = importance_correlation(target, draft, examples, config)
      return {"seed": int(seed), "learning_curves": curves,
              "methods": metrics, "spearman": rho}
    per_seed.append(stages.cached(os.path.join(seed_dir, "eval.json"),
                                  eval_key(config, seed), evaluate_seed))
  tables, comparisons = _tables(
      config, per_seed, COLUMNS,
      lambda b: (f"C_max = {b} of {config.task.length} prompt tokens "
                 f"({len(examples)} held-out prompts)"),
      lambda rec, name, b: {c.key: rec["methods"][name][b][c.key]
                            for c in COLUMNS})
  corr = results_lib.Table(
      "importance", "Spearman correlation of draft vs target SpecPC token "
      "importance", [results_lib.Column("spearman", "Spearman ρ", 3)],
      row_label="pair")
  for rec in per_seed:
    corr.add_seed("draft vs target", rec["seed"],
                  {"spearman": rec["spearman"]})
  tables.append(corr)
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed}
  results_lib.write(workdir, "speckv", tables=tables, comparisons=comparisons,
                    extra=extra, config=config, start_time=t0)
  return extra
