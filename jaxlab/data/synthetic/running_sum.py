"""Streaming running-sum stories (spec K's CPU miniature).

A story arrives sentence by sentence, question first:

  source: <instr> <SEP> | total ? <EOQ> | has 3 <EOS> | gets 4 <EOS> |
          loses 2 <EOS> <|im_end|>
  target: <assistant> <think> <SEP> | track <EOQ> | = 3 <EOT> | = 7 <EOT> |
          = 5 <EOT> | final

and the reasoning units track the running total. The final segment is the
depth variant (`data.streaming_format.final_segment`):

  D1: </think> 5 <|im_end|>
  D2: combine 3 + 4 - 2 = 5 </think> 5 <|im_end|>       (a recomputation)
  D3: D2's recomputation, <EOR> wait 5 <EOF> therefore 5 <EOA>, then
      </think> 5 <|im_end|>

Totals stay in 0..`max_total` (a "loses" never goes below 0, a "gets" never
above the maximum). One word = one token (`VOCAB`); `answer_of` reads the
token after `</think>`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxlab.data import streaming_format as st

MAX_NUMBER = 19
NUMBERS = tuple(str(i) for i in range(MAX_NUMBER + 1))
INSTR, QUESTION_WORDS = "<instr>", ("total", "?")
ASSISTANT, THINK, THINK_END, END = ("<assistant>", "<think>", "</think>",
                                    "<|im_end|>")
HEADER = (ASSISTANT, THINK)
WORDS = ("<pad>", INSTR, *QUESTION_WORDS, "has", "gets", "loses", "track",
         "=", "combine", "+", "-", "wait", "therefore", ASSISTANT, THINK,
         THINK_END, END, st.EOF, *st.SPECIAL_TOKENS)
VOCAB = WORDS + NUMBERS
TOKEN_ID = {w: i for i, w in enumerate(VOCAB)}
PAD = 0
VOCAB_SIZE = 64  # >= len(VOCAB), a round embedding size
assert len(VOCAB) <= VOCAB_SIZE


def encode(tokens: Sequence[str]) -> list[int]:
  return [TOKEN_ID[t] for t in tokens]


def decode(ids: Sequence[int]) -> str:
  return " ".join(VOCAB[int(i)] if int(i) < len(VOCAB) else f"<{int(i)}>"
                  for i in ids)


SEPARATOR_IDS = tuple(TOKEN_ID[t] for t in st.SEPARATORS)
STOP_IDS = (TOKEN_ID[END],)
SEED_IDS = tuple(encode(list(HEADER) + [st.SEP]))


@dataclasses.dataclass
class Story:
  """One story: signed changes (the first is the start value) and totals."""
  values: list[int]     # first: start amount; then +v (gets) or -v (loses)
  totals: list[int]     # running total after each sentence

  @property
  def answer(self) -> int:
    return self.totals[-1]


def make_stories(seed: int, n: int, *, min_sentences: int = 3,
                 max_sentences: int = 6, max_value: int = 5,
                 max_total: int = 9) -> list[Story]:
  """`n` random stories; sentence counts uniform in [min, max]."""
  if not 1 <= min_sentences <= max_sentences:
    raise ValueError(f"need 1 <= min_sentences <= max_sentences, got "
                     f"{min_sentences}, {max_sentences}")
  if not 1 <= max_value <= max_total <= MAX_NUMBER:
    raise ValueError(f"need 1 <= max_value <= max_total <= {MAX_NUMBER}, got "
                     f"max_value={max_value}, max_total={max_total}")
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    k = int(rng.integers(min_sentences, max_sentences + 1))
    total = int(rng.integers(0, max_value + 1))
    values, totals = [total], [total]
    for _ in range(k - 1):
      ups = min(max_value, max_total - total)
      downs = min(max_value, total)
      choices = [v for v in range(1, ups + 1)] + [-v for v in
                                                  range(1, downs + 1)]
      v = int(rng.choice(choices))
      total += v
      values.append(v)
      totals.append(total)
    out.append(Story(values=values, totals=totals))
  return out


def sentence(i: int, v: int) -> list[str]:
  if i == 0:
    return ["has", str(v)]
  return ["gets", str(v)] if v > 0 else ["loses", str(-v)]


def to_example(story: Story, depth: str = "D1") -> st.StreamingExample:
  """The story in the StreamingThinker format (word tokens)."""
  recompute = [str(story.values[0])]
  for v in story.values[1:]:
    recompute += ["+" if v > 0 else "-", str(abs(v))]
  ans = str(story.answer)
  final = st.final_segment(
      depth, answer=[ans], connect=["combine"],
      deep_reasoning=recompute + ["=", ans],
      reflection=[st.EOR, "wait", ans, st.EOF],
      conclusion=["therefore", ans, st.EOA],
      think_end=[THINK_END], end=[END])
  return st.format_example(
      instruct=[INSTR], question=list(QUESTION_WORDS),
      sentences=[sentence(i, v) for i, v in enumerate(story.values)],
      question_unit=["track"], units=[["=", str(t)] for t in story.totals],
      final=final, header=list(HEADER), end_instruct=[END])


def encode_example(ex: st.StreamingExample) -> st.StreamingExample:
  return st.StreamingExample(source=[encode(s) for s in ex.source],
                             target=[encode(t) for t in ex.target])


def max_len(max_sentences: int, depth: str) -> int:
  """Tokens of the longest formatted story (source + target)."""
  longest = Story(values=[1] * max_sentences, totals=[1] * max_sentences)
  ex = to_example(longest, depth)
  return sum(ex.src_lens) + sum(ex.tgt_lens)


def answer_index(tokens: Sequence[int]) -> int | None:
  """Index in `tokens` of the answer (the token after `</think>`), or None."""
  end = TOKEN_ID[THINK_END]
  for i, t in enumerate(tokens[:-1]):
    if int(t) == end:
      return i + 1
  return None


def answer_of(tokens: Sequence[int]) -> int | None:
  """The generated answer as an int, or None if absent / not a number."""
  i = answer_index(tokens)
  if i is None:
    return None
  word = VOCAB[int(tokens[i])] if int(tokens[i]) < len(VOCAB) else ""
  return int(word) if word.isdigit() else None


def unit_totals(tokens: Sequence[int]) -> list[int | None]:
  """The totals the reasoning units claim ("= n <EOT>"), in order."""
  eq, eot = TOKEN_ID["="], TOKEN_ID[st.EOT]
  out = []
  for i in range(len(tokens) - 2):
    if int(tokens[i]) == eq and int(tokens[i + 2]) == eot:
      w = VOCAB[int(tokens[i + 1])] if int(tokens[i + 1]) < len(VOCAB) else ""
      out.append(int(w) if w.isdigit() else None)
  return out


def score(tokens: Sequence[int], story: Story) -> dict[str, float]:
  """Answer exact match and the fraction of correct running totals."""
  pred = answer_of(tokens)
  units = unit_totals(tokens)
  right = sum(1 for a, b in zip(units, story.totals) if a == b)
  return {"accuracy": float(pred == story.answer),
          "unit_accuracy": right / len(story.totals)}
