"""lm-evaluation-harness's GSM8K scoring, ported as the tests' reference.

`ref_score(completion, answer, filter_name)` is what the harness computes
for one row; `jaxlab.evals.gsm8k` is checked against it
(tests/evals/gsm8k_test.py) and the real-run tests that score GSM8K
(calibration, DPad, MathFimer) compare their runs' accuracies with it.
"""

import re
import string

import numpy as np

# --- Reference: a port of lm-evaluation-harness (EleutherAI), the gsm8k task
# lm_eval/tasks/gsm8k/gsm8k.yaml (metadata version 3.0, commit 47f16bf6):
# filters `strict-match` / `flexible-extract` (regex + take_first) and the
# exact_match metric's arguments; lm_eval/filters/extraction.py
# (RegexFilter.apply, commit 03ebd203); lm_eval/api/metrics.py
# (exact_match_hf_evaluate).
class _RefRegexFilter:

  def __init__(self, regex_pattern=r"#### (\-?[0-9\.\,]+)", group_select=0,
               fallback="[invalid]"):
    self.regex = re.compile(regex_pattern)
    self.group_select = group_select
    self.fallback = fallback

  def apply(self, resps, docs):
    del docs

    def filter_set(inst):
      filtered = []
      for resp in inst:
        match = self.regex.findall(resp)
        if match:
          match = match[self.group_select]
          if isinstance(match, tuple):
            match = [m for m in match if m][0]
          match = match.strip()
        else:
          match = self.fallback
        filtered.append(match)
      return filtered

    return list(map(filter_set, resps))


def _ref_take_first(resps):
  return [r[0] for r in resps]


def _ref_exact_match_hf_evaluate(predictions, references,
                                 regexes_to_ignore=None, ignore_case=False,
                                 ignore_punctuation=False,
                                 ignore_numbers=False):
  if regexes_to_ignore is not None:
    for s in regexes_to_ignore:
      predictions = np.array([re.sub(s, "", x) for x in predictions])
      references = np.array([re.sub(s, "", x) for x in references])
  else:
    predictions = np.asarray(predictions)
    references = np.asarray(references)
  if ignore_case:
    predictions = np.char.lower(predictions)
    references = np.char.lower(references)
  if ignore_punctuation:
    repl_table = string.punctuation.maketrans("", "", string.punctuation)
    predictions = np.char.translate(predictions, table=repl_table)
    references = np.char.translate(references, table=repl_table)
  if ignore_numbers:
    repl_table = string.digits.maketrans("", "", string.digits)
    predictions = np.char.translate(predictions, table=repl_table)
    references = np.char.translate(references, table=repl_table)
  score_list = predictions == references
  return {"exact_match": np.mean(score_list)}


_REF_FILTERS = {
    "strict-match": dict(regex_pattern=r"#### (\-?[0-9\.\,]+)"),
    "flexible-extract": dict(regex_pattern=r"(-?[$0-9.,]{2,})|(-?[0-9]+)",
                             group_select=-1),
}
_REF_METRIC = dict(ignore_case=True, ignore_punctuation=False,
                   regexes_to_ignore=[",", "\\$", "(?s).*#### ", "\\.$"])


def ref_score(completion: str, answer: str, filter_name: str) -> float:
  """The harness's exact_match of one completion (repeats = 1) on a doc
  whose target is the `answer` field."""
  filt = _RefRegexFilter(**_REF_FILTERS[filter_name])
  pred = _ref_take_first(filt.apply([[completion]], None))[0]
  return float(_ref_exact_match_hf_evaluate([pred], [answer],
                                            **_REF_METRIC)["exact_match"])
# --- end of the reference port.


# GSM8K's released layout (huggingface.co/datasets/openai/gsm8k: the README's
# `configs:` block; main/{train,test}-00000-of-00001.parquet with `question`
# and `answer` ending in `#### n`), for the real-run tests to write a copy.
README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
# GSM8K (a test copy in the released layout)
"""


def write_gsm8k(root: str, splits: dict) -> str:
  """A local copy of GSM8K's `main` config at `root`: the README and one
  parquet file a split of `splits` {split: [(question, answer), ...]}."""
  import os  # pylint: disable=g-import-not-at-top
  import datasets  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.join(root, "main"), exist_ok=True)
  with open(os.path.join(root, "README.md"), "w") as f:
    f.write(README)
  for split, rows in splits.items():
    datasets.Dataset.from_dict(
        {"question": [q for q, _ in rows], "answer": [a for _, a in rows]}
    ).to_parquet(os.path.join(root, "main",
                              f"{split}-00000-of-00001.parquet"))
  return root
