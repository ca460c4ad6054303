"""Grouped-query attention with one mask interface and a functional KV cache.

Masks are built from position ids, not array indices. For query t and key
(cache slot) s of row b, seen through KV head k:

  allowed[b, k, t, s] = k_pos[b, k, s] >= 0                (empty slot: -1)
                        & key_valid[b, s]                  (padding)
                        & segment_rule[b, t, s]            (packed sequences)
                        & position_rule[b, ?, t, s]
                        & extra_mask[b, ?, t, s]
  position_rule = allowed_mask                 if an allowed_mask is given,
                = (not causal or k_pos <= q_pos)
                  & (window is None or q_pos - k_pos < window)   otherwise,

so causal, padding, bidirectional, sliding-window, packed-sequence and
arbitrary boolean masks are all one call, and a KV cache whose slots carry
their positions (empty slots: position -1) needs no special case. An
`allowed_mask` GRANTS as well as denies: it replaces the rule derived from
position ids (not the padding / empty-slot / segment rules), so layouts whose
position ids do not order the tokens (ids that restart at 0 for each
StreamingThinker segment, gathered non-contiguous ids as in DPad) attend as
the caller says. `extra_mask` only ever denies.

Key positions are `[B, S]` or per KV head `[B, K, S]` (a cache policy may
keep different keys in each KV head); a per-KV-head mask is expanded to the
query heads by group: query head n reads KV head n // (N // K), the grouping
of `jax.nn.dot_product_attention`.

`KVCache` stores keys/values `[B, S, K, H]` per layer with slot positions
`[B, K, S]`, and has helpers to gather, concatenate, split, tile and grow
caches. A write past the capacity raises (see `KVCache.check_capacity`).

Kernels (`select_attention_impl`): `Attention` runs cuDNN flash attention on
GPU (bf16/f16, no dense mask) and Pallas splash attention on TPU
(`jaxlab.nn.splash`: causal / bidirectional self-attention, optional sliding
window and segment ids, no dense mask, no KV cache); everything else, and
every call on CPU, takes the XLA path of `jax.nn.dot_product_attention`.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from flax import struct

from jaxlab.nn import dtypes
from jaxlab.nn import norm as norm_lib
from jaxlab.nn import partitioning as pt
from jaxlab.nn import rope
from jaxlab.nn import splash


def expand_kv_heads(mask_bkts: jax.Array, num_heads: int) -> jax.Array:
  """`[B, K, T, S]` per-KV-head mask -> `[B, N, T, S]` (head n reads n // G).

  A mask with 1 or N heads is returned unchanged.
  """
  b, k, t, s = mask_bkts.shape
  if k in (1, num_heads):
    return mask_bkts
  if num_heads % k:
    raise ValueError(f"num_heads={num_heads} is not a multiple of the mask's "
                     f"{k} KV heads")
  g = num_heads // k
  return jnp.broadcast_to(mask_bkts[:, :, None], (b, k, g, t, s)).reshape(
      b, num_heads, t, s)


def make_attention_mask(q_positions_bt: jax.Array,
                        k_positions_bs: jax.Array,
                        *,
                        causal: bool = True,
                        sliding_window: int | None = None,
                        key_valid_bs: jax.Array | None = None,
                        q_segment_ids_bt: jax.Array | None = None,
                        k_segment_ids_bs: jax.Array | None = None,
                        extra_mask: jax.Array | None = None,
                        allowed_mask: jax.Array | None = None,
                        num_heads: int | None = None) -> jax.Array:
  """Boolean mask `[B, 1 | K | N, T, S]`; True means "may attend".

  The rule is the module docstring's. Shape: `[B, 1, T, S]` for `[B, S]` key
  positions and no per-head masks; `[B, K, T, S]` for per-KV-head positions
  `[B, K, S]` (expanded to `num_heads` query heads when given); `[B, N, T, S]`
  when a per-head `allowed_mask` / `extra_mask` is given.

  Args:
    q_positions_bt: position ids of the queries.
    k_positions_bs: position ids of the keys, `[B, S]` or `[B, K, S]`;
      negative marks an empty slot.
    causal: queries see only keys at positions <= their own (ignored when
      `allowed_mask` is given).
    sliding_window: if set, queries see only the last `sliding_window`
      positions, including their own (ignored when `allowed_mask` is given).
    key_valid_bs: optional padding mask of the keys (True = real token).
    q_segment_ids_bt, k_segment_ids_bs: packed-sequence ids; attention stays
      within a segment.
    extra_mask: any boolean mask broadcastable to `[B, N, T, S]`, AND-ed in.
    allowed_mask: boolean, broadcastable to `[B, N, T, S]`; replaces the
      causal / sliding-window rule (True = may attend).
    num_heads: number of query heads N; needed to expand per-KV-head
      positions `[B, K, S]` with 1 < K < N.
  """
  q = q_positions_bt[:, None, :, None]
  if k_positions_bs.ndim == 3:
    k = k_positions_bs[:, :, None, :]
  elif k_positions_bs.ndim == 2:
    k = k_positions_bs[:, None, None, :]
  else:
    raise ValueError("key positions must be [B, S] or [B, K, S], got shape "
                     f"{k_positions_bs.shape}")
  allowed = jnp.broadcast_to(k >= 0, jnp.broadcast_shapes(q.shape, k.shape))
  if key_valid_bs is not None:
    allowed = allowed & key_valid_bs[:, None, None, :].astype(bool)
  if q_segment_ids_bt is not None or k_segment_ids_bs is not None:
    if q_segment_ids_bt is None or k_segment_ids_bs is None:
      raise ValueError("segment ids must be given for both queries and keys")
    allowed = allowed & (q_segment_ids_bt[:, None, :, None] ==
                         k_segment_ids_bs[:, None, None, :])
  if allowed_mask is None:
    if causal:
      allowed = allowed & (k <= q)
    if sliding_window is not None:
      allowed = allowed & (q - k < sliding_window)
  if num_heads is not None:
    allowed = expand_kv_heads(allowed, num_heads)
  elif allowed.shape[1] > 1 and (
      (allowed_mask is not None and allowed_mask.ndim == 4
       and allowed_mask.shape[1] not in (1, allowed.shape[1])) or
      (extra_mask is not None and extra_mask.ndim == 4
       and extra_mask.shape[1] not in (1, allowed.shape[1]))):
    raise ValueError("per-KV-head key positions with per-query-head masks "
                     "need num_heads")
  if allowed_mask is not None:
    allowed = allowed & allowed_mask.astype(bool)
  if extra_mask is not None:
    allowed = allowed & extra_mask.astype(bool)
  return allowed


def attention_probs(q_btnh: jax.Array, k_bskh: jax.Array,
                    mask: jax.Array | None, *, scale: float,
                    is_causal: bool = False,
                    soft_cap: float | None = None) -> jax.Array:
  """Float32 attention probabilities `[B, N, T, S]`, computed explicitly.

  p = softmax_s(where(mask, q.k * scale, finfo.min)) in float32, with query
  head n reading KV head n // (N // K). A row with no allowed key is uniform
  (as with jax.nn.dot_product_attention's XLA path and HF eager attention).
  `is_causal` (with `mask=None`) applies the index-causal mask. `soft_cap`
  (Gemma's attention logit soft-capping) replaces the scaled logits x by
  soft_cap * tanh(x / soft_cap) before masking.
  """
  n, kh = q_btnh.shape[2], k_bskh.shape[2]
  k = jnp.repeat(k_bskh, n // kh, axis=2) if n != kh else k_bskh
  dt = dtypes.at_least_float32(q_btnh.dtype)
  logits = jnp.einsum("btnh,bsnh->bnts", q_btnh.astype(dt),
                      k.astype(dt)) * scale
  if soft_cap is not None:
    logits = soft_cap * jnp.tanh(logits / soft_cap)
  if is_causal and mask is None:
    t, s = logits.shape[-2:]
    mask = jnp.tril(jnp.ones((t, s), bool), s - t)[None, None]
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(dt).min)
  return jax.nn.softmax(logits, axis=-1)


# Decode steps with at most this many queries attend over a KV cache by
# `cached_attention` on CPU (see there).
CACHED_ATTENTION_MAX_Q = 4


def cached_attention(q_btnh: jax.Array, k_bskh: jax.Array,
                     v_bskh: jax.Array, mask: jax.Array | None, *,
                     scale: float) -> jax.Array:
  """Attention of a few queries over a `[B, S, K, H]` KV cache, `[B, T, N, H]`.

  The same function as `jax.nn.dot_product_attention`'s XLA path (float32
  scores and softmax, a row with no allowed key uniform), written as
  broadcast-multiply-reduce over the cache in its stored layout. A
  dot_general with batch dims (B, K) needs them major-most, so for the
  `[B, S, K, H]` cache XLA:CPU transposes (copies) the whole K and V cache
  of every layer at every decode step; here each fused reduction reads the
  cache once and copies nothing. Used by `Attention` for T <=
  `CACHED_ATTENTION_MAX_Q` queries with a cache on CPU. `mask` is boolean,
  broadcastable to `[B, N, T, S]`.
  """
  b, t, n, h = q_btnh.shape
  s_len, kh = k_bskh.shape[1], k_bskh.shape[2]
  g = n // kh
  dt = dtypes.at_least_float32(q_btnh.dtype)
  q = q_btnh.reshape(b, t, 1, kh, g, h).astype(dt)
  k = k_bskh.astype(dt)[:, None, :, :, None, :]        # [B, 1, S, K, 1, H]
  logits = jnp.sum(q * k, axis=-1) * scale             # [B, T, S, K, G]
  if mask is not None:
    m = jnp.asarray(mask, bool)
    m = m.reshape((1,) * (4 - m.ndim) + m.shape)
    m = jnp.broadcast_to(m, (b, m.shape[1], t, s_len))
    if m.shape[1] == 1:
      m = m[:, 0, :, :, None, None]                    # [B, T, S, 1, 1]
    else:  # query head n = k * G + g
      m = m.reshape(b, kh, g, t, s_len).transpose(0, 3, 4, 1, 2)
    logits = jnp.where(m, logits, jnp.finfo(dt).min)
  probs = jax.nn.softmax(logits, axis=2)
  v = v_bskh.astype(dt)[:, None, :, :, None, :]        # [B, 1, S, K, 1, H]
  out = jnp.sum(probs[..., None] * v, axis=2)          # [B, T, K, G, H]
  return out.reshape(b, t, n, h).astype(q_btnh.dtype)


def _online_softmax_update(m, l, acc, sc, v):
  """One key block of FlashAttention's online softmax: the running row max
  `m` and normaliser `l` `[B, K, G, q]` and output accumulator `acc`
  `[B, K, G, q, H]` updated with the block's scores `sc` `[B, K, G, q, s]`
  and values `v` `[B, s, K, H]`."""
  m_new = jnp.maximum(m, jnp.max(sc, axis=-1))
  p = jnp.exp(sc - m_new[..., None])
  corr = jnp.exp(m - m_new)
  l = l * corr + jnp.sum(p, axis=-1)
  acc = acc * corr[..., None] + jnp.einsum("bkgqs,bskh->bkgqh", p, v)
  return m_new, l, acc


# Query / key block of `chunked_causal_attention` (attention_impl="chunked").
CHUNKED_BLOCK_SIZE = 512


def chunked_causal_attention(q_btnh: jax.Array, k_btkh: jax.Array,
                             v_btkh: jax.Array, *, scale: float,
                             block_size: int = CHUNKED_BLOCK_SIZE
                             ) -> jax.Array:
  """Causal self-attention block by block, `[B, T, N, H]` (forward only).

  The function of `jax.nn.dot_product_attention(..., is_causal=True)`
  (float32 scores and softmax), computed as FlashAttention does (Dao et al.
  2022, Alg. 1): for each block of `block_size` queries, the key blocks up
  to the diagonal one in a loop, with a running row maximum m, normaliser
  l and output accumulator,

      m' = max(m, rowmax(S_j)),  P_j = exp(S_j - m'),
      l' = exp(m - m') l + rowsum(P_j),  O' = exp(m - m') O + P_j V_j,

  and O / l at the end; S_j = scale * Q K_j^T, masked causally on the
  diagonal block only. The key blocks above the diagonal are never
  computed (about half the FLOPs of a dense causal attention), and no
  `[T, T]` score matrix exists: temporary memory is O(B N block T) instead
  of O(B N T^2). For long forwards on CPU (XLA's path materialises the
  scores: 5.4 GB a layer for 9 heads at 12,288 tokens) and for evaluation:
  the loop's trip count depends on the query block, so reverse-mode
  differentiation is not supported (train with the XLA, cuDNN or splash
  path). Grouped-query attention: N query heads over K = N / G KV heads.
  T need not divide by `block_size` (padded; padded keys are never seen by
  a real query, which sees only earlier keys).
  """
  b, t, n, h = q_btnh.shape
  kh = k_btkh.shape[2]
  g = n // kh
  bs = int(min(block_size, t))
  nb = -(-t // bs)
  pad = nb * bs - t
  dt = dtypes.at_least_float32(q_btnh.dtype)
  if pad:
    widths = ((0, 0), (0, pad), (0, 0), (0, 0))
    q_btnh, k_btkh, v_btkh = (jnp.pad(x, widths)
                              for x in (q_btnh, k_btkh, v_btkh))
  q = q_btnh.reshape(b, nb, bs, kh, g, h)
  k = k_btkh.reshape(b, nb, bs, kh, h)
  v = v_btkh.reshape(b, nb, bs, kh, h)
  diag = jnp.tril(jnp.ones((bs, bs), bool))            # [q, s]

  def query_block(i):
    qi = jax.lax.dynamic_index_in_dim(q, i, 1, keepdims=False)  # [B,q,K,G,H]

    def key_block(j, carry):
      m, l, acc = carry
      kj = jax.lax.dynamic_index_in_dim(k, j, 1, keepdims=False)  # [B,s,K,H]
      vj = jax.lax.dynamic_index_in_dim(v, j, 1, keepdims=False)
      sc = jnp.einsum("bqkgh,bskh->bkgqs", qi, kj,
                      preferred_element_type=dt) * scale
      sc = jnp.where(jnp.logical_or(j < i, diag), sc, -jnp.inf)
      return _online_softmax_update(m, l, acc, sc, vj.astype(dt))

    init = (jnp.full((b, kh, g, bs), -jnp.inf, dt),
            jnp.zeros((b, kh, g, bs), dt), jnp.zeros((b, kh, g, bs, h), dt))
    _, l, acc = jax.lax.fori_loop(0, i + 1, key_block, init)
    return acc / l[..., None]                          # [B, K, G, q, H]

  out = jax.lax.map(query_block, jnp.arange(nb))       # [nb, B, K, G, q, H]
  out = out.transpose(1, 0, 4, 2, 3, 5).reshape(b, nb * bs, n, h)
  return out[:, :t].astype(q_btnh.dtype)


@struct.dataclass
class PositionMask:
  """The mask of a cached call, described by positions instead of a dense
  `[B, N, T, S]` array (`chunked_cached_attention`, attention_impl=
  "chunked"): query positions `q_pos_bt`, the cache's slot positions
  `k_pos_bks` (-1 = empty) and the rule of `make_attention_mask` (causal,
  sliding window). `slot0` (a traced scalar or None): the call's first
  query sits in cache slot `slot0 + 0` and query t in `slot0 + t`, and no
  key in a later slot may be attended by a real query (the decoder's
  default positions: each new real token's position exceeds every earlier
  one), so key blocks past a query block's last slot are skipped."""
  q_pos_bt: jax.Array
  k_pos_bks: jax.Array
  slot0: jax.Array | None = None
  causal: bool = struct.field(pytree_node=False, default=True)
  sliding_window: int | None = struct.field(pytree_node=False, default=None)

  def dense(self, num_heads: int) -> jax.Array:
    """The same mask as a boolean `[B, N, T, S]` array."""
    return make_attention_mask(self.q_pos_bt, self.k_pos_bks,
                               causal=self.causal,
                               sliding_window=self.sliding_window,
                               num_heads=num_heads)


