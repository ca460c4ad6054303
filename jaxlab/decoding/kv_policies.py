"""KV-cache policies: what the cache keeps between prefill and decoding.

`jaxlab.decoding.sampler.generate(..., cache_policy=NAME)` prefills the
prompts, then calls the registered policy on the cache before the first
decode step:

    new_cache = policy(cache, model=model, prefill=prefill, **options)

inside the compiled prefill (so a policy is traceable JAX code whose output
shapes depend only on static things: the options and input shapes).

  cache:    the `KVCache` after prefill; `cache.index` is the next free slot.
  model:    the `Decoder` (for its blocks: a policy can recompute queries).
  prefill:  a `PrefillInfo`: the residual stream entering every layer at the
            prefilled positions, their position ids and validity, and the slot
            where the prefill was written. `observation_attentions` turns it
            into the attention of the last `window` prefill queries over the
            cache, per layer: what SnapKV-style policies score keys with.
  options:  the keyword options of `generate(cache_policy_options=...)`
            (hashable values, e.g. `budget=256, window=32`).

The returned cache must leave room for the decode steps: `generate` checks
on the host after decoding that no write passed the capacity and raises
otherwise. `KVCache.gather(indices, max_len=cache.max_len)` is the usual way
to keep a subset of slots (per row, optionally per KV head) while keeping
the capacity.

Registered here: "full" (keep everything, the identity; the baseline every
eviction policy is compared with), "snapkv" (Li et al. 2024) and "speckv"
(paper M: the prefill ends with the draft's lookahead tokens; run it
through `jaxlab.decoding.speckv.speckv_generate`, which also re-feeds the
last prompt token).
`select_indices` is their key selection on plain query/key arrays; the
policies score cache slots the same way (`cache_key_scores`, pooled by
`candidate_slot_scores`; SpecKV's in `speckv_scores`) and keep one
selection per KV head for all layers (our cache shares slot positions
across layers; the reference selects per layer).
"""

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from jaxlab.nn import attention as attn_lib
from jaxlab.registry import Registry


@struct.dataclass
class PrefillInfo:
  """What a cache policy sees of the prefill (all `[B, P, ...]` arrays cover
  the P prefilled inputs: image prefix, left padding, prompt).

  Attributes:
    hidden_states: L + 1 residual streams `[B, P, D]`: the input of layer i
      is `hidden_states[i]` (the last one is the final layer's output).
    positions: position ids `[B, P]` of the prefilled inputs.
    attention_mask: `[B, P]` True for real inputs (False for padding).
    start: the cache slot where the prefill was written (int32 scalar).
  """
  hidden_states: tuple[jax.Array, ...]
  positions: jax.Array
  attention_mask: jax.Array
  start: jax.Array


class CachePolicy(Protocol):

  def __call__(self, cache: attn_lib.KVCache, *, model: Any,
               prefill: PrefillInfo, **options: Any) -> attn_lib.KVCache:
    ...


POLICIES: Registry[CachePolicy] = Registry("KV-cache policy")


def get(name: str) -> CachePolicy:
  """The registered policy `name` (ValueError listing the valid ones)."""
  return POLICIES.get(name)


def available() -> tuple[str, ...]:
  return POLICIES.names()


@POLICIES.register("full")
def full(cache: attn_lib.KVCache, *, model: Any = None,
         prefill: PrefillInfo | None = None,
         **options: Any) -> attn_lib.KVCache:
  """Keeps every slot: the identity (no eviction)."""
  del model, prefill
  if options:
    raise ValueError(f"cache policy 'full' takes no options, got "
                     f"{sorted(options)}")
  return cache


