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

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.train import losses

Tok = TypeVar("Tok")

# The added special tokens of the authors' tokenizer (spec K, data format).
SEP, EOQ, EOS, EOT, EOR, EOA, IGNORE = ("<SEP>", "<EOQ>", "<EOS>", "<EOT>",
                                       "<EOR>", "<EOA>", "<ignore>")
SPECIAL_TOKENS = (SEP, EOQ, EOS, EOT, EOR, EOA, IGNORE)
# Emitting one of these while source segments remain triggers the next READ
# (`_sample_streaming`'s stop list).
SEPARATORS = SPECIAL_TOKENS
# The reflection closer of D3 (not a READ trigger).
EOF = "<EOF>"

DEPTHS = ("D1", "D2", "D3")
LAYOUTS = ("streaming", "batch", "interleaved")
D2_CONNECT = ("Now, the streaming reasoning is completed. Let's combine all "
              "information and begin deeper & global reasoning to infer the "
              "answer.")


# -- segmenter and formatter ------------------------------------------------


def segment_text(text: str, boundaries: Sequence[str] = SPECIAL_TOKENS
                 ) -> list[str]:
  """Splits `text` after each boundary token (kept at the segment's end).

  "a b<EOS> c<EOS>" -> ["a b<EOS>", " c<EOS>"]; trailing text without a
  boundary is a last segment of its own.
  """
  if not boundaries:
    raise ValueError("segment_text: boundaries must name at least one token")
  pattern = "(" + "|".join(re.escape(b) for b in boundaries) + ")"
  parts = re.split(pattern, text)
  out, cur = [], ""
  for i, p in enumerate(parts):
    cur += p
    if i % 2 == 1:  # a boundary closes the segment
      out.append(cur)
      cur = ""
  if cur:
    out.append(cur)
  return out


def segment_tokens(tokens: Sequence[Tok], boundaries: Sequence[Tok]
                   ) -> list[list[Tok]]:
  """Token-list form of `segment_text`: a segment ends at each boundary."""
  bset = set(boundaries)
  out, cur = [], []
  for t in tokens:
    cur.append(t)
    if t in bset:
      out.append(cur)
      cur = []
  if cur:
    out.append(cur)
  return out


def final_segment(depth: str, *, answer: Sequence[Tok],
                  deep_reasoning: Sequence[Tok] = (),
                  connect: Sequence[Tok] = (),
                  reflection: Sequence[Tok] = (),
                  conclusion: Sequence[Tok] = (),
                  think_end: Sequence[Tok] = ("</think>",),
                  end: Sequence[Tok] = ("<|im_end|>",)) -> list[Tok]:
  """The last target segment for depth D1 / D2 / D3 (spec K, data format).

  D1: think_end + answer + end (empty connect_2, no deep reasoning).
  D2: connect + deep_reasoning + think_end + answer + end.
  D3: D2 with `reflection` (it should hold `<EOR> ... <EOF>`) and
      `conclusion` ("Therefore, the answer is ...<EOA>") before think_end.
  """
  if depth not in DEPTHS:
    raise ValueError(f"depth must be one of {DEPTHS}, got {depth!r}")
  body: list[Tok] = []
  if depth in ("D2", "D3"):
    body += list(connect) + list(deep_reasoning)
  if depth == "D3":
    body += list(reflection) + list(conclusion)
  return body + list(think_end) + list(answer) + list(end)


@dataclasses.dataclass
class StreamingExample:
  """Source and target segments of one example (lists of tokens)."""
  source: list[list[Any]]
  target: list[list[Any]]

  @property
  def src_lens(self) -> list[int]:
    return [len(s) for s in self.source]

  @property
  def tgt_lens(self) -> list[int]:
    return [len(t) for t in self.target]


def format_example(*, instruct: Sequence[Tok], question: Sequence[Tok],
                   sentences: Sequence[Sequence[Tok]],
                   question_unit: Sequence[Tok],
                   units: Sequence[Sequence[Tok]],
                   final: Sequence[Tok],
                   header: Sequence[Tok] = ("<|im_start|>assistant",
                                            "<think>"),
                   end_instruct: Sequence[Tok] = ("<|im_end|>",),
                   sep=SEP, eoq=EOQ, eos=EOS, eot=EOT) -> StreamingExample:
  """The authors' segment layout (spec K, data format), question first.

  Source: [instruct + <SEP>], [question + <EOQ>], [sentence_k + <EOS>] (the
  last + end_instruct). Target: [header + <SEP>], [question_unit + <EOQ>],
  [unit_k + <EOT>] (one per sentence), [final]. Separators are added here;
  pass the pieces without them.
  """
  if not sentences:
    raise ValueError("format_example: sentences is empty; a streaming "
                     "example needs at least one context sentence")
  if len(units) != len(sentences):
    raise ValueError(f"format_example: {len(units)} reasoning units for "
                     f"{len(sentences)} sentences; give one unit per "
                     "sentence")
  source = [list(instruct) + [sep], list(question) + [eoq]]
  source += [list(s) + [eos] for s in sentences]
  source[-1] += list(end_instruct)
  target = [list(header) + [sep], list(question_unit) + [eoq]]
  target += [list(u) + [eot] for u in units]
  target.append(list(final))
  return StreamingExample(source=source, target=target)


def interleave(source: Sequence[Sequence[Tok]],
               target: Sequence[Sequence[Tok]]) -> tuple[list[Tok], list[bool]]:
  """The interleaved baseline's one sequence and its is-target flags.

  src_0 tgt_0 src_1 tgt_1 ... (target segments beyond the last source
  segment follow at the end), read with a plain causal mask.
  """
  tokens, is_tgt = [], []
  for i in range(max(len(source), len(target))):
    if i < len(source):
      tokens += list(source[i])
      is_tgt += [False] * len(source[i])
    if i < len(target):
      tokens += list(target[i])
      is_tgt += [True] * len(target[i])
  return tokens, is_tgt


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
