r"""MATH scored as lm-evaluation-harness's `minerva_math` task does.

    minerva_math.prompt(problem, num_fewshot=4)
    minerva_math.score(completion, solution)  # {"exact_match", "math_verify"}

The harness's `minerva_math` group (lm_eval 0.4.8, the version the DPad
repository pins; EleutherAI/lm-evaluation-harness tag v0.4.8 = 6d2abda,
lm_eval/tasks/minerva_math/{minerva_math_algebra.yaml,utils.py} and
lm_eval/tasks/benchmarks/minerva_math.yaml): seven tasks over
`EleutherAI/hendrycks_math` (configs algebra, counting_and_probability,
geometry, intermediate_algebra, number_theory, prealgebra, precalculus;
splits train / test; columns `problem`, `level`, `type`, `solution`), the
group's metrics the size-weighted mean over them (= the mean over all rows).

* Prompt (`doc_to_text`): "Problem:\n{problem}\n\nSolution:", after the
  task's four fixed Minerva examples (`FEWSHOT`, `list_fewshot_samples`,
  sampler `first_n`), each followed by " " + its solution and "\n\n".
  Generation stops at "Problem:" (`UNTIL`).
* Gold (`process_docs`): `normalize_final_answer(remove_boxed(
  last_boxed_only_string(solution)))` (`answer`).
* `exact_match`: the text after "Final Answer: The final answer is" up to
  ". I hope it is correct." (`get_unnormalized_answer`, "[invalidanswer]"
  when absent), normalised (`normalize_final_answer`, Lewkowycz et al.
  2022 appendix D), and `is_equiv` to the gold: both parsed as LaTeX,
  `sympy.simplify(a - b) == 0` within 5 s, any failure False.
* `math_verify`: math-verify's `verify(parse(gold answer),
  parse(completion))` (the whole completion; `jaxlab.evals.math_answers`'s
  parse with its timeouts).

`is_equiv` parses with sympy's `parse_latex` (the harness's parser, ANTLR
4.11 runtime) when that runtime is installed; otherwise (the `math`
extra installs math-verify's ANTLR 4.13 runtime, which sympy's generated
parser refuses) with `latex2sympy2_extended.latex2sympy`, the LaTeX parser
math-verify uses (`PARSER` says which). The two agree on the numbers,
fractions, roots and polynomials MATH answers mostly are; where one
parses and the other does not the verdict can differ.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxlab import _optional
from jaxlab.evals import math_answers

UNTIL = ("Problem:",)
# The group's tasks' `dataset_name`s (minerva_math_{algebra,
# counting_and_prob,geometry,intermediate_algebra,num_theory,prealgebra,
# precalc}.yaml), in the group's order.
SUBSETS = ("algebra", "counting_and_probability", "geometry",
           "intermediate_algebra", "number_theory", "prealgebra",
           "precalculus")
INVALID = "[invalidanswer]"
EQUIV_TIMEOUT_S = 5

# lm_eval/tasks/minerva_math/utils.py::list_fewshot_samples (v0.4.8),
# verbatim (problem, solution).
FEWSHOT = (
    ("Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.}",
     "The expressions inside each square root must be non-negative. "
     "Therefore, $x-2 \\ge 0$, so $x\\ge2$, and $5 - x \\ge 0$, so $x \\le 5$."
     " Also, the denominator cannot be equal to zero, so $5-x>0$, which gives"
     " $x<5$. Therefore, the domain of the expression is $\\boxed{[2,5)}$.\n"
     "Final Answer: The final answer is $[2,5)$. I hope it is correct."),
    ("If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find "
     "$\\det (\\mathbf{A} \\mathbf{B}).$",
     "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})"
     "(\\det \\mathbf{B}) = (2)(12) = \\boxed{24}.$\nFinal Answer: The final "
     "answer is $24$. I hope it is correct."),
    ("Terrell usually lifts two 20-pound weights 12 times. If he uses two "
     "15-pound weights instead, how many times must Terrell lift them in "
     "order to lift the same total weight?",
     "If Terrell lifts two 20-pound weights 12 times, he lifts a total of "
     "$2\\cdot 12\\cdot20=480$ pounds of weight.  If he lifts two 15-pound "
     "weights instead for $n$ times, he will lift a total of $2\\cdot15\\cdot "
     "n=30n$ pounds of weight.  Equating this to 480 pounds, we can solve for"
     " $n$:\n\\begin{align*}\n30n&=480\\\n\\Rightarrow\\qquad n&=480/30="
     "\\boxed{16}\n\\end{align*}\nFinal Answer: The final answer is $16$. I "
     "hope it is correct."),
    ("If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\n6y-9x &=b."
     "\n\\end{align*}has a solution $(x, y)$ where $x$ and $y$ are both "
     "nonzero,\nfind $\\frac{a}{b},$ assuming $b$ is nonzero.",
     "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n"
     "$$6y-9x=-\\frac{3}{2}a.$$Since we also know that $6y-9x=b$, we have\n\n"
     "$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\n"
     "Final Answer: The final answer is $-\\frac{2}{3}$. I hope it is "
     "correct."),
)

SUBSTITUTIONS = (
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), (r"\ ", ""),
    (" ", ""), ("mbox", "text"), (",\\text{and}", ","),
    ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
)
REMOVED_EXPRESSIONS = (
    "square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours",
    "km", "units", "\\ldots", "sue", "points", "feet", "minutes", "digits",
    "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges",
    "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}",
    "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}",
    r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;", r",\!", "{,}", '"',
    "\\dots",
)
_FINAL = re.compile(
    r"Final Answer: The final answer is(.*?). I hope it is correct.")


def doc_to_text(problem: str) -> str:
  return "Problem:" + "\n" + problem + "\n\n" + "Solution:"


def prompt(problem: str, num_fewshot: int = 4) -> str:
  """The harness's context for one problem (`num_fewshot` of `FEWSHOT`)."""
  if not 0 <= num_fewshot <= len(FEWSHOT):
    raise ValueError(f"num_fewshot={num_fewshot}: minerva_math has "
                     f"{len(FEWSHOT)} few-shot examples")
  head = "".join(f"{doc_to_text(p)} {s}\n\n" for p, s in FEWSHOT[:num_fewshot])
  return head + doc_to_text(problem)


