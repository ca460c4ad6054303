"""Long-context evaluation: passkey, needle-in-a-haystack, chunked perplexity.

Generators build prompts of an exact token length with the answer placed at
a relative depth, for any tokenizer with `encode(text) -> list[int]`
(`jaxlab.data.tokenizers.ByteTokenizer`, SentencePiece, ...):

    tok = ByteTokenizer()
    exs = retrieval_grid(passkey_example, tok, lengths=[256, 512],
                         depths=[0.1, 0.5, 0.9], samples=4, seed=0)
    scores = evaluate_retrieval(model, exs)            # exact / token acc.

A prompt ends right before the answer, so greedy decoding is scored in one
teacher-forced forward pass: the greedy answer equals the reference iff the
argmax at every answer position is the reference token (`exact`), and the
fraction of matching answer tokens is `token_accuracy`.

`train_short_test_long` evaluates one trained model under every RoPE
scaling training-free (MrRoPE spec D.5): each method is a copy of the
`DecoderConfig` with another `rope_scaling`, bound to the same parameters by
`with_rope_scaling`.
"""

from collections.abc import Callable, Mapping, Sequence
import dataclasses
import functools
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import rope as rope_lib

# Mohtashami & Jaggi (2023) passkey prompt.
PASSKEY_PREFIX = ("There is an important info hidden inside a lot of irrelevant"
                  " text. Find it and memorize it. I will quiz you about the "
                  "important information there. ")
PASSKEY_FILLER = ("The grass is green. The sky is blue. The sun is yellow. "
                  "Here we go. There and back again. ")
PASSKEY_NEEDLE = "The pass key is {value}. Remember it. {value} is the pass key. "
PASSKEY_QUESTION = "What is the pass key? The pass key is "

# Kamradt-style needle with a keyed value (several keys make distractors).
NIAH_FILLER = ("Trees grow slowly in the north. Rivers carry sand to the sea. "
               "A quiet town wakes at dawn. Old roads bend around the hills. "
               "Markets open early on the weekend. ")
NIAH_NEEDLE = "The special magic {key} number is: {value}. "
NIAH_QUESTION = "What is the special magic {key} number? The special magic "\
    "{key} number is: "
NIAH_KEYS = ("paris", "tokyo", "lima", "oslo", "cairo", "delhi", "quito",
             "rome", "seoul", "dakar")

DEFAULT_METHODS = ("default", "pi", "ntk", "dynamic_ntk", "yarn",
                   "yarn_rotation", "llama3", "mrope_uni", "mrope_pro")


@dataclasses.dataclass(frozen=True)
class RetrievalExample:
  """One prompt whose continuation should be `answer_ids`."""
  prompt_ids: np.ndarray  # [length] int32
  answer_ids: np.ndarray  # [A] int32
  answer: str
  length: int
  depth: float
  needle_start: int  # token index where the needle begins


def _filler_units(tokenizer, filler: str) -> list[list[int]]:
  """Filler split into sentences (after ". "), each encoded separately."""
  parts = [p + ". " for p in filler.strip().split(". ") if p.strip(". ")]
  if parts:
    parts[-1] = parts[-1].rstrip(". ") + ". "
  units = [list(tokenizer.encode(p)) for p in parts]
  units = [u for u in units if u]
  if not units:
    raise ValueError("filler text encodes to no tokens")
  return units


def _fill(units: Sequence[Sequence[int]], n: int
          ) -> tuple[list[int], list[int]]:
  """n filler tokens cycling through sentences, and the sentence starts."""
  ids, starts, i = [], [], 0
  while len(ids) < n:
    starts.append(len(ids))
    ids.extend(units[i % len(units)])
    i += 1
  starts.append(n)
  return ids[:n], [b for b in starts if b <= n]


