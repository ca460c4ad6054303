"""StreamingThinker decoding: dual KV caches, READ/WRITE, an arrival clock.

Spec K, "Parallel KV-cache inference" (the authors'
`generation/generate.py::_sample_streaming`), for one example:

* two caches: the source cache holds the input read so far (positions
  0, 1, ... continuing), the target cache holds the reasoning (positions
  restarting at 0: SPE);
* READ(k): one forward pass over source segment k only, positions
  [past_src, past_src + len), causal over the source cache; sources never
  attend to targets;
* WRITE: `merge` = the two caches concatenated along the slots
  (`attention.concatenate(..., "sequence")`), one token fed at position
  = number of target tokens so far, attending to every filled slot (an
  all-True `allowed_mask`: the position rule cannot order the two position
  spaces), then `separate` = `KVCache.split` back into source and target;
* schedule: read segment 0, feed the seed (assistant header), and whenever a
  separator token is to be fed while source segments remain, READ the next
  segment first (reading is triggered by emitting the boundary token; this
  is the one-row shift of `streaming_mask`), then decode freely until a stop
  token.

The baselines run through the same loop with one cache and contiguous
positions: `"interleaved"` (feed the separator, then READ the next segment
into the same causal sequence: `objectives.streaming.interleave`) and
`"batch"` (READ the whole input, then decode).

`arrival_clock` replays the resulting trace against a simulated input stream
(spec K's CPU miniature: input arrives at k tokens per tick, one decode step
= one tick) and gives TTFT (input tokens read before the first reasoning
token, the paper's token-level TTFT) and Delay (ticks from the end of the
input to the first answer token, the paper's time-level delay). Streaming
READs run concurrently with WRITEs (they never depend on target state); the
baselines' reads share the one worker.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.decoding import sampler
from jaxlab.nn import attention as attn_lib

MODES = ("streaming", "interleaved", "batch")


@dataclasses.dataclass
class StreamResult:
  """One example's decode.

  tokens: the generated ids (the stop token included when emitted).
  logits: `[len(tokens), V]` float32 logits each token was chosen from.
  trace: events in program order: ("read", u) = source segments up to u
    (inclusive) are now read; ("seed", id) = a seed token fed; ("write", id)
    = a generated token emitted.
  src_lens: lengths of the source segments read.
  tgt_lens: the target (seed + generated) split into streaming segments: a
    segment ends at a separator that triggered a READ (streaming mode; one
    segment otherwise).
  """
  tokens: list[int]
  logits: np.ndarray
  trace: list[tuple[str, int]]
  src_lens: list[int]
  tgt_lens: list[int]


def _round_up(n: int, m: int) -> int:
  return -(-int(n) // m) * m


@functools.partial(jax.jit, static_argnums=(0,))
def _read(graphdef, tree, cache, tokens_bt, positions_bt, valid_bt, last):
  """READ: a causal forward over new tokens (right-padded to a fixed chunk,
  padding stored as empty slots); the logits of token `last`."""
  model = sampler._merge(graphdef, tree)  # pylint: disable=protected-access
  out = model.forward(tokens_bt, positions=positions_bt,
                      attention_mask=valid_bt, cache=cache)
  return out.logits[:, last], out.cache


@functools.partial(jax.jit, static_argnums=(0,))
def _write_merged(graphdef, tree, src_cache, tgt_cache, token_bt,
                  position_bt):
  """WRITE one target token: merge, forward, separate (spec K)."""
  model = sampler._merge(graphdef, tree)  # pylint: disable=protected-access
  merged = attn_lib.concatenate([src_cache, tgt_cache], axis="sequence")
  allowed = jnp.ones((1, 1, 1, merged.max_len), bool)
  out = model.forward(token_bt, positions=position_bt, cache=merged,
                      allowed_mask=allowed)
  new_src, new_tgt = out.cache.split([src_cache.max_len], axis="sequence")
  # Writes land in the target part; the source keeps its own next slot.
  new_src = new_src.replace(index=src_cache.index)
  return out.logits[:, -1], new_src, new_tgt


def decode(model, source_segments: Sequence[Sequence[int]], *,
           seed_tokens: Sequence[int], separator_ids: Sequence[int],
           stop_ids: Sequence[int], max_new_tokens: int,
           mode: str = "streaming", temperature: float = 0.0,
           key: jax.Array | None = None, capacity_multiple: int = 32,
           read_chunk: int = 8,
           force_tokens: Sequence[int] | None = None) -> StreamResult:
  """Decodes one example whose input arrives as `source_segments`.

  Args:
    model: a `jaxlab.models.decoder.Decoder`.
    source_segments: the input's segments (instruct, question, sentences),
      token ids, each non-empty.
    seed_tokens: the target's forced start (the assistant header, ending in
      its `<SEP>`).
    separator_ids: tokens whose feeding triggers READ of the next segment
      while segments remain (`objectives.streaming.SEPARATORS`).
    stop_ids: generation ends after emitting one of these (`<|im_end|>`).
    max_new_tokens: generated tokens at most (>= 1).
    mode: "streaming" (dual cache, SPE), "interleaved" or "batch" (one
      cache, contiguous positions).
    temperature: 0 = greedy; otherwise sampled with `key`
      (`sampler.sample_logits`; the i-th token uses `fold_in(key, i)`).
    key: PRNG key for temperature > 0.
    capacity_multiple: cache capacities are rounded up to a multiple of this
      so that examples of similar length share compilations.
    read_chunk: a READ runs in forward passes over right-padded chunks of
      this many tokens (one compilation for every segment length; a segment
      up to `read_chunk` tokens is one pass).
    force_tokens: if given, the i-th "generated" token is `force_tokens[i]`
      instead of the model's choice (teacher forcing: scores a reference
      reasoning under the streaming schedule); stops at its end.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  segs = [list(map(int, s)) for s in source_segments]
  if not segs or any(len(s) == 0 for s in segs):
    raise ValueError("source_segments must be a non-empty list of non-empty "
                     f"token lists, got lengths {[len(s) for s in segs]}")
  if not seed_tokens:
    raise ValueError("seed_tokens is empty; give the assistant header "
                     "(ending in its <SEP>)")
  if int(max_new_tokens) < 1:
    raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
  if temperature > 0 and key is None:
    raise ValueError("decode with temperature > 0 needs a PRNG key")
  separators, stops = set(map(int, separator_ids)), set(map(int, stop_ids))
  graphdef, tree = sampler._model_tree(model)  # pylint: disable=protected-access
  read_chunk = int(read_chunk)
  if read_chunk < 1:
    raise ValueError(f"read_chunk must be >= 1, got {read_chunk}")
  # Source slots: each READ fills whole chunks (its padding stays empty).
  if mode == "batch":
    src_slots = _round_up(sum(len(s) for s in segs), read_chunk)
  else:
    src_slots = sum(_round_up(len(s), read_chunk) for s in segs)
  new_tokens = len(seed_tokens) + int(max_new_tokens)
  if mode == "streaming":
    src_cache = model.init_cache(1, _round_up(src_slots, capacity_multiple))
    tgt_cache = model.init_cache(1, _round_up(new_tokens, capacity_multiple))
  else:
    cache = model.init_cache(1, _round_up(src_slots + new_tokens,
                                          capacity_multiple))

  trace: list[tuple[str, int]] = []
  state = {"reads": 0, "src_pos": 0, "tgt_pos": 0, "pos": 0}
  tgt_lens = [0]
  logits = None

  def forward_chunks(c, toks: list[int], start: int, chunk: int):
    """`toks` through cache `c` in right-padded chunks of `chunk` tokens."""
    out = None
    for i in range(0, len(toks), chunk):
      part = toks[i:i + chunk]
      n = len(part)
      ids = np.zeros((1, chunk), np.int32)
      ids[0, :n] = part
      pos = (start + i + np.arange(chunk, dtype=np.int32))[None]
      valid = (np.arange(chunk) < n)[None]
      out, c = _read(graphdef, tree, c, jnp.asarray(ids), jnp.asarray(pos),
                     jnp.asarray(valid), jnp.asarray(n - 1, jnp.int32))
    return out, c

  def read(upto: int):
    nonlocal logits, cache, src_cache
    toks = [t for s in segs[state["reads"]:upto + 1] for t in s]
    if mode == "streaming":
      _, src_cache = forward_chunks(src_cache, toks, state["src_pos"],
                                   read_chunk)
      state["src_pos"] += len(toks)
    else:
      logits, cache = forward_chunks(cache, toks, state["pos"], read_chunk)
      state["pos"] += len(toks)
    state["reads"] = upto + 1
    trace.append(("read", upto))

  def feed(token: int):
    nonlocal logits, cache, src_cache, tgt_cache
    triggers = token in separators and state["reads"] < len(segs)
    if mode == "streaming" and triggers:
      read(state["reads"])
    if mode == "streaming":
      ids = jnp.asarray([[token]], jnp.int32)
      pos = jnp.asarray([[state["tgt_pos"]]], jnp.int32)
      logits, src_cache, tgt_cache = _write_merged(
          graphdef, tree, src_cache, tgt_cache, ids, pos)
      state["tgt_pos"] += 1
    else:
      logits, cache = forward_chunks(cache, [token], state["pos"], 1)
      state["pos"] += 1
    tgt_lens[-1] += 1
    if triggers and mode == "streaming":
      tgt_lens.append(0)
    if mode == "interleaved" and triggers:
      read(state["reads"])

  read(len(segs) - 1 if mode == "batch" else 0)
  for t in seed_tokens:
    trace.append(("seed", int(t)))
    feed(int(t))
  tokens, chosen_logits = [], []
  budget = int(max_new_tokens)
  if force_tokens is not None:
    budget = min(budget, len(force_tokens))
  for i in range(budget):
    row = logits[0]
    if force_tokens is not None:
      tok = int(force_tokens[i])
    elif temperature > 0:
      tok = int(sampler.sample_logits(row, jax.random.fold_in(key, i),
                                      temperature=temperature))
    else:
      tok = int(np.argmax(np.asarray(row)))
    tokens.append(tok)
    chosen_logits.append(np.asarray(row))
    trace.append(("write", tok))
    if tok in stops or i == budget - 1:
      tgt_lens[-1] += 1  # the last token is emitted but never fed
      break
    feed(tok)
  if tgt_lens[-1] == 0:
    tgt_lens.pop()
  return StreamResult(tokens=tokens, logits=np.stack(chosen_logits),
                      trace=trace,
                      src_lens=[len(s) for s in segs[:state["reads"]]],
                      tgt_lens=tgt_lens)


