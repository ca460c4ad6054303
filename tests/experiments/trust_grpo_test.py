"""Trust-GRPO miniature pieces: the task, the learned TRM's inputs, the
variant registry, the group reward and the T = 12000 arm.

Hand-computed values: the judge's table, the texts the learned TRM reads, its
scores of a hand-built batch through `combine_trust_rewards`, and the
annealing weight exp(-t / 12000) of the `trust_T12000` variant.
"""

import math

import numpy as np
from absl.testing import absltest

from jaxlab.configs import trust_grpo as trust_config_lib
from jaxlab.data.synthetic import thinking_task
from jaxlab.rewards import learned_trm
from jaxlab.rewards import thinking
from jaxlab.rewards import trust_variants
from jaxlab.rl import rollout as rollout_lib

EOS, HACK, HACK_TEXT = (thinking_task.EOS, thinking_task.HACK,
                        thinking_task.HACK_TEXT)


class _StubScorer:
  """Scores "i get v" as v / 10 and HACK as 0.95; records what it read."""

  def __init__(self):
    self.seen = []

  def __call__(self, questions, thinkings):
    self.seen.append((list(questions), list(thinkings)))
    return np.array([0.95 if t == HACK_TEXT else int(t.split()[-1]) / 10
                     for t in thinkings], np.float32)


class TrustGrpoPiecesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = trust_config_lib.get_config("learned")
    cls.task = thinking_task.make_task(cls.config.task)

  def _question(self, hackable: bool) -> int:
    return next(q for q in range(25) if (q in self.task.hackable) == hackable)

  def test_texts_and_judge_table(self):
    t = self.task
    q = t.questions.index((3, 4))
    self.assertEqual(t.question_text(q), "3 + 4 mod 5")
    self.assertEqual(t.thinking_text([t.v0 + 2, t.ans0 + 2, EOS]),
                     "i get 2")
    self.assertEqual(t.thinking_text([HACK, t.ans0, EOS]), HACK_TEXT)
    self.assertIsNone(t.thinking_text([t.v0 + 2, EOS]))       # too short
    self.assertIsNone(t.thinking_text([t.v0 + 2, t.v0, EOS]))  # no answer
    table = thinking_task.judge_table(t)
    self.assertEqual(table.shape, (25, 6))          # HACK, v = 0..4
    qi, qh = self._question(False), self._question(True)
    right = t.answer(qi)
    want = [0.3] + [0.9 if v == right else 0.3 for v in range(5)]
    np.testing.assert_allclose(table[qi], want, rtol=1e-6)
    np.testing.assert_allclose(table[qh], [0.9] + [0.1] * 5, rtol=1e-6)

  def test_trm_training_data_labels(self):
    cfg = self.config.trm.copy_and_resolve_references()
    cfg.samples, cfg.label_noise = 200, 0.0
    qs, ts, ys = thinking_task.trm_training_data(self.task, cfg, seed=0)
    texts = {self.task.question_text(q): q for q in range(25)}
    for q, t, y in zip(qs, ts, ys):    # noise 0: the judge's score exactly
      v = None if t == HACK_TEXT else int(t.split()[-1])
      self.assertAlmostEqual(
          y, self.task.thinking(texts[q], self.task.completion(v)), places=6)
    self.assertBetween(np.mean([t == HACK_TEXT for t in ts]), 0.35, 0.65)
    cfg.label_noise = 0.1
    _, _, ys = thinking_task.trm_training_data(self.task, cfg, seed=0)
    np.testing.assert_allclose(ys * 10, np.round(ys * 10), atol=1e-5)
    self.assertTrue(np.all((ys >= 0) & (ys <= 1)))

  def test_learned_trm_scores_hand_batch_into_trust(self):
    t, stub = self.task, _StubScorer()
    trm = learned_trm.LearnedTRM(t, stub)
    qi = self._question(False)
    right = t.answer(qi)
    wrong = (right + 1) % 5
    # Group of 4: right v (correct), HACK, a wrong v, a malformed one.
    comps = [t.completion(right), t.completion(None), t.completion(wrong),
             [t.v0 + right, EOS]]
    rt = trm([qi] * 4, comps)
    np.testing.assert_allclose(rt[:3], [right / 10, 0.95, wrong / 10],
                               rtol=1e-6)
    self.assertTrue(np.isnan(rt[3]))
    self.assertEqual(stub.seen[-1], ([t.question_text(qi)] * 3,
                                     [f"i get {right}", HACK_TEXT,
                                      f"i get {wrong}"]))
    ro = np.array([t.outcome(qi, c) for c in comps], np.float32)
    np.testing.assert_allclose(ro, [1, 0, 0, 0])
    # trust_T12000 at step 150: mu_c = right/10, mu_w = (0.95 + wrong/10
    # + 0) / 3 (NaN -> 0, switch (f)); R = R^o + gamma 0.3 e^{-150/12000} R^t.
    cfg = trust_variants.trust_config("trust_T12000", self.config.trust)
    r, m = thinking.combine_trust_rewards(ro, rt, 4, 150, cfg,
                                          total_steps=150)
    mu_c, mu_w = right / 10, (0.95 + wrong / 10) / 3
    gamma = 1.0 if mu_c >= mu_w else math.exp(mu_c - mu_w)
    w = gamma * 0.3 * math.exp(-150 / 12000)
    np.testing.assert_allclose(float(m["gamma"][0]), gamma, rtol=1e-6)
    np.testing.assert_allclose(
        r, ro + w * np.array([right / 10, 0.95, wrong / 10, 0.0]), rtol=1e-5)

  def test_table_layout(self):
    trm = learned_trm.LearnedTRM(self.task, _StubScorer())
    table = trm.table()
    self.assertEqual(table.shape, (25, 6))
    np.testing.assert_allclose(table[7], [0.95, 0.0, 0.1, 0.2, 0.3, 0.4],
                               rtol=1e-6)

  def test_anneal_weight_T12000(self):
    cfg = trust_variants.trust_config("trust_T12000", self.config.trust)
    self.assertEqual((cfg.anneal_T, cfg.anneal_T_is_total_steps,
                      cfg.use_trust, cfg.skip_saturated_groups,
                      cfg.thinking_min_outcome), (12000.0, False, True, False,
                                                  None))
    # exp(-t / 12000): 1 at 0; 0.98758 at the miniature's last step 150;
    # e^-0.5 at 6000; e^-1 at 12000 (total_steps is ignored).
    for step, want in ((0, 1.0), (150, 0.9875778), (6000, 0.6065307),
                       (12000, 0.3678794)):
      self.assertAlmostEqual(
          float(thinking.anneal_factor(step, cfg, total_steps=150)), want,
          places=6)
    # The paper's reading in the same run: T = 150 steps, e^-1 at the end.
    paper = trust_variants.trust_config("trust", self.config.trust)
    self.assertAlmostEqual(
        float(thinking.anneal_factor(150, paper, total_steps=150)),
        0.3678794, places=6)

  def test_unknown_trm_names_the_field(self):
    cfg = trust_config_lib.get_config("tiny")
    cfg.trust.trm = "oracle"
    with self.assertRaisesRegex(ValueError, "config.trust.trm='oracle'"):
      learned_trm.thinking_reward_fn(cfg.trust.trm, self.task, cfg.trm, 0)
    with self.assertRaisesRegex(ValueError, "trust_T12000"):
      trust_variants.trust_config("trust_T1", cfg.trust)
    with self.assertRaisesRegex(ValueError, "'trust_T1'; valid choices"):
      trust_variants.variant_names(("outcome", "trust_T1"))

  def test_variants_are_registered_names(self):
    # Every preset names registered variants, as a tuple; the command
    # line's comma-separated string reads the same.
    for preset in ("", "tiny", "learned", "smoke"):
      names = trust_config_lib.get_config(preset).variants
      self.assertIsInstance(names, tuple)
      self.assertEqual(trust_variants.variant_names(names), names)
    self.assertEqual(trust_variants.variant_names("outcome, trust"),
                     ("outcome", "trust"))
    self.assertIsNone(trust_variants.trust_config("outcome",
                                                  self.config.trust))
    self.assertEqual(set(trust_variants.LABELS),
                     set(trust_variants.VARIANTS.names()))

  def test_task_reward_counts_gamma_by_subset(self):
    t = self.task
    qi, qh = self._question(False), self._question(True)
    right_i, right_h = t.answer(qi), t.answer(qh)
    # Group 1 (informative): right v correct, a wrong v wrong: judge 0.9
    # vs 0.3, gamma = 1. Group 2 (hackable): right v correct (judge 0.1),
    # HACK wrong (judge 0.9): gamma = exp(0.1 - 0.9) < 1.
    comps = [t.completion(right_i), t.completion((right_i + 1) % 5),
             t.completion(right_h), t.completion(None)]
    batch = rollout_lib.RolloutBatch(
        [t.prompt(qi), t.prompt(qh)], comps, None, None, None, None, None,
        group_size=2)
    fn, _ = learned_trm.thinking_reward_fn("synthetic", t, None, 0)
    reward = trust_variants.TaskReward(
        t, trust_variants.trust_config("trust", self.config.trust), fn,
        total_steps=10)
    r, m = reward(batch, 0, [qi, qh])
    self.assertEqual(m["outcome"], 0.5)
    self.assertEqual(m["train_hack_rate_hackable"], 0.5)
    # R = R^o + gamma * 0.3 * exp(0 / 10) * R^t.
    g = math.exp(0.1 - 0.9)
    np.testing.assert_allclose(
        r, [1 + 0.3 * 0.9, 0.3 * 0.3, 1 + g * 0.3 * 0.1, g * 0.3 * 0.9],
        rtol=1e-5)
    rates = reward.gamma_rates()
    self.assertEqual((rates["gamma_lt1_rate_hackable"],
                      rates["gamma_defined_groups_hackable"]), (1.0, 1))
    self.assertEqual((rates["gamma_lt1_rate_informative"],
                      rates["gamma_defined_groups_informative"]), (0.0, 1))


if __name__ == "__main__":
  absltest.main()
