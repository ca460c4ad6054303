"""VideoReasonBench core: engines, skills, levels and errors (paper R).

A video is a sequence of state transitions {S_t, o_t, S_{t+1}}, t = 1..T-1
(spec R.1). Every operation o_t is visible; the state is visible only at the
start (reveal "start", S_1) or only at the end (reveal "end", S_T). Each demo
is an `Engine` registered in `DEMOS` under the paper's demo name; it owns the
state simulator (`apply`, `undo`), the legal-operation sampler, the canonical
text of operations and states (formats and their parsers) and a numpy
rasteriser. The six skills (`SKILLS`) at three levels (`LEVELS`) are generic
over engines (jaxlab/data/synthetic/video_reason/questions.py).
"""

from __future__ import annotations

import re
from typing import Any, Hashable, Sequence

import numpy as np

from jaxlab import registry

State = Hashable
Op = Hashable

# Skill id -> level (paper Table 1: Recall / Infer / Predict).
SKILLS: dict[str, int] = {
    "recall_order": 1,
    "recall_count": 1,
    "infer_state": 2,
    "compare_state": 2,
    "predict_state": 3,
    "predict_operation": 3,
}
LEVELS = {1: "recall", 2: "infer", 3: "predict"}
REVEALS = ("start", "end")
ANSWER_PROMPT = "Provide a summary of the final answer after 'Final Answer:'."

DEMOS: registry.Registry[type["Engine"]] = registry.Registry("video demo")


class MalformedAnswerError(ValueError):
  """An answer string that cannot be parsed into the skill's structure."""


class IllegalOperationError(ValueError):
  """An operation that the demo's rules forbid in this state."""


def check_skill(skill: str) -> int:
  """The level of `skill`; an unknown name is one clear error."""
  if skill not in SKILLS:
    raise registry.UnknownNameError(
        f"unknown skill {skill!r}; valid skills: {', '.join(SKILLS)}")
  return SKILLS[skill]


def check_level(level: int) -> int:
  if level not in LEVELS:
    raise ValueError(f"level must be 1, 2 or 3 (recall, infer, predict), "
                     f"got {level!r}")
  return int(level)


def skills_of_level(level: int) -> tuple[str, ...]:
  check_level(level)
  return tuple(s for s, l in SKILLS.items() if l == level)


def get_engine(demo: str) -> "Engine":
  """An engine instance by demo name (number, circle, cup, file, card, chip)."""
  return DEMOS.get(demo)()


def ordinal(i: int) -> str:
  if 10 <= i % 100 <= 20:
    suf = "th"
  else:
    suf = {1: "st", 2: "nd", 3: "rd"}.get(i % 10, "th")
  return f"{i}{suf}"


def row_letter(r: int) -> str:
  return "abcdefghijklmnopqrstuvwxyz"[r]


def letter_index(ch: str) -> int:
  return "abcdefghijklmnopqrstuvwxyz".index(ch)


def norm(text: str) -> str:
  return re.sub(r"\s+", " ", text.strip().lower())


