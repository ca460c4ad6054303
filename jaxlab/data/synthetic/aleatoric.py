"""Synthetic QA with aleatoric answers and paraphrases (paper N miniature).

Each question x has a true answer-class distribution p*(k | x) over a few
candidate numbers (aleatoric: several answers are right with different
frequencies, "which colour is a random ball of urn 7?"). Surface forms vary
on both sides, so token-level and concept-level calibration differ:

* question paraphrases: `QUESTION_TEMPLATES` ("u07 pick?", "pick from
  u07?", ...);
* answer paraphrases: `ANSWER_TEMPLATES` ("42", "it is 42", "42.", ...), all
  mapped to the class "42" by the `numeric` collapsing function
  (`jaxlab.evals.calibration.collapse_numeric`).

Two answer styles, selected by the prompt suffix (spec N CPU miniature):

* direct (`" A:"`): the answer right away, drawn from p*(.|x);
* chain of thought (`" T:"`): a scratchpad of `cot_steps` numbers, the first
  drawn from p*(.|x), each next one a copy of the previous with probability
  1 - `cot_error`, else a uniform draw from the value pool (a reasoning
  error; errors compound over the steps), then "so <last number>". The
  reference answer of an evaluation question is always drawn from p*, so
  samples spread by reasoning errors while the plurality vote stays on the
  mode (the self-consistency effect the paper's underconfident base + CoT
  reflects). `cot_error` is [inferred] (the spec only says "errors compound").

Deterministic under `seed`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

QUESTION_TEMPLATES = ("{name} pick?", "pick from {name}?", "{name}: draw?",
                      "draw {name}?")
ANSWER_TEMPLATES = ("{v}", "it is {v}", "{v}.", "answer {v}")
DIRECT, COT = "direct", "cot"
STYLE_SUFFIX = {DIRECT: " A:", COT: " T:"}


@dataclasses.dataclass(frozen=True)
class AleatoricQuestion:
  """One question: its name, candidate answers and their true probabilities.

  Attributes:
    qid: index of the question.
    name: the question's surface identifier ("u07").
    values: candidate answers (numbers from the value pool).
    probs: p*(value | question), summing to 1, sorted descending (so
      `values[0]` is the mode).
  """
  qid: int
  name: str
  values: tuple[int, ...]
  probs: tuple[float, ...]

  @property
  def mode(self) -> int:
    return self.values[0]


@dataclasses.dataclass(frozen=True)
class AleatoricTask:
  """The question set and generation settings (see `make_task`)."""
  questions: tuple[AleatoricQuestion, ...]
  value_pool: tuple[int, ...]
  cot_steps: int
  cot_error: float

  def prompt(self, q: AleatoricQuestion, style: str, template: int) -> str:
    if style not in STYLE_SUFFIX:
      raise ValueError(f"style={style!r}; valid: {', '.join(STYLE_SUFFIX)}")
    t = QUESTION_TEMPLATES[template % len(QUESTION_TEMPLATES)]
    return t.format(name=q.name) + STYLE_SUFFIX[style]

  def sample_value(self, q: AleatoricQuestion, rng: np.random.Generator
                   ) -> int:
    return int(q.values[rng.choice(len(q.values), p=q.probs)])

  def response(self, q: AleatoricQuestion, style: str,
               rng: np.random.Generator) -> str:
    """One training response for `q` in `style` (see the module doc)."""
    v = self.sample_value(q, rng)
    if style == DIRECT:
      return " " + ANSWER_TEMPLATES[rng.integers(len(ANSWER_TEMPLATES))].format(
          v=v)
    steps = [v]
    for _ in range(self.cot_steps - 1):
      if rng.uniform() < self.cot_error:
        steps.append(int(rng.choice(self.value_pool)))
      else:
        steps.append(steps[-1])
    return " " + " ".join(str(s) for s in steps) + f" so {steps[-1]}"

  def training_pairs(self, styles: Sequence[str], samples_per_question: int,
                     seed: int) -> tuple[list[str], list[str]]:
    """(prompts, responses): `samples_per_question` per question and style,
    question templates drawn uniformly."""
    rng = np.random.default_rng(seed)
    prompts, responses = [], []
    for q in self.questions:
      for style in styles:
        for _ in range(samples_per_question):
          prompts.append(self.prompt(q, style,
                                     int(rng.integers(len(QUESTION_TEMPLATES)))))
          responses.append(self.response(q, style, rng))
    return prompts, responses

  def references(self, per_question: int, seed: int) -> list[list[str]]:
    """`per_question` reference answers y ~ p*(.|x) per question."""
    rng = np.random.default_rng(seed)
    return [[str(self.sample_value(q, rng)) for _ in range(per_question)]
            for q in self.questions]


def make_task(*, num_questions: int = 48, num_values: int = 10,
              values_per_question: int = 3, concentration: float = 1.0,
              cot_steps: int = 4, cot_error: float = 0.15,
              seed: int = 0) -> AleatoricTask:
  """Questions with p*(.|x) ~ Dirichlet(concentration) over
  `values_per_question` distinct values of a pool of `num_values` two-digit
  numbers (so B-confidences spread over [1/values_per_question, 1])."""
  if values_per_question < 1 or values_per_question > num_values:
    raise ValueError(f"values_per_question={values_per_question} must be in "
                     f"[1, num_values={num_values}]")
  if not 0.0 <= cot_error <= 1.0:
    raise ValueError(f"cot_error={cot_error} must be in [0, 1]")
  if cot_steps < 1:
    raise ValueError(f"cot_steps={cot_steps} must be >= 1")
  if num_values > 89:
    raise ValueError(f"num_values={num_values}: the pool holds two-digit "
                     "numbers (at most 89)")
  rng = np.random.default_rng(seed)
  pool = tuple(int(v) for v in rng.choice(np.arange(10, 100), num_values,
                                          replace=False))
  questions = []
  for i in range(num_questions):
    vals = rng.choice(pool, values_per_question, replace=False)
    probs = rng.dirichlet([concentration] * values_per_question)
    order = np.argsort(-probs, kind="stable")
    questions.append(AleatoricQuestion(
        qid=i, name=f"u{i:02d}", values=tuple(int(v) for v in vals[order]),
        probs=tuple(float(p) for p in probs[order])))
  return AleatoricTask(tuple(questions), pool, int(cot_steps),
                       float(cot_error))


def dpo_pairs(task: AleatoricTask, pairs_per_question: int, seed: int
              ) -> tuple[list[str], list[str], list[str]]:
  """(prompts, chosen, rejected) preference pairs, direct style: chosen =
  the mode answer, rejected = another answer drawn from p*(.|x) (any other
  pool value for a one-answer question); paraphrases drawn uniformly."""
  rng = np.random.default_rng(60_000 + seed)
  prompts, chosen, rejected = [], [], []
  for q in task.questions:
    others = np.array(q.probs[1:])
    for _ in range(pairs_per_question):
      t = int(rng.integers(len(QUESTION_TEMPLATES)))
      prompts.append(task.prompt(q, DIRECT, t))
      tmpl = ANSWER_TEMPLATES
      chosen.append(" " + tmpl[rng.integers(len(tmpl))].format(v=q.mode))
      if len(others) and others.sum() > 0:
        v = q.values[1 + rng.choice(len(others), p=others / others.sum())]
      else:  # a one-answer question: any other pool value
        v = int(rng.choice([x for x in task.value_pool if x != q.mode]))
      rejected.append(" " + tmpl[rng.integers(len(tmpl))].format(v=v))
  return prompts, chosen, rejected
