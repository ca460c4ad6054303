r"""MATH answers checked with Hugging Face's math-verify (the `math` extra).

    math_answers.is_correct("... so x = \\frac{1}{2}.", "... \\boxed{0.5}")

MATH as released (hendrycks/competition_math and its copies: `problem`,
`level`, `type`, `solution`, splits train / test; the solution's final
answer in `\boxed{...}`). MathFimer (spec H.8) evaluates solvers on MATH;
the issue asks for `math-verify` as the checker. `is_correct` is
math-verify's documented use (its README, `math_verify/__init__.py`
0.9.0): `verify(parse(gold), parse(prediction))` with the default
extraction configs (`LatexExtractionConfig()`, `ExprExtractionConfig()`:
the last `\boxed{}` first, then LaTeX / plain expressions), which compares
the two sympy answers numerically and symbolically ("0.5" = "\frac12").

`last_boxed` is the harness's `last_boxed_only_string` + `remove_boxed`
(lm_eval/tasks/hendrycks_math/utils.py): the gold answer string of a
MATH solution, for display and for the answer column of the run's records.

math-verify bounds each parse / verify with SIGALRM, which only works in
the main thread; elsewhere the bound is off (`_timeout`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from jaxlab import _optional

TIMEOUT_S = 5   # math-verify's own default bound per parse / verify


def _math_verify():
  return _optional.require("math_verify", "math")


def _timeout() -> int | None:
  main = threading.current_thread() is threading.main_thread()
  return TIMEOUT_S if main else None


def last_boxed(text: str) -> str | None:
  r"""The content of the last `\boxed{...}` in `text` (braces balanced;
  "\boxed 5" gives "5"); None when there is none (the harness's
  `remove_boxed(last_boxed_only_string(text))`)."""
  if "\\boxed " in text:
    return text.split("\\boxed ")[-1].split("$")[0]
  idx = text.rfind("\\boxed")
  if idx < 0:
    return None
  depth = 0
  for i in range(idx, len(text)):
    depth += {"{": 1, "}": -1}.get(text[i], 0)
    if text[i] == "}" and depth == 0:
      boxed = text[idx:i + 1]
      left = "\\boxed{"
      return boxed[len(left):-1] if boxed.startswith(left) else None
  return None


def parse(text: str) -> list:
  """math-verify's parsed answers of `text` (empty when none parses)."""
  mv = _math_verify()
  return mv.parse(text, parsing_timeout=_timeout())


def is_correct(completion: str, solution: str) -> bool:
  """Whether `completion` answers a MATH row whose `solution` is given:
  math-verify's `verify(parse(solution), parse(completion))`."""
  mv = _math_verify()
  gold = parse(solution)
  if not gold:
    raise ValueError("no answer math-verify can parse in the MATH solution "
                     f"{solution[-80:]!r} (needs a \\boxed{{...}} answer)")
  return bool(mv.verify(gold, parse(completion),
                        timeout_seconds=_timeout()))


def boxed(answer: str) -> str:
  r"""A bare final answer as a solution math-verify parses: "\boxed{a}"
  (OpenMathInstruct-2's `expected_answer` is the answer alone, e.g.
  "\frac{37}{256}", which math-verify's LaTeX extraction skips without
  delimiters)."""
  return f"\\boxed{{{answer}}}"


def answer_class(completion: str) -> tuple[str, list] | None:
  """B of a completion under math-verify: (its extracted answer string,
  its parse), None when nothing parses. Two classes are one when
  `equivalent` says so (B-calibration, paper N: "for math, the final
  number" [notes], here math-verify's final answer)."""
  parsed = parse(completion)
  if not parsed:
    return None
  return str(parsed[-1]), parsed


def equivalent(a: list, b: list) -> bool:
  """Whether two parses are the same answer: math-verify's `verify`."""
  mv = _math_verify()
  return bool(mv.verify(a, b, timeout_seconds=_timeout()))


def score(completions: Sequence[str], solutions: Sequence[str]
          ) -> np.ndarray:
  """`is_correct` of each pair, float32 `[N]` (the mean is the accuracy)."""
  if len(completions) != len(solutions):
    raise ValueError(f"{len(completions)} completions for {len(solutions)} "
                     "solutions: give one solution per completion")
  return np.asarray([is_correct(c, s) for c, s in zip(completions, solutions)],
                    np.float32)
