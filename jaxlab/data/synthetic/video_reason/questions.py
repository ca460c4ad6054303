"""Videos, the six question templates, answers by rule and the exact checker.

One `Video` holds the script (states S_1..S_T and operations), its frames
and one question per skill (paper: "each video gets exactly one question per
skill"). Question records follow the paper's JSON fields (`video`,
`question`, `answer`, `dim`, `visible_time`, `num_state`, `num_operation`)
plus `demo`, `level`, `params` (what a solver may read: the template's
arguments) and `check` (the answer key the checker needs).

Every answer is computed by `answer_of` from a trajectory and the question's
params; the same function serves the solvers (given a perceived trajectory),
so the oracle scoring 100% validates the simulators, formats and checker
together (spec R.6).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

import numpy as np

from jaxlab.data.synthetic.video_reason import core

_ORDINAL_PREFIX = re.compile(r"^\s*\d+\s*(?:st|nd|rd|th)?\s*[:.)]\s*")


def to_json(x: Any) -> Any:
  """Tuples -> lists, recursively (states and ops are nested tuples)."""
  if isinstance(x, (tuple, list)):
    return [to_json(v) for v in x]
  if isinstance(x, np.integer):
    return int(x)
  return x


def from_json(x: Any) -> Any:
  if isinstance(x, list):
    return tuple(from_json(v) for v in x)
  return x


@dataclasses.dataclass
class Video:
  """One generated video: script, frames and its six question records."""
  demo: str
  size: int
  reveal: str
  states: list          # S_1..S_T (len num_ops + 1)
  ops: list             # o_1..o_{T-1}
  frames: np.ndarray    # [F, H, W, 3] uint8
  frame_states: list[int]   # which S_t each frame draws
  frame_ops: list[int]      # which o_t each frame shows (-1: none)
  questions: list[dict]
  path: str             # videos/<key>/state{N}_op{T}_{reveal}.mp4

  @property
  def num_ops(self) -> int:
    return len(self.ops)

  @property
  def engine(self) -> core.Engine:
    return core.get_engine(self.demo)

  def visible_state(self):
    return self.states[0] if self.reveal == "start" else self.states[-1]


def hidden_time(reveal: str) -> str:
  return "end" if reveal == "start" else "start"


def _state_at(states: Sequence, time: str):
  return states[0] if time == "start" else states[-1]


def answer_of(engine: core.Engine, states: Sequence, ops: Sequence,
              skill: str, params: dict[str, Any]) -> Any:
  """The canonical answer of a question from a trajectory (rule-based)."""
  core.check_skill(skill)
  if skill == "recall_order":
    return tuple(ops[params["i"] - 1:params["j"]])
  if skill == "recall_count":
    return sum(engine.count_match(params, op) for op in ops)
  if skill == "infer_state":
    return engine.view(_state_at(states, params["time"]))
  if skill == "compare_state":
    ts = params["timestamp"]
    other = "end" if ts == "start" else "start"
    return engine.diff(_state_at(states, ts), _state_at(states, other),
                       params)
  if skill == "predict_state":
    moves = [engine.parse_op(m) for m in params["moves"]]
    return engine.view(core.simulate(engine, _state_at(states,
                                                       params["time"]), moves))
  # predict_operation: one solution from the believed current state.
  start = _state_at(states, params["time"])
  return tuple(engine.solve(start, from_json(params["target"]),
                            engine.predict_len))


def format_answer(engine: core.Engine, skill: str, answer: Any,
                  params: dict[str, Any]) -> str:
  """A canonical answer -> the answer text of the skill's format."""
  if skill == "recall_order":
    return "; ".join(f"{core.ordinal(params['i'] + k)}: {engine.op_text(op)}"
                     for k, op in enumerate(answer))
  if skill == "recall_count":
    return str(answer)
  if skill in ("infer_state", "predict_state"):
    return engine.format_state(answer)
  if skill == "compare_state":
    return engine.format_diff(answer)
  return engine.op_sep.join(engine.op_text(op) for op in answer)


