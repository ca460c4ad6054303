"""MathFimer miniature (spec H, "CPU miniature"): see jaxlab/configs/mathfimer.py.

Three disjoint problem pools: `num_fim` fine solutions train the FIM model
(the paper's FIM model is trained on other data than the one it expands),
`num_train` problems give the coarse / expanded / fine solver data, and
`num_test` are held out. Writes WORKDIR/results.json and table.md: held-out
exact match and steps per solution of solvers trained on coarse / expanded
(rounds 1..k) / fine data, the fraction of correct computation steps in each
training set, and per round the insertion and rejection rates and the
fraction of inserted steps that are correct arithmetic. The pieces are
`jaxlab.objectives.fim` and `jaxlab.experiments.mathfimer.solver`.

`config.data.source == "hf"` (preset `paper`; `run_hf`): the paper's
pipeline on released data with the checkpoint of `config.init_from` (and
its tokenizer) as FIM model and solvers. The FIM model is fine-tuned on
`fim.masks_per_solution` random masks of each NuminaMath-CoT solution
(`config.fim_data`; spec H.2-4, PSM with the `<|fim_*|>` sentinels, loss
on the middle only); it expands the `data.split` solutions of GSM8K or
MATH (`data.schema`: "gsm8k" / "math", `jaxlab.data.math_rows`) for
`fim.rounds` rounds (every gap, eta filter; H.6-7); one solver per data
set (original, each round) is fine-tuned from `init_from` and answers the
`data.eval_split` questions greedily (prompt "Question: {q}\nAnswer:", cut
at the harness's stop strings). GSM8K answers are checked as
lm-evaluation-harness does (`jaxlab.evals.gsm8k`, strict-match and
flexible-extract; `accuracy` = flexible), MATH answers with math-verify
(`jaxlab.evals.math_answers`). Writes results.json (tables `solvers`,
`expansion`; `data.rows` counts the rows read from each split and from
the FIM data) and solver_outputs.jsonl (every completion and its grade).
"""

from __future__ import annotations

import json
import os
import time

import ml_collections
import numpy as np

from jaxlab import parallel
from jaxlab.data import math_rows
from jaxlab.data import pipeline
from jaxlab.data import tokenizers
from jaxlab.evals import gsm8k
from jaxlab.evals import math_answers
from jaxlab.experiments import log as log_lib
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib
from jaxlab.io import params as params_io
from jaxlab.io import pretrained
from jaxlab.objectives import fim
from jaxlab.objectives import self_generated as sg
from jaxlab.experiments.mathfimer.solver import (  # pylint: disable=unused-import
    ROUND_KEYS, Progress, correct_step_frac, evaluate_solver, expand_rounds,
    heldout_fim_accuracy, init_model, inserted_steps, majority_exact_match,
    problem_pools, solver_prompt, train_fim_model, train_solver)
from jaxlab.train import runner  # pylint: disable=unused-import

def _add_stats(summary: dict, prefix: str, recs, keys) -> None:
  """summary[f"{prefix}/{k}_mean" / "_std"]: mean ± sample std over recs."""
  for k in keys:
    (summary[f"{prefix}/{k}_mean"], summary[f"{prefix}/{k}_std"],
     _) = results_lib.mean_std([r[k] for r in recs])


