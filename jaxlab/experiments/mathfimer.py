"""MathFimer miniature (spec H, "CPU miniature"): see jaxlab/configs/mathfimer.py.

Three disjoint problem pools: `num_fim` fine solutions train the FIM model
(the paper's FIM model is trained on other data than the one it expands),
`num_train` problems give the coarse / expanded / fine solver data, and
`num_test` are held out. Writes WORKDIR/results.json and table.md: held-out
exact match and steps per solution of solvers trained on coarse / expanded
(rounds 1..k) / fine data, the fraction of correct computation steps in each
training set, and per round the insertion and rejection rates and the
fraction of inserted steps that are correct arithmetic.
"""

from __future__ import annotations

import collections
import json
import os
import random
import time

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data import tokenizers
from jaxlab.data.synthetic import arithmetic
from jaxlab.evals import text as text_metrics
from jaxlab.io import params as params_io
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import fim
from jaxlab.objectives import self_generated as sg
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib


def _model(tok, cfg, seed):
  mcfg = model_registry.decoder_config(cfg.model, vocab_size=tok.vocab_size)
  return decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))


def _train_kw(section):
  kw = dict(section)
  kw.pop("max_len")
  return kw


def solver_prompt(question: str) -> str:
  return question + "\n"


def init_model(tok, cfg, seed, base=None):
  """A fresh model, or a copy of the pretrained `base` model's weights."""
  model = _model(tok, cfg, seed)
  if base is not None:
    # Copies (the runner donates its state's buffers, so sharing them with
    # `base` would invalidate the base model).
    nnx.update(model, jax.tree.map(jnp.copy, nnx.state(base, nnx.Param)))
  return model


def train_solver(tok, cfg, seed, items, base=None, section=None):
  """A solver trained on (question, steps) items; (model, loss log).

  Starts from a copy of `base` when given (`base_train`), else from a fresh
  init; `section` is the training config (default `cfg.solver_train`).
  """
  section = cfg.solver_train if section is None else section
  model = init_model(tok, cfg, seed, base)
  data = sg.encode_for_lm(tok, [solver_prompt(q) for q, _ in items],
                          ["\n".join(s) for _, s in items],
                          max_len=section.max_len)
  logs = runner.train_lm(model, data, seed=seed, log_every=50,
                         **_train_kw(section))
  return model, logs


def evaluate_solver(model, tok, cfg, test) -> dict[str, float]:
  outs = sg.generate_text(model, tok, [solver_prompt(p.question)
                                       for p in test],
                          max_new_tokens=cfg.eval.max_new_tokens)
  em = [text_metrics.exact_match(arithmetic.extract_answer(o) or "",
                                 p.answer) for o, p in zip(outs, test)]
  steps = [len(fim.split_steps(o, min_chars=cfg.fim.min_step_chars))
           for o in outs]
  return {"exact_match": float(np.mean(em)),
          "gen_steps": float(np.mean(steps))}


def correct_step_frac(items) -> float:
  """Fraction of computation steps (all but the answer line) that are right.

  Steps that do not parse as a computation step of the data's format count
  as wrong (`arithmetic.step_is_correct`, against the item's question).
  """
  flags = [bool(arithmetic.step_is_correct(s, q)) for q, steps in items
           for s in steps[:-1]]
  return float(np.mean(flags)) if flags else float("nan")


def inserted_steps(before, after, *, with_question: bool = False) -> list:
  """Steps of `after` not in `before` (insertions only add steps).

  `with_question`: (question, step) pairs instead of steps.
  """
  out = []
  for (_, b), (q, a) in zip(before, after):
    new = (collections.Counter(a) - collections.Counter(b)).elements()
    out.extend((q, x) if with_question else x for x in new)
  return out