# -- the arrival clock -------------------------------------------------------


@dataclasses.dataclass
class ClockResult:
  """Latencies of one decode under a simulated input stream (ticks)."""
  ttft_tokens: int        # input tokens read before the first written token
  first_token_tick: float
  answer_tick: float      # emission of the first answer token
  input_end_tick: float   # arrival of the last input token
  delay_ticks: float      # answer_tick - input_end_tick


def arrival_clock(trace: Sequence[tuple[str, int]], src_lens: Sequence[int],
                  *, tokens_per_tick: float, concurrent_reads: bool,
                  answer_write: int | None = None,
                  read_ticks_per_token: float = 0.0) -> ClockResult:
  """Replays a decode `trace` against input arriving at a fixed rate.

  Clock (spec K's CPU miniature; [inferred] details are options): input
  token j (0-based, over all segments) has arrived at tick
  (j + 1) / tokens_per_tick, so segment s is complete at
  A_s = cumsum(src_lens)[s] / tokens_per_tick. A READ of segments up to u
  takes `read_ticks_per_token` per token (default 0: prefill is not on the
  clock) and cannot start before A_u. A written token costs one tick and is
  emitted at the end of it; seed tokens are free (they are part of the
  prompt). With `concurrent_reads` (StreamingThinker) a reader prefills each
  segment as soon as it arrives, in parallel with the writer, and a WRITE
  that follows a READ in the trace waits for that READ to finish; otherwise
  (batch, interleaved) READs and WRITEs share one worker, in trace order.

  TTFT = input tokens read before the first WRITE. Delay = emission tick of
  write number `answer_write` (0-based over WRITE events; default the last)
  minus A_last; it is negative if the model answered before the input
  ended.
  """
  if tokens_per_tick <= 0:
    raise ValueError(f"tokens_per_tick must be > 0, got {tokens_per_tick}")
  lens = [int(x) for x in src_lens]
  if not lens:
    raise ValueError("arrival_clock: src_lens is empty")
  ends = np.cumsum(lens)
  arrive = ends / float(tokens_per_tick)
  writes = [i for i, (kind, _) in enumerate(trace) if kind == "write"]
  if not writes:
    raise ValueError("arrival_clock: the trace has no write event")
  target = writes[-1] if answer_write is None else writes[int(answer_write)]
  # Concurrent reader: segment s is read at R_s.
  read_done = np.zeros(len(lens))
  prev = 0.0
  for s in range(len(lens)):
    prev = max(prev, arrive[s]) + read_ticks_per_token * lens[s]
    read_done[s] = prev
  now, ready, read_upto, ttft, first = 0.0, 0.0, -1, None, None
  answer = None
  for i, (kind, val) in enumerate(trace):
    if kind == "read":
      u = int(val)
      if u >= len(lens):
        raise ValueError(f"arrival_clock: the trace reads segment {u} but "
                         f"src_lens has {len(lens)} segments")
      n_tok = int(ends[u] - (ends[read_upto] if read_upto >= 0 else 0))
      if concurrent_reads:
        ready = max(ready, read_done[u])
      else:
        now = max(now, arrive[u]) + read_ticks_per_token * n_tok
      read_upto = u
    elif kind == "write":
      if ttft is None:
        ttft = int(ends[read_upto]) if read_upto >= 0 else 0
      now = max(now, ready) + 1.0
      if first is None:
        first = now
      if i == target:
        answer = now
  return ClockResult(ttft_tokens=int(ttft), first_token_tick=float(first),
                     answer_tick=float(answer),
                     input_end_tick=float(arrive[-1]),
                     delay_ticks=float(answer - arrive[-1]))


def delay_key(tokens_per_tick: float) -> str:
  """The metric / column key of `ClockResult.delay_ticks` at one input rate
  ("delay_0p25" at 0.25 tokens per tick)."""
  return f"delay_{tokens_per_tick:g}".replace(".", "p")
