"""SipIt: exact prompt recovery from hidden states (paper Q, spec Q.2).

A causal decoder's layer-l state at position t depends only on the tokens
0..t, so h_t(s) = F(s_t; s_{<t}, t) (spec Q.2 notation): given the observed
states H = (h_0, ..., h_{T-1}) of an unknown prompt at one layer, the prompt
is recovered position by position. For t = 0..T-1 (Alg. 1), a POLICY
proposes not-yet-visited tokens v, each is verified by running the one-step
map F(v; recovered prefix, t) and accepted when it lands in the acceptance
set of h_t; the first accepted token is appended to the prefix. Injectivity
(Thm 2.2) makes the accepted token the true one almost surely, and every
token is eventually proposed, so recovery is exact within T*|V| calls
(Thm 3.1 / D.2).

    states = layer_states(model, ids_bt)[layer]           # [B, T, D] targets
    res = invert(model, states, layer=layer)               # gradient policy
    res.ids, res.proposals, res.seconds                    # [B, T], [B, T], s

Pieces (each a small function; the policies are a registry):
  * `layer_states`: the targets, computed from the prefix with the *same*
    code path as verification (one token at a time through a KV cache of
    the prefix), so exact tokens verify under tight tolerances (spec Q.2,
    "Hidden-state extraction"). States of a full forward pass agree to
    ~1e-6 and also verify under the default tolerance.
  * Verification is batched: the prefix cache (capacity T, batch 1) is
    tiled to C rows (`KVCache.tile`) and C candidates run as one step
    (`next_token_states`).
  * `POLICIES["gradient"]` (Alg. 3, App. E.1): a continuous proxy e for the
    embedding at position t, g = grad_e loss(F(e), h_t) (MSE over d, as the
    official code), ||g|| clipped to 1, SGD step e <- e - gamma g, propose
    the nearest unvisited embedding row argmin_{v not in C} ||E_v - e||;
    every K proposals e <- E[cand] (K scaled by 1 + |V| // 25000 at t = 0,
    as the code). The gradient at e and the candidate's state come from one
    forward pass of [e; E[cand]] over the tiled cache (App. E.1 (a)).
    `candidates_per_step` > 1 verifies the k nearest unvisited rows per
    step (a batched variant; 1 = the paper).
  * `POLICIES["random"]` (Alg. 2, "BruteForce"): a uniform permutation of V,
    verified `verify_batch` at a time; proposals = rank of the true token.
  * Acceptance (Def. D.2, Remark 21): by default the L2 ball
    ||h_t - F(v)|| <= eps_t with a radius relative to the state's norm,
    eps_t = c * eps(dtype) * sqrt(d) * ||h_t|| (`acceptance_radius`, c =
    `SipItConfig.radius_scale` = 32; derivation below). A float `tol` is a
    fixed L2 radius; `SipItConfig(acceptance="allclose")` is the official
    code's elementwise `allclose(pred, target, rtol=1e-5, atol=1e-5)`.
  * A known prefix (spec Q.2, "an optional BOS token can be prepended and
    is treated as known"): `invert(..., prefix_ids=[bos])` puts the given
    tokens in the verified cache and searches only the positions after
    them. On SmolLM2-135M-Instruct the BOS / chat-start token takes the
    attention-sink position, which the gradient policy otherwise searches
    slowly (12-token sentence at layer 15: not done in 60 s without it;
    exact, 816 proposals, 69 s on 2 loaded CPU cores with it).
  * Progress and a time limit: `invert(..., log_every=N, progress=fn,
    time_limit_s=S)`; past S seconds the search stops and returns what it
    has (`Inversion.timed_out`, `Inversion.done`, id -1 where not done).
  * `hard_prompts`: the HARDPROMPTS baseline (Wen et al. 2023, PEZ,
    adapted as in spec Q.2 "Baselines"): all T embeddings optimised jointly
    with the same loss (gradient at the projected tokens applied to the
    continuous ones, Adam), steps = T*|V|/4 by default.

Our decoder returns the residual stream before the final norm at every
layer (`DecoderOutput.hidden_states`), i.e. the official code's
"final norm = Identity" reading of the last layer; `final_norm=True`
inverts the normed last layer instead (HF's `hidden_states[-1]`).

The default acceptance radius (why it works on real checkpoints). The
target h_t and the verifier's F(s_t) are the same function of the same
tokens evaluated in two float orders (a batch of 1 vs a tiled batch of
1 + k rows; a KV-cache step vs a full forward; another framework), so they
differ by rounding only. A reduction of length n in precision eps carries a
relative error of about eps * sqrt(n) (random-walk rounding); the state's
error relative to its norm is therefore a small multiple of
eps * sqrt(d), whatever the state's scale. Measured on
SmolLM2-135M-Instruct (fp32, d = 576, eps * sqrt(d) = 2.9e-6): the true
token's recomputed state is 0.3-1.6 * eps * sqrt(d) * ||h_t|| from the
target at layers 1/8/15/30 (e.g. 1.4e-2 at position 0 of layer 15, where
||h_0|| = 22680 from the attention-sink activation, so an elementwise
atol = rtol = 1e-5 rejects it), while the nearest wrong token over all of
V is >= 2.6e-3 * ||h_t|| away (position 0, layer 15; >= 0.4 * ||h_t||
at later positions) = 900 * eps * sqrt(d) * ||h_t||. c = 32 sits near the
geometric middle of that gap (~20x above the rounding, ~28x below the
nearest wrong token at the sink position); `Inversion.nearest_rejected`
records the margin on each run. In bfloat16 (eps = 7.8e-3) the rule gives a
radius above ||h_t|| itself: `invert` then warns and a fixed `tol` (or a
float32 model) is needed.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.models import decoder
from jaxlab.registry import Registry

POLICIES: Registry = Registry("SipIt policy")


@dataclasses.dataclass(frozen=True)
class SipItConfig:
  """Settings of `invert` (defaults: the official code, spec Q.2).

  Attributes:
    acceptance: the test used when `invert`'s `tol` is None:
      "l2_relative" (default): the L2 ball of radius `acceptance_radius`
      = radius_scale * eps(compute dtype) * sqrt(d) * ||h_t|| (Def. D.2 with
      a norm-relative radius; see the module docstring); "allclose": the
      official code's elementwise test with `atol`, `rtol`.
    radius_scale: c of the relative radius (32).
    atol, rtol: the "allclose" test: |F(v) - h| <= atol + rtol * |h| in
      every coordinate (torch.allclose).
    step_size: SGD step gamma on the continuous proxy (code default 1.0).
    clip_norm: the gradient is rescaled to this norm when larger (1.0).
    project_every: K, proposals between projections e <- E[cand] (50).
    first_token_scale: scale K by (1 + |V| // 25000) at t = 0 (the code).
    loss: "mse" (mean over d, the code) or "half_sse" (1/2 ||.||^2, the
      paper's text).
    candidates_per_step: nearest unvisited rows verified per gradient step.
    verify_batch: candidates per verification call of the random policy.
    final_norm: apply the final RMSNorm to the last layer's states.
    seed: seeds the initial token (gradient) and the permutation (random).
  """
  acceptance: str = "l2_relative"
  radius_scale: float = 32.0
  atol: float = 1e-5
  rtol: float = 1e-5
  step_size: float = 1.0
  clip_norm: float = 1.0
  project_every: int = 50
  first_token_scale: bool = True
  loss: str = "mse"
  candidates_per_step: int = 1
  verify_batch: int = 128
  final_norm: bool = False
  seed: int = 0


@dataclasses.dataclass
class Inversion:
  """What `invert` returns: the ids and the search statistics.

  Attributes:
    ids: recovered token ids, int `[T]` (or `[B, T]` for `[B, T, D]` input).
    proposals: tokens proposed (verifier calls) per position, same shape.
    verified: True where a token passed the acceptance test (False: no
      token of V verified; the closest one by L2 distance was kept).
    distance: L2 distance ||F(v) - h_t|| of the kept token, same shape.
    seconds: wall time per prompt `[B]` (or a float for one prompt).
    policy, layer: what was run.
    radius: the L2 acceptance radius used per position (NaN: allclose).
    nearest_rejected: the smallest distance ||F(v) - h_t|| among the
      proposed tokens that were rejected (inf: the first proposal was
      accepted); nearest_rejected / radius is the observed margin.
    done: False at positions the search did not finish (time limit).
    timed_out: True when `time_limit_s` stopped the search; positions not
      done hold id -1.
    known: True at the positions of `invert(prefix_ids=...)` (given, not
      searched; `stats` leaves them out).
  """
  ids: np.ndarray
  proposals: np.ndarray
  verified: np.ndarray
  distance: np.ndarray
  seconds: Any
  policy: str
  layer: int
  radius: np.ndarray | None = None
  nearest_rejected: np.ndarray | None = None
  done: np.ndarray | None = None
  timed_out: bool = False
  known: np.ndarray | None = None

  def __iter__(self):  # `ids, stats = invert(...)` unpacking
    return iter((self.ids, self))

  def stats(self) -> dict[str, float]:
    """Summary: median/mean proposals per token, verified fraction, time."""
    p = np.asarray(self.proposals, np.float64)
    searched = (np.ones(p.shape, bool) if self.known is None
                else ~np.asarray(self.known))
    pick = searched
    if self.done is not None and np.any(np.asarray(self.done) & searched):
      pick = np.asarray(self.done) & searched
    p = p[pick] if np.any(pick) else np.zeros((1,))
    ver = np.asarray(self.verified)[searched]
    return {"median_proposals": float(np.median(p)),
            "mean_proposals": float(np.mean(p)),
            "max_proposals": float(np.max(p)),
            "verified_fraction": float(np.mean(ver)) if ver.size else 1.0,
            "seconds": float(np.sum(self.seconds)),
            "timed_out": bool(self.timed_out)}


# -- model plumbing --------------------------------------------------------------


def _split(model):
  return nnx.split(model)


def num_layers(model) -> int:
  return int(model.cfg.num_layers)


def check_layer(model, layer: int) -> int:
  """`layer` as an index into `hidden_states` (0 = embedding output, L = the
  last block's output); negative counts from the end. Raises ValueError."""
  n = num_layers(model) + 1
  if not isinstance(layer, (int, np.integer)) or isinstance(layer, bool):
    raise ValueError(f"layer must be an int index into hidden_states, got "
                     f"{layer!r}")
  if not -n <= int(layer) < n:
    raise ValueError(
        f"layer={layer} is out of range: the model has {n - 1} blocks, so "
        f"hidden_states has {n} entries (layer 0 = embedding output, "
        f"{n - 1} = last block); use 0..{n - 1} (or -{n}..-1)")
  return int(layer) % n


def _check_hidden(model, hidden) -> np.ndarray:
  h = np.asarray(hidden)
  dim = int(model.cfg.dim)
  if h.ndim not in (2, 3):
    raise ValueError(f"hidden must be [T, D] or [B, T, D] states of one "
                     f"layer, got shape {h.shape}")
  if h.shape[-1] != dim:
    raise ValueError(
        f"hidden has width {h.shape[-1]} but the model's hidden size "
        f"(cfg.dim) is {dim}: pass the states of this model at one layer, "
        f"shape [T, {dim}] or [B, T, {dim}]")
  if h.shape[-2] > int(model.cfg.max_position_embeddings):
    raise ValueError(f"hidden has {h.shape[-2]} positions, more than the "
                     f"model's max_position_embeddings="
                     f"{model.cfg.max_position_embeddings}")
  if not np.all(np.isfinite(h)):
    raise ValueError("hidden contains NaN or Inf values")
  return h.astype(np.float32)


def input_embeddings(model) -> jax.Array:
  """`[V, D]` float32: the vectors `model.embed` feeds the first block for
  each token (the table times sqrt(dim) under `cfg.embed_scale`, Gemma 3,
  in the compute dtype). The continuous proxy of the gradient policy, its
  nearest-row search and the verified candidates all live in this space
  (`forward(inputs_embeds=...)` takes embeddings as given)."""
  v = int(model.cfg.vocab_size)
  return model.embed(jnp.arange(v, dtype=jnp.int32)[None])[0].astype(
      jnp.float32)


def _check_prefix(prefix_ids, b: int, t: int, vocab: int) -> np.ndarray:
  """`prefix_ids` as int `[B, P]` (P = 0 for None). Raises ValueError."""
  if prefix_ids is None:
    return np.zeros((b, 0), np.int32)
  p = np.asarray(prefix_ids)
  if p.ndim == 1:
    p = np.broadcast_to(p[None], (b, p.shape[0]))
  if (p.ndim != 2 or p.shape[0] != b or p.size and
      not np.issubdtype(p.dtype, np.integer)):
    raise ValueError(f"prefix_ids must be int token ids [P] or [B={b}, P], "
                     f"got shape {np.shape(prefix_ids)} dtype {p.dtype}")
  if p.shape[1] >= t:
    raise ValueError(f"prefix_ids has {p.shape[1]} tokens but hidden has "
                     f"{t} positions: hidden holds the states of the whole "
                     "sequence (prefix included) and at least one position "
                     "must be left to invert")
  if p.size and (p.min() < 0 or p.max() >= vocab):
    raise ValueError(f"prefix_ids must be token ids in [0, {vocab}), got "
                     f"min {p.min()} max {p.max()}")
  return p.astype(np.int32)


def _eps(model) -> float:
  dt = decoder.to_dtype(model.cfg.dtype)
  return max(float(jnp.finfo(dt).eps), float(jnp.finfo(jnp.float32).eps))


def acceptance_radius(model, hidden, *, scale: float = 32.0) -> np.ndarray:
  """The default L2 acceptance radius per state: `[..., T]` for `[..., T,
  D]` states, eps_t = scale * eps(compute dtype) * sqrt(d) * ||h_t||.

  Def. D.2's ball with a norm-relative radius: rounding of two float
  evaluations of the same state differs by a small multiple of
  eps * sqrt(d) * ||h_t|| (reductions of length ~d), whatever the scale of
  h_t (derivation and the SmolLM2 measurements: module docstring).
  """
  h = np.asarray(hidden, np.float64)
  d = h.shape[-1]
  return (float(scale) * _eps(model) * np.sqrt(d)
          * np.linalg.norm(h, axis=-1)).astype(np.float32)


def _all_states(model, cache, x_nd, final_norm: bool):
  """One step of every row of `x_nd` [N, D] (input embeddings) after the
  prefix in `cache`: (states `[L+1, N, D]`, new cache)."""
  out = model.forward(inputs_embeds=x_nd[:, None, :], cache=cache,
                      output_hidden_states=True)
  hs = [h[:, 0] for h in out.hidden_states]
  if not (isinstance(final_norm, bool) and not final_norm):
    # A Python bool or a traced one (the searches: no recompilation).
    hs[-1] = jnp.where(final_norm, model.final_norm(hs[-1]), hs[-1])
  return jnp.stack(hs).astype(jnp.float32), out.cache


@functools.partial(jax.jit, static_argnums=(0, 4))
def _step_jit(graphdef, state, cache, ids_n, final_norm):
  model = nnx.merge(graphdef, state)
  return _all_states(model, cache, model.embed(ids_n[:, None])[:, 0],
                     final_norm)


def layer_states(model, ids, *, final_norm: bool = False) -> np.ndarray:
  """The states SipIt inverts: `[L+1, B, T, D]` (or `[L+1, T, D]` for `[T]`).

  Position t is computed from the prefix through a KV cache, one token at
  a time: the verification code path (spec Q.2: targets "iteratively").
  """
  ids = np.asarray(ids, np.int32)
  single = ids.ndim == 1
  ids_bt = ids[None] if single else ids
  b, t = ids_bt.shape
  graphdef, state = _split(model)
  cache = model.init_cache(b, t)
  out = []
  for i in range(t):
    hs, cache = _step_jit(graphdef, state, cache, jnp.asarray(ids_bt[:, i]),
                          bool(final_norm))
    out.append(np.asarray(hs))
  res = np.stack(out, axis=2)  # [L+1, B, T, D]
  return res[:, 0] if single else res


def full_forward_states(model, ids_bt, *, final_norm: bool = False
                        ) -> np.ndarray:
  """`[L+1, B, T, D]` from one plain `forward(..., output_hidden_states=True)`
  (the usual way states are observed; differs from `layer_states` by float
  rounding only)."""
  out = model.forward(jnp.asarray(ids_bt, jnp.int32),
                      output_hidden_states=True)
  hs = list(out.hidden_states)
  if final_norm:
    hs[-1] = model.final_norm(hs[-1])
  return np.stack([np.asarray(h, np.float32) for h in hs])


@functools.partial(jax.jit, static_argnums=(0, 4))
def _next_jit(graphdef, state, prefix_cache, cand_n, final_norm):
  model = nnx.merge(graphdef, state)
  cache = prefix_cache.tile(cand_n.shape[0])
  hs, _ = _all_states(model, cache, model.embed(cand_n[:, None])[:, 0],
                      final_norm)
  return hs


def prefix_cache(model, prefix_ids, capacity: int):
  """A batch-1 KV cache holding `prefix_ids` (capacity >= len + 1)."""
  graphdef, state = _split(model)
  cache = model.init_cache(1, int(capacity))
  for tok in np.asarray(prefix_ids, np.int32).reshape(-1):
    _, cache = _step_jit(graphdef, state, cache, jnp.asarray([tok]), False)
  return cache


def next_token_states(model, prefix_ids, candidates=None, *,
                      final_norm: bool = False, batch: int = 512
                      ) -> np.ndarray:
  """States `[L+1, C, D]` of position len(prefix) for each candidate token
  (default: all of V), batched over a tiled prefix cache: the one-step map
  F(v; prefix, t) of spec Q.2 for many v at once."""
  v = int(model.cfg.vocab_size)
  cands = np.arange(v) if candidates is None else np.asarray(candidates)
  prefix = np.asarray(prefix_ids, np.int32).reshape(-1)
  # Capacity bucketed to a power of two: one compilation per bucket.
  capacity = max(16, 1 << len(prefix).bit_length())
  cache = prefix_cache(model, prefix, capacity)
  graphdef, state = _split(model)
  out = []
  for s in range(0, len(cands), batch):
    chunk = cands[s:s + batch].astype(np.int32)
    n = len(chunk)
    padded = np.pad(chunk, (0, batch - n)) if len(cands) > batch else chunk
    hs = _next_jit(graphdef, state, cache, jnp.asarray(padded),
                   bool(final_norm))
    out.append(np.asarray(hs)[:, :n])
  return np.concatenate(out, axis=1)


# -- acceptance ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Spec:
  """Static (hashable) shape settings of one compiled search. The layer,
  the final-norm switch and the numeric settings (`_Knobs`) are traced
  arguments, so one compilation serves them all."""
  loss: str
  k: int
  verify_batch: int


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class _Knobs:
  """Traced numeric settings of a search."""
  layer: jax.Array
  final_norm: jax.Array
  l2_tol: jax.Array  # <= 0: use the allclose test
  atol: jax.Array
  rtol: jax.Array
  step_size: jax.Array
  clip_norm: jax.Array


def _accept(h_nd, target_d, knobs: _Knobs):
  """Acceptance per row: L2 ball (Def. D.2) or elementwise allclose."""
  diff = h_nd - target_d[None]
  in_ball = jnp.sqrt(jnp.sum(diff * diff, axis=-1)) <= knobs.l2_tol
  close = jnp.all(jnp.abs(diff) <= knobs.atol + knobs.rtol *
                  jnp.abs(target_d)[None], axis=-1)
  return jnp.where(knobs.l2_tol > 0, in_ball, close)


def _dist(h_nd, target_d):
  diff = h_nd - target_d[None]
  return jnp.sqrt(jnp.sum(diff * diff, axis=-1))


def _update_best(c, cand, dist, ok, valid, found, first):
  """Best (closest) candidate so far and the closest *rejected* one."""
  bi = jnp.argmin(dist)
  better = dist[bi] < c["best_dist"]
  # Proposed = valid and not after the accepted one in this batch.
  proposed = valid & ((jnp.arange(cand.shape[0]) < first) | ~found)
  rej = jnp.min(jnp.where(proposed & ~ok, dist, jnp.inf))
  return dict(best_tok=jnp.where(better, cand[bi], c["best_tok"]),
              best_dist=jnp.where(better, dist[bi], c["best_dist"]),
              rejected=jnp.minimum(c["rejected"], rej))


def _result(c):
  tok = jnp.where(c["found"], c["tok"], c["best_tok"])
  return tok, c["n"], c["found"], c["best_dist"], c["rejected"]


# -- policies ----------------------------------------------------------------------
#
# Each search is a `lax.while_loop` over proposals at one position, run in
# chunks: `stop_n` bounds the proposals of one call and the carry comes back
# out, so `invert` can log progress and honour a time limit between calls
# (a chunk of all of V is one call; the result does not depend on chunking).


def _gradient_carry(emb_vd, init_tok, k):
  v = emb_vd.shape[0]
  e0 = emb_vd[init_tok]
  visited0 = jnp.zeros((v,), bool)
  cand0, valid0 = _nearest(emb_vd, e0, visited0, k)
  return dict(e=e0, cand=cand0, valid=valid0, visited=visited0,
              n=jnp.zeros((), jnp.int32), since=jnp.zeros((), jnp.int32),
              found=jnp.zeros((), bool), tok=jnp.zeros((), jnp.int32),
              best_tok=init_tok.astype(jnp.int32),
              best_dist=jnp.full((), jnp.inf, jnp.float32),
              rejected=jnp.full((), jnp.inf, jnp.float32),
              bad=jnp.zeros((), bool))


def _nearest(emb_vd, e_d, visited_v, k):
  d2 = jnp.sum((emb_vd - e_d[None]) ** 2, axis=-1)
  d2 = jnp.where(visited_v, jnp.inf, d2)
  neg, idx = jax.lax.top_k(-d2, k)
  return idx.astype(jnp.int32), jnp.isfinite(neg)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _gradient_init(graphdef, state, init_tok, k):
  model = nnx.merge(graphdef, state)
  return _gradient_carry(input_embeddings(model), init_tok, k)


@functools.partial(jax.jit, static_argnums=(0, 8))
def _search_gradient(graphdef, state, cache, target_d, carry, window, stop_n,
                     knobs: _Knobs, spec: _Spec):
  """Alg. 1 with the gradient policy (Alg. 3, App. E.1) at one position,
  from `carry` until a token verifies, V is exhausted or `stop_n`
  proposals are reached. Returns the carry."""
  model = nnx.merge(graphdef, state)
  emb_vd = input_embeddings(model)
  v = emb_vd.shape[0]
  k = spec.k
  tiled = cache.tile(1 + k)

  def loss_and_states(e_d, cand_k):
    x = jnp.concatenate([e_d[None], emb_vd[cand_k]], axis=0)
    hs, _ = _all_states(model, tiled, x, knobs.final_norm)
    h = hs[knobs.layer]
    diff = h[0] - target_d
    loss = (jnp.mean(diff * diff) if spec.loss == "mse"
            else 0.5 * jnp.sum(diff * diff))
    return loss, h[1:]

  grad_fn = jax.value_and_grad(loss_and_states, has_aux=True)

  def cond(c):
    return (~c["found"]) & (c["n"] < v) & (~c["bad"]) & (c["n"] < stop_n)

  def body(c):
    (loss, h_kd), g = grad_fn(c["e"], c["cand"])
    ok = _accept(h_kd, target_d, knobs) & c["valid"]
    dist = jnp.where(c["valid"], _dist(h_kd, target_d), jnp.inf)
    first = jnp.argmax(ok)
    found = jnp.any(ok)
    n_valid = jnp.sum(c["valid"].astype(jnp.int32))
    n = c["n"] + jnp.where(found, first + 1, n_valid)
    best = _update_best(c, c["cand"], dist, ok, c["valid"], found, first)
    visited = c["visited"].at[c["cand"]].set(
        c["visited"][c["cand"]] | c["valid"])
    gnorm = jnp.sqrt(jnp.sum(g * g))
    g = jnp.where(gnorm > knobs.clip_norm, g * (knobs.clip_norm / gnorm), g)
    e = c["e"] - knobs.step_size * g
    cand, valid = _nearest(emb_vd, e, visited, k)
    since = c["since"] + n_valid
    project = since >= window
    e = jnp.where(project, emb_vd[cand[0]], e)
    since = jnp.where(project, 0, since)
    bad = ~(jnp.isfinite(loss) & jnp.all(jnp.isfinite(g)))
    return dict(e=e, cand=cand, valid=valid, visited=visited, n=n,
                since=since, found=found, tok=c["cand"][first], bad=bad,
                **best)

  return jax.lax.while_loop(cond, body, carry)


@functools.partial(jax.jit, static_argnums=(0, 8))
def _search_random(graphdef, state, cache, target_d, perm_v, carry, stop_n,
                   knobs: _Knobs, spec: _Spec):
  """Alg. 1 with the random policy (Alg. 2, "BruteForce") at one position:
  the permutation is verified `verify_batch` tokens per call."""
  model = nnx.merge(graphdef, state)
  emb_vd = input_embeddings(model)
  v = emb_vd.shape[0]
  bsz = spec.verify_batch
  chunks = -(-v // bsz)
  perm = jnp.pad(perm_v, (0, chunks * bsz - v), constant_values=-1)
  tiled = cache.tile(bsz)

  def cond(c):
    return (~c["found"]) & (c["i"] < chunks) & (c["n"] < stop_n)

  def body(c):
    cand = jax.lax.dynamic_slice(perm, (c["i"] * bsz,), (bsz,))
    valid = cand >= 0
    hs, _ = _all_states(model, tiled, emb_vd[jnp.maximum(cand, 0)],
                        knobs.final_norm)
    h = hs[knobs.layer]
    ok = _accept(h, target_d, knobs) & valid
    dist = jnp.where(valid, _dist(h, target_d), jnp.inf)
    first = jnp.argmax(ok)
    found = jnp.any(ok)
    best = _update_best(c, cand, dist, ok, valid, found, first)
    return dict(i=c["i"] + 1, found=found,
                n=c["n"] + jnp.where(found, first + 1,
                                     jnp.sum(valid.astype(jnp.int32))),
                tok=cand[first], **best)

  return jax.lax.while_loop(cond, body, carry)


def _random_carry():
  return dict(i=jnp.zeros((), jnp.int32), found=jnp.zeros((), bool),
              n=jnp.zeros((), jnp.int32), tok=jnp.zeros((), jnp.int32),
              best_tok=jnp.zeros((), jnp.int32),
              best_dist=jnp.full((), jnp.inf, jnp.float32),
              rejected=jnp.full((), jnp.inf, jnp.float32))


class _Budget:
  """Chunking of one position's search: the whole of V in one call unless
  progress or a deadline asks for control back about every `every_s`
  seconds (chunk sizes adapt to the measured time per proposal)."""

  def __init__(self, vocab: int, deadline: float | None,
               on_chunk: Callable[[int], None] | None, every_s: float = 2.0):
    self.vocab, self.deadline, self.on_chunk = vocab, deadline, on_chunk
    self.every_s = every_s
    self.chunked = deadline is not None or on_chunk is not None
    self.per_prop = None  # seconds per proposal, measured

  def run(self, step, carry, finished):
    """Calls `carry = step(carry, stop_n)` until `finished(carry)`; returns
    (carry, timed_out)."""
    if not self.chunked:
      return step(carry, self.vocab), False
    n = 0
    while True:
      chunk = 8 if self.per_prop is None else int(
          max(8, self.every_s / max(self.per_prop, 1e-6)))
      if self.deadline is not None and self.per_prop is not None:
        left = self.deadline - time.perf_counter()
        chunk = int(max(1, min(chunk, left / max(self.per_prop, 1e-6))))
      t0 = time.perf_counter()
      carry = step(carry, min(self.vocab, n + chunk))
      done = bool(finished(carry))
      n_new = int(carry["n"])
      if n_new > n:
        self.per_prop = (time.perf_counter() - t0) / (n_new - n)
      n = n_new
      if done:
        return carry, False
      if self.deadline is not None and time.perf_counter() >= self.deadline:
        return carry, True
      if self.on_chunk is not None:
        self.on_chunk(n)


def _finished_gradient(vocab):
  return lambda c: c["found"] | c["bad"] | (c["n"] >= vocab)


@POLICIES.register("gradient")
def gradient_policy(graphdef, state, cache, target_d, *, t: int,
                    rng: np.random.Generator, cfg: SipItConfig,
                    knobs: _Knobs, spec: _Spec, vocab_size: int,
                    budget: _Budget | None = None):
  """Gradient-guided proposals (Alg. 3) for position t. Returns (token,
  proposals, verified, distance, nearest rejected distance, timed_out)."""
  window = int(cfg.project_every)
  if t == 0 and cfg.first_token_scale:
    window *= 1 + vocab_size // 25000
  init = jnp.asarray(rng.integers(vocab_size), jnp.int32)
  budget = budget or _Budget(vocab_size, None, None)
  target = jnp.asarray(target_d)
  win = jnp.asarray(window, jnp.int32)
  carry = _gradient_init(graphdef, state, init, spec.k)
  step = lambda c, stop: _search_gradient(  # pylint: disable=g-long-lambda
      graphdef, state, cache, target, c, win,
      jnp.asarray(stop, jnp.int32), knobs, spec)
  carry, timed_out = budget.run(step, carry, _finished_gradient(vocab_size))
  return (*_result(carry), timed_out)


@POLICIES.register("random")
def random_policy(graphdef, state, cache, target_d, *, t: int,
                  rng: np.random.Generator, cfg: SipItConfig,
                  knobs: _Knobs, spec: _Spec, vocab_size: int,
                  budget: _Budget | None = None):
  """Uniform random order without replacement (Alg. 2) for position t."""
  del t, cfg
  perm = jnp.asarray(rng.permutation(vocab_size), jnp.int32)
  budget = budget or _Budget(vocab_size, None, None)
  target = jnp.asarray(target_d)
  step = lambda c, stop: _search_random(  # pylint: disable=g-long-lambda
      graphdef, state, cache, target, perm, c, jnp.asarray(stop, jnp.int32),
      knobs, spec)
  carry, timed_out = budget.run(
      step, _random_carry(), lambda c: c["found"] | (c["n"] >= vocab_size))
  return (*_result(carry), timed_out)


# -- SipIt -----------------------------------------------------------------------


def invert(model, hidden, *, layer: int, policy: str = "gradient",
           tol: float | None = None, config: SipItConfig | None = None,
           time_limit_s: float | None = None, log_every: int = 0,
           progress: Callable[[dict[str, Any]], None] | None = None,
           prefix_ids=None) -> Inversion:
  """Recovers the prompt whose layer-`layer` states are `hidden` (Alg. 1).

  Args:
    model: a `jaxlab.models.decoder.Decoder` (causal).
    hidden: float `[T, D]` or `[B, T, D]`: the states at `layer`, i.e.
      `Decoder.forward(ids, output_hidden_states=True).hidden_states[layer]`
      (0 = embedding output) or `layer_states(model, ids)[layer]`.
    layer: the index into `hidden_states` the states come from.
    policy: "gradient" (SipIt, Alg. 3) or "random" (BruteForce, Alg. 2).
    tol: None: `config.acceptance` ("l2_relative", the default: the L2 ball
      of radius `acceptance_radius(model, h_t)` per position; "allclose":
      the official code's elementwise test); a float: a fixed L2 radius,
      ||F(v) - h|| <= tol (Def. D.2).
    config: `SipItConfig` (acceptance, step size, window K, clipping,
      batching, seed).
    time_limit_s: stop after this many seconds (whole call) and return what
      was recovered: `Inversion.timed_out` is True, `done` marks the
      finished positions, the others hold id -1 (None: no limit).
    log_every: print a progress line every this many finished positions
      (and about every 2 s inside a long search); 0: quiet.
    progress: called with a dict (row, position, token, proposals,
      verified, distance, radius, seconds) after each finished position.
    prefix_ids: a known prefix (spec Q.2: "an optional BOS token can be
      prepended and is treated as known"): int `[P]` (shared by every
      prompt) or `[B, P]`, the tokens at positions 0..P-1 of `hidden`
      (which still holds all T positions' states, P < T). They are not
      searched: they go straight into the verified KV cache, their ids
      are returned as given (proposals 0, `Inversion.known` True, verified
      True, distance 0), and the search starts at position P. With a
      BOS / chat-start token the attention-sink position (huge state norm,
      wrong tokens only ~1e-3 * ||h|| away) is the known one.

  Returns:
    `Inversion` with ids `[T]` (`[B, T]`) and per-position proposals,
    verified flags, distances, radii, nearest rejected distances and
    per-prompt wall time; it also unpacks as `ids, inversion = invert(...)`.
  """
  cfg = config or SipItConfig()
  layer = check_layer(model, layer)
  h = _check_hidden(model, hidden)
  policy_fn = POLICIES.get(policy)
  if tol is not None and not float(tol) > 0:
    raise ValueError(f"tol must be a positive L2 radius or None, got {tol!r}")
  if cfg.acceptance not in ("l2_relative", "allclose"):
    raise ValueError(f"SipItConfig.acceptance={cfg.acceptance!r}; valid: "
                     "l2_relative, allclose")
  if cfg.loss not in ("mse", "half_sse"):
    raise ValueError(f"SipItConfig.loss={cfg.loss!r}; valid: mse, half_sse")
  if time_limit_s is not None and not float(time_limit_s) > 0:
    raise ValueError(f"time_limit_s must be > 0 seconds or None, got "
                     f"{time_limit_s!r}")
  if not getattr(model.cfg, "causal", True):
    raise ValueError("SipIt needs a causal decoder (model.cfg.causal=False)")
  single = h.ndim == 2
  h_btd = h[None] if single else h
  b, t, d = h_btd.shape
  vocab = int(model.cfg.vocab_size)
  prefix = _check_prefix(prefix_ids, b, t, vocab)
  n_known = prefix.shape[1]
  if tol is not None:
    radius = np.full((b, t), float(tol), np.float32)
  elif cfg.acceptance == "l2_relative":
    radius = acceptance_radius(model, h_btd, scale=cfg.radius_scale)
    rel = float(cfg.radius_scale) * _eps(model) * np.sqrt(d)
    if rel >= 0.1:
      warnings.warn(
          f"the default acceptance radius radius_scale * eps * sqrt(d) = "
          f"{rel:.3g} * ||h_t|| is not small for compute dtype "
          f"{model.cfg.dtype!r}: wrong tokens may verify; pass tol= (an L2 "
          "radius) or use a float32 model", stacklevel=2)
  else:
    radius = np.full((b, t), np.nan, np.float32)
  k = max(1, min(int(cfg.candidates_per_step), vocab))
  spec = _Spec(loss=cfg.loss, k=k,
               verify_batch=max(1, min(int(cfg.verify_batch), vocab)))
  f32 = lambda x: jnp.asarray(x, jnp.float32)  # pylint: disable=g-long-lambda
  knobs = _Knobs(layer=jnp.asarray(layer, jnp.int32),
                 final_norm=jnp.asarray(bool(cfg.final_norm)),
                 l2_tol=f32(-1.0), atol=f32(cfg.atol), rtol=f32(cfg.rtol),
                 step_size=f32(cfg.step_size), clip_norm=f32(cfg.clip_norm))
  graphdef, state = _split(model)
  ids = np.full((b, t), -1, np.int32)
  props = np.zeros((b, t), np.int32)
  ok = np.zeros((b, t), bool)
  done = np.zeros((b, t), bool)
  dist = np.full((b, t), np.inf, np.float32)
  rejected = np.full((b, t), np.inf, np.float32)
  secs = np.zeros((b,), np.float64)
  start = time.perf_counter()
  deadline = None if time_limit_s is None else start + float(time_limit_s)
  timed_out = False
  last_log = [start]

  def say(msg):
    print(f"[sipit {time.perf_counter() - start:7.1f}s] {msg}", flush=True)

  def on_chunk(row, pos):
    def cb(n):
      if log_every and time.perf_counter() - last_log[0] >= 2.0:
        last_log[0] = time.perf_counter()
        say(f"prompt {row} position {pos}/{t}: {n} proposals so far")
    return cb

  known = np.zeros((b, t), bool)
  known[:, :n_known] = True
  for row in range(b):
    rng = np.random.default_rng([int(cfg.seed), row])
    t0 = time.perf_counter()
    cache = model.init_cache(1, t)
    for pos in range(n_known):  # given, not searched (spec Q.2: known BOS)
      tok = int(prefix[row, pos])
      ids[row, pos], done[row, pos], ok[row, pos] = tok, True, True
      dist[row, pos] = 0.0
      _, cache = _step_jit(graphdef, state, cache, jnp.asarray([tok]),
                           False)
    for pos in range(n_known, t):
      if not np.isnan(radius[row, pos]):
        knobs = dataclasses.replace(knobs, l2_tol=f32(radius[row, pos]))
      budget = _Budget(vocab, deadline,
                       on_chunk(row, pos) if log_every else None)
      tok, n, found, dd, rej, out_of_time = policy_fn(
          graphdef, state, cache, h_btd[row, pos], t=pos, rng=rng, cfg=cfg,
          knobs=knobs, spec=spec, vocab_size=vocab, budget=budget)
      props[row, pos] = int(n)
      rejected[row, pos] = float(rej)
      if out_of_time:
        timed_out = True
        break
      tok = int(tok)
      ids[row, pos], done[row, pos] = tok, True
      ok[row, pos], dist[row, pos] = bool(found), float(dd)
      info = {"row": row, "position": pos, "token": tok, "proposals": int(n),
              "verified": bool(found), "distance": float(dd),
              "radius": float(radius[row, pos]),
              "seconds": time.perf_counter() - start}
      if progress is not None:
        progress(info)
      if log_every and ((pos + 1) % int(log_every) == 0 or pos == t - 1):
        last_log[0] = time.perf_counter()
        say(f"prompt {row} position {pos + 1}/{t}: token {tok} after "
            f"{int(n)} proposals ({'verified' if found else 'NOT verified'},"
            f" distance {float(dd):.3g}, radius {float(radius[row, pos]):.3g})")
      _, cache = _step_jit(graphdef, state, cache, jnp.asarray([tok]),
                           False)
    secs[row] = time.perf_counter() - t0
    if timed_out:
      break
  if timed_out:
    msg = (f"time limit {time_limit_s} s reached: {int(done.sum())} of "
           f"{b * t} positions recovered (Inversion.done; id -1 elsewhere)")
    if log_every:
      say(msg)
    warnings.warn(msg, stacklevel=2)
  pick = (lambda a: a[0]) if single else (lambda a: a)  # pylint: disable=g-long-lambda
  return Inversion(ids=pick(ids), proposals=pick(props), verified=pick(ok),
                   distance=pick(dist),
                   seconds=float(secs[0]) if single else secs, policy=policy,
                   layer=layer, radius=pick(radius),
                   nearest_rejected=pick(rejected), done=pick(done),
                   timed_out=timed_out, known=pick(known))


# -- HardPrompts baseline ------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5, 6))
def _pez_jit(graphdef, state, target_td, steps, layer, lr, final_norm,
             init_tok):
  model = nnx.merge(graphdef, state)
  emb_vd = input_embeddings(model)

  def project(e_td):
    d2 = (jnp.sum(e_td ** 2, -1)[:, None] - 2 * e_td @ emb_vd.T
          + jnp.sum(emb_vd ** 2, -1)[None])
    return jnp.argmin(d2, axis=-1).astype(jnp.int32)

  def loss_fn(x_td):
    out = model.forward(inputs_embeds=x_td[None], output_hidden_states=True)
    hs = list(out.hidden_states)
    if final_norm:
      hs[-1] = model.final_norm(hs[-1])
    diff = hs[layer][0].astype(jnp.float32) - target_td
    return jnp.mean(diff * diff)

  opt = optax.adam(lr)
  e0 = emb_vd[init_tok]
  carry0 = (e0, opt.init(e0), project(e0), jnp.inf)

  def step(c, _):
    e, st, best_ids, best_loss = c
    ids = project(e)
    loss, g = jax.value_and_grad(loss_fn)(emb_vd[ids])
    better = loss < best_loss
    upd, st = opt.update(g, st, e)
    return (optax.apply_updates(e, upd), st,
            jnp.where(better, ids, best_ids),
            jnp.where(better, loss, best_loss)), None

  (e, _, best_ids, best_loss), _ = jax.lax.scan(step, carry0, None,
                                                length=steps)
  return best_ids, best_loss


def hard_prompts(model, hidden, *, layer: int, steps: int | None = None,
                 lr: float = 0.1, final_norm: bool = False, seed: int = 0
                 ) -> Inversion:
  """HARDPROMPTS baseline (Wen et al. 2023 PEZ, adapted; spec Q.2).

  All T embeddings are optimised jointly (Adam, `lr`) against the layer
  states with the MSE loss; each step's forward runs on the nearest-token
  projection and its gradient updates the continuous embeddings; the
  projection with the lowest loss is returned. `steps` defaults to the
  spec's budget T*|V|/4. `proposals` holds steps/T per position (the budget
  spent), `verified` whether each position's state lies within the default
  acceptance radius (`acceptance_radius`) of the target.
  """
  layer = check_layer(model, layer)
  h = _check_hidden(model, hidden)
  single = h.ndim == 2
  h_btd = h[None] if single else h
  b, t, _ = h_btd.shape
  vocab = int(model.cfg.vocab_size)
  steps = int(steps or max(1, t * vocab // 4))
  fn = bool(final_norm) and layer == num_layers(model)
  graphdef, state = _split(model)
  ids = np.zeros((b, t), np.int32)
  secs = np.zeros((b,))
  for row in range(b):
    rng = np.random.default_rng([int(seed), row])
    init = jnp.asarray(rng.integers(vocab, size=t), jnp.int32)
    t0 = time.perf_counter()
    best, _ = _pez_jit(graphdef, state, jnp.asarray(h_btd[row]), steps,
                       layer, float(lr), fn, init)
    ids[row] = np.asarray(best)
    secs[row] = time.perf_counter() - t0
  # Per-position check of the result through the verification path.
  states = layer_states(model, ids, final_norm=fn)[layer]
  radius = acceptance_radius(model, h_btd)
  dist = np.sqrt(np.sum((states - h_btd) ** 2, axis=-1))
  ok = dist <= radius
  props = np.full((b, t), steps // max(t, 1), np.int32)
  if single:
    return Inversion(ids=ids[0], proposals=props[0], verified=ok[0],
                     distance=dist[0], seconds=float(secs[0]),
                     policy="hard_prompts", layer=layer, radius=radius[0],
                     done=np.ones((t,), bool))
  return Inversion(ids=ids, proposals=props, verified=ok, distance=dist,
                   seconds=secs, policy="hard_prompts", layer=layer,
                   radius=radius, done=np.ones((b, t), bool))


# -- configuration ------------------------------------------------------------


def config_from(c, seed: int) -> SipItConfig:
  """`SipItConfig` from a config section with the `SipItConfig` field names
  (missing ones keep their defaults)."""
  kw = {f.name: type(getattr(SipItConfig, f.name))(c[f.name])
        for f in dataclasses.fields(SipItConfig)
        if f.name != "seed" and f.name in c}
  return SipItConfig(seed=int(seed), **kw)