class Engine:
  """One demonstration: the simulator, the texts and the rasteriser.

  Subclasses define the class attributes and the abstract methods. States
  and operations are hashable tuples; `apply` raises `IllegalOperationError`
  on an operation the rules forbid (evaluators skip those, spec R.4).
  """
  name: str = ""            # our demo name
  key: str = ""             # the paper's key (hrd, grid, cup, ...)
  sizes: tuple[int, ...] = ()   # state sizes: N (N x N) or number of sets
  op_noun: str = "operations"   # "What are the i-th to j-th <op_noun>?"
  state_phrase: str = "state"   # "What is the <state_phrase> at ..."
  diff_phrase: str = "items"
  op_sep: str = "; "            # joins a Predict-Operation answer
  synthetic_stand_in: bool = False  # real recordings in the paper

  # ---- simulator -------------------------------------------------------
  def init_state(self, rng: np.random.Generator, size: int) -> State:
    raise NotImplementedError

  def legal_ops(self, state: State, prev: Op | None = None) -> list[Op]:
    raise NotImplementedError

  def apply(self, state: State, op: Op) -> State:
    raise NotImplementedError

  def undo(self, state: State, op: Op) -> State:
    """S_t from S_{t+1} = apply(S_t, op) (reconstruction from the end)."""
    raise NotImplementedError

  def resolve(self, state: State, op: Op) -> Op:
    """`op` with every field the text names filled in from `state`."""
    return op

  def view(self, state: State) -> Any:
    """What a state answer names (Circle: the pieces, Cup: the coins)."""
    return state

  def sample_op(self, state: State, rng: np.random.Generator,
                prev: Op | None = None) -> Op:
    """A uniformly random legal operation (spec R.4)."""
    ops = self.legal_ops(state, prev)
    return ops[int(rng.integers(len(ops)))]

  def sample_predict_op(self, state: State, rng: np.random.Generator,
                        prev: Op | None = None) -> Op:
    """An operation allowed in a Predict-Operation answer (spec R.3)."""
    return self.sample_op(state, rng, prev)

  predict_len = 3  # operations in a generated Predict-Operation solution

  def solve(self, state: State, target: State, max_len: int) -> list[Op]:
    """Shortest operations from `state` to a state whose view is
    `view(target)` (breadth first; the container demos solve directly)."""
    goal = self.view(target)
    frontier = [(state, [], None)]
    seen = {state}
    for depth in range(max_len + 1):
      nxt = []
      for s, ops, prev in frontier:
        if self.view(s) == goal:
          return ops
        if depth == max_len:
          continue
        for op in self.legal_ops(s):
          t = self.apply(s, op)
          if t not in seen:
            seen.add(t)
            nxt.append((t, ops + [op], op))
      frontier = nxt
    return []

  # ---- texts -----------------------------------------------------------
  def instruction(self, reveal: str) -> str:
    raise NotImplementedError

  def op_text(self, op: Op) -> str:
    raise NotImplementedError

  def parse_op(self, text: str) -> Op:
    raise NotImplementedError

  def format_state(self, view: Any) -> str:
    """The text of `view(state)`."""
    raise NotImplementedError

  def parse_state(self, text: str) -> Any:
    """A state answer's text -> the view it names (MalformedAnswerError)."""
    raise NotImplementedError

  def count_spec(self, rng: np.random.Generator, size: int
                 ) -> tuple[str, dict[str, Any]]:
    """A Recall-Count question and its parameters."""
    raise NotImplementedError

  def count_match(self, params: dict[str, Any], op: Op) -> bool:
    raise NotImplementedError

  def diff(self, at: State, other: State, params: dict[str, Any]) -> Any:
    """Compare State: what is at `at` and differs from `other` (canonical)."""
    raise NotImplementedError

  def format_diff(self, diff: Any) -> str:
    raise NotImplementedError

  def parse_diff(self, text: str) -> Any:
    raise NotImplementedError

  def compare_spec(self, rng: np.random.Generator, size: int,
                   timestamp: str) -> tuple[str, dict[str, Any]]:
    return (f"Which {self.diff_phrase} differ between the start and the end "
            f"of the video? Give their content at the {timestamp} of the "
            "video.", {})

  # ---- rendering -------------------------------------------------------
  def render(self, state: State, op: Op | None, *, reveal: bool,
             frame_size: int) -> np.ndarray:
    """One RGB uint8 frame [H, W, 3]: the state if `reveal`, else masked."""
    raise NotImplementedError


def split_ops(text: str) -> list[str]:
  return [p.strip() for p in re.split(r"[;&\n]", text) if p.strip()]


def simulate(engine: Engine, state: State, ops: Sequence[Op],
             skip_illegal: bool = True) -> State:
  """Applies `ops` in order; illegal ones are skipped (the paper's eval)."""
  for op in ops:
    try:
      state = engine.apply(state, op)
    except IllegalOperationError:
      if not skip_illegal:
        raise
  return state
