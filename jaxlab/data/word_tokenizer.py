"""A closed-vocabulary word tokenizer for synthetic word-level tasks.

`WordTokenizer()` is the vocabulary of paper M's word-level RULER-like
miniature (`jaxlab.evals.ruler_task`): filler words w0..w31, keys
key0..key15, variable names var0..var15, punctuation and the ten digits.
Whitespace separates words ("." and "," are split off); a run of digits is
one token per digit, so a 4-digit value is 4 tokens.
"""

from collections.abc import Sequence

FILLER_WORDS = tuple(f"w{i}" for i in range(32))
KEYS = tuple(f"key{i}" for i in range(16))
VAR_NAMES = tuple(f"var{i}" for i in range(16))
RULER_WORDS = (("<pad>", "<bos>", "<eos>", ".", ":", ",", "?", "??", "?=",
                "=", "answer") + FILLER_WORDS + KEYS + VAR_NAMES
               + tuple("0123456789"))


class WordTokenizer:
  """Whitespace words -> ids; a run of digits is one token per digit.

  `words[0:3]` must be the pad, BOS and EOS words (ids 0, 1, 2); digits
  must be words of their own.
  """

  PAD, BOS, EOS = 0, 1, 2
  bos_id, eos_id, pad_id = BOS, EOS, PAD

  def __init__(self, words: Sequence[str] = RULER_WORDS):
    self.words = list(words)
    self.ids = {w: i for i, w in enumerate(self.words)}

  @property
  def vocab_size(self) -> int:
    return len(self.words)

  def encode(self, text: str) -> list[int]:
    out = []
    for w in text.replace(".", " . ").replace(",", " , ").split():
      if w.isdigit():
        out.extend(self.ids[c] for c in w)
      elif w in self.ids:
        out.append(self.ids[w])
      else:
        raise ValueError(f"word {w!r} is not in the task vocabulary")
    return out

  def decode(self, ids) -> str:
    text = ""
    for i in ids:
      w = self.words[int(i)] if 0 <= int(i) < len(self.words) else "?"
      if w in ("<pad>", "<bos>", "<eos>"):
        continue
      glue = w.isdigit() and text[-1:].isdigit()
      text += w if glue or not text else " " + w
    return text
