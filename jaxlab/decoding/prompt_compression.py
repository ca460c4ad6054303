"""Prompt compression with a draft model: SpecPC, the SpecKV-PC cascade and
the random / last-N baselines (Galim et al. 2026, "Draft-based Approximate
Inference for LLMs", paper M).

SpecPC (paper M, SpecPC steps 1-4):
  1. the draft reads the whole prompt and generates `lookahead` tokens; the
     attention of the last `window` prompt queries and of each fed
     generated token over the prompt keys is kept, per layer;
  2. per layer from `start_layer` on, the window queries are weighted
     linearly (linspace(0, 1, W): the farther from the end, the less) and
     "b h q k -> b k" is reduced with max (or mean); then max over layers,
     then max over the generated steps (`token_importance`);
  3. the scores are max-pooled (centred, `kernel`), the top-C_max tokens are
     each expanded with a span of `neighbors` positions around them
     (nearest first), deduped in that order, the last `keep_window` tokens
     go first, the list is truncated to C_max and sorted (`select_tokens`);
  4. the target reads the compressed prompt with fresh, contiguous
     positions (plain `sampler.generate`).

SpecKV-PC (`speckv_pc_generate`): SpecPC to `pc_budget` with the full draft
answer as lookahead, then SpecKV (`decoding.speckv.speckv_generate`) on the
compressed prompt, reusing those draft tokens (no second draft pass).

Compressors are a registry (`COMPRESSORS`: "specpc", "random", "last_n"),
each `fn(prompts, *, budget, ...) -> list of kept-index arrays`.
"""

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.decoding import kv_policies
from jaxlab.decoding import speckv as speckv_lib
from jaxlab.decoding import sampler
from jaxlab.registry import Registry


@dataclasses.dataclass(frozen=True)
class SpecPCConfig:
  """SpecPC options; defaults are the reference's RULER settings.

  Attributes:
    lookahead: draft tokens generated (reference default 1).
    window: last prompt queries whose attention is kept (64).
    start_layer: first draft layer used (8: early layers are unfocused);
      a draft with <= start_layer layers uses all its layers.
    weighted_query: weight the window queries by linspace(0, 1, W).
    reduce: "max" (reference code) or "mean" over heads and queries.
    kernel: centred max-pool width over tokens (64 RULER, 32 LongBench).
    neighbors: width of the span of positions kept around each selected
      token, offsets -((n-1)//2) .. n-1-(n-1)//2 (None = kernel; 0 or 1 =
      the token alone). See `select_tokens`.
    keep_window: last prompt tokens always kept (64).
  """
  lookahead: int = 1
  window: int = 64
  start_layer: int = 8
  weighted_query: bool = True
  reduce: str = "max"
  kernel: int = 64
  neighbors: int | None = None
  keep_window: int = 64


@dataclasses.dataclass
class Compressed:
  """Compressed prompts: `prompts[i] = original[i][indices[i]]`."""
  prompts: list[list[int]]
  indices: list[np.ndarray]
  draft_tokens: list[list[int]] | None = None
  scores: list[np.ndarray] | None = None


COMPRESSORS: Registry[Any] = Registry("prompt compressor")


def _check_budget(budget: int) -> None:
  if budget < 1:
    raise ValueError(f"budget (C_max) must be >= 1, got {budget}")


@functools.partial(jax.jit, static_argnums=0)
def _attentions(graphdef, state, ids_bt):
  model = nnx.merge(graphdef, state)
  return model.forward(ids_bt, output_attentions=True).attentions


def token_importance(model, prompt: list[int], generated: list[int],
                     config: SpecPCConfig = SpecPCConfig()) -> np.ndarray:
  """SpecPC importance `[P]` of each prompt token (paper M, SpecPC step 2).

  One teacher-forced pass over [prompt ‖ generated[:-1]] gives the
  attention each generated token's query had while decoding (the last
  generated token is never fed) and the window queries' at prefill.
  """
  if config.reduce not in ("max", "mean"):
    raise ValueError(f"reduce must be 'max' or 'mean', got "
                     f"{config.reduce!r}")
  p = len(prompt)
  ids = np.asarray([list(prompt) + list(generated[:-1])], np.int32)
  graphdef, state = nnx.split(model)
  atts = _attentions(graphdef, state, jnp.asarray(ids))
  num_layers = len(atts)
  first = config.start_layer if num_layers > config.start_layer else 0
  w = min(config.window, p)
  weights = (jnp.linspace(0.0, 1.0, w) if config.weighted_query
             else jnp.ones((w,)))
  red = jnp.max if config.reduce == "max" else jnp.mean
  layer_scores = []
  for a in atts[first:]:
    a = a[0].astype(jnp.float32)  # [N, T, T]
    win = a[:, p - w:p, :p] * weights[None, :, None]
    steps = [red(win, axis=(0, 1))]
    steps += [red(a[:, t, :p], axis=0) for t in range(p, a.shape[1])]
    layer_scores.append(jnp.stack(steps))  # [steps, P]
  per_step = jnp.max(jnp.stack(layer_scores), axis=0)
  return np.asarray(jnp.max(per_step, axis=0))


