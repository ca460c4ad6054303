"""Ranking metrics over per-query candidate lists, and batched scoring.

All metrics take `scores` and `labels` of shape `[num_queries,
num_candidates]` (labels: graded relevance >= 0, 0 = irrelevant) and return
the mean over queries as a Python float.

* `ndcg_at_k`: linear gains, discount 1/log2(rank + 1), ties in `scores`
  averaged as in scikit-learn's `ndcg_score` (McSherry & Najork, 2008);
  queries with no relevant candidate score 0, as in sklearn.
* `mrr_at_k`: 1 / rank of the first relevant candidate within the top k
  (0 if none).
* `recall_at_k`: fraction of a query's relevant candidates within the top k
  (queries without relevant candidates count 0).

MRR and Recall need a strict order; ties are broken pessimistically by
default (relevant candidates after irrelevant ones with the same score), so a
constant scorer earns no credit from the candidate order. `ties="stable"`
breaks them by candidate index instead.
"""

from collections.abc import Callable, Mapping

import numpy as np


def _check(scores, labels, k: int) -> tuple[np.ndarray, np.ndarray]:
  scores = np.asarray(scores, np.float64)
  labels = np.asarray(labels, np.float64)
  if scores.ndim != 2 or scores.shape != labels.shape:
    raise ValueError("scores and labels must both be [num_queries, "
                     f"num_candidates]; got {scores.shape} and "
                     f"{labels.shape}")
  if k is not None and int(k) < 1:
    raise ValueError(f"k must be >= 1, got {k}")
  if np.any(labels < 0):
    raise ValueError("labels must be non-negative relevance grades")
  return scores, labels


def _discounts(n: int) -> np.ndarray:
  return 1.0 / np.log2(np.arange(n) + 2.0)


def dcg_at_k(scores_c: np.ndarray, gains_c: np.ndarray, k: int) -> float:
  """Tie-averaged DCG@k of one query (sklearn's `_tie_averaged_dcg`)."""
  n = len(scores_c)
  disc = _discounts(n)
  disc[min(k, n):] = 0.0
  cum_disc = np.concatenate([[0.0], np.cumsum(disc)])
  # Groups of equal score, best first; each group shares its mean gain over
  # the ranks it occupies.
  uniq, inverse, counts = np.unique(-scores_c, return_inverse=True,
                                    return_counts=True)
  group_gain = np.zeros(len(uniq))
  np.add.at(group_gain, inverse, gains_c)
  ends = np.cumsum(counts)
  starts = ends - counts
  return float(np.sum(group_gain / counts *
                      (cum_disc[ends] - cum_disc[starts])))


def ndcg_at_k(scores, labels, k: int = 10) -> float:
  """Mean nDCG@k over queries (linear gains; sklearn `ndcg_score` parity)."""
  scores, labels = _check(scores, labels, k)
  out = []
  for s, g in zip(scores, labels):
    ideal = np.sort(g)[::-1][:k]
    idcg = float(np.sum(ideal * _discounts(len(g))[:len(ideal)]))
    out.append(0.0 if idcg == 0 else dcg_at_k(s, g, k) / idcg)
  return float(np.mean(out))


def rank_order(scores, labels, ties: str = "pessimistic") -> np.ndarray:
  """Candidate indices `[Q, C]` best first under the tie policy."""
  scores = np.asarray(scores, np.float64)
  labels = np.asarray(labels, np.float64)
  if ties == "pessimistic":
    # Sort by score desc, then relevance asc (relevant last among ties).
    return np.lexsort((labels > 0, -scores), axis=-1)
  if ties == "stable":
    return np.argsort(-scores, axis=-1, kind="stable")
  raise ValueError(f"unknown ties policy {ties!r}; valid: pessimistic, stable")


def mrr_at_k(scores, labels, k: int = 10, ties: str = "pessimistic") -> float:
  """Mean reciprocal rank of the first relevant candidate within top k."""
  scores, labels = _check(scores, labels, k)
  order = rank_order(scores, labels, ties)
  rel_top = np.take_along_axis(labels, order, axis=-1)[:, :k] > 0
  first = np.argmax(rel_top, axis=-1)
  rr = np.where(rel_top.any(axis=-1), 1.0 / (first + 1.0), 0.0)
  return float(np.mean(rr))


def recall_at_k(scores, labels, k: int = 10,
                ties: str = "pessimistic") -> float:
  """Mean fraction of relevant candidates retrieved within the top k."""
  scores, labels = _check(scores, labels, k)
  order = rank_order(scores, labels, ties)
  rel = labels > 0
  hits = np.take_along_axis(rel, order, axis=-1)[:, :k].sum(-1)
  total = rel.sum(-1)
  return float(np.mean(np.where(total > 0, hits / np.maximum(total, 1), 0.0)))


def ranking_metrics(scores, labels, ks=(1, 5, 10)) -> dict[str, float]:
  """nDCG@k, MRR@k and Recall@k for each k, keyed like `ndcg@10`."""
  out = {}
  for k in ks:
    out[f"ndcg@{k}"] = ndcg_at_k(scores, labels, k)
    out[f"mrr@{k}"] = mrr_at_k(scores, labels, k)
    out[f"recall@{k}"] = recall_at_k(scores, labels, k)
  return out


def batched_scores(score_fn: Callable[[Mapping[str, np.ndarray]], np.ndarray],
                   inputs: Mapping[str, np.ndarray],
                   batch_size: int) -> np.ndarray:
  """Scores `[n]` of n candidates, `batch_size` at a time.

  `inputs` maps names to arrays with a leading candidate axis n; the last
  chunk is padded (by repeating row 0) to `batch_size` so a jitted
  `score_fn` compiles once. `score_fn(chunk) -> [batch_size]` (or with any
  leading shape that flattens to batch_size).
  """
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  arrays = {k: np.asarray(v) for k, v in inputs.items()}
  sizes = {v.shape[0] for v in arrays.values()}
  if len(sizes) != 1:
    raise ValueError(f"inputs disagree on the candidate axis: "
                     f"{ {k: v.shape for k, v in arrays.items()} }")
  n = sizes.pop()
  out = []
  for start in range(0, n, batch_size):
    chunk = {k: v[start:start + batch_size] for k, v in arrays.items()}
    m = len(next(iter(chunk.values())))
    if m < batch_size:
      chunk = {k: np.concatenate([v, np.repeat(v[:1], batch_size - m, 0)])
               for k, v in chunk.items()}
    out.append(np.asarray(score_fn(chunk)).reshape(-1)[:m])
  return np.concatenate(out) if out else np.zeros((0,), np.float32)
