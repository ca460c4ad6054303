"""The StreamingThinker data format (spec K): segments, separators, layout.

Token-type-agnostic formatting (strings or ids) shared by the data generator
(`jaxlab.data.synthetic.running_sum`), the loss and the streaming decoder
(`jaxlab.objectives.streaming` re-exports every name here), so the data
layer does not import the objective.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, TypeVar

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
