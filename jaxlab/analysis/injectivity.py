"""Injectivity probes: collision tests of last-token states (paper Q, §4.1).

Thm 2.2 (spec Q.1): for parameters drawn from any density (and after
gradient training, Thm 2.3), distinct prompts s != s' give distinct
last-token states r(s) != r(s') at every layer almost surely. The collision
test (spec Q.3) takes the last-token state of each of N prompts per layer
and reports the minimum pairwise L2 distance against the threshold 1e-6;
the exhaustive test appends every vocabulary token to the prompts whose
states are closest and repeats the pairwise test on the |V| * k
continuations.

    states = last_token_states(model, prompts)          # [L+1, N, D]
    per_layer = [pair_stats(s) for s in states]          # never all pairs
    exh = exhaustive_continuation_test(model, prompts, states[-1])

`pair_stats` is chunked: one block of rows against the rest, scanned over
column blocks inside one `jax.jit`, so memory is O(chunk^2 * D) whatever N
is; distances are explicit differences (not |a|^2 + |b|^2 - 2ab, whose fp32
cancellation error would hide distances near the 1e-6 threshold).

Negative controls (spec Q.1 "Failure cases", Q.6): `tie_embedding_rows`
(two tokens share an embedding row: prompts differing only in them collide
exactly at every layer) and `quantize_states` (b-bit uniform quantisation of
the states: distinct states map to the same code). Layer 0 of a RoPE
decoder is itself a control: the embedding output of the last token does not
see the rest of the prompt, so any two prompts ending in the same token
collide there.

Robustness and length (spec Q.2 "robust version", Q.3, Q.5): `noise_sweep`
adds noise of norm c * margin / 2 to a layer's states (margin: the distance
from the true state to the nearest other candidate's) and inverts them with
`nearest_candidate_inversion` (argmin over all of V on the recovered
prefix): every token is exact for c < 1. `length_curve` repeats the
collision test on windows of one length per point of the curve.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.analysis import sipit

COLLISION_THRESHOLD = 1e-6  # spec Q.3: L2 distance counted as a collision


@dataclasses.dataclass
class PairStats:
  """Pairwise-distance summary of N vectors (each unordered pair once).

  Attributes:
    min: the minimum distance over pairs i != j.
    pair: (i, j), i < j, attaining it.
    mean, max: over all pairs.
    num_pairs: N (N - 1) / 2.
    collisions: pairs with distance <= `threshold`.
    threshold: the collision threshold used.
    nearest: `[N]` each vector's nearest-neighbour distance.
  """
  min: float
  pair: tuple[int, int]
  mean: float
  max: float
  num_pairs: int
  collisions: int
  threshold: float
  nearest: np.ndarray

  def summary(self) -> dict[str, Any]:
    return {"min": self.min, "pair": list(self.pair), "mean": self.mean,
            "max": self.max, "num_pairs": self.num_pairs,
            "collisions": self.collisions, "threshold": self.threshold}


@functools.partial(jax.jit, static_argnums=(3,))
def _row_block(rows_cd, start, cols_bcd, n: int, threshold):
  """Stats of rows [c, D] (global offset `start`) against all columns."""
  c = rows_cd.shape[0]
  row_idx = start + jnp.arange(c)

  def body(acc, inp):
    j, cols = inp
    col_idx = j * cols.shape[0] + jnp.arange(cols.shape[0])
    diff = rows_cd[:, None, :] - cols[None, :, :]
    d = jnp.sqrt(jnp.sum(diff * diff, axis=-1))  # [c, c]
    valid = ((row_idx[:, None] != col_idx[None, :]) & (col_idx[None, :] < n)
             & (row_idx[:, None] < n))
    dm = jnp.where(valid, d, jnp.inf)
    bmin = jnp.min(dm, axis=1)
    barg = col_idx[jnp.argmin(dm, axis=1)]
    better = bmin < acc["min"]
    return dict(min=jnp.where(better, bmin, acc["min"]),
                arg=jnp.where(better, barg, acc["arg"]),
                sum=acc["sum"] + jnp.sum(jnp.where(valid, d, 0.0)),
                max=jnp.maximum(acc["max"], jnp.max(jnp.where(valid, d,
                                                              -jnp.inf))),
                count=acc["count"] + jnp.sum(valid & (d <= threshold))), None

  acc0 = dict(min=jnp.full((c,), jnp.inf, jnp.float32),
              arg=jnp.zeros((c,), jnp.int32),
              sum=jnp.zeros((), jnp.float32),
              max=jnp.full((), -jnp.inf, jnp.float32),
              count=jnp.zeros((), jnp.int32))
  acc, _ = jax.lax.scan(body, acc0, (jnp.arange(cols_bcd.shape[0]),
                                     cols_bcd))
  return acc


def pair_stats(x_nd, *, chunk: int = 256,
               threshold: float = COLLISION_THRESHOLD) -> PairStats:
  """Chunked pairwise L2 statistics of the rows of `x_nd` `[N, D]`.

  Never forms the N x N matrix: each `chunk` of rows is compared with every
  column block in one compiled scan (memory chunk^2 * D).
  """
  x = np.asarray(x_nd, np.float32)
  if x.ndim != 2 or x.shape[0] < 2:
    raise ValueError(f"pair_stats needs [N, D] with N >= 2, got {x.shape}")
  n, d = x.shape
  chunk = max(1, min(int(chunk), n))
  nb = -(-n // chunk)
  # Centring changes no distance and keeps the differences well scaled.
  xp = np.zeros((nb * chunk, d), np.float32)
  xp[:n] = x - x.mean(axis=0, keepdims=True)
  cols = jnp.asarray(xp.reshape(nb, chunk, d))
  mins, args = [], []
  total, mx, count = 0.0, -np.inf, 0
  for b in range(nb):
    acc = _row_block(jnp.asarray(xp[b * chunk:(b + 1) * chunk]),
                     jnp.asarray(b * chunk, jnp.int32), cols, n,
                     jnp.asarray(threshold, jnp.float32))
    mins.append(np.asarray(acc["min"]))
    args.append(np.asarray(acc["arg"]))
    total += float(acc["sum"])
    mx = max(mx, float(acc["max"]))
    count += int(acc["count"])
  nearest = np.concatenate(mins)[:n]
  arg = np.concatenate(args)[:n]
  i = int(np.argmin(nearest))
  j = int(arg[i])
  num_pairs = n * (n - 1) // 2
  # Exact distance of the reported pair (float64, uncentred inputs).
  dmin = float(np.linalg.norm(x[i].astype(np.float64) - x[j]))
  return PairStats(min=dmin, pair=(min(i, j), max(i, j)),
                   mean=total / (2 * num_pairs), max=mx,
                   num_pairs=num_pairs, collisions=count // 2,
                   threshold=float(threshold), nearest=nearest)


def min_pairwise_distance(x_nd, *, chunk: int = 256) -> float:
  """The minimum L2 distance between two distinct rows of `x_nd`."""
  return pair_stats(x_nd, chunk=chunk).min


# -- states ------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(0, 4))
def _last_jit(graphdef, state, ids_bt, last_b, final_norm):
  model = nnx.merge(graphdef, state)
  out = model.forward(ids_bt, output_hidden_states=True)
  hs = list(out.hidden_states)
  if final_norm:
    hs[-1] = model.final_norm(hs[-1])
  rows = jnp.arange(ids_bt.shape[0])
  return jnp.stack([h[rows, last_b] for h in hs]).astype(jnp.float32)


def last_token_states(model, prompts: Sequence[Sequence[int]], *,
                      batch_size: int = 256, final_norm: bool = False
                      ) -> np.ndarray:
  """r(s) at every layer: `[L+1, N, D]` last-token states of each prompt.

  Prompts of different lengths are right-padded to one length; a causal
  decoder's state at position len-1 does not see the padding after it, so
  one compilation serves every length (checked in the tests against
  per-prompt forwards).
  """
  if not prompts:
    raise ValueError("last_token_states needs at least one prompt")
  lens = np.array([len(p) for p in prompts])
  if lens.min() < 1:
    raise ValueError("every prompt needs at least one token")
  if not getattr(model.cfg, "causal", True):
    raise ValueError("last_token_states right-pads and needs a causal model")
  width = int(lens.max())
  ids = np.zeros((len(prompts), width), np.int32)
  for r, p in enumerate(prompts):
    ids[r, :len(p)] = p
  graphdef, state = nnx.split(model)
  out = []
  bsz = min(int(batch_size), len(prompts))
  for s in range(0, len(prompts), bsz):
    chunk, last = ids[s:s + bsz], lens[s:s + bsz] - 1
    n = len(chunk)
    if n < bsz:  # one shape for every call
      chunk = np.pad(chunk, ((0, bsz - n), (0, 0)))
      last = np.pad(last, (0, bsz - n))
    hs = _last_jit(graphdef, state, jnp.asarray(chunk),
                   jnp.asarray(last, jnp.int32), bool(final_norm))
    out.append(np.asarray(hs)[:, :n])
  return np.concatenate(out, axis=1)


def random_prompts(num: int, *, vocab_size: int, min_len: int = 8,
                   max_len: int = 32, seed: int = 0) -> list[list[int]]:
  """`num` distinct uniform random prompts with lengths in [min_len, max_len]
  (the spec's miniature stands in random prompts for its text mixture)."""
  rng = np.random.default_rng(seed)
  seen, out = set(), []
  while len(out) < num:
    p = tuple(int(v) for v in rng.integers(
        vocab_size, size=int(rng.integers(min_len, max_len + 1))))
    if p not in seen:
      seen.add(p)
      out.append(list(p))
  return out


def per_layer_stats(states_lnd, *, chunk: int = 256,
                    threshold: float = COLLISION_THRESHOLD
                    ) -> list[PairStats]:
  """`pair_stats` of every layer of `[L+1, N, D]` states."""
  return [pair_stats(s, chunk=chunk, threshold=threshold)
          for s in np.asarray(states_lnd)]


def closest_prompts(stats: PairStats, k: int) -> list[int]:
  """Indices of the k prompts with the smallest nearest-neighbour distance."""
  return [int(i) for i in np.argsort(stats.nearest, kind="stable")[:k]]


def exhaustive_continuation_test(model, prompts: Sequence[Sequence[int]],
                                 indices: Sequence[int], *,
                                 chunk: int = 256, final_norm: bool = False,
                                 threshold: float = COLLISION_THRESHOLD
                                 ) -> list[PairStats]:
  """Spec Q.3's exhaustive test: every token appended to each chosen prompt.

  For each prompt in `indices` (e.g. `closest_prompts`), the states of
  prompt + v for all v in V come from one batched step over its prefix
  cache (`sipit.next_token_states`); the k * |V| continuations are then
  compared pairwise per layer. Returns one `PairStats` per layer.
  """
  states = [sipit.next_token_states(model, prompts[i], final_norm=final_norm)
            for i in indices]
  allst = np.concatenate(states, axis=1)  # [L+1, k*V, D]
  return per_layer_stats(allst, chunk=chunk, threshold=threshold)


# -- negative controls ------------------------------------------------------------


def tie_embedding_rows(model, src: int, dst: int):
  """A copy of `model` whose embedding row `dst` equals row `src` (spec Q.1
  failure case: tied rows make the two tokens indistinguishable). The rows
  of the table are tied, so `model.embed` (any `embed_scale`) gives the two
  tokens the same input vector."""
  v = int(model.cfg.vocab_size)
  for name, tok in (("src", src), ("dst", dst)):
    if not 0 <= int(tok) < v:
      raise ValueError(f"{name}={tok} is outside the vocabulary [0, {v})")
  graphdef, state = nnx.split(model)
  clone = nnx.merge(graphdef, jax.tree.map(lambda a: a, state))
  emb = clone.embed_vd[...]
  clone.embed_vd[...] = emb.at[int(dst)].set(emb[int(src)])
  return clone


def quantize_states(h, bits: int = 4, *, per: str = "tensor") -> np.ndarray:
  """Uniform symmetric b-bit quantisation of states (spec Q.6 control ii).

  `per="tensor"` [inferred]: one absmax scale for the whole array (a plain
  b-bit uniform quantiser); `per="vector"`: one scale per state vector (the
  last axis), finer. Values are rounded to the 2^(b-1) - 1 levels on each
  side of 0 and mapped back.
  """
  if int(bits) < 2:
    raise ValueError(f"bits must be >= 2, got {bits}")
  if per not in ("vector", "tensor"):
    raise ValueError(f"per={per!r}; valid: vector, tensor")
  x = np.asarray(h, np.float32)
  levels = 2 ** (int(bits) - 1) - 1
  scale = (np.max(np.abs(x), axis=-1, keepdims=True) if per == "vector"
           else np.max(np.abs(x)))
  scale = np.where(scale == 0, 1.0, scale) / levels
  return (np.round(x / scale) * scale).astype(np.float32)


# -- the miniature's pieces (paper Q.6; composed by jaxlab/experiments/sipit.py)


def bigram_text(vocab: int, num_seqs: int, seq_len: int, follow: float,
                seed: int) -> dict[str, np.ndarray]:
  """LM arrays of a noisy bigram chain over all of V (each token has one
  preferred successor, taken with probability `follow`), so every
  embedding row is trained: the miniature's "text"."""
  rng = np.random.default_rng(10_000 + seed)
  nxt = rng.permutation(vocab)
  seqs = np.zeros((num_seqs, seq_len + 1), np.int32)
  seqs[:, 0] = rng.integers(vocab, size=num_seqs)
  for t in range(1, seq_len + 1):
    seqs[:, t] = np.where(rng.random(num_seqs) < follow,
                          nxt[seqs[:, t - 1]],
                          rng.integers(vocab, size=num_seqs))
  return {"inputs": seqs[:, :-1], "targets": seqs[:, 1:],
          "loss_mask": np.ones((num_seqs, seq_len), np.float32)}


def collision_report(model, prompts, *, chunk: int = 256,
                     exhaustive_prompts: int = 0, quant_bits=(),
                     quant_per: str = "tensor",
                     continuations: Sequence[int] | None = None,
                     batch_size: int = 256) -> dict[str, Any]:
  """Per-layer collision test of `prompts` (spec Q.3): min / mean distance
  and collision counts of last-token states; the exhaustive test on the
  `exhaustive_prompts` closest prompts at the last layer (every token of V
  appended, or only `continuations`); the b-bit quantised-state controls.
  Lists are indexed by layer 0..L."""
  states = last_token_states(model, prompts, batch_size=batch_size)
  stats = per_layer_stats(states, chunk=chunk)
  out = {"min": [s.min for s in stats], "mean": [s.mean for s in stats],
         "collisions": [s.collisions for s in stats]}
  if exhaustive_prompts:
    idx = closest_prompts(stats[-1], int(exhaustive_prompts))
    if continuations is None:
      exh = exhaustive_continuation_test(model, prompts, idx, chunk=chunk)
    else:
      allst = np.concatenate([sipit.next_token_states(
          model, prompts[i], np.asarray(continuations)) for i in idx], axis=1)
      exh = per_layer_stats(allst, chunk=chunk)
    out["exhaustive_min"] = [s.min for s in exh]
    out["exhaustive_collisions"] = [s.collisions for s in exh]
    out["exhaustive_pairs"] = exh[0].num_pairs
  for bits in quant_bits:
    q = quantize_states(states, int(bits), per=quant_per)
    qs = [pair_stats(x, chunk=chunk) for x in q]
    out[f"quant{bits}_min"] = [s.min for s in qs]
    out[f"quant{bits}_collisions"] = [s.collisions for s in qs]
  return out


def tied_rows_control(model, *, src: int, dst: int, num_prompts: int,
                      prompt_len: int, seed: int, layer: int | None = None,
                      config: sipit.SipItConfig | None = None,
                      ids: np.ndarray | None = None) -> dict[str, float]:
  """Control (i): tie row dst := row src; prompts holding dst at the middle
  position collide with their src twins (L2 distance of the last states at
  `layer`, default the last) and SipIt returns src or dst, whichever it
  proposes first. `ids` (default: seeded uniform tokens) are the prompts."""
  tied = tie_embedding_rows(model, src, dst)
  layer = sipit.num_layers(model) if layer is None else int(layer)
  n, t = int(num_prompts), int(prompt_len)
  if ids is None:
    rng = np.random.default_rng(500 + seed)
    ids = rng.integers(model.cfg.vocab_size, size=(n, t)).astype(np.int32)
  ids = np.array(ids, np.int32)
  ids[:, t // 2] = dst
  twin = ids.copy()
  twin[:, t // 2] = src
  both = sipit.layer_states(tied, np.concatenate([ids, twin]))
  dist = np.linalg.norm(both[layer][:n, -1] - both[layer][n:, -1], axis=-1)
  res = sipit.invert(tied, both[layer][:n], layer=layer, config=config)
  at = res.ids[:, t // 2]
  return {"twin_distance_max": float(dist.max()),
          "recovered_dst": float(np.mean(at == dst)),
          "recovered_src": float(np.mean(at == src)),
          "accuracy_elsewhere": float(np.mean(np.delete(res.ids == ids,
                                                        t // 2, axis=1)))}


def quantized_inversion(model, ids, bits: int, *, per: str = "tensor",
                        layer: int | None = None,
                        config: sipit.SipItConfig | None = None,
                        time_limit_s: float | None = None
                        ) -> dict[str, float]:
  """Control (ii): SipIt on b-bit quantised states of `layer` (default the
  last): the fraction of positions that verify and of exact tokens (the
  closest candidate is kept where none verifies; a position that does not
  verify walks all of V, so `time_limit_s` bounds it on large V)."""
  layer = sipit.num_layers(model) if layer is None else int(layer)
  h = sipit.layer_states(model, ids)[layer]
  q = quantize_states(h, int(bits), per=per)
  res = sipit.invert(model, q, layer=layer, config=config,
                     time_limit_s=time_limit_s)
  return {"verified": float(np.mean(res.verified)),
          "accuracy": float(np.mean(res.ids == ids))}


def text_window_prompts(streams: Sequence[Sequence[int]], num: int, *,
                        min_len: int = 4, max_len: int = 16,
                        seed: int = 0) -> list[list[int]]:
  """Up to `num` distinct prompts cut from token streams of real text:
  contiguous windows of min_len..max_len tokens at seeded random places
  (the collision test on real sentences; distinct as token tuples). Over
  `_ENUMERATE_WINDOWS` windows in all (a corpus of dataset rows) they are
  sampled uniformly over (stream, start, length) rather than enumerated."""
  rng = np.random.default_rng(seed)
  counts = np.array([[max(len(s) - n + 1, 0)
                      for n in range(min_len, max_len + 1)] for s in streams],
                    np.int64).reshape(len(streams), -1)
  if counts.sum() > max(_ENUMERATE_WINDOWS, 4 * int(num)):
    return _sampled_windows(streams, counts, int(num), min_len, rng)
  windows = sorted({tuple(int(x) for x in s[i:i + n])
                    for s in streams for n in range(min_len, max_len + 1)
                    for i in range(0, len(s) - n + 1)})
  if len(windows) < 2:
    raise ValueError("text_window_prompts: the streams hold fewer than 2 "
                     f"distinct windows of {min_len}..{max_len} tokens")
  pick = rng.choice(len(windows), min(int(num), len(windows)), replace=False)
  return [list(windows[i]) for i in sorted(pick)]


# Above this many (stream, start, length) windows `text_window_prompts`
# samples windows instead of enumerating them (a corpus of real rows).
_ENUMERATE_WINDOWS = 2_000_000


def _sampled_windows(streams, counts, num: int, min_len: int, rng
                     ) -> list[list[int]]:
  """`num` distinct windows drawn uniformly over every (stream, start,
  length) window (`counts[s, n - min_len]` of each); sorted as tuples."""
  flat = counts.reshape(-1).astype(np.float64)
  out: set[tuple[int, ...]] = set()
  for _ in range(64):
    if len(out) >= num:
      break
    cells = rng.choice(flat.size, size=2 * (num - len(out)),
                       p=flat / flat.sum())
    for cell in cells:
      s, k = divmod(int(cell), counts.shape[1])
      n, i = k + min_len, int(rng.integers(counts[s, k]))
      out.add(tuple(int(x) for x in streams[s][i:i + n]))
      if len(out) >= num:
        break
  return [list(w) for w in sorted(out)]


def control_report(model, ids, *, tie, quant_bits, quant_per: str = "tensor",
                   seed: int = 0, num_prompts: int | None = None,
                   layer: int | None = None,
                   config: sipit.SipItConfig | None = None,
                   tie_ids=None, time_limit_s: float | None = None
                   ) -> dict[str, Any]:
  """The negative controls of one model: {"tied": `tied_rows_control`
  (tie = (src, dst); prompts `tie_ids`, default seeded random ones),
  "quant_inversion": {bits: `quantized_inversion` of `ids`}}."""
  ids = np.asarray(ids, np.int32)
  n = len(ids) if num_prompts is None else int(num_prompts)
  return {"tied": tied_rows_control(
              model, src=int(tie[0]), dst=int(tie[1]), num_prompts=n,
              prompt_len=ids.shape[1], seed=seed, layer=layer, config=config,
              ids=tie_ids),
          "quant_inversion": {int(b): quantized_inversion(
              model, ids[:n], int(b), per=quant_per, layer=layer,
              config=config, time_limit_s=time_limit_s) for b in quant_bits}}


def control_rows(report: dict[str, Any]) -> list[tuple[str, float]]:
  """(label, value) rows of a `control_report` for a results table."""
  t = report["tied"]
  rows = [("tied rows: L2 distance of twin prompts", t["twin_distance_max"]),
          ("tied rows: SipIt returns the tied-in token (%)",
           100 * t["recovered_src"]),
          ("tied rows: SipIt returns the true token (%)",
           100 * t["recovered_dst"])]
  for bits, q in report["quant_inversion"].items():
    rows += [(f"{bits}-bit states: positions that verify (%)",
              100 * q["verified"]),
             (f"{bits}-bit states: exact tokens (nearest kept) (%)",
              100 * q["accuracy"])]
  return rows


# -- noise sweep (spec Q.2 "robust version", Q.5) and the length curve (Q.3) ---


def nearest_candidate_inversion(model, hidden_td, *, layer: int,
                                prefix_ids=None, batch: int = 512,
                                cache: dict | None = None
                                ) -> tuple[np.ndarray, np.ndarray]:
  """Inverts one prompt's layer-`layer` states `[T, D]` by the nearest-
  candidate rule: v_t = argmin_v ||F(v; s_1..s_{t-1}, t) - h_t|| over every
  token of V, on the recovered prefix (spec Q.2's robust SipIt: with
  ||e_t|| < Delta/2 the nearest candidate is the true token). The known
  `prefix_ids` (e.g. a BOS) are given. Returns (ids `[T]` with the prefix,
  distances `[T]` to the chosen candidate, 0 on the prefix). `cache` (prefix
  tuple -> candidate states `[V, D]`) is read and filled."""
  h = np.asarray(hidden_td, np.float32)
  ids = [int(x) for x in np.asarray(
      [] if prefix_ids is None else prefix_ids, np.int32).reshape(-1)]
  p = len(ids)
  dist = np.zeros(h.shape[0], np.float32)
  cache = {} if cache is None else cache
  for t in range(p, h.shape[0]):
    key = tuple(ids)
    if key not in cache:
      cache[key] = sipit.next_token_states(model, ids, batch=batch)[layer]
    d = np.linalg.norm(cache[key] - h[t][None], axis=-1)
    v = int(np.argmin(d))
    ids.append(v)
    dist[t] = d[v]
  return np.asarray(ids, np.int32), dist


def noise_sweep(model, ids, *, layer: int, scales=(0.5, 0.9, 2.0, 8.0),
                prefix_len: int = 0, seed: int = 0, batch: int = 512
                ) -> dict[str, Any]:
  """Spec Q.5's noise-robustness experiment with the nearest-candidate rule.

  For each prompt of `ids [B, T]` and position t: the clean state h_t at
  `layer` (`sipit.layer_states`) and its margin m_t = min_{v != s_t}
  ||F(v; s_<t, t) - h_t|| over all of V. Per scale c, each state gets noise
  of norm c * m_t / 2 in a seeded uniform direction and the prompt is
  inverted by `nearest_candidate_inversion`: c < 1 keeps every token
  exact (triangle inequality), c > 1 may not. Positions before
  `prefix_len` are a known prefix and not counted.

  Returns {"scales", "accuracy" (token-exact per scale), "prompt_exact",
  "margin_median", "margin_min" (over counted positions), "noise_norm_median"
  per scale}.
  """
  ids = np.asarray(ids, np.int32)
  h = sipit.layer_states(model, ids)[layer]  # [B, T, D]
  b, t, d = h.shape
  p = int(prefix_len)
  caches = [dict() for _ in range(b)]
  margin = np.zeros((b, t), np.float64)
  for i in range(b):
    for j in range(p, t):
      key = tuple(int(x) for x in ids[i, :j])
      if key not in caches[i]:
        caches[i][key] = sipit.next_token_states(
            model, ids[i, :j], batch=batch)[layer]
      dist = np.linalg.norm(caches[i][key] - h[i, j][None], axis=-1)
      dist[ids[i, j]] = np.inf
      margin[i, j] = dist.min()
  rng = np.random.default_rng(seed)
  direction = rng.standard_normal((b, t, d))
  direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
  out = {"scales": [float(c) for c in scales], "accuracy": [],
         "prompt_exact": [], "noise_norm_median": [],
         "margin_median": float(np.median(margin[:, p:])),
         "margin_min": float(np.min(margin[:, p:]))}
  for c in scales:
    norm = float(c) * margin / 2.0
    noisy = (h + direction * norm[..., None]).astype(np.float32)
    got = np.stack([nearest_candidate_inversion(
        model, noisy[i], layer=layer, prefix_ids=ids[i, :p] if p else None,
        batch=batch, cache=caches[i])[0] for i in range(b)])
    hit = got[:, p:] == ids[:, p:]
    out["accuracy"].append(float(np.mean(hit)))
    out["prompt_exact"].append(float(np.mean(np.all(hit, axis=1))))
    out["noise_norm_median"].append(float(np.median(norm[:, p:])))
  return out


def length_curve(model, streams: Sequence[Sequence[int]], lengths, *,
                 num: int, seed: int = 0, chunk: int = 256,
                 batch_size: int = 256) -> dict[str, Any]:
  """Spec Q.3's prompt-length curve: per length n of `lengths`, up to `num`
  distinct n-token windows of the token streams (`text_window_prompts`)
  and the per-layer minimum pairwise distance of their last-token states.
  Returns {"lengths", "prompts" (count per length), "min" `[len][L+1]`};
  a length with fewer than 2 distinct windows is left out."""
  out = {"lengths": [], "prompts": [], "min": []}
  for n in lengths:
    try:
      prompts = text_window_prompts(streams, num, min_len=int(n),
                                    max_len=int(n), seed=seed)
    except ValueError:
      continue
    stats = per_layer_stats(last_token_states(model, prompts,
                                               batch_size=batch_size),
                            chunk=chunk)
    out["lengths"].append(int(n))
    out["prompts"].append(len(prompts))
    out["min"].append([s.min for s in stats])
  return out
