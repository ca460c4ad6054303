"""Tests of the streaming running-sum stories and their metrics."""

from absl.testing import absltest
import numpy as np

from jaxlab.data.synthetic import running_sum as rs


class RunningSumTest(absltest.TestCase):

  def test_stories_are_deterministic_and_totals_consistent(self):
    a = rs.make_stories(3, 50, min_sentences=2, max_sentences=5,
                        max_value=4, max_total=9)
    b = rs.make_stories(3, 50, min_sentences=2, max_sentences=5,
                        max_value=4, max_total=9)
    self.assertEqual([s.values for s in a], [s.values for s in b])
    for s in a:
      np.testing.assert_array_equal(np.cumsum(s.values), s.totals)
      self.assertTrue(all(0 <= t <= 9 for t in s.totals))
      self.assertTrue(all(1 <= abs(v) <= 4 for v in s.values[1:]))
      self.assertBetween(len(s.values), 2, 5)

  def test_answer_and_scores(self):
    story = rs.Story(values=[3, 4, -2], totals=[3, 7, 5])
    ex = rs.encode_example(rs.to_example(story, "D3"))
    reasoning = [t for seg in ex.target[1:] for t in seg]
    self.assertEqual(rs.answer_of(reasoning), 5)
    self.assertEqual(rs.unit_totals(reasoning), [3, 7, 5])
    self.assertEqual(rs.score(reasoning, story),
                     {"accuracy": 1.0, "unit_accuracy": 1.0})
    wrong = rs.encode("track <EOQ> = 3 <EOT> = 8 <EOT> = 5 <EOT> </think> 4 "
                      "<|im_end|>".split())
    self.assertEqual(rs.score(wrong, story),
                     {"accuracy": 0.0, "unit_accuracy": 2 / 3})
    self.assertIsNone(rs.answer_of(rs.encode(["track", "<EOQ>"])))
    self.assertEqual(rs.decode(rs.encode(["=", "7"])), "= 7")

  def test_max_len_bounds_every_story(self):
    for depth in ("D1", "D2", "D3"):
      bound = rs.max_len(6, depth)
      for s in rs.make_stories(0, 30, min_sentences=1, max_sentences=6):
        ex = rs.to_example(s, depth)
        self.assertLessEqual(sum(ex.src_lens) + sum(ex.tgt_lens), bound)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "min_sentences <= max_sentences"):
      rs.make_stories(0, 1, min_sentences=4, max_sentences=2)
    with self.assertRaisesRegex(ValueError, "max_value <= max_total"):
      rs.make_stories(0, 1, max_value=5, max_total=30)


if __name__ == "__main__":
  absltest.main()
