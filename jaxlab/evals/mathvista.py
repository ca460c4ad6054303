"""MathVista's answer matching (multiple choice and numeric), rule-based.

    ok = mathvista.is_correct("<think>..</think><answer>B</answer>", row)
    acc = mathvista.accuracy(replies, rows)

MathVista (github.com/lupantech/MathVista, commit 53d5258) scores a reply
in two steps:

1. `evaluation/extract_answer.py` `extract_answer`: the reply itself when
   it is one of the `choices` (multiple choice), `str(int(reply))` /
   `str(float(reply))` when it parses as the `answer_type`, else the
   quick rule `The answer is "(.*)"\\.`, else a GPT extraction prompt.
2. `evaluation/calculate_score.py` `normalize_extracted_answer` then
   `safe_equal(prediction, answer)`: multiple choice maps a letter "(B)" /
   "B" to that choice, anything else to the choice at the smallest
   Levenshtein distance; `integer` -> `str(int(float(x)))`, `float` ->
   `str(round(float(x), precision))`, `list` -> `str(x)`; unparsable
   -> None (never equal).

SophiaVL-R1 replies `<think>...</think><answer>...</answer>` (its system
prompt, README "Evaluation"), so the extraction here reads the
`<answer>` content first (the last one; the whole reply when there is
none) and then applies step 1's rules; the GPT extraction of step 1 is
not run (a reply no rule reads extracts to its own stripped text, which
step 2 then normalises). Step 2 is MathVista's, line for line.

Rows are MathVista's layout (the Hub's `AI4Math/MathVista` `testmini` /
`test` splits; README "Data Format"): `question`, `choices` (list or
None), `answer` (str), `question_type` ("multi_choice" / "free_form"),
`answer_type` ("text" / "integer" / "float" / "list"), `precision`,
`unit`, `pid`, `query` (the prompt MathVista's evaluation feeds the
model), `image` (a path) / `decoded_image` (the image).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from jaxlab.evals import text as text_metrics

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def answer_text(reply: str) -> str:
  """The content of the reply's last `<answer>...</answer>` (stripped), or
  the whole stripped reply when it has none."""
  found = _ANSWER_TAG.findall(reply or "")
  return (found[-1] if found else (reply or "")).strip()


def extract_answer(reply: str, row: Mapping[str, Any]) -> str:
  """MathVista's `extract_answer` rules on the reply's answer text (no GPT
  step: an unread reply extracts to itself)."""
  response = answer_text(reply)
  if response == "":
    return ""
  choices = row.get("choices")
  if row["question_type"] == "multi_choice" and choices and (
      response in choices):
    return response
  if row["answer_type"] == "integer":
    try:
      return str(int(response))
    except ValueError:
      pass
  if row["answer_type"] == "float":
    try:
      return str(float(response))
    except ValueError:
      pass
  m = re.search(r'The answer is "(.*)"\.', response)
  if m:
    return m.group(1)
  return response


def _most_similar(prediction: str, choices: Sequence[str]) -> str:
  """`get_most_similar`: the first choice at the least Levenshtein
  distance."""
  d = [text_metrics.levenshtein(prediction, c) for c in choices]
  return choices[d.index(min(d))]


def normalize_extracted_answer(extraction: Any, choices, question_type: str,
                               answer_type: str, precision) -> str | None:
  """`calculate_score.normalize_extracted_answer` (empty extractions kept,
  MathVista's default)."""
  if question_type == "multi_choice":
    extraction = (extraction.strip() if isinstance(extraction, str)
                  else str(extraction))
    letter = re.findall(r"\(([a-zA-Z])\)", extraction)
    if letter:
      extraction = letter[0].upper()
    letters = [chr(ord("A") + i) for i in range(len(choices))]
    if extraction in letters:
      return choices[letters.index(extraction)]
    return _most_similar(extraction, list(choices))
  try:
    if answer_type == "integer":
      return str(int(float(extraction)))
    if answer_type == "float":
      return str(round(float(extraction), int(precision)))
    if answer_type == "list":
      return str(extraction)
  except (TypeError, ValueError, OverflowError):
    return None
  return None


def prediction(reply: str, row: Mapping[str, Any]) -> str | None:
  """The normalised prediction MathVista compares with `row["answer"]`."""
  return normalize_extracted_answer(
      extract_answer(reply, row), row.get("choices"), row["question_type"],
      row["answer_type"], row.get("precision"))


def is_correct(reply: str, row: Mapping[str, Any]) -> bool:
  """`safe_equal(prediction, answer)`."""
  return prediction(reply, row) == row["answer"]


def accuracy(replies: Sequence[str], rows: Sequence[Mapping[str, Any]]
             ) -> float:
  """Fraction of replies MathVista scores correct (NaN for no rows)."""
  if len(replies) != len(rows):
    raise ValueError(f"{len(replies)} replies for {len(rows)} rows")
  if not rows:
    return float("nan")
  return sum(is_correct(r, row) for r, row in zip(replies, rows)) / len(rows)
