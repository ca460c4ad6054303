"""One target prefill per prompt, every KV budget (paper M's comparisons).

`scored_prefill` prefills [prompt ‖ draft lookahead] once and keeps the key
scores of both observation windows: SnapKV's (the last `window` prompt
queries; the lookahead comes after them, so causally it changes nothing)
and SpecKV's (W' = window + lookahead + 1). `crop` then cuts the cache any
method decodes from at any budget C_max (full, snapkv, speckv, and the
StreamingLLM sink + recent-window baseline) with the same selection as the
"snapkv" / "speckv" cache policies of `jaxlab.decoding.kv_policies`, and
`generate_from_prefill` decodes greedily from it on the one sampler. So a
comparison of M methods at B budgets costs one long prefill per prompt
instead of M x B (the prompt keys do not depend on what follows them).
`sampler.generate(cache_policy="snapkv")` and
`speckv.speckv_generate` give the same tokens (tested).
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax import struct

from jaxlab.decoding import kv_policies as kvp
from jaxlab.decoding import sampler
from jaxlab.nn import attention as attn_lib

CROPS = ("full", "snapkv", "speckv", "streaming")


@struct.dataclass
class ScoredPrefill:
  """The target's cache after prefilling [prompt ‖ lookahead], with the key
  scores of both observation windows (made once; cropped per budget).

  Attributes:
    cache: the prefill's `KVCache` (prompt slots, then the lookahead).
    first_logits: float32 `[B, V]` logits at the last prompt token (the
      first answer token of the full cache and of SnapKV).
    snapkv_raw: `[B, K, S]` `cache_key_scores` of the last `window` prompt
      queries (the lookahead is after them: causally invisible).
    speckv_raw: `[B, K, S]` the same for W' = window + lookahead + 1.
    prompt_end: the slot after the last prompt token (int32 scalar).
    prefill_len: the padded prefill length (static).
    lookahead: the lookahead tokens per row (static).
  """
  cache: attn_lib.KVCache
  first_logits: jax.Array
  snapkv_raw: jax.Array
  speckv_raw: jax.Array
  prompt_end: jax.Array
  prefill_len: int = struct.field(pytree_node=False, default=0)
  lookahead: int = struct.field(pytree_node=False, default=0)


def _slice_prefill(prefill: kvp.PrefillInfo, end: int) -> kvp.PrefillInfo:
  """`prefill` cut to its first `end` inputs (the prompt without lookahead)."""
  return kvp.PrefillInfo(
      hidden_states=tuple(h[:, :end] for h in prefill.hidden_states),
      positions=prefill.positions[:, :end],
      attention_mask=prefill.attention_mask[:, :end], start=prefill.start)


def _scored_prefill_fn(graphdef, static, tree, ids_bp, mask_bp):
  """The jitted prefill: (cache, first logits, SnapKV and SpecKV scores)."""
  window, n_look, room, reduce, layer_reduce = static
  model = tree if graphdef is None else nnx.merge(graphdef, tree)
  b, p = ids_bp.shape
  cache = model.init_cache(b, p + room)
  positions = model.default_positions(mask_bp, cache)
  # Default positions left to the model (as the sampler's prefill does).
  out = model.forward(ids_bp, attention_mask=mask_bp, cache=cache,
                      output_hidden_states=True)
  info = kvp.PrefillInfo(hidden_states=out.hidden_states,
                         positions=positions, attention_mask=mask_bp,
                         start=cache.index)
  end = p - n_look
  opts = dict(reduce=reduce, layer_reduce=layer_reduce)
  snap = kvp.cache_key_scores(model, out.cache, _slice_prefill(info, end),
                              observation=window, **opts)
  spec = kvp.cache_key_scores(model, out.cache, info,
                              observation=window + n_look + 1, **opts)
  first = model.unembed(out.hidden_states[-1][:, end - 1])
  return out.cache, first, snap, spec


_scored_prefill_jit = jax.jit(_scored_prefill_fn, static_argnums=(0, 1))


def scored_prefill(model: Any, prompts: list[list[int]],
                   lookahead_tokens: list[list[int]] | None = None, *,
                   window: int = 32, reduce: str = "max",
                   layer_reduce: str = "mean", room: int = 64,
                   pad_multiple: int = 64) -> ScoredPrefill:
  """Prefills [prompt ‖ lookahead] once and scores the keys for SnapKV (the
  last `window` prompt queries) and SpecKV (those, the last prompt token's
  and the lookahead's: W' = window + lookahead + 1), as the "snapkv" and
  "speckv" policies do; `crop` then makes any budget's cache from it.

  The prompt keys do not depend on what follows them (causal attention), so
  one prefill serves the full cache, SnapKV, SpecKV and StreamingLLM at
  every budget (paper M's methods compared on one target pass per prompt).
  Rows are left-padded to a multiple of `pad_multiple`; the cache has
  `room` free slots after the prefill (decode steps).
  """
  if reduce not in kvp.REDUCTIONS:
    raise ValueError(f"reduce must be one of {kvp.REDUCTIONS}, got {reduce!r}")
  look = lookahead_tokens or [[] for _ in prompts]
  if len(look) != len(prompts):
    raise ValueError(f"{len(prompts)} prompts but {len(look)} lookahead rows")
  n_look = min(len(t) for t in look)
  rows = [list(p) + list(t[:n_look]) for p, t in zip(prompts, look)]
  shortest = min(len(p) for p in prompts)
  if shortest < window + 1:
    raise ValueError(f"a prompt has {shortest} tokens; the observation "
                     f"window needs > window={window}")
  p = -(-max(len(r) for r in rows) // pad_multiple) * pad_multiple
  ids = np.zeros((len(rows), p), np.int32)
  mask = np.zeros((len(rows), p), bool)
  for i, r in enumerate(rows):
    ids[i, p - len(r):] = r
    mask[i, p - len(r):] = True
  graphdef, tree = ((None, model) if getattr(model, "_pytree__is_pytree",
                                             False) else nnx.split(model))
  cache, first, snap, spec = _scored_prefill_jit(
      graphdef, (int(window), n_look, int(room), reduce, layer_reduce), tree,
      jnp.asarray(ids), jnp.asarray(mask))
  return ScoredPrefill(cache=cache, first_logits=first, snapkv_raw=snap,
                       speckv_raw=spec, prompt_end=jnp.int32(p - n_look),
                       prefill_len=p, lookahead=n_look)


def crop(sp: ScoredPrefill, method: str, *, budget: int, window: int = 32,
         kernel: int = 7, sink: int = 4) -> attn_lib.KVCache:
  """The cache `method` decodes from at C_max = `budget`, cut from `sp`.

    full:      every prompt slot (the lookahead dropped);
    snapkv:    the "snapkv" policy's selection: top (budget - window)
               pooled keys by the last `window` prompt queries + that window;
    speckv:    the "speckv" policy's: by W' queries, + the `window` prompt
               tokens before the last one (which the caller re-feeds);
    streaming: StreamingLLM (Xiao et al. 2024): the first `sink` tokens of
               each row + the last (budget - sink) prompt tokens.
  The capacity is `room` + budget for every cropped method (one decode
  compilation per budget). `full` and `snapkv`/`streaming` continue with the
  first answer token (argmax of `sp.first_logits`), `speckv` with the last
  prompt token (`crop_feed`).
  """
  cache, end = sp.cache, sp.prompt_end
  if method not in CROPS:
    raise ValueError(f"unknown crop {method!r}; valid: {CROPS}")
  if method == "full":
    keep = jnp.broadcast_to(jnp.arange(sp.prefill_len - sp.lookahead,
                                       dtype=jnp.int32),
                            cache.positions.shape[:2]
                            + (sp.prefill_len - sp.lookahead,))
    return cache.gather(keep, max_len=cache.max_len - sp.lookahead)
  opts = dict(budget=budget, prefill_len=sp.prefill_len)
  if method in ("snapkv", "speckv"):
    kvp._check_scoring_options(budget=budget, window=window, kernel=kernel,
                               reduce="max")
    # SpecKV's window ends before the last prompt token (it is re-fed).
    window_end = end if method == "snapkv" else end - 1
    raw = sp.snapkv_raw if method == "snapkv" else sp.speckv_raw
    pooled = kvp.candidate_slot_scores(cache, raw,
                                       window_start=window_end - window,
                                       kernel=kernel)
    return kvp._compress(cache, pooled, window=window, window_end=window_end,
                         **opts)
  if not 0 <= sink < budget:
    raise ValueError(f"sink must be in [0, budget={budget}), got {sink}")
  # The sinks are the filled slots holding positions < sink; the rest of
  # the budget is the recent window ending at the last prompt token.
  sinks = (cache.positions >= 0) & (cache.positions < sink)
  pooled = jnp.where(sinks, 1.0, -jnp.inf)
  return kvp._compress(cache, pooled, window=budget - sink, window_end=end,
                       **opts)


def crop_feed(sp: ScoredPrefill, method: str,
              prompts: list[list[int]]) -> list[list[int]]:
  """The token each row feeds first on `crop(sp, method, ...)`: the last
  prompt token for speckv (its slot was dropped), else the full cache's
  greedy first answer token (already chosen at prefill)."""
  if method == "speckv":
    return [[int(p[-1])] for p in prompts]
  first = np.asarray(jnp.argmax(sp.first_logits, axis=-1))
  return [[int(t)] for t in first]


def generate_from_prefill(model: Any, sp: ScoredPrefill, method: str,
                          prompts: list[list[int]], *, budget: int,
                          max_new_tokens: int, window: int = 32,
                          kernel: int = 7, sink: int = 4,
                          **generate_kwargs: Any) -> list[list[int]]:
  """Greedy answers (`max_new_tokens` per row) of `method` at `budget`
  from the shared prefill `sp`: `crop`, then `sampler.generate` on the
  cropped cache. Equals `sampler.generate(cache_policy="snapkv")` /
  `speckv_generate` with the same lookahead (tested)."""
  cache = crop(sp, method, budget=budget, window=window, kernel=kernel,
               sink=sink)
  feed = crop_feed(sp, method, prompts)
  if method == "speckv":
    return sampler.generate(model, feed, cache=cache,
                            max_new_tokens=max_new_tokens, pad_multiple=1,
                            **generate_kwargs).tokens
  if max_new_tokens == 1:
    return feed
  out = sampler.generate(model, feed, cache=cache,
                         max_new_tokens=max_new_tokens - 1, pad_multiple=1,
                         **generate_kwargs).tokens
  return [f + o for f, o in zip(feed, out)]
