"""Probes of an unlearned LM beyond greedy recall (PMC paper, spec B.10 extras).

  * Token-probability drift on unrelated text: the spec expects GA/NPO to
    "push down the probability of the answer tokens in unrelated contexts"
    while PMC does not. `logprob_drift` compares the per-token log-probs of
    the unlearned model with the original's on text the unlearning never saw;
    `unrelated_value_texts` builds such text around the forget facts' values
    (the answer tokens), placed in contexts unrelated to the forgotten people.
  * The multiple-choice least-likely-option attack: each forget question
    gets K candidate answers (the true one and K - 1 same-attribute
    distractors). An unlearning method that *suppresses* the true answer
    (GA/NPO) makes it the least likely option, so "pick the least likely"
    recovers the fact; a method that forgets (PMC) leaves it near chance 1/K.
    `least_likely_choice` / `mc_attack_accuracy` are the pure decision rules.

`continuation_logprobs` runs a model teacher-forced on `bos prefix cont` and
returns the per-token log-probs of the continuation tokens: both probes use it.
"""

from __future__ import annotations

from collections.abc import Sequence
import random
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np


# -- scoring continuations -------------------------------------------------------


@nnx.jit
def _token_logp(model, inputs_bt, targets_bt):
  logp = jax.nn.log_softmax(model(inputs_bt).astype(jnp.float32), axis=-1)
  return jnp.take_along_axis(logp, targets_bt[..., None], -1)[..., 0]


def continuation_logprobs(model, tokenizer, prefixes: Sequence[str],
                          continuations: Sequence[str], *, max_len: int = 128,
                          batch_size: int = 64
                          ) -> tuple[np.ndarray, np.ndarray]:
  """Per-token log p(continuation | bos prefix), teacher forced.

  Returns:
    (logp `[N, max_len]` float64, mask `[N, max_len]` float32), where mask is
    1 on the positions whose target is a continuation token (no eos). Rows
    longer than `max_len + 1` ids are cut at the end.
  """
  if len(prefixes) != len(continuations):
    raise ValueError(f"{len(prefixes)} prefixes but {len(continuations)} "
                     "continuations")
  n = len(prefixes)
  inputs = np.full((n, max_len), tokenizer.pad_id, np.int32)
  targets = np.full((n, max_len), tokenizer.pad_id, np.int32)
  mask = np.zeros((n, max_len), np.float32)
  for i, (p, c) in enumerate(zip(prefixes, continuations)):
    p_ids = tokenizer.encode(p, add_bos=True)
    ids = (p_ids + tokenizer.encode(c))[:max_len + 1]
    m = len(ids) - 1
    inputs[i, :m] = ids[:-1]
    targets[i, :m] = ids[1:]
    mask[i, max(len(p_ids) - 1, 0):m] = 1.0
  out = np.zeros((n, max_len), np.float64)
  for s in range(0, n, batch_size):
    x, y = inputs[s:s + batch_size], targets[s:s + batch_size]
    k = len(x)
    if k < batch_size:  # one compiled shape
      x = np.concatenate([x, np.zeros((batch_size - k, max_len), np.int32)])
      y = np.concatenate([y, np.zeros((batch_size - k, max_len), np.int32)])
    out[s:s + k] = np.asarray(_token_logp(model, jnp.asarray(x),
                                          jnp.asarray(y)))[:k]
  return out * mask, mask


# -- drift on unrelated text ---------------------------------------------------------


def logprob_drift(logp_new: np.ndarray, logp_ref: np.ndarray,
                  mask: np.ndarray) -> dict[str, float]:
  """Token-probability drift of an unlearned model against the original.

  With d_t = log p_new(t) - log p_ref(t) over the masked-in tokens t:
    drift      = mean_t d_t      (< 0: the tokens became less likely)
    abs_drift  = mean_t |d_t|
    ratio_drop = 1 - exp(drift)  (average multiplicative loss of
                                  probability, as a share)
  """
  m = np.asarray(mask, np.float64) > 0
  if not m.any():
    raise ValueError("logprob_drift: the mask selects no token")
  d = (np.asarray(logp_new, np.float64) - np.asarray(logp_ref, np.float64))[m]
  drift = float(d.mean())
  return {"drift": drift, "abs_drift": float(np.abs(d).mean()),
          "ratio_drop": float(1.0 - np.exp(drift))}


# Contexts unrelated to any person of the fact set, one per attribute of
# `jaxlab.data.synthetic.facts`; the value ends the sentence.
UNRELATED_CONTEXTS = {
    "city": ("The night train from the coast arrives in ",
             "Our school trip this spring went to "),
    "year": ("The old stone bridge was finished in ",
             "That recipe book was printed in "),
    "job": ("The man at the next table is a ",
            "My cousin trained for years to be a "),
    "colour": ("The new front door was painted ",
               "Her winter scarf is "),
    "capital": ("The conference this year is held in ",),
}


