"""Lookup-free quantization (LFQ), Voting-LFQ (StableToken) and a VQ baseline.

StableToken (spec: papers/A-G.md, section E.2-E.3) replaces one LFQ
projection by `n` parallel linear branches that vote bitwise:

    p_i = W_i h + b_i in R^d                     (branch i, eq. E.2)
    q_i = p_i + sg(sign(p_i) - p_i)              (straight-through, scale 1)
    s   = (1/n) sum_i q_i                        (soft vote, training)
    B   = sign(s)                                (hard vote, inference)
    k   = sum_j 1[B_j > 0] 2^j                   (token index, little-endian)

and a single `project_out` (d -> D) maps the voted code back into the
encoder stream. During noise-aware consensus training (E.3) a random
minority of `n - num_clean` branches per sample reads the encoding of a
perturbed copy h' = enc(A(w)) and the rest read the clean h.

Conventions (the paper leaves them open, the public VotingLFQ code fixes
them): sign(0) is +1 for a branch code (`sign_code`, codes are always
+-1); a vote tie (only possible with an even n) goes to -1 (bit 0), the
same rule as the index's `1[B_j > 0]`. `VotingLFQ` itself needs an odd
`n_voters`, so its majority is strict.

The quantizers return a `QuantizerOutput` so the speech tokenizer and the
losses (`jaxlab/objectives/stabletoken.py`) treat LFQ, Voting-LFQ (n = 1 is
plain single-branch LFQ) and VQ alike.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

MAX_BITS = 24


# ---------------------------------------------------------------------------
# Bits <-> index, sign codes, votes
# ---------------------------------------------------------------------------


def _check_bits(bits: int) -> None:
  if not 1 <= int(bits) <= MAX_BITS:
    raise ValueError(f"bits must be in [1, {MAX_BITS}], got bits={bits}")


def bits_to_index(codes: jax.Array) -> jax.Array:
  """Token index of sign codes `[..., d]`: k = sum_j 1[B_j > 0] 2^j (int32).

  Little-endian (bit j weighs 2^j), as the implementation; any code value
  > 0 counts as bit 1, so {0, 1} bits and {-1, +1} codes both work.
  """
  codes = jnp.asarray(codes)
  _check_bits(codes.shape[-1])
  weights = (2 ** jnp.arange(codes.shape[-1], dtype=jnp.int32))
  return jnp.sum(jnp.where(codes > 0, weights, 0), axis=-1).astype(jnp.int32)


def index_to_bits(index: jax.Array, bits: int) -> jax.Array:
  """Sign codes `[..., bits]` in {-1, +1} (float32) of token indices.

  The inverse of `bits_to_index` on [0, 2^bits).
  """
  _check_bits(bits)
  index = jnp.asarray(index, jnp.int32)
  bit = (index[..., None] >> jnp.arange(bits, dtype=jnp.int32)) & 1
  return (2 * bit - 1).astype(jnp.float32)


def codebook(bits: int) -> jax.Array:
  """All 2^bits sign codes `[2^bits, bits]`, row k = index_to_bits(k)."""
  return index_to_bits(jnp.arange(2 ** int(bits)), bits)


def sign_code(p: jax.Array) -> jax.Array:
  """sign(p) in {-1, +1} with sign(0) = +1 (a code is never 0)."""
  return jnp.where(p >= 0, 1.0, -1.0).astype(p.dtype)


def sign_ste(p: jax.Array, scale: float = 1.0) -> jax.Array:
  """q = p + sg(scale * sign(p) - p): forward the code, identity gradient."""
  return p + jax.lax.stop_gradient(scale * sign_code(p) - p)


def soft_vote(codes: jax.Array, axis: int = -2) -> jax.Array:
  """s = (1/n) sum_i B_i over the voter axis (StableToken training vote)."""
  return jnp.mean(codes, axis=axis)


def hard_vote(soft: jax.Array) -> jax.Array:
  """B = sign(s) in {-1, +1}; a tie (s = 0, even n only) gives -1 (bit 0)."""
  return jnp.where(soft > 0, 1.0, -1.0).astype(soft.dtype)


def majority_bits(codes: jax.Array, axis: int = -2) -> jax.Array:
  """Bitwise majority of voter codes: hard_vote(soft_vote(codes))."""
  return hard_vote(soft_vote(codes, axis=axis))


# ---------------------------------------------------------------------------
# Routing
# ---------------------------------------------------------------------------


def noisy_branch_mask(key: jax.Array, batch: int, n_voters: int,
                      num_clean: int) -> jax.Array:
  """`[batch, n]` bool: exactly `n - num_clean` random branches per sample.

  The random minority of branches that read the perturbed encoding h'
  (spec E.3; the paper's 3:2 split is n = 5, num_clean = 3).
  """
  num_noisy = n_voters - num_clean
  ranks = jnp.argsort(jax.random.uniform(key, (batch, n_voters)), axis=-1)
  return ranks < num_noisy


# ---------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class QuantizerOutput:
  """What a quantizer returns (shapes for input `[B, T, D]`).

  Attributes:
    out: `[B, T, D]` the quantized code mapped back by `project_out`.
    code: `[B, T, d]` the code fed to `project_out` (soft vote s in
      training, hard vote sign(s) at inference; the VQ codeword).
    indices: `[B, T]` int32 token index of the hard vote (VQ: codeword id).
    branch_pre: `[B, T, n, d]` pre-quantization branch projections p_i.
    branch_codes: `[B, T, n, d]` straight-through branch codes q_i.
    branch_indices: `[B, T, n]` int32 each branch's own token index.
    aux_loss: scalar extra loss the quantizer defines (VQ codebook and
      commitment terms; 0 for LFQ, whose losses live in objectives/).
  """
  out: jax.Array
  code: jax.Array
  indices: jax.Array
  branch_pre: jax.Array
  branch_codes: jax.Array
  branch_indices: jax.Array
  aux_loss: jax.Array


# ---------------------------------------------------------------------------
# Voting-LFQ
# ---------------------------------------------------------------------------


class VotingLFQ(nnx.Module):
  """Voting-LFQ (StableToken eq. E.2): n branches p_i = W_i h + b_i, a vote.

  `n_voters = 1` is plain single-branch LFQ (the paper's baseline). Call
  with `h_noisy` and a `route_mask` (`noisy_branch_mask`) to give each
  branch the clean or the perturbed encoding; without them every branch
  reads `h`.
  """

  def __init__(self, in_dim: int, n_voters: int = 5, bits: int = 13,
               num_clean: int | None = None, *, codebook_scale: float = 1.0,
               rngs: nnx.Rngs):
    n_voters, bits = int(n_voters), int(bits)
    if n_voters < 1 or n_voters % 2 == 0:
      raise ValueError(
          f"VotingLFQ: n_voters must be a positive odd number so the "
          f"bitwise majority is strict (spec E.2), got n_voters={n_voters}; "
          f"use e.g. {max(1, n_voters - 1) if n_voters > 1 else 1} or "
          f"{n_voters + 1}")
    _check_bits(bits)
    if num_clean is None:
      num_clean = n_voters // 2 + 1  # a clean majority (3 of 5)
    if not 0 <= int(num_clean) <= n_voters:
      raise ValueError(f"VotingLFQ: num_clean must be in [0, n_voters="
                       f"{n_voters}], got num_clean={num_clean}")
    self.in_dim, self.n_voters, self.bits = int(in_dim), n_voters, bits
    self.num_clean = int(num_clean)
    self.codebook_scale = float(codebook_scale)
    init = nnx.initializers.lecun_normal()
    # [D, n, d]: the n branch projections W_i side by side.
    self.w = nnx.Param(init(rngs.params(), (in_dim, n_voters * bits))
                       .reshape(in_dim, n_voters, bits))
    self.b = nnx.Param(jnp.zeros((n_voters, bits)))
    self.project_out = nnx.Linear(bits, in_dim, rngs=rngs)

  def branch_projections(self, h: jax.Array) -> jax.Array:
    """p_i = W_i h + b_i for every branch: `[..., D]` -> `[..., n, d]`."""
    return jnp.einsum("...d,dnb->...nb", h, self.w[...]) + self.b[...]

  def __call__(self, h: jax.Array, *, train: bool,
               h_noisy: jax.Array | None = None,
               route_mask: jax.Array | None = None) -> QuantizerOutput:
    """Quantizes `h [B, T, D]`; `route_mask [B, n]` True: branch reads h'."""
    p = self.branch_projections(h)
    if h_noisy is not None and route_mask is not None:
      p_noisy = self.branch_projections(h_noisy)
      p = jnp.where(route_mask[:, None, :, None], p_noisy, p)
    q = sign_ste(p, self.codebook_scale)
    soft = soft_vote(q)                      # [B, T, d]
    hard = self.codebook_scale * hard_vote(soft)
    # Training feeds the real-valued soft vote (gradients reach every
    # branch through q_i); inference feeds the hard vote.
    code = soft if train else hard
    return QuantizerOutput(
        out=self.project_out(code), code=code,
        indices=bits_to_index(hard),
        branch_pre=p, branch_codes=q,
        branch_indices=bits_to_index(q),
        aux_loss=jnp.zeros((), jnp.float32))


# ---------------------------------------------------------------------------
# VQ baseline
# ---------------------------------------------------------------------------


class VectorQuantizer(nnx.Module):
  """VQ-VAE baseline (van den Oord et al. 2017): nearest codeword + STE.

  z = W_in h; e = argmin_k ||z - e_k||^2; out = project_out(z + sg(e - z));
  aux_loss = ||sg(z) - e||^2 + beta ||z - sg(e)||^2 (codebook + commitment,
  per-dimension means). Outputs use the `QuantizerOutput` layout with one
  "branch" (branch_pre = z, branch_codes = the STE codeword).
  """

  def __init__(self, in_dim: int, codebook_size: int = 256,
               code_dim: int = 8, *, beta: float = 0.25, rngs: nnx.Rngs):
    if codebook_size < 2:
      raise ValueError(f"VectorQuantizer: codebook_size must be >= 2, got "
                       f"{codebook_size}")
    self.codebook_size, self.code_dim = int(codebook_size), int(code_dim)
    self.beta = float(beta)
    self.project_in = nnx.Linear(in_dim, code_dim, rngs=rngs)
    self.embedding = nnx.Param(jax.random.uniform(
        rngs.params(), (codebook_size, code_dim), minval=-1.0, maxval=1.0))
    self.project_out = nnx.Linear(code_dim, in_dim, rngs=rngs)

  def __call__(self, h: jax.Array, *, train: bool,
               h_noisy: jax.Array | None = None,
               route_mask: jax.Array | None = None) -> QuantizerOutput:
    del train, h_noisy, route_mask  # one branch, no routing
    z = self.project_in(h)
    e = self.embedding[...]
    dist = (jnp.sum(z * z, -1, keepdims=True) - 2 * z @ e.T
            + jnp.sum(e * e, -1))
    idx = jnp.argmin(dist, axis=-1).astype(jnp.int32)
    e_k = e[idx]
    codebook_loss = jnp.mean((jax.lax.stop_gradient(z) - e_k) ** 2)
    commit = jnp.mean((z - jax.lax.stop_gradient(e_k)) ** 2)
    code = z + jax.lax.stop_gradient(e_k - z)
    return QuantizerOutput(
        out=self.project_out(code), code=code, indices=idx,
        branch_pre=z[..., None, :], branch_codes=code[..., None, :],
        branch_indices=idx[..., None],
        aux_loss=codebook_loss + self.beta * commit)


def num_codes(bits: int) -> int:
  """Vocabulary size 2^bits of an LFQ with `bits` bits."""
  _check_bits(bits)
  return int(np.int64(2) ** bits)