def build_prompt(tokenizer, *, length: int, depth: float, needle: str,
                 question: str, filler: str, prefix: str = "",
                 add_bos: bool = False,
                 extra_needles: Sequence[tuple[float, str]] = ()
                 ) -> tuple[np.ndarray, int]:
  """Token ids `[length]`: prefix, filler with the needle at `depth`, question.

  The needle goes to the filler sentence boundary nearest to
  `depth * n_filler` tokens (depth 0 = right after the prefix, 1 = right
  before the question); `extra_needles` (depth, text) are placed the same way
  (distractors). Returns (ids, token index where the needle starts). Raises
  ValueError when `length` cannot hold prefix + needles + question.
  """
  for d in [depth] + [d for d, _ in extra_needles]:
    if not 0.0 <= d <= 1.0:
      raise ValueError(f"depth must be in [0, 1], got {d}")
  head = ([tokenizer.bos_id] if add_bos else []) + list(
      tokenizer.encode(prefix))
  needles = [(depth, list(tokenizer.encode(needle)), True)] + [
      (d, list(tokenizer.encode(t)), False) for d, t in extra_needles]
  question_ids = list(tokenizer.encode(question))
  n_fill = length - len(head) - sum(len(n[1]) for n in needles) - len(
      question_ids)
  if n_fill < 0:
    raise ValueError(
        f"length={length} is too short for prefix + needle + question "
        f"({length - n_fill} tokens)")
  fill, starts = _fill(_filler_units(tokenizer, filler), n_fill)
  starts_arr = np.asarray(starts)
  placed = []
  for d, ids, is_target in needles:
    cut = int(starts_arr[np.argmin(np.abs(starts_arr - d * n_fill))])
    placed.append((cut, not is_target, ids, is_target))
  placed.sort(key=lambda x: (x[0], x[1]))
  out, prev, target_start = list(head), 0, -1
  for cut, _, ids, is_target in placed:
    out.extend(fill[prev:cut])
    prev = cut
    if is_target:
      target_start = len(out)
    out.extend(ids)
  out.extend(fill[prev:])
  out.extend(question_ids)
  return np.asarray(out, np.int32), target_start


def passkey_example(tokenizer, *, length: int, depth: float,
                    rng: np.random.Generator, digits: int = 5,
                    prefix: str = PASSKEY_PREFIX,
                    filler: str = PASSKEY_FILLER,
                    needle: str = PASSKEY_NEEDLE,
                    question: str = PASSKEY_QUESTION,
                    add_bos: bool = False) -> RetrievalExample:
  """Passkey retrieval: a random `digits`-digit key hidden in filler text."""
  value = "".join(str(d) for d in rng.integers(0, 10, digits))
  prompt, start = build_prompt(
      tokenizer, length=length, depth=depth,
      needle=needle.format(value=value), question=question, filler=filler,
      prefix=prefix, add_bos=add_bos)
  answer_ids = np.asarray(tokenizer.encode(value), np.int32)
  return RetrievalExample(prompt, answer_ids, value, length, depth, start)


def needle_example(tokenizer, *, length: int, depth: float,
                   rng: np.random.Generator, digits: int = 7,
                   num_distractors: int = 0, keys: Sequence[str] = NIAH_KEYS,
                   filler: str = NIAH_FILLER, needle: str = NIAH_NEEDLE,
                   question: str = NIAH_QUESTION,
                   add_bos: bool = False) -> RetrievalExample:
  """Needle-in-a-haystack: a keyed number, optionally with distractor needles.

  Distractors (other keys, other numbers) go to random depths, so the
  model must match the key, not just copy any number.
  """
  if num_distractors >= len(keys):
    raise ValueError(f"num_distractors={num_distractors} needs more than "
                     f"{len(keys)} keys")
  chosen = rng.choice(len(keys), size=1 + num_distractors, replace=False)
  key = keys[chosen[0]]

  def number():
    return "".join(str(d) for d in rng.integers(0, 10, digits))

  value = number()
  extra = [(float(rng.uniform()), needle.format(key=keys[c], value=number()))
           for c in chosen[1:]]
  prompt, start = build_prompt(
      tokenizer, length=length, depth=depth,
      needle=needle.format(key=key, value=value),
      question=question.format(key=key), filler=filler, add_bos=add_bos,
      extra_needles=extra)
  answer_ids = np.asarray(tokenizer.encode(value), np.int32)
  return RetrievalExample(prompt, answer_ids, value, length, depth, start)


