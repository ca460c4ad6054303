"""PMC miniatures (spec B, "CPU-only miniature"): see jaxlab/configs/pmc.py.

1. Lottery machine: pi_t(forget colours) with and without retain data.
2. Tiny LM: memorise a TOFU-like fact set (+ a real-authors split), then
   unlearn its forget split with PMC and the baselines (GA, GD, NPO, SimNPO,
   IDK, DPO) from the same start; report UQ, utility (retain, world, real
   authors), forget recall, leakage (greedy, two prefilling attacks,
   sampling), the multiple-choice least-likely-option attack and the
   log-prob drift of the forget values in unrelated text
   (`jaxlab.evals.unlearning`).
The methods and their evaluation are `jaxlab.experiments.pmc.methods`.
Writes WORKDIR/results.json, lottery.png, table.md (rendered from it).

With `data.source="hf"` (the `paper` preset) the unlearning part runs on
TOFU as released from the checkpoint `init_from` instead
(`run_unlearning_tofu`): PMC's UQ / utility and TOFU's own model utility /
forget quality per method; results.json's `data.rows` counts the rows read
per released subset.
"""

from __future__ import annotations

import os
import time

import numpy as np

from jaxlab.analysis import figures
from jaxlab.data import tofu as tofu_data
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import facts as facts_lib
from jaxlab.data.synthetic import real_authors as real_authors_lib
from jaxlab.evals import tofu as tofu_evals
from jaxlab.experiments import log as log_lib
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib
from jaxlab.io import stages
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.experiments.pmc.methods import (  # pylint: disable=unused-import
    METRICS, dpo_arrays, lottery_runs, pretrained_model, prompts,
    unlearn_config, value_pool)
from jaxlab.experiments.pmc import methods as _methods
from jaxlab.experiments.pmc.methods import evaluate as _eval
from jaxlab.experiments.pmc.methods import unlearn_and_eval as _unlearn_and_eval
from jaxlab.train import runner

def run_lottery(cfg, workdir: str) -> dict:
  """Final forget / top-colour mass per seed; WORKDIR/lottery.png."""
  out = {}
  runs = lottery_runs(cfg.lottery)
  n_retain = cfg.lottery.retain_colours
  with figures.figure(os.path.join(workdir, "lottery.png"), figsize=(10, 3.5),
                      ncols=2) as (_, ax):
    for (tag, recs), a in zip(runs.items(), ax):
      finals = []
      for s, h in recs:
        forget_mass = h[:, n_retain:].sum(-1)
        finals.append((forget_mass[-1], h[-1].max()))
        a.plot(forget_mass if tag == "with_retain" else h.max(-1),
               label=f"seed {s}")
      out[f"lottery_{tag}_per_seed"] = [
          {"seed": int(s), "forget_mass": float(f[0]),
           "top_colour": float(f[1])} for (s, _), f in zip(recs, finals)]
      out[f"lottery_{tag}_forget_mass"] = float(np.mean([f[0]
                                                         for f in finals]))
      out[f"lottery_{tag}_top_colour"] = float(np.mean([f[1]
                                                        for f in finals]))
    ax[0].set(title="with retain set: mass on forget colours",
              xlabel="round", ylabel="pi_t(forget)")
    ax[1].set(title="no retain set: mass of the top colour",
              xlabel="round", ylabel="max_c pi_t(c)")
    for a in ax:
      a.legend()
  return out


# What the pre-trained model and a method's evaluation depend on: a run
# whose config differs in these fields recomputes that stage (new file
# names: WORKDIR/pretrained_seedS_<digest>.npz, seedS_<method>_<digest>.json),
# one that does not reloads it, so a killed run resumes per method and a run
# with another unlearning budget reuses the pre-trained model.
_PRETRAIN_FIELDS = ("model", "facts", "pretrain", "num_real_authors")
_METHOD_FIELDS = _PRETRAIN_FIELDS + ("unlearn", "eval", "probes",
                                     "idk_answer")


def _cached_json(workdir: str, name: str, stage_key: dict, compute):
  """(value, reloaded?) of the `jaxlab.io.stages` JSON stage
  WORKDIR/NAME_<digest of stage_key>.json."""
  path = stages.keyed_path(workdir, name, stage_key, "json")
  reused = stages.is_current(path, stage_key)
  return stages.cached(path, stage_key, compute), reused