def normalize_final_answer(final_answer: str) -> str:
  """The harness's (Minerva appendix D) normalisation of a final answer."""
  final_answer = final_answer.split("=")[-1]
  for before, after in SUBSTITUTIONS:
    final_answer = final_answer.replace(before, after)
  for expr in REMOVED_EXPRESSIONS:
    final_answer = final_answer.replace(expr, "")
  final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
  final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
  final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
  final_answer = final_answer.replace("$", "")
  if final_answer.replace(",", "").isdigit():
    final_answer = final_answer.replace(",", "")
  return final_answer


def answer(solution: str) -> str:
  """The gold answer of a MATH `solution` (`process_docs`)."""
  boxed = math_answers.last_boxed(solution)
  if boxed is None:
    raise ValueError("no \\boxed{...} answer in the MATH solution "
                     f"{solution[-80:]!r}")
  return normalize_final_answer(boxed)


def get_unnormalized_answer(text: str) -> str:
  """The text after "Final Answer: The final answer is" (`INVALID` when
  the completion has no such sentence)."""
  m = _FINAL.search(text + "I hope it is correct.")
  return m.group(1).strip() if m else INVALID


@contextlib.contextmanager
def _time_limit(seconds: int):
  """SIGALRM after `seconds` (main thread only; elsewhere no bound)."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  def handler(signum, frame):
    del signum, frame
    raise TimeoutError("is_equiv timed out")
  old = signal.signal(signal.SIGALRM, handler)
  signal.alarm(seconds)
  try:
    yield
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# pylint: disable=g-import-not-at-top
def _parser():
  """(name, parse) of the LaTeX parser `is_equiv` uses (module docstring)."""
  if _antlr_version().startswith("4.11"):
    latex = _optional.require("sympy.parsing.latex", "math")
    return "sympy", latex.parse_latex
  l2s = _optional.require("latex2sympy2_extended", "math")
  return "latex2sympy2_extended", l2s.latex2sympy
# pylint: enable=g-import-not-at-top


def _antlr_version() -> str:
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  try:
    return metadata.version("antlr4-python3-runtime")
  except metadata.PackageNotFoundError:
    return ""


_PARSE = None
PARSER = ""


def is_equiv(x1: str, x2: str) -> bool:
  """The harness's `is_equiv` of two normalised answers: parsed as LaTeX,
  equal iff `sympy.simplify(a - b) == 0`; any failure (parse, subtract,
  simplify, the 5 s bound) is False."""
  global _PARSE, PARSER
  sympy = _optional.require("sympy", "math")
  if _PARSE is None:
    PARSER, _PARSE = _parser()
  try:
    with _time_limit(EQUIV_TIMEOUT_S):
      a, b = _PARSE(x1), _PARSE(x2)
      return bool(sympy.simplify(a - b) == 0)
  except Exception:  # pylint: disable=broad-except
    return False


def math_verify(completion: str, gold: str) -> bool:
  """`verify(parse(gold), parse(completion))` with math-verify."""
  # pylint: disable=protected-access
  mv = math_answers._math_verify()
  return bool(mv.verify(math_answers.parse(gold),
                        math_answers.parse(completion),
                        timeout_seconds=math_answers._timeout()))


def score(completion: str, solution: str) -> dict[str, float]:
  """`process_results` of one completion (already cut at `UNTIL`) against a
  MATH `solution`: {"exact_match", "math_verify"}, each 0.0 or 1.0."""
  gold = answer(solution)
  em = is_equiv(normalize_final_answer(get_unnormalized_answer(completion)),
                gold)
  return {"exact_match": float(em),
          "math_verify": float(math_verify(completion, gold))}


def score_all(completions: Sequence[str], solutions: Sequence[str]
              ) -> dict[str, np.ndarray]:
  """`score` of each pair: {metric: float32 [N]} (means = the metrics)."""
  if len(completions) != len(solutions):
    raise ValueError(f"{len(completions)} completions for {len(solutions)} "
                     "solutions: give one solution per completion")
  per: list[dict[str, Any]] = [score(c, s)
                               for c, s in zip(completions, solutions)]
  return {k: np.asarray([p[k] for p in per], np.float32)
          for k in ("exact_match", "math_verify")}
