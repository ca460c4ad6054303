"""Ranking metrics vs scikit-learn's ndcg_score and a hand MRR."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from sklearn.metrics import ndcg_score

from jaxlab.evals import ranking


def _hand_mrr(scores, labels, k):
  """Pessimistic ties: relevant candidates ranked after equal-score ones."""
  rr = []
  for s, l in zip(scores, labels):
    order = sorted(range(len(s)), key=lambda i: (-s[i], l[i] > 0))
    rank = next((r + 1 for r, i in enumerate(order[:k]) if l[i] > 0), None)
    rr.append(0.0 if rank is None else 1.0 / rank)
  return float(np.mean(rr))


class RankingTest(parameterized.TestCase):

  @parameterized.parameters(1, 3, 10, 20)
  def test_ndcg_matches_sklearn_with_ties(self, k):
    rng = np.random.default_rng(k)
    # Rounded scores give many ties; graded labels; some all-zero rows.
    scores = np.round(rng.normal(size=(12, 15)), 1)
    scores[0] = 0.5  # every candidate tied
    labels = rng.integers(0, 3, size=(12, 15)) * (rng.random((12, 15)) < .4)
    labels[1] = 0  # no relevant candidate -> 0, as in sklearn
    want = ndcg_score(labels, scores, k=k)
    self.assertAlmostEqual(ranking.ndcg_at_k(scores, labels, k), want,
                           places=12)

  def test_ndcg_hand_value(self):
    # Relevant item at rank 2 of 3: DCG = 1/log2(3), IDCG = 1.
    got = ranking.ndcg_at_k([[3., 2., 1.]], [[0, 1, 0]], k=10)
    self.assertAlmostEqual(got, 1.0 / np.log2(3.0))
    # k smaller than the rank of the only relevant item -> 0.
    self.assertEqual(ranking.ndcg_at_k([[3., 2., 1.]], [[0, 0, 1]], k=2), 0.)

  @parameterized.parameters(1, 2, 5, 30)
  def test_mrr_matches_hand(self, k):
    rng = np.random.default_rng(100 + k)
    scores = np.round(rng.normal(size=(20, 12)), 0)  # heavy ties
    labels = (rng.random((20, 12)) < 0.15).astype(int)
    self.assertAlmostEqual(ranking.mrr_at_k(scores, labels, k),
                           _hand_mrr(scores, labels, k), places=12)

  def test_mrr_hand_values_and_ties(self):
    scores = [[0.9, 0.8, 0.7, 0.1], [1., 1., 1., 1.], [.1, .2, .3, .4]]
    labels = [[0, 0, 1, 0], [1, 0, 0, 0], [1, 0, 0, 0]]
    # Ranks 3, 4 (pessimistic tie), 4 (cut at k=3 -> 0).
    self.assertAlmostEqual(ranking.mrr_at_k(scores, labels, 10),
                           (1 / 3 + 1 / 4 + 1 / 4) / 3)
    self.assertAlmostEqual(ranking.mrr_at_k(scores, labels, 3), (1 / 3) / 3)
    self.assertAlmostEqual(
        ranking.mrr_at_k(scores, labels, 10, ties="stable"),
        (1 / 3 + 1 + 1 / 4) / 3)

  def test_recall(self):
    scores = [[0.9, 0.8, 0.7, 0.1], [.1, .2, .3, .4]]
    labels = [[1, 0, 1, 0], [1, 1, 0, 0]]
    self.assertAlmostEqual(ranking.recall_at_k(scores, labels, 2),
                           (0.5 + 0.0) / 2)
    self.assertAlmostEqual(ranking.recall_at_k(scores, labels, 4), 1.0)

  def test_bad_shapes(self):
    with self.assertRaisesRegex(ValueError, "num_queries"):
      ranking.ndcg_at_k(np.zeros(3), np.zeros(3), 2)
    with self.assertRaisesRegex(ValueError, "k must be"):
      ranking.mrr_at_k(np.zeros((1, 3)), np.zeros((1, 3)), 0)

  def test_batched_scores_pads_and_orders(self):
    calls = []

    def score_fn(chunk):
      calls.append(len(chunk["x"]))
      return chunk["x"] * 2.0 + chunk["y"]

    x = np.arange(7, dtype=np.float32)
    y = np.ones(7, np.float32)
    got = ranking.batched_scores(score_fn, {"x": x, "y": y}, batch_size=3)
    np.testing.assert_allclose(got, x * 2 + 1)
    self.assertEqual(calls, [3, 3, 3])  # last chunk padded to a fixed size


if __name__ == "__main__":
  absltest.main()
