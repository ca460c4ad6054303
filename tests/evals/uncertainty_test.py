"""Semantic clustering, entropies and AUROC/AURAC (paper J, SE baselines)."""

import math

from absl.testing import absltest
import numpy as np
from sklearn import metrics

from jaxlab.evals import uncertainty as unc


class Table:
  """An entailment model from a lookup table (to test the bidirectional rule)."""

  def __init__(self, table):
    self.table = table

  def check_implication(self, premise, hypothesis):
    return self.table.get((premise, hypothesis), unc.CONTRADICTION)


class ClusteringTest(absltest.TestCase):

  def test_string_match_modes(self):
    answers = ["Paris", "paris.", "The Paris", "Lyon", "PARIS!"]
    np.testing.assert_array_equal(
        unc.semantic_ids(answers, unc.StringMatchEntailment("exact")),
        [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(unc.semantic_ids(answers), [0, 0, 0, 1, 0])
    nums = ["1,000 people", "1000", "about 1000.0", "999", "none"]
    np.testing.assert_array_equal(
        unc.semantic_ids(nums, unc.StringMatchEntailment("numeric")),
        [0, 0, 0, 1, 2])
    last = unc.StringMatchEntailment("normalised",
                                     key_fn=lambda s: s.split()[-1])
    np.testing.assert_array_equal(
        unc.semantic_ids(["Ab was born in Lisbon.", "Abb was born in lisbon",
                          "Ab was born in Osaka."], last), [0, 0, 1])
    with self.assertRaisesRegex(ValueError, "mode must be one of"):
      unc.StringMatchEntailment("fuzzy")

  def test_bidirectional_rule(self):
    e, n = unc.ENTAILMENT, unc.NEUTRAL
    model = Table({("a", "b"): e, ("b", "a"): n,    # one-way: non-strict only
                   ("a", "c"): n, ("c", "a"): n})   # neutral both ways: never
    self.assertTrue(unc.are_equivalent("a", "b", model))
    self.assertFalse(unc.are_equivalent("a", "b", model, strict=True))
    self.assertFalse(unc.are_equivalent("a", "c", model))
    np.testing.assert_array_equal(unc.semantic_ids(["a", "b", "c"], model),
                                  [0, 0, 1])
    np.testing.assert_array_equal(
        unc.semantic_ids(["a", "b", "c"], model, strict=True), [0, 1, 2])


class EntropyTest(absltest.TestCase):

  def test_hand_computed(self):
    # Sequence probabilities 1/2, 1/4, 1/8, 1/8 in clusters {0,1}, {2}, {3}.
    ll = np.log([0.5, 0.25, 0.125, 0.125])
    ids = np.array([0, 0, 1, 2])
    p = np.array([0.75, 0.125, 0.125])
    np.testing.assert_allclose(unc.cluster_probs(ll, ids)[:3], p, rtol=1e-6)
    np.testing.assert_allclose(
        unc.semantic_entropy(ll, ids),
        -(0.75 * math.log(0.75) + 0.25 * math.log(0.125)), rtol=1e-6)
    np.testing.assert_allclose(unc.renyi2_entropy(ll, ids),
                               -math.log(0.75 ** 2 + 2 / 64), rtol=1e-6)
    np.testing.assert_allclose(unc.discrete_semantic_entropy(ids),
                               -(0.5 * math.log(0.5) + 0.5 * math.log(0.25)),
                               rtol=1e-6)
    np.testing.assert_allclose(unc.naive_entropy(ll), 9 / 4 * math.log(2),
                               rtol=1e-6)
    # Batched: a relabelled and unnormalised copy gives the same values
    # (p_c normalises by sum_r e^{l_r}).
    ll2 = np.stack([ll, ll[[2, 0, 3, 1]] - 1.0])
    ids2 = np.stack([ids, np.array([0, 1, 2, 1])])
    se = unc.semantic_entropy(ll2, ids2)
    np.testing.assert_allclose(se[0], se[1], rtol=1e-6)
    np.testing.assert_allclose(unc.discrete_semantic_entropy(ids2)[1],
                               unc.discrete_semantic_entropy(ids), rtol=1e-6)


class MetricsTest(absltest.TestCase):

  def test_auroc_equals_sklearn(self):
    rng = np.random.default_rng(0)
    for n, levels in ((50, None), (200, 5), (7, 2)):
      y = rng.random(n) < 0.4
      y[:2] = (True, False)
      s = rng.normal(size=n) + y
      if levels:  # many ties
        s = np.round(s * levels / 3)
      self.assertAlmostEqual(unc.auroc(s, y), metrics.roc_auc_score(y, s),
                             places=12)

  def test_auroc_single_class_is_one_clear_error(self):
    with self.assertRaisesRegex(ValueError, "auroc needs both classes"):
      unc.auroc([0.1, 0.5, 0.3], [True, True, True])
    with self.assertRaisesRegex(ValueError, "scores must have shape"):
      unc.auroc([0.1, 0.5], [True, False, True])

  def test_aurac_hand_computed(self):
    u = np.array([3.0, 1.0, 4.0, 2.0])
    correct = np.array([False, True, False, True])
    # quantile(u, q) = 1 + 3q: 1 answer kept for q < 1/3 (k = 0..4), 2 for
    # q < 2/3 (k = 5..11), 3 for k = 12..18 (accuracy 2/3), 4 at q = 1 (1/2).
    want = (5 + 7 + 7 * 2 / 3 + 1 / 2) * 0.9 / 19
    self.assertAlmostEqual(unc.aurac(u, correct), want, places=12)
    self.assertEqual(unc.accuracy_at_fractions(u, correct),
                     {0.8: 2 / 3, 0.9: 2 / 3, 0.95: 2 / 3, 1.0: 0.5})
    self.assertAlmostEqual(unc.aurac(u, np.ones(4, bool)), 0.9 * 20 / 19)

  def test_bootstrap(self):
    rng = np.random.default_rng(1)
    y = rng.random(60) < 0.5
    s = rng.normal(size=60) + 2 * y
    lo, hi = unc.bootstrap_interval(unc.auroc, s, y, num_resamples=200)
    point = unc.auroc(s, y)
    self.assertLess(lo, point)
    self.assertLess(point, hi)
    self.assertEqual(unc.bootstrap_interval(lambda a: float(a.mean()),
                                            np.full(5, 0.3)), (0.3, 0.3))


class SummaryTest(absltest.TestCase):

  def test_evaluate_scores_and_groups(self):
    rng = np.random.default_rng(0)
    correct = rng.uniform(size=40) < 0.5
    scores = {"u": rng.normal(size=40) - correct, "v": rng.normal(size=40)}
    out = unc.evaluate_scores(scores, correct, seed=0, num_resamples=50)
    for k, s in scores.items():
      self.assertAlmostEqual(out[k]["auroc"],
                             metrics.roc_auc_score(~correct, s), places=12)
      self.assertEqual(out[k]["aurac"], unc.aurac(s, correct))
      self.assertEqual(out[k]["acc90"],
                       unc.accuracy_at_fractions(s, correct)[0.9])
      self.assertLessEqual(out[k]["auroc_lo"], out[k]["auroc_hi"])
    self.assertTrue(math.isnan(unc.safe_auroc([0.1, 0.2], [True, True])))
    g = unc.group_summary([True, False, True, True], ["a", "b", "a", "b"],
                          [[0, 0, 1], [0, 1, 2], [0, 0, 0], [0, 1, 1]])
    self.assertEqual(g, {"acc_a": 1.0, "clusters_a": 1.5, "acc_b": 0.5,
                         "clusters_b": 2.5, "questions": 4, "accuracy": 0.75,
                         "incorrect_frac": 0.25, "clusters_mean": 2.0})
    self.assertEqual(unc.last_word(" Ab was born in Lisbon. "), "Lisbon")
    self.assertEqual(unc.last_word("  "), "")


if __name__ == "__main__":
  absltest.main()