def run_unlearning(cfg, workdir: str) -> dict:
  tok = tokenizers.ByteTokenizer()
  fs = facts_lib.make_fact_set(**dict(cfg.facts))
  authors = real_authors_lib.real_authors_qa(cfg.num_real_authors)
  methods = [m for m in cfg.methods.split(",") if m]
  per_seed = {m: [] for m in ["original"] + methods}
  extra = {}
  log = log_lib.logger("pmc")
  for seed in cfg.seeds:
    base, final_loss, reused = pretrained_model(
        cfg, tok, fs.train + authors, seed, workdir, _PRETRAIN_FIELDS)
    extra[f"pretrain_final_loss_seed{seed}"] = final_loss
    ev, _ = _cached_json(
        workdir, f"seed{seed}_original",
        stages.key(cfg, _PRETRAIN_FIELDS + ("eval", "probes"),
                   seed=int(seed)),
        lambda: {"eval": _eval(base, tok, fs, cfg, seed, authors=authors)})  # pylint: disable=cell-var-from-loop
    key = stages.key(cfg, _METHOD_FIELDS, seed=int(seed))
    per_seed["original"].append(ev["eval"])
    log(f"seed {seed}: pretrained (loss {final_loss:.4f}"
        f"{', reloaded' if reused else ''}): {ev['eval']}")
    for method in methods:
      res, reused = _cached_json(
          workdir, f"seed{seed}_{method}", key,
          lambda m=method, s=seed, b=base: _unlearn_and_eval(m, s, b, cfg,
                                                             tok, fs,
                                                             authors))
      per_seed[method].append(res["eval"])
      extra.update({f"{k}_seed{seed}": v for k, v in res["extra"].items()})
      log(f"seed {seed}: {method}{' (reloaded)' if reused else ''}: "
          f"{res['eval']}")
  return _summary(cfg, per_seed, extra)


def _summary(cfg, per_seed: dict, extra: dict, **more) -> dict:
  """Each method's mean and std over seeds of every METRICS key, the extra
  values, `more`, and the per-seed records."""
  summary = {}
  for m, rows in per_seed.items():
    for k in METRICS:
      vals = [r[k] for r in rows if k in r]
      if vals:
        summary[f"{m}/{k}_mean"], summary[f"{m}/{k}_std"], _ = (
            results_lib.mean_std(vals))
  summary.update(extra)
  summary.update(more)
  summary["per_seed"] = {"seeds": [int(s) for s in cfg.seeds],
                         "methods": per_seed}
  return summary


# The TOFU run's settings (`config.tofu`; the `paper` preset sets them):
# PMC's prompt formatting (unlearning/encoding.py: the chat template with the
# Llama-3.2-Instruct system prompt and date, else the Phi-1.5 tags), whether
# to compute TOFU's own metrics on its `*_perturbed` tasks (their first
# `eval_size` rows, TOFU's ds_size), and the retain model (`retain_from`, a
# checkpoint trained on the retain split only) forget quality compares to.
TOFU_DEFAULTS = dict(system_prompt="You are a helpful assistant.",
                     date_string="10 Apr 2025", question_start_tag="Question: ",
                     question_end_tag="\n", answer_tag="Answer: ",
                     use_chat_template=True, tofu_metrics=True, eval_size=300,
                     retain_from="")


def tofu_settings(cfg) -> dict:
  """`TOFU_DEFAULTS` updated with `config.tofu`."""
  out = dict(TOFU_DEFAULTS)
  sec = cfg.get("tofu", None)
  if sec is not None:
    bad = sorted(set(sec.keys()) - set(out))
    if bad:
      raise ValueError(f"config.tofu has unknown {bad}; valid: "
                       f"{', '.join(sorted(out))}")
    out.update(dict(sec))
  return out


