"""Text-overlap metrics: ROUGE-1/2/L, edit distances, normalised exact match.

One implementation of each, from a maintained library:

* ROUGE is Google's `rouge_score` package (Lin 2004 as re-implemented for
  the ROUGE-1.5.5 numbers papers report; PMC's reward and metrics use
  ROUGE-L *recall*, spec B.3 and B.10). Its default tokenizer lowercases,
  turns every run of non-[a-z0-9] into a space, splits on whitespace,
  Porter-stems (NLTK; memoised here, same stems) tokens longer than 3
  characters when `use_stemmer`, and drops empty tokens.
  ROUGE-L: P = LCS / |prediction|, R = LCS / |reference|, F = 2PR / (P + R),
  (0, 0, 0) when either side has no tokens; ROUGE-n: clipped n-gram overlap
  over max(count, 1).
* Edit distances (Levenshtein, unit costs) and the longest common
  subsequence are `rapidfuzz.distance`, over strings (characters) or any
  sequences of hashable items (e.g. word lists).

Argument order is ours throughout: `(prediction, reference)`; `rouge_score`
itself takes `(target, prediction)`.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections.abc import Sequence

from rapidfuzz.distance import LCSseq
from rapidfuzz.distance import Levenshtein

# rouge_score (and NLTK, which it imports) load on the first ROUGE call, not
# with this module: NLTK's import takes seconds, and every process that
# registers the trainer losses imports this module (via the PMC objective),
# ROUGE or not.

# rouge_score accepts "rouge1" ... "rouge9" (and "rougeL", "rougeLsum").
_MAX_ROUGE_N = 9


class _MemoStemmer:
  """NLTK's Porter stemmer (the one rouge_score uses) with a memo of stems.

  Stemming dominates a ROUGE call and a reward loop sees the same words
  again and again (jaxlab/experiments/bench/text_metrics.py: about 3x per call).
  """

  def __init__(self):
    from nltk.stem import porter  # pylint: disable=g-import-not-at-top
    self.stem = functools.lru_cache(maxsize=1 << 16)(
        porter.PorterStemmer().stem)


@functools.lru_cache(maxsize=2)
def _tokenizer(use_stemmer: bool):
  """A `rouge_score.tokenizers.Tokenizer` running `rouge_score.tokenize.
  tokenize` (its default tokenizer's function), with the memoised stemmer."""
  # pylint: disable=g-import-not-at-top
  from rouge_score import tokenize as rouge_tokenize_lib
  from rouge_score import tokenizers
  # pylint: enable=g-import-not-at-top

  class _Tokenizer(tokenizers.Tokenizer):

    def __init__(self):
      self._stemmer = _MemoStemmer() if use_stemmer else None

    def tokenize(self, text: str) -> list[str]:
      return rouge_tokenize_lib.tokenize(text, self._stemmer)

  return _Tokenizer()


@functools.lru_cache(maxsize=None)
def _scorer(rouge_type: str, use_stemmer: bool):
  """`rouge_score.rouge_scorer.RougeScorer` of one type, our tokenizer."""
  from rouge_score import rouge_scorer  # pylint: disable=g-import-not-at-top
  return rouge_scorer.RougeScorer([rouge_type],
                                  tokenizer=_tokenizer(use_stemmer))


def rouge_tokenize(text: str, *, use_stemmer: bool = True) -> list[str]:
  """`rouge_score`'s default tokenization (see the module docstring)."""
  return _tokenizer(use_stemmer).tokenize(text)


def _score(rouge_type: str, prediction: str, reference: str,
           use_stemmer: bool) -> tuple[float, float, float]:
  s = _scorer(rouge_type, use_stemmer).score(reference, prediction)[rouge_type]
  return s.precision, s.recall, s.fmeasure


def lcs_length(a: Sequence, b: Sequence) -> int:
  """Length of the longest common subsequence of two sequences."""
  return int(LCSseq.similarity(a, b))


def rouge_l(prediction: str, reference: str, *,
            use_stemmer: bool = True) -> tuple[float, float, float]:
  """ROUGE-L `(precision, recall, fmeasure)` of `prediction` vs `reference`.

  recall = LCS / |reference tokens| is PMC's score s(x) (spec B.3).
  """
  return _score("rougeL", prediction, reference, use_stemmer)


def rouge_l_recall(prediction: str, reference: str, *,
                   use_stemmer: bool = True) -> float:
  return rouge_l(prediction, reference, use_stemmer=use_stemmer)[1]


def rouge_n(prediction: str, reference: str, n: int, *,
            use_stemmer: bool = True) -> tuple[float, float, float]:
  """ROUGE-n `(precision, recall, fmeasure)` with clipped n-gram counts."""
  if not 1 <= n <= _MAX_ROUGE_N:
    raise ValueError(f"rouge_n needs 1 <= n <= {_MAX_ROUGE_N} (rouge_score's "
                     f"range), got n={n}")
  return _score(f"rouge{n}", prediction, reference, use_stemmer)


def rouge_1(prediction: str, reference: str, *, use_stemmer: bool = True):
  return rouge_n(prediction, reference, 1, use_stemmer=use_stemmer)


def rouge_2(prediction: str, reference: str, *, use_stemmer: bool = True):
  return rouge_n(prediction, reference, 2, use_stemmer=use_stemmer)


def levenshtein(a: Sequence, b: Sequence) -> int:
  """Edit distance (unit-cost insert, delete, substitute) over any sequences.

  Strings compare characters (code points); lists of words give a
  word-level distance.
  """
  return int(Levenshtein.distance(a, b))


def normalized_levenshtein(a: Sequence, b: Sequence) -> float:
  """levenshtein / max(|a|, |b|) in [0, 1]; 0 for two empty sequences."""
  return float(Levenshtein.normalized_distance(a, b))


def edit_similarity(a: Sequence, b: Sequence) -> float:
  """1 - levenshtein(a, b) / max(|a|, |b|); 1 for two empty sequences."""
  return float(Levenshtein.normalized_similarity(a, b))


def dedup_units(units: Sequence) -> list:
  """Collapses runs of a repeated unit: [5, 5, 7, 5] -> [5, 7, 5]."""
  return [u for i, u in enumerate(units) if i == 0 or u != units[i - 1]]


def unit_edit_distance(clean: Sequence[Sequence], noisy: Sequence[Sequence],
                       *, dedup: bool = False) -> float:
  """UED% (Messica & Adi 2024; StableToken spec E.6), pooled over utterances.

  100 * sum_utt levenshtein(u_clean, u_noisy) / sum_utt |u_clean|: total
  token inconsistencies over total reference tokens. Units are raw
  sequences (e.g. 25 Hz token ids) unless `dedup` collapses repeats first.
  """
  if len(clean) != len(noisy):
    raise ValueError(f"unit_edit_distance: {len(clean)} clean vs "
                     f"{len(noisy)} noisy utterances")
  errors = total = 0
  for c, n in zip(clean, noisy):
    c, n = [int(x) for x in c], [int(x) for x in n]
    if dedup:
      c, n = dedup_units(c), dedup_units(n)
    errors += levenshtein(c, n)
    total += len(c)
  if total == 0:
    raise ValueError("unit_edit_distance: the clean units are all empty")
  return 100.0 * errors / total


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]
                    ) -> float:
  """Corpus WER as `jiwer.wer` computes it (its default transform: words
  split on whitespace): sum_utt word-levenshtein(ref, hyp) / sum_utt
  |ref words| = (S + D + I) / (S + D + C), a fraction (not %)."""
  if len(references) != len(hypotheses):
    raise ValueError(f"word_error_rate: {len(references)} references vs "
                     f"{len(hypotheses)} hypotheses")
  errors = total = 0
  for ref, hyp in zip(references, hypotheses):
    r, h = ref.split(), hyp.split()
    errors += levenshtein(r, h)
    total += len(r)
  if total == 0:
    raise ValueError("word_error_rate: the references are all empty")
  return errors / total


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