def _centre_offsets(width: int) -> tuple[int, int]:
  """(left, right) extents of a centred span of `width` positions.

  The reference's convention: left = (width-1)//2, right = width-1-left, so
  an even span reaches one position further right than left.
  """
  left = (width - 1) // 2
  return left, width - 1 - left


def _centre_max_pool(x: np.ndarray, kernel: int) -> np.ndarray:
  """Stride-1 max-pool, window [i-left, i+right] (`_centre_offsets`).

  Padded with zeros like the reference's `F.pad`; the scores are attention
  probabilities (>= 0), so that equals padding with -inf.
  """
  left, right = _centre_offsets(kernel)
  padded = np.pad(x, (left, right), constant_values=0.0)
  return np.lib.stride_tricks.sliding_window_view(padded, kernel).max(axis=-1)


def neighbor_offsets(neighbors: int) -> np.ndarray:
  """Offsets of the span kept around a selected token, nearest first.

  `neighbors` = n positions, offsets -((n-1)//2) .. n-1-(n-1)//2; at equal
  distance the earlier token (-d) comes before the later one (+d). n = 0
  (the reference skips the expansion) and n = 1 both give [0].
  """
  left, right = _centre_offsets(max(neighbors, 1))
  offsets = np.arange(-left, right + 1)
  return offsets[np.argsort(np.abs(offsets), kind="stable")]


def _first_occurrences(x: np.ndarray) -> np.ndarray:
  """`x` without repeats, in order of first occurrence (`pandas.unique`)."""
  _, first = np.unique(x, return_index=True)
  return x[np.sort(first)]


def select_tokens(scores: np.ndarray, *, budget: int, kernel: int = 64,
                  neighbors: int | None = None,
                  keep_window: int = 64) -> np.ndarray:
  """Kept prompt indices, ascending (paper M, SpecPC step 3; arXiv 2506.08373).

  The reference's `specpc_select_input_token_indices`
  (furiosa-ai/draft-based-approx-llm, `specpc/specpc.py`), with C = budget
  (`max_capacity_prompt`), k = kernel, n = neighbors (`neighbor_tokens`,
  None = k) and W = keep_window (`window_size`):
    1. pool: s'_i = max(s_{i-l}, ..., s_{i+r}) with l = (k-1)//2 and
       r = k-1-l, zero-padded at the ends (`_centre_max_pool`);
    2. rank: the top-C positions by s', best first, ties toward the lower
       index;
    3. expand: each ranked position i becomes i+d for the n offsets
       d = -((n-1)//2) .. n-1-(n-1)//2, nearest first (`neighbor_offsets`);
       positions outside [0, P) are dropped (the reference clamps them to
       the ends, which only repeats a position already listed, since the
       end itself lies nearer to i);
    4. prepend the last W positions, dedup keeping first occurrences,
       keep the first C and sort.
  budget >= P keeps every token (the reference's result then too).

  Deviations (the paper specifies neither): the reference's `torch.topk`
  and `argsort` of |d| leave the order of ties open, and max-pooling makes
  ties common (a local maximum fills up to k positions of s'). Here ties
  always go to the lower index (step 2) and -d comes before +d (step 3).
  On uniform random scores at P=4096, C=1024, k=n=W=64, PyTorch 2.13 CPU's
  tie order changes 0-39 of the 1024 kept indices; with stable sorts in
  place of `topk` and `argsort` the reference equals this function. And
  W > P keeps the whole prompt as the window, where the reference raises.

  Args:
    scores: `[P]` token importance (`token_importance`), >= 0.
    budget: C_max, tokens kept (>= 1).
    kernel: pooling width k (>= 1; 1 = no pooling).
    neighbors: span width n around each ranked token (>= 0; None = kernel).
    keep_window: W, last prompt tokens always kept (>= 0).

  Returns:
    `[min(budget, P)]` int indices into the prompt, ascending.
  """
  _check_budget(budget)
  n = kernel if neighbors is None else neighbors
  for name, value, low in (("kernel", kernel, 1), ("neighbors", n, 0),
                           ("keep_window", keep_window, 0)):
    if value < low:
      raise ValueError(f"SpecPC {name} must be >= {low}, got {value}")
  scores = np.asarray(scores, np.float64)
  if scores.ndim != 1:
    raise ValueError(f"scores must be one score per prompt token, shape "
                     f"[P], got {scores.shape}")
  p = len(scores)
  if budget >= p:
    return np.arange(p)
  pooled = _centre_max_pool(scores, kernel)
  ranked = np.argsort(-pooled, kind="stable")[:budget]
  expanded = (ranked[:, None] + neighbor_offsets(n)[None, :]).reshape(-1)
  expanded = expanded[(expanded >= 0) & (expanded < p)]
  window = np.arange(max(p - keep_window, 0), p)
  kept = _first_occurrences(np.concatenate([window, expanded]))[:budget]
  return np.sort(kept)


