"""Multi-step arithmetic word-free problems with step-by-step solutions.

    question: "Compute 7 *3 -4 +5."
    steps:    ["7 * 3 = 21", "21 - 4 = 17", "17 + 5 = 22", "answer: 22"]

Values stay in [0, max_value] (default 99; operands 1-9, multipliers 2-4). `coarsen` deletes a
fraction of the intermediate computation steps, leaving their results
implicit (MathFimer miniature, spec H "CPU miniature" 1): the step after a
deleted one starts from a number the reader has to compute in their head.
The final `answer:` line is never deleted.
"""

from __future__ import annotations

import dataclasses
import random

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


def make_problem(rng: random.Random, num_ops: int, *,
                 max_value: int = 99) -> Problem:
  """One problem; every value (start, intermediate, answer) in [0, max_value].

  `max_value=9` keeps every number a single digit (an easier table of facts
  that a tiny solver learns on a CPU budget).
  """
  if num_ops < 1:
    raise ValueError(f"num_ops must be >= 1, got {num_ops}")
  if max_value < 2:
    raise ValueError(f"max_value must be >= 2, got {max_value}")
  value = rng.randint(1, min(20, max_value))
  q = [str(value)]
  steps = []
  for _ in range(num_ops):
    kind, a, new = _op(rng, value, max_value)
    q.append(f"{kind}{a}")
    steps.append(f"{value} {kind} {a} = {new}")
    value = new
  steps.append(f"{ANSWER_PREFIX}{value}")
  return Problem(f"Compute {' '.join(q)}.", tuple(steps), str(value))


def make_problems(n: int, *, min_ops: int = 3, max_ops: int = 6,
                  seed: int = 0, max_value: int = 99) -> list[Problem]:
  """`n` problems with `min_ops..max_ops` computation steps each."""
  if not 1 <= min_ops <= max_ops:
    raise ValueError(f"need 1 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
  rng = random.Random(seed)
  return [make_problem(rng, rng.randint(min_ops, max_ops),
                       max_value=max_value) for _ in range(n)]


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


def step_is_correct(step: str) -> bool | None:
  """True/False for a computation step `a op b = c`; None if not one.

  Used to check inserted (model-written) steps: a FIM step that parses but
  computes the wrong value is False.
  """
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
