r"""Math word-problem datasets as released, as (question, solution) items.

One adapter per released schema (read through `pipeline.read_split`):

* `gsm8k` (openai/gsm8k, configs `main` / `socratic`): `question`, `answer`
  whose last line is `#### <number>`; the solution is the whole `answer`
  (the harness's target, `jaxlab.evals.gsm8k`).
* `math` (hendrycks/competition_math and its copies: `problem`, `level`,
  `type`, `solution`): the solution is LaTeX prose ending in `\boxed{}`
  (checked by `jaxlab.evals.math_answers`).
* `numina` (AI-MO/NuminaMath-CoT, config `default`: `source`, `problem`,
  `solution`, `messages`): the chain-of-thought solutions MathFimer's FIM
  model learns from (spec H.2).

`MathItem.lines` is the solution as lines for the step splitter (spec H.1:
one step per line, `jaxlab.objectives.fim.split_steps`). MATH solutions are
often a single paragraph; a solution without a line break is split after
each sentence end (". ", "! ", "? " followed by a capital, a digit or "$";
[inferred], the paper's Appendix B rules are not public). The question
is kept on one line (newlines -> spaces): the FIM format puts it at the
head of the prefix, before the first step separator.
"""

from __future__ import annotations

import dataclasses
import re

# schema -> (question column, solution column)
SCHEMAS: dict[str, tuple[str, str]] = {
    "gsm8k": ("question", "answer"),
    "math": ("problem", "solution"),
    "numina": ("problem", "solution"),
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9$\\])")


@dataclasses.dataclass(frozen=True)
class MathItem:
  question: str   # one line
  solution: str   # the released solution / answer field, unchanged

  @property
  def lines(self) -> str:
    """The solution with one step per line (see the module docstring)."""
    text = self.solution.strip()
    if "\n" in text:
      return text
    return "\n".join(_SENTENCE_END.split(text))


def one_line(text: str) -> str:
  """`text` with every run of whitespace containing a newline -> one space."""
  return re.sub(r"\s*\n\s*", " ", text.strip())


def items(rows, schema: str) -> list[MathItem]:
  """The `MathItem`s of released rows of `schema` (`SCHEMAS`)."""
  if schema not in SCHEMAS:
    raise ValueError(f"unknown math data schema {schema!r}; valid: "
                     f"{', '.join(SCHEMAS)} (config.data.schema)")
  q, s = SCHEMAS[schema]
  out = []
  for i in range(len(rows)):
    row = rows[i]
    if i == 0 and not {q, s} <= set(row):
      raise ValueError(f"{schema} rows need columns {q!r} and {s!r} (as "
                       f"released); got {sorted(row)}: set config.data.schema"
                       f" to the dataset's schema ({', '.join(SCHEMAS)})")
    out.append(MathItem(one_line(row[q]), row[s]))
  return out
