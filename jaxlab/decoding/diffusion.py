"""Masked-diffusion decoding: LLaDA, Fast-dLLM and DPad (spec L).

    out = generate(model, prompts, gen_len=256, block_len=32,
                   threshold=0.9, cache="prefix",
                   dpad=DPadConfig(window=64, k=3.0, a=1.6),
                   mask_id=MASK, eos_id=EOS, early_stop=True)
    out.tokens            # [B, gen_len] generated ids (EOS-filled after stop)
    out.nfe, out.tokens_processed, out.flops, out.wall_s

The model is a bidirectional `Decoder` (run with `causal=False`) trained as a
masked predictor (`jaxlab.objectives.llada`). The canvas is
x = [prompt (left-padded) | MASK * gen_len], decoded in gen_len / block_len
semi-autoregressive blocks. Each step of a block (LLaDA `generate.py`):

  1. logits = f(x) (or of the part of x the variant feeds, below);
  2. x0 = argmax(logits / temperature + Gumbel) (plain argmax at 0);
  3. confidence on the block's masked positions (`confidence_scores`):
     softmax(logits)[x0] (`confidence="prob"`, LLaDA), or Dream's
     negative entropy sum_v p_v log(p_v + 1e-10) (`"entropy"`) or top-1
     minus top-2 probability (`"margin"`);
  4. unmask the `num_transfer_tokens(...)[step]` most confident
     ("low-confidence remasking"; `schedule="dream"`: Dream's counts,
     `dream_transfer_counts`), or with a Fast-dLLM `threshold` tau the
     top-1 plus every masked position with confidence >= tau, until the
     block has no MASK left (`select_transfer`).

Accelerations, each a switch:
  * `early_stop`: once a decoded block holds EOS the rest of that row is
    filled with EOS; decoding ends when every row has stopped.
  * `cache="prefix"` (Fast-dLLM `use_cache`): the first step of a block is
    a full forward whose keys/values for positions < block_start are kept;
    later steps feed only the block and the suffix. `cache="dual"` also
    keeps the suffix keys/values and feeds only the block. Both are exact
    for the first step of a block and approximate afterwards (the cached
    keys were computed with the block's earlier tokens).
  * `dpad=DPadConfig(...)` (DPad, "suffix dropout"): once per block a subset
    of the suffix [block_end, L) is kept: distance d from block_end is kept
    with probability `suffix_keep_prob(W, k=k, a=a)[d]` (Gaussian sampler)
    or n of the W window positions uniformly (ablation); nothing beyond the
    window. The model runs on [0, block_end) U kept suffix with the kept
    tokens' ORIGINAL RoPE positions (explicit `positions`), and the set is
    fixed for every step of the block (the caches reuse it).

Static shapes: every forward is over a gathered "view" of the canvas (an
index array; -1 = empty slot), so a whole block (its view, all its steps in
one `jax.lax.while_loop`) is one compiled call. Shapes are exact, so the
model computes only the tokens it is charged for (plus DPad's empty suffix
slots, `suffix_slots`): without a cache or DPad the view is the canvas and
one executable serves every block; with them each block's shapes differ and
its start is static (one executable per block position, shared by every
prompt batch of that shape; compiled ahead of time on first use and timed
apart). The cached steps attend over exactly the kept prefix (and suffix for
the dual cache) plus their own queries. The host syncs once per block only
when `early_stop` needs to know whether every row has stopped.

Statistics: `nfe` (model forward calls), `tokens_processed` (real query
tokens fed, summed over calls and rows), `flops` (matmul FLOPs of those
calls from `forward_flops`, attention counted over the real query-key pairs)
and `wall_s`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

CACHE_MODES = (None, "prefix", "dual")
SAMPLERS = ("gaussian", "uniform")
# What masked positions are ranked (and thresholded) by: LLaDA's top-1
# probability and Dream's `alg=entropy` / `alg=topk_margin` scores.
CONFIDENCES = ("prob", "entropy", "margin")
# How many masked positions each fixed-schedule step unmasks: LLaDA's even
# split (`num_transfer_tokens`) or Dream's timestep ratios
# (`dream_transfer_counts`).
SCHEDULES = ("llada", "dream")
# Dream's `DreamGenerationConfig.eps` default (the last timestep).
DREAM_EPS = 1e-3

# Incremented each time a block function is traced (compiled).
TRACE_COUNT = 0


# -- schedule pieces -----------------------------------------------------------


def num_transfer_tokens(masked_count: Any, steps: int) -> np.ndarray:
  """Tokens to unmask at each of `steps` steps, `[..., steps]` (LLaDA).

  The count is spread evenly; the remainder goes to the first steps
  (`get_num_transfer_tokens` of LLaDA's generate.py): 10 over 4 steps is
  [3, 3, 2, 2].
  """
  if steps <= 0:
    raise ValueError(f"steps must be positive, got {steps}")
  count = np.asarray(masked_count, np.int64)
  base, rem = count // steps, count % steps
  idx = np.arange(steps)
  return (base[..., None] + (idx < rem[..., None])).astype(np.int32)


def _num_transfer_tokens_jnp(count_b: jax.Array, steps: int) -> jax.Array:
  base, rem = count_b // steps, count_b % steps
  return base[:, None] + (jnp.arange(steps)[None] < rem[:, None]).astype(
      count_b.dtype)


def dream_timesteps(steps: int, eps: float = DREAM_EPS) -> np.ndarray:
  """`torch.linspace(1, eps, steps + 1)` in float32, value for value.

  Dream's block loop (DPad's generation_utils_block.py:1134, 1181-1189)
  reads its unmask counts from these. torch's CPU kernel computes
  step = (eps - 1) / steps in float32 and then start + step * i for the
  first half and eps - step * (steps - i) for the second, each rounded
  once (a fused multiply-add); the same here in float64 arithmetic rounded
  to float32 once.
  """
  if steps < 1:
    raise ValueError(f"steps must be >= 1, got {steps}")
  n = steps + 1
  start, end = np.float32(1.0), np.float32(eps)
  step = np.float64((end - start) / np.float32(steps))
  i = np.arange(n, dtype=np.float64)
  head = (np.float64(start) + step * i).astype(np.float32)
  tail = (np.float64(end) - step * (n - 1 - i)).astype(np.float32)
  return np.where(np.arange(n) < n // 2, head, tail).astype(np.float32)


def _dream_ratios(steps: int, eps: float) -> np.ndarray:
  """float32 (1 - s / t) of Dream's steps i = 1 .. steps - 2 (t the i-th
  timestep, s the next); the last step (i = steps - 1) takes every masked
  position left."""
  ts = dream_timesteps(steps, eps)
  return np.array([np.float32(1) - ts[i + 1] / ts[i]
                   for i in range(1, steps - 1)], np.float32)


def dream_transfer_counts(masked_count: int, steps: int,
                          eps: float = DREAM_EPS) -> list[int]:
  """Tokens Dream's `alg=entropy` block loop unmasks at each step.

  DPad's dream/model/generation_utils_block.py:1180-1190 (its
  `_sample_baseline`; the cached loop :1244-1260 is the same): with
  timesteps = `dream_timesteps(steps, eps)` (steps = steps per block) and
  i = 1, 2, ..., t = timesteps[i], s = timesteps[i + 1], a step unmasks
  int(n (1 - s / t)) of the n positions still masked (float32), and all
  of them at i = steps - 1: steps - 1 forwards a block. A count can be 0
  (the step's forward is spent, nothing unmasked). E.g. 32 masked over 4
  steps: [10, 10, 12].
  """
  if steps < 2:
    raise ValueError(f"Dream's schedule needs steps >= 2 per block (its "
                     f"loop breaks at i == steps before unmasking), got "
                     f"{steps}")
  left, out = int(masked_count), []
  for r in _dream_ratios(steps, eps):
    k = int(np.float32(left) * r)
    out.append(k)
    left -= k
  return out + [left]


def confidence_scores(logits: jax.Array, x0: jax.Array, confidence: str,
                      *, temperature: float = 0.0) -> jax.Array:
  """Per-position confidence `[...]` of the predictions `x0` (higher =
  unmasked first) from `logits` `[..., V]`.

  "prob": softmax(logits)[x0], LLaDA's low-confidence remasking
    (generate.py: `x0_p` from the untempered softmax; today's default).
  "entropy": the negative entropy sum_v p_v log(p_v + 1e-10) (<= 0) and
  "margin": p_(1) - p_(2), the top-1 minus top-2 probability, both of
    p = softmax(logits / temperature) (plain softmax at temperature 0), as
    Dream's `sample_tokens(..., neg_entropy=True)` / `margin_confidence=True`
    computes them (Dream's generation_utils.py; the copy DPad runs:
    Sitaoooo/DPad@44c7b5b dream/model/generation_utils_block.py:97-129),
    which `alg="entropy"` / `alg="topk_margin"` rank by. Neither depends on
    x0.
  """
  if confidence == "prob":
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.take_along_axis(probs, x0[..., None], -1)[..., 0]
  logits = logits.astype(jnp.float32)
  if temperature > 0:
    logits = logits / temperature
  probs = jax.nn.softmax(logits, axis=-1)
  if confidence == "entropy":
    return jnp.sum(probs * jnp.log(probs + 1e-10), axis=-1)
  if confidence == "margin":
    top2 = jax.lax.top_k(probs, 2)[0]
    return top2[..., 0] - top2[..., 1]
  raise ValueError(f"confidence={confidence!r} is unknown; valid: "
                   f"{', '.join(CONFIDENCES)}")


def select_transfer(conf: jax.Array, masked: jax.Array, *,
                    count: jax.Array | None = None,
                    threshold: float | None = None) -> jax.Array:
  """Which positions of `[B, N]` to unmask this step (bool `[B, N]`).

  Only `masked` positions are candidates, ranked by `conf` (higher first;
  ties to the lower index). With `count` (`[B, 1]` or `[B]`): the `count`
  highest ranked (LLaDA / Dream fixed schedule: `torch.topk` of the
  confidences with -inf off the mask, generation_utils_block.py:1194-1200).
  With `threshold` tau: the top-ranked one plus every candidate with
  conf >= tau (Fast-dLLM; DPad's Dream `alg=confidence_threshold` loop,
  generation_utils_block.py:1169-1178, rejects `selected_confidence < tau`
  after the first).
  """
  conf = jnp.where(masked, conf, -jnp.inf)
  rank = jnp.argsort(jnp.argsort(-conf, axis=1), axis=1)
  if count is not None:
    count = jnp.asarray(count)
    if count.ndim == 1:
      count = count[:, None]
    return masked & (rank < count)
  if threshold is None:
    raise ValueError("select_transfer needs count or threshold")
  return masked & ((conf >= threshold) | (rank == 0))


def suffix_keep_prob(window: int, *, k: float, a: float) -> np.ndarray:
  """DPad Gaussian keep probability `[window]` (spec L, `suffix_dropout`).

  P(keep d) = a / sqrt(2 pi) * exp(-1/2 (k d / (W - 1))^2) for the suffix
  token at distance d < W from the block end (z = linspace(0, k, W)); zero
  beyond the window (not part of the array). a <= sqrt(2 pi) keeps it <= 1;
  larger values are not clipped (keep iff u < p, so p >= 1 always keeps).
  """
  if window < 1:
    raise ValueError(f"dpad.window must be >= 1, got {window}")
  d = np.arange(window, dtype=np.float64)
  z = k * d / (window - 1) if window > 1 else np.zeros_like(d)
  return (a / math.sqrt(2 * math.pi) * np.exp(-0.5 * z * z)).astype(
      np.float32)


@dataclasses.dataclass(frozen=True)
class DPadConfig:
  """DPad suffix dropout (spec L; defaults of its GSM8K runs).

  window: W, suffix tokens at distance >= W are always dropped.
  k, a: the Gaussian's scale and amplitude (`suffix_keep_prob`).
  sampler: "gaussian" (the method) or "uniform" (ablation: `n` of the W
    window positions, uniformly at random).
  n: number of tokens the uniform sampler keeps (required for it).
  slots: static view slots for the kept suffix (None: `suffix_slots`'
    default, mean + 4 std of the kept count).
  """
  window: int = 256
  k: float = 3.0
  a: float = 1.6
  sampler: str = "gaussian"
  n: int | None = None
  slots: int | None = None

  def __post_init__(self):
    if self.window < 1:
      raise ValueError(f"dpad.window must be >= 1, got {self.window}")
    if self.sampler not in SAMPLERS:
      raise ValueError(f"dpad.sampler={self.sampler!r} is unknown; valid: "
                       f"{', '.join(SAMPLERS)}")
    if self.sampler == "uniform" and (self.n is None
                                      or not 0 <= self.n <= self.window):
      raise ValueError(f"dpad.n={self.n} must be set in [0, window="
                       f"{self.window}] for the uniform sampler")
    if self.slots is not None and self.slots < 0:
      raise ValueError(f"dpad.slots={self.slots} must be >= 0")


# -- FLOPs ---------------------------------------------------------------------


def forward_flops(cfg: Any, tokens: float, qk_pairs: float) -> float:
  """Matmul FLOPs of forwards over `tokens` query tokens and `qk_pairs`
  query-key pairs: 2 * tokens * (projection + MLP + LM-head weights) +
  4 * layers * heads * head_dim * qk_pairs (scores and weighted values)."""
  hd = cfg.resolved_head_dim
  per_layer = cfg.dim * hd * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + (
      3 * cfg.dim * cfg.mlp_dim)
  weights = cfg.num_layers * per_layer + cfg.dim * cfg.vocab_size
  return float(2.0 * tokens * weights + 4.0 * cfg.num_layers * cfg.num_heads
               * hd * qk_pairs)


# -- the compiled block --------------------------------------------------------


class _BlockSpec(NamedTuple):
  """Static settings of one compiled block call."""
  block_len: int
  view_len: int        # S: slots of the full forward
  query_len: int       # Tq: slots of the cached steps (0 without a cache)
  cache: str | None
  max_steps: int
  threshold: float | None
  temperature: float
  mask_id: int
  dpad: DPadConfig | None
  canvas_len: int      # L
  shift_logits: bool = False  # Dream: token i is read from the logits at i-1
  suffix_slots: int = 0       # DPad: static slots of the kept suffix
  block_start: int | None = None  # static block start (None: traced)
  confidence: str = "prob"    # `CONFIDENCES`
  dream_eps: float | None = None  # Dream's counts (`dream_transfer_counts`)


def suffix_slots(dpad: DPadConfig, available: int) -> int:
  """Static number of view slots for DPad's kept suffix.

  `available` = suffix tokens inside the window and the canvas. The uniform
  sampler keeps exactly min(n, available); the Gaussian one keeps a
  Bernoulli sum whose slots are ceil(mean + 4 std) (every token when all
  keep probabilities are >= 1), or `dpad.slots` when set. A kept token
  beyond the slots (the farthest first; probability < 1e-4 per row and
  block at 4 std) is dropped.
  """
  available = max(int(available), 0)
  if dpad.slots is not None:
    return min(int(dpad.slots), available)
  if dpad.sampler == "uniform":
    return min(int(dpad.n), available)
  p = np.clip(suffix_keep_prob(dpad.window, k=dpad.k, a=dpad.a)[:available],
              0.0, 1.0).astype(np.float64)
  mean, std = p.sum(), math.sqrt(float((p * (1 - p)).sum()))
  return min(available, int(math.ceil(mean + 4.0 * std - 1e-9)))


def _build_view(key, block_end, spec: _BlockSpec, batch: int) -> jax.Array:
  """`[B, S]` canvas indices of the full forward: [0, block_end) then the
  kept suffix (DPad; `spec.suffix_slots` slots, -1 = empty) or the whole
  canvas."""
  big_l = spec.canvas_len
  if spec.dpad is None:
    return jnp.broadcast_to(jnp.arange(big_l, dtype=jnp.int32),
                            (batch, big_l))
  w = spec.dpad.window
  d = jnp.arange(w, dtype=jnp.int32)
  in_canvas = (block_end + d) < big_l
  if spec.dpad.sampler == "gaussian":
    probs = jnp.asarray(suffix_keep_prob(w, k=spec.dpad.k, a=spec.dpad.a))
    keep = jax.random.uniform(key, (batch, w)) < probs[None]
    keep = keep & in_canvas[None]
  else:
    scores = jnp.where(in_canvas[None], jax.random.uniform(key, (batch, w)),
                       jnp.inf)
    rank = jnp.argsort(jnp.argsort(scores, axis=1), axis=1)
    keep = (rank < spec.dpad.n) & in_canvas[None]
  # Kept distances first, nearest first; the first `suffix_slots` are used.
  order = jnp.argsort(jnp.where(keep, d[None], w + d[None]), axis=1)
  order = order[:, :spec.suffix_slots]
  kept = jnp.where(jnp.take_along_axis(keep, order, 1),
                   block_end + order.astype(jnp.int32), -1)
  prefix = jnp.broadcast_to(jnp.arange(block_end, dtype=jnp.int32),
                            (batch, block_end))
  return jnp.concatenate([prefix, kept], axis=1).astype(jnp.int32)


def _gather(x, pos, valid, view):
  safe = jnp.maximum(view, 0)
  return (jnp.take_along_axis(x, safe, 1), jnp.take_along_axis(pos, safe, 1),
          (view >= 0) & jnp.take_along_axis(valid, safe, 1))


@functools.partial(jax.jit, static_argnames=("graphdef", "spec"))
def _decode_block(state, x, pos, valid, block_start, key, *, graphdef,
                  spec: _BlockSpec):
  """Decodes one block; returns (x, nfe, tokens, qk_pairs).

  Shapes are exact (no padding slots beyond DPad's empty suffix slots):
  without a cache and DPad the view is the whole canvas and `block_start`
  is traced (one executable for every block); otherwise the view and the
  cached steps' shapes depend on the block, whose start is then static.
  """
  global TRACE_COUNT
  TRACE_COUNT += 1
  model = nnx.merge(graphdef, state)
  b = x.shape[0]
  bl, s, tq = spec.block_len, spec.view_len, spec.query_len
  if spec.block_start is not None:
    block_start = spec.block_start
  block_end = block_start + bl
  # With shifted logits (Dream) the block is predicted from the outputs at
  # [block_start - 1, block_end - 1): the cached steps feed one more token.
  q_start = block_start - 1 if spec.shift_logits else block_start
  k_view, k_steps = jax.random.split(key)
  view = _build_view(k_view, block_end, spec, b)

  # -- with a cache, the first step is a full forward over the view --------
  if spec.cache is not None:
    tok, p, v = _gather(x, pos, valid, view)
    vcount = jnp.sum(v, axis=1).astype(jnp.float32)
    out = model.forward(tok, positions=p, attention_mask=v, causal=False,
                        cache=model.init_cache(b, s))
    full = out.cache
    # The step cache holds exactly the kept slots: the prefix [0, q_start)
    # (view[j] == j there), the suffix [block_end, S) for the dual cache,
    # then Tq empty slots the steps write their queries into.
    parts = [(0, q_start)]
    if spec.cache == "dual":
      parts.append((block_end, s))

    def pack(arr, axis, fill):
      pieces = [jax.lax.slice_in_dim(arr, lo, hi, axis=axis)
                for lo, hi in parts]
      shape = list(arr.shape)
      shape[axis] = tq
      pieces.append(jnp.full(shape, fill, arr.dtype))
      return jnp.concatenate(pieces, axis=axis)

    n_cached = sum(hi - lo for lo, hi in parts)
    cache = dataclasses.replace(
        full, k=tuple(pack(k, 1, 0) for k in full.k),
        v=tuple(pack(vv, 1, 0) for vv in full.v),
        positions=pack(full.positions, 2, -1),
        index=jnp.asarray(n_cached, jnp.int32))
    cache_keys = jnp.sum(cache.positions[:, 0] >= 0, axis=1).astype(
        jnp.float32)
    logits0 = jax.lax.slice_in_dim(out.logits, q_start, q_start + bl, axis=1)
    qview = jax.lax.slice_in_dim(view, q_start, q_start + tq, axis=1)
  else:
    cache = None

  masked0 = jax.lax.dynamic_slice_in_dim(x, block_start, bl, 1) == (
      spec.mask_id)
  dream = spec.threshold is None and spec.dream_eps is not None
  if dream:  # Dream: steps - 1 forwards, counts from the masks left
    ratios = jnp.asarray(np.append(
        _dream_ratios(spec.max_steps, spec.dream_eps), np.float32(1)))
    step_limit = spec.max_steps - 1
  else:
    step_limit = spec.max_steps
  if spec.threshold is None and not dream:
    schedule = _num_transfer_tokens_jnp(
        jnp.sum(masked0, axis=1).astype(jnp.int32), spec.max_steps)

  def transfer(x, logits_blv, step):
    blk = jax.lax.dynamic_slice_in_dim(x, block_start, bl, 1)
    m = blk == spec.mask_id
    if spec.temperature > 0:
      g = jax.random.gumbel(jax.random.fold_in(k_steps, step),
                            logits_blv.shape, jnp.float32)
      x0 = jnp.argmax(logits_blv / spec.temperature + g, axis=-1)
    else:
      x0 = jnp.argmax(logits_blv, axis=-1)
    conf = confidence_scores(logits_blv, x0, spec.confidence,
                             temperature=spec.temperature)
    if dream:
      left = jnp.sum(m, axis=1, keepdims=True)                  # [B, 1]
      r = ratios[jnp.minimum(step, step_limit - 1)]
      count = jnp.where(step < step_limit - 1,
                        jnp.floor(left.astype(jnp.float32) * r).astype(
                            left.dtype), left)
      sel = select_transfer(conf, m, count=count)
    elif spec.threshold is None:
      count = jax.lax.dynamic_index_in_dim(
          schedule, jnp.minimum(step, spec.max_steps - 1), 1)   # [B, 1]
      sel = select_transfer(conf, m, count=count)
    else:
      sel = select_transfer(conf, m, threshold=spec.threshold)
    blk = jnp.where(sel, x0.astype(x.dtype), blk)
    return jax.lax.dynamic_update_slice_in_dim(x, blk, block_start, 1)

  if cache is not None:
    x = transfer(x, logits0, 0)
    carry = (x, jnp.int32(1), jnp.int32(1), jnp.sum(vcount),
             jnp.sum(vcount * vcount))
  else:
    carry = (x, jnp.int32(0), jnp.int32(0), jnp.float32(0), jnp.float32(0))

  def has_mask(x):
    return jnp.any(jax.lax.dynamic_slice_in_dim(x, block_start, bl, 1)
                   == spec.mask_id)

  def cond(carry):
    x, step = carry[0], carry[1]
    return has_mask(x) & (step < step_limit)

  def body(carry):
    x, step, nfe, tokens, pairs = carry
    if cache is None:
      tok, p, v = _gather(x, pos, valid, view)
      logits = model.forward(tok, positions=p, attention_mask=v,
                             causal=False).logits
      logits = jax.lax.dynamic_slice_in_dim(logits, q_start, bl, 1)
      cnt = jnp.sum(v, axis=1).astype(jnp.float32)
      new_pairs = jnp.sum(cnt * cnt)
    else:
      tok, p, v = _gather(x, pos, valid, qview)
      logits = model.forward(tok, positions=p, attention_mask=v,
                             causal=False, cache=cache).logits[:, :bl]
      cnt = jnp.sum(v, axis=1).astype(jnp.float32)
      new_pairs = jnp.sum(cnt * (cnt + cache_keys))
    x = transfer(x, logits, step)
    return x, step + 1, nfe + 1, tokens + jnp.sum(cnt), pairs + new_pairs

  x, _, nfe, tokens, pairs = jax.lax.while_loop(cond, body, carry)
  return x, nfe, tokens, pairs


# Compiled block functions: (graphdef, spec, argument signature) -> executable.
_EXECUTABLES: dict[Any, Any] = {}


def _signature(tree) -> tuple:
  leaves, treedef = jax.tree.flatten(tree)
  return (treedef, tuple((getattr(a, "shape", ()),
                          str(getattr(a, "dtype", "")),
                          str(getattr(a, "sharding", ""))) for a in leaves))


def _executable(graphdef, spec: _BlockSpec, args, state_sig
                ) -> tuple[Any, float]:
  """The compiled `_decode_block` for these static settings and argument
  shapes (`state_sig`: `_signature` of the model state, computed once per
  `generate` call), compiled ahead of time on first use; (executable,
  compile seconds).
  """
  cache_key = (graphdef, spec, state_sig, _signature(args[1:]))
  exe = _EXECUTABLES.get(cache_key)
  if exe is not None:
    return exe, 0.0
  # Finish the blocks already dispatched first: compiling while they still
  # run would overlap the two, and subtracting the compile seconds from the
  # call's wall time would then also subtract that device work (on a
  # 2-core CPU a first, compiling call measured 0.56 s for 7.0 s of work).
  jax.block_until_ready(args)
  t0 = time.perf_counter()
  exe = _decode_block.lower(*args, graphdef=graphdef, spec=spec).compile()
  _EXECUTABLES[cache_key] = exe
  return exe, time.perf_counter() - t0


# -- the public entry point ----------------------------------------------------


@dataclasses.dataclass
class DiffusionResult:
  """Output of `generate`.

  tokens: `[B, gen_len]` int32 generated ids (after early stop the rest of a
    row is EOS).
  nfe: model forward calls; tokens_processed: real query tokens fed to the
    model summed over calls and rows; qk_pairs: real query-key pairs;
    flops: `forward_flops` of those; wall_s: seconds of the call (device
    synced) minus compile_s, the seconds spent compiling block functions
    not compiled before (ahead of time, and only after the blocks already
    dispatched have finished, so no decoding runs inside them and none is
    subtracted with them).
  """
  tokens: np.ndarray
  nfe: int
  tokens_processed: float
  qk_pairs: float
  flops: float
  wall_s: float
  compile_s: float
  blocks_run: int


def _round_up(n: int, m: int) -> int:
  return -(-n // m) * m


def _as_prompts(prompts) -> list[list[int]]:
  if isinstance(prompts, (np.ndarray, jax.Array)):
    arr = np.asarray(prompts)
    if arr.ndim != 2:
      raise ValueError(f"prompts must be [B, T] or a list of id lists, got "
                       f"shape {arr.shape}")
    return [list(map(int, r)) for r in arr]
  out = [list(map(int, r)) for r in prompts]
  if not out or any(len(r) == 0 for r in out):
    raise ValueError("prompts must be a non-empty list of non-empty id lists")
  return out


def generate(model, prompts: Sequence[Sequence[int]] | np.ndarray, *,
             gen_len: int, block_len: int = 32, steps: int | None = None,
             threshold: float | None = None, early_stop: bool = False,
             cache: str | None = None, dpad: DPadConfig | None = None,
             mask_id: int, eos_id: int | None = None,
             temperature: float = 0.0, key: jax.Array | None = None,
             confidence: str = "prob",
             schedule: str = "llada", eps: float = DREAM_EPS,
             prompt_bucket: int = 16,
             shift_logits: bool = False,
             mesh: jax.sharding.Mesh | None = None,
             rules: Any = None) -> DiffusionResult:
  """Semi-autoregressive masked-diffusion decoding (module docstring).

  Args:
    model: a `jaxlab.models.decoder.Decoder` trained as a masked predictor.
    prompts: id lists (left-padded internally) or a `[B, T]` array.
    gen_len: tokens to generate; a multiple of `block_len`.
    block_len: tokens per semi-autoregressive block (spec: 32).
    steps: total denoising steps without a threshold (default gen_len: one
      token per step); a multiple of gen_len / block_len.
    threshold: Fast-dLLM confidence threshold tau (None: the fixed
      `num_transfer_tokens` schedule).
    early_stop: stop a row after a decoded block that holds `eos_id`.
    cache: None, "prefix" or "dual".
    dpad: `DPadConfig` for suffix dropout (None: the whole suffix).
    mask_id, eos_id: the MASK and EOS token ids.
    temperature: Gumbel-max sampling temperature (0: argmax).
    key: PRNG key for DPad's suffix sets and sampling (default key(0)).
    confidence: what masked positions are ranked and thresholded by
      (`confidence_scores`): "prob" (LLaDA's top-1 probability), "entropy"
      (Dream's negative entropy, <= 0) or "margin" (top-1 minus top-2
      probability), in both the fixed schedule (the `num_transfer_tokens`
      most confident) and the threshold path (the most confident plus every
      one >= `threshold`; `select_transfer`). DPad's Dream run.py:44-52
      decodes its vanilla runs with `alg=entropy` (the fixed-schedule
      top-k of generation_utils_block.py:1180-1209) and its threshold runs
      with `alg=confidence_threshold`, which thresholds the top-1
      probability (`sample_tokens` without flags, :1157-1179): "prob" here.
      Only the ranking is Dream's: the per-step counts stay LLaDA's
      `num_transfer_tokens` (Dream's loop uses int(n (1 - s / t)) of its
      timesteps, :1181-1189).
    prompt_bucket: prompt padding is rounded up to multiples of this.
    shift_logits: read token i from the logits at position i - 1 (Dream
      checkpoints; `jaxlab.io.hf.diffusion_tokens(path)["shift_logits"]`).
    mesh: a `jaxlab.parallel.make_mesh` mesh: the canvas is sharded over the
      batch axes of `rules` ('data', 'fsdp' by default; the number of
      prompts must be a multiple of their size) and the weights placed by
      their logical names (replicated on a data-only mesh), as the trainer
      and `jaxlab.decoding.sampler` do. The tokens equal the unsharded ones.
    rules: logical-axis rules (default `jaxlab.parallel.DEFAULT_RULES`).

  Raises:
    ValueError: gen_len not a multiple of block_len, a prompt that with
      gen_len exceeds the model's `max_position_embeddings`, `mask_id` /
      `eos_id` outside the vocabulary, an unknown cache mode or confidence,
      a threshold outside [0, 1] (> 0 for "entropy"), bad steps, a batch
      that does not split over the mesh.
  """
  cfg = model.cfg
  vocab = cfg.vocab_size
  if not 0 <= int(mask_id) < vocab:
    raise ValueError(f"mask_id={mask_id} is outside the vocabulary "
                     f"[0, {vocab}) of the model (vocab_size={vocab})")
  if eos_id is not None and not 0 <= int(eos_id) < vocab:
    raise ValueError(f"eos_id={eos_id} is outside the vocabulary "
                     f"[0, {vocab})")
  if early_stop and eos_id is None:
    raise ValueError("early_stop=True needs eos_id")
  if gen_len <= 0 or block_len <= 0 or gen_len % block_len:
    raise ValueError(f"gen_len={gen_len} must be a positive multiple of "
                     f"block_len={block_len}")
  if cache not in CACHE_MODES:
    raise ValueError(f"cache={cache!r} is unknown; valid: None, 'prefix', "
                     "'dual'")
  if confidence not in CONFIDENCES:
    raise ValueError(f"confidence={confidence!r} is unknown; valid: "
                     f"{', '.join(CONFIDENCES)}")
  if confidence == "entropy":
    if threshold is not None and threshold > 0.0:
      raise ValueError(
          f"threshold={threshold} with confidence='entropy': the negative "
          "entropy is <= 0, so the threshold must be <= 0 (DPad's Dream "
          "threshold runs threshold the top-1 probability: "
          "confidence='prob')")
  elif threshold is not None and not 0.0 <= threshold <= 1.0:
    raise ValueError(f"threshold={threshold} must lie in [0, 1]")
  if temperature < 0:
    raise ValueError(f"temperature={temperature} must be >= 0")
  if schedule not in SCHEDULES:
    raise ValueError(f"schedule={schedule!r} is unknown; valid: "
                     f"{', '.join(SCHEDULES)}")
  if schedule == "dream" and threshold is not None:
    raise ValueError("schedule='dream' sets the fixed path's counts; with "
                     f"threshold={threshold} every step unmasks by the "
                     "threshold instead (pass one or the other)")
  if schedule == "dream" and not 0.0 < eps < 1.0:
    raise ValueError(f"eps={eps} must lie in (0, 1)")
  num_blocks = gen_len // block_len
  if threshold is None:
    steps = gen_len if steps is None else int(steps)
    if steps <= 0 or steps % num_blocks:
      raise ValueError(f"steps={steps} must be a positive multiple of the "
                       f"number of blocks gen_len/block_len={num_blocks}")
    max_steps = steps // num_blocks
    if schedule == "dream" and max_steps < 2:
      raise ValueError(f"schedule='dream' needs at least 2 steps a block "
                       f"(steps={steps} over {num_blocks} blocks)")
  else:
    max_steps = block_len  # every step unmasks at least one token
  rows = _as_prompts(prompts)
  longest = max(len(r) for r in rows)
  if longest + gen_len > cfg.max_position_embeddings:
    raise ValueError(
        f"prompt length {longest} + gen_len {gen_len} = {longest + gen_len} "
        f"exceeds the model's positions (max_position_embeddings="
        f"{cfg.max_position_embeddings}); shorten the prompt or gen_len")
  for r in rows:
    if any(not 0 <= t < vocab for t in r):
      raise ValueError(f"prompt ids must lie in [0, {vocab}); got {r}")

  t_start = time.perf_counter()
  b = len(rows)
  p_len = _round_up(longest, prompt_bucket)
  big_l = p_len + gen_len
  x = np.full((b, big_l), mask_id, np.int32)
  valid = np.ones((b, big_l), bool)
  pos = np.zeros((b, big_l), np.int32)
  for i, r in enumerate(rows):
    pad = p_len - len(r)
    x[i, :pad] = eos_id if eos_id is not None else 0
    x[i, pad:p_len] = r
    valid[i, :pad] = False
    pos[i, pad:] = np.arange(big_l - pad)
  key = jax.random.key(0) if key is None else key
  graphdef, state = nnx.split(model)
  ctx = contextlib.ExitStack()
  if mesh is None:
    x, pos, valid = jnp.asarray(x), jnp.asarray(pos), jnp.asarray(valid)
  else:
    from jaxlab import parallel  # pylint: disable=g-import-not-at-top
    from jaxlab.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
    rules = parallel.rules_from_config(rules)
    batch_axes = dict(rules).get("batch") or ()
    batch_axes = (batch_axes,) if isinstance(batch_axes, str) else batch_axes
    shards = math.prod(mesh.shape[a] for a in batch_axes)
    if b % shards:
      raise ValueError(
          f"{b} prompts do not split over the mesh's {shards} batch shards "
          f"(axes {', '.join(batch_axes)} of mesh {mesh_lib.describe(mesh)});"
          f" pass a multiple of {shards} prompts")
    ctx.enter_context(jax.set_mesh(mesh))
    ctx.enter_context(nnx.logical_axis_rules(rules))
    state = parallel.shard_params(state, mesh)
    sharding = parallel.batch_sharding(mesh, rules)
    x, pos, valid = jax.device_put((x, pos, valid), sharding)
  state_sig = _signature(state)
  with ctx:
    out = _run_blocks(graphdef, state, state_sig, x, pos, valid, key,
                      cfg=cfg, b=b, p_len=p_len, big_l=big_l,
                      num_blocks=num_blocks, block_len=block_len,
                      max_steps=max_steps, threshold=threshold,
                      early_stop=early_stop, cache=cache, dpad=dpad,
                      mask_id=mask_id, eos_id=eos_id,
                      temperature=temperature, shift_logits=shift_logits,
                      confidence=confidence,
                      dream_eps=(float(eps) if schedule == "dream"
                                 and threshold is None else None),
                      sharding=None if mesh is None else sharding)
  out.wall_s = time.perf_counter() - t_start - out.compile_s
  return out


def _run_blocks(graphdef, state, state_sig, x, pos, valid, key, *, cfg, b,
                p_len, big_l, num_blocks, block_len, max_steps, threshold,
                early_stop, cache, dpad, mask_id, eos_id, temperature,
                shift_logits, confidence="prob", dream_eps=None,
                sharding=None) -> DiffusionResult:
  """The block loop of `generate` (wall_s is set by the caller)."""

  done = np.zeros((b,), bool)
  compile_s = 0.0
  nfe, tokens, pairs = [], [], []
  blocks_run = 0
  for blk in range(num_blocks):
    if early_stop and done.all():
      break
    bs = p_len + blk * block_len
    be = bs + block_len
    extra = 1 if shift_logits else 0
    static = cache is not None or dpad is not None
    slots = 0
    if dpad is None:
      view_len = big_l
    else:
      slots = suffix_slots(dpad, min(dpad.window, big_l - be))
      view_len = be + slots
    if cache is None:
      query_len = 0
    elif cache == "dual":
      query_len = block_len + extra
    else:
      query_len = view_len - (bs - extra)
    spec = _BlockSpec(block_len=block_len, view_len=view_len,
                      query_len=query_len, cache=cache, max_steps=max_steps,
                      threshold=None if threshold is None else float(
                          threshold),
                      temperature=float(temperature), mask_id=int(mask_id),
                      dpad=dpad, canvas_len=big_l,
                      shift_logits=bool(shift_logits), suffix_slots=slots,
                      block_start=bs if static else None,
                      confidence=str(confidence), dream_eps=dream_eps)
    args = (state, x, pos, valid, jnp.int32(bs), jax.random.fold_in(key, blk))
    exe, seconds = _executable(graphdef, spec, args, state_sig)
    compile_s += seconds
    x, n, tk, pr = exe(*args)
    if sharding is not None:  # keep the executables' input sharding
      x = jax.device_put(x, sharding)
    nfe.append(n)
    tokens.append(tk)
    pairs.append(pr)
    blocks_run += 1
    if early_stop:
      has_eos = np.asarray(jnp.any(x[:, bs:be] == eos_id, axis=1))
      newly = has_eos & ~done
      done |= has_eos
      if newly.any():
        fill = jnp.asarray(done)[:, None] & (jnp.arange(big_l) >= be)[None]
        x = jnp.where(fill, jnp.int32(eos_id), x)
        if sharding is not None:
          x = jax.device_put(x, sharding)
  if early_stop and blocks_run < num_blocks:
    x = jnp.where(jnp.arange(big_l)[None] >= p_len + blocks_run * block_len,
                  jnp.int32(eos_id), x)
  gen = np.asarray(jax.device_get(x[:, p_len:]))
  nfe_v = int(sum(int(v) for v in jax.device_get(nfe)))
  tokens_v = float(sum(float(v) for v in jax.device_get(tokens)))
  pairs_v = float(sum(float(v) for v in jax.device_get(pairs)))
  return DiffusionResult(tokens=gen, nfe=nfe_v, tokens_processed=tokens_v,
                         qk_pairs=pairs_v,
                         flops=forward_flops(cfg, tokens_v, pairs_v),
                         wall_s=0.0,
                         compile_s=compile_s, blocks_run=blocks_run)


def truncate_at_eos(tokens: Sequence[int], eos_id: int) -> list[int]:
  """The ids before the first `eos_id`."""
  out = []
  for t in tokens:
    if int(t) == eos_id:
      break
    out.append(int(t))
  return out
