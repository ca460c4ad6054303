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
  * Acceptance (Remark 21): `tol=None` is the official code's elementwise
    `allclose(pred, target, rtol=1e-5, atol=1e-5)` (fp32); a float `tol` is
    the L2 ball ||h_t - F(v)|| <= tol of Def. D.2.
  * `hard_prompts`: the HARDPROMPTS baseline (Wen et al. 2023, PEZ,
    adapted as in spec Q.2 "Baselines"): all T embeddings optimised jointly
    with the same loss (gradient at the projected tokens applied to the
    continuous ones, Adam), steps = T*|V|/4 by default.

Our decoder returns the residual stream before the final norm at every
layer (`DecoderOutput.hidden_states`), i.e. the official code's
"final norm = Identity" reading of the last layer; `final_norm=True`
inverts the normed last layer instead (HF's `hidden_states[-1]`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.registry import Registry

POLICIES: Registry = Registry("SipIt policy")


@dataclasses.dataclass(frozen=True)
class SipItConfig:
  """Settings of `invert` (defaults: the official code, spec Q.2).

  Attributes:
    atol, rtol: the elementwise acceptance test used when `tol` is None:
      |F(v) - h| <= atol + rtol * |h| in every coordinate (torch.allclose).
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
  """
  ids: np.ndarray
  proposals: np.ndarray
  verified: np.ndarray
  distance: np.ndarray
  seconds: Any
  policy: str
  layer: int

  def __iter__(self):  # `ids, stats = invert(...)` unpacking
    return iter((self.ids, self))

  def stats(self) -> dict[str, float]:
    """Summary: median/mean proposals per token, verified fraction, time."""
    p = np.asarray(self.proposals, np.float64)
    return {"median_proposals": float(np.median(p)),
            "mean_proposals": float(np.mean(p)),
            "max_proposals": float(np.max(p)),
            "verified_fraction": float(np.mean(self.verified)),
            "seconds": float(np.sum(self.seconds))}


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


# -- policies ----------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(0, 7))
def _search_gradient(graphdef, state, cache, target_d, init_tok, window,
                     knobs: _Knobs, spec: _Spec):
  """Alg. 1 with the gradient policy (Alg. 3, App. E.1) at one position.

  Returns (token, proposals, verified, distance)."""
  model = nnx.merge(graphdef, state)
  emb_vd = model.embed_vd[...].astype(jnp.float32)
  v, d = emb_vd.shape
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

  def nearest(e_d, visited_v):
    d2 = jnp.sum((emb_vd - e_d[None]) ** 2, axis=-1)
    d2 = jnp.where(visited_v, jnp.inf, d2)
    neg, idx = jax.lax.top_k(-d2, k)
    return idx.astype(jnp.int32), jnp.isfinite(neg)

  e0 = emb_vd[init_tok]
  visited0 = jnp.zeros((v,), bool)
  cand0, valid0 = nearest(e0, visited0)
  carry0 = dict(e=e0, cand=cand0, valid=valid0, visited=visited0,
                n=jnp.zeros((), jnp.int32), since=jnp.zeros((), jnp.int32),
                found=jnp.zeros((), bool), tok=jnp.zeros((), jnp.int32),
                best_tok=init_tok.astype(jnp.int32),
                best_dist=jnp.full((), jnp.inf, jnp.float32),
                bad=jnp.zeros((), bool))

  def cond(c):
    return (~c["found"]) & (c["n"] < v) & (~c["bad"])

  def body(c):
    (loss, h_kd), g = grad_fn(c["e"], c["cand"])
    ok = _accept(h_kd, target_d, knobs) & c["valid"]
    dist = jnp.where(c["valid"], _dist(h_kd, target_d), jnp.inf)
    first = jnp.argmax(ok)
    found = jnp.any(ok)
    n_valid = jnp.sum(c["valid"].astype(jnp.int32))
    n = c["n"] + jnp.where(found, first + 1, n_valid)
    bi = jnp.argmin(dist)
    better = dist[bi] < c["best_dist"]
    visited = c["visited"].at[c["cand"]].set(
        c["visited"][c["cand"]] | c["valid"])
    gnorm = jnp.sqrt(jnp.sum(g * g))
    g = jnp.where(gnorm > knobs.clip_norm, g * (knobs.clip_norm / gnorm), g)
    e = c["e"] - knobs.step_size * g
    cand, valid = nearest(e, visited)
    since = c["since"] + n_valid
    project = since >= window
    e = jnp.where(project, emb_vd[cand[0]], e)
    since = jnp.where(project, 0, since)
    bad = ~(jnp.isfinite(loss) & jnp.all(jnp.isfinite(g)))
    return dict(e=e, cand=cand, valid=valid, visited=visited, n=n,
                since=since, found=found, tok=c["cand"][first],
                best_tok=jnp.where(better, c["cand"][bi], c["best_tok"]),
                best_dist=jnp.where(better, dist[bi], c["best_dist"]),
                bad=bad)

  c = jax.lax.while_loop(cond, body, carry0)
  tok = jnp.where(c["found"], c["tok"], c["best_tok"])
  return tok, c["n"], c["found"], c["best_dist"]


@functools.partial(jax.jit, static_argnums=(0, 6))
def _search_random(graphdef, state, cache, target_d, perm_v, knobs: _Knobs,
                   spec: _Spec):
  """Alg. 1 with the random policy (Alg. 2, "BruteForce") at one position:
  the permutation is verified `verify_batch` tokens per call."""
  model = nnx.merge(graphdef, state)
  emb_vd = model.embed_vd[...].astype(jnp.float32)
  v = emb_vd.shape[0]
  bsz = spec.verify_batch
  chunks = -(-v // bsz)
  perm = jnp.pad(perm_v, (0, chunks * bsz - v), constant_values=-1)
  tiled = cache.tile(bsz)

  def cond(c):
    return (~c["found"]) & (c["i"] < chunks)

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
    bi = jnp.argmin(dist)
    better = dist[bi] < c["best_dist"]
    return dict(i=c["i"] + 1, found=found,
                n=c["n"] + jnp.where(found, first + 1,
                                     jnp.sum(valid.astype(jnp.int32))),
                tok=cand[first],
                best_tok=jnp.where(better, cand[bi], c["best_tok"]),
                best_dist=jnp.where(better, dist[bi], c["best_dist"]))

  c0 = dict(i=jnp.zeros((), jnp.int32), found=jnp.zeros((), bool),
            n=jnp.zeros((), jnp.int32), tok=jnp.zeros((), jnp.int32),
            best_tok=jnp.zeros((), jnp.int32),
            best_dist=jnp.full((), jnp.inf, jnp.float32))
  c = jax.lax.while_loop(cond, body, c0)
  tok = jnp.where(c["found"], c["tok"], c["best_tok"])
  return tok, c["n"], c["found"], c["best_dist"]


@POLICIES.register("gradient")
def gradient_policy(graphdef, state, cache, target_d, *, t: int,
                    rng: np.random.Generator, cfg: SipItConfig,
                    knobs: _Knobs, spec: _Spec, vocab_size: int):
  """Gradient-guided proposals (Alg. 3) for position t."""
  window = int(cfg.project_every)
  if t == 0 and cfg.first_token_scale:
    window *= 1 + vocab_size // 25000
  init = jnp.asarray(rng.integers(vocab_size), jnp.int32)
  return _search_gradient(graphdef, state, cache, jnp.asarray(target_d),
                          init, jnp.asarray(window, jnp.int32), knobs, spec)


@POLICIES.register("random")
def random_policy(graphdef, state, cache, target_d, *, t: int,
                  rng: np.random.Generator, cfg: SipItConfig,
                  knobs: _Knobs, spec: _Spec, vocab_size: int):
  """Uniform random order without replacement (Alg. 2) for position t."""
  del t, cfg
  perm = jnp.asarray(rng.permutation(vocab_size), jnp.int32)
  return _search_random(graphdef, state, cache, jnp.asarray(target_d), perm,
                        knobs, spec)


# -- SipIt -----------------------------------------------------------------------


def invert(model, hidden, *, layer: int, policy: str = "gradient",
           tol: float | None = None, config: SipItConfig | None = None
           ) -> Inversion:
  """Recovers the prompt whose layer-`layer` states are `hidden` (Alg. 1).

  Args:
    model: a `jaxlab.models.decoder.Decoder` (causal).
    hidden: float `[T, D]` or `[B, T, D]`: the states at `layer`, i.e.
      `Decoder.forward(ids, output_hidden_states=True).hidden_states[layer]`
      (0 = embedding output) or `layer_states(model, ids)[layer]`.
    layer: the index into `hidden_states` the states come from.
    policy: "gradient" (SipIt, Alg. 3) or "random" (BruteForce, Alg. 2).
    tol: None: elementwise allclose(atol, rtol) of `config` (the official
      code, 1e-5 / 1e-5); a float: the L2 acceptance ball ||F(v) - h|| <= tol.
    config: `SipItConfig` (step size, window K, clipping, batching, seed).

  Returns:
    `Inversion` with ids `[T]` (`[B, T]`) and per-position proposals,
    verified flags, distances and per-prompt wall time; it also unpacks as
    `ids, inversion = invert(...)`.
  """
  cfg = config or SipItConfig()
  layer = check_layer(model, layer)
  h = _check_hidden(model, hidden)
  policy_fn = POLICIES.get(policy)
  if tol is not None and not float(tol) > 0:
    raise ValueError(f"tol must be a positive L2 radius or None, got {tol!r}")
  if cfg.loss not in ("mse", "half_sse"):
    raise ValueError(f"SipItConfig.loss={cfg.loss!r}; valid: mse, half_sse")
  if not getattr(model.cfg, "causal", True):
    raise ValueError("SipIt needs a causal decoder (model.cfg.causal=False)")
  single = h.ndim == 2
  h_btd = h[None] if single else h
  b, t, _ = h_btd.shape
  vocab = int(model.cfg.vocab_size)
  k = max(1, min(int(cfg.candidates_per_step), vocab))
  spec = _Spec(loss=cfg.loss, k=k,
               verify_batch=max(1, min(int(cfg.verify_batch), vocab)))
  f32 = lambda x: jnp.asarray(x, jnp.float32)  # pylint: disable=g-long-lambda
  knobs = _Knobs(layer=jnp.asarray(layer, jnp.int32),
                 final_norm=jnp.asarray(bool(cfg.final_norm)),
                 l2_tol=f32(-1.0 if tol is None else tol),
                 atol=f32(cfg.atol), rtol=f32(cfg.rtol),
                 step_size=f32(cfg.step_size), clip_norm=f32(cfg.clip_norm))
  graphdef, state = _split(model)
  ids = np.zeros((b, t), np.int32)
  props = np.zeros((b, t), np.int32)
  ok = np.zeros((b, t), bool)
  dist = np.zeros((b, t), np.float32)
  secs = np.zeros((b,), np.float64)
  for row in range(b):
    rng = np.random.default_rng([int(cfg.seed), row])
    t0 = time.perf_counter()
    cache = model.init_cache(1, t)
    for pos in range(t):
      tok, n, found, dd = policy_fn(
          graphdef, state, cache, h_btd[row, pos], t=pos, rng=rng, cfg=cfg,
          knobs=knobs, spec=spec, vocab_size=vocab)
      tok = int(tok)
      ids[row, pos], props[row, pos] = tok, int(n)
      ok[row, pos], dist[row, pos] = bool(found), float(dd)
      _, cache = _step_jit(graphdef, state, cache, jnp.asarray([tok]),
                           False)
    secs[row] = time.perf_counter() - t0
  if single:
    return Inversion(ids=ids[0], proposals=props[0], verified=ok[0],
                     distance=dist[0], seconds=float(secs[0]), policy=policy,
                     layer=layer)
  return Inversion(ids=ids, proposals=props, verified=ok, distance=dist,
                   seconds=secs, policy=policy, layer=layer)


# -- HardPrompts baseline ------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5, 6))
def _pez_jit(graphdef, state, target_td, steps, layer, lr, final_norm,
             init_tok):
  model = nnx.merge(graphdef, state)
  emb_vd = model.embed_vd[...].astype(jnp.float32)

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
  spent), `verified` whether each position matches under allclose(1e-5).
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
  tol = SipItConfig()
  ok = np.all(np.abs(states - h_btd) <= tol.atol + tol.rtol * np.abs(h_btd),
              axis=-1)
  dist = np.sqrt(np.sum((states - h_btd) ** 2, axis=-1))
  props = np.full((b, t), steps // max(t, 1), np.int32)
  if single:
    return Inversion(ids=ids[0], proposals=props[0], verified=ok[0],
                     distance=dist[0], seconds=float(secs[0]),
                     policy="hard_prompts", layer=layer)
  return Inversion(ids=ids, proposals=props, verified=ok, distance=dist,
                   seconds=secs, policy="hard_prompts", layer=layer)
