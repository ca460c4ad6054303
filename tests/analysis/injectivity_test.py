"""Injectivity probes (paper Q): chunked pair statistics, controls."""

import itertools

from absl.testing import absltest
import numpy as np

from jaxlab.analysis import injectivity as inj
from jaxlab.analysis import sipit
from jaxlab.testing import tiny_models

V = 64


def _brute(x):
  """(min, (i, j), mean, max, pairs <= 1e-6) over all pairs, in float64."""
  x = np.asarray(x, np.float64)
  pairs = list(itertools.combinations(range(len(x)), 2))
  d = np.array([np.linalg.norm(x[i] - x[j]) for i, j in pairs])
  k = int(np.argmin(d))
  return d.min(), pairs[k], d.mean(), d.max(), int((d <= 1e-6).sum())


class PairStatsTest(absltest.TestCase):

  def test_chunked_equals_all_pairs(self):
    x = np.random.default_rng(0).normal(size=(37, 5)).astype(np.float32)
    x[30] = x[4]  # one exact collision
    x[11] = x[2] + 1e-3
    s = inj.pair_stats(x, chunk=8)  # 37 rows: 5 blocks, the last ragged
    dmin, pair, mean, dmax, coll = _brute(x)
    self.assertEqual(s.min, 0.0)
    self.assertEqual(s.pair, pair)
    self.assertAlmostEqual(s.mean, mean, places=5)
    self.assertAlmostEqual(s.max, dmax, places=5)
    self.assertEqual(s.collisions, coll)
    self.assertEqual(s.num_pairs, 37 * 36 // 2)
    # Second closest: the 1e-3 pair, found as row 2's nearest neighbour.
    self.assertAlmostEqual(float(s.nearest[2]),
                           float(np.linalg.norm(x[11] - x[2])), places=6)
    self.assertEqual(inj.closest_prompts(s, 2), [4, 30])

  def test_quantize_states_hand_example(self):
    h = np.array([[0.7, -0.35, 0.1, 0.0]], np.float32)
    # 2 bits: levels {-1, 0, 1} * absmax 0.7.
    np.testing.assert_allclose(inj.quantize_states(h, 2, per="vector"),
                               [[0.7, -0.0, 0.0, 0.0]], atol=1e-7)
    # 3 bits: step 0.7 / 3.
    np.testing.assert_allclose(inj.quantize_states(h, 3, per="vector"),
                               [[0.7, -0.7 / 3 * 2, 0.0, 0.0]], atol=1e-6)
    # Per tensor: one absmax over both rows.
    np.testing.assert_allclose(
        inj.quantize_states(np.concatenate([h, h / 2]), 2)[1],
        [0.0, -0.0, 0.0, 0.0], atol=1e-7)
    with self.assertRaisesRegex(ValueError, "bits must be >= 2"):
      inj.quantize_states(h, 1)


class TextWindowTest(absltest.TestCase):

  def test_windows_are_the_distinct_contiguous_ones(self):
    # Windows of 4..5 tokens of [1..5] and of a repeat of its first four:
    # (1,2,3,4) twice (kept once), (2,3,4,5), (1,2,3,4,5).
    got = inj.text_window_prompts([[1, 2, 3, 4, 5], [1, 2, 3, 4]],
                                          10, min_len=4, max_len=5)
    self.assertEqual(got, [[1, 2, 3, 4], [1, 2, 3, 4, 5], [2, 3, 4, 5]])
    self.assertLen(inj.text_window_prompts(
        [[1, 2, 3, 4, 5]], 2, min_len=4, max_len=5, seed=1), 2)
    with self.assertRaisesRegex(ValueError, "fewer than 2 distinct"):
      inj.text_window_prompts([[1, 2]], 5, min_len=4)


class CollisionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder(0, init_std=0.1)
    cls.prompts = inj.random_prompts(40, vocab_size=V, min_len=3, max_len=7,
                                     seed=0)
    cls.states = inj.last_token_states(cls.model, cls.prompts,
                                       batch_size=64)

  def test_right_padding_equals_per_prompt_forward(self):
    i = int(np.argmin([len(p) for p in self.prompts]))
    full = sipit.full_forward_states(self.model, [self.prompts[i]])
    self.assertLess(len(self.prompts[i]), max(map(len, self.prompts)))
    np.testing.assert_allclose(self.states[:, i], full[:, 0, -1], atol=1e-6)

  def test_no_collision_above_the_embedding_layer(self):
    stats = inj.per_layer_stats(self.states, chunk=16)
    for s in stats[1:]:
      self.assertGreater(s.min, 1e-3)
      self.assertEqual(s.collisions, 0)
    # Layer 0 is the last token's embedding: prompts ending in the same
    # token collide there (RoPE decoders have no position embedding).
    last = [p[-1] for p in self.prompts]
    same_last = sum(a == b for a, b in itertools.combinations(last, 2))
    self.assertGreater(same_last, 0)
    self.assertEqual(stats[0].collisions, same_last)

  def test_tied_rows_collide_at_every_layer(self):
    tied = inj.tie_embedding_rows(self.model, 5, 9)
    prompts = [[1, 2, 5, 3], [1, 2, 9, 3], [4, 4, 4]]
    clean = inj.last_token_states(self.model, prompts, batch_size=64)
    collided = inj.last_token_states(tied, prompts, batch_size=64)
    for layer in range(1, 3):
      self.assertGreater(inj.pair_stats(clean[layer]).min, 1e-3)
      s = inj.pair_stats(collided[layer])
      self.assertEqual((s.min, s.pair, s.collisions), (0.0, (0, 1), 1))
    # The original model is untouched.
    self.assertGreater(float(np.abs(np.asarray(self.model.embed_vd[5]) -
                                    np.asarray(self.model.embed_vd[9])).max()),
                       0.01)

  def test_coarse_quantisation_collides(self):
    # One 2-bit scale for all states: distinct states share a code.
    q = inj.quantize_states(self.states, 2)
    self.assertGreater(inj.pair_stats(q[1], chunk=16).collisions, 0)

  def test_exhaustive_continuations(self):
    idx = [0, 1]
    stats = inj.exhaustive_continuation_test(self.model, self.prompts, idx)
    self.assertEqual(stats[0].num_pairs, 2 * V * (2 * V - 1) // 2)
    # Layer 0: prompt_a + v and prompt_b + v share v's embedding.
    self.assertEqual(stats[0].collisions, V)
    for s in stats[1:]:
      self.assertEqual(s.collisions, 0)
      self.assertGreater(s.min, 1e-4)
    # A continuation's state is that prompt's last-token state.
    p = self.prompts[1]
    one = sipit.next_token_states(self.model, p[:-1], [p[-1]])
    np.testing.assert_allclose(one[:, 0], self.states[:, 1], atol=1e-5)


if __name__ == "__main__":
  absltest.main()
