"""Verifiable-answer rewards for RL on text: 1 when the answer matches.

    reward = answer_reward("... so the sum is 12.", "12", collapse="numeric")

The completion and the reference answer are both mapped to a class by a
collapsing function of `jaxlab.evals.calibration.COLLAPSERS` ("exact",
"normalized", "numeric", ...); the reward is 1 when the classes agree and
the completion's class is readable (a completion with no number under
"numeric" earns 0, never a match of two unreadable answers).
"""

from collections.abc import Sequence

import numpy as np

from jaxlab.evals import calibration


def answer_reward(completion: str, answer: str, *, collapse: str = "numeric",
                  question: str = "") -> float:
  """1.0 iff `completion` gives `answer` under the collapsing function."""
  fn = calibration.get_collapser(collapse)
  got = fn(question, completion)
  want = fn(question, answer)
  if want is None:
    raise ValueError(f"reference answer {answer!r} is unreadable under "
                     f"collapse={collapse!r}")
  return float(got is not None and got == want)


def answer_rewards(completions: Sequence[str], answers: Sequence[str], *,
                   collapse: str = "numeric") -> np.ndarray:
  """`answer_reward` of each (completion, answer) pair, float32 `[N]`."""
  if len(completions) != len(answers):
    raise ValueError(f"{len(completions)} completions for {len(answers)} "
                     "answers")
  return np.asarray([answer_reward(c, a, collapse=collapse)
                     for c, a in zip(completions, answers)], np.float32)