def run(config, workdir: str) -> dict:
  if config.get("data") is not None and config.data.get("source") == "hf":
    return run_hf(config, workdir)
  os.makedirs(workdir, exist_ok=True)
  cfg = config
  d = dict(cfg.problems)
  fim_pool, train, test, coarse = problem_pools(cfg)
  t0 = time.time()
  log = log_lib.logger("mathfimer")
  split = lambda p: fim.split_steps(p.solution,  # pylint: disable=g-long-lambda
                                    min_chars=cfg.fim.min_step_chars)
  fine_items = [(p.question, split(p)) for p in train]
  coarse_items = [(p.question, split(p)) for p in coarse]
  fim_items = [(p.question, split(p)) for p in fim_pool]
  fmt = fim.FimFormat(order=cfg.fim.get("order", "psm"))
  rows: dict[str, list[dict]] = {}
  expansion: dict[int, list[dict]] = {}  # FIM seed -> per-round stats
  fim_models: dict[int, dict] = {}  # FIM seed -> held-out FIM accuracy
  base_cfg = cfg.get("base_train")
  base_box: dict[str, object] = {}
  base_row = None

  def get_base():
    """The pretrained base model (`base_train.steps` > 0), trained once on
    the FIM pool's fine solutions (the paper's models start from pretrained
    math LMs); every FIM model and solver starts from a copy of it. Saved
    as WORKDIR/base_model.npz (a resumed run loads it)."""
    if not base_cfg or int(base_cfg.steps) <= 0:
      return None
    if "model" not in base_box:
      btok = tokenizers.ByteTokenizer()
      fmt.add_to_tokenizer(btok)
      path = os.path.join(workdir, "base_model.npz")
      # What the base depends on: a saved base of another config is refused.
      meta = {"base_train": base_cfg.to_dict(), "model": cfg.model.to_dict(),
              "problems": d, "min_step_chars": cfg.fim.min_step_chars}
      if params_io.exists(path):
        base_box["model"] = init_model(btok, cfg, int(d["seed"]))
        params_io.load(base_box["model"], path, meta)
        log(f"base model loaded from {path}")
      else:
        base_box["model"], logs = train_solver(btok, cfg, int(d["seed"]),
                                               fim_items, section=base_cfg)
        params_io.save(base_box["model"], path, meta)
        log(f"base model trained on {len(fim_items)} fine solutions; loss "
            f"curve {[(x['step'], round(x['loss'], 3)) for x in logs]}")
    return base_box["model"]

  for seed in cfg.seeds:
    # Each finished stage (expanded data sets, each solver's result) is
    # saved, so a stopped run resumes at the next stage (spec-size runs are
    # long on shared CPUs).
    progress = Progress(workdir, seed)
    tok = tokenizers.ByteTokenizer()
    fmt.add_to_tokenizer(tok)

    def solve(name, items):
      res = progress.get(f"solver/{name}")
      if res is None:
        solver, logs = train_solver(tok, cfg, seed, items, base=get_base())
        res = evaluate_solver(solver, tok, cfg, test)
        res["final_train_loss"] = logs[-1]["loss"]
        res["train_steps_per_solution"] = float(np.mean([len(s)
                                                         for _, s in items]))
        res["train_correct_step_frac"] = correct_step_frac(items)
        progress.put(**{f"solver/{name}": res})
      log(f"seed {seed}: solver on {name}: {res}")
      return res

    # The base (coarse) solver first: it needs no FIM model and says early
    # whether the solver learns the arithmetic at all. The fine ceiling
    # (`fim.fine_ceiling`) comes last, after the expanded solvers.
    if base_cfg and int(base_cfg.steps) > 0:
      base_row = progress.get("solver/base")
      if base_row is None:
        base_row = evaluate_solver(get_base(), tok, cfg, test)
        base_row["train_steps_per_solution"] = float(np.mean(
            [len(s) for _, s in fim_items]))
        base_row["train_correct_step_frac"] = correct_step_frac(fim_items)
        progress.put(**{"solver/base": base_row})
      log(f"seed {seed}: base model (before SFT): {base_row}")
      rows.setdefault("base", []).append(base_row)
    solve("coarse", coarse_items)
    # `fim.seed` >= 0: one FIM model (and expanded data) of that seed for
    # every solver seed, kept in WORKDIR/progress_seed<fim.seed>.json; its
    # expansion rows are reported only by the run whose seed it is, so runs
    # merged by `jaxlab.experiments.report --add` count it once.
    fim_seed = int(cfg.fim.get("seed", -1))
    fim_seed = seed if fim_seed < 0 else fim_seed
    fim_progress = progress if fim_seed == seed else Progress(workdir,
                                                                fim_seed)
    if fim_progress.get("datasets") is None:
      # 1. FIM model on the fine solutions.
      fim_model, fim_counts = train_fim_model(
          cfg, tok, fmt, fim_items, fim_seed, get_base(),
          log=lambda m: log(f"seed {seed}: {m}"))
      # 2. Expand the coarse data k rounds (stats per round).
      fill = fim.make_fill_fn(fim_model, tok,
                              max_new_tokens=cfg.fim.max_new_tokens)
      fim_heldout = heldout_fim_accuracy(
          fill, fmt, [(p.question, split(p)) for p in test], seed=fim_seed)
      log(f"seed {seed}: FIM model on held-out masks: {fim_heldout}")
      expanded, hist = expand_rounds(
          coarse_items, fill, fmt, cfg, log=lambda m: log(f"seed {seed}: {m}"))
      datasets = {"coarse": coarse_items, **expanded}
      datasets["fine"] = fine_items  # the ceiling: the removed steps back
      fim_progress.put(datasets=datasets, hist=hist, fim_counts=fim_counts,
                       fim_heldout=fim_heldout)
    datasets = {k: [(q, list(s)) for q, s in v]
                for k, v in fim_progress.get("datasets").items()}
    fim_counts = fim_progress.get("fim_counts")
    if fim_seed in cfg.seeds:
      expansion[fim_seed] = fim_progress.get("hist")
      if fim_progress.get("fim_heldout") is not None:
        fim_models[fim_seed] = fim_progress.get("fim_heldout")
    # 3. Solvers (on the rounds in `fim.solve_rounds`; empty = every round).
    keep = {f"expanded_r{r}" for r in cfg.fim.get("solve_rounds", ())}
    for name, items in datasets.items():
      if keep and name.startswith("expanded_r") and name not in keep:
        continue
      if name == "fine" and not cfg.fim.get("fine_ceiling", True):
        continue
      rows.setdefault(name, []).append(solve(name, items))
  summary = {"fim_examples": fim_counts["examples"],
             "chance_exact_match": majority_exact_match(train, test),
             "fim_skipped_short": fim_counts["skipped_short"],
             "num_fim": len(fim_pool), "num_train": len(train), "num_test": len(test),
             "seeds": list(cfg.seeds)}
  for name, rs in rows.items():
    _add_stats(summary, name, rs, rs[0])
  for r in range(cfg.fim.rounds if expansion else 0):
    _add_stats(summary, f"round{r + 1}", [h[r] for h in expansion.values()],
               ROUND_KEYS)
  if fim_models:
    _add_stats(summary, "fim", list(fim_models.values()),
               ("heldout_middle_exact", "heldout_middle_correct"))
  tables, comparisons = results_tables(list(cfg.seeds), rows, expansion,
                                       summary["chance_exact_match"],
                                       fim_models=fim_models)
  res = results_lib.write(workdir, "mathfimer", tables=tables,
                          comparisons=comparisons, extra=summary,
                          config=config, start_time=t0)
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write("\n".join(report.render_table(res, tid, name="mathfimer")
                       for tid in ("solvers", "expansion")))
  return summary


