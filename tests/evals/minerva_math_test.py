r"""Parity of jaxlab.evals.minerva_math with lm-evaluation-harness's scorer.

The reference (jaxlab/testing/minerva_reference.py) is
lm_eval/tasks/minerva_math/utils.py of
lm-evaluation-harness v0.4.8 (6d2abda), the version DPad pins (its
requirements.txt at 461b36e): doc_to_text, the few-shot context of
lm_eval/api/samplers.py::ContextSampler.get_context (target " " + solution,
then "\n\n"), last_boxed_only_string, remove_boxed,
normalize_final_answer, get_unnormalized_answer, is_equiv and
process_results, ported short. Its LaTeX parser is an argument: sympy's
`parse_latex` needs the ANTLR 4.11 runtime, which the test environment
lacks (the math extra brings 4.13 for math-verify), so `SYMPY_VERDICTS`
records what the harness's own `is_equiv` (sympy 1.14 `parse_latex` under
antlr4-python3-runtime 4.11.0, installed to a side directory once) gave on
`PAIRS`; jaxlab's fallback parser must give the same.
Rows are written in the hendrycks_math layout (EleutherAI/hendrycks_math
configs, columns problem, level, type, solution).
"""

from absl.testing import absltest

from jaxlab.evals import minerva_math as mm
from jaxlab.testing.minerva_reference import (  # pylint: disable=g-importing-member
    ref_context, ref_get_unnormalized_answer, ref_is_equiv,
    ref_last_boxed_only_string, ref_normalize_final_answer,
    ref_process_results, ref_remove_boxed)


PAIRS = [("\\frac{1}{2}", "0.5"), ("\\frac{1}{2}", "\\frac{2}{4}"),
         ("24", "24"), ("24", "25"), ("-\\frac{2}{3}", "-\\frac{2}{3}"),
         ("\\sqrt{2}", "\\frac{2}{\\sqrt{2}}"), ("[2,5)", "[2,5)"),
         ("x^2+1", "1+x^2"), ("\\pi", "3.14159"), ("[invalidanswer]", "5"),
         ("16", "16.0"), ("10\\%", "10"), ("2\\sqrt{3}", "\\sqrt{12}"),
         ("(1,2)", "(1,2)"), ("3", "\\frac{9}{3}"), ("1000", "1000"),
         ("\\frac{a}{b}", "a/b"), ("x", "y"), ("0", "")]
SYMPY_VERDICTS = [True, True, True, False, True, True, False, True, False,
                  False, True, False, True, False, True, True, True, False,
                  False]

ROWS = [   # hendrycks_math layout
    {"problem": "What is $\\frac{1}{4} + \\frac{1}{4}$?", "level": "Level 1",
     "type": "Prealgebra",
     "solution": "We add: $\\frac14+\\frac14 = \\boxed{\\frac{1}{2}}$."},
    {"problem": "How many feet are in 2 yards?", "level": "Level 1",
     "type": "Prealgebra",
     "solution": "Each yard is 3 feet, so $2\\cdot 3=\\boxed{6\\text{ "
                 "feet}}$."},
    {"problem": "Simplify $\\sqrt{12}$.", "level": "Level 2",
     "type": "Algebra",
     "solution": "$\\sqrt{12}=\\sqrt{4\\cdot 3}=\\boxed{2\\sqrt{3}}$."},
    {"problem": "Solve $x+1=1001$.", "level": "Level 1", "type": "Algebra",
     "solution": "Subtracting, $x = \\boxed{1,000}$."},
]
COMPLETIONS = [
    "$\\frac14+\\frac14=\\frac12$.\nFinal Answer: The final answer is "
    "$\\frac{1}{2}$. I hope it is correct.",
    "Final Answer: The final answer is $0.5$. I hope it is correct.",
    "The sum is $\\boxed{0.5}$.",                       # no Final Answer
    "Final Answer: The final answer is $6$ feet. I hope it is correct.",
    "Final Answer: The final answer is $\\sqrt{12}$. I hope it is correct.",
    "Final Answer: The final answer is $1,000$. I hope it is correct.",
    "Final Answer: The final answer is $7$. I hope it is correct.",
    "I do not know.",
]


class MinervaMathTest(absltest.TestCase):

  def test_prompt_equals_harness_context(self):
    for n in (0, 1, 4):
      self.assertEqual(mm.prompt(ROWS[0]["problem"], n),
                       ref_context(ROWS[0]["problem"], mm.FEWSHOT[:n]))
    self.assertTrue(mm.prompt("p").startswith(
        "Problem:\nFind the domain of the expression  $\\frac{\\sqrt{x-2}}"))
    self.assertTrue(mm.prompt("p").endswith("correct.\n\nProblem:\np\n\n"
                                            "Solution:"))
    with self.assertRaisesRegex(ValueError, "4 few-shot"):
      mm.prompt("p", 5)

  def test_extraction_and_normalisation(self):
    for row in ROWS:
      want = ref_normalize_final_answer(
          ref_remove_boxed(ref_last_boxed_only_string(row["solution"])))
      self.assertEqual(mm.answer(row["solution"]), want)
    self.assertEqual([mm.answer(r["solution"]) for r in ROWS],
                     ["\\frac{1}{2}", "6", "2\\sqrt{3}", "1000"])
    for c in COMPLETIONS + ["Final Answer: The final answer is 5"]:
      self.assertEqual(mm.get_unnormalized_answer(c),
                       ref_get_unnormalized_answer(c))
      u = mm.get_unnormalized_answer(c)
      self.assertEqual(mm.normalize_final_answer(u),
                       ref_normalize_final_answer(u))
    with self.assertRaisesRegex(ValueError, "no \\\\boxed"):
      mm.answer("The answer is 5.")

  def test_is_equiv_matches_the_harness_sympy_parser(self):
    got = [mm.is_equiv(a, b) for a, b in PAIRS]
    self.assertEqual(got, SYMPY_VERDICTS)
    _, parse = mm._parser()
    self.assertEqual(got, [bool(ref_is_equiv(a, b, parse)) for a, b in PAIRS])

  def test_score_equals_process_results(self):
    _, parse = mm._parser()
    for row in ROWS:
      for c in COMPLETIONS:
        want = ref_process_results(row, [c], parse)
        got = mm.score(c, row["solution"])
        self.assertEqual(got, {k: float(v) for k, v in want.items()},
                         msg=(row["solution"], c))
    # By hand on row 0: "\frac{1}{2}" and "0.5" are exact matches; the
    # boxed 0.5 without "Final Answer" only under math-verify.
    s = ROWS[0]["solution"]
    self.assertEqual([mm.score(c, s) for c in COMPLETIONS[:3]],
                     [{"exact_match": 1.0, "math_verify": 1.0}] * 2
                     + [{"exact_match": 0.0, "math_verify": 1.0}])
    all_ = mm.score_all(COMPLETIONS[3:6], [r["solution"] for r in ROWS[1:]])
    self.assertEqual(all_["exact_match"].tolist(), [1.0, 1.0, 1.0])
    with self.assertRaisesRegex(ValueError, "2 completions for 1"):
      mm.score_all(["a", "b"], ["\\boxed{1}"])


if __name__ == "__main__":
  absltest.main()