def _apply(prompts, indices, **extra) -> Compressed:
  return Compressed(prompts=[np.asarray(p)[i].tolist()
                             for p, i in zip(prompts, indices)],
                    indices=list(indices), **extra)


@COMPRESSORS.register("specpc")
def specpc_compress(prompts: list[list[int]], *, budget: int, draft: Any,
                    target: Any = None,
                    config: SpecPCConfig = SpecPCConfig(),
                    draft_tokens: list[list[int]] | None = None,
                    importance: list[np.ndarray] | None = None
                    ) -> Compressed:
  """SpecPC: compress each prompt to `budget` tokens with the draft.

  `target`, when given, is checked to share the draft's vocabulary. A
  prompt no longer than `budget` is returned unchanged. `importance`, when
  given, is each prompt's `token_importance` (computed once, selected at
  several budgets).
  """
  _check_budget(budget)
  if target is not None:
    kv_policies.check_draft(target, draft)
  if draft_tokens is None:
    draft_tokens = (sampler.generate(draft, prompts,
                                     max_new_tokens=config.lookahead).tokens
                    if config.lookahead > 0 else [[] for _ in prompts])
  indices, scores = [], []
  for i, (prompt, gen) in enumerate(zip(prompts, draft_tokens)):
    if len(prompt) <= budget:
      indices.append(np.arange(len(prompt)))
      scores.append(None)
      continue
    s = (token_importance(draft, prompt, gen, config) if importance is None
         else np.asarray(importance[i]))
    scores.append(s)
    indices.append(select_tokens(s, budget=budget, kernel=config.kernel,
                                 neighbors=config.neighbors,
                                 keep_window=config.keep_window))
  return _apply(prompts, indices, draft_tokens=draft_tokens, scores=scores)


@COMPRESSORS.register("random")
def random_compress(prompts: list[list[int]], *, budget: int, seed: int = 0,
                    keep_window: int = 0, **unused: Any) -> Compressed:
  """Baseline: the last `keep_window` tokens plus uniformly random others."""
  del unused
  _check_budget(budget)
  rng = np.random.default_rng(seed)
  indices = []
  for p in prompts:
    n = len(p)
    if n <= budget:
      indices.append(np.arange(n))
      continue
    kw = min(keep_window, budget)
    rest = rng.choice(n - kw, size=budget - kw, replace=False)
    indices.append(np.sort(np.concatenate([rest, np.arange(n - kw, n)])))
  return _apply(prompts, indices)


@COMPRESSORS.register("last_n")
def last_n_compress(prompts: list[list[int]], *, budget: int,
                    **unused: Any) -> Compressed:
  """Baseline: the last `budget` tokens (a sliding window over the prompt)."""
  del unused
  _check_budget(budget)
  return _apply(prompts, [np.arange(max(len(p) - budget, 0), len(p))
                          for p in prompts])


def specpc_generate(target: Any, draft: Any, prompts: list[list[int]], *,
                    budget: int, max_new_tokens: int,
                    config: SpecPCConfig = SpecPCConfig(),
                    **generate_kwargs: Any):
  """SpecPC then the target on the compressed prompts: (result, Compressed)."""
  comp = specpc_compress(prompts, budget=budget, draft=draft, target=target,
                         config=config)
  return sampler.generate(target, comp.prompts, max_new_tokens=max_new_tokens,
                          **generate_kwargs), comp


def speckv_pc_generate(target: Any, draft: Any, prompts: list[list[int]], *,
                       pc_budget: int, budget: int, max_new_tokens: int,
                       config: SpecPCConfig = SpecPCConfig(),
                       lookahead: int | None = None, window: int = 32,
                       kernel: int = 7, reduce: str = "max",
                       **generate_kwargs: Any):
  """SpecKV-PC (paper M): SpecPC to `pc_budget` with the draft's full answer
  (`lookahead` None = `max_new_tokens`) as lookahead, then SpecKV at
  `budget` on the compressed prompts, reusing those draft tokens.
  Returns (result, Compressed)."""
  kv_policies.check_draft(target, draft)
  n_look = max_new_tokens if lookahead is None else lookahead
  cfg = dataclasses.replace(config, lookahead=n_look)
  comp = specpc_compress(prompts, budget=pc_budget, draft=draft, config=cfg)
  out = speckv_lib.speckv_generate(
      target, draft, comp.prompts, budget=budget,
      max_new_tokens=max_new_tokens, draft_tokens=comp.draft_tokens,
      window=window, kernel=kernel, reduce=reduce, **generate_kwargs)
  return out, comp


def spearman(a: np.ndarray, b: np.ndarray) -> float:
  """Spearman rank correlation (Pearson of average ranks; ties averaged)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
    raise ValueError(f"spearman needs two 1-D arrays of one length >= 2, got "
                     f"{a.shape} and {b.shape}")

  def ranks(x):
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=r)
    return (sums / counts)[inv]

  ra, rb = ranks(a), ranks(b)
  ra, rb = ra - ra.mean(), rb - rb.mean()
  denom = np.sqrt((ra ** 2).sum() * (rb ** 2).sum())
  return float((ra * rb).sum() / denom) if denom > 0 else float("nan")
