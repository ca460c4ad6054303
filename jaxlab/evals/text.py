"""Text-overlap metrics: ROUGE-1/2/L, Levenshtein, normalised exact match.

ROUGE follows the `rouge_score` package (Lin 2004 as re-implemented by Google)
token for token, so numbers are comparable with papers that report it (PMC's
reward and metrics use ROUGE-L *recall*, spec B.3 and B.10):

  tokens = lowercase -> every run of non-[a-z0-9] becomes a space -> split on
           whitespace -> Porter-stem tokens longer than 3 characters
           (optional) -> drop empty tokens;
  ROUGE-L: P = LCS / |prediction|, R = LCS / |reference|, F = 2PR / (P + R),
           and (0, 0, 0) when either side has no tokens;
  ROUGE-n: clipped n-gram overlap over max(count, 1).

The stemmer is NLTK's `PorterStemmer` in its default (NLTK_EXTENSIONS) mode,
the one `rouge_score` uses, imported only when `use_stemmer=True`.
"""

from __future__ import annotations

import collections
import functools
import re
import string
import unicodedata
from collections.abc import Sequence

_NON_ALPHANUM_RE = re.compile(r"[^a-z0-9]+")
_SPACES_RE = re.compile(r"\s+")
_VALID_TOKEN_RE = re.compile(r"^[a-z0-9]+$")


@functools.lru_cache(maxsize=1)
def _porter():
  try:
    from nltk.stem import porter  # pylint: disable=g-import-not-at-top
  except ImportError as e:  # pragma: no cover - nltk ships with rouge_score
    raise ImportError(
        "rouge with use_stemmer=True needs nltk (pip install nltk), or pass "
        "use_stemmer=False") from e
  return porter.PorterStemmer()


@functools.lru_cache(maxsize=65536)
def _stem(token: str) -> str:
  return _porter().stem(token)


def rouge_tokenize(text: str, *, use_stemmer: bool = True) -> list[str]:
  """The `rouge_score` default tokenizer (see module docstring)."""
  text = _NON_ALPHANUM_RE.sub(" ", text.lower())
  tokens = _SPACES_RE.split(text)
  if use_stemmer:
    # Stemming only words longer than 3 characters mirrors ROUGE-1.5.5.
    tokens = [_stem(t) if len(t) > 3 else t for t in tokens]
  return [t for t in tokens if _VALID_TOKEN_RE.match(t)]


def _fmeasure(precision: float, recall: float) -> float:
  if precision + recall > 0:
    return 2 * precision * recall / (precision + recall)
  return 0.0


def lcs_length(a: Sequence, b: Sequence) -> int:
  """Length of the longest common subsequence (O(|a||b|) DP, O(|b|) memory)."""
  if not a or not b:
    return 0
  prev = [0] * (len(b) + 1)
  for x in a:
    cur = [0] * (len(b) + 1)
    for j, y in enumerate(b, start=1):
      cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
    prev = cur
  return prev[-1]


def rouge_l(prediction: str, reference: str, *,
            use_stemmer: bool = True) -> tuple[float, float, float]:
  """ROUGE-L `(precision, recall, fmeasure)` of `prediction` vs `reference`.

  recall = LCS / |reference tokens| is PMC's score s(x) (spec B.3).
  """
  ref = rouge_tokenize(reference, use_stemmer=use_stemmer)
  pred = rouge_tokenize(prediction, use_stemmer=use_stemmer)
  if not ref or not pred:
    return 0.0, 0.0, 0.0
  lcs = lcs_length(ref, pred)
  p, r = lcs / len(pred), lcs / len(ref)
  return p, r, _fmeasure(p, r)


def rouge_l_recall(prediction: str, reference: str, *,
                   use_stemmer: bool = True) -> float:
  return rouge_l(prediction, reference, use_stemmer=use_stemmer)[1]


def _ngrams(tokens: Sequence[str], n: int) -> collections.Counter:
  return collections.Counter(
      tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def rouge_n(prediction: str, reference: str, n: int, *,
            use_stemmer: bool = True) -> tuple[float, float, float]:
  """ROUGE-n `(precision, recall, fmeasure)` with clipped n-gram counts."""
  if n <= 0:
    raise ValueError(f"rouge_n needs n >= 1, got n={n}")
  ref = _ngrams(rouge_tokenize(reference, use_stemmer=use_stemmer), n)
  pred = _ngrams(rouge_tokenize(prediction, use_stemmer=use_stemmer), n)
  overlap = sum(min(c, pred[g]) for g, c in ref.items())
  p = overlap / max(sum(pred.values()), 1)
  r = overlap / max(sum(ref.values()), 1)
  return p, r, _fmeasure(p, r)


def rouge_1(prediction: str, reference: str, *, use_stemmer: bool = True):
  return rouge_n(prediction, reference, 1, use_stemmer=use_stemmer)


def rouge_2(prediction: str, reference: str, *, use_stemmer: bool = True):
  return rouge_n(prediction, reference, 2, use_stemmer=use_stemmer)


def levenshtein(a: Sequence, b: Sequence) -> int:
  """Edit distance (unit-cost insert, delete, substitute) over any sequences.

  Strings compare characters; lists of words give a word-level distance.
  """
  if len(a) < len(b):
    a, b = b, a
  prev = list(range(len(b) + 1))
  for i, x in enumerate(a, start=1):
    cur = [i] + [0] * len(b)
    for j, y in enumerate(b, start=1):
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
    prev = cur
  return prev[-1]


def normalized_levenshtein(a: Sequence, b: Sequence) -> float:
  """levenshtein / max(|a|, |b|) in [0, 1]; 0 for two empty sequences."""
  denom = max(len(a), len(b))
  return levenshtein(a, b) / denom if denom else 0.0


_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str, *, lowercase: bool = True,
                     strip_punctuation: bool = True,
                     strip_articles: bool = True) -> str:
  """SQuAD-style normalisation: NFKC, lowercase, drop punctuation/articles,
  collapse whitespace. Numbers keep their digits ("1,000" -> "1000")."""
  text = unicodedata.normalize("NFKC", text)
  if lowercase:
    text = text.lower()
  if strip_punctuation:
    text = text.translate(_PUNCT_TABLE)
  if strip_articles:
    text = _ARTICLES_RE.sub(" ", text)
  return " ".join(text.split())


def exact_match(prediction: str, reference: str, *,
                normalize: bool = True) -> bool:
  """True when the answers agree (after `normalize_answer` by default)."""
  if normalize:
    return normalize_answer(prediction) == normalize_answer(reference)
  return prediction == reference
