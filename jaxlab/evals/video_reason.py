"""VideoReasonBench scoring (paper R, spec R.4 "Scoring").

The paper extracts the text after "Final Answer", asks an LLM judge
(Table-18 prompt: "Correct"/"Incorrect") and verifies Predict Operation by
simulation. Without an LLM, the default judge is the exact checker
(`video_reason.check_answer`: canonical structures compared exactly,
Predict Operation simulated); `LLMJudge` is the adapter for a text model.
A response without the marker or whose answer cannot be parsed is
*malformed*: it is scored wrong and counted (`Report.malformed`).
Accuracy per skill, per level and overall (the mean over questions, equal to
the mean over skills when every skill has the same count), plus breakdowns by
demo, state size, operation-count bin and reveal timing (paper Tables 4-5).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, Callable, Protocol, Sequence

from jaxlab import registry
from jaxlab.data.synthetic import video_reason as vr
# The release's scoring (questions/*.json rows as published, show_results'
# report), re-exported: jaxlab.evals.video_reason_release.
from jaxlab.evals.video_reason_release import score_release  # pylint: disable=unused-import

_MARKER = re.compile(r"final\s*answer\s*\**\s*:?\s*\**", re.IGNORECASE)

JUDGE_PROMPT = (
    "Please act as an impartial judge and evaluate the correctness of a "
    "model response to a question about a video. You are given the question, "
    "the ground-truth answer and the model response; determine whether the "
    "model response is correct based on the ground-truth answer. The model "
    "response should contain all information in the ground-truth answer. "
    "Directly output \"Correct\" or \"Incorrect\".\n\n"
    "Question: {question}\nGround-truth answer: {answer}\n"
    "Model response: {response}\nJudgement:")


class Judge(Protocol):
  """Is `answer` (the text after "Final Answer") right for `record`?

  May raise `MalformedAnswerError` (counted as malformed and wrong).
  """

  def __call__(self, record: dict[str, Any], answer: str) -> bool:
    ...


JUDGES: registry.Registry[Callable[..., Judge]] = registry.Registry(
    "video_reason judge")


@JUDGES.register("exact")
def exact_judge() -> Judge:
  return vr.check_answer


@dataclasses.dataclass
class LLMJudge:
  """The paper's LLM judge around any `generate(prompt) -> text` function.

  Predict Operation stays verified by simulation (the paper only uses the
  LLM to extract the operation list there). A judgement that is neither
  "Correct" nor "Incorrect" raises `MalformedAnswerError`.
  """
  generate: Callable[[str], str]

  def __call__(self, record: dict[str, Any], answer: str) -> bool:
    if record["dim"] == "predict_operation":
      return vr.check_answer(record, answer)
    verdict = self.generate(JUDGE_PROMPT.format(
        question=record["question"], answer=record["answer"],
        response=answer)).strip().lower()
    if verdict.startswith("correct"):
      return True
    if verdict.startswith("incorrect"):
      return False
    raise vr.MalformedAnswerError(f"judge output is neither Correct nor "
                                  f"Incorrect: {verdict[:40]!r}")


JUDGES.register("llm")(LLMJudge)


def extract_answer(response: str, require_marker: bool = True) -> str:
  """The text after the last "Final Answer:" (spec R.4).

  Raises `MalformedAnswerError` when the marker is missing and
  `require_marker` (otherwise the whole response is the answer).
  """
  if not isinstance(response, str):
    raise vr.MalformedAnswerError(f"response is not a string: {response!r}")
  found = list(_MARKER.finditer(response))
  if not found:
    if require_marker:
      raise vr.MalformedAnswerError("no 'Final Answer:' in the response")
    return response.strip()
  return response[found[-1].end():].strip()


def op_bin(num_ops: int) -> str:
  lo = (num_ops // 5) * 5
  return f"{lo}-{lo + 4}"


@dataclasses.dataclass
class Report:
  """Scores of one set of responses."""
  accuracy: float
  n: int
  correct: list[bool]
  malformed: int
  malformed_index: list[int]
  per_skill: dict[str, float]
  per_level: dict[int, float]
  by: dict[str, dict[str, float]]   # demo / size / op_bin / reveal -> acc

  def summary(self) -> str:
    skills = ", ".join(f"{k} {v:.3f}" for k, v in self.per_skill.items())
    levels = ", ".join(f"L{k} {v:.3f}" for k, v in self.per_level.items())
    return (f"accuracy {self.accuracy:.3f} over {self.n} questions "
            f"({self.malformed} malformed, scored wrong); {levels}; {skills}")


def _mean(xs: Sequence[bool]) -> float:
  return sum(xs) / len(xs) if xs else float("nan")


def score(records: Sequence[dict[str, Any]], responses: Sequence[str], *,
          judge: Judge | str = "exact",
          require_marker: bool = True) -> Report:
  """Scores `responses[i]` against `records[i]`.

  Args:
    records: question records (`video_reason.records(videos)` or an import).
    responses: model responses, one per record.
    judge: a `Judge` or a name in `JUDGES` ("exact").
    require_marker: a response without "Final Answer" is malformed.
  """
  if len(records) != len(responses):
    raise ValueError(f"got {len(responses)} responses for {len(records)} "
                     "records: one response per record is needed")
  if isinstance(judge, str):
    judge = JUDGES.get(judge)()
  correct, bad = [], []
  groups = collections.defaultdict(lambda: collections.defaultdict(list))
  for i, (rec, resp) in enumerate(zip(records, responses)):
    vr.check_skill(rec["dim"])
    try:
      ok = bool(judge(rec, extract_answer(resp, require_marker)))
    except vr.MalformedAnswerError:
      ok = False
      bad.append(i)
    correct.append(ok)
    groups["skill"][rec["dim"]].append(ok)
    groups["level"][vr.SKILLS[rec["dim"]]].append(ok)
    groups["demo"][rec["demo"]].append(ok)
    groups["size"][str(rec["num_state"])].append(ok)
    groups["op_bin"][op_bin(rec["num_operation"])].append(ok)
    groups["reveal"][rec["visible_time"]].append(ok)
  per_skill = {s: _mean(groups["skill"][s]) for s in vr.SKILLS
               if s in groups["skill"]}
  per_level = {l: _mean(groups["level"][l]) for l in sorted(groups["level"])}
  by = {k: {name: _mean(v) for name, v in sorted(groups[k].items())}
        for k in ("demo", "size", "op_bin", "reveal")}
  return Report(_mean(correct), len(correct), correct, len(bad), bad,
                per_skill, per_level, by)


def level_accuracy(report: Report, level: int) -> float:
  """Accuracy at one level (1 recall, 2 infer, 3 predict)."""
  vr.check_level(level)
  return report.per_level.get(level, float("nan"))
