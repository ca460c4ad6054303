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
eviction policy is compared with).
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