def observation_attentions(model, cache: attn_lib.KVCache,
                           prefill: PrefillInfo, *, window: int
                           ) -> tuple[jax.Array, ...]:
  """Attention of the last `window` prefill queries over the cache.

  Per layer, float32 probabilities `[B, N, window, S]`: the rows
  `[:, :, P - window:, :]` of `model.forward(..., cache=...,
  output_attentions=True).attentions` for the prefill, recomputed from the
  layer inputs in `prefill` and the cached (already rotated) keys. This is
  the "observation window" SnapKV (Li et al. 2024, sec. 4) scores prompt
  keys with. With left padding, query rows of padded inputs (when `window`
  exceeds a row's prompt) are meaningless. The config's causal and
  sliding-window rules apply; RoPE pair weights are not supported.
  """
  cfg = model.cfg
  p = prefill.positions.shape[1]
  if not 0 < window <= p:
    raise ValueError(f"window must be in [1, {p}] (the prefill length), got "
                     f"{window}")
  q_pos = prefill.positions[:, p - window:]
  cos, sin = model.rotary(q_pos, seq_len=cache.max_len)
  mask = attn_lib.make_attention_mask(
      q_pos, cache.positions, causal=cfg.causal,
      sliding_window=cfg.sliding_window, num_heads=cfg.num_heads)
  probs = []
  for i, block in enumerate(model.layers):
    x = block.attn_norm(prefill.hidden_states[i][:, p - window:])
    q, _, _ = block.attn.project_qkv(x, cos, sin)
    probs.append(attn_lib.attention_probs(
        q, cache.k[i].astype(q.dtype), mask,
        scale=block.attn.head_dim ** -0.5))
  return tuple(probs)


def top_slots(scores_bks: jax.Array, cache: attn_lib.KVCache,
              budget: int) -> jax.Array:
  """Slot indices `[B, K, budget]` of the `budget` best-scored filled slots.

  Empty slots (position -1) never win; a row holding fewer than `budget`
  tokens gets -1 for the rest (empty slots in `KVCache.gather`). Indices come
  back in slot order, so the kept keys keep their relative order.
  """
  filled = cache.positions >= 0
  scores = jnp.where(filled, scores_bks.astype(jnp.float32), -jnp.inf)
  top_vals, top_idx = jax.lax.top_k(scores, budget)
  order_key = jnp.where(jnp.isfinite(top_vals), top_idx, cache.max_len)
  order_key = jnp.sort(order_key, axis=-1)
  return jnp.where(order_key >= cache.max_len, -1, order_key).astype(
      jnp.int32)


# ---------------------------------------------------------------------------
# SnapKV / SpecKV scoring (Li et al. 2024; Galim et al. 2026, paper M)
# ---------------------------------------------------------------------------

REDUCTIONS = ("max", "mean")


def _check_scoring_options(*, budget: int, window: int, kernel: int,
                           reduce: str) -> None:
  if window < 1:
    raise ValueError(f"window must be >= 1, got {window}")
  if budget < window:
    raise ValueError(
        f"budget={budget} is smaller than window={window}: the budget "
        "C_max counts the kept observation window, so it must be >= window "
        "(raise the budget or lower the window)")
  if kernel < 1 or kernel % 2 == 0:
    raise ValueError(f"kernel must be an odd integer >= 1 (a 'same' "
                     f"max-pool), got {kernel}")
  if reduce not in REDUCTIONS:
    raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")


