"""Partial Model Collapse (PMC) unlearning, per the official code (spec B).

  1. Reference answers y_q = greedy_decode(f_theta0, q) for every forget
     question: the model's *own* answers, not the ground truth (B.2).
  2. Score of a sample s(x) = ROUGE-L recall(x, y_q), stemmer on; reward
     r = 1 - s; optional length penalty s += exp(-len) below `min_len` words,
     capped at 1 (off by default) (B.3).
  3. n samples per question at temperature T, top-p 0.95; Bradley-Terry /
     argmax selection; monotone per-question cache that stops sampling at
     score 0 (B.4, B.5) -- `jaxlab.objectives.self_generated`.
  4. Loss NLL(selected | q) + lam * NLL(retain) (B.6) -- `unlearn_pmc`.

Also: the unlearning metrics (UQ, utility; B.10), the prefilling and
many-sample leakage checks, and the "lottery machine" categorical
simulation of the theory (B.7, miniature 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxlab.evals import text as text_metrics
from jaxlab.objectives import self_generated as sg


# -- data checks --------------------------------------------------------------------


def clean_forget_questions(questions: Sequence[str]) -> tuple[list[int], int]:
  """Indices of usable forget questions and the number skipped as empty.

  PMC only uses the questions (B.1); an empty or whitespace-only question has
  nothing to condition on, so it is skipped and counted (reported as
  `skipped_empty_questions`). All-empty is an error.
  """
  keep = [i for i, q in enumerate(questions)
          if isinstance(q, str) and q.strip()]
  if not keep:
    raise ValueError(f"forget set has no non-empty question "
                     f"({len(questions)} rows, all empty)")
  return keep, len(questions) - len(keep)


# -- reward --------------------------------------------------------------------------


def rouge_recall_score(sample: str, reference: str, *, min_len: int = 0,
                       use_stemmer: bool = True) -> float:
  """s(x) of spec B.3: ROUGE-L recall vs the reference, optional penalty.

  With `min_len > 0`, a sample of fewer than `min_len` words gets
  s += exp(-len_words), capped at 1, so empty answers are not free wins.
  """
  s = text_metrics.rouge_l(sample, reference, use_stemmer=use_stemmer)[1]
  if min_len > 0:
    n = len(sample.split())
    if n < min_len:
      s = min(1.0, s + math.exp(-n))
  return s


def pmc_reward(sample: str, reference: str, **kw) -> float:
  """r(x) = 1 - s(x) in [0, 1]."""
  return 1.0 - rouge_recall_score(sample, reference, **kw)


def make_score_fn(references: Sequence[str], *, min_len: int = 0):
  def score_fn(sample: str, idx: int) -> float:
    return rouge_recall_score(sample, references[idx], min_len=min_len)
  return score_fn


def default_config() -> ml_collections.ConfigDict:
  cfg = sg.default_config()
  cfg.min_len = 0             # length penalty off (B.3)
  cfg.max_new_tokens = 200     # generation max_length 200 (B.8)
  cfg.ref_max_new_tokens = 200  # greedy reference answers, same length
  cfg.warmup_epochs = 1.0      # warm-up = one epoch of steps (B.8)
  return cfg


def warmup_steps(config: ml_collections.ConfigDict, num_forget: int) -> int:
  """Warm-up steps: `warmup_epochs` epochs over the forget set (spec B.8).

  The official code warms up for one epoch of steps, |D_f| / (bs * ga);
  `config.warmup_epochs` (default 1) sets the number of epochs, rounded up
  to whole steps and capped at `config.steps`. A config without
  `warmup_epochs` keeps its explicit `warmup_steps`.
  """
  epochs = config.get("warmup_epochs", None)
  if epochs is None:
    return int(config.get("warmup_steps", 0))
  if epochs < 0:
    raise ValueError(f"unlearn.warmup_epochs must be >= 0, got {epochs}")
  steps = math.ceil(float(epochs) * num_forget / int(config.batch_size))
  return min(steps, int(config.steps))


def run_pmc(model, tokenizer, *, forget_questions: Sequence[str],
            retain_prompts: Sequence[str], retain_answers: Sequence[str],
            config: ml_collections.ConfigDict, prompt_fn=None,
            eval_fn=None, eval_every: int = 0,
            generate_fn=None) -> dict[str, Any]:
  """PMC-unlearns `model` in place (spec B.2-B.6).

  Args:
    forget_questions: raw forget questions (only questions are used);
      empty ones are skipped and counted.
    retain_prompts, retain_answers: the retain QA pairs (prompt-formatted).
    prompt_fn: question -> prompt string (default identity).
    generate_fn: replaces `sampler.generate` (tests script the samples).

  Returns:
    dict with `history`, `cache`, `cache_stats`, `references`,
    `skipped_empty_questions`, `empty_references`, `kept_indices`.
  """
  prompt_fn = prompt_fn or (lambda q: q)
  keep, skipped = clean_forget_questions(forget_questions)
  config = config.copy_and_resolve_references()
  config.warmup_steps = warmup_steps(config, len(keep))
  prompts = [prompt_fn(forget_questions[i]) for i in keep]
  refs = sg.generate_text(model, tokenizer, prompts,
                          max_new_tokens=int(config.ref_max_new_tokens),
                          temperature=0.0,
                          batch_size=int(config.sample_batch_size),
                          generate_fn=generate_fn)
  out = sg.run_self_generated(
      model, tokenizer, forget_prompts=prompts, retain_prompts=retain_prompts,
      retain_answers=retain_answers,
      score_fn=make_score_fn(refs, min_len=int(config.min_len)),
      config=config, eval_fn=eval_fn, eval_every=eval_every,
      generate_fn=generate_fn)
  # A reference without tokens gives recall 0 for every sample: such an item
  # is "done" at once. Count them so a broken reference model shows up.
  out.update({"references": refs, "skipped_empty_questions": skipped,
              "empty_references": sum(
                  not text_metrics.rouge_tokenize(r) for r in refs),
              "kept_indices": keep})
  return out


# -- metrics (spec B.10) ------------------------------------------------------------


def mean_recall(predictions: Sequence[str], references: Sequence[str]) -> float:
  return float(np.mean([text_metrics.rouge_l(p, r)[1]
                        for p, r in zip(predictions, references)]))


def unlearning_quality(r_forget: float, r_forget_paraphrased: float) -> float:
  """UQ = 100 (1 - (R_forget + R_forget_paraphrased) / 2)."""
  return 100.0 * (1.0 - (r_forget + r_forget_paraphrased) / 2.0)


def utility(recalls: Sequence[float]) -> float:
  """Utility = 100 * mean of the retain / world recalls."""
  return 100.0 * float(np.mean(recalls))


def contains_value(texts: Sequence[str], value: str) -> bool:
  v = value.lower()
  return any(v in t.lower() for t in texts)


def prefill_prompts(prompts: Sequence[str], answers: Sequence[str], *,
                    mode: str = "answer_prefix", prefix_words: int = 3,
                    fixed: str = "The answer is: ") -> tuple[list[str],
                                                             list[str]]:
  """(attacked prompts, the answer remainder to score against).

  mode="fixed": append `fixed` (the paper's "The answer is: " prefill);
  mode="answer_prefix": append the first `prefix_words` words of the ground
  truth [inferred for models without a chat template], so the model is
  pushed right up to the fact; the continuation is scored against the rest.
  """
  if mode == "fixed":
    return [p + fixed for p in prompts], list(answers)
  if mode == "answer_prefix":
    out_p, out_a = [], []
    for p, a in zip(prompts, answers):
      words = a.split(" ")
      k = min(prefix_words, max(len(words) - 1, 0))
      out_p.append(p + " ".join(words[:k]) + (" " if k else ""))
      out_a.append(" ".join(words[k:]))
    return out_p, out_a
  raise ValueError(f"prefill mode {mode!r}; valid: fixed, answer_prefix")


PREFILL_SUFFIX = {"answer_prefix": "", "fixed": "_fixed"}


def evaluate_unlearning(model, tokenizer, facts, *, prompt_fn,
                        max_new_tokens: int = 48, leak_samples: int = 8,
                        leak_temperature: float = 1.0,
                        prefill_modes: str | Sequence[str] = (
                            "answer_prefix", "fixed"),
                        prefix_words: int = 3,
                        fixed_prefill: str = "The answer is: ", key=None,
                        batch_size: int = 64,
                        retain_limit: int | None = None,
                        real_authors: Sequence[Any] = (),
                        generate_fn=None) -> dict[str, float]:
  """UQ, utility and leakage of `model` on a `FactSet`-like object.

  Greedy ROUGE-L recall against the ground truth on forget, forget
  paraphrased, retain, world and (when given) `real_authors` QA items;
  utility = 100 * mean of the retain, world and real-authors recalls (the
  three terms of spec B.10). Leakage = fraction of forget facts whose value
  string appears in the greedy answer, in a prefilled answer, or in any of
  `leak_samples` samples at `leak_temperature`. One prefilling attack per
  entry of `prefill_modes` (`prefill_prompts`): "answer_prefix" (the first
  `prefix_words` ground-truth words; keys `leak_prefill`, `recall_prefill`)
  and "fixed" (the paper's "The answer is: "; keys `leak_prefill_fixed`,
  `recall_prefill_fixed`). `generate_fn` replaces `sampler.generate`
  (tests script the answers).
  """
  if isinstance(prefill_modes, str):
    prefill_modes = [m for m in prefill_modes.split(",") if m]
  bad = [m for m in prefill_modes if m not in PREFILL_SUFFIX]
  if bad:
    raise ValueError(f"eval.prefill_modes has unknown {bad}; valid: "
                     f"{', '.join(PREFILL_SUFFIX)}")
  key = jax.random.key(0) if key is None else key
  gen = lambda ps, **kw: sg.generate_text(  # pylint: disable=g-long-lambda
      model, tokenizer, ps, max_new_tokens=max_new_tokens,
      batch_size=batch_size, generate_fn=generate_fn, **kw)
  out: dict[str, float] = {}
  recalls = {}
  greedy = {}
  retain = facts.retain[:retain_limit] if retain_limit else facts.retain
  for name, items in (("forget", facts.forget),
                      ("forget_paraphrased", facts.forget_paraphrased),
                      ("retain", retain), ("world", facts.world),
                      ("real_authors", list(real_authors))):
    if not items:
      continue
    preds = gen([prompt_fn(x.question) for x in items])
    greedy[name] = preds
    recalls[name] = mean_recall(preds, [x.answer for x in items])
    out[f"recall_{name}"] = recalls[name]
  out["uq"] = unlearning_quality(recalls["forget"],
                                 recalls["forget_paraphrased"])
  out["utility"] = utility([recalls[k] for k in ("retain", "world",
                                                  "real_authors")
                            if k in recalls])
  f_items = facts.forget
  out["leak_greedy"] = float(np.mean([
      contains_value([p], x.value) for p, x in zip(greedy["forget"], f_items)]))
  for mode in prefill_modes:
    pp, rest = prefill_prompts([prompt_fn(x.question) for x in f_items],
                               [x.answer for x in f_items], mode=mode,
                               prefix_words=prefix_words, fixed=fixed_prefill)
    pre = gen(pp)
    sfx = PREFILL_SUFFIX[mode]
    out[f"recall_prefill{sfx}"] = mean_recall(pre, rest)
    out[f"leak_prefill{sfx}"] = float(np.mean([
        contains_value([p], x.value) for p, x in zip(pre, f_items)]))
  if leak_samples:
    flat = [prompt_fn(x.question) for x in f_items for _ in range(leak_samples)]
    samples = gen(flat, temperature=leak_temperature, key=key)
    per_q = [samples[i * leak_samples:(i + 1) * leak_samples]
             for i in range(len(f_items))]
    out["leak_sampling"] = float(np.mean([
        contains_value(s, x.value) for s, x in zip(per_q, f_items)]))
    out["recall_sampling_max"] = float(np.mean([
        max(text_metrics.rouge_l(t, x.answer)[1] for t in s)
        for s, x in zip(per_q, f_items)]))
  return out


# -- the lottery machine (spec B.7, miniature 1) -------------------------------------


def lottery_machine(*, num_colours: int = 10, retain_colours: int = 7,
                    balls: int = 100, retain_balls: int = 100,
                    rounds: int = 200, use_retain: bool = True,
                    seed: int = 0) -> np.ndarray:
  """pi_t over colours for t = 0..rounds, `[rounds + 1, num_colours]`.

  pi_0 is uniform. Each round draws `balls` balls from pi_t and restocks
  pi_{t+1} proportional to counts(samples) (+ counts(retain set) when
  `use_retain`). The retain set holds `retain_balls` balls spread evenly over
  the first `retain_colours` colours. With it, the forget colours
  (the rest) lose all mass (Lemma 1: they are transient states of the chain);
  without it the whole distribution collapses onto one colour.
  """
  if not 0 < retain_colours < num_colours:
    raise ValueError(f"need 0 < retain_colours < num_colours, got "
                     f"{retain_colours}, {num_colours}")
  rng = np.random.default_rng(seed)
  retain = np.zeros(num_colours)
  retain[:retain_colours] = retain_balls / retain_colours
  pi = np.full(num_colours, 1.0 / num_colours)
  hist = [pi]
  for _ in range(rounds):
    counts = rng.multinomial(balls, pi).astype(np.float64)
    if use_retain:
      counts = counts + retain
    pi = counts / counts.sum()
    hist.append(pi)
  return np.stack(hist)