def retrieval_grid(generator: Callable[..., RetrievalExample], tokenizer, *,
                   lengths: Sequence[int], depths: Sequence[float],
                   samples: int = 1, seed: int = 0,
                   **kwargs: Any) -> list[RetrievalExample]:
  """`samples` examples per (length, depth) cell, deterministic in `seed`."""
  out = []
  for li, length in enumerate(lengths):
    for di, depth in enumerate(depths):
      rng = np.random.default_rng([seed, li, di])
      for _ in range(samples):
        out.append(generator(tokenizer, length=int(length),
                             depth=float(depth), rng=rng, **kwargs))
  return out


# -- model evaluation -----------------------------------------------------------


@functools.partial(jax.jit, static_argnums=0)
def _logits(graphdef, state, ids_bt):
  return nnx.merge(graphdef, state)(ids_bt)


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
  if x.shape[0] >= rows:
    return x
  pad = np.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)
  return np.concatenate([x, pad])


def model_logits(model, ids_bt) -> jax.Array:
  """Jitted `model(ids)` (one compile per graph, shape and RoPE config)."""
  graphdef, state = nnx.split(model)
  return _logits(graphdef, state, jnp.asarray(ids_bt, jnp.int32))


def evaluate_retrieval(model, examples: Sequence[RetrievalExample], *,
                       batch_size: int = 4) -> dict[str, Any]:
  """Greedy exact match and token accuracy, overall and per (length, depth).

  Returns:
    {"exact": mean, "token_accuracy": mean, "cells": {(length, depth):
     {"exact", "token_accuracy", "n"}}}.
  """
  groups: dict[tuple[int, int], list[int]] = {}
  for i, ex in enumerate(examples):
    key = (len(ex.prompt_ids), len(ex.answer_ids))
    groups.setdefault(key, []).append(i)
  exact = np.zeros(len(examples))
  tok_acc = np.zeros(len(examples))
  for (plen, alen), idx in groups.items():
    for s in range(0, len(idx), batch_size):
      chunk = idx[s:s + batch_size]
      ids = np.stack([np.concatenate([examples[i].prompt_ids,
                                      examples[i].answer_ids])
                      for i in chunk])
      logits = model_logits(model, _pad_rows(ids, batch_size))[:len(chunk)]
      pred = np.asarray(jnp.argmax(logits[:, plen - 1:plen + alen - 1], -1))
      ref = ids[:, plen:]
      exact[chunk] = np.all(pred == ref, axis=-1)
      tok_acc[chunk] = np.mean(pred == ref, axis=-1)
  cells: dict[tuple[int, float], dict[str, float]] = {}
  for i, ex in enumerate(examples):
    cells.setdefault((ex.length, ex.depth), []).append(i)
  cell_scores = {k: {"exact": float(exact[v].mean()),
                     "token_accuracy": float(tok_acc[v].mean()),
                     "n": len(v)} for k, v in cells.items()}
  return {"exact": float(exact.mean()) if len(examples) else math.nan,
          "token_accuracy": (float(tok_acc.mean()) if len(examples)
                             else math.nan),
          "cells": cell_scores}


