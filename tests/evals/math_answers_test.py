r"""MATH answer checking: math-verify (the PyPI package is the reference) and
the harness's boxed-answer extraction (ported below)."""

from absl.testing import absltest
from absl.testing import parameterized
import math_verify
import numpy as np

from jaxlab.evals import math_answers


# --- Reference: lm-evaluation-harness (EleutherAI),
# lm_eval/tasks/hendrycks_math/utils.py `last_boxed_only_string` and
# `remove_boxed` (as in hendrycks/math modeling/math_equivalence.py).
def _ref_last_boxed_only_string(string):
  idx = string.rfind("\\boxed")
  if "\\boxed " in string:
    return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
  if idx < 0:
    idx = string.rfind("\\fbox")
    if idx < 0:
      return None
  i = idx
  right_brace_idx = None
  num_left_braces_open = 0
  while i < len(string):
    if string[i] == "{":
      num_left_braces_open += 1
    if string[i] == "}":
      num_left_braces_open -= 1
      if num_left_braces_open == 0:
        right_brace_idx = i
        break
    i += 1
  return None if right_brace_idx is None else string[idx:right_brace_idx + 1]


def _ref_remove_boxed(s):
  if "\\boxed " in s:
    left = "\\boxed "
    assert s[:len(left)] == left
    return s[len(left):]
  left = "\\boxed{"
  assert s[:len(left)] == left
  assert s[-1] == "}"
  return s[len(left):-1]


# MATH-style solutions (hendrycks/competition_math `solution` fields are
# LaTeX prose ending in a boxed answer).
SOLUTIONS = [
    r"Half of $1$ is $\frac{1}{2}$, so the answer is $\boxed{\frac{1}{2}}$.",
    r"The roots are $x=2$ and $x=3$, so the sum is $\boxed{5}$.",
    r"We have $\sqrt{8} = 2\sqrt{2}$. Thus $\boxed{2\sqrt{2}}$.",
    r"The point is $\boxed{(1, -2)}$.",
    r"There are $\boxed{\dfrac{3}{4}}$ of the marbles left.",
    r"So it is $\boxed 7$ exactly.",
    r"Nested: $\boxed{\frac{\sqrt{3}}{2}}$ and done.",
]


class MathAnswersTest(parameterized.TestCase):

  def test_last_boxed_equals_the_harness(self):
    for s in SOLUTIONS:
      self.assertEqual(math_answers.last_boxed(s), _ref_remove_boxed(
          _ref_last_boxed_only_string(s)), s)
    self.assertIsNone(math_answers.last_boxed("no box here"))
    self.assertIsNone(_ref_last_boxed_only_string("no box here"))

  @parameterized.parameters(
      # (completion, solution index, correct by hand)
      (r"The answer is $\boxed{0.5}$.", 0, True),
      (r"so we get 1/2", 0, True),
      (r"The answer is $\boxed{\frac{1}{3}}$.", 0, False),
      (r"The sum is $\boxed{5}$", 1, True),
      (r"The sum is 6.", 1, False),
      (r"$\boxed{\sqrt{8}}$", 2, True),
      (r"$\boxed{(1,-2)}$", 3, True),
      (r"$\boxed{(-2,1)}$", 3, False),
      (r"$\boxed{0.75}$", 4, True),
      (r"$\boxed{7}$", 5, True),
      (r"no answer at all", 1, False),
  )
  def test_is_correct_equals_math_verify_and_hand_labels(self, completion, i,
                                                         want):
    got = math_answers.is_correct(completion, SOLUTIONS[i])
    ref = math_verify.verify(math_verify.parse(SOLUTIONS[i]),
                             math_verify.parse(completion))
    self.assertEqual(got, bool(ref))
    self.assertEqual(got, want)

  def test_score_and_errors(self):
    got = math_answers.score([r"\boxed{5}", "7", r"\boxed{0.5}"],
                             [SOLUTIONS[1], SOLUTIONS[1], SOLUTIONS[0]])
    np.testing.assert_array_equal(got, [1.0, 0.0, 1.0])
    with self.assertRaisesRegex(ValueError, "2 completions for 1 solutions"):
      math_answers.score(["1", "2"], [SOLUTIONS[1]])
    with self.assertRaisesRegex(ValueError, "boxed"):
      math_answers.is_correct("5", "no parseable answer here")

  def test_answer_class_and_equivalence_are_math_verifys(self):
    # OpenMathInstruct-2's expected_answer is the bare answer; boxed, it is
    # what math-verify parses as the gold.
    self.assertEqual(math_answers.boxed("\\frac{37}{256}"),
                     "\\boxed{\\frac{37}{256}}")
    self.assertTrue(math_answers.is_correct(
        "so p = 37/256", math_answers.boxed("\\frac{37}{256}")))
    for text in ("It is $\\frac{1}{2}$.", "x = 0.5", "\\boxed{18}", "none"):
      got = math_answers.answer_class(text)
      want = math_verify.parse(text)
      if not want:
        self.assertIsNone(got)
        continue
      self.assertEqual(got[0], str(want[-1]))
      self.assertEqual(got[1], want)
    half = math_answers.answer_class("It is $\\frac{1}{2}$.")[1]
    self.assertTrue(math_answers.equivalent(
        half, math_answers.answer_class("x = 0.5")[1]))
    self.assertFalse(math_answers.equivalent(
        half, math_answers.answer_class("\\boxed{18}")[1]))


if __name__ == "__main__":
  absltest.main()