ROW_LABELS = {"coarse": "coarse", "fine": "fine (ceiling)",
              "base": "base model, before SFT (fine-format FIM pool)"}


def results_tables(seeds, rows, expansion, chance: float | None = None, *,
                   fim_models: dict[int, dict] | None = None
                   ) -> tuple[list, list]:
  """The docs' solver, expansion and FIM tables (per seed), comparisons.

  `expansion`: {FIM seed: per-round stats} (or a list zipped with `seeds`).
  `chance`: held-out EM of the majority answer, shown as a reference row.
  `fim_models`: {FIM seed: `heldout_fim_accuracy` dict}; a `fim` table
  only when given.
  """
  col = results_lib.Column
  solver = results_lib.Table(
      "solvers", "Solvers trained on coarse / expanded / fine data",
      [col("train_steps_per_solution", "steps / solution", 2),
       col("train_correct_step_frac", "correct steps %", 1, 100),
       col("exact_match", "held-out EM %", 1, 100),
       col("gen_steps", "generated steps", 2)], row_label="solver trained on")
  label = lambda n: ROW_LABELS.get(  # pylint: disable=g-long-lambda
      n, n.replace("expanded_r", "expanded, round ")
      if n.startswith("expanded_r") else n)
  for name, rs in rows.items():
    for seed, r in zip(seeds, rs):
      solver.add_seed(label(name), seed, {c.key: r[c.key]
                                          for c in solver.columns})
  if chance is not None:
    for seed in seeds:
      solver.add_seed("majority answer (chance)", seed,
                      {"exact_match": chance})
  rounds = results_lib.Table(
      "expansion", "Expansion rounds",
      [col("insertion_rate", "insertion rate", 2),
       col("rejection_rate", "rejection rate (similar + empty)", 2),
       col("inserted_correct_frac", "inserted steps correct", 2)],
      row_label="round")
  pairs = (expansion.items() if isinstance(expansion, dict)
           else zip(seeds, expansion))
  for seed, hist in pairs:
    for r, st in enumerate(hist):
      rounds.add_seed(str(r + 1), seed, {c.key: st[c.key]
                                         for c in rounds.columns})
  comparisons = [results_lib.Comparison("solvers", "exact_match", label(n),
                                        "coarse")
                 for n in rows if n not in ("coarse", "base")]
  tables = [solver, rounds]
  if fim_models:
    fim_table = results_lib.Table(
        "fim", "FIM model on held-out masks (one step of each held-out "
        "fine solution)",
        [col("heldout_middle_exact", "fill = masked step %", 1, 100),
         col("heldout_middle_correct", "fill is a correct step %", 1, 100)],
        row_label="FIM model")
    for seed, h in fim_models.items():
      fim_table.add_seed("held-out masks", seed, {c.key: h[c.key]
                                                  for c in fim_table.columns})
    tables.append(fim_table)
  return tables, comparisons