def chunked_perplexity(model, tokens, *, chunk_len: int,
                       stride: int | None = None, batch_size: int = 4,
                       score_from: int = 0, per_window: bool = False
                       ) -> dict[str, Any]:
  """Perplexity of long token streams evaluated in windows of `chunk_len`.

  Args:
    model: a `Decoder`.
    tokens: `[N]` or `[B, N]` token ids (each row one long document).
    chunk_len: window length (the evaluation context length).
    stride: window step; default `chunk_len` (disjoint windows). With a
      smaller stride each token is scored once, in the first window whose
      not-yet-scored part contains it (the usual sliding-window protocol).
    batch_size: windows per forward pass.
    score_from: additionally skip targets at window positions below this
      (e.g. the original training length, to score only extrapolated
      positions).

    per_window: also return each window's summed NLL and scored-token
      count (windows in order: row by row, by start), e.g. to pair two
      models' perplexities window by window.

  Returns:
    {"perplexity", "nll" (mean per token), "tokens" (number scored)}, and
    with `per_window` "window_nll" and "window_tokens" (lists).
  """
  toks = np.asarray(tokens)
  if toks.ndim == 1:
    toks = toks[None]
  stride = chunk_len if stride is None else stride
  if not 0 < stride <= chunk_len:
    raise ValueError(f"stride must be in (0, chunk_len={chunk_len}], got "
                     f"{stride}")
  if toks.shape[1] < chunk_len:
    raise ValueError(f"sequences of length {toks.shape[1]} are shorter than "
                     f"chunk_len={chunk_len}")
  windows, masks = [], []
  for row in toks:
    scored_until = 0  # targets with index < scored_until are done
    for start in range(0, row.shape[0] - chunk_len + 1, stride):
      window = row[start:start + chunk_len]
      target_pos = start + 1 + np.arange(chunk_len - 1)
      mask = (target_pos >= scored_until) & (np.arange(1, chunk_len) >=
                                             max(score_from, 1))
      scored_until = start + chunk_len
      windows.append(window)
      masks.append(mask)
  windows = np.stack(windows)
  masks = np.stack(masks)
  nll, count, win_nll = 0.0, 0, []
  for s in range(0, len(windows), batch_size):
    # Pad the last batch (mask False) so every call has one shape.
    ids = _pad_rows(windows[s:s + batch_size], batch_size)
    m = _pad_rows(masks[s:s + batch_size], batch_size)
    logp = jax.nn.log_softmax(model_logits(model, ids)[:, :-1], -1)
    tok_nll = -jnp.take_along_axis(logp, jnp.asarray(ids[:, 1:, None]),
                                   -1)[..., 0]
    rows_nll = np.asarray(jnp.sum(jnp.where(m, tok_nll, 0.0), -1),
                          np.float64)
    win_nll += rows_nll[:len(windows) - s].tolist()
    nll += float(rows_nll.sum())
    count += int(m.sum())
  mean = nll / max(count, 1)
  out = {"perplexity": math.exp(mean), "nll": mean, "tokens": count}
  if per_window:
    out.update(window_nll=win_nll,
               window_tokens=[int(c) for c in masks.sum(-1)])
  return out


# -- train short / test long ---------------------------------------------------


def scaling_for(method: str, *, train_len: int, eval_len: int,
                options: Mapping[str, Any] | None = None
                ) -> dict[str, Any] | None:
  """`rope_scaling` dict for `method` at S = eval_len / train_len.

  See `jaxlab.nn.rope.extension_scaling` (static methods get `factor=S`,
  length-dependent ones factor 1; "default" is None).
  """
  return rope_lib.extension_scaling(method, train_len=train_len,
                                    eval_len=eval_len, options=options)


def with_rope_scaling(model, rope_scaling: Mapping[str, Any] | None,
                      **config_overrides: Any):
  """The same parameters under a copy of the config with `rope_scaling`.

  No parameter is copied or re-initialised: the new module's state is the
  old one's arrays (RoPE has no parameters).
  """
  cfg = model.cfg.replace(rope_scaling=None if rope_scaling is None
                          else dict(rope_scaling), **config_overrides)
  cfg.rope_tables()  # validate early (unknown method, factor < 1, ...)
  abstract = nnx.eval_shape(
      lambda: decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0)))
  graphdef, _ = nnx.split(abstract)
  _, state = nnx.split(model)
  return nnx.merge(graphdef, state)