def chunked_cached_attention(q_btnh: jax.Array, k_bskh: jax.Array,
                             v_bskh: jax.Array, mask: PositionMask, *,
                             scale: float,
                             block_size: int = CHUNKED_BLOCK_SIZE
                             ) -> jax.Array:
  """Attention of T queries over a `[B, S, K, H]` KV cache, block by block.

  The function of `jax.nn.dot_product_attention` with `mask.dense(N)`
  (float32 scores and softmax), computed as `chunked_causal_attention`
  does (FlashAttention's running max / normaliser / accumulator over key
  blocks) with each block's mask made from the positions in `mask`: no
  `[T, S]` mask or score matrix exists, so a long prefill into a cache
  (the sampler's, at 12-32K tokens) needs O(B N block S) temporary memory.
  With `mask.slot0` (the decoder's default positions) query block i visits
  the key blocks up to its own last slot only (about half the FLOPs of the
  dense call for a prefill into an empty cache); otherwise every key
  block. Masked scores are `finfo.min`, not -inf, so a query with no
  allowed key (a padding query) is uniform over the keys it visits, as on
  XLA's path, instead of NaN. Forward only (the trip counts are dynamic).
  """
  b, t, n, h = q_btnh.shape
  s_len, kh = k_bskh.shape[1], k_bskh.shape[2]
  g = n // kh
  bq = int(min(block_size, t))
  bk = int(min(block_size, s_len))
  nq, nk = -(-t // bq), -(-s_len // bk)
  dt = dtypes.at_least_float32(q_btnh.dtype)
  neg = jnp.finfo(dt).min
  q_pos = mask.q_pos_bt.astype(jnp.int32)
  k_pos = jnp.broadcast_to(mask.k_pos_bks, (b, kh, s_len)).astype(jnp.int32)
  if nq * bq > t:
    pad = nq * bq - t
    q_btnh = jnp.pad(q_btnh, ((0, 0), (0, pad), (0, 0), (0, 0)))
    q_pos = jnp.pad(q_pos, ((0, 0), (0, pad)))
  if nk * bk > s_len:
    pad = nk * bk - s_len
    k_bskh = jnp.pad(k_bskh, ((0, 0), (0, pad), (0, 0), (0, 0)))
    v_bskh = jnp.pad(v_bskh, ((0, 0), (0, pad), (0, 0), (0, 0)))
    k_pos = jnp.pad(k_pos, ((0, 0), (0, 0), (0, pad)), constant_values=-1)
  q = q_btnh.reshape(b, nq, bq, kh, g, h)
  qp = q_pos.reshape(b, nq, bq)
  k = k_bskh.reshape(b, nk, bk, kh, h)
  v = v_bskh.reshape(b, nk, bk, kh, h)
  kp = k_pos.reshape(b, kh, nk, bk)

  def query_block(i):
    qi = jax.lax.dynamic_index_in_dim(q, i, 1, keepdims=False)  # [B,q,K,G,H]
    qpi = jax.lax.dynamic_index_in_dim(qp, i, 1, keepdims=False)  # [B, q]

    def key_block(j, carry):
      m, l, acc = carry
      kj = jax.lax.dynamic_index_in_dim(k, j, 1, keepdims=False)  # [B,s,K,H]
      vj = jax.lax.dynamic_index_in_dim(v, j, 1, keepdims=False)
      kpj = jax.lax.dynamic_index_in_dim(kp, j, 2, keepdims=False)  # [B,K,s]
      qq = qpi[:, None, :, None]                                  # [B,1,q,1]
      kk = kpj[:, :, None, :]                                     # [B,K,1,s]
      allowed = kk >= 0
      if mask.causal:
        allowed = allowed & (kk <= qq)
      if mask.sliding_window is not None:
        allowed = allowed & (qq - kk < mask.sliding_window)
      sc = jnp.einsum("bqkgh,bskh->bkgqs", qi, kj,
                      preferred_element_type=dt) * scale
      sc = jnp.where(allowed[:, :, None], sc, neg)               # [B,K,G,q,s]
      return _online_softmax_update(m, l, acc, sc, vj.astype(dt))

    if mask.slot0 is None:
      stop = nk
    else:  # key blocks up to the block holding this query block's last slot
      last = jnp.asarray(mask.slot0, jnp.int32) + jnp.minimum(
          (i + 1) * bq, t) - 1
      stop = jnp.minimum(last // bk + 1, nk)
    init = (jnp.full((b, kh, g, bq), neg, dt), jnp.zeros((b, kh, g, bq), dt),
            jnp.zeros((b, kh, g, bq, h), dt))
    _, l, acc = jax.lax.fori_loop(0, stop, key_block, init)
    return acc / l[..., None]                          # [B, K, G, q, H]

  out = jax.lax.map(query_block, jnp.arange(nq))       # [nq, B, K, G, q, H]
  out = out.transpose(1, 0, 4, 2, 3, 5).reshape(b, nq * bq, n, h)
  return out[:, :t].astype(q_btnh.dtype)


@struct.dataclass
class KVCache:
  """Per-layer keys/values `[B, S, K, H]`, slot positions and a write index.

  `positions[b, k, s]` is the position id stored in slot s of KV head k
  (-1 = empty), which is all the mask needs; it is per KV head so that a
  cache policy can keep different keys in each head (all heads agree unless
  a policy made them differ). `index` is the next slot to write, shared by
  the batch: prompts are left-padded, so every row writes to the same slot;
  rows that hold fewer tokens have empty slots.

  Capacity: `Decoder.forward` raises `ValueError` (via `check_capacity`)
  when writing T tokens at a concrete `index` would pass `max_len`. Under
  `jax.jit` the index is traced and nothing can raise without checkify
  (which every caller would have to wrap); there the write is still counted
  (`index` ends above `max_len`, see `overflowed`), the logits of that call
  are NaN, and the host-side check of the next eager call (or of
  `jaxlab.decoding.sampler.generate`, which checks before and after its
  compiled loops) raises.
  """
  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]
  positions: jax.Array
  index: jax.Array

  @classmethod
  def init(cls, *, num_layers: int, batch: int, max_len: int,
           num_kv_heads: int, head_dim: int, dtype=jnp.float32) -> "KVCache":
    shape = (batch, max_len, num_kv_heads, head_dim)
    return cls(
        k=tuple(jnp.zeros(shape, dtype) for _ in range(num_layers)),
        v=tuple(jnp.zeros(shape, dtype) for _ in range(num_layers)),
        positions=jnp.full((batch, num_kv_heads, max_len), -1, jnp.int32),
        index=jnp.zeros((), jnp.int32))

  @property
  def max_len(self) -> int:
    """Capacity S (slots per row and KV head)."""
    return self.positions.shape[-1]

  @property
  def batch_size(self) -> int:
    return self.positions.shape[0]

  @property
  def num_kv_heads(self) -> int:
    return self.positions.shape[1]

  @property
  def num_layers(self) -> int:
    return len(self.k)

  # -- capacity --------------------------------------------------------------

  def check_capacity(self, new_tokens: int) -> None:
    """Raises ValueError if writing `new_tokens` at `index` passes capacity.

    Needs a concrete index (eager code, or the host side of a jitted loop);
    with a traced index it does nothing (see the class docstring).
    """
    if isinstance(self.index, jax.core.Tracer):
      return
    index = int(self.index)
    if index + int(new_tokens) > self.max_len:
      raise ValueError(
          f"KV cache overflow: writing {int(new_tokens)} new tokens at index "
          f"{index} needs {index + int(new_tokens)} slots but the capacity is "
          f"{self.max_len}; allocate a larger cache (init_cache(batch, "
          "max_len)) or grow this one (cache.grow(max_len))")

  def overflowed(self) -> jax.Array:
    """Traceable bool: some write went past capacity (index > max_len)."""
    return self.index > self.max_len

  def grow(self, max_len: int) -> "KVCache":
    """The same cache with capacity `max_len` (>= current); new slots empty."""
    extra = int(max_len) - self.max_len
    if extra < 0:
      raise ValueError(f"grow: max_len={max_len} is below the current "
                       f"capacity {self.max_len}")
    if extra == 0:
      return self
    pad = ((0, 0), (0, extra), (0, 0), (0, 0))
    return KVCache(
        k=tuple(jnp.pad(a, pad) for a in self.k),
        v=tuple(jnp.pad(a, pad) for a in self.v),
        positions=jnp.pad(self.positions, ((0, 0), (0, 0), (0, extra)),
                          constant_values=-1),
        index=self.index)

  # -- gather / split / tile -------------------------------------------------

  def gather(self, indices: jax.Array, *,
             max_len: int | None = None) -> "KVCache":
    """Keeps the slots `indices` of each row (and KV head), in that order.

    Args:
      indices: int `[B, S']` (the same slots for every KV head) or
        `[B, K, S']` (per KV head, e.g. SnapKV's per-head selection); a
        negative index gives an empty slot (position -1), so rows may keep
        different numbers of keys.
      max_len: capacity of the result (>= S'; default S'); the slots after
        the S' gathered ones are empty.

    Returns:
      A cache whose first S' slots hold the gathered keys/values/positions
      and whose `index` is S' (the next write goes after them).
    """
    indices = jnp.asarray(indices, jnp.int32)
    if indices.ndim == 2:
      idx_bks = jnp.broadcast_to(
          indices[:, None, :],
          (indices.shape[0], self.num_kv_heads, indices.shape[1]))
    elif indices.ndim == 3:
      idx_bks = indices
    else:
      raise ValueError("gather indices must be [B, S'] or [B, K, S'], got "
                       f"shape {indices.shape}")
    b, kh, s_new = idx_bks.shape
    if (b, kh) != (self.batch_size, self.num_kv_heads):
      raise ValueError(f"gather indices of shape {indices.shape} do not "
                       f"match a cache of batch {self.batch_size} and "
                       f"{self.num_kv_heads} KV heads")
    empty = idx_bks < 0
    safe = jnp.clip(idx_bks, 0, self.max_len - 1)
    idx_bsk1 = jnp.transpose(safe, (0, 2, 1))[..., None]
    keep_bsk1 = jnp.transpose(~empty, (0, 2, 1))[..., None]

    def take(a):
      return jnp.where(keep_bsk1, jnp.take_along_axis(a, idx_bsk1, axis=1),
                       jnp.zeros((), a.dtype))

    positions = jnp.where(empty, -1,
                          jnp.take_along_axis(self.positions, safe, axis=2))
    out = KVCache(k=tuple(take(a) for a in self.k),
                  v=tuple(take(a) for a in self.v), positions=positions,
                  index=jnp.asarray(s_new, jnp.int32))
    if max_len is not None:
      out = out.grow(max_len)
    return out

  def split(self, indices_or_sections, axis: str = "batch"
            ) -> list["KVCache"]:
    """Splits like `jnp.split` along "batch" or "sequence" (slots).

    Batch pieces keep `index`; a sequence piece [a, b) gets
    `clip(index - a, 0, b - a)` (the next write after its filled slots).
    """
    if axis == "batch":
      ks = [jnp.split(a, indices_or_sections, axis=0) for a in self.k]
      vs = [jnp.split(a, indices_or_sections, axis=0) for a in self.v]
      ps = jnp.split(self.positions, indices_or_sections, axis=0)
      return [KVCache(k=tuple(k[i] for k in ks), v=tuple(v[i] for v in vs),
                      positions=p, index=self.index)
              for i, p in enumerate(ps)]
    if axis == "sequence":
      ks = [jnp.split(a, indices_or_sections, axis=1) for a in self.k]
      vs = [jnp.split(a, indices_or_sections, axis=1) for a in self.v]
      ps = jnp.split(self.positions, indices_or_sections, axis=2)
      pieces, start = [], 0
      for i, p in enumerate(ps):
        size = p.shape[-1]
        index = jnp.clip(self.index - start, 0, size).astype(jnp.int32)
        pieces.append(KVCache(k=tuple(k[i] for k in ks),
                              v=tuple(v[i] for v in vs), positions=p,
                              index=index))
        start += size
      return pieces
    raise ValueError(f"split axis must be 'batch' or 'sequence', got {axis!r}")

  def tile(self, repeats: int) -> "KVCache":
    """Repeats each row `repeats` times along the batch (rows b*r .. b*r+r-1
    are copies of row b), e.g. to score several candidates or beams."""
    rep = lambda a: jnp.repeat(a, int(repeats), axis=0)  # pylint: disable=g-long-lambda
    return KVCache(k=tuple(rep(a) for a in self.k),
                   v=tuple(rep(a) for a in self.v),
                   positions=rep(self.positions), index=self.index)


def concatenate(caches: Sequence[KVCache], axis: str = "batch") -> KVCache:
  """Concatenates caches along "batch" or "sequence" (slots).

  Batch: capacities must agree; `index` is the largest index (a row whose
  cache held fewer slots simply has empty ones, which are never attended).
  Sequence: slots of the first cache, then the second's, ...; `index` is the
  capacities before the last cache plus the last cache's index, so writes
  continue in the last cache's free slots.
  """
  caches = list(caches)
  if not caches:
    raise ValueError("concatenate needs at least one cache")
  first = caches[0]
  for c in caches[1:]:
    if c.num_layers != first.num_layers or (
        c.num_kv_heads != first.num_kv_heads):
      raise ValueError("concatenate: caches differ in layers or KV heads")
  if axis == "batch":
    if any(c.max_len != first.max_len for c in caches):
      raise ValueError("concatenate along batch needs equal capacities, got "
                       f"{[c.max_len for c in caches]}; grow() them first")
    cat = lambda xs: jnp.concatenate(xs, axis=0)  # pylint: disable=g-long-lambda
    index = caches[0].index
    for c in caches[1:]:
      index = jnp.maximum(index, c.index)
    return KVCache(
        k=tuple(cat([c.k[i] for c in caches]) for i in range(first.num_layers)),
        v=tuple(cat([c.v[i] for c in caches]) for i in range(first.num_layers)),
        positions=cat([c.positions for c in caches]), index=index)
  if axis == "sequence":
    if any(c.batch_size != first.batch_size for c in caches):
      raise ValueError("concatenate along sequence needs equal batch sizes")
    cat = lambda xs: jnp.concatenate(xs, axis=1)  # pylint: disable=g-long-lambda
    offset = sum(c.max_len for c in caches[:-1])
    return KVCache(
        k=tuple(cat([c.k[i] for c in caches]) for i in range(first.num_layers)),
        v=tuple(cat([c.v[i] for c in caches]) for i in range(first.num_layers)),
        positions=jnp.concatenate([c.positions for c in caches], axis=2),
        index=(caches[-1].index + offset).astype(jnp.int32))
  raise ValueError(f"concatenate axis must be 'batch' or 'sequence', got "
                   f"{axis!r}")


# Below this many tokens the XLA path is used on TPU by default: splash pads
# to a 128-token block, which dominates the work of shorter sequences.
SPLASH_MIN_AUTO_LEN = 128


def current_platform() -> str:
  """The platform the program is being built for: the devices of the mesh
  set with `jax.set_mesh` (so a program compiled ahead of time for a TPU
  topology from a CPU host selects TPU kernels), else
  `jax.default_backend()`."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh.empty else getattr(mesh, "abstract_device", None)
  platform = getattr(device, "platform", None)
  return platform or jax.default_backend()


def select_attention_impl(impl: str | None, *, platform: str | None = None,
                          dtype=jnp.float32, q_len: int, kv_len: int,
                          dense_mask: bool, kv_cache: bool = False
                          ) -> str | None:
  """The attention kernel for one call: "splash", "cudnn", "xla", "chunked"
  or None.

  None lets `jax.nn.dot_product_attention` choose (its XLA path). `impl`
  forces a kernel; "splash" is checked here and raises ValueError for a call
  it cannot compute. With `impl=None` (auto):

    * platform "gpu", no dense mask, bfloat16/float16: "cudnn";
    * platform "tpu": "splash" when the call is a splash case -- causal or
      bidirectional self-attention, optionally with a sliding window and
      packed-sequence ids, described without a dense mask (`dense_mask`
      False), no KV cache, `q_len == kv_len >= SPLASH_MIN_AUTO_LEN` (so never
      a T=1 decode step); otherwise None (the XLA path);
    * anything else: None.

  "chunked" (`chunked_causal_attention`: block by block, forward only, any
  platform) is never chosen automatically; forced, it computes the plain
  causal self-attention call (no mask, no cache) and, given a
  `PositionMask` (the decoder passes one for a cached call of more than
  `CACHED_ATTENTION_MAX_Q` queries), the cached call
  (`chunked_cached_attention`); it leaves the others to the XLA path.

  Args:
    impl: `Attention.attention_impl` / `DecoderConfig.attention_impl`.
    platform: backend name; default `current_platform()` (the set mesh's
      devices, else `jax.default_backend()`).
    dtype: dtype of the queries.
    q_len, kv_len: number of queries T and keys S.
    dense_mask: the call carries an explicit boolean mask array.
    kv_cache: the keys come from a KV cache.
  """
  platform = current_platform() if platform is None else platform
  splash_case = not dense_mask and not kv_cache and q_len == kv_len
  if impl == "splash":
    if not splash_case:
      raise ValueError(
          "attention_impl='splash' supports causal / bidirectional "
          "self-attention with an optional sliding window and segment ids; "
          f"this call has dense_mask={dense_mask}, kv_cache={kv_cache}, "
          f"T={q_len}, S={kv_len}: use attention_impl=None or 'xla'")
    return impl
  if impl is not None:
    return impl
  if (platform == "gpu" and not dense_mask
      and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)):
    # Measured on an H200 (150M decoder, bf16, T=2048): the cuDNN flash
    # kernel trains 2.7x faster than XLA's attention with 4.6x less
    # temporary memory; jax does not pick it by default.
    return "cudnn"
  if platform == "tpu" and splash_case and q_len >= SPLASH_MIN_AUTO_LEN:
    return "splash"
  return None


def chunked_cached_call(impl: str | None, *, q_len: int,
                        platform: str | None = None) -> bool:
  """Whether a cached call of `q_len` queries attends by
  `chunked_cached_attention` (its mask kept as a `PositionMask`): with
  attention_impl "chunked" for more than `CACHED_ATTENTION_MAX_Q` queries
  (a prefill; decode steps keep their small dense mask), and on TPU, where
  splash takes no cache, for a prefill of `SPLASH_MIN_AUTO_LEN` queries or
  more under attention_impl None / "splash" (a 32K prefill's dense mask
  and scores do not fit a chip)."""
  if impl == "chunked":
    return q_len > CACHED_ATTENTION_MAX_Q
  platform = current_platform() if platform is None else platform
  return (impl in (None, "splash") and platform == "tpu"
          and q_len >= SPLASH_MIN_AUTO_LEN)


class Attention(nnx.Module):
  """Multi-head attention with grouped-query KV heads and RoPE.

  Params: q `[D, N, H]`, k/v `[D, K, H]`, o `[N, H, D]` with logical axes
  (embed, heads|kv_heads, head_dim); optional q/k/v biases (Qwen2);
  optional output bias `o_bias_d [D]` (Phi's `dense.bias`, `out_bias`);
  optional per-head RMSNorm of q and k over head_dim before RoPE (Qwen3's
  `q_norm`/`k_norm`, one `[H]` scale each, shared by all heads).
  `scale` multiplies the q.k logits (None: head_dim ** -0.5; Gemma 3:
  query_pre_attn_scalar ** -0.5); `logits_soft_cap` soft-caps them
  (c * tanh(x / c), Gemma 2's `attn_logit_softcapping`), which runs the
  explicit attention path (`attention_probs`).
  """

  def __init__(self, dim: int, num_heads: int, num_kv_heads: int,
               head_dim: int, *, rngs: nnx.Rngs, qkv_bias: bool = False,
               param_dtype=jnp.float32, dtype=jnp.float32,
               init_std: float = 0.02, use_rope: bool = True,
               attention_impl: str | None = None, qk_norm: bool = False,
               norm_eps: float = 1e-6,
               splash_block_size: int | None = None,
               scale: float | None = None,
               logits_soft_cap: float | None = None,
               out_bias: bool = False):
    if num_heads % num_kv_heads:
      raise ValueError(f"num_heads={num_heads} must be a multiple of "
                       f"num_kv_heads={num_kv_heads}")
    init = jax.nn.initializers.normal(init_std)
    self.num_heads, self.num_kv_heads, self.head_dim = (
        num_heads, num_kv_heads, head_dim)
    self.dtype = dtype
    self.use_rope = use_rope
    self.attention_impl = attention_impl
    self.logits_scale = None if scale is None else float(scale)
    self.logits_soft_cap = (None if logits_soft_cap is None
                            else float(logits_soft_cap))
    # Splash kernel block size (None: jaxlab.nn.splash.default_block_size).
    self.splash_block_size = splash_block_size
    self.q_dnh = pt.param(init(rngs.params(), (dim, num_heads, head_dim),
                               param_dtype), (pt.EMBED, pt.HEADS, pt.HEAD_DIM))
    self.k_dkh = pt.param(init(rngs.params(), (dim, num_kv_heads, head_dim),
                               param_dtype),
                          (pt.EMBED, pt.KV_HEADS, pt.HEAD_DIM))
    self.v_dkh = pt.param(init(rngs.params(), (dim, num_kv_heads, head_dim),
                               param_dtype),
                          (pt.EMBED, pt.KV_HEADS, pt.HEAD_DIM))
    self.o_nhd = pt.param(init(rngs.params(), (num_heads, head_dim, dim),
                               param_dtype), (pt.HEADS, pt.HEAD_DIM, pt.EMBED))
    if qkv_bias:
      self.q_bias_nh = pt.param(jnp.zeros((num_heads, head_dim), param_dtype),
                                (pt.HEADS, pt.HEAD_DIM))
      self.k_bias_kh = pt.param(
          jnp.zeros((num_kv_heads, head_dim), param_dtype),
          (pt.KV_HEADS, pt.HEAD_DIM))
      self.v_bias_kh = pt.param(
          jnp.zeros((num_kv_heads, head_dim), param_dtype),
          (pt.KV_HEADS, pt.HEAD_DIM))
    else:
      self.q_bias_nh = self.k_bias_kh = self.v_bias_kh = None
    # Bias of the output projection (Phi's `dense.bias`), `[D]`.
    self.o_bias_d = (pt.param(jnp.zeros((dim,), param_dtype), (pt.EMBED,))
                     if out_bias else None)
    if qk_norm:
      self.q_norm = norm_lib.RMSNorm(head_dim, eps=norm_eps,
                                     param_dtype=param_dtype)
      self.k_norm = norm_lib.RMSNorm(head_dim, eps=norm_eps,
                                     param_dtype=param_dtype)
    else:
      self.q_norm = self.k_norm = None

  def project_qkv(self, x_btd: jax.Array, cos_btd, sin_btd):
    """q `[B,T,N,H]`, k, v `[B,T,K,H]`, with RoPE applied to q and k."""
    dt = self.dtype
    x_btd = x_btd.astype(dt)
    q = jnp.einsum("btd,dnh->btnh", x_btd, self.q_dnh[...].astype(dt))
    k = jnp.einsum("btd,dkh->btkh", x_btd, self.k_dkh[...].astype(dt))
    v = jnp.einsum("btd,dkh->btkh", x_btd, self.v_dkh[...].astype(dt))
    if self.q_bias_nh is not None:
      q = q + self.q_bias_nh[...].astype(dt)
      k = k + self.k_bias_kh[...].astype(dt)
      v = v + self.v_bias_kh[...].astype(dt)
    if self.q_norm is not None:
      q, k = self.q_norm(q), self.k_norm(k)
    if self.use_rope:
      q = rope.apply_rope(q, cos_btd, sin_btd)
      k = rope.apply_rope(k, cos_btd, sin_btd)
    return q, k, v

  def __call__(self, x_btd: jax.Array, *, cos_btd: jax.Array,
               sin_btd: jax.Array, mask: jax.Array | None,
               is_causal: bool = False,
               layer_cache: tuple[jax.Array, jax.Array] | None = None,
               cache_index: jax.Array | None = None,
               output_attentions: bool = False,
               segment_ids_bt: jax.Array | None = None,
               sliding_window: int | None = None):
    """Attends; returns (output `[B,T,D]`, updated (k, v) cache or None).

    With `layer_cache`, the new keys/values are written at `cache_index` and
    the queries attend over the whole cache (`mask` is `[B, 1|N, T, S]`).
    `mask=None, is_causal=True` is the plain causal case, which lets
    `jax.nn.dot_product_attention` pick a fused (cuDNN flash) kernel.
    Instead of a dense `mask`, self-attention may describe its mask by
    `segment_ids_bt` (`[B, T]` packed-sequence ids) and / or
    `sliding_window` (with `is_causal`): the mask of `make_attention_mask`
    for arange positions, built here for the XLA path; on TPU these calls
    (and the plain causal / bidirectional one) run the splash kernel
    (`select_attention_impl`, `jaxlab.nn.splash`); `attention_impl="splash"`
    forces it and raises for a call it cannot compute (a dense mask, a
    cache). A dense mask, a KV cache or T < `SPLASH_MIN_AUTO_LEN` falls back
    to the XLA path under auto selection.
    With `output_attentions=True` attention is computed explicitly
    (`attention_probs`, float32 softmax; float64 for a float64 model,
    which always takes this path) and a third element, the probabilities
    `[B, N, T, S]`, is returned.
    """
    q, k, v = self.project_qkv(x_btd, cos_btd, sin_btd)
    out_btnh, new_cache, probs = self.attend(
        q, k, v, mask=mask, is_causal=is_causal, layer_cache=layer_cache,
        cache_index=cache_index, output_attentions=output_attentions,
        segment_ids_bt=segment_ids_bt, sliding_window=sliding_window)
    out = self.project_out(out_btnh)
    if output_attentions:
      return out, new_cache, probs
    return out, new_cache

  def attend(self, q: jax.Array, k: jax.Array, v: jax.Array, *,
             mask: jax.Array | None, is_causal: bool = False,
             layer_cache: tuple[jax.Array, jax.Array] | None = None,
             cache_index: jax.Array | None = None,
             output_attentions: bool = False,
             segment_ids_bt: jax.Array | None = None,
             sliding_window: int | None = None):
    """The attention of projected q `[B,T,N,H]`, k, v `[B,T,K,H]`: (its
    output `[B,T,N,H]`, the updated cache or None, the probabilities or
    None); the cache, masks and kernel choice of `__call__`. A module that
    projects otherwise (LeSTD's `TuckerAttention`) overrides
    `project_qkv` / `project_out` and keeps this."""
    new_cache = None
    position_mask = mask if isinstance(mask, PositionMask) else None
    if position_mask is not None and (
        layer_cache is None or output_attentions
        or jnp.dtype(q.dtype) == jnp.float64
        or self.logits_soft_cap is not None):
      mask, position_mask = position_mask.dense(q.shape[2]), None
    if layer_cache is not None:
      k_cache, v_cache = layer_cache
      start = (0, cache_index, 0, 0)
      k = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), start)
      v = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), start)
      new_cache = (k, v)
      k, v = k.astype(self.dtype), v.astype(self.dtype)
    structured = segment_ids_bt is not None or sliding_window is not None
    if structured and (mask is not None or layer_cache is not None):
      raise ValueError("segment_ids_bt / sliding_window describe the mask of "
                       "self-attention without a cache; with a dense mask or "
                       "a KV cache, put them into the mask")
    # jax.nn.dot_product_attention's XLA path takes its softmax in float32,
    # so a float64 model (a reference run) attends explicitly in float64.
    explicit = (output_attentions or jnp.dtype(q.dtype) == jnp.float64
                or self.logits_soft_cap is not None)
    scale = (self.head_dim ** -0.5 if self.logits_scale is None
             else self.logits_scale)
    impl = None if explicit else select_attention_impl(
        self.attention_impl, dtype=q.dtype, q_len=q.shape[1],
        kv_len=k.shape[1], dense_mask=mask is not None,
        kv_cache=layer_cache is not None)
    if structured and impl == "cudnn":
      impl = None  # the dense mask built below goes to XLA's path, as before
    chunked = (impl == "chunked" and is_causal and mask is None
               and not structured and layer_cache is None
               and q.shape[1] == k.shape[1])
    if impl == "chunked" and not chunked:
      impl = None  # a mask, a cache or cross-attention: XLA's path
    if structured and impl != "splash":
      pos_bt = jnp.broadcast_to(jnp.arange(q.shape[1], dtype=jnp.int32),
                                q.shape[:2])
      mask = make_attention_mask(
          pos_bt, pos_bt, causal=is_causal, sliding_window=sliding_window,
          q_segment_ids_bt=segment_ids_bt, k_segment_ids_bs=segment_ids_bt)
    if position_mask is not None:  # a long cached call (`chunked_cached_call`)
      return (chunked_cached_attention(q, k, v, position_mask, scale=scale),
              new_cache, None)
    if explicit:
      probs = attention_probs(q, k, mask, scale=scale, is_causal=is_causal,
                              soft_cap=self.logits_soft_cap)
      n, kh = q.shape[2], k.shape[2]
      v_n = jnp.repeat(v, n // kh, axis=2) if n != kh else v
      out_btnh = jnp.einsum("bnts,bsnh->btnh", probs.astype(self.dtype), v_n)
    else:
      probs = None
      if chunked:
        out_btnh = chunked_causal_attention(q, k, v, scale=scale)
      elif impl == "splash":
        out_btnh = splash.splash_attention(
            q, k, v, causal=is_causal, sliding_window=sliding_window,
            segment_ids_bt=segment_ids_bt, scale=scale,
            block_size=self.splash_block_size)
      elif (impl is None and layer_cache is not None
            and q.shape[1] <= CACHED_ATTENTION_MAX_Q
            and current_platform() == "cpu"):
        # A decode step: no per-step transpose of the cache (see there).
        out_btnh = cached_attention(q, k, v, mask, scale=scale)
      else:
        out_btnh = jax.nn.dot_product_attention(
            q, k, v, mask=mask, is_causal=is_causal and mask is None,
            scale=scale, implementation=impl)
    return out_btnh, new_cache, probs

  def project_out(self, out_btnh: jax.Array) -> jax.Array:
    """The output projection: `[B,T,N,H]` -> `[B,T,D]` (+ its bias)."""
    # One contraction over N*H: with two contracted axes XLA:CPU may order
    # them (H, N) to match the attention output's layout and transpose the
    # whole output weight to fit, at every decode step (measured on the 56M
    # decoder: 1 MB copied per layer and step).
    b, t, n, h = out_btnh.shape
    out = jnp.reshape(out_btnh, (b, t, n * h)) @ jnp.reshape(
        self.o_nhd[...].astype(self.dtype), (n * h, -1))
    if self.o_bias_d is not None:
      out = out + self.o_bias_d[...].astype(self.dtype)
    return out
