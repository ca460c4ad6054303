"""LeSTD: sparse Tucker decomposition of multi-head attention (paper P).

Spec: `shared/papers/O-S.md` section (P). Per decoder layer with h heads:

1. Tensorise (P.1): head i's `W^Q_i, W^K_i, W^V_i, (W^O_i)ᵀ`, each
   `d_model x d_head`, are stacked into `W_total [d_model, d_head, 4, h]`
   (`stack_attention`). Grouped-query attention (g KV heads, each shared by
   r = h/g query heads) is an extension [inferred: spec P.1 treats MHA
   only], `LeSTDConfig.gqa`: "group" stacks each KV group's
   `W^Q_1..W^Q_r, W^K, W^V, (W^O_1)ᵀ..(W^O_r)ᵀ` along mode 3 (size 2r+2;
   r = 1 is exactly the MHA order Q, K, V, Oᵀ) and runs the head mode over
   the g groups, `W_total [d_model, d_head, 2r+2, g]`; the compressed layer
   keeps g K/V heads (the KV cache is unchanged). "error" rejects GQA.
2. Stage I (P.2): HOOI Tucker with shared orthonormal bases on modes 1-3
   (the head mode is not compressed): `W ≈ G ×₁ U⁽¹⁾ ×₂ U⁽²⁾ ×₃ U⁽³⁾`
   (`hooi`, generic N-mode, tensorly's convention, with `skip_modes`).
3. Stage II (P.3): the core coefficients are coordinates in an orthonormal
   rank-one basis, so the importance of g_β is g_β²/E and Algorithm 1
   (iteratively zero the ⌈α·nnz⌉ smallest |g|, refit the survivors in
   closed form g_γ = ⟨W, B_γ⟩) gives the sparse core (`sparsify_core`).
4. Accounting (P.5) counts the stored indices of the sparse core
   (`param_count`, `compression_ratio`), and a budget solver picks the
   ranks and nnz that meet a target ratio with the least reconstruction
   error (`solve_budget`, data-free as in the paper).
5. Inference in the compressed domain (P.4): `TuckerAttention` computes
   Y = X U⁽¹⁾ once, Q/K/V_i = Y M_{i,t} U⁽²⁾ᵀ and the output
   (Σ_i O_i U⁽²⁾ M_{i,4}ᵀ) U⁽¹⁾ᵀ, with M_{i,t} = Σ_{r3} G[:, :, r3, i]
   U⁽³⁾[t, r3] (dense-masked on CPU); `compress_decoder` swaps it into a
   `Decoder`, which then generates through its normal forward.

Baselines beside it: per-matrix truncated SVD (`svd_compress_decoder`) and
the dense-core Tucker of TensorLLM (`compress_decoder(..., sparse=False)`).
Where the spec says [inferred] the choice is a field of `LeSTDConfig`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.compression import linalg
from jaxlab.nn import attention as attn_lib
from jaxlab.nn import rope

INDEX_FORMATS = ("none", "coo", "bitmap", "auto")
GQA_MODES = ("group", "error")


@dataclasses.dataclass(frozen=True)
class LeSTDConfig:
  """Options of LeSTD (spec P; `config.lestd` of jaxlab/configs/lestd.py).

  Attributes:
    target_ratio: compressed / original MHA weight storage per layer
      (spec P.5: "fraction of MHA parameters kept"; 0.2 is aggressive).
    ranks: (R1, R2, R3) for every layer, or None to let the budget solver
      pick them from `rank_grid` per layer.
    rank_fractions: the solver's grid as fractions of (d_model, d_head) for
      R1 and R2 ([inferred] spec P.5 sweeps d/8..d/2 and d_head/2..d_head);
      R3 takes every value in `r3_values`.
    r3_values: candidate ranks of the Q/K/V/O mode (4 long for MHA, 2r+2
      for grouped-query attention in "group" mode); values above its size
      are cut to it.
    alpha: Algorithm 1's pruning rate per round (spec P.3: 0.1).
    refit: recompute the surviving core entries after each round.
    hooi_iters, hooi_tol: HOOI's sweep cap and relative fit-change stop
      ([inferred] 20-50 sweeps, tol 1e-6).
    index_format: how the sparse core's positions are stored (spec P.5
      [inferred]): "coo" (one `index_bits` integer per nonzero), "bitmap"
      (one bit per core entry), "auto" (the cheaper of the two), "none"
      (values only; the paper's possible value-only count).
    index_bits, value_bits: storage widths for the accounting.
    gqa: how grouped-query attention layers are tensorised ([inferred]
      extension of spec P.1, see `stack_attention`): "group" (per KV
      group, mode 3 of size 2r+2) or "error" (MHA only, as in the spec).
  """
  target_ratio: float = 0.4
  ranks: tuple[int, int, int] | None = None
  rank_fractions: tuple[tuple[float, ...], tuple[float, ...]] = (
      (0.125, 0.25, 0.5, 0.75, 1.0), (0.5, 0.75, 1.0))
  r3_values: tuple[int, ...] = (2, 3, 4)
  alpha: float = 0.1
  refit: bool = True
  hooi_iters: int = 50
  hooi_tol: float = 1e-6
  index_format: str = "auto"
  index_bits: int = 32
  value_bits: int = 32
  gqa: str = "group"

  def __post_init__(self):
    if not 0.0 < float(self.target_ratio) <= 1.0:
      raise ValueError(f"lestd.target_ratio={self.target_ratio} must be in "
                       "(0, 1]")
    if not 0.0 < float(self.alpha) <= 1.0:
      raise ValueError(f"lestd.alpha={self.alpha} must be in (0, 1]")
    if self.index_format not in INDEX_FORMATS:
      raise ValueError(f"lestd.index_format={self.index_format!r}; valid: "
                       f"{', '.join(INDEX_FORMATS)}")
    if self.gqa not in GQA_MODES:
      raise ValueError(f"lestd.gqa={self.gqa!r}; valid: "
                       f"{', '.join(GQA_MODES)}")
    if self.ranks is not None:
      object.__setattr__(self, "ranks", tuple(int(r) for r in self.ranks))
      if len(self.ranks) != 3:
        raise ValueError(f"lestd.ranks={self.ranks} must be (R1, R2, R3)")


# --------------------------------------------------------------------------
# Tensorisation (spec P.1)
# --------------------------------------------------------------------------


def _check_gqa(attn: attn_lib.Attention, gqa: str) -> None:
  if gqa not in GQA_MODES:
    raise ValueError(f"gqa={gqa!r}; valid: {', '.join(GQA_MODES)}")
  if attn.num_kv_heads != attn.num_heads and gqa == "error":
    raise ValueError(
        f"LeSTD stacks W^Q, W^K, W^V, (W^O)ᵀ per head (spec P.1, multi-head "
        f"attention); this layer has num_kv_heads={attn.num_kv_heads} < "
        f"num_heads={attn.num_heads} (grouped-query attention), which the "
        "spec does not treat and lestd.gqa='error' rejects. Set "
        "lestd.gqa='group' (one tensor slice per KV group) or use a model "
        "with num_kv_heads == num_heads.")


def stack_attention(attn: attn_lib.Attention, gqa: str = "group"
                    ) -> jax.Array:
  """`W_total [d_model, d_head, 2r+2, g]` of one attention layer (spec P.1).

  g = num_kv_heads groups of r = num_heads / g query heads (query head
  `k·r + j` reads KV head k: `Attention.attend`'s repeat). Slot order of
  mode 3 for group k: `W^Q_{kr}, ..., W^Q_{kr+r-1}, W^K_k, W^V_k,
  (W^O_{kr})ᵀ, ..., (W^O_{kr+r-1})ᵀ`, each `[d_model, d_head]`; `W^O_i` is
  head i's `[d_head, d_model]` slice of the output projection, transposed.
  For MHA (r = 1) this is the spec's `[d_model, d_head, 4, h]` with slots
  Q, K, V, (W^O)ᵀ. Grouping by KV head is the [inferred] GQA extension
  (`gqa="group"`); `gqa="error"` rejects GQA layers. Biases are not part
  of the tensor (kept dense, [inferred]).
  """
  _check_gqa(attn, gqa)
  q = attn.q_dnh[...]
  k = attn.k_dkh[...]
  v = attn.v_dkh[...]
  d, n, h = q.shape
  g = k.shape[1]
  r = n // g
  q = q.reshape(d, g, r, h)                                  # [D, G, R, H]
  o_t = jnp.transpose(attn.o_nhd[...], (2, 0, 1)).reshape(d, g, r, h)
  w_dgth = jnp.concatenate([q, k[:, :, None], v[:, :, None], o_t], axis=2)
  return jnp.transpose(w_dgth, (0, 3, 2, 1)).astype(jnp.float32)


def group_size(w_total_shape: Sequence[int]) -> int:
  """r, the query heads per KV group, from mode 3's size 2r+2."""
  t = int(w_total_shape[2])
  if t < 4 or t % 2:
    raise ValueError(f"mode 3 of W_total has size {t}; LeSTD's tensor has "
                     "2r+2 slots (r >= 1 query heads per KV group)")
  return (t - 2) // 2


def unstack_attention(w_total: jax.Array) -> dict[str, jax.Array]:
  """Inverse of `stack_attention`: `{q_dnh, k_dnh, v_dnh, o_nhd}`.

  `k_dnh` and `v_dnh` have the g KV heads (`[d_model, g, d_head]`).
  """
  r = group_size(w_total.shape)
  w = jnp.transpose(w_total, (0, 3, 2, 1))  # [D, G, T, H]
  d, g, _, h = w.shape
  o = w[:, :, r + 2:].reshape(d, g * r, h)
  return {"q_dnh": w[:, :, :r].reshape(d, g * r, h), "k_dnh": w[:, :, r],
          "v_dnh": w[:, :, r + 1], "o_nhd": jnp.transpose(o, (1, 2, 0))}


# --------------------------------------------------------------------------
# Stage I: HOOI (spec P.2)
# --------------------------------------------------------------------------


def _check_ranks(shape: Sequence[int], ranks: Sequence[int],
                 skip_modes: Sequence[int]) -> tuple[int, ...]:
  ranks = tuple(int(r) for r in ranks)
  if len(ranks) != len(shape):
    raise ValueError(f"ranks={ranks} has {len(ranks)} entries for a tensor "
                     f"of {len(shape)} modes (shape {tuple(shape)})")
  for n, (r, dim) in enumerate(zip(ranks, shape)):
    if not 1 <= r <= dim:
      raise ValueError(
          f"ranks[{n}]={r} is larger than the tensor's dimension {dim} in "
          f"mode {n} (shape {tuple(shape)}); each rank must be in [1, dim]"
          if r > dim else f"ranks[{n}]={r} must be >= 1")
    if n in skip_modes and r != dim:
      raise ValueError(f"mode {n} is skipped (not compressed) so ranks[{n}] "
                       f"must equal its dimension {dim}, got {r}")
  return ranks


def hooi(tensor: jax.Array, ranks: Sequence[int], *, iters: int = 50,
         tol: float = 1e-6, skip_modes: Sequence[int] = ()
         ) -> tuple[jax.Array, list[jax.Array]]:
  """Tucker decomposition by higher-order orthogonal iteration.

  Spec P.2: initialise each U⁽ⁿ⁾ with the top-Rₙ left singular vectors of
  the mode-n unfolding (HOSVD); then, for each mode n, project the tensor on
  the other modes' subspaces, Y = W ×_{m≠n} U⁽ᵐ⁾ᵀ, and set U⁽ⁿ⁾ to the top-Rₙ
  left singular vectors of Y₍ₙ₎. Stops after `iters` sweeps or when the fit
  ‖G‖²/‖W‖² (= 1 - relative squared error, the factors being orthonormal)
  changes by less than `tol`. Finally G = W ×ₙ U⁽ⁿ⁾ᵀ.

  Args:
    tensor: any N-mode array (computed in its dtype, at least float32).
    ranks: Rₙ per mode, 1 <= Rₙ <= shape[n].
    iters: maximum number of HOOI sweeps (0: HOSVD only).
    tol: stop when the fit improves by less than this.
    skip_modes: modes left uncompressed (LeSTD's head mode): their factor
      is the identity and Rₙ must equal the dimension.

  Returns:
    `(core, factors)`: `core` of shape `ranks`, `factors[n]` of shape
    `[tensor.shape[n], ranks[n]]` with orthonormal columns (tensorly's
    convention), so `multi_mode_dot(core, factors)` reconstructs.

  Raises:
    ValueError: a rank larger than its dimension (or < 1), or the wrong
      number of ranks.
  """
  x = jnp.asarray(tensor)
  if not jnp.issubdtype(x.dtype, jnp.floating) or x.dtype.itemsize < 4:
    x = x.astype(jnp.float32)
  skip = tuple(sorted(int(m) for m in skip_modes))
  ranks = _check_ranks(x.shape, ranks, skip)
  # Ranks enter the compiled loop as data (factors padded with zero columns
  # to full width), so a budget solver's grid of ranks compiles once per
  # tensor shape; the zero columns add nothing to any projection.
  core, factors = _hooi_jit(x, jnp.asarray(ranks, jnp.int32), skip=skip,
                            iters=int(iters), tol=float(tol))
  core = core[tuple(slice(0, r) for r in ranks)]
  return core, [f[:, :r] for f, r in zip(factors, ranks)]


def _leading_eigvecs(y: jax.Array, mode: int, rank: jax.Array) -> jax.Array:
  """`[I_n, I_n]`: the top-`rank` left singular vectors of the mode
  unfolding of `y` (eigenvectors of its Gram matrix, descending), then zero
  columns."""
  mat = linalg.unfold(y, mode)
  _, vecs = jnp.linalg.eigh(mat @ mat.T)
  vecs = vecs[:, ::-1]
  return vecs * (jnp.arange(vecs.shape[1]) < rank)[None, :].astype(vecs.dtype)


@functools.partial(jax.jit, static_argnames=("skip", "iters", "tol"))
def _hooi_jit(x, ranks, *, skip, iters, tol):
  """The HOOI sweeps of `hooi` as one compiled loop (see its docstring)."""
  modes = [n for n in range(x.ndim) if n not in skip]
  eyes = {n: jnp.eye(x.shape[n], dtype=x.dtype) for n in skip}

  def full(fs):
    out, it = [], iter(fs)
    for n in range(x.ndim):
      out.append(eyes[n] if n in skip else next(it))
    return out

  def project(fs, leave_out=None):
    mats = [None if (n in skip or n == leave_out) else f
            for n, f in enumerate(full(fs))]
    return linalg.multi_mode_dot(x, mats, transpose=True)

  norm_sq = jnp.maximum(jnp.sum(x ** 2), 1e-30)
  init = tuple(_leading_eigvecs(x, n, ranks[n]) for n in modes)

  def sweep(fs):
    fs = list(fs)
    for j, n in enumerate(modes):
      fs[j] = _leading_eigvecs(project(fs, leave_out=n), n, ranks[n])
    return tuple(fs)

  def fit_of(fs):
    return jnp.sum(project(fs) ** 2) / norm_sq

  def cond(state):
    i, _, prev, cur = state
    return (i < iters) & ((i == 0) | (jnp.abs(cur - prev) >= tol))

  def body(state):
    i, fs, _, cur = state
    fs = sweep(fs)
    return i + 1, fs, cur, fit_of(fs)

  state = (jnp.array(0), init, jnp.array(-1.0, x.dtype), fit_of(init))
  _, fs, _, _ = jax.lax.while_loop(cond, body, state)
  factors = full(fs)
  return project(fs), tuple(factors)


def project_core(tensor: jax.Array, factors: Sequence[jax.Array]
                 ) -> jax.Array:
  """G = W ×ₙ U⁽ⁿ⁾ᵀ: the coefficients ⟨W, B_β⟩ of every basis tensor.

  This is also the closed-form refit of spec P.3 (g_γ* = ⟨W, B_γ⟩) for any
  set of surviving entries.
  """
  return linalg.multi_mode_dot(jnp.asarray(tensor), factors, transpose=True)


def tucker_to_tensor(core: jax.Array, factors: Sequence[jax.Array]
                     ) -> jax.Array:
  """Ŵ = G ×₁ U⁽¹⁾ ×₂ U⁽²⁾ ... (tensorly's `tucker_to_tensor`)."""
  return linalg.multi_mode_dot(core, factors)


# --------------------------------------------------------------------------
# Stage II: magnitude-ranked iterative sparsification (spec P.3)
# --------------------------------------------------------------------------


def core_importance(core: jax.Array, residual_sq: float) -> jax.Array:
  """Imp(g_β) = (E_{g_β=0} - E)/E = g_β² / E (spec P.3)."""
  return jnp.asarray(core) ** 2 / max(float(residual_sq), 1e-30)


def sparsify_core(tensor: jax.Array, factors: Sequence[jax.Array],
                  nnz: int, *, alpha: float = 0.1, refit: bool = True
                  ) -> tuple[jax.Array, np.ndarray]:
  """Algorithm 1 of spec P.3: prune the core to `nnz` entries, refitting.

  Starting from the dense core G = W ×ₙ U⁽ⁿ⁾ᵀ: while more than `nnz`
  entries survive, zero the ⌈α·k⌉ smallest |g| among the k survivors (the
  last round clipped to land on `nnz`) and, with `refit`, set the survivors
  to ⟨W, B_γ⟩ (computed in float64 on the host: in exact arithmetic a no-op,
  kept to cancel drift). Ranking by |g| is ranking by Imp = g²/E.

  Returns:
    (sparse core with zeros at pruned entries, boolean keep-mask).

  Raises:
    ValueError: `nnz` outside [0, core size].
  """
  w64 = np.asarray(tensor, np.float64)
  f64 = [np.asarray(f, np.float64) for f in factors]

  def dense_core():
    out = w64
    for mode, f in enumerate(f64):
      out = np.moveaxis(np.tensordot(f.T, out, axes=([1], [mode])), 0, mode)
    return out

  core = dense_core()
  size = core.size
  if not 0 <= int(nnz) <= size:
    raise ValueError(f"nnz={nnz} must be in [0, {size}] (the core's size)")
  keep = np.ones(core.shape, bool)
  kept = size
  while kept > int(nnz):
    drop = min(int(math.ceil(alpha * kept)), kept - int(nnz))
    mags = np.where(keep, np.abs(core), np.inf).ravel()
    order = np.argsort(mags, kind="stable")[:drop]
    keep.ravel()[order] = False
    kept -= drop
    core = (dense_core() if refit else core) * keep
  out = core * keep
  return jnp.asarray(out, jnp.float32), keep


# --------------------------------------------------------------------------
# Accounting (spec P.5) and the budget solver
# --------------------------------------------------------------------------


def index_words(nnz: int, core_size: int, *, index_format: str = "auto",
                index_bits: int = 32, value_bits: int = 32) -> float:
  """Storage of a sparse core's positions, in value-sized words.

  A dense core (nnz == core_size) needs no index. Otherwise: "coo" stores
  one `index_bits` integer per nonzero, "bitmap" one bit per core entry,
  "auto" the cheaper of the two, "none" nothing (values-only accounting).
  """
  if index_format not in INDEX_FORMATS:
    raise ValueError(f"index_format={index_format!r}; valid: "
                     f"{', '.join(INDEX_FORMATS)}")
  if index_format == "none" or int(nnz) >= int(core_size):
    return 0.0
  coo = int(nnz) * index_bits / value_bits
  bitmap = int(core_size) / value_bits
  return {"coo": coo, "bitmap": bitmap, "auto": min(coo, bitmap)}[
      index_format]


def param_count(shape: Sequence[int], ranks: Sequence[int], nnz: int, *,
                index_format: str = "auto", index_bits: int = 32,
                value_bits: int = 32) -> dict[str, float]:
  """Stored words of one compressed layer (spec P.5).

  `shape` is `W_total`'s `(d_model, d_head, T, g)` (MHA: T = 4, g = h;
  grouped-query attention in "group" mode: T = 2r+2 slots, g KV groups of
  r query heads) and `ranks` (R1, R2, R3) (the head mode is not
  compressed: identity factor, not stored).
  values = d_model·R1 + d_head·R2 + T·R3 + nnz; indices as `index_words`;
  original = T·g·d_model·d_head, which is the attention's
  (2h + 2g)·d_model·d_head (MHA: 4·h·d_model·d_head, spec P.5).
  """
  d, dh, t, g = (int(s) for s in shape)
  r1, r2, r3 = (int(r) for r in ranks[:3])
  core_size = r1 * r2 * r3 * g
  values = d * r1 + dh * r2 + t * r3 + int(nnz)
  idx = index_words(nnz, core_size, index_format=index_format,
                    index_bits=index_bits, value_bits=value_bits)
  return {"values": float(values), "indices": float(idx),
          "total": float(values + idx), "original": float(t * g * d * dh),
          "core_size": float(core_size)}


def compression_ratio(shape: Sequence[int], ranks: Sequence[int], nnz: int,
                      **kw) -> float:
  """(values + stored indices) / original MHA weights (see `param_count`)."""
  c = param_count(shape, ranks, nnz, **kw)
  return c["total"] / c["original"]


def max_nnz(shape: Sequence[int], ranks: Sequence[int], target_ratio: float,
            **kw) -> int:
  """Largest nnz whose `compression_ratio` is <= `target_ratio` (-1: none).

  Capped at the core size (a dense core needs no index).
  """
  d, dh, t, g = (int(s) for s in shape)
  r1, r2, r3 = (int(r) for r in ranks[:3])
  core_size = r1 * r2 * r3 * g
  budget = float(target_ratio) * t * g * d * dh
  fixed = d * r1 + dh * r2 + t * r3
  if fixed + core_size <= budget + 1e-9:
    return core_size
  lo, hi = -1, core_size - 1  # ratio is monotone in nnz below the dense size
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if param_count(shape, ranks, mid, **kw)["total"] <= budget + 1e-9:
      lo = mid
    else:
      hi = mid - 1
  return lo


@dataclasses.dataclass(frozen=True)
class LayerPlan:
  """Ranks, nnz and the predicted relative squared error of one layer."""
  ranks: tuple[int, int, int]
  nnz: int
  ratio: float
  value_ratio: float
  rel_error: float


def rank_grid(shape: Sequence[int], cfg: LeSTDConfig
              ) -> list[tuple[int, int, int]]:
  """Candidate (R1, R2, R3) of the budget solver (`cfg.ranks` if set)."""
  d, dh, t, _ = (int(s) for s in shape)
  if cfg.ranks is not None:
    return [cfg.ranks]
  r1s = sorted({max(1, min(d, int(round(f * d))))
                for f in cfg.rank_fractions[0]})
  r2s = sorted({max(1, min(dh, int(round(f * dh))))
                for f in cfg.rank_fractions[1]})
  r3s = sorted({min(t, int(r)) for r in cfg.r3_values})
  return list(itertools.product(r1s, r2s, r3s))


def solve_budget(tensor: jax.Array, cfg: LeSTDConfig, *, sparse: bool = True,
                 cache: dict | None = None) -> tuple[LayerPlan, Any]:
  """Ranks and nnz that meet `cfg.target_ratio` with the least error.

  For every candidate of `rank_grid` whose factors fit, HOOI gives the
  orthonormal bases; with a sparse core the budget left after the factors
  (and the stored indices) sets nnz, and the predicted error of keeping the
  nnz largest coefficients is (‖W‖² - Σ_kept g²)/‖W‖² (orthonormal basis,
  spec P.3); with `sparse=False` (TensorLLM's dense core) the whole core
  must fit. Data-free: only the weights are used.

  Args:
    tensor: `W_total [d_model, d_head, T, g]` of one layer.
    cfg: the options (target ratio, grid, index accounting, HOOI).
    sparse: LeSTD (True) or the dense-core Tucker baseline (False).
    cache: optional dict reused across calls on the same tensor (HOOI per
      ranks is computed once).

  Returns:
    (the chosen `LayerPlan`, (core, factors) of its HOOI).

  Raises:
    ValueError: no candidate meets the budget (names the smallest ratio the
      grid reaches).
  """
  w = jnp.asarray(tensor, jnp.float32)
  shape = tuple(w.shape)
  norm_sq = float(jnp.sum(w ** 2))
  acct = dict(index_format=cfg.index_format, index_bits=cfg.index_bits,
              value_bits=cfg.value_bits)
  cache = {} if cache is None else cache
  best, best_hooi, smallest = None, None, math.inf
  for ranks in rank_grid(shape, cfg):
    full = ranks + (shape[3],)
    core_size = int(np.prod(full))
    smallest = min(smallest, compression_ratio(
        shape, ranks, 1 if sparse else core_size, **acct))
    if sparse:
      nnz = max_nnz(shape, ranks, cfg.target_ratio, **acct)
      if nnz < 1:
        continue
    else:
      nnz = core_size
      if compression_ratio(shape, ranks, nnz, **acct) > cfg.target_ratio:
        continue
    if ranks not in cache:
      cache[ranks] = hooi(w, full, iters=cfg.hooi_iters, tol=cfg.hooi_tol,
                          skip_modes=(3,))
    core, factors = cache[ranks]
    mags = np.sort(np.asarray(core, np.float64).ravel() ** 2)[::-1]
    kept = float(mags[:nnz].sum())
    rel = max(norm_sq - kept, 0.0) / max(norm_sq, 1e-30)
    plan = LayerPlan(
        ranks=ranks, nnz=int(nnz),
        ratio=compression_ratio(shape, ranks, nnz, **acct),
        value_ratio=compression_ratio(shape, ranks, nnz, index_format="none"),
        rel_error=rel)
    if best is None or rel < best.rel_error - 1e-12:
      best, best_hooi = plan, (core, factors)
  if best is None:
    kind = "LeSTD (sparse core)" if sparse else "dense-core Tucker"
    need = "factors + one core entry" if sparse else "factors + dense core"
    raise ValueError(
        f"target_ratio={cfg.target_ratio} cannot be met by {kind} for a "
        f"layer tensor of shape {shape}: the cheapest candidate ranks need "
        f"ratio {smallest:.4f} ({need}); raise "
        "target_ratio or add smaller ranks (lestd.rank_fractions / "
        "lestd.r3_values)")
  return best, best_hooi


# --------------------------------------------------------------------------
# Inference in the compressed domain (spec P.4)
# --------------------------------------------------------------------------


class TuckerAttention(attn_lib.Attention):
  """Attention computed from Tucker factors (spec P.4), MHA or GQA.

  Params: `u1_dr [d_model, R1]`, `u2_hs [d_head, R2]` and
  `m_gtrs [g, T, R1, R2]` with M_{k,t} = Σ_{r3} G[:, :, r3, k] U⁽³⁾[t, r3]
  (the sparse core folded with U⁽³⁾, stored dense-masked), for g groups
  and T = 2r+2 slots (`stack_attention`'s order: r query heads, K, V, r
  output heads; MHA: g = h, T = 4). Per token: Y = x U⁽¹⁾ (shared by all
  heads and by Q, K, V), Q_{kr+j} = Y M_{k,j} U⁽²⁾ᵀ, K_k = Y M_{k,r} U⁽²⁾ᵀ,
  V_k = Y M_{k,r+1} U⁽²⁾ᵀ, and out = (Σ_i (O_i U⁽²⁾) M_{k(i),r+2+j(i)}ᵀ)
  U⁽¹⁾ᵀ. Biases, RoPE (applied after the projection, [inferred]), masks
  and the KV cache (`[B, S, g, d_head]`: g KV heads, as in the dense
  layer) are those of `jaxlab.nn.attention.Attention`, whose `__call__`
  and `attend` (kernel choice, the GQA repeat, splash, structured masks,
  the cached decode path) this module inherits, overriding only
  `project_qkv` and `project_out`; so it replaces `Block.attn` in a
  `Decoder`.
  """

  def __init__(self, core: jax.Array, factors: Sequence[jax.Array], *,
               biases: dict[str, jax.Array] | None = None,
               use_rope: bool = True, dtype=jnp.float32,
               attention_impl: str | None = None, nnz: int | None = None):
    core = jnp.asarray(core, jnp.float32)
    u1, u2, u3 = (jnp.asarray(f, jnp.float32) for f in factors[:3])
    g = core.shape[3]
    r = group_size((u1.shape[0], u2.shape[0], u3.shape[0], g))
    if len(factors) > 3:
      # the head-mode factor (identity in LeSTD) folds into the core
      core = linalg.mode_dot(core, jnp.asarray(factors[3], jnp.float32), 3)
    self.group = r
    self.num_heads, self.num_kv_heads = g * r, g
    self.head_dim = u2.shape[0]
    self.dtype = dtype
    self.use_rope = use_rope
    self.attention_impl = attention_impl
    # Attention.attend's knobs: the default 1/sqrt(d_head) scale, no
    # soft-capping, the splash kernel's default block size.
    self.logits_scale = self.logits_soft_cap = None
    self.splash_block_size = None
    self.nnz = int(np.count_nonzero(np.asarray(core))) if nnz is None else (
        int(nnz))
    self.u1_dr = nnx.Param(u1)
    self.u2_hs = nnx.Param(u2)
    self.m_gtrs = nnx.Param(jnp.einsum("abcg,tc->gtab", core, u3))
    biases = biases or {}
    self.q_bias_nh = (nnx.Param(biases["q"]) if "q" in biases else None)
    self.k_bias_kh = (nnx.Param(biases["k"]) if "k" in biases else None)
    self.v_bias_kh = (nnx.Param(biases["v"]) if "v" in biases else None)

  def project_qkv(self, x_btd: jax.Array, cos_btd, sin_btd):
    """q `[B, T, h, d_head]`, k, v `[B, T, g, d_head]` from the factors,
    RoPE on q and k."""
    dt, r = self.dtype, self.group
    y_btr = x_btd.astype(dt) @ self.u1_dr[...].astype(dt)
    m = self.m_gtrs[...].astype(dt)
    u2 = self.u2_hs[...].astype(dt)
    z_btgjs = jnp.einsum("btr,gjrs->btgjs", y_btr, m[:, :r + 2])
    qkv = jnp.einsum("btgjs,hs->btgjh", z_btgjs, u2)
    b, t, g = qkv.shape[:3]
    q = qkv[:, :, :, :r].reshape(b, t, g * r, -1)
    k, v = qkv[:, :, :, r], qkv[:, :, :, r + 1]
    if self.q_bias_nh is not None:
      q = q + self.q_bias_nh[...].astype(dt)
      k = k + self.k_bias_kh[...].astype(dt)
      v = v + self.v_bias_kh[...].astype(dt)
    if self.use_rope:
      q = rope.apply_rope(q, cos_btd, sin_btd)
      k = rope.apply_rope(k, cos_btd, sin_btd)
    return q, k, v

  def project_out(self, out_btnh: jax.Array) -> jax.Array:
    """(Σ_i (O_i U⁽²⁾) M_{k(i),r+2+j(i)}ᵀ) U⁽¹⁾ᵀ: `[B, T, h, d_head]` ->
    `[B, T, D]`."""
    dt, r = self.dtype, self.group
    b, t, n, h = out_btnh.shape
    p = jnp.einsum("btnh,hs->btns", out_btnh.astype(dt),
                   self.u2_hs[...].astype(dt)).reshape(b, t, n // r, r, -1)
    c = jnp.einsum("btgjs,gjrs->btr", p,
                   self.m_gtrs[...].astype(dt)[:, r + 2:])
    return c @ self.u1_dr[...].astype(dt).T

  def dense_weights(self) -> dict[str, jax.Array]:
    """The dense `{q_dnh, k_dnh, v_dnh, o_nhd}` these factors represent
    (`k_dnh`, `v_dnh` with the g KV heads)."""
    u1, u2, m = self.u1_dr[...], self.u2_hs[...], self.m_gtrs[...]
    w = jnp.einsum("dr,gtrs,hs->dhtg", u1, m, u2)  # W_total [D, H, T, G]
    return unstack_attention(w)

  def to_dense(self) -> attn_lib.Attention:
    """A plain `Attention` with the rebuilt weights (the test reference)."""
    w = self.dense_weights()
    d, n, h = w["q_dnh"].shape
    g = w["k_dnh"].shape[1]
    out = attn_lib.Attention(d, n, g, h, rngs=nnx.Rngs(0),
                             qkv_bias=self.q_bias_nh is not None,
                             dtype=self.dtype, use_rope=self.use_rope,
                             attention_impl=self.attention_impl)
    _set_weights(out, w, self._biases())
    return out

  def _biases(self) -> dict[str, jax.Array]:
    if self.q_bias_nh is None:
      return {}
    return {"q": self.q_bias_nh[...], "k": self.k_bias_kh[...],
            "v": self.v_bias_kh[...]}


def _set_weights(attn: attn_lib.Attention, w: dict[str, jax.Array],
                 biases: dict[str, jax.Array]) -> None:
  dt = attn.q_dnh[...].dtype
  attn.q_dnh[...] = jnp.asarray(w["q_dnh"], dt)
  attn.k_dkh[...] = jnp.asarray(w["k_dnh"], dt)
  attn.v_dkh[...] = jnp.asarray(w["v_dnh"], dt)
  attn.o_nhd[...] = jnp.asarray(w["o_nhd"], dt)
  if biases:
    attn.q_bias_nh[...] = biases["q"]
    attn.k_bias_kh[...] = biases["k"]
    attn.v_bias_kh[...] = biases["v"]


def _attn_biases(attn: attn_lib.Attention) -> dict[str, jax.Array]:
  if attn.q_bias_nh is None:
    return {}
  return {"q": attn.q_bias_nh[...], "k": attn.k_bias_kh[...],
          "v": attn.v_bias_kh[...]}


# --------------------------------------------------------------------------
# Whole-model compression: LeSTD, dense Tucker, per-matrix SVD
# --------------------------------------------------------------------------


def compress_layer(attn: attn_lib.Attention, cfg: LeSTDConfig, *,
                   sparse: bool = True, hooi_cache: dict | None = None
                   ) -> tuple[TuckerAttention, dict]:
  """One layer: tensorise, solve the budget, HOOI, Algorithm 1, factors."""
  w = stack_attention(attn, cfg.gqa)
  plan, (core, factors) = solve_budget(w, cfg, sparse=sparse,
                                       cache=hooi_cache)
  if sparse and plan.nnz < core.size:
    core, _ = sparsify_core(w, factors, plan.nnz, alpha=cfg.alpha,
                            refit=cfg.refit)
  module = TuckerAttention(core, factors, biases=_attn_biases(attn),
                           use_rope=attn.use_rope, dtype=attn.dtype,
                           attention_impl=attn.attention_impl, nnz=plan.nnz)
  approx = tucker_to_tensor(core, factors)
  rel = float(jnp.sum((w - approx) ** 2) / jnp.sum(w ** 2))
  info = dataclasses.asdict(plan) | {"measured_rel_error": rel}
  return module, info


def compress_decoder(model: nnx.Module, cfg: LeSTDConfig, *,
                     sparse: bool = True,
                     hooi_caches: list[dict] | None = None
                     ) -> tuple[nnx.Module, list[dict]]:
  """A copy of `model` whose attention layers are `TuckerAttention`.

  `sparse=True` is LeSTD; `sparse=False` the dense-core Tucker baseline
  (TensorLLM) at the same target ratio; `hooi_caches` (one dict per layer,
  kept by the caller) reuses HOOI results across ratios and both variants of
  the same model. Only the attention projections are
  compressed (spec P.6: FFNs stay dense). The copy generates through the
  normal `Decoder.forward` (and so through `jaxlab.decoding.sampler`).

  Returns:
    (compressed model, per-layer info: ranks, nnz, ratio with and without
    indices, predicted and measured relative squared error).
  """
  out = nnx.clone(model)
  infos = []
  for i, block in enumerate(out.layers):
    try:
      block.attn, info = compress_layer(
          block.attn, cfg, sparse=sparse,
          hooi_cache=None if hooi_caches is None else hooi_caches[i])
    except ValueError as e:
      raise ValueError(f"layer {i}: {e}") from None
    infos.append(info | {"layer": i})
  return out, infos


def svd_rank_for_ratio(d_model: int, width: int, target_ratio: float) -> int:
  """Per-matrix SVD rank r with r·(d_model + width) <= ratio·d_model·width."""
  return int(math.floor(target_ratio * d_model * width / (d_model + width)))


def svd_compress_decoder(model: nnx.Module, target_ratio: float
                         ) -> tuple[nnx.Module, list[dict]]:
  """Per-matrix truncated SVD baseline (data-free) at `target_ratio`.

  Each of W_Q `[d_model, h·d_head]`, W_K, W_V `[d_model, g·d_head]` (g KV
  heads; g = h for MHA) and W_O `[h·d_head, d_model]` is replaced by its
  best rank-r approximation, with r the largest rank whose factors
  (r·(d_model + width) values per matrix) fit the ratio, so the original
  is (2h + 2g)·d_model·d_head as in `param_count`. The copy holds the
  rebuilt dense weights (same function as the factored form) and keeps
  its g KV heads.

  Raises:
    ValueError: the ratio is below one rank's cost.
  """
  out = nnx.clone(model)
  infos = []
  for i, block in enumerate(out.layers):
    attn = block.attn
    d, n, h = attn.q_dnh[...].shape
    nh = attn.k_dkh[...].shape[1] * h
    ws = {"q_dnh": attn.q_dnh[...].reshape(d, n * h),
          "k_dnh": attn.k_dkh[...].reshape(d, nh),
          "v_dnh": attn.v_dkh[...].reshape(d, nh),
          "o_nhd": attn.o_nhd[...].reshape(n * h, d)}
    stored, original, new, ranks = 0, 0, {}, {}
    for name, mat in ws.items():
      width = mat.shape[1] if name != "o_nhd" else mat.shape[0]
      r = svd_rank_for_ratio(d, width, target_ratio)
      if r < 1:
        raise ValueError(
            f"layer {i}: target_ratio={target_ratio} cannot be met by "
            f"per-matrix SVD: one rank of a {mat.shape} matrix needs ratio "
            f"{(d + width) / (d * width):.4f}")
      r = min(r, min(mat.shape))
      ranks[name[0]] = r
      u, s, vh = linalg.truncated_svd(mat, r)
      new[name] = (u * s[..., None, :]) @ vh
      stored += r * (d + width)
      original += d * width
    attn.q_dnh[...] = new["q_dnh"].reshape(d, n, h)
    attn.k_dkh[...] = new["k_dnh"].reshape(attn.k_dkh[...].shape)
    attn.v_dkh[...] = new["v_dnh"].reshape(attn.v_dkh[...].shape)
    attn.o_nhd[...] = new["o_nhd"].reshape(n, h, d)
    infos.append({"layer": i, "ratio": stored / original,
                  "value_ratio": stored / original,
                  "rank": svd_rank_for_ratio(d, n * h, target_ratio),
                  "ranks": ranks})
  return out, infos


def dense_decoder(compressed: nnx.Module, original: nnx.Module
                  ) -> nnx.Module:
  """A copy of `original` holding the weights `compressed` represents.

  Each `TuckerAttention` of `compressed` is rebuilt into the dense
  projections (`TuckerAttention.dense_weights`) of the matching plain
  `Attention` of `original` (biases, RoPE and every other field kept); an
  attention that is already plain (SVD, whose weights are held dense) is
  copied. The result is an ordinary `Decoder` that checkpoint writers
  (`jaxlab.io.hf.save`) export and that computes the compressed model's
  function (up to float rounding).
  """
  out = nnx.clone(original)
  for i, (src, dst) in enumerate(zip(compressed.layers, out.layers)):
    attn = src.attn
    if isinstance(attn, TuckerAttention):
      w = attn.dense_weights()
      biases = attn._biases()  # pylint: disable=protected-access
    elif isinstance(attn, attn_lib.Attention):
      w = {"q_dnh": attn.q_dnh[...], "k_dnh": attn.k_dkh[...],
           "v_dnh": attn.v_dkh[...], "o_nhd": attn.o_nhd[...]}
      biases = _attn_biases(attn)
    else:
      raise ValueError(f"layer {i}: attention {type(attn).__name__} is "
                       "neither TuckerAttention nor Attention")
    _set_weights(dst.attn, w, biases)
  return out