def tofu_prompt_fn(tok, ts: dict):
  """PMC's question -> prompt of `tok` (`jaxlab.data.tofu.prompt_fn`)."""
  return tofu_data.prompt_fn(
      tok, system_prompt=ts["system_prompt"],
      chat_kwargs={"date_string": ts["date_string"]} if ts["date_string"]
      else {}, question_start_tag=ts["question_start_tag"],
      question_end_tag=ts["question_end_tag"], answer_tag=ts["answer_tag"],
      use_chat_template=ts["use_chat_template"])


def _artifacts(res: dict) -> dict:
  """`res` without its "_artifacts" (written beside results.json)."""
  return {k: v for k, v in res.items() if k != "_artifacts"}


def run_unlearning_tofu(cfg, workdir: str) -> tuple[dict, dict]:
  """PMC and the baselines on TOFU as released from `config.init_from`.

  `config.data` names TOFU (`data.subset` the forget split; its retain
  split, paraphrases, world facts and real authors are read beside it,
  `jaxlab.data.tofu.read`); the model and its tokenizer come from
  `config.init_from` (`jaxlab.io.pretrained`). Each seed evaluates the
  loaded model ("original") and unlearns a clone of it with every method
  (`pmc_methods.unlearn_and_eval` with `evaluate_tofu`). Per stage,
  WORKDIR/seedS_<method>_<digest>.json caches the metrics and the
  generations / per-item arrays they come from (a killed run resumes); the
  loaded model's (greedy) evaluation is one stage for every seed,
  WORKDIR/original_<digest>.json. Returns (summary as `run_unlearning`'s,
  rows read per subset).
  """
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  ts = tofu_settings(cfg)
  tasks = ({t: sub for t, (sub, _, _) in tofu_evals.TASKS.items()}
           if ts["tofu_metrics"] else None)
  eval_size = int(ts["eval_size"]) or None
  max_rows = int(cfg.data.get("max_rows", 0) or 0)
  cap = min(x for x in (eval_size, max_rows or None) if x) if (
      eval_size or max_rows) else None
  splits = tofu_data.read(cfg.data, perturbed_tasks=tasks, max_rows=cap)
  log = log_lib.logger("pmc")
  log(f"TOFU rows read: {splits.rows}")
  dtype = cfg.model.get("dtype", "float32") if "model" in cfg else "float32"
  base, _ = pretrained.load(cfg.init_from, dtype=dtype)
  tok = pretrained.tokenizer(cfg.init_from)
  prompt_fn = tofu_prompt_fn(tok, ts)
  retain_forget = None
  if ts["retain_from"] and "forget" in splits.perturbed:
    retain_forget = stages.cached(  # what forget quality compares with
        os.path.join(workdir, "tofu_retain_model_forget.json"),
        stages.key(cfg, ("init_from", "data", "eval", "tofu")),
        lambda: _retain_forget_stats(ts["retain_from"], dtype, tok, splits,
                                     cfg, prompt_fn))
  methods = [m for m in cfg.methods.split(",") if m]
  per_seed = {m: [] for m in ["original"] + methods}
  extra = {}
  # The retain model enters no stage: forget quality is computed below from
  # each stage's per-item losses, so adding `tofu.retain_from` to a finished
  # run neither unlearns nor evaluates again.
  fields = ("init_from", "data", "unlearn", "eval", "tofu")
  no_retain = ("tofu.retain_from",)
  evaluate_fn = lambda m: _methods.evaluate_tofu(m, tok, splits, cfg,
                                                 prompt_fn)
  for seed in cfg.seeds:
    for method in ["original"] + methods:
      if method == "original":
        # The loaded model's evaluation is greedy, the same for every seed:
        # one stage (no seed), repeated in each seed's row.
        name, key = "original", stages.key(
            cfg, fields, exclude=no_retain + (
                "unlearn.lr", "unlearn.steps", "unlearn.lam", "unlearn.beta",
                "unlearn.num_samples", "unlearn.temperature"))
        compute = lambda: {"eval": evaluate_fn(base), "extra": {}}
      else:
        name = f"seed{seed}_{method}"
        key = stages.key(cfg, fields, exclude=no_retain, seed=int(seed))
        compute = lambda m=method, s=seed: _unlearn_and_eval(  # pylint: disable=g-long-lambda
            m, s, base, cfg, tok, splits, (), prompt_fn=prompt_fn,
            evaluate_fn=evaluate_fn)
      res, reused = _cached_json(workdir, name, key, compute)
      ev = _artifacts(res["eval"])
      if retain_forget is not None:
        ev.update(_methods.forget_quality_of(res["eval"], retain_forget))
      per_seed[method].append(ev)
      extra.update({f"{k}_seed{seed}": v for k, v in res["extra"].items()})
      log(f"seed {seed}: {method}{' (reloaded)' if reused else ''}: {ev}")
  return (_summary(cfg, per_seed, extra, tofu_rows=dict(splits.rows)),
          dict(splits.rows))