def heldout_fim_accuracy(fill, fmt, items, *, seed: int = 0
                         ) -> dict[str, float]:
  """The FIM model's own metric on held-out fine solutions.

  One random step y_i of each (question, steps) item (never the answer
  line) is masked and filled greedily from FIM(Q, y_<i, y_>i):
  `heldout_middle_exact` = fraction of fills equal to y_i,
  `heldout_middle_correct` = fraction that are a correct computation step
  (`arithmetic.step_is_correct` against the question; another right step
  of the chain counts here, not in `exact`).
  """
  rng = random.Random(seed)
  exs = []
  for q, steps in items:
    if len(steps) < 2:
      continue
    i = rng.randrange(len(steps) - 1)
    exs.append(fim.FimExample(q, tuple(steps[:i]), tuple(steps[i + 1:]),
                              steps[i]))
  outs = [fim.clean_middle(o, fmt.step_sep) for o in
          fill([fmt.prompt(e.question, e.prefix, e.suffix) for e in exs])]
  return {"heldout_middle_exact": float(np.mean(
              [o == e.middle for o, e in zip(outs, exs)])),
          "heldout_middle_correct": float(np.mean(
              [bool(arithmetic.step_is_correct(o, e.question))
               for o, e in zip(outs, exs)]))}


def majority_exact_match(train, test) -> float:
  """Held-out EM of always answering the training set's commonest answer."""
  top = collections.Counter(p.answer for p in train).most_common(1)[0][0]
  return float(np.mean([p.answer == top for p in test]))