def max_pool_keys(scores_bks: jax.Array, kernel: int) -> jax.Array:
  """1-D max-pool over the last axis, stride 1, "same" padding with -inf.

  The pooling of SnapKV / SpecKV (`F.max_pool1d(kernel, padding=kernel//2,
  stride=1)` in the reference code): a key inherits the best score of its
  `kernel // 2` neighbours on each side, so kept keys come in small runs.
  """
  if kernel == 1:
    return scores_bks
  return jax.lax.reduce_window(
      scores_bks, -jnp.inf, jax.lax.max,
      (1,) * (scores_bks.ndim - 1) + (kernel,), (1,) * scores_bks.ndim,
      [(0, 0)] * (scores_bks.ndim - 1) + [(kernel // 2, kernel // 2)])


def reduce_group_window(probs_bnws: jax.Array, num_kv_heads: int,
                        reduce: str = "max") -> jax.Array:
  """`[B, N, W, S]` query-head probabilities -> `[B, K, S]` per KV head.

  Query head n belongs to KV head n // (N // K) (the GQA grouping); the
  G * W rows of a group are reduced with max or mean (paper M, SpecKV step
  2: reshape to [kv_head, group * W', keys], reduce = max).
  """
  b, n, w, s = probs_bnws.shape
  grouped = probs_bnws.reshape(b, num_kv_heads, (n // num_kv_heads) * w, s)
  if reduce == "max":
    return jnp.max(grouped, axis=2)
  return jnp.mean(grouped, axis=2)


def _pooled_candidate_scores(scores_bks: jax.Array, candidate_bks: jax.Array,
                             kernel: int) -> jax.Array:
  """Pools the scores of candidate (non-window) keys; others get -inf.

  Non-candidates are -inf before pooling too, so the window keys' large
  scores never leak into their neighbours (the reference pools
  `A[..., :-W']`, the candidate columns only).
  """
  s = jnp.where(candidate_bks, scores_bks.astype(jnp.float32), -jnp.inf)
  return jnp.where(candidate_bks, max_pool_keys(s, kernel), -jnp.inf)


def _top_plus_window(pooled_bks: jax.Array, n_top: int,
                     window_idx_bkw: jax.Array, n_slots: int) -> jax.Array:
  """The `n_top` best candidates (-1 where fewer exist) plus the window,
  sorted ascending with the -1 fillers last."""
  n_top = min(n_top, pooled_bks.shape[-1])
  parts = [window_idx_bkw.astype(jnp.int32)]
  if n_top > 0:
    vals, idx = jax.lax.top_k(pooled_bks, n_top)
    parts.insert(0, jnp.where(jnp.isfinite(vals), idx, -1).astype(jnp.int32))
  sel = jnp.concatenate(parts, axis=-1)
  key = jnp.sort(jnp.where(sel < 0, n_slots, sel), axis=-1)
  return jnp.where(key >= n_slots, -1, key).astype(jnp.int32)


def select_indices(q_window: jax.Array, keys: jax.Array, *, budget: int,
                   window: int = 32, kernel: int = 7,
                   reduce: str = "max") -> jax.Array:
  """SnapKV / SpecKV key selection per KV head (paper M, SpecKV step 2).

  The W queries are those of the last W positions (the observation window);
  scores A = softmax(q kᵀ / √d) over all S keys in float32, with the causal
  mask inside the window (query i, at position S - W + i, sees keys
  <= S - W + i). A is reduced over the query group of each KV head and the
  W window queries (`reduce`: max or mean), the scores of the S - window
  non-window keys are max-pooled (`kernel`, stride 1, same padding), and the
  top (budget - window) of them are kept per KV head, plus the last `window`
  positions.

  Args:
    q_window: `[B, Hq, W, d]` post-RoPE queries of the last W positions.
    keys: `[B, Hkv, S, d]` post-RoPE keys; Hq must be a multiple of Hkv.
    budget: C_max, the number of keys kept per KV head (window included).
    window: the number of final positions always kept.
    kernel: odd max-pool width over keys.
    reduce: "max" or "mean" over the query group and the window.

  Returns:
    int32 `[B, Hkv, budget]` key indices, ascending; when budget >= S every
    key is kept and the result is `[B, Hkv, S]` = arange(S).
  """
  _check_scoring_options(budget=budget, window=window, kernel=kernel,
                         reduce=reduce)
  b, hq, w, d = q_window.shape
  bk, hkv, s, dk = keys.shape
  if bk != b or dk != d:
    raise ValueError(f"q_window {q_window.shape} and keys {keys.shape} "
                     "disagree on batch or head dim")
  if hq % hkv:
    raise ValueError(f"query heads ({hq}) must be a multiple of KV heads "
                     f"({hkv})")
  if w > s:
    raise ValueError(f"the observation window ({w} queries) is longer than "
                     f"the keys ({s})")
  if budget >= s:
    return jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, hkv, s))
  causal = jnp.tril(jnp.ones((w, s), bool), s - w)[None, None]
  probs = attn_lib.attention_probs(
      jnp.swapaxes(q_window, 1, 2), jnp.swapaxes(keys, 1, 2), causal,
      scale=d ** -0.5)
  scores = reduce_group_window(probs, hkv, reduce)
  candidate = jnp.broadcast_to(jnp.arange(s) < s - window, scores.shape)
  pooled = _pooled_candidate_scores(scores, candidate, kernel)
  window_idx = jnp.broadcast_to(
      jnp.arange(s - window, s, dtype=jnp.int32), (b, hkv, window))
  return _top_plus_window(pooled, budget - window, window_idx, s)


LAYER_REDUCTIONS = ("mean", "max")


def cache_key_scores(model, cache: attn_lib.KVCache, prefill: PrefillInfo, *,
                     observation: int, reduce: str = "max",
                     layer_reduce: str = "mean") -> jax.Array:
  """Per-slot importance `[B, K, S]` from the last `observation` prefill
  queries: `reduce_group_window` of each layer's `observation_attentions`,
  then combined over layers (`layer_reduce`).

  The reference selects keys separately in every layer; our `KVCache` keeps
  one position table shared by all layers, so one selection per KV head
  serves every layer and the layer scores are combined first (a named
  deviation: `layer_reduce`).
  """
  if layer_reduce not in LAYER_REDUCTIONS:
    raise ValueError(f"layer_reduce must be one of {LAYER_REDUCTIONS}, got "
                     f"{layer_reduce!r}")
  probs = observation_attentions(model, cache, prefill, window=observation)
  per_layer = jnp.stack([reduce_group_window(p, cache.num_kv_heads, reduce)
                         for p in probs])
  return (jnp.mean(per_layer, 0) if layer_reduce == "mean"
          else jnp.max(per_layer, 0))


def candidate_slot_scores(cache: attn_lib.KVCache, scores_bks: jax.Array, *,
                          window_start: jax.Array, kernel: int) -> jax.Array:
  """The scores the top-k ranks `[B, K, S]`: over the candidate slots
  (filled, before `window_start`) `scores_bks` max-pooled with `kernel`
  among candidates only; -inf at every other slot."""
  candidate = (cache.positions >= 0) & (jnp.arange(cache.max_len)
                                        < window_start)
  return _pooled_candidate_scores(scores_bks, candidate, kernel)


def speckv_scores(cache: attn_lib.KVCache, *, model: Any,
                  prefill: PrefillInfo, lookahead: int, window: int = 32,
                  kernel: int = 7, reduce: str = "max",
                  layer_reduce: str = "mean") -> jax.Array:
  """The per-slot scores `[B, K, S]` the "speckv" policy ranks.

  The W' = window + lookahead + 1 last prefill queries (the window + 1
  last prompt tokens and the draft's lookahead) score every slot
  (`cache_key_scores`: causal softmax attention, reduced over each KV
  head's query group and the W' queries, then over layers); the slots
  before those window + 1 + lookahead are candidates, pooled with `kernel`
  among themselves (`candidate_slot_scores`); others are -inf.
  """
  raw = cache_key_scores(model, cache, prefill,
                         observation=window + lookahead + 1, reduce=reduce,
                         layer_reduce=layer_reduce)
  return candidate_slot_scores(
      cache, raw, window_start=cache.index - lookahead - 1 - window,
      kernel=kernel)


def _compress(cache: attn_lib.KVCache, pooled_bks: jax.Array, *,
              budget: int, window: int, window_end: jax.Array,
              prefill_len: int) -> attn_lib.KVCache:
  """Keeps the top (budget - window) slots by `pooled_bks` (the
  `candidate_slot_scores`, -inf = not a candidate) and the `window` slots
  ending at `window_end` (exclusive).

  The capacity shrinks by what the prefill added beyond the budget
  (max_len - prefill_len + budget): the decode steps keep the room they had
  after the prefill, and decoding attends over budget + new-token slots
  instead of the whole prompt (the memory and latency saving).
  """
  s = cache.max_len
  window_start = window_end - window
  window_idx = window_start + jnp.arange(window, dtype=jnp.int32)
  window_idx = jnp.broadcast_to(window_idx, cache.positions.shape[:2] +
                                (window,))
  # A window slot that holds padding stays empty (left-padded short rows).
  filled = jnp.take_along_axis(cache.positions, window_idx, axis=2) >= 0
  window_idx = jnp.where(filled, window_idx, -1)
  keep = _top_plus_window(pooled_bks, budget - window, window_idx, s)
  new_len = max(min(s, s - prefill_len + budget), keep.shape[-1])
  return cache.gather(keep, max_len=new_len)


@POLICIES.register("snapkv")
def snapkv(cache: attn_lib.KVCache, *, model: Any, prefill: PrefillInfo,
           budget: int, window: int = 32, kernel: int = 7,
           reduce: str = "max", layer_reduce: str = "mean"
           ) -> attn_lib.KVCache:
  """SnapKV (Li et al. 2024): the last `window` prompt queries score the
  prompt keys; keep the top (budget - window) pooled keys per KV head plus
  the window. Paper M's baseline: window 32, kernel 7, max reduction, no
  lookahead. `budget` >= the filled slots keeps everything.
  """
  _check_scoring_options(budget=budget, window=window, kernel=kernel,
                         reduce=reduce)
  if budget >= cache.max_len:
    return cache
  scores = cache_key_scores(model, cache, prefill, observation=window,
                            reduce=reduce, layer_reduce=layer_reduce)
  pooled = candidate_slot_scores(cache, scores,
                                 window_start=cache.index - window,
                                 kernel=kernel)
  return _compress(cache, pooled, budget=budget, window=window,
                   window_end=cache.index,
                   prefill_len=prefill.positions.shape[1])


@POLICIES.register("speckv")
def speckv(cache: attn_lib.KVCache, *, model: Any, prefill: PrefillInfo,
           budget: int, lookahead: int, window: int = 32, kernel: int = 7,
           reduce: str = "max", layer_reduce: str = "mean"
           ) -> attn_lib.KVCache:
  """SpecKV (paper M, SpecKV steps 1-2): the prefill is [prompt ‖ draft
  lookahead], its last `lookahead` inputs being the draft's tokens.

  Observation window W' = window + lookahead + 1 (the last window + 1
  prompt tokens and every lookahead token) scores the keys before it; the
  cache is cropped to C_max = `budget`: the top (budget - window) pooled
  keys per KV head plus the `window` prompt tokens before the final one.
  The lookahead and the last prompt token are dropped: the caller re-feeds
  the last prompt token as the first decode step
  (`jaxlab.decoding.speckv.speckv_generate`).
  """
  _check_scoring_options(budget=budget, window=window, kernel=kernel,
                         reduce=reduce)
  if lookahead < 0:
    raise ValueError(f"lookahead must be >= 0, got {lookahead}")
  pooled = speckv_scores(cache, model=model, prefill=prefill,
                         lookahead=lookahead, window=window, kernel=kernel,
                         reduce=reduce, layer_reduce=layer_reduce)
  return _compress(cache, pooled, budget=budget, window=window,
                   window_end=cache.index - lookahead - 1,
                   prefill_len=prefill.positions.shape[1])


def check_draft(target: Any, draft: Any) -> None:
  """One clear error when the draft cannot stand in for the target."""
  tv, dv = target.cfg.vocab_size, draft.cfg.vocab_size
  if tv != dv:
    raise ValueError(
        f"draft vocabulary size {dv} differs from the target's {tv}: the "
        "draft's tokens are fed to the target, so both must share one "
        "tokenizer (pick a draft of the target's model family)")
