"""Fused TPU attention: Pallas splash attention, run per shard.

`splash_attention(q, k, v, ...)` computes the same attention as the XLA path
of `jaxlab.nn.attention` (`jax.nn.dot_product_attention` with the mask of
`make_attention_mask` for arange positions) with the splash attention kernel
of `jax.experimental.pallas.ops.tpu.splash_attention`, for the cases that
kernel expresses without a dense mask:

  * causal or bidirectional self-attention (queries and keys are the same T
    tokens, index-ordered),
  * optionally a sliding window: key s is visible from query t when
    `t - s < sliding_window` (plus `s <= t` when causal) -- the rule of
    `make_attention_mask`,
  * optionally packed sequences (`segment_ids [B, T]`: attention stays
    within a segment).

Anything else (a dense boolean mask, padding masks, a KV cache, decoding
with T = 1) is not a splash case; `jaxlab.nn.attention.select_attention_impl`
sends it to the XLA path.

Numerics. Logits are `(q * scale) . k` (the kernel takes no scale, so q is
multiplied by `scale` first, in float32, then cast back to q's dtype; for a
bfloat16 q this adds one rounding of q that the XLA path, which scales the
float32 logits, does not have). The default scale is `head_dim ** -0.5`, the
XLA path's; RoPE attention scales (YaRN's mscale) live in the cos/sin tables
and so are already in q and k. An optional `logits_soft_cap` c applies
`c * tanh(logits / c)` before masking (the XLA path of jaxlab has no soft cap;
it is here for models that need one).

Grouped-query attention. The installed kernel's MHA variant accepts K KV heads
for N query heads (N % K == 0) and maps query head n to KV head n // (N // K),
which is `jax.nn.dot_product_attention`'s grouping; k/v are passed with their
K heads (no copy, and dk/dv are accumulated over the group inside the
kernel). MQA (K == 1) uses the same path with one KV head. Only under a mesh
whose head axis does not divide K are k/v repeated to N heads (see below).

Lengths. The kernel needs T divisible by its block sizes. T is padded to a
multiple of the block size (default: `min(512, T rounded up to 128)`, the
MaxText default of 512 for long sequences); the padded tokens form a segment
of their own (segment id max + 1), so real queries never see them and every
padded query sees at least itself (no empty softmax row), and the padded
rows are sliced off. Block sizes can be overridden (`block_size=` an int, or
a full `BlockSizes`).

Sharding. Under a mesh (`jax.set_mesh`), the kernel runs per shard inside
`jax.shard_map` over the batch axes (logical axis "batch", e.g. data+fsdp)
and the head axis ("heads", e.g. tensor) of the active logical-axis rules
(`nnx.logical_axis_rules`, else `jaxlab.parallel.mesh.DEFAULT_RULES`), so XLA
never has to partition the Pallas custom call. A mesh axis that does not
divide the batch (or the query heads) is left out (the work is replicated over
it). When the head axes divide N but not K, k/v are repeated to N heads before
sharding so that each shard holds the KV heads of its query heads.

Interpret mode. `interpret=True` (or the module flag `INTERPRET`) runs the
same kernel in the Pallas interpreter, which is how the CPU tests run it.
"""

from collections.abc import Sequence
import math
from typing import Any

import jax
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as splash_kernel)
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask as splash_mask)
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

BlockSizes = splash_kernel.BlockSizes

# Set True (e.g. in tests) to run the kernel in the Pallas interpreter.
INTERPRET = False
# MaxText's default block size; shorter sequences use one (128-aligned) block.
DEFAULT_BLOCK_SIZE = 512
# Lane width of a TPU vreg: block sizes must be multiples of it.
LANES = 128

_BATCH_AXIS = "batch"
_HEADS_AXIS = "heads"