# -- the paper's run on released data (config.data.source == "hf") ---------

# The harness's zero-shot GSM8K prompt (lm_eval/tasks/gsm8k/gsm8k.yaml
# doc_to_text), used for every solver's SFT example and evaluation.
SOLVER_PROMPT = "Question: {question}\nAnswer:"


def hf_steps(item: math_rows.MathItem, cfg) -> list[str]:
  """The solution's steps (spec H.1) of a released row's item."""
  return fim.split_steps(item.lines, min_chars=cfg.fim.min_step_chars)


def grade(completion: str, item: math_rows.MathItem, schema: str
          ) -> dict[str, bool]:
  """The checks of one cut completion: GSM8K's strict / flexible exact
  match (`accuracy` = flexible-extract), or MATH's math-verify."""
  if schema == "gsm8k":
    strict = gsm8k.is_correct(completion, item.solution, gsm8k.STRICT)
    flexible = gsm8k.is_correct(completion, item.solution, gsm8k.FLEXIBLE)
    return {"em_strict": strict, "em_flexible": flexible,
            "accuracy": flexible}
  return {"accuracy": math_answers.is_correct(completion, item.solution)}


def _read(data_cfg, split: str, schema: str, cache_dir: str = ""):
  if cache_dir and not data_cfg.get("cache_dir"):
    data_cfg = ml_collections.ConfigDict({**data_cfg.to_dict(),
                                          "cache_dir": cache_dir})
  return math_rows.items(pipeline.read_split(data_cfg, split), schema)


