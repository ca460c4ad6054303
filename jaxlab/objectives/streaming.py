"""StreamingThinker (Tong et al., arXiv 2510.17238): think while reading.

The input (source) arrives sentence by sentence; the model writes one
reasoning unit per sentence as it reads, then a final segment. Training uses
one sequence `[source S][target T][pad]` with

* the streaming attention mask (`streaming_mask`, the authors'
  `Qwen3Model_stream.generate_attention_mask_sentence`): causal, except that
  target segment i sees only source segments 0..i, shifted one row so that
  the boundary token closing segment i already sees source segment i+1
  (reading the next sentence is triggered by emitting that token); source
  rows never see targets; padding rows see nothing;
* streaming position encoding (`streaming_positions`, SPE): sources at
  0..S-1, targets restarting at 0 (`contiguous=True` is the "batch" ids);
* cross-entropy on target tokens only (`streaming_lm` in the loss registry).

Data format (spec K, "Data format"): source segments
`[instruct + <SEP>]`, `[question + <EOQ>]`, then one per context sentence
ending in `<EOS>` (the end-of-instruction marker appended to the last);
target segments `[header + <SEP>]`, one unit for the question (ending
`<EOQ>`), one per sentence (ending `<EOT>`), and one final segment whose
form is the depth variant D1/D2/D3 (`final_segment`). The formatter works on
lists of tokens of any type (strings or ids), so the same code serves a word
vocabulary (`jaxlab.data.synthetic.running_sum`) and a subword tokenizer.

Baselines beside it: `batch` (the same texts, causal mask, contiguous ids,
reasoning after the whole input) and `interleaved` (source and reasoning
segments alternating in one causal sequence, `interleave`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# The data format lives in the data layer; re-exported here.
from jaxlab.data.streaming_format import (  # pylint: disable=unused-import
    D2_CONNECT, DEPTHS, EOA, EOF, EOQ, EOR, EOS, EOT, IGNORE, LAYOUTS, SEP,
    SEPARATORS, SPECIAL_TOKENS, StreamingExample, Tok, final_segment,
    format_example, interleave, segment_text, segment_tokens)
from jaxlab.train import losses


# -- mask and positions -----------------------------------------------------


def _check_lens(src_lens, tgt_lens, total_len, fn: str):
  src = [int(x) for x in src_lens]
  tgt = [int(x) for x in tgt_lens]
  if not src:
    raise ValueError(f"{fn}: src_lens is empty; give at least one source "
                     "segment")
  if any(x < 0 for x in src) or any(x < 0 for x in tgt):
    raise ValueError(f"{fn}: segment lengths must be >= 0, got src_lens="
                     f"{src}, tgt_lens={tgt}")
  s, t = sum(src), sum(tgt)
  if s + t > int(total_len):
    raise ValueError(f"{fn}: sum(src_lens) + sum(tgt_lens) = {s} + {t} = "
                     f"{s + t} exceeds total_len={int(total_len)}; pad to a "
                     "longer total_len")
  return src, tgt, s, t


def streaming_mask(src_lens: Sequence[int], tgt_lens: Sequence[int],
                   total_len: int) -> jax.Array:
  """Boolean `[total_len, total_len]` streaming mask (True = may attend).

  Built as `generate_attention_mask_sentence` (spec K, "Streaming attention
  mask"): start causal over the S + T real tokens (padding rows and columns
  masked); for target segment i, deny source columns from the end of source
  segment i (`cumsum(src_lens)[i]`) to S; then shift the source block of the
  target rows up by one row (`m[S:S+T-1, :S] = m[S+1:S+T, :S]`). Target
  segments with i >= len(src_lens) (the final segment, whose source
  counterpart does not exist) see every source segment.
  """
  return jnp.asarray(streaming_mask_np(src_lens, tgt_lens, total_len))


def streaming_mask_np(src_lens: Sequence[int], tgt_lens: Sequence[int],
                      total_len: int) -> np.ndarray:
  """`streaming_mask` as a NumPy array (host-side data pipelines)."""
  src, tgt, s, t = _check_lens(src_lens, tgt_lens, total_len,
                               "streaming_mask")
  n = int(total_len)
  m = np.tril(np.ones((n, n), bool))
  m[s + t:, :] = False
  m[:, s + t:] = False
  ends = np.cumsum(src)
  row = s
  for i, k in enumerate(tgt):
    if i < len(ends):
      m[row:row + k, ends[i]:s] = False
    row += k
  if t > 1:
    m[s:s + t - 1, :s] = m[s + 1:s + t, :s].copy()
  return m


def streaming_positions(src_lens: Sequence[int], tgt_lens: Sequence[int],
                        total_len: int, *, contiguous: bool = False
                        ) -> jax.Array:
  """Int32 `[total_len]` position ids (SPE, spec K).

  Sources at 0..S-1, targets restarting at 0..T-1 (`pe_cache_start = 0`);
  `contiguous=True` gives 0..S+T-1 (the "batch" position ids). Padding gets
  0 (its rows and columns are masked anyway).
  """
  _, _, s, t = _check_lens(src_lens, tgt_lens, total_len,
                           "streaming_positions")
  pos = np.zeros(int(total_len), np.int32)
  pos[:s] = np.arange(s)
  pos[s:s + t] = np.arange(s, s + t) if contiguous else np.arange(t)
  return jnp.asarray(pos)


def causal_mask(real_len: int, total_len: int) -> jax.Array:
  """Causal `[total_len, total_len]` mask over `real_len` tokens (baselines)."""
  return jnp.asarray(causal_mask_np(real_len, total_len))


def causal_mask_np(real_len: int, total_len: int) -> np.ndarray:
  if real_len > total_len:
    raise ValueError(f"causal_mask: real_len={real_len} exceeds "
                     f"total_len={total_len}")
  m = np.tril(np.ones((total_len, total_len), bool))
  m[real_len:, :] = False
  m[:, real_len:] = False
  return m


# -- training arrays --------------------------------------------------------


def encode_layout(example: StreamingExample, layout: str, total_len: int,
                  *, pad_id: int = 0) -> dict[str, np.ndarray]:
  """One example (token ids) as the `streaming_lm` loss's arrays.

  Returns `inputs [L]`, `targets [L]` (inputs shifted left, the label of row
  r is token r+1), `loss_mask [L]` (rows whose label is a target token:
  source labels are -100 in the authors' code), `positions [L]` and
  `allowed [L, L]`:

    streaming:   [source][target], `streaming_mask`, SPE positions;
    batch:       [source][target], causal mask, contiguous positions;
    interleaved: `interleave(...)`, causal mask, contiguous positions.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
  if layout == "interleaved":
    tokens, is_tgt = interleave(example.source, example.target)
  else:
    tokens = [x for seg in example.source for x in seg]
    is_tgt = [False] * len(tokens)
    for seg in example.target:
      tokens += list(seg)
      is_tgt += [True] * len(seg)
  n = len(tokens)
  if n > total_len:
    raise ValueError(f"encode_layout: the example has {n} tokens but "
                     f"total_len={total_len}; raise the task's max_len")
  ids = np.full(total_len, pad_id, np.int32)
  ids[:n] = np.asarray(tokens, np.int32)
  tgt_flag = np.zeros(total_len, bool)
  tgt_flag[:n] = is_tgt
  targets = np.concatenate([ids[1:], [pad_id]]).astype(np.int32)
  loss_mask = np.concatenate([tgt_flag[1:], [False]]).astype(np.float32)
  if layout == "streaming":
    allowed = streaming_mask_np(example.src_lens, example.tgt_lens,
                                total_len)
    positions = np.zeros(total_len, np.int32)
    s = sum(example.src_lens)
    positions[:s] = np.arange(s)
    positions[s:n] = np.arange(n - s)   # SPE, as streaming_positions
  else:
    allowed = causal_mask_np(n, total_len)
    positions = np.arange(total_len, dtype=np.int32)
    positions[n:] = 0
  return {"inputs": ids, "targets": targets, "loss_mask": loss_mask,
          "positions": np.asarray(positions, np.int32),
          "allowed": np.asarray(allowed, bool)}


def encode_batch(examples: Sequence[StreamingExample], layout: str,
                 total_len: int, *, pad_id: int = 0
                 ) -> dict[str, np.ndarray]:
  """Stacks `encode_layout` over examples: `[N, L]` arrays, `allowed [N, L, L]`."""
  rows = [encode_layout(e, layout, total_len, pad_id=pad_id)
          for e in examples]
  return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


@losses.register("streaming_lm")
def streaming_lm_loss(model, batch: dict[str, jax.Array], *,
                      rng: jax.Array, config: Any = None):
  """Target-only next-token cross-entropy under an explicit mask (spec K).

  batch: `inputs`, `targets`, `loss_mask`, `positions` `[B, L]` and
  `allowed [B, L, L]` (True = may attend; `streaming_mask` for StreamingThinker,
  a causal mask for the batch / interleaved baselines). Token mean over
  `loss_mask`.
  """
  del rng, config
  out = model.forward(batch["inputs"], positions=batch["positions"],
                      allowed_mask=batch["allowed"][:, None])
  total, count = losses.masked_token_nll(out.logits, batch["targets"],
                                         batch["loss_mask"])
  return total / jnp.maximum(count, 1.0), {"tokens": count}