def parse_answer(engine: core.Engine, skill: str, text: str) -> Any:
  """An answer text -> its canonical structure; `MalformedAnswerError` if it
  does not have the skill's format."""
  core.check_skill(skill)
  if not isinstance(text, str) or not text.strip():
    raise core.MalformedAnswerError(f"{skill}: empty answer")
  if skill in ("recall_order", "predict_operation"):
    parts = core.split_ops(text)
    if not parts:
      raise core.MalformedAnswerError(f"{skill}: no operations in {text!r}")
    return tuple(engine.parse_op(_ORDINAL_PREFIX.sub("", p)) for p in parts)
  if skill == "recall_count":
    m = re.search(r"\d+", text)
    if not m:
      raise core.MalformedAnswerError(f"recall_count: no number in {text!r}")
    return int(m.group(0))
  if skill in ("infer_state", "predict_state"):
    return engine.parse_state(text)
  return engine.parse_diff(text)


def check_answer(record: dict[str, Any], answer_text: str) -> bool:
  """Exact checker: is `answer_text` right for the question `record`?

  Predict Operation is verified by simulation from the hidden-time state
  (illegal operations skipped, as the paper's evaluator does) against the
  target's view; every other skill compares canonical structures. Raises
  `MalformedAnswerError` when the text cannot be parsed.
  """
  engine = core.get_engine(record["demo"])
  skill = record["dim"]
  got = parse_answer(engine, skill, answer_text)
  if skill == "predict_operation":
    start = from_json(record["check"]["from_state"])
    target = from_json(record["params"]["target"])
    return engine.view(core.simulate(engine, start, got)) == \
        engine.view(target)
  return got == parse_answer(engine, skill, record["answer"])


def full_prompt(record: dict[str, Any]) -> str:
  """{task instruction} + {question} + {answer prompt} (spec R.3)."""
  engine = core.get_engine(record["demo"])
  return (f"{engine.instruction(record['visible_time'])} "
          f"{record['question']} {core.ANSWER_PROMPT}")


def make_questions(engine: core.Engine, states: Sequence, ops: Sequence,
                   reveal: str, size: int, path: str,
                   rng: np.random.Generator,
                   skills: Sequence[str] = tuple(core.SKILLS)) -> list[dict]:
  """One record per skill from the templates of spec R.3."""
  hidden = hidden_time(reveal)
  n = len(ops)
  records = []
  for skill in skills:
    core.check_skill(skill)
    params: dict[str, Any] = {}
    check: dict[str, Any] = {}
    if skill == "recall_order":
      span = min(n, int(rng.integers(2, 4)))
      i = int(rng.integers(1, n - span + 2))
      params = {"i": i, "j": i + span - 1}
      question = (f"What are the {core.ordinal(i)} to "
                  f"{core.ordinal(i + span - 1)} {engine.op_noun}?")
    elif skill == "recall_count":
      question, params = engine.count_spec(rng, size)
    elif skill == "infer_state":
      params = {"time": hidden}
      question = f"What is the {engine.state_phrase} at the {hidden} of the " \
                 "video?"
    elif skill == "compare_state":
      ts = str(rng.choice(core.REVEALS))
      question, params = engine.compare_spec(rng, size, ts)
      params["timestamp"] = ts
    elif skill == "predict_state":
      s, prev, moves = _state_at(states, hidden), None, []
      for _ in range(int(rng.integers(3, 6))):
        op = engine.sample_op(s, rng, prev)
        moves.append(engine.op_text(op))
        s, prev = engine.apply(s, op), op
      params = {"time": hidden, "moves": moves}
      question = (f"If the state is currently the same as at the {hidden} of "
                  "the video, and the following operations are executed: "
                  f"{'; '.join(moves)}, what will be the "
                  f"{engine.state_phrase}?")
    else:
      start = _state_at(states, hidden)
      for _ in range(20):  # a target different from the start
        s, prev = start, None
        for _ in range(engine.predict_len):
          prev = engine.sample_predict_op(s, rng, prev)
          s = engine.apply(s, prev)
        if engine.view(s) != engine.view(start):
          break
      params = {"time": hidden, "target": to_json(s)}
      check = {"from_state": to_json(start)}
      question = (f"If the state is currently the same as at the {hidden} of "
                  "the video, what sequence of operations should be executed "
                  "to reach this state: "
                  f"{engine.format_state(engine.view(s))}?")
    answer = answer_of(engine, states, ops, skill, params)
    records.append({
        "video": path, "question": question,
        "answer": format_answer(engine, skill, answer, params),
        "dim": skill, "level": core.SKILLS[skill], "demo": engine.name,
        "visible_time": reveal, "num_state": size, "num_operation": n,
        "params": params, "check": check,
    })
  return records
