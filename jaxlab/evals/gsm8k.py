"""GSM8K answer checking as lm-evaluation-harness does it.

    gsm8k.extract("... so she pays $1,200.", gsm8k.FLEXIBLE)  # "$1,200."
    gsm8k.is_correct("... #### 1,200", "...\\n#### 1200", gsm8k.STRICT)

GSM8K as released (`openai/gsm8k`, configs `main` / `socratic`, splits
train / test as `main/{split}-00000-of-00001.parquet`): a `question` and an
`answer` whose last line is `#### <number>`. The harness's `gsm8k` task
(lm_eval/tasks/gsm8k/gsm8k.yaml, metadata version 3.0) scores a
completion in two steps:

* a filter (`lm_eval/filters/extraction.py::RegexFilter`, then
  `take_first`): `re.findall(pattern, completion)`, the `group_select`-th
  match (a tuple's first non-empty group), stripped; `"[invalid]"` when
  nothing matches. `strict-match`: `#### (\\-?[0-9\\.\\,]+)`, the first
  match; `flexible-extract`: `(-?[$0-9.,]{2,})|(-?[0-9]+)`, the last match
  (group_select -1). `extract`.
* `exact_match` (`lm_eval/api/metrics.py::exact_match_hf_evaluate`) with
  `ignore_case: true`, `ignore_punctuation: false` and `regexes_to_ignore`
  `[",", "\\$", "(?s).*#### ", "\\.$"]`: each regex removed (`re.sub(s,
  "", x)`, in that order) from both the filtered completion and the target
  (the whole `answer` field, `doc_to_target: "{{answer}}"`), then both
  lowercased and compared as strings. `normalize` / `exact_match`.

Generation stops at the task's `until` strings ("Question:", "</s>",
"<|im_end|>"; `cut`) before the filter reads the completion.

`answer_class` is the same two steps as a collapsing function B (paper N,
B-calibration on GSM8K: samples with equal normalised final answers form
one class; None where the filter finds nothing). The numeric collapser of
the miniature (`jaxlab.evals.calibration.collapse_numeric`, numbers parsed
as floats) is not the harness's rule ("3.50" and "3.5" differ here, as in
the harness).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

STRICT = "strict-match"
FLEXIBLE = "flexible-extract"
# name -> (regex_pattern, group_select) of the harness's gsm8k filters.
FILTERS: dict[str, tuple[str, int]] = {
    STRICT: (r"#### (\-?[0-9\.\,]+)", 0),
    FLEXIBLE: (r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1),
}
INVALID = "[invalid]"   # RegexFilter's fallback
REGEXES_TO_IGNORE = (",", r"\$", r"(?s).*#### ", r"\.$")
UNTIL = ("Question:", "</s>", "<|im_end|>")   # generation_kwargs.until
_COMPILED = {k: (re.compile(p), g) for k, (p, g) in FILTERS.items()}


def _filter(name: str) -> tuple[re.Pattern[str], int]:
  if name not in _COMPILED:
    raise ValueError(f"unknown GSM8K filter {name!r}; valid: "
                     f"{', '.join(FILTERS)}")
  return _COMPILED[name]


def extract(completion: str, filter_name: str = FLEXIBLE) -> str:
  """The harness's regex filter + take_first on one completion: the
  selected match, stripped, or `INVALID` when the pattern never matches."""
  regex, group = _filter(filter_name)
  found = regex.findall(completion)
  if not found:
    return INVALID
  match = found[group]
  if isinstance(match, tuple):
    match = [m for m in match if m][0]
  return match.strip()


def cut(completion: str, until: Sequence[str] = UNTIL) -> str:
  """`completion` up to the first of the `until` strings (the harness's
  stop sequences; the whole text when none occurs)."""
  end = min([i for i in (completion.find(u) for u in until) if i >= 0],
            default=len(completion))
  return completion[:end]


def normalize(text: str) -> str:
  """`exact_match`'s preprocessing: `REGEXES_TO_IGNORE` removed in order,
  then lowercased (ignore_case; punctuation and digits kept)."""
  for pattern in REGEXES_TO_IGNORE:
    text = re.sub(pattern, "", text)
  return text.lower()


def target(answer: str) -> str:
  """The normalised gold answer of a GSM8K `answer` field ("...#### 1,200"
  -> "1200")."""
  return normalize(answer)


def exact_match(prediction: str, reference: str) -> bool:
  """The harness's exact match of a filtered completion and the target."""
  return normalize(prediction) == normalize(reference)


def is_correct(completion: str, answer: str,
               filter_name: str = FLEXIBLE) -> bool:
  """Whether `completion` answers a GSM8K row whose `answer` field is
  `answer`, under the named filter and exact match."""
  return exact_match(extract(completion, filter_name), answer)


def answer_class(completion: str, filter_name: str = FLEXIBLE) -> str | None:
  """The completion's normalised extracted answer (a B-calibration class),
  None when the filter finds none."""
  got = extract(completion, filter_name)
  return None if got == INVALID else normalize(got)


def score(completions: Sequence[str], answers: Sequence[str],
          filter_name: str = FLEXIBLE) -> np.ndarray:
  """`is_correct` of each (completion, answer) pair, float32 `[N]` (their
  mean is the harness's `exact_match` for that filter)."""
  if len(completions) != len(answers):
    raise ValueError(f"{len(completions)} completions for {len(answers)} "
                     "answers: give one answer per completion")
  return np.asarray([is_correct(c, a, filter_name)
                     for c, a in zip(completions, answers)], np.float32)
