"""Training on self-generated targets: sample -> score -> select -> cache -> NLL.

The machinery shared by PMC unlearning (spec B.4-B.6) and other methods that
train a model on text the model itself produced:

  1. for every item i of the batch whose cached score is still > 0 (or that
     has no cache entry), draw n samples x_1..x_n ~ f_theta(.|q_i) with the
     KV-cache sampler (`jaxlab.decoding.sampler.generate`);
  2. score each sample, s_k = score_fn(x_k, i) >= 0 (lower is better, 0 is
     "done"; PMC: ROUGE-L recall against the original answer), i.e. reward
     r_k = 1 - s_k;
  3. select one sample with generalised Bradley-Terry, P(k) = softmax_k(r_k /
     tau), which is softmax(-s_k / tau); tau = 0 is argmax r (argmin s, first
     on ties), the official default;
  4. update the per-item `MonotoneCache`: keep the new sample only if its
     score is <= the cached score, so an item's score never increases, and
     stop sampling an item once its score is 0;
  5. take one optimiser step on the registered loss (default `unlearn_pmc`)
     with the generic trainer's update (`jaxlab.train.runner.StepRunner`:
     `trainer.build` + `trainer.make_train_step`, AdamW from
     `jaxlab.train.optim`):
     token-mean NLL of the cached answers given their prompts (prompt tokens
     masked) + lam * NLL of paired retain QA pairs, item b paired with retain
     row (b + U) mod |D_r|, U uniform.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.decoding import sampler as sampler_lib
from jaxlab.objectives import unlearning  # registers unlearn_* losses
from jaxlab.train import runner as runner_lib


# -- prompt-masked batches -------------------------------------------------------


def encode_pairs(tokenizer, prompts: Sequence[str], answers: Sequence[str], *,
                 max_len: int) -> dict[str, np.ndarray]:
  """Right-padded next-token batch with the loss on answer tokens only.

  Row b is `bos prompt_b answer_b eos`, shifted: `inputs = ids[:-1]`,
  `targets = ids[1:]`, `mask = 1` where the target is an answer token or the
  final eos. Rows longer than `max_len + 1` ids are cut at the end (the
  answer loses its tail); `truncated` counts them.

  Returns:
    dict with int32 `inputs, targets [B, max_len]`, float32 `mask [B, max_len]`
    and int `truncated` (a Python int).
  """
  if len(prompts) != len(answers):
    raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
  b = len(prompts)
  inputs = np.full((b, max_len), tokenizer.pad_id, np.int32)
  targets = np.full((b, max_len), tokenizer.pad_id, np.int32)
  mask = np.zeros((b, max_len), np.float32)
  truncated = 0
  for i, (p, a) in enumerate(zip(prompts, answers)):
    p_ids = tokenizer.encode(p, add_bos=True)
    a_ids = tokenizer.encode(a, add_eos=True)
    ids = (p_ids + a_ids)
    if len(ids) > max_len + 1:
      truncated += 1
      ids = ids[:max_len + 1]
    n = len(ids) - 1
    inputs[i, :n] = ids[:-1]
    targets[i, :n] = ids[1:]
    # targets[t] = ids[t + 1] is an answer token when t + 1 >= len(p_ids).
    mask[i, max(len(p_ids) - 1, 0):n] = 1.0
  return {"inputs": inputs, "targets": targets, "mask": mask,
          "truncated": truncated}


# -- selection and cache ------------------------------------------------------------


def bt_select(scores: Sequence[float], *, tau: float = 0.0,
              rng: np.random.Generator | None = None) -> int:
  """Index of the selected sample (spec B.4).

  P(k) = softmax_k(r_k / tau) with r_k = 1 - s_k; tau == 0 is the argmax of
  r (argmin of s), ties to the first.
  """
  s = np.asarray(scores, np.float64)
  if s.size == 0:
    raise ValueError("bt_select needs at least one score")
  if tau <= 0:
    return int(np.argmin(s))
  if rng is None:
    raise ValueError("bt_select with tau > 0 needs an rng")
  logits = -(s - s.min()) / tau
  p = np.exp(logits)
  return int(rng.choice(len(s), p=p / p.sum()))


@dataclasses.dataclass
class CacheEntry:
  answer: str
  score: float


class MonotoneCache:
  """Per-item best (answer, score) whose score never increases (spec B.5).

  `needs_sampling(i)` is False once item i reached score 0, so sampling stops
  there and training keeps using the cached answer. `stats` counts updates.
  """

  def __init__(self):
    self._entries: dict[int, CacheEntry] = {}
    self.stats = {"samples_drawn": 0, "refreshes": 0, "replaced": 0,
                  "kept": 0, "skipped_done": 0}

  def __contains__(self, idx: int) -> bool:
    return idx in self._entries

  def __len__(self) -> int:
    return len(self._entries)

  def __getitem__(self, idx: int) -> CacheEntry:
    return self._entries[idx]

  def needs_sampling(self, idx: int) -> bool:
    entry = self._entries.get(idx)
    return entry is None or entry.score > 0

  def update(self, idx: int, answer: str, score: float) -> bool:
    """Stores (answer, score) if score <= the cached score; True if stored."""
    if not math.isfinite(score) or score < 0:
      raise ValueError(f"cache score must be finite and >= 0, got {score}")
    entry = self._entries.get(idx)
    if entry is None or score <= entry.score:
      self._entries[idx] = CacheEntry(answer, float(score))
      self.stats["replaced"] += 1
      return True
    self.stats["kept"] += 1
    return False

  def scores(self) -> dict[int, float]:
    return {i: e.score for i, e in self._entries.items()}

  def mean_score(self) -> float:
    return float(np.mean([e.score for e in self._entries.values()])) if (
        self._entries) else float("nan")


# -- sampling ------------------------------------------------------------------------


def decode_generations(tokenizer, tokens: Sequence[Sequence[int]]) -> list[str]:
  """Decoded generations, cut at the first eos (pad/bos/eos dropped)."""
  out = []
  for row in tokens:
    row = list(row)
    if tokenizer.eos_id in row:
      row = row[:row.index(tokenizer.eos_id)]
    out.append(tokenizer.decode(row))
  return out


def generate_text(model, tokenizer, prompts: Sequence[str], *,
                  max_new_tokens: int, temperature: float = 0.0,
                  top_p: float | None = None, key: jax.Array | None = None,
                  batch_size: int = 64,
                  generate_fn: Callable[..., Any] | None = None) -> list[str]:
  """Continuations of text prompts (bos + prompt), decoded up to eos."""
  generate_fn = generate_fn or sampler_lib.generate
  out = []
  for start in range(0, len(prompts), batch_size):
    chunk = prompts[start:start + batch_size]
    ids = [tokenizer.encode(p, add_bos=True) for p in chunk]
    k = None if key is None else jax.random.fold_in(key, start)
    res = generate_fn(model, ids, max_new_tokens=max_new_tokens,
                      temperature=temperature, top_p=top_p,
                      eos_id=tokenizer.eos_id, key=k,
                      pad_id=tokenizer.pad_id)
    out.extend(decode_generations(tokenizer, res.tokens))
  return out


def refresh_cache(model, tokenizer, cache: MonotoneCache,
                  indices: Sequence[int], prompts: Sequence[str],
                  score_fn: Callable[[str, int], float], *, num_samples: int,
                  temperature: float, top_p: float | None,
                  max_new_tokens: int, tau: float, key: jax.Array,
                  rng: np.random.Generator, batch_size: int = 64,
                  generate_fn=None) -> dict[str, float]:
  """Steps 1-4 of the module docstring for `indices`; returns counts."""
  todo = [int(i) for i in dict.fromkeys(indices) if cache.needs_sampling(i)]
  cache.stats["skipped_done"] += len(set(indices)) - len(todo)
  if not todo:
    return {"sampled_items": 0, "replaced": 0}
  flat = [prompts[i] for i in todo for _ in range(num_samples)]
  texts = generate_text(model, tokenizer, flat, max_new_tokens=max_new_tokens,
                        temperature=temperature, top_p=top_p, key=key,
                        batch_size=batch_size, generate_fn=generate_fn)
  cache.stats["samples_drawn"] += len(texts)
  cache.stats["refreshes"] += len(todo)
  replaced = 0
  for j, i in enumerate(todo):
    cand = texts[j * num_samples:(j + 1) * num_samples]
    scores = [float(score_fn(c, i)) for c in cand]
    k = bt_select(scores, tau=tau, rng=rng)
    replaced += cache.update(i, cand[k], scores[k])
  return {"sampled_items": len(todo), "replaced": replaced}


# -- the loop ------------------------------------------------------------------------


def default_config() -> ml_collections.ConfigDict:
  """Loop settings; defaults are the official Phi-1.5 PMC config (spec B.8)."""
  return ml_collections.ConfigDict({
      "loss": "unlearn_pmc",  # any registered trainer loss on forget/retain
      "lam": 1.5,
      "beta": 0.1,
      "gamma": 0.0,
      "num_samples": 5,
      "temperature": 1.25,
      "top_p": 0.95,
      "bt_tau": 0.0,
      "max_new_tokens": 64,
      "batch_size": 8,
      "max_len": 96,
      "steps": 40,
      "lr": 1e-5,
      "weight_decay": 0.01,
      "warmup_steps": 0,
      "clip_norm": 1.0,  # HF Trainer's default max_grad_norm
      "sample_batch_size": 64,
      "seed": 0,
  })


def forget_retain_batch(tokenizer, forget_prompts, forget_answers,
                        retain_prompts, retain_answers, *, max_len: int
                        ) -> dict[str, np.ndarray]:
  f = encode_pairs(tokenizer, forget_prompts, forget_answers, max_len=max_len)
  r = encode_pairs(tokenizer, retain_prompts, retain_answers, max_len=max_len)
  return {"forget_inputs": f["inputs"], "forget_targets": f["targets"],
          "forget_mask": f["mask"], "retain_inputs": r["inputs"],
          "retain_targets": r["targets"], "retain_mask": r["mask"]}


@nnx.jit
def _sequence_nll(m, inputs, targets, mask):
  return unlearning.model_sequence_nll(m, inputs, targets, mask)[0]


def sequence_nll_dataset(model, tokenizer, prompts, answers, *, max_len: int,
                         batch_size: int = 64) -> np.ndarray:
  """Summed answer NLL `[N]` of (prompt, answer) pairs (e.g. NPO's ref).

  One compiled program per model structure and (batch_size, max_len),
  shared by every call (a function jitted per call would compile anew each
  time: 12 compiles of the model per TOFU evaluation)."""
  f = _sequence_nll
  out = []
  for s in range(0, len(prompts), batch_size):
    enc = encode_pairs(tokenizer, prompts[s:s + batch_size],
                       answers[s:s + batch_size], max_len=max_len)
    n = len(enc["inputs"])
    pad = batch_size - n  # one compiled shape
    arr = {k: np.concatenate([enc[k], np.zeros((pad,) + enc[k].shape[1:],
                                               enc[k].dtype)])
           for k in ("inputs", "targets", "mask")}
    out.append(np.asarray(f(model, arr["inputs"], arr["targets"],
                            arr["mask"]))[:n])
  return np.concatenate(out)


def run_self_generated(model, tokenizer, *, forget_prompts: Sequence[str],
                       retain_prompts: Sequence[str],
                       retain_answers: Sequence[str],
                       score_fn: Callable[[str, int], float] | None,
                       config: ml_collections.ConfigDict,
                       fixed_forget_answers: Sequence[str] | None = None,
                       ref_forget_nll: np.ndarray | None = None,
                       extra_forget_arrays: dict[str, np.ndarray] | None = None,
                       eval_fn: Callable[[int], dict] | None = None,
                       eval_every: int = 0,
                       generate_fn=None) -> dict[str, Any]:
  """Trains `model` in place; returns history, cache and counts.

  With `score_fn` (PMC) the forget targets come from the monotone cache of
  self-generated samples. With `fixed_forget_answers` (GA/GD/NPO/SimNPO on the
  original answers, IDK on "I don't know.") no sampling happens and the
  same loop runs the baseline named by `config.loss`. `extra_forget_arrays`
  (key -> array with one row per forget item) adds those rows of the
  step's forget items to the batch (e.g. DPO's rejected answers).
  """
  if (score_fn is None) == (fixed_forget_answers is None):
    raise ValueError("give exactly one of score_fn (self-generated targets) "
                     "and fixed_forget_answers (baselines)")
  if not forget_prompts:
    raise ValueError("forget_prompts is empty")
  if not retain_prompts:
    raise ValueError("retain_prompts is empty; PMC/GD/NPO pair every forget "
                     "item with a retain item")
  n_f, n_r = len(forget_prompts), len(retain_prompts)
  bs = int(config.batch_size)
  rng = np.random.default_rng(int(config.seed))
  key = jax.random.key(int(config.seed))
  loss_cfg = ml_collections.ConfigDict(
      {"lam": float(config.lam), "beta": float(config.beta),
       "gamma": float(config.gamma)})
  runner = runner_lib.StepRunner(
      model, loss=config.loss, loss_config=loss_cfg,
      optim=runner_lib.optim_config(
          lr=config.lr, warmup_steps=config.warmup_steps,
          weight_decay=config.weight_decay, schedule="constant",
          clip_norm=config.get("clip_norm", 1.0)),
      steps=int(config.steps), seed=int(config.seed))
  cache = MonotoneCache()
  history = []
  order = np.array([], np.int64)
  for step in range(int(config.steps)):
    # Full batches only (one compiled shape): reshuffle when an epoch ends.
    while len(order) < bs:
      order = np.concatenate([order, rng.permutation(n_f)])
    idx, order = order[:bs], order[bs:]
    record: dict[str, Any] = {"step": step}
    if score_fn is not None:
      key, sub = jax.random.split(key)
      record.update(refresh_cache(
          runner.model(), tokenizer, cache, idx, forget_prompts, score_fn,
          num_samples=int(config.num_samples),
          temperature=float(config.temperature),
          top_p=float(config.top_p), max_new_tokens=int(config.max_new_tokens),
          tau=float(config.bt_tau), key=sub, rng=rng,
          batch_size=int(config.sample_batch_size), generate_fn=generate_fn))
      answers = [cache[int(i)].answer for i in idx]
      record["cache_mean_score"] = cache.mean_score()
      record["cache_done_frac"] = float(np.mean(
          [cache[i].score == 0 for i in cache.scores()]))
    else:
      answers = [fixed_forget_answers[int(i)] for i in idx]
    r_idx = (idx + rng.integers(0, n_r, size=bs)) % n_r
    batch = forget_retain_batch(
        tokenizer, [forget_prompts[int(i)] for i in idx], answers,
        [retain_prompts[int(i)] for i in r_idx],
        [retain_answers[int(i)] for i in r_idx], max_len=int(config.max_len))
    if ref_forget_nll is not None:
      batch["forget_ref_nll"] = np.asarray(ref_forget_nll, np.float32)[idx]
    for k, v in (extra_forget_arrays or {}).items():
      batch[k] = np.asarray(v)[idx]
    record.update(runner.step(batch, step))
    if not math.isfinite(record["loss"]):
      raise FloatingPointError(f"non-finite loss at step {step}: {record}")
    if eval_fn is not None and eval_every and (step + 1) % eval_every == 0:
      runner.write_back()
      record.update(eval_fn(step))
    history.append(record)
  runner.write_back()
  return {"history": history, "cache": cache, "cache_stats": dict(cache.stats)}


def encode_for_lm(tokenizer, prompts, answers, *, max_len: int
                  ) -> dict[str, np.ndarray]:
  """`encode_pairs` with the key names of the `lm` loss."""
  enc = encode_pairs(tokenizer, prompts, answers, max_len=max_len)
  return {"inputs": enc["inputs"], "targets": enc["targets"],
          "loss_mask": enc["mask"]}