def _fine_tune(cfg, section, data: dict, seed: int):
  """A fresh copy of `init_from` trained by the trainer's masked next-token
  update on `data` (`runner.train_lm`); (model, loss log)."""
  model, _ = pretrained.load(cfg.init_from)
  kw = dict(section)
  kw.pop("max_len")
  logs = runner.train_lm(
      model, {k: data[k] for k in ("inputs", "targets", "loss_mask")},
      seed=seed, log_every=max(1, int(kw["steps"]) // 10),
      mesh=parallel.mesh_from_config(cfg, batch=int(kw["batch_size"])),
      rules=cfg.get("sharding_rules"), **kw)
  return model, logs


def run_hf(config, workdir: str) -> dict:
  """MathFimer on released data from `init_from` (module docstring)."""
  os.makedirs(workdir, exist_ok=True)
  cfg, t0 = config, time.time()
  log = log_lib.logger("mathfimer")
  if not cfg.get("init_from"):
    raise ValueError("config.data.source='hf' needs a checkpoint: set "
                     "--config.init_from (the FIM model and solvers start "
                     "from it)")
  schema = cfg.data.get("schema", "gsm8k")
  if schema not in ("gsm8k", "math"):
    raise ValueError(f"config.data.schema={schema!r}: the expanded and "
                     "evaluated data is 'gsm8k' or 'math'")
  if not cfg.data.get("eval_split"):
    raise ValueError("config.data.eval_split is empty: name the split the "
                     "solvers are evaluated on (GSM8K / MATH: 'test')")
  cache = cfg.data.get("cache_dir", "") or ""
  train = _read(cfg.data, cfg.data.split, schema)
  test = _read(cfg.data, cfg.data.eval_split, schema)
  fim_rows = _read(cfg.fim_data, cfg.fim_data.split, "numina", cache)
  rows = {cfg.data.split: len(train), cfg.data.eval_split: len(test)}
  fim_prov = results_lib.data_provenance(
      ml_collections.ConfigDict({"data": cfg.fim_data.to_dict()}),
      rows={cfg.fim_data.split: len(fim_rows)})
  log(f"read {len(fim_rows)} FIM rows ({cfg.fim_data.path}), "
      f"{len(train)} + {len(test)} {schema} rows ({cfg.data.path})")
  tok = pretrained.tokenizer(cfg.init_from)
  fmt = fim.FimFormat(order=cfg.fim.get("order", "psm"))
  # Qwen2.5 tokenizers have the sentinels as single tokens; others read
  # them as text (the format is the same string either way).
  single = {t: len(tok.encode(t)) == 1 for t in fmt.sentinels}
  fim_items = [(x.question, hf_steps(x, cfg)) for x in fim_rows]
  train_items = [(x.question, hf_steps(x, cfg)) for x in train]
  e = cfg.eval
  solvers: dict[str, list[dict]] = {}
  expansion: dict[int, list[dict]] = {}
  fim_info: dict[str, dict] = {}
  records = []
  for seed in (int(s) for s in cfg.seeds):
    # 1. The FIM model (H.2-4).
    examples, counts = fim.build_fim_dataset(
        fim_items, rounds=cfg.fim.masks_per_solution, seed=seed)
    enc = fim.encode_batch(fmt, tok, examples, max_len=cfg.fim_train.max_len,
                           context_weight=cfg.fim.get("context_weight", 0.0))
    fim_model, logs = _fine_tune(cfg, cfg.fim_train, enc, seed)
    fim_info[f"seed{seed}"] = {**counts, "truncated": enc["truncated"],
                               "loss": logs}
    log(f"seed {seed}: FIM model on {counts['examples']} examples "
        f"({enc['truncated']} truncated); losses {logs}")
    # 2. Expansion rounds (H.6-7), every gap of a round in one batch.
    fill = fim.make_fill_fn(fim_model, tok,
                            max_new_tokens=cfg.fim.max_new_tokens,
                            batch_size=e.get("batch_size", 64))
    datasets, current, hist = {"original": train_items}, train_items, []
    for r in range(cfg.fim.rounds):
      steps, st = fim.expand(current, fill, rounds=1, fmt=fmt,
                             eta=cfg.fim.eta,
                             first_gap=cfg.fim.get("first_gap", False))
      current = [(q, s) for (q, _), s in zip(current, steps)]
      datasets[f"expanded_r{r + 1}"] = current
      hist.append(st[0])
      log(f"seed {seed}: expansion round {r + 1}: {st[0]}")
    expansion[seed] = hist
    del fim_model, fill
    # 3. One solver per data set, evaluated on the eval split (H.8).
    prompts = [SOLVER_PROMPT.format(question=x.question) for x in test]
    for name, its in datasets.items():
      data = sg.encode_for_lm(
          tok, [SOLVER_PROMPT.format(question=q) for q, _ in its],
          [" " + "\n".join(st) for _, st in its],
          max_len=cfg.solver_train.max_len)
      solver, logs = _fine_tune(cfg, cfg.solver_train, data, seed)
      outs = [gsm8k.cut(o) for o in sg.generate_text(
          solver, tok, prompts, max_new_tokens=e.max_new_tokens,
          batch_size=e.get("batch_size", 64))]
      grades = [grade(o, x, schema) for o, x in zip(outs, test)]
      res = {k: float(np.mean([g[k] for g in grades])) for k in grades[0]}
      res.update(
          gen_steps=float(np.mean([len(fim.split_steps(
              o, min_chars=cfg.fim.min_step_chars)) for o in outs])),
          train_steps_per_solution=float(np.mean([len(st) for _, st in its])),
          final_train_loss=logs[-1]["loss"])
      solvers.setdefault(name, []).append(res)
      records += [{"seed": seed, "solver": name, "index": i,
                   "question": x.question, "reference": x.solution,
                   "completion": o, **g}
                  for i, (x, o, g) in enumerate(zip(test, outs, grades))]
      log(f"seed {seed}: solver on {name}: {res}")
      del solver
  with open(os.path.join(workdir, "solver_outputs.jsonl"), "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  tables, comparisons = hf_tables(list(cfg.seeds), solvers, expansion,
                                  schema)
  summary = {"schema": schema, "seeds": [int(s) for s in cfg.seeds],
             "fim_sentinels_single_token": single, "fim": fim_info,
             "fim_data": fim_prov}
  for name, rs in solvers.items():
    _add_stats(summary, name, rs, rs[0])
  for r in range(cfg.fim.rounds):
    _add_stats(summary, f"round{r + 1}", [h[r] for h in expansion.values()],
               ("insertion_rate", "rejection_rate", "steps_after"))
  rows[f"fim_data:{cfg.fim_data.split}"] = len(fim_rows)
  res = results_lib.write(workdir, "mathfimer", tables=tables,
                          comparisons=comparisons, extra=summary,
                          config=config, start_time=t0,
                          data=results_lib.data_provenance(config, rows=rows))
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write("\n".join(report.render_table(res, tid, name="mathfimer")
                       for tid in ("solvers", "expansion")))
  return summary


def hf_tables(seeds, solvers, expansion, schema: str) -> tuple[list, list]:
  """The solver and expansion tables of `run_hf`, comparisons vs original."""
  col = results_lib.Column
  checks = ([col("em_strict", "GSM8K EM strict-match %", 1, 100),
             col("em_flexible", "GSM8K EM flexible-extract %", 1, 100)]
            if schema == "gsm8k" else
            [col("accuracy", "MATH accuracy (math-verify) %", 1, 100)])
  solver = results_lib.Table(
      "solvers", "Solvers fine-tuned on the original / expanded data",
      [col("train_steps_per_solution", "steps / solution", 2), *checks,
       col("gen_steps", "generated steps", 2)], row_label="solver trained on")

  def label(name: str) -> str:
    return name.replace("expanded_r", "expanded, round ")

  for name, rs in solvers.items():
    for seed, r in zip(seeds, rs):
      solver.add_seed(label(name), seed, {c.key: r[c.key]
                                          for c in solver.columns})
  rounds = results_lib.Table(
      "expansion", "Expansion rounds",
      [col("insertion_rate", "insertion rate", 2),
       col("rejection_rate", "rejection rate (similar + empty)", 2),
       col("steps_after", "steps / solution after", 2)], row_label="round")
  for seed, hist in expansion.items():
    for r, st in enumerate(hist):
      rounds.add_seed(str(r + 1), seed, {c.key: st[c.key]
                                         for c in rounds.columns})
  key = "em_flexible" if schema == "gsm8k" else "accuracy"
  comparisons = [results_lib.Comparison("solvers", key, label(n), "original")
                 for n in solvers if n != "original"]
  return [solver, rounds], comparisons
