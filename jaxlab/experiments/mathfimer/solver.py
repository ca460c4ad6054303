"""MathFimer's solver side (spec H): solvers, their metrics, the expansion.

Library pieces of `jaxlab.experiments.mathfimer`: a decoder solver trained
by masked next-token training on (question, steps) items (`train_solver`,
the trainer's update through `jaxlab.train.runner.train_lm`), its held-out
exact match and step count (`evaluate_solver`), the data metrics
(`correct_step_frac`, `inserted_steps`), the FIM model's own held-out
metric (`heldout_fim_accuracy`), the majority-answer baseline, the k-round
expansion with per-round stats (`expand_rounds`) and a per-seed stage store
for resuming (`Progress`).
"""

from __future__ import annotations

import collections
import json
import os
import random

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.synthetic import arithmetic
from jaxlab.evals import text as text_metrics
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import fim
from jaxlab.objectives import self_generated as sg
from jaxlab.train import runner


def _model(tok, cfg, seed):
  mcfg = model_registry.decoder_config(cfg.model, vocab_size=tok.vocab_size)
  return decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))


def train_kw(section):
  """A training section as `runner.train_lm` keywords (less `max_len`)."""
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
                         **train_kw(section))
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


class Progress:
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


# The per-round statistics of `expand_rounds` (means over seeds in a run).
ROUND_KEYS = ("insertion_rate", "rejection_rate", "rejected_similar",
              "rejected_empty", "gaps", "skipped_short", "steps_after",
              "inserted_correct_frac")


def expand_rounds(items, fill, fmt, cfg, log=None):
  """`cfg.fim.rounds` rounds of `fim.expand` (one insertion round each) from
  the coarse `items`: ({"expanded_r<k>": items}, per-round stats with
  `inserted_correct_frac`, the fraction of inserted steps that are correct
  arithmetic against their question)."""
  datasets, current, hist = {}, items, []
  for r in range(cfg.fim.rounds):
    steps, st = fim.expand(current, fill, rounds=1, fmt=fmt, eta=cfg.fim.eta,
                           first_gap=cfg.fim.get("first_gap", False))
    prev, current = current, [(q, s) for (q, _), s in zip(current, steps)]
    new = inserted_steps(prev, current, with_question=True)
    st[0]["inserted_correct_frac"] = (
        float(np.mean([bool(arithmetic.step_is_correct(x, q))
                       for q, x in new])) if new else float("nan"))
    datasets[f"expanded_r{r + 1}"] = current
    hist.append(st[0])
    if log is not None:
      log(f"expansion round {r + 1}: {st[0]}")
  return datasets, hist


def problem_pools(cfg):
  """Three disjoint arithmetic pools (`cfg.problems`): the FIM model's fine
  solutions, the solver pool, the held-out test set; and the solver pool
  coarsened (`drop_frac` of the steps dropped)."""
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
  crng = random.Random(d["seed"] + 1)
  coarse = [arithmetic.coarsen(p, drop_frac=d["drop_frac"], rng=crng)
            for p in train]
  return fim_pool, train, test, coarse


def train_fim_model(cfg, tok, fmt, fim_items, seed: int, base=None,
                    log=None):
  """The FIM model (from a copy of `base` when given) trained on FIM
  examples of the fine `fim_items` (`fim.build_fim_dataset`, `cfg.fim`);
  returns (model, the dataset's counts)."""
  examples, counts = fim.build_fim_dataset(
      fim_items, rounds=cfg.fim.masks_per_solution, seed=seed,
      empty_masks=int(cfg.fim.get("empty_masks", 0)),
      coarse_gaps=int(cfg.fim.get("coarse_gaps", 0)),
      coarse_drop_frac=float(cfg.fim.get("coarse_drop_frac", 0.4)))
  model = init_model(tok, cfg, seed, base)
  enc = fim.encode_batch(fmt, tok, examples, max_len=cfg.fim_train.max_len,
                         context_weight=cfg.fim.get("context_weight", 0.0))
  logs = runner.train_lm(model, enc, seed=seed, log_every=50,
                         **train_kw(cfg.fim_train))
  if log is not None:
    log(f"FIM model trained on {len(examples)} examples; loss curve "
        f"{[(x['step'], round(x['loss'], 3)) for x in logs]}")
  return model, counts
