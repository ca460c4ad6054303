"""Trust-GRPO variants (paper G) by name, and the miniature's group reward.

    names = variant_names(config.variants)        # registered names
    trust = trust_config("trust", config.trust)   # TrustConfig, or None
    reward = TaskReward(task, trust, thinking_fn, total_steps=150)
    rewards, metrics = reward(rollout_batch, step, question_ids)
    reward.gamma_rates()    # how often gamma < 1 fired per question subset

`VARIANTS` maps a name to a builder of its `TrustConfig` from the paper's
reading (`TrustConfig.paper(alpha)`, T = `trust.anneal_T` or the total RL
steps); "outcome" is outcome-only (None: no R^t). A new variant is one
`@VARIANTS.register(name)` function, selected by `config.variants`.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxlab import registry
from jaxlab.rewards import thinking as thinking_rewards

CODE_ANNEAL_T = 12000.0  # spec G 8(a): `worker.reward.alpha` in the yaml

VARIANTS = registry.Registry("Trust-GRPO variant (config.variants)")
LABELS: dict[str, str] = {}

Trust = thinking_rewards.TrustConfig


def _variant(name: str, label: str):
  def wrap(fn: Callable[[Trust], Trust | None]):
    LABELS[name] = label
    return VARIANTS.register(name)(fn)
  return wrap


@_variant("outcome", "outcome only")
def _outcome(paper: Trust) -> None:
  del paper


@_variant("thinking", "+ thinking reward")
def _thinking(paper: Trust) -> Trust:
  return paper.replace(use_trust=False, anneal=False)


@_variant("anneal", "+ anneal")
def _anneal(paper: Trust) -> Trust:
  return paper.replace(use_trust=False, anneal=True)


@_variant("trust", "Trust-GRPO (paper)")
def _trust(paper: Trust) -> Trust:
  return paper.replace(use_trust=True, anneal=True)


@_variant("trust_T12000", "Trust-GRPO (paper, code's T = 12000)")
def _trust_t12000(paper: Trust) -> Trust:
  # The shipped code's T (spec G 8(a)) with the paper's other readings.
  return paper.replace(use_trust=True, anneal=True, anneal_T=CODE_ANNEAL_T,
                       anneal_T_is_total_steps=False)


@_variant("trust_code", "Trust-GRPO (code switches)")
def _trust_code(paper: Trust) -> Trust:
  # The shipped code's switches (b), (c) on top of the paper's schedule.
  return paper.replace(use_trust=True, anneal=True,
                       skip_saturated_groups=True, thinking_min_outcome=0.2)


def variant_names(value) -> tuple[str, ...]:
  """`config.variants` (a tuple of names, or one comma-separated string as
  the command line gives it) -> registered names; an unknown one is an
  error listing the valid."""
  if isinstance(value, str):
    value = value.split(",")
  names = tuple(str(v).strip() for v in value if str(v).strip())
  for name in names:
    VARIANTS.get(name)
  return names


def trust_config(variant: str, tc) -> Trust | None:
  """The `TrustConfig` of `variant` from a `config.trust` section (`alpha`,
  `anneal_T`: 0 = T is the total RL steps); None = outcome-only."""
  paper = Trust.paper(alpha=tc.alpha)
  if tc.anneal_T:
    paper = paper.replace(anneal_T=tc.anneal_T, anneal_T_is_total_steps=False)
  return VARIANTS.get(variant)(paper)


class TaskReward:
  """R = R^o (+ gamma alpha exp(-t/T) R^t) of a rollout batch on a task.

  `task` gives `outcome(qi, completion)`, `is_hack(completion)` and the
  `hackable` question set; `thinking_fn(qis, completions)` is R^t (unused
  when `trust` is None). Counts, per subset (hackable / informative), the
  groups where gamma < 1 among those where gamma is defined (both correct
  and wrong responses); for variants without trust, the gamma that *would*
  have fired.
  """

  def __init__(self, task, trust: Trust | None, thinking_fn, *,
               total_steps: int):
    self.task, self.trust, self.thinking_fn = task, trust, thinking_fn
    self.total_steps = total_steps
    self.fired = {"hackable": [0, 0], "informative": [0, 0]}

  def __call__(self, batch, step: int, qis) -> tuple[np.ndarray, dict]:
    task, trust, g = self.task, self.trust, batch.group_size
    ro = np.array([task.outcome(qis[i // g], c)
                   for i, c in enumerate(batch.completions)], np.float32)
    hack = np.array([task.is_hack(c) for c in batch.completions], np.float32)
    hmask = np.repeat([q in task.hackable for q in qis], g)
    metrics = {"outcome": float(ro.mean()),
               "train_hack_rate_hackable": float(hack[hmask].mean()),
               "train_hack_rate_informative": float(hack[~hmask].mean())}
    if trust is None:
      return ro, metrics
    rt = self.thinking_fn([qis[i // g] for i in range(len(batch.completions))],
                          batch.completions)
    r, m = thinking_rewards.combine_trust_rewards(
        ro, rt, g, step, trust, total_steps=self.total_steps)
    correct = ro.reshape(-1, g) >= 0.5
    defined = correct.any(1) & (~correct).any(1)
    gamma = np.asarray(m["gamma"]) if trust.use_trust else np.asarray(
        thinking_rewards.trust_weight(
            np.asarray(m["thinking"]).reshape(-1, g), correct))
    for p, qi in enumerate(qis):
      if defined[p]:
        sub = "hackable" if qi in task.hackable else "informative"
        self.fired[sub][0] += int(gamma[p] < 1.0)
        self.fired[sub][1] += 1
    return np.asarray(r), metrics

  def from_fields(self, *, completions, question, step: int, group_size: int,
                  **_) -> tuple[np.ndarray, dict]:
    """This reward in `GRPOLearner.train`'s keyword form: `question` holds
    each completion's question index (G rows per prompt)."""
    rows = types.SimpleNamespace(completions=completions,
                                 group_size=group_size)
    return self(rows, step, [int(q) for q in question[::group_size]])

  def gamma_rates(self) -> dict[str, float]:
    """`gamma_lt1_rate_<subset>` (NaN if never defined) and
    `gamma_defined_groups_<subset>`."""
    out: dict[str, Any] = {}
    for k, (n_fire, n_def) in self.fired.items():
      out[f"gamma_lt1_rate_{k}"] = n_fire / n_def if n_def else float("nan")
      out[f"gamma_defined_groups_{k}"] = n_def
    return out