def train_short_test_long(
    model, *, train_len: int, eval_lengths: Sequence[int],
    tasks: Mapping[str, Callable[[Any, int], float]],
    methods: Sequence[str] = DEFAULT_METHODS,
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
  """Evaluates one trained model under every RoPE scaling at every length.

  Args:
    model: a `Decoder` trained at context `train_len`.
    train_len: the training (original) context length L.
    eval_lengths: evaluation lengths; S = length / train_len per length.
    tasks: name -> fn(model_variant, eval_len) -> float.
    methods: registered `jaxlab.nn.rope` scalings ("default" = no scaling).
    method_options: per-method extra `rope_scaling` keys.

  Returns:
    {"methods", "lengths", "metrics": {task: {method: [value per length]}}}.
  """
  method_options = dict(method_options or {})
  metrics: dict[str, dict[str, list[float]]] = {t: {} for t in tasks}
  for method in methods:
    for length in eval_lengths:
      variant = with_rope_scaling(model, scaling_for(
          method, train_len=train_len, eval_len=length,
          options=method_options.get(method)))
      for task, fn in tasks.items():
        metrics[task].setdefault(method, []).append(float(fn(variant,
                                                             length)))
  return {"methods": list(methods), "lengths": [int(x) for x in eval_lengths],
          "metrics": metrics}


# -- RULER-like synthetic suite (paper M's miniature) ---------------------------

RULER_TASKS = ("niah_multikey", "niah_multivalue", "variable_tracking")


@dataclasses.dataclass(frozen=True)
class RulerTemplates:
  """Texts of the RULER-like tasks (Hsieh et al. 2024), any tokenizer.

  `{key}`, `{value}`, `{name}`, `{prev}` are filled in; `answer_lead` ends
  every prompt (the question itself when the question comes last; after a
  question-first prompt, `question_first_lead`, which does not repeat the
  key, so only the early question says what to retrieve).
  """
  filler: str = NIAH_FILLER
  keys: tuple[str, ...] = NIAH_KEYS
  value_alphabet: str = "0123456789"
  value_len: int = 7
  value_sep: str = ", "
  needle: str = NIAH_NEEDLE
  question: str = "What is the special magic {key} number? "
  answer_lead: str = ("What is the special magic {key} number? The special "
                      "magic {key} number is: ")
  multivalue_question: str = "What are all the special magic {key} numbers? "
  multivalue_lead: str = ("What are all the special magic {key} numbers? The "
                          "special magic {key} numbers are: ")
  var_names: tuple[str, ...] = ("AXQ", "BRT", "CME", "DKW", "EZP", "FLO",
                                "GHU", "HIV", "JNY", "KSB", "LTC", "MWD")
  vt_first: str = "VAR {name} = {value}. "
  vt_next: str = "VAR {name} = VAR {prev}. "
  vt_question: str = "Which variables are assigned the value {value}? "
  vt_lead: str = ("Which variables are assigned the value {value}? They "
                  "are: ")
  name_sep: str = " "
  question_first_lead: str = "Answer: "


@dataclasses.dataclass(frozen=True)
class RulerExample(RetrievalExample):
  """A `RetrievalExample` with its task, answer parts and question side."""
  task: str
  parts: tuple[str, ...]
  question_first: bool


def _value(rng: np.random.Generator, t: RulerTemplates) -> str:
  return "".join(t.value_alphabet[i] for i in
                 rng.integers(0, len(t.value_alphabet), t.value_len))


def _find(ids: np.ndarray, sub: Sequence[int]) -> int:
  sub = np.asarray(sub)
  for i in range(len(ids) - len(sub) + 1):
    if np.array_equal(ids[i:i + len(sub)], sub):
      return i
  return -1


def ruler_example(task: str, tokenizer, *, length: int, depth: float,
                  rng: np.random.Generator, question_first: bool = False,
                  num_keys: int = 4, num_values: int = 2, num_hops: int = 2,
                  templates: RulerTemplates = RulerTemplates(),
                  add_bos: bool = False) -> RulerExample:
  """One RULER-like prompt of exactly `length` tokens ending before the answer.

  Tasks:
    niah_multikey: `num_keys` keyed needles (multi-token values), one asked.
    niah_multivalue: one key holds `num_values` values (all asked, in prompt
      order, joined by `value_sep`), plus `num_keys - 1` distractor keys.
    variable_tracking: a chain VAR X1 = v, X2 = X1, ... of `num_hops + 1`
      names and a distractor chain; asked: every name holding v, in order.
  The asked needle (or the chain's first link) sits at `depth`; the others
  at random depths. `question_first` puts the question before the context
  and ends the prompt with the key-free `question_first_lead`.
  """
  t = templates
  if task not in RULER_TASKS:
    raise ValueError(f"unknown RULER task {task!r}; valid: {RULER_TASKS}")
  if task == "variable_tracking":
    names = rng.choice(len(t.var_names), size=2 * (num_hops + 1),
                       replace=False)
    value, other = _value(rng, t), _value(rng, t)
    while other == value:
      other = _value(rng, t)
    needles, asked = [], []
    for c, (v, d0) in enumerate(((value, depth),
                                 (other, float(rng.uniform())))):
      chain = [t.var_names[i] for i in
               names[c * (num_hops + 1):(c + 1) * (num_hops + 1)]]
      depths = np.sort(np.clip(d0 + np.sort(rng.uniform(0, 1 - d0,
                                                        num_hops)), 0, 1))
      texts = [t.vt_first.format(name=chain[0], value=v)] + [
          t.vt_next.format(name=n, prev=p) for p, n in zip(chain, chain[1:])]
      needles += list(zip([d0, *depths], texts))
      if c == 0:
        asked = chain
    parts = tuple(asked)
    question = t.vt_question.format(value=value)
    lead = t.vt_lead.format(value=value)
    answer = t.name_sep.join(parts)
    order_texts = None
  else:
    n_keys = max(num_keys, 1)
    if n_keys > len(t.keys):
      raise ValueError(f"num_keys={num_keys} needs more than {len(t.keys)} "
                       "keys")
    chosen = [t.keys[i] for i in rng.choice(len(t.keys), n_keys,
                                            replace=False)]
    key = chosen[0]
    n_vals = num_values if task == "niah_multivalue" else 1
    vals = []
    while len(vals) < n_vals:
      v = _value(rng, t)
      if v not in vals:
        vals.append(v)
    needles = [(depth, t.needle.format(key=key, value=vals[0]))]
    needles += [(float(rng.uniform()), t.needle.format(key=key, value=v))
                for v in vals[1:]]
    needles += [(float(rng.uniform()), t.needle.format(key=k,
                                                       value=_value(rng, t)))
                for k in chosen[1:]]
    if task == "niah_multivalue":
      question = t.multivalue_question.format(key=key)
      lead = t.multivalue_lead.format(key=key)
    else:
      question = t.question.format(key=key)
      lead = t.answer_lead.format(key=key)
    order_texts = [(v, t.needle.format(key=key, value=v)) for v in vals]
    parts, answer = tuple(vals), None
  prompt, start = build_prompt(
      tokenizer, length=length, depth=depth, needle=needles[0][1],
      question=t.question_first_lead if question_first else lead,
      filler=t.filler, prefix=question if question_first else "",
      add_bos=add_bos, extra_needles=needles[1:])
  if order_texts is not None:  # values in the order they appear
    found = sorted((_find(prompt, tokenizer.encode(txt)), v)
                   for v, txt in order_texts)
    parts = tuple(v for _, v in found)
    answer = t.value_sep.join(parts)
  answer_ids = np.asarray(tokenizer.encode(answer), np.int32)
  return RulerExample(prompt, answer_ids, answer, length, depth, start,
                      task=task, parts=parts, question_first=question_first)


def ruler_suite(tokenizer, *, lengths: Sequence[int],
                depths: Sequence[float], samples: int = 1, seed: int = 0,
                tasks: Sequence[str] = RULER_TASKS,
                question_first: Sequence[bool] = (False, True),
                **kwargs: Any) -> list[RulerExample]:
  """`samples` examples per (task, question side, length, depth), seeded."""
  out = []
  for ti, task in enumerate(tasks):
    for qi, qf in enumerate(question_first):
      for li, length in enumerate(lengths):
        for di, depth in enumerate(depths):
          rng = np.random.default_rng([seed, ti, qi, li, di])
          for _ in range(samples):
            out.append(ruler_example(task, tokenizer, length=int(length),
                                     depth=float(depth), rng=rng,
                                     question_first=bool(qf), **kwargs))
  return out


def ruler_scores(examples: Sequence[RetrievalExample],
                 predictions: Sequence[Sequence[int]], *,
                 tokenizer=None) -> dict[str, Any]:
  """Scores generated answers against the references.

  Per example: `exact` (the first A generated tokens equal the A answer
  tokens), `token_accuracy` (fraction of the A positions that match) and,
  with a `tokenizer` and `RulerExample`s, `part_recall` (RULER's
  string-match: the fraction of answer parts found in the decoded text).
  Returns the means, and the same per task and question side under
  "groups" ({"<task>/<first|last>": {...,"n"}}).
  """
  if len(examples) != len(predictions):
    raise ValueError(f"{len(examples)} examples but {len(predictions)} "
                     "predictions")
  rows = []
  for ex, pred in zip(examples, predictions):
    ref = np.asarray(ex.answer_ids)
    got = np.full(len(ref), -1)
    got[:min(len(ref), len(pred))] = np.asarray(pred[:len(ref)])
    row = {"exact": float(np.all(got == ref)),
           "token_accuracy": float(np.mean(got == ref)) if len(ref) else 1.0}
    parts = getattr(ex, "parts", None)
    if tokenizer is not None and parts:
      text = tokenizer.decode([int(x) for x in pred])
      row["part_recall"] = float(np.mean([p in text for p in parts]))
    rows.append(row)

  def mean(rs):
    keys = rows[0].keys() if rows else ()
    return {k: float(np.mean([r[k] for r in rs if k in r])) for k in keys
            if any(k in r for r in rs)} | {"n": len(rs)}

  groups: dict[str, list[dict[str, float]]] = {}
  for ex, row in zip(examples, rows):
    if isinstance(ex, RulerExample):
      side = "first" if ex.question_first else "last"
      groups.setdefault(f"{ex.task}/{side}", []).append(row)
  return mean(rows) | {"groups": {k: mean(v) for k, v in groups.items()}}


# -- chat needle-in-a-haystack for instruction-tuned models --------------------

# English haystack: sentences drawn from these parts (subject, action, time),
# so every example has its own varied, natural-looking text.
HAYSTACK_SUBJECTS = (
    "The old farmer", "A young teacher", "The city council", "My neighbour",
    "The museum guide", "A tired nurse", "The baker on the corner",
    "Our football coach", "The quiet librarian", "A travelling musician",
    "The ship's captain", "The village doctor", "A curious student",
    "The night watchman", "Her grandmother", "The local newspaper")
HAYSTACK_ACTIONS = (
    "repaired the wooden fence", "planted tomatoes in the garden",
    "wrote a long letter to a friend", "walked the dog along the river",
    "painted the kitchen a pale yellow", "read a novel about the sea",
    "cooked a large pot of soup", "cleaned the windows of the shop",
    "visited the market to buy apples", "fixed the bicycle's chain",
    "sang an old song by the fire", "counted the sheep in the field",
    "opened a small bakery downtown", "collected shells on the beach",
    "studied the map of the mountains", "baked bread for the whole street")
HAYSTACK_TIMES = (
    "before the storm arrived", "on a cold Monday morning",
    "after the long winter", "while the children were at school",
    "late in the evening", "during the summer festival",
    "just before sunset", "on the first day of spring",
    "when the train was late", "after a busy week at work",
    "as the rain began to fall", "in the middle of the night")
CHAT_NEEDLE = "The secret code is {value}. "
CHAT_INTRO = "Read the text below, then answer the question after it.\n\n"
CHAT_QUESTION = "\n\nWhat is the secret code? Answer with the number only."


def haystack_text(rng: np.random.Generator, sentences: int) -> str:
  """`sentences` random English sentences (subject, action, time)."""
  return " ".join(
      f"{HAYSTACK_SUBJECTS[a]} {HAYSTACK_ACTIONS[b]} {HAYSTACK_TIMES[c]}."
      for a, b, c in zip(
          rng.integers(0, len(HAYSTACK_SUBJECTS), sentences),
          rng.integers(0, len(HAYSTACK_ACTIONS), sentences),
          rng.integers(0, len(HAYSTACK_TIMES), sentences)))


def chat_needle_example(tokenizer, *, length: int, depth: float,
                        rng: np.random.Generator, digits: int = 4,
                        needle: str = CHAT_NEEDLE, intro: str = CHAT_INTRO,
                        question: str = CHAT_QUESTION,
                        system: str | None = None) -> RulerExample:
  """Needle-in-a-haystack in the tokenizer's chat template, `length` tokens.

  The user turn is `intro`, an English haystack (`haystack_text`, fresh per
  example) with `needle` (a `digits`-digit value, first digit non-zero) at
  the sentence boundary nearest `depth`, then `question`; the prompt ends
  with the template's assistant header (the generation prompt), so the model
  answers in its own words. Scored by `ruler_scores`: `part_recall` = the
  value appears in the decoded answer. Needs a tokenizer with
  `render_chat` (`jaxlab.data.hf_tokenizer.HFTokenizer`).
  """
  if not hasattr(tokenizer, "render_chat"):
    raise ValueError("chat_needle_example needs a tokenizer with a chat "
                     "template (render_chat), e.g. "
                     "jaxlab.io.pretrained.tokenizer(NAME)")
  value = str(rng.integers(1, 10)) + "".join(
      str(d) for d in rng.integers(0, 10, digits - 1))
  marker = "\x00HAYSTACK\x00"
  messages = ([{"role": "system", "content": system}] if system else []) + [
      {"role": "user", "content": marker}]
  head, tail = tokenizer.render_chat(messages,
                                     add_generation_prompt=True).split(marker)
  filler = haystack_text(rng, max(8, length // 8))
  prompt, start = build_prompt(
      tokenizer, length=length, depth=depth, needle=needle.format(value=value),
      question=question + tail, filler=filler, prefix=head + intro)
  return RulerExample(prompt, np.asarray(tokenizer.encode(value), np.int32),
                      value, length, depth, start, task="needle_chat",
                      parts=(value,), question_first=False)


# -- RULER as released (Hsieh et al. 2024, github.com/NVIDIA/RULER) ------------

# Tokens each RULER task generates, by its base task (RULER
# scripts/data/synthetic/constants.py, `tokens_to_generate`); a task name as
# scripts/synthetic.yaml names it (niah_single_1, vt, cwe, fwe, qa_1, ...)
# maps to its base task with `ruler_base_task`.
RULER_TOKENS_TO_GENERATE = {"niah": 128, "variable_tracking": 30,
                            "common_words_extraction": 120,
                            "freq_words_extraction": 50, "qa": 32}
_RULER_BASE = {"vt": "variable_tracking", "cwe": "common_words_extraction",
               "fwe": "freq_words_extraction"}


def ruler_base_task(task: str) -> str:
  """The base task of one of RULER's 13 task names (synthetic.yaml):
  niah_* -> niah, vt, cwe, fwe -> their long names, qa_* -> qa."""
  name = task.lower()
  for prefix in ("niah", "qa"):
    if name.startswith(prefix):
      return prefix
  if name in _RULER_BASE:
    return _RULER_BASE[name]
  if name in RULER_TOKENS_TO_GENERATE:
    return name
  raise ValueError(f"unknown RULER task {task!r}; valid: niah_*, vt, cwe, "
                   "fwe, qa_* (RULER scripts/synthetic.yaml)")


def ruler_postprocess(pred: str) -> str:
  """RULER's `postprocess_pred` (scripts/eval/evaluate.py): strip, control
  characters to newlines, strip again."""
  return re.sub(r"[\x00-\x1f]", "\n", pred.strip()).strip()


def ruler_match_all(pred: str, refs: Sequence[str]) -> float:
  """One row of RULER's `string_match_all`: the fraction of the references
  found (case-insensitive substring) in the prediction, in [0, 1]."""
  return sum(r.lower() in pred.lower() for r in refs) / len(refs)


def ruler_match_part(pred: str, refs: Sequence[str]) -> float:
  """One row of RULER's `string_match_part`: 1 if any reference is found
  (case-insensitive substring) in the prediction, else 0."""
  return float(max(r.lower() in pred.lower() for r in refs))


def ruler_row_score(task: str, pred: str, refs: Sequence[str]) -> float:
  """A row's score in [0, 1] with the metric RULER gives `task`
  (scripts/eval/synthetic/constants.py: qa -> string_match_part, every
  other task -> string_match_all), after `ruler_postprocess`. A task's
  RULER score is 100 x the mean over its rows (rounded to 2 decimals)."""
  fn = ruler_match_part if ruler_base_task(task) == "qa" else ruler_match_all
  return fn(ruler_postprocess(pred), list(refs))