def unrelated_value_texts(items: Sequence[Any]) -> tuple[list[str], list[str]]:
  """(prefixes, continuations): each item's value in unrelated contexts.

  `items` are QA-like objects with `attribute` and `value` (e.g. the forget
  split of a `FactSet`); each distinct (attribute, value) appears once per
  context of its attribute, so the continuation tokens are exactly the
  answer tokens the unlearning targeted, in text it never trained on.
  """
  seen, prefixes, conts = set(), [], []
  for x in items:
    key = (x.attribute, x.value)
    if key in seen:
      continue
    seen.add(key)
    for ctx in UNRELATED_CONTEXTS.get(x.attribute, ()):
      prefixes.append(ctx)
      conts.append(x.value)
  return prefixes, conts


# -- multiple-choice least-likely-option attack ----------------------------------------


def least_likely_choice(option_scores: Sequence[float]) -> int:
  """The attack's pick: the option with the lowest score (first on ties)."""
  s = np.asarray(option_scores, np.float64)
  if s.size == 0:
    raise ValueError("least_likely_choice needs at least one option")
  return int(np.argmin(s))


def mc_attack_accuracy(option_scores: np.ndarray,
                       correct: Sequence[int]) -> dict[str, float]:
  """Accuracy of the least-likely and of the usual most-likely pick.

  Args:
    option_scores: `[N, K]` model scores (log-likelihood) of each option.
    correct: `[N]` index of the true option.
  Returns:
    `mc_least_likely_acc` (the attack; chance 1/K) and
    `mc_most_likely_acc` (ordinary multiple-choice accuracy).
  """
  s = np.asarray(option_scores, np.float64)
  c = np.asarray(correct)
  if s.ndim != 2 or len(s) != len(c):
    raise ValueError(f"option_scores must be [N, K] with N = len(correct) "
                     f"= {len(c)}, got shape {s.shape}")
  least = np.array([least_likely_choice(row) for row in s])
  most = np.argmax(s, axis=-1)
  return {"mc_least_likely_acc": float(np.mean(least == c)),
          "mc_most_likely_acc": float(np.mean(most == c))}


def mc_options(items: Sequence[Any], pool: dict[str, Sequence[str]], *,
               num_options: int = 4, seed: int = 0
               ) -> tuple[list[list[str]], list[int]]:
  """K candidate answers per item: the true answer and same-attribute decoys.

  Each option is the item's answer sentence with its value replaced by a
  candidate value (`pool[attribute]`, distinct values), so options differ
  only in the fact. The true option's position is random (seeded).

  Returns:
    (options `[N][K]` answer strings, index of the true option `[N]`).
  """
  rng = random.Random(seed)
  options, correct = [], []
  for x in items:
    decoys = sorted(set(pool[x.attribute]) - {x.value})
    if len(decoys) < num_options - 1:
      raise ValueError(f"attribute {x.attribute!r} has {len(decoys)} "
                       f"decoy values, need num_options - 1 = "
                       f"{num_options - 1}")
    values = rng.sample(decoys, num_options - 1)
    k = rng.randrange(num_options)
    values.insert(k, x.value)
    options.append([x.answer.replace(x.value, v) for v in values])
    correct.append(k)
  return options, correct


def mc_attack(model, tokenizer, items: Sequence[Any], prompts: Sequence[str],
              pool: dict[str, Sequence[str]], *, num_options: int = 4,
              normalize: str = "mean", seed: int = 0, max_len: int = 128,
              batch_size: int = 64) -> dict[str, float]:
  """The least-likely-option attack on `model` (module docstring).

  Each option is scored by its answer log-likelihood given the question
  prompt: per-token mean (`normalize="mean"`, default [inferred]: options
  differ in length) or the sum (`"sum"`).
  """
  if normalize not in ("mean", "sum"):
    raise ValueError(f"mc normalize {normalize!r}; valid: mean, sum")
  options, correct = mc_options(items, pool, num_options=num_options,
                                seed=seed)
  flat_p = [p for p, opts in zip(prompts, options) for _ in opts]
  flat_o = [o for opts in options for o in opts]
  logp, mask = continuation_logprobs(model, tokenizer, flat_p, flat_o,
                                     max_len=max_len, batch_size=batch_size)
  score = logp.sum(-1)
  if normalize == "mean":
    score = score / np.maximum(mask.sum(-1), 1.0)
  return mc_attack_accuracy(score.reshape(len(items), num_options), correct)


def value_drift(model, ref_model, tokenizer, items: Sequence[Any], *,
                max_len: int = 128, batch_size: int = 64) -> dict[str, float]:
  """`logprob_drift` of `model` vs `ref_model` on `unrelated_value_texts`."""
  prefixes, conts = unrelated_value_texts(items)
  new, mask = continuation_logprobs(model, tokenizer, prefixes, conts,
                                    max_len=max_len, batch_size=batch_size)
  ref, _ = continuation_logprobs(ref_model, tokenizer, prefixes, conts,
                                 max_len=max_len, batch_size=batch_size)
  return logprob_drift(new, ref, mask)
