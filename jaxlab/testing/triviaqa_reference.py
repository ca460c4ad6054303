"""TriviaQA's official exact match, ported as the tests' reference.

`ref_exact_match(prediction, answer)` is what TriviaQA's evaluation script
computes for one question (`is_exact_match`); `jaxlab.evals.qa_match` is
checked against it (tests/evals/qa_match_test.py) and the B-calibration
real-run tests grade their saved samples with it.
"""

import re
import string


# --- Reference: a port of github.com/mandarjoshi90/triviaqa
# evaluation/triviaqa_evaluation.py (commit ca43b58, "Add license note."):
# normalize_answer, exact_match_score, get_ground_truths, is_exact_match.
# The answer object is the JSON release's ('NormalizedAliases', optional
# 'HumanAnswers'); the Hub's mandarjoshi/trivia_qa names the same list
# `answer.normalized_aliases` (`ref_answer_object` maps it).
def _ref_normalize_answer(s):
  """Lower text and remove punctuation, articles and extra whitespace."""

  def remove_articles(text):
    return re.sub(r"\b(a|an|the)\b", " ", text)

  def white_space_fix(text):
    return " ".join(text.split())

  def handle_punc(text):
    exclude = set(string.punctuation + "".join([u"‘", u"’", u"´", u"`"]))
    return "".join(ch if ch not in exclude else " " for ch in text)

  def lower(text):
    return text.lower()

  def replace_underscore(text):
    return text.replace("_", " ")

  return white_space_fix(remove_articles(handle_punc(lower(
      replace_underscore(s))))).strip()


def _ref_exact_match_score(prediction, ground_truth):
  return _ref_normalize_answer(prediction) == _ref_normalize_answer(
      ground_truth)


def _ref_get_ground_truths(answer):
  return answer["NormalizedAliases"] + [
      _ref_normalize_answer(ans) for ans in answer.get("HumanAnswers", [])]


def _ref_is_exact_match(answer_object, prediction):
  ground_truths = _ref_get_ground_truths(answer_object)
  for ground_truth in ground_truths:
    if _ref_exact_match_score(prediction, ground_truth):
      return True
  return False
# --- end of the reference port.


def ref_normalize(text: str) -> str:
  """TriviaQA's `normalize_answer`."""
  return _ref_normalize_answer(text)


def ref_answer_object(normalized_aliases) -> dict:
  """The evaluation script's answer object of a question whose ground
  truths are `normalized_aliases` (the Hub row's `answer.normalized_aliases`;
  for SimpleQA, the normalised `answer`)."""
  return {"NormalizedAliases": list(normalized_aliases)}


def ref_exact_match(prediction: str, normalized_aliases) -> bool:
  """`is_exact_match` of one prediction against those ground truths."""
  return _ref_is_exact_match(ref_answer_object(normalized_aliases),
                             prediction)
