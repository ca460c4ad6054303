"""LM-prompted entailment clustering and the SQuAD accuracy of paper J's
real run, against ports of the semantic-entropy code and evaluate's
squad_v2 (below)."""

import collections
import re
import string
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.evals import uncertainty as unc


# --- Reference 1: the SE code (github.com/jlko/semantic_uncertainty, commit
# b48e3c1, uncertainty/uncertainty_measures/semantic_entropy.py):
# EntailmentLlama.equivalence_prompt, EntailmentLLM.check_implication's
# response reading, get_semantic_ids.
def _ref_prompt(text1, text2, question):
  prompt = f"""We are evaluating answers to the question \"{question}\"\n"""
  prompt += "Here are two possible answers:\n"
  prompt += f"Possible Answer 1: {text1}\nPossible Answer 2: {text2}\n"
  prompt += ("Does Possible Answer 1 semantically entail Possible Answer 2? "
             "Respond only with entailment, contradiction, or neutral.\n")
  prompt += "Response:"
  return prompt


def _ref_read(response):
  binary_response = response.lower()[:30]
  if "entailment" in binary_response:
    return 2
  elif "neutral" in binary_response:
    return 1
  elif "contradiction" in binary_response:
    return 0
  return 1


def _ref_semantic_ids(strings_list, check, strict_entailment=False):
  def are_equivalent(text1, text2):
    i1, i2 = check(text1, text2), check(text2, text1)
    if strict_entailment:
      return i1 == 2 and i2 == 2
    return 0 not in [i1, i2] and [1, 1] != [i1, i2]
  ids = [-1] * len(strings_list)
  next_id = 0
  for i, s1 in enumerate(strings_list):
    if ids[i] == -1:
      ids[i] = next_id
      for j in range(i + 1, len(strings_list)):
        if are_equivalent(s1, strings_list[j]):
          ids[j] = next_id
      next_id += 1
  return ids


# --- Reference 2: evaluate's squad_v2 metric (compute_score.py:
# normalize_answer, get_tokens, compute_f1) and the SE code's "squad"
# accuracy (uncertainty/utils/utils.py get_metric: f1 >= 50).
def _ref_normalize_answer(s):
  def remove_articles(text):
    regex = re.compile(r"\b(a|an|the)\b", re.UNICODE)
    return re.sub(regex, " ", text)

  def white_space_fix(text):
    return " ".join(text.split())

  def remove_punc(text):
    exclude = set(string.punctuation)
    return "".join(ch for ch in text if ch not in exclude)

  return white_space_fix(remove_articles(remove_punc(s.lower())))


def _ref_compute_f1(a_gold, a_pred):
  gold_toks = _ref_normalize_answer(a_gold).split() if a_gold else []
  pred_toks = _ref_normalize_answer(a_pred).split() if a_pred else []
  common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
  num_same = sum(common.values())
  if len(gold_toks) == 0 or len(pred_toks) == 0:
    return int(gold_toks == pred_toks)
  if num_same == 0:
    return 0
  precision = 1.0 * num_same / len(pred_toks)
  recall = 1.0 * num_same / len(gold_toks)
  return (2 * precision * recall) / (precision + recall)


def _ref_correct(pred, golds):
  golds = [a for a in golds if _ref_normalize_answer(a)] or [""]
  f1 = max(_ref_compute_f1(a, pred) for a in golds) * 100
  return 1.0 if f1 >= 50.0 else 0.0


