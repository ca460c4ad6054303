"""MathFimer miniature (spec H, "CPU miniature"): see jaxlab/configs/mathfimer.py.

Three disjoint problem pools: `num_fim` fine solutions train the FIM model
(the paper's FIM model is trained on other data than the one it expands),
`num_train` problems give the coarse / expanded / fine solver data, and
`num_test` are held out. Writes WORKDIR/results.json and table.md: held-out
exact match and steps per solution of solvers trained on coarse / expanded
(rounds 1..k) / fine data, the fraction of correct computation steps in each
training set, and per round the insertion and rejection rates and the
fraction of inserted steps that are correct arithmetic. The pieces are
`jaxlab.objectives.fim` and `jaxlab.objectives.fim_solver`.
"""

from __future__ import annotations

import os
import time

import numpy as np

from jaxlab.data import tokenizers
from jaxlab.experiments import log as log_lib
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib
from jaxlab.io import params as params_io
from jaxlab.objectives import fim
from jaxlab.objectives.fim_solver import (  # pylint: disable=unused-import
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
