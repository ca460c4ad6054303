"""Short-answer QA scoring: TriviaQA's normalised exact match.

    qa_match.normalize("The Beatles!")               # "beatles"
    qa_match.exact_match("the beatles.", ["Beatles"])  # True

`normalize` is TriviaQA's official `normalize_answer`
(github.com/mandarjoshi90/triviaqa `evaluation/triviaqa_evaluation.py`,
commit ca43b58): "_" -> " ", lowercase, every ASCII punctuation character
and the quotes ‘ ’ ´ ` replaced by a space (SQuAD's v1.1 script deletes
them instead: `jaxlab.evals.uncertainty.squad_normalize`), the articles
a / an / the removed on word boundaries, whitespace collapsed. Its
`exact_match_score` compares the normalised prediction and ground truth,
`metric_max_over_ground_truths` takes the best over the ground truths
(TriviaQA's are the row's `NormalizedAliases`; on the Hub,
mandarjoshi/trivia_qa's `answer.normalized_aliases`). `exact_match` is
that maximum.

`answer_text` is the short answer a reply gives, before normalisation:
the reply up to the first stop string (`jaxlab.evals.gsm8k.UNTIL`), its
first non-empty line, stripped. B-calibration (paper N) on TriviaQA and
SimpleQA uses `answer_class` = normalize(answer_text) as the collapsing
function B: two replies are one class when their normalised answers are
equal. (The paper has an LLM extract the short answer and judge it
[notes]; SimpleQA's own grader is an LLM judge; here both are the
normalised exact match [deviation].)
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from jaxlab.evals import gsm8k

_EXCLUDE = frozenset(string.punctuation + "‘’´`")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
  """TriviaQA's `normalize_answer` (see the module docstring)."""
  text = text.replace("_", " ").lower()
  text = "".join(" " if ch in _EXCLUDE else ch for ch in text)
  return " ".join(_ARTICLES.sub(" ", text).split()).strip()


def exact_match(prediction: str, references: Iterable[str]) -> bool:
  """TriviaQA's exact match, the best over `references`: normalize(
  prediction) == normalize(reference) for one of them."""
  pred = normalize(prediction)
  return any(pred == normalize(r) for r in references)


def answer_text(completion: str) -> str:
  """The reply's short answer: up to the first `gsm8k.UNTIL` stop string,
  its first non-empty line, stripped ('' when there is none)."""
  lines = [x.strip() for x in gsm8k.cut(completion).split("\n")]
  return next((x for x in lines if x), "")


def answer_class(completion: str) -> str | None:
  """B of a reply: its normalised short answer (None when empty)."""
  return normalize(answer_text(completion)) or None


def is_correct(completion: str, references: Iterable[str]) -> bool:
  """Whether a reply's short answer exactly matches one reference."""
  return exact_match(answer_text(completion), references)
