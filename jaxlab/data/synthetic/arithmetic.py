"""Multi-step arithmetic word-free problems with step-by-step solutions.

Two step formats (`step_format`):

    "chain" (default):
      question: "Compute 7 *3 -4 +5."
      steps:    ["7 * 3 = 21", "21 - 4 = 17", "17 + 5 = 22", "answer: 22"]
    "variables" (spec H's example "a=7; b=a*3=21; c=b-4=17; answer 17"):
      question: "a=7,b=a*3,c=b-4,d=c+5; d?"
      steps:    ["b=a*3=21", "c=b-4=17", "d=c+5=22", "answer: 22"]

In the chain format a solver has to find the k-th operation of the question
by its position (the question and the steps share no token that says which
operation comes next); a 2-layer byte model did not learn that on a CPU
budget. In the variables format each step names its variable, so the
definition it applies is found by content (the `b=` of the question) and
the value it starts from is the previous step's result (or, after a
deleted step, has to be computed in the head).

Values stay in [0, max_value] (default 99; operands 1-9, multipliers 2-4). `coarsen` deletes a
fraction of the intermediate computation steps, leaving their results
implicit (MathFimer miniature, spec H "CPU miniature" 1): the step after a
deleted one starts from a number the reader has to compute in their head.
The final `answer:` line is never deleted.
"""

from __future__ import annotations

import dataclasses
import random
import re

ANSWER_PREFIX = "answer: "


@dataclasses.dataclass(frozen=True)
class Problem:
  question: str
  steps: tuple[str, ...]  # computation steps then the answer line
  answer: str

  @property
  def solution(self) -> str:
    return "\n".join(self.steps)


def _op(rng: random.Random, value: int,
        max_value: int = 99) -> tuple[str, int, int]:
  while True:
    kind = rng.choice("+-*")
    if kind == "*":
      a = rng.randint(2, 4)
      if value * a <= max_value:
        return kind, a, value * a
    else:
      a = rng.randint(1, 9)
      new = value + a if kind == "+" else value - a
      if 0 <= new <= max_value:
        return kind, a, new


STEP_FORMATS = ("chain", "variables")
VARIABLES = "abcdefghijklmnopqrstuvwxyz"


def make_problem(rng: random.Random, num_ops: int, *,
                 max_value: int = 99, step_format: str = "chain") -> Problem:
  """One problem; every value (start, intermediate, answer) in [0, max_value].

  `max_value=9` keeps every number a single digit (an easier table of facts
  that a tiny solver learns on a CPU budget). The random draws do not depend
  on `step_format`: both formats of a seed hold the same computations.
  """
  if num_ops < 1:
    raise ValueError(f"num_ops must be >= 1, got {num_ops}")
  if max_value < 2:
    raise ValueError(f"max_value must be >= 2, got {max_value}")
  if step_format not in STEP_FORMATS:
    raise ValueError(f"step_format must be one of {STEP_FORMATS}, got "
                     f"{step_format!r}")
  if step_format == "variables" and num_ops >= len(VARIABLES):
    raise ValueError(f"num_ops must be < {len(VARIABLES)} for the variables "
                     f"format, got {num_ops}")
  value = rng.randint(1, min(20, max_value))
  q = [str(value)]
  defs = [f"a={value}"]
  steps = []
  for k in range(num_ops):
    kind, a, new = _op(rng, value, max_value)
    q.append(f"{kind}{a}")
    if step_format == "chain":
      steps.append(f"{value} {kind} {a} = {new}")
    else:
      defs.append(f"{VARIABLES[k + 1]}={VARIABLES[k]}{kind}{a}")
      steps.append(f"{defs[-1]}={new}")
    value = new
  steps.append(f"{ANSWER_PREFIX}{value}")
  if step_format == "chain":
    question = f"Compute {' '.join(q)}."
  else:
    question = f"{','.join(defs)}; {VARIABLES[num_ops]}?"
  return Problem(question, tuple(steps), str(value))


def make_problems(n: int, *, min_ops: int = 3, max_ops: int = 6,
                  seed: int = 0, max_value: int = 99,
                  step_format: str = "chain") -> list[Problem]:
  """`n` problems with `min_ops..max_ops` computation steps each."""
  if not 1 <= min_ops <= max_ops:
    raise ValueError(f"need 1 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
  rng = random.Random(seed)
  return [make_problem(rng, rng.randint(min_ops, max_ops),
                       max_value=max_value, step_format=step_format)
          for _ in range(n)]


def coarsen(problem: Problem, *, drop_frac: float = 0.4,
            rng: random.Random) -> Problem:
  """Deletes round(drop_frac * #computation steps) of them (not the answer)."""
  if not 0 <= drop_frac < 1:
    raise ValueError(f"drop_frac must be in [0, 1), got {drop_frac}")
  comp = list(range(len(problem.steps) - 1))
  drop = set(rng.sample(comp, round(drop_frac * len(comp))))
  steps = tuple(s for i, s in enumerate(problem.steps) if i not in drop)
  return dataclasses.replace(problem, steps=steps)


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
        "*": lambda a, b: a * b}


_VAR_STEP = re.compile(r"^([a-z])=([a-z])([-+*])(\d+)=(-?\d+)$")
_VAR_DEF = re.compile(r"([a-z])=(?:(\d+)|([a-z])([-+*])(\d+))(?=[,;])")


def question_values(question: str) -> dict[str, tuple[str, int]]:
  """Variables-format question -> {name: (definition, true value)}.

  "a=7,b=a*3; b?" -> {"a": ("7", 7), "b": ("a*3", 21)}; definitions
  refer to earlier variables only.
  """
  out: dict[str, tuple[str, int]] = {}
  for name, const, ref, op, num in _VAR_DEF.findall(question):
    if const:
      out[name] = (const, int(const))
    elif ref in out:
      out[name] = (f"{ref}{op}{num}", _OPS[op](out[ref][1], int(num)))
  return out


def step_is_correct(step: str, question: str | None = None) -> bool | None:
  """True/False for a computation step; None if the step is not one.

  Chain format `a op b = c`: True iff the arithmetic is right (the question
  is not needed). Variables format `x=y op n=c` (needs the question): True
  iff `x=y op n` is the question's definition of x and c is x's true value.
  Used to check inserted (model-written) steps: a FIM step that parses but
  computes the wrong value is False.
  """
  m = _VAR_STEP.match(step.strip())
  if m is not None:
    if question is None:
      raise ValueError("a variables-format step needs its question to be "
                       "checked (step_is_correct(step, question=...))")
    name, ref, op, num, value = m.groups()
    want = question_values(question).get(name)
    return want is not None and want == (f"{ref}{op}{num}", int(value))
  parts = step.strip().split()
  if len(parts) != 5 or parts[1] not in _OPS or parts[3] != "=":
    return None
  try:
    a, b, c = int(parts[0]), int(parts[2]), int(parts[4])
  except ValueError:
    return None
  return _OPS[parts[1]](a, b) == c


def extract_answer(solution: str) -> str | None:
  """The value on the last `answer:` line, or None."""
  for line in reversed(solution.strip().split("\n")):
    line = line.strip()
    if line.startswith(ANSWER_PREFIX):
      return line[len(ANSWER_PREFIX):].strip()
  return None
