"""Reference solvers (spec R.6): oracle, noisy perception, no reasoning.

A solver sees what the video shows, a `Perception`: the state at the reveal
and the operations as perceived; it then reasons exactly: it rebuilds the
trajectory forward (reveal "start") or backward with `undo` (reveal "end"),
skipping operations that are illegal in the believed state, and answers
every question with the same rules as the generator (`questions.answer_of`).
- oracle: perfect perception; must score 100%.
- noisy perception: each operation is replaced, independently with
  probability `error_rate`, by a different random legal operation from the
  true state (a mis-seen move); accuracy then falls about as (1 - p)^T on the
  questions that need the whole trajectory.
- visible state ("no reasoning"): perfect perception, but every state answer
  is the revealed state (the paper's failure mode of answering with what was
  shown).
Answers are strings "... Final Answer: <answer>" like a model's response.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Sequence

import numpy as np

from jaxlab.data.synthetic.video_reason import core
from jaxlab.data.synthetic.video_reason import questions as Q


@dataclasses.dataclass
class Perception:
  visible_state: Any
  reveal: str
  ops: list


def perceive(video: Q.Video, error_rate: float = 0.0,
             rng: np.random.Generator | None = None) -> Perception:
  """What a viewer with per-operation error rate `error_rate` sees."""
  if not 0.0 <= error_rate <= 1.0:
    raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
  engine = video.engine
  ops = list(video.ops)
  if error_rate > 0:
    rng = rng if rng is not None else np.random.default_rng(0)
    for t, op in enumerate(video.ops):
      if rng.random() < error_rate:
        for _ in range(50):
          wrong = engine.sample_op(video.states[t], rng)
          if wrong != op:
            ops[t] = wrong
            break
  return Perception(video.visible_state(), video.reveal, ops)


def reconstruct(engine: core.Engine, p: Perception) -> list:
  """The believed trajectory S_1..S_T from a perception."""
  if p.reveal == "start":
    states = [p.visible_state]
    for op in p.ops:
      try:
        states.append(engine.apply(states[-1], op))
      except core.IllegalOperationError:
        states.append(states[-1])
    return states
  states = [p.visible_state]
  for op in reversed(p.ops):
    try:
      states.append(engine.undo(states[-1], op))
    except core.IllegalOperationError:
      states.append(states[-1])
  return states[::-1]


def answer_record(record: dict[str, Any], p: Perception,
                  reasoning: bool = True) -> str:
  """A response to one question from a perception."""
  engine = core.get_engine(record["demo"])
  skill, params = record["dim"], record["params"]
  if reasoning:
    states = reconstruct(engine, p)
  else:
    states = [p.visible_state] * (len(p.ops) + 1)
  answer = Q.answer_of(engine, states, p.ops, skill, params)
  return "Final Answer: " + Q.format_answer(engine, skill, answer, params)


def solve_video(video: Q.Video, *, error_rate: float = 0.0,
                reasoning: bool = True, seed: int = 0) -> list[str]:
  """Responses to every question of `video`."""
  rng = np.random.default_rng([seed, zlib.crc32(video.path.encode())])
  p = perceive(video, error_rate, rng)
  return [answer_record(r, p, reasoning) for r in video.questions]


def oracle(videos: Sequence[Q.Video]) -> list[str]:
  return [a for v in videos for a in solve_video(v)]


def noisy(videos: Sequence[Q.Video], error_rate: float,
          seed: int = 0) -> list[str]:
  return [a for v in videos for a in solve_video(v, error_rate=error_rate,
                                                 seed=seed)]


def visible_state(videos: Sequence[Q.Video]) -> list[str]:
  return [a for v in videos for a in solve_video(v, reasoning=False)]