class _Progress:
  """Per-seed stage results in WORKDIR/progress_seed<N>.json (resume)."""

  def __init__(self, workdir: str, seed: int):
    self.path = os.path.join(workdir, f"progress_seed{seed}.json")
    self.data = {}
    if os.path.exists(self.path):
      with open(self.path) as f:
        self.data = json.load(f)

  def get(self, key):
    return self.data.get(key)

  def put(self, **kv):
    self.data.update(kv)
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      json.dump(self.data, f)
    os.replace(tmp, self.path)


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  cfg = config
  d = dict(cfg.problems)
  n_fim = int(d.get("num_fim", d["num_train"]))
  problems = arithmetic.make_problems(
      n_fim + d["num_train"] + d["num_test"], min_ops=d["min_ops"],
      max_ops=d["max_ops"], seed=d["seed"],
      max_value=int(d.get("max_value", 99)),
      step_format=d.get("step_format", "chain"))
  fim_pool = problems[:n_fim]
  train = problems[n_fim:n_fim + d["num_train"]]
  test = problems[n_fim + d["num_train"]:]
  t0 = time.time()
  log = lambda msg: print(f"[mathfimer {time.time() - t0:6.0f}s] {msg}",  # pylint: disable=g-long-lambda
                          flush=True)
  crng = random.Random(d["seed"] + 1)
  coarse = [arithmetic.coarsen(p, drop_frac=d["drop_frac"], rng=crng)
            for p in train]
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
    """The pretrained base model (`base_train.steps` > 0), trained once.

    The paper's FIM model and solvers all start from pretrained math LMs;
    here a base LM learns the step-by-step format on the FIM pool's fine
    solutions (disjoint from the solver pool) and every FIM model and
    solver starts from a copy of it. Saved as WORKDIR/base_model.npz, so a
    resumed run loads it.
    """
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
    progress = _Progress(workdir, seed)
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
    fim_progress = progress if fim_seed == seed else _Progress(workdir,
                                                                fim_seed)
    if fim_progress.get("datasets") is None:
      # 1. FIM model on the fine solutions.
      examples, fim_counts = fim.build_fim_dataset(
          fim_items, rounds=cfg.fim.masks_per_solution, seed=fim_seed,
          empty_masks=int(cfg.fim.get("empty_masks", 0)),
          coarse_gaps=int(cfg.fim.get("coarse_gaps", 0)),
          coarse_drop_frac=float(cfg.fim.get("coarse_drop_frac", 0.4)))
      fim_model = init_model(tok, cfg, fim_seed, get_base())
      enc = fim.encode_batch(fmt, tok, examples,
                             max_len=cfg.fim_train.max_len,
                             context_weight=cfg.fim.get("context_weight", 0.0))
      fim_logs = runner.train_lm(fim_model, enc, seed=fim_seed, log_every=50,
                                 **_train_kw(cfg.fim_train))
      log(f"seed {seed}: FIM model trained on {len(examples)} examples; "
          f"loss curve {[(x['step'], round(x['loss'], 3)) for x in fim_logs]}")
      # 2. Expand the coarse data k rounds (stats per round).
      fill = fim.make_fill_fn(fim_model, tok,
                              max_new_tokens=cfg.fim.max_new_tokens)
      fim_heldout = heldout_fim_accuracy(
          fill, fmt, [(p.question, split(p)) for p in test], seed=fim_seed)
      log(f"seed {seed}: FIM model on held-out masks: {fim_heldout}")
      datasets = {"coarse": coarse_items}
      current, hist = coarse_items, []
      for r in range(cfg.fim.rounds):
        steps, st = fim.expand(current, fill, rounds=1, fmt=fmt,
                               eta=cfg.fim.eta,
                               first_gap=cfg.fim.get("first_gap", False))
        prev, current = current, [(q, s) for (q, _), s in zip(current,
                                                             steps)]
        new = inserted_steps(prev, current, with_question=True)
        st[0]["inserted_correct_frac"] = (
            float(np.mean([bool(arithmetic.step_is_correct(x, q))
                           for q, x in new])) if new else float("nan"))
        datasets[f"expanded_r{r + 1}"] = current
        hist.append(st[0])
        log(f"seed {seed}: expansion round {r + 1}: {st[0]}")
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
             "num_fim": n_fim, "num_train": len(train), "num_test": len(test),
             "seeds": list(cfg.seeds)}
  for name, rs in rows.items():
    for k in rs[0]:
      vals = [r[k] for r in rs]
      (summary[f"{name}/{k}_mean"], summary[f"{name}/{k}_std"],
       _) = results_lib.mean_std(vals)
  for r in range(cfg.fim.rounds if expansion else 0):
    for k in ("insertion_rate", "rejection_rate", "rejected_similar",
              "rejected_empty", "gaps", "skipped_short", "steps_after",
              "inserted_correct_frac"):
      vals = [h[r][k] for h in expansion.values()]
      (summary[f"round{r + 1}/{k}_mean"], summary[f"round{r + 1}/{k}_std"],
       _) = results_lib.mean_std(vals)
  for k in ("heldout_middle_exact", "heldout_middle_correct"):
    if fim_models:
      (summary[f"fim/{k}_mean"], summary[f"fim/{k}_std"],
       _) = results_lib.mean_std([h[k] for h in fim_models.values()])
  names = list(rows)
  lines = [f"mean ± sample std (ddof 1) over {len(cfg.seeds)} seed(s)", "",
           "| train data | steps/solution | correct steps (%) | held-out EM (%) "
           "| generated steps |",
           "|---|---|---|---|---|"]
  for n in names:
    g = lambda k: (summary[f"{n}/{k}_mean"], summary[f"{n}/{k}_std"])  # pylint: disable=cell-var-from-loop
    (s, ss), (c, cs), (e, es), (gs, gss) = (
        g("train_steps_per_solution"), g("train_correct_step_frac"),
        g("exact_match"), g("gen_steps"))
    lines.append(f"| {n} | {s:.2f} ± {ss:.2f} | {100 * c:.1f} ± "
                 f"{100 * cs:.1f} | {100 * e:.1f} ± {100 * es:.1f} | "
                 f"{gs:.2f} ± {gss:.2f} |")
  lines += ["", "| round | insertion rate | rejection rate (similar+empty) "
            "| inserted steps correct |", "|---|---|---|---|"]
  for r in range(cfg.fim.rounds if expansion else 0):
    i_m, i_s = (summary[f"round{r + 1}/insertion_rate_mean"],
                summary[f"round{r + 1}/insertion_rate_std"])
    j_m, j_s = (summary[f"round{r + 1}/rejection_rate_mean"],
                summary[f"round{r + 1}/rejection_rate_std"])
    c_m, c_s = (summary[f"round{r + 1}/inserted_correct_frac_mean"],
                summary[f"round{r + 1}/inserted_correct_frac_std"])
    lines.append(f"| {r + 1} | {i_m:.2f} ± {i_s:.2f} | {j_m:.2f} ± "
                 f"{j_s:.2f} | {c_m:.2f} ± {c_s:.2f} |")
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  tables, comparisons = results_tables(list(cfg.seeds), rows, expansion,
                                       summary["chance_exact_match"],
                                       fim_models=fim_models)
  results_lib.write(workdir, "mathfimer", tables=tables,
                    comparisons=comparisons, extra=summary, config=config,
                    start_time=t0)
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