def _retain_forget_stats(retain_from, dtype, tok, splits, cfg, prompt_fn):
  """The retain model's per-item losses on the forget task (TOFU's
  `retain_result`), with the checkpoint it came from."""
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  model, _ = pretrained.load(retain_from, dtype=dtype)
  st = _methods.tofu_task_stats(model, tok, splits, cfg, prompt_fn,
                                generate=False, only=("forget",))["forget"]
  return {"retain_from": retain_from,
          **{k: np.asarray(v).tolist() for k, v in st.items()}}


METHOD_LABELS = {"original": "original", "pmc": "PMC", "ga": "GA",
                 "gd": "GD", "npo": "NPO", "simnpo": "SimNPO", "idk": "IDK",
                 "dpo": "DPO"}
# The prefilling attacks: evaluate_unlearning's prefill_modes "answer_prefix"
# (eval.prefix_words=3) and "fixed" (the paper's "The answer is: ").
TABLE_COLUMNS = (
    ("uq", "UQ"), ("utility", "utility"),
    ("recall_forget", "forget recall ↓"),
    ("recall_forget_paraphrased", "paraphrased forget recall ↓"),
    ("recall_retain", "retain recall"), ("recall_world", "world recall"),
    ("recall_real_authors", "real-authors recall"),
    ("leak_greedy", "leak greedy ↓"),
    ("leak_prefill_fixed", "leak, prefilled \"The answer is: \" ↓"),
    ("leak_prefill", "leak, prefilled with the answer's first 3 words ↓"),
    ("leak_sampling", "leak sampling ↓"),
    ("mc_least_likely_acc", "MC least-likely attack acc. ↓"),
    ("drift", "Δ log p of forget values in unrelated text (nats/token, "
              "not × 100)"))
# The TOFU run's table: PMC's metrics, then TOFU's own (model utility and,
# with a retain model, forget quality: a p-value, shown as is).
TOFU_COLUMNS = (
    ("uq", "UQ"), ("utility", "utility"),
    ("recall_forget", "forget recall ↓"),
    ("recall_forget_paraphrased", "paraphrased forget recall ↓"),
    ("recall_retain", "retain recall (400-row subsample)"),
    ("recall_world", "world-facts recall"),
    ("recall_real_authors", "real-authors recall"),
    ("model_utility", "TOFU model utility"),
    ("forget_quality", "TOFU forget quality (KS p-value)"))
PERCENT_ALREADY = ("uq", "utility")  # pmc.unlearning_quality / utility
NOT_PERCENT = ("drift", "forget_quality")  # shown as is


