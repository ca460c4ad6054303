"""TOFU's own metrics: forget quality (truth-ratio KS test) and model utility.

Ported from the TOFU reference code (github.com/locuslab/tofu, commit
bdc209e: `evaluate_util.py`, `aggregate_eval_stat.py`, `data_module.py`):

  * per item, the answer loss is the summed token cross-entropy of the
    answer given the question (`get_batch_loss`, prompt tokens masked),
    divided by its number of answer tokens (`avg_gt_loss`,
    `avg_paraphrased_loss`, `average_perturb_loss` [N, K]);
  * truth ratio R = exp(mean_k perturbed_k - paraphrased) (per-token losses);
  * forget quality = the p-value of the two-sample KS test between the
    unlearned model's and the retain model's truth ratios on the forget set
    (`get_forget_quality`);
  * model utility = the harmonic mean of nine numbers: ROUGE-L recall,
    probability and truth ratio on the retain set, real authors and world
    facts (`get_model_utility`). Probability is mean exp(-avg_gt_loss) on
    the retain (and forget) set, and exp(-gt) / (exp(-gt) + sum_k
    exp(-perturbed_k)) on real authors / world facts; the truth-ratio entry
    is mean max(0, 1 - 1/R) there, mean min(R, 1/R) on the forget set.

The arithmetic works on arrays (losses, recalls); `task_stats` runs a model
over a TOFU task's rows to produce them. `TASKS` names the released subsets
each task reads and the answer keys its reference config uses
(`config/eval_everything.yaml`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import special
from scipy import stats

IGNORE_INDEX = -100

# task -> (kind, subset with `question`, `answer`, the paraphrased and
# perturbed answers; base_answer_key, perturbed_answer_key) as in TOFU's
# eval_everything.yaml. "{forget}" is the forget split (forget10 ...).
TASKS = {
    "retain": ("retain_perturbed", "paraphrased_answer", "perturbed_answer"),
    "real_authors": ("real_authors_perturbed", "answer", "perturbed_answer"),
    "world_facts": ("world_facts_perturbed", "answer", "perturbed_answer"),
    "forget": ("{forget}_perturbed", "paraphrased_answer",
               "perturbed_answer"),
}
UTILITY_TASKS = ("retain", "real_authors", "world_facts")


# -- losses from model outputs -------------------------------------------------


def batch_loss(logits: Any, labels: Any) -> np.ndarray:
  """Summed next-token cross-entropy per row `[B]` (TOFU `get_batch_loss`).

  Args:
    logits: `[B, T, V]` model outputs at every position.
    labels: `[B, T]` token ids, IGNORE_INDEX (-100) where no loss is taken;
      position t's logits predict labels[t + 1].
  """
  logits = np.asarray(logits, np.float64)[:, :-1]
  labels = np.asarray(labels)[:, 1:]
  keep = labels != IGNORE_INDEX
  safe = np.where(keep, labels, 0)
  logp = logits - special.logsumexp(logits, axis=-1, keepdims=True)
  nll = -np.take_along_axis(logp, safe[..., None], -1)[..., 0]
  return np.where(keep, nll, 0.0).sum(-1)


def per_token_loss(logits: Any, labels: Any) -> np.ndarray:
  """`batch_loss` / the number of loss tokens of the row (`avg_gt_loss`)."""
  n = (np.asarray(labels)[:, 1:] != IGNORE_INDEX).sum(-1)
  return batch_loss(logits, labels) / n


# -- the statistics ------------------------------------------------------------


def _perturbed(average_perturb_loss: Any, n: int) -> np.ndarray:
  arr = np.asarray(average_perturb_loss, np.float64)
  if arr.ndim != 2 or arr.shape[0] != n:
    raise ValueError(f"average_perturb_loss must be [N={n}, K] (one row of "
                     f"per-token losses per item), got shape {arr.shape}")
  return arr


def truth_ratio(avg_paraphrased_loss: Any,
                average_perturb_loss: Any) -> np.ndarray:
  """R = exp(mean_k perturbed_k - paraphrased), per item `[N]`.

  Inputs are per-token answer losses: `[N]` of the paraphrased (or, for real
  authors / world facts, the true) answer and `[N, K]` of the K perturbed
  answers. R > 1 when the model prefers the (paraphrased) truth.
  """
  para = np.asarray(avg_paraphrased_loss, np.float64)
  pert = _perturbed(average_perturb_loss, len(para))
  return np.exp(pert.mean(-1) - para)


def forget_quality(unlearn_paraphrased: Any, unlearn_perturbed: Any,
                   retain_paraphrased: Any, retain_perturbed: Any
                   ) -> dict[str, float]:
  """TOFU forget quality: KS test of the two models' forget truth ratios.

  `unlearn_*` are the unlearned model's per-token losses on the forget set
  (`[N]` paraphrased, `[N, K]` perturbed), `retain_*` those of the model
  trained on the retain set only. Returns {"forget_quality": p-value,
  "ks_statistic": D}; a p-value near 1 means indistinguishable.
  """
  a = truth_ratio(unlearn_paraphrased, unlearn_perturbed)
  b = truth_ratio(retain_paraphrased, retain_perturbed)
  res = stats.ks_2samp(a, b)
  return {"forget_quality": float(res.pvalue),
          "ks_statistic": float(res.statistic)}


def task_metrics(kind: str, *, avg_gt_loss: Any, rouge_l_recall: Any,
                 avg_paraphrased_loss: Any, average_perturb_loss: Any
                 ) -> dict[str, float]:
  """{"rouge", "prob", "truth_ratio"} of one task (`get_model_utility`).

  `kind` is a key of `TASKS`: "retain" and "forget" score probability as
  mean exp(-avg_gt_loss); "real_authors" and "world_facts" as the truth's
  share of the (truth + perturbed) probabilities. The truth-ratio entry is
  mean min(R, 1/R) for "forget", mean max(0, 1 - 1/R) otherwise.
  """
  if kind not in TASKS:
    raise ValueError(f"TOFU task {kind!r}; valid: {', '.join(TASKS)}")
  gt = np.asarray(avg_gt_loss, np.float64)
  pert = _perturbed(average_perturb_loss, len(gt))
  if kind in ("retain", "forget"):
    prob = float(np.mean(np.exp(-gt)))
  else:
    true_p = np.exp(-gt)
    prob = float(np.mean(true_p / (true_p + np.exp(-pert).sum(-1))))
  r = truth_ratio(avg_paraphrased_loss, pert)
  tr = (np.minimum(r, 1 / r) if kind == "forget"
        else np.maximum(0, 1 - 1 / r))
  return {"rouge": float(np.mean(np.asarray(rouge_l_recall, np.float64))),
          "prob": prob, "truth_ratio": float(np.mean(tr))}


def model_utility(per_task: Mapping[str, Mapping[str, float]]) -> float:
  """Harmonic mean of ROUGE, probability and truth ratio on the retain set,
  real authors and world facts (`task_metrics` of each; nine numbers)."""
  missing = [t for t in UTILITY_TASKS if t not in per_task]
  if missing:
    raise ValueError(f"model utility needs the tasks {missing} too")
  vals = [per_task[t][m] for t in UTILITY_TASKS
          for m in ("rouge", "prob", "truth_ratio")]
  return float(stats.hmean(vals))