def _round_up(x: int, m: int) -> int:
  return -(-x // m) * m


def default_block_size(seq_len: int) -> int:
  """`min(DEFAULT_BLOCK_SIZE, seq_len rounded up to a multiple of 128)`."""
  return min(DEFAULT_BLOCK_SIZE, _round_up(max(int(seq_len), 1), LANES))


def make_block_sizes(seq_len: int,
                     block_size: int | BlockSizes | None = None) -> BlockSizes:
  """Forward and backward (dq, dkv) block sizes for a sequence length.

  Args:
    seq_len: the (unpadded) sequence length T.
    block_size: None (default_block_size(T)), one int used for every block,
      or a full `BlockSizes` (returned unchanged).
  """
  if isinstance(block_size, BlockSizes):
    return block_size
  b = default_block_size(seq_len) if block_size is None else int(block_size)
  if b <= 0 or b % LANES:
    raise ValueError(f"splash block size must be a positive multiple of "
                     f"{LANES}, got {b}")
  return BlockSizes(block_q=b, block_kv=b, block_kv_compute=b,
                    block_q_dkv=b, block_kv_dkv=b, block_kv_dkv_compute=b,
                    block_q_dq=b, block_kv_dq=b)


def padded_length(seq_len: int, block_sizes: BlockSizes) -> int:
  """T rounded up so that every block size of `block_sizes` divides it."""
  sizes = [block_sizes.block_q, block_sizes.block_kv,
           block_sizes.block_kv_compute, block_sizes.block_q_dkv,
           block_sizes.block_kv_dkv, block_sizes.block_kv_dkv_compute,
           block_sizes.block_q_dq, block_sizes.block_kv_dq]
  m = math.lcm(*(int(s) for s in sizes if s is not None))
  return _round_up(int(seq_len), m)


def _base_mask(length: int, causal: bool,
               sliding_window: int | None) -> splash_mask.Mask:
  """One head's [T, T] mask: make_attention_mask's rule for arange ids."""
  shape = (length, length)
  if sliding_window is None:
    return (splash_mask.CausalMask(shape) if causal
            else splash_mask.FullMask(shape))
  # Allowed: t - s < window, i.e. s >= t - (window - 1); causal adds s <= t.
  return splash_mask.LocalMask(shape, (int(sliding_window) - 1,
                                       0 if causal else None), offset=0)


def _kernel(num_heads: int, length: int, causal: bool,
            sliding_window: int | None, block_sizes: BlockSizes,
            logits_soft_cap: float | None, interpret: bool):
  """The splash MHA kernel for one shard's `num_heads` query heads.

  Built at trace time inside the per-shard function, so its block-sparsity
  tables become constants of that trace (the numpy mask processing behind
  them is cached by jax). Not cached here: a kernel built under one trace
  would hold that trace's tracers.
  """
  base = _base_mask(length, causal, sliding_window)
  mask = splash_mask.MultiHeadMask([base] * num_heads)
  return splash_kernel.make_splash_mha(
      mask, block_sizes=block_sizes, head_shards=1, q_seq_shards=1,
      attn_logits_soft_cap=logits_soft_cap, interpret=interpret)


def _active_rules() -> Sequence[tuple[str, Any]]:
  from flax.core import spmd  # pylint: disable=g-import-not-at-top
  rules = spmd.get_logical_axis_rules()
  if rules:
    return rules
  # Imported here: jaxlab.nn does not depend on jaxlab.parallel otherwise.
  from jaxlab.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  return mesh_lib.DEFAULT_RULES


def _mesh_axes_for(logical: str, size: int, mesh, rules) -> tuple[str, ...]:
  """Mesh axes the rules map `logical` to, those (in order) that divide."""
  axes = dict(rules).get(logical)
  if axes is None:
    return ()
  axes = (axes,) if isinstance(axes, str) else tuple(axes)
  out, prod = [], 1
  for a in axes:
    if a is None or a not in mesh.shape or mesh.shape[a] == 1:
      continue
    if size % (prod * mesh.shape[a]):
      continue
    out.append(a)
    prod *= mesh.shape[a]
  return tuple(out)


def _spec_axes(axes: tuple[str, ...]):
  if not axes:
    return None
  return axes[0] if len(axes) == 1 else axes


def splash_attention(q_btnh: jax.Array, k_btkh: jax.Array, v_btkh: jax.Array,
                     *, causal: bool = True,
                     sliding_window: int | None = None,
                     segment_ids_bt: jax.Array | None = None,
                     scale: float | None = None,
                     logits_soft_cap: float | None = None,
                     block_size: int | BlockSizes | None = None,
                     interpret: bool | None = None,
                     shard: bool = True) -> jax.Array:
  """Splash attention over `[B, T, N, H]` queries and `[B, T, K, H]` keys.

  See the module docstring for the supported masks, numerics, padding and
  sharding.

  Args:
    q_btnh: queries `[B, T, N, H]`.
    k_btkh, v_btkh: keys and values `[B, T, K, H]`, N % K == 0.
    causal: causal (index order) or bidirectional attention.
    sliding_window: if set (>= 1), key s is visible from query t only when
      `t - s < sliding_window`.
    segment_ids_bt: optional int `[B, T]` packed-sequence ids.
    scale: logit scale; default `H ** -0.5`.
    logits_soft_cap: optional soft cap c: logits -> c * tanh(logits / c).
    block_size: None (automatic), an int for every block, or `BlockSizes`.
    interpret: run in the Pallas interpreter (default: module `INTERPRET`).
    shard: under a mesh, run per shard with `jax.shard_map` (default True).

  Returns:
    `[B, T, N, H]` in q's dtype.
  """
  b, t, n, h = q_btnh.shape
  if k_btkh.shape[:2] != (b, t) or v_btkh.shape[:3] != k_btkh.shape[:3]:
    raise ValueError("splash attention is self-attention: q, k, v must share "
                     f"[B, T]; got q {q_btnh.shape}, k {k_btkh.shape}, v "
                     f"{v_btkh.shape}")
  kh = k_btkh.shape[2]
  if n % kh:
    raise ValueError(f"num_heads={n} is not a multiple of num_kv_heads={kh}")
  if sliding_window is not None and int(sliding_window) < 1:
    raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
  interpret = INTERPRET if interpret is None else bool(interpret)
  scale = h ** -0.5 if scale is None else float(scale)
  block_sizes = make_block_sizes(t, block_size)
  tp = padded_length(t, block_sizes)

  dt = q_btnh.dtype
  q = (q_btnh.astype(jnp.promote_types(dt, jnp.float32)) * scale).astype(dt)
  # Kernel layout: heads before sequence.
  q = jnp.transpose(q, (0, 2, 1, 3))
  k = jnp.transpose(k_btkh, (0, 2, 1, 3))
  v = jnp.transpose(v_btkh, (0, 2, 1, 3))
  seg = None if segment_ids_bt is None else segment_ids_bt.astype(jnp.int32)
  if tp != t:
    pad = ((0, 0), (0, 0), (0, tp - t), (0, 0))
    q, k, v = jnp.pad(q, pad), jnp.pad(k, pad), jnp.pad(v, pad)
    if seg is None:
      seg = jnp.zeros((b, t), jnp.int32)
    pad_id = jnp.max(seg) + 1  # a segment of its own
    seg = jnp.concatenate(
        [seg, jnp.broadcast_to(pad_id, (b, tp - t)).astype(jnp.int32)],
        axis=1)

  mesh = jax.sharding.get_abstract_mesh()
  use_mesh = shard and not mesh.empty and mesh.size > 1
  batch_axes = head_axes = ()
  if use_mesh:
    rules = _active_rules()
    batch_axes = _mesh_axes_for(_BATCH_AXIS, b, mesh, rules)
    head_axes = _mesh_axes_for(_HEADS_AXIS, n, mesh, rules)
    head_shards = math.prod(mesh.shape[a] for a in head_axes)
    if kh % head_shards:
      # Each shard must hold the KV heads of its query heads.
      k = jnp.repeat(k, n // kh, axis=1)
      v = jnp.repeat(v, n // kh, axis=1)

  window = None if sliding_window is None else int(sliding_window)
  cap = None if logits_soft_cap is None else float(logits_soft_cap)

  def per_shard(q, k, v, seg):
    # q.shape[1]: this shard's query heads.
    kernel = _kernel(q.shape[1], tp, bool(causal), window, block_sizes, cap,
                     interpret)
    if seg is None:
      return jax.vmap(kernel)(q, k, v)
    ids = splash_kernel.SegmentIds(q=seg, kv=seg)
    return jax.vmap(kernel)(q, k, v, ids)

  if use_mesh:
    bspec, hspec = _spec_axes(batch_axes), _spec_axes(head_axes)
    qkv_spec = P(bspec, hspec, None, None)
    seg_spec = None if seg is None else P(bspec, None)
    out = jax.shard_map(
        per_shard, mesh=mesh,
        in_specs=(qkv_spec, qkv_spec, qkv_spec, seg_spec),
        out_specs=qkv_spec, check_vma=False)(q, k, v, seg)
  else:
    out = per_shard(q, k, v, seg)
  out = out[:, :, :t]
  return jnp.transpose(out, (0, 2, 1, 3)).astype(dt)