class SquadAccuracyTest(parameterized.TestCase):

  @parameterized.parameters(
      ("Paris", ["Paris"]), ("the city of Paris", ["Paris"]),
      ("Charles Darwin", ["Darwin"]), ("Charles Robert Darwin", ["Darwin"]),
      ("Mars.", ["Planet Mars", "Mars"]), ("Venus", ["Mars"]),
      ("", ["Mars"]), ("", []), ("New York City", ["New York"]),
      ("a b c d", ["a"]), ("8", ["8"]), ("8.0", ["8"]))
  def test_equals_squad_v2(self, pred, golds):
    for g in golds:
      self.assertAlmostEqual(unc.squad_f1(pred, g), _ref_compute_f1(g, pred))
    self.assertEqual(unc.squad_correct(pred, golds),
                     bool(_ref_correct(pred, golds)))

  def test_by_hand(self):
    # "Charles Robert Darwin" vs "Darwin": p = 1/3, r = 1, F1 = 0.5 -> right.
    self.assertAlmostEqual(unc.squad_f1("Charles Robert Darwin", "Darwin"),
                           0.5)
    self.assertTrue(unc.squad_correct("Charles Robert Darwin", ["Darwin"]))
    self.assertFalse(unc.squad_correct("a b c d Darwin", ["Darwin"]))


class LMEntailmentTest(absltest.TestCase):

  def test_prompt_and_reading_equal_the_se_code(self):
    self.assertEqual(unc.entailment_prompt("Paris", "paris", "Capital?"),
                     _ref_prompt("Paris", "paris", "Capital?"))
    for r in ("Entailment.", " neutral", "CONTRADICTION!", "I am not sure",
              "contradiction, not entailment", "x" * 31 + "entailment"):
      self.assertEqual(unc.parse_entailment(r), _ref_read(r), r)

  def test_clusters_equal_the_se_code_with_a_scripted_lm(self):
    # A scripted "LM": entailment when both answers name the same city
    # (first word, lowercased), contradiction for different cities,
    # neutral when either is "dunno", unreadable text for "???".
    def respond(prompt):
      m = re.search(r"Possible Answer 1: (.*)\nPossible Answer 2: (.*)\n",
                    prompt)
      a, b = (re.match(r"[\w?]+", x.lower()).group() for x in m.groups())
      if "???" in (a, b):
        return "hmm"
      if "dunno" in (a, b):
        return "Neutral"
      return "Entailment" if a == b else "Contradiction"

    calls = []

    def fake_generate(model, tokenizer, prompts, **kwargs):
      del model, tokenizer
      calls.append((len(prompts), kwargs["temperature"],
                    kwargs["max_new_tokens"]))
      return [respond(p) for p in prompts], np.zeros(len(prompts))

    answers = [["Paris", "paris, France", "Lyon", "dunno", "Paris.", "???"],
               ["Rome", "Rome", "rome city", "Milan", "Milan", "Rome"]]
    questions = ["Capital of France?", "Capital of Italy?"]
    ent = unc.LMEntailment(None, None, max_new_tokens=30)
    with mock.patch.object(unc, "generate_answers", fake_generate):
      for strict in (False, True):
        got = unc.lm_semantic_ids(answers, questions, ent, strict=strict)
        for q, ans, ids in zip(questions, answers, got):
          ref = _ref_semantic_ids(
              ans, lambda a, b, q=q: _ref_read(respond(_ref_prompt(a, b, q))),
              strict_entailment=strict)
          self.assertEqual(ids.tolist(), ref)
    # By hand (non-strict): Paris x3 one cluster; Lyon; dunno; ???.
    self.assertEqual(got.shape, (2, 6))
    with mock.patch.object(unc, "generate_answers", fake_generate):
      ids = unc.lm_semantic_ids(answers, questions, ent)
    self.assertEqual(ids.tolist(), [[0, 0, 1, 2, 0, 3], [0, 0, 0, 1, 1, 0]])
    # One batched pass of every distinct ordered pair, greedy, 30 tokens;
    # later calls read the cache.
    n_pairs = len({(a, b, q) for q, ans in zip(questions, answers)
                   for i, a in enumerate(ans) for j, b in enumerate(ans)
                   if i != j})
    self.assertEqual(calls, [(n_pairs, 0.0, 30)])


if __name__ == "__main__":
  absltest.main()
