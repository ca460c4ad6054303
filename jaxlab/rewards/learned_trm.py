"""Thinking reward models of the Trust-GRPO miniature (paper G): R^t.

    fn, info = THINKING_REWARDS.get("learned")(task, config.trm, seed)
    rt = fn(question_ids, completions)      # [N] scores in [0, 1] (NaN:
                                            # malformed, as 0 after clip)

Two registered TRMs (`config.trust.trm`): "synthetic" is the task's rule
judge itself (`Task.thinking`); "learned" is a `LearnedTRM`, a
`TinyThinkingScorer` fitted per seed with the library loop on noisy,
bin-balanced judge labels (`fit_learned_trm`), reported by its error
against the judge.
"""

from __future__ import annotations

import numpy as np

from jaxlab import registry
from jaxlab.data.synthetic import thinking_task
from jaxlab.data.synthetic.thinking_task import Task
from jaxlab.rewards import thinking as thinking_rewards

THINKING_REWARDS = registry.Registry("thinking reward model (trust.trm)")


class LearnedTRM:
  """R^t from a `TinyThinkingScorer` trained on judge-labelled rollouts.

  Spec G item 1 in miniature: (question, response) pairs drawn like the
  format-warm-started policy's rollouts (random question, HACK with
  probability `hack_prob`, else a uniform value), labelled by the judge
  (the synthetic TRM of `Task.thinking`, hackable subset included) plus
  Gaussian noise and rounded to the paper's 0.1 steps, balanced over the
  ten score bins (`balance_by_bins`: at most `per_bin` rows per bin) and
  fitted by BCE with the library loop (`TinyThinkingScorer.fit`, the
  trainer's step on the registered `thinking_scorer_bce` loss). In the RL
  loop it scores the question and the thinking as text; a malformed
  completion gets NaN, which `TrustConfig.clip_thinking` (f) maps to 0, as
  the synthetic TRM's 0.
  """

  def __init__(self, task: Task, scorer: thinking_rewards.TinyThinkingScorer):
    self.task, self.scorer = task, scorer

  def __call__(self, qis, completions) -> np.ndarray:
    texts = [self.task.thinking_text(c) for c in completions]
    ok = [i for i, t in enumerate(texts) if t is not None]
    out = np.full(len(texts), np.nan, np.float32)
    if ok:
      out[ok] = self.scorer([self.task.question_text(qis[i]) for i in ok],
                            [texts[i] for i in ok])
    return out

  def table(self) -> np.ndarray:
    """`[questions, 1 + K]` scores of HACK, v = 0..K-1 per question."""
    k, n = self.task.k, len(self.task.questions)
    qis = [q for q in range(n) for _ in range(k + 1)]
    comps = [self.task.completion(v) for _ in range(n)
             for v in [None] + list(range(k))]
    return self(qis, comps).reshape(n, k + 1)


def fit_learned_trm(task: Task, cfg, seed: int
                    ) -> tuple[LearnedTRM, dict[str, float]]:
  """Trains the TRM (`config.trm`) and measures it against the judge.

  Returns the scorer and {"trm_mae": mean |learned - judge| over every
  (question, thinking) pair, "trm_argmax_agree": fraction of questions whose
  top-scored thinking is the judge's, "trm_num_train", "trm_final_loss"}.
  """
  qs, ts, ys = thinking_task.trm_training_data(task, cfg, seed)
  scorer = thinking_rewards.TinyThinkingScorer(
      thinking_rewards.TinyScorerConfig(
          num_buckets=cfg.num_buckets, dim=cfg.dim, hidden=cfg.hidden,
          seed=seed))
  info = scorer.fit(qs, ts, ys, steps=cfg.steps, batch_size=cfg.batch_size,
                    lr=cfg.lr, balance=cfg.balance,
                    per_bin=cfg.per_bin or None, seed=seed)
  trm = LearnedTRM(task, scorer)
  learned, judge = trm.table(), thinking_task.judge_table(task)
  return trm, {"trm_mae": float(np.abs(learned - judge).mean()),
               "trm_argmax_agree": float(np.mean(
                   learned.argmax(1) == judge.argmax(1))),
               "trm_num_train": float(info["num_train"]),
               "trm_final_loss": float(info["final_loss"])}


@THINKING_REWARDS.register("synthetic")
def synthetic_trm(task: Task, cfg=None, seed: int = 0):
  """The rule judge `Task.thinking` itself (no metrics)."""
  del cfg, seed
  return (lambda qis, comps: np.array(
      [task.thinking(q, c) for q, c in zip(qis, comps)], np.float32)), {}


@THINKING_REWARDS.register("learned")
def learned_trm(task: Task, cfg, seed: int):
  """`fit_learned_trm`: (LearnedTRM, its metrics against the judge)."""
  return fit_learned_trm(task, cfg, seed)


def thinking_reward_fn(kind: str, task: Task, cfg, seed: int,
                       cache: dict | None = None):
  """(R^t fn of (question ids, completions), TRM metrics) of TRM `kind`;
  `cache` keeps one per (kind, seed) across variants."""
  if kind not in THINKING_REWARDS:
    raise ValueError(f"config.trust.trm={kind!r}; valid: "
                     f"{', '.join(THINKING_REWARDS.names())}")
  build = THINKING_REWARDS.get(kind)
  if cache is not None and (kind, seed) in cache:
    return cache[(kind, seed)]
  out = build(task, cfg, seed)
  if cache is not None:
    cache[(kind, seed)] = out
  return out