def results_tables(out: dict, table_id: str = "unlearning",
                   caption: str = "Tiny-LM TOFU-like unlearning",
                   columns=TABLE_COLUMNS) -> tuple[list, list]:
  """The docs' tables and claimed comparisons from `run`'s results."""
  tables = []
  for tag, label in (("with_retain", "with retain set"),
                     ("no_retain", "without retain set")):
    recs = out.get(f"lottery_{tag}_per_seed")
    if recs is None:
      continue
    if not tables:
      tables.append(results_lib.Table(
          "lottery", "Lottery machine (spec B.7) at the last round",
          [results_lib.Column("forget_mass", "mass on forget colours", 3),
           results_lib.Column("top_colour", "mass of the top colour", 3)],
          row_label="setting"))
    for r in recs:
      tables[0].add_seed(label, r["seed"], {"forget_mass": r["forget_mass"],
                                            "top_colour": r["top_colour"]})
  comparisons = []
  ps = out.get("per_seed")
  if ps:
    t = results_lib.Table(
        table_id, f"{caption} (values × 100)",
        [results_lib.Column(k, lab, decimals=(
            4 if k == "forget_quality" else 2 if k in NOT_PERCENT else 1),
                            scale=1 if k in PERCENT_ALREADY + NOT_PERCENT
                            else 100)
         for k, lab in columns], row_label="method")
    for m, rows in ps["methods"].items():
      for seed, r in zip(ps["seeds"], rows):
        t.add_seed(METHOD_LABELS.get(m, m), seed,
                   {k: r[k] for k, _ in columns if k in r})
    tables.append(t)
    methods = ps["methods"]
    cmp = lambda col, a, b: results_lib.Comparison(  # pylint: disable=g-long-lambda
        table_id, col, METHOD_LABELS[a], METHOD_LABELS[b])
    wanted = [("recall_retain", "pmc", "original"),
              ("recall_world", "pmc", "original"),
              ("utility", "pmc", "original"),
              ("utility", "pmc", "ga"), ("utility", "pmc", "gd"),
              ("utility", "pmc", "npo"), ("recall_forget", "pmc", "npo"),
              ("leak_prefill", "pmc", "idk"),
              ("utility", "pmc", "dpo"), ("recall_forget", "pmc", "dpo"),
              ("drift", "pmc", "ga"), ("drift", "pmc", "npo"),
              ("mc_least_likely_acc", "pmc", "ga"),
              ("mc_least_likely_acc", "pmc", "npo"),
              ("leak_prefill_fixed", "pmc", "npo"),
              ("utility", "pmc", "simnpo"), ("utility", "pmc", "idk"),
              ("recall_forget", "pmc", "gd"),
              ("recall_forget", "pmc", "simnpo"),
              ("recall_forget", "pmc", "idk"),
              ("forget_quality", "pmc", "original"),
              ("forget_quality", "pmc", "npo"),
              ("forget_quality", "pmc", "gd")]
    keys = {k for k, _ in columns}
    has = lambda m, c: m in methods and all(c in r for r in methods[m])
    comparisons = [cmp(c, a, b) for c, a, b in wanted
                   if c in keys and has(a, c) and has(b, c)]
  return tables, comparisons


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  parts = [p for p in config.parts.split(",") if p]
  bad = set(parts) - {"lottery", "unlearn"}
  if bad:
    raise ValueError(f"config.parts has unknown {sorted(bad)}; valid: "
                     "lottery, unlearn")
  t0 = time.time()
  results = {}
  source = config.get("data", {}).get("source", "")
  if source in ("grain", "tfds") and "unlearn" in parts:
    raise ValueError(f"pmc reads TOFU's subsets with data.source='hf' (a Hub "
                     f"id or a local copy of its files), not {source!r}")
  tofu = source == "hf"
  if tofu and "unlearn" in parts:
    if not config.get("init_from"):
      raise ValueError(
          "pmc on TOFU unlearns a checkpoint: set --config.init_from (the "
          "`smollm2` preset: the SmolLM2 fine-tuned on the authors, see "
          "jaxlab/configs/pmc.py)")
    if not config.data.get("path"):
      raise ValueError("pmc on TOFU reads --config.data.path (locuslab/TOFU "
                       "or a local copy of its files, e.g. written by "
                       "`python -m jaxlab.data.synthetic.tofu_authors DIR`)")
  data = None
  if "lottery" in parts:
    results.update(run_lottery(config, workdir))
  if "unlearn" in parts:
    if tofu:  # TOFU as released from a checkpoint
      summary, rows = run_unlearning_tofu(config, workdir)
      results.update(summary)
      data = results_lib.data_provenance(config, rows=rows)
    else:  # the synthetic miniature
      results.update(run_unlearning(config, workdir))
  tables, comparisons = results_tables(
      results, config.get("table_id", "unlearning"),
      config.get("table_caption", "Tiny-LM TOFU-like unlearning"),
      columns=TOFU_COLUMNS if tofu else TABLE_COLUMNS)
  res = results_lib.write(workdir, "pmc", tables=tables,
                          comparisons=comparisons, extra=results,
                          config=config, start_time=t0, data=data)
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write("\n".join(report.render_table(res, t.id, name="pmc")
                       for t in tables))
  return results
