"""The controller miniature's instances (paper I): padded algorithmic sets.

`pad_lengths` fixes one training and one evaluation length for every task
(one compiled step and forward per variant); `eval_sets` encodes the
held-out instances at the training lengths and at each test length
(`jaxlab.data.synthetic.algorithmic`), in the token space of
`config.num_values` values (`num_values`, vocabulary `vocab_size`).
"""

from __future__ import annotations

import numpy as np

from jaxlab.data.synthetic import algorithmic as alg


def num_values(config) -> int:
  """Token values of the config's tasks (`config.num_values`, default the
  miniature's 64)."""
  return int(config.get("num_values", alg.NUM_VALUES))


def vocab_size(config) -> int:
  """The models' vocabulary: the values plus BOS, SEP, EOS, PAD."""
  return alg.vocab_size(num_values(config))


def pad_lengths(config) -> tuple[int, int]:
  """(train T, eval T) shared by every task, so that every task and length
  reuses one compiled train step and one compiled forward per variant
  (compilation dominates the CPU miniature; right padding is harmless: each
  position sees only its prefix)."""
  tasks = [t for t in config.tasks.split(",") if t]
  v = num_values(config)

  def longest(n):
    return max(len(e.tokens) - 1 for t in tasks
               for e in alg.make_examples(t, [n], 64, seed=10 ** 6,
                                          num_values=v))
  train_t = longest(max(config.train_lengths)) + 4
  eval_t = max(train_t, longest(max(config.test_lengths)) + 4)
  return train_t, eval_t


def eval_sets(config, task: str) -> dict[str, dict[str, np.ndarray]]:
  t, v = pad_lengths(config)[1], num_values(config)
  out = {"train": alg.encode(alg.make_examples(
      task, list(config.train_lengths), config.num_eval, seed=77,
      num_values=v), pad_to=t, num_values=v)}
  for n in config.test_lengths:
    out[str(n)] = alg.encode(alg.make_examples(
        task, [n], config.num_eval, seed=78 + n, num_values=v), pad_to=t,
                             num_values=v)
  return out
