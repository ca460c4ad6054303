"""Short-answer QA datasets as released, as (question, reference answers).

One adapter per released schema (rows from `pipeline.read_split`), mapped
as the semantic-entropy code maps them (Farquhar et al. 2024,
github.com/jlko/semantic_uncertainty `uncertainty/data/data_utils.py`
`load_ds`, and `generate_answers.py`), which paper J builds on:

* `trivia_qa` (mandarjoshi/trivia_qa, config `rc.nocontext`): `question`,
  `question_id`, `answer` = {`value`, `aliases`, `normalized_aliases`,
  ...}; the references are `value` and every alias. (The SE code reads a
  SQuAD-format copy of TriviaQA; the issue asks for the release.)
* `nq_open` (google-research-datasets/nq_open, config `nq_open`):
  `question`, `answer` (a list); the SE code appends "?" to the question.
* `squad` (rajpurkar/squad `plain_text`, rajpurkar/squad_v2 as the SE code
  reads): `id`, `title`, `context`, `question`, `answers` = {`text`,
  `answer_start`}; the SE code forces `answerable_only` for SQuAD, so rows
  without an answer (SQuAD 2.0's unanswerable ones) are dropped.
* `svamp` (ChilleD/SVAMP): `ID`, `Body`, `Question`, `Equation`, `Answer`,
  `Type`; question = `Question`, context = `Body` (the SE code forces
  `use_context` for SVAMP), reference = the answer as a number string
  ("8", not "8.0": the SE code's `str(x['Answer'])` of a float would make
  a right "8" wrong under SQuAD F1 [deviation, noted]).

* `simpleqa` (OpenAI's simple-evals `simple_qa_test_set.csv`, as mirrored
  by basicv8vc/SimpleQA: one CSV at the root, read as split `test`):
  `metadata` (a dict's repr: topic, answer_type, urls), `problem`,
  `answer`; the reference is `answer` (paper N's B-calibration; not in the
  SE code).

`QAItem.use_context` says whether the prompt shows the context.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class QAItem:
  question: str
  answers: tuple[str, ...]
  context: str = ""
  id: str = ""
  use_context: bool = False


def _unique(xs) -> tuple[str, ...]:
  return tuple(dict.fromkeys(str(x) for x in xs if str(x).strip()))


def _number(x) -> str:
  """An answer number as text: 8.0 (or "8.0") -> "8", 2.5 -> "2.5"."""
  try:
    v = float(x)
  except (TypeError, ValueError):
    return str(x)
  return str(int(v)) if v.is_integer() else str(x)


def _trivia_qa(row) -> QAItem:
  ans = row["answer"]
  return QAItem(row["question"], _unique([ans["value"], *ans["aliases"]]),
                id=str(row.get("question_id", "")))


def _nq_open(row) -> QAItem:
  return QAItem(row["question"] + "?", _unique(row["answer"]))


def _squad(row) -> QAItem:
  return QAItem(row["question"], _unique(row["answers"]["text"]),
                context=row.get("context", ""), id=str(row.get("id", "")))


def _svamp(row) -> QAItem:
  return QAItem(row["Question"], (_number(row["Answer"]),),
                context=row["Body"], id=str(row.get("ID", "")),
                use_context=True)


def _simpleqa(row) -> QAItem:
  return QAItem(row["problem"], _unique([row["answer"]]))


# name -> (adapter, columns it needs)
ADAPTERS = {
    "trivia_qa": (_trivia_qa, ("question", "answer")),
    "nq_open": (_nq_open, ("question", "answer")),
    "squad": (_squad, ("question", "answers")),
    "svamp": (_svamp, ("Body", "Question", "Answer")),
    "simpleqa": (_simpleqa, ("problem", "answer")),
}


def items(rows, dataset: str) -> tuple[list[QAItem], int]:
  """(`QAItem`s of released rows of `dataset`, rows dropped: SQuAD rows
  without an answer)."""
  if dataset not in ADAPTERS:
    raise ValueError(f"unknown QA dataset schema {dataset!r}; valid: "
                     f"{', '.join(ADAPTERS)} (config.data.schema)")
  fn, need = ADAPTERS[dataset]
  out, dropped = [], 0
  for i in range(len(rows)):
    row = rows[i]
    if i == 0 and not set(need) <= set(row):
      raise ValueError(f"{dataset} rows need columns {', '.join(need)} (as "
                       f"released); got {sorted(row)}: set config.data.schema "
                       f"to the dataset's ({', '.join(ADAPTERS)})")
    item = fn(row)
    if not item.answers:
      dropped += 1
      continue
    out.append(item)
  return out, dropped


# -- prompts (the SE code's `generate_answers.py` / `utils.py`) -------------

# BRIEF_PROMPTS["default"]; brief_always=False: once, before the examples.
BRIEF = "Answer the following question as briefly as possible.\n"


def make_prompt(item: QAItem, answer: str | None = None) -> str:
  """The SE code's `make_prompt`: "Context: ..." (when the dataset uses
  its context), "Question: ...", then "Answer: {answer}\\n\\n" for a
  few-shot example or "Answer:" for the question asked."""
  out = f"Context: {item.context}\n" if item.use_context else ""
  out += f"Question: {item.question}\n"
  return out + (f"Answer: {answer}\n\n" if answer else "Answer:")


def few_shot_prompt(examples: list[QAItem]) -> str:
  """`construct_fewshot_prompt_from_indices`: the brief instruction, then
  each example with its first reference answer."""
  return BRIEF + "".join(make_prompt(x, x.answers[0]) for x in examples)


def prompt(item: QAItem, few_shot: str) -> str:
  """The prompt one question is asked with (few-shot prefix + question)."""
  return few_shot + make_prompt(item)
