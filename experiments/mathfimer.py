"""MathFimer miniature (spec H, "CPU miniature"): see configs/mathfimer.py.

Writes WORKDIR/results.json and table.md: held-out exact match and steps per
solution of solvers trained on coarse / expanded (rounds 1..k) / fine data,
with the expansion insertion and rejection rates.
"""

from __future__ import annotations

import json
import os
import random

from flax import nnx
import numpy as np

from jaxlab.data import tokenizers
from jaxlab.data.synthetic import arithmetic
from jaxlab.evals import text as text_metrics
from jaxlab.models import decoder
from jaxlab.objectives import fim
from jaxlab.objectives import self_generated as sg


def _model(tok, cfg, seed):
  mcfg = decoder.DecoderConfig(vocab_size=tok.vocab_size, **dict(cfg.model))
  return decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))


def _train_kw(section):
  kw = dict(section)
  kw.pop("max_len")
  return kw


def solver_prompt(question: str) -> str:
  return question + "\n"


def train_solver(tok, cfg, seed, items):
  model = _model(tok, cfg, seed)
  data = sg.encode_for_lm(tok, [solver_prompt(q) for q, _ in items],
                          ["\n".join(s) for _, s in items],
                          max_len=cfg.solver_train.max_len)
  sg.train_lm(model, data, seed=seed, **_train_kw(cfg.solver_train))
  return model


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


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  cfg = config
  d = dict(cfg.data)
  problems = arithmetic.make_problems(
      d["num_train"] + d["num_test"], min_ops=d["min_ops"],
      max_ops=d["max_ops"], seed=d["seed"])
  train, test = problems[:d["num_train"]], problems[d["num_train"]:]
  crng = random.Random(d["seed"] + 1)
  coarse = [arithmetic.coarsen(p, drop_frac=d["drop_frac"], rng=crng)
            for p in train]
  split = lambda p: fim.split_steps(p.solution,  # pylint: disable=g-long-lambda
                                    min_chars=cfg.fim.min_step_chars)
  fine_items = [(p.question, split(p)) for p in train]
  coarse_items = [(p.question, split(p)) for p in coarse]
  fmt = fim.FimFormat()
  rows: dict[str, list[dict]] = {}
  expansion: list[list[dict]] = []
  for seed in cfg.seeds:
    tok = tokenizers.ByteTokenizer()
    fmt.add_to_tokenizer(tok)
    # 1. FIM model on the fine solutions.
    examples, fim_counts = fim.build_fim_dataset(
        fine_items, rounds=cfg.fim.masks_per_solution, seed=seed)
    fim_model = _model(tok, cfg, seed)
    enc = fim.encode_batch(fmt, tok, examples, max_len=cfg.fim_train.max_len)
    sg.train_lm(fim_model, enc, seed=seed, **_train_kw(cfg.fim_train))
    # 2. Expand the coarse data k rounds (stats per round).
    fill = fim.make_fill_fn(fim_model, tok,
                            max_new_tokens=cfg.fim.max_new_tokens)
    datasets = {"coarse": coarse_items, "fine": fine_items}
    current, hist = coarse_items, []
    for r in range(cfg.fim.rounds):
      steps, st = fim.expand(current, fill, rounds=1, fmt=fmt,
                             eta=cfg.fim.eta)
      current = [(q, s) for (q, _), s in zip(current, steps)]
      datasets[f"expanded_r{r + 1}"] = current
      hist.append(st[0])
    expansion.append(hist)
    # Expanded steps should be correct arithmetic: count verifiable ones.
    # 3. Solvers.
    for name, items in datasets.items():
      solver = train_solver(tok, cfg, seed, items)
      res = evaluate_solver(solver, tok, cfg, test)
      res["train_steps_per_solution"] = float(np.mean([len(s)
                                                       for _, s in items]))
      rows.setdefault(name, []).append(res)
  summary = {"fim_examples": fim_counts["examples"],
             "fim_skipped_short": fim_counts["skipped_short"]}
  for name, rs in rows.items():
    for k in rs[0]:
      vals = [r[k] for r in rs]
      summary[f"{name}/{k}_mean"] = float(np.mean(vals))
      summary[f"{name}/{k}_std"] = float(np.std(vals))
  for r in range(cfg.fim.rounds):
    for k in ("insertion_rate", "rejection_rate", "rejected_similar",
              "rejected_empty", "gaps", "skipped_short", "steps_after"):
      vals = [h[r][k] for h in expansion]
      summary[f"round{r + 1}/{k}_mean"] = float(np.mean(vals))
      summary[f"round{r + 1}/{k}_std"] = float(np.std(vals))
  names = list(rows)
  lines = [f"mean ± std over {len(cfg.seeds)} seed(s)", "",
           "| train data | steps/solution | held-out EM (%) | generated steps |",
           "|---|---|---|---|"]
  for n in names:
    g = lambda k: (summary[f"{n}/{k}_mean"], summary[f"{n}/{k}_std"])  # pylint: disable=cell-var-from-loop
    (s, ss), (e, es), (gs, gss) = (g("train_steps_per_solution"),
                                   g("exact_match"), g("gen_steps"))
    lines.append(f"| {n} | {s:.2f} ± {ss:.2f} | {100 * e:.1f} ± "
                 f"{100 * es:.1f} | {gs:.2f} ± {gss:.2f} |")
  lines += ["", "| round | insertion rate | rejection rate (similar+empty) |",
            "|---|---|---|"]
  for r in range(cfg.fim.rounds):
    i_m, i_s = (summary[f"round{r + 1}/insertion_rate_mean"],
                summary[f"round{r + 1}/insertion_rate_std"])
    j_m, j_s = (summary[f"round{r + 1}/rejection_rate_mean"],
                summary[f"round{r + 1}/rejection_rate_std"])
    lines.append(f"| {r + 1} | {i_m:.2f} ± {i_s:.2f} | {j_m:.2f} ± "
                 f"{j_s:.2f} |")
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(summary, f, indent=2, sort_keys=True)
  return summary
