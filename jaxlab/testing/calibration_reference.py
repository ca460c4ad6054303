"""B-calibration's per-question labels recomputed from saved samples.

Shared by the real-run calibration tests (GSM8K, OpenMathInstruct-2,
TriviaQA, SimpleQA): what spec N.3 defines, written independently of
`jaxlab.evals.calibration`, applied to the samples a run saved in
completions.jsonl. smECE is recomputed with Apple's relplot (the
reference the library's smECE is checked against).
"""

import collections

import numpy as np


def plurality_first(completions, classes):
  """(count share, first completion) of the plurality class (ties: the
  class sampled first), as spec N.3 defines the prediction."""
  classes = ["<none>" if c is None else c for c in classes]
  counts = collections.Counter(classes)
  best = max(counts.values())
  pred = next(c for c in classes if counts[c] == best)
  return best / len(classes), completions[classes.index(pred)]


def recompute(records, collapse: str, grade):
  """(confidence, correct) arrays of saved records under one B:
  `plurality_first` of each record's saved classes, graded by
  `grade(record, completion)`."""
  conf, correct = [], []
  for r in records:
    c, first = plurality_first(r["completions"], r["classes"][collapse])
    conf.append(c)
    correct.append(float(bool(grade(r, first))))
  return np.asarray(conf), np.asarray(correct)


def relplot_smece(confidence, correct) -> float:
  """relplot's smECE (github.com/apple/ml-calibration, the PyPI package)."""
  import relplot  # pylint: disable=g-import-not-at-top
  return float(relplot.smECE(np.asarray(confidence, np.float64),
                             np.asarray(correct, np.float64)))
