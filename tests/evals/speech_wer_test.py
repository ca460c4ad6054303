"""WER (`jaxlab.evals.text.word_error_rate`) against `jiwer.wer` on rows
written here, and a value computed by hand; UED (spec E.6) by hand."""

from absl.testing import absltest
import numpy as np

from jaxlab.evals import text

REFS = ["he hoped there would be stew for dinner",
        "turnips and carrots and bruised potatoes",
        "stuff it into you his belly counselled him",
        "after early nightfall"]
HYPS = ["he hoped there would be stew for dinner",
        "turnips and carrot and bruised potatoes and",
        "stuff into you his belly counseled him",
        ""]


class WerTest(absltest.TestCase):

  def test_hand_computed(self):
    # ref "a b c d" vs hyp "a x c": one substitution (b->x), one deletion
    # (d): 2 errors over 4 reference words.
    self.assertAlmostEqual(text.word_error_rate(["a b c d"], ["a x c"]),
                           0.5)
    # Rows above: 0 + (1 sub + 1 ins) + (1 del + 1 sub) + 3 del = 7 errors
    # over 8 + 6 + 8 + 3 = 25 words.
    self.assertAlmostEqual(text.word_error_rate(REFS, HYPS), 7 / 25)

  def test_equals_jiwer(self):
    import jiwer  # pylint: disable=g-import-not-at-top
    self.assertAlmostEqual(text.word_error_rate(REFS, HYPS),
                           jiwer.wer(REFS, HYPS), places=12)
    rng = np.random.default_rng(0)
    words = "the a of cat sat on mat dog ran".split()
    refs = [" ".join(rng.choice(words, rng.integers(1, 9))) for _ in range(30)]
    hyps = [" ".join(rng.choice(words, rng.integers(0, 9))) for _ in range(30)]
    self.assertAlmostEqual(text.word_error_rate(refs, hyps),
                           jiwer.wer(refs, hyps), places=12)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "2 references vs 1"):
      text.word_error_rate(["a", "b"], ["a"])
    with self.assertRaisesRegex(ValueError, "all empty"):
      text.word_error_rate([""], ["a"])

  def test_ued_hand_computed(self):
    # clean [1 2 3 4] vs noisy [1 2 5 4 6]: 1 substitution + 1 insertion;
    # clean [7 7] vs noisy [7 7]: 0. UED = 100 * 2 / 6.
    self.assertAlmostEqual(text.unit_edit_distance(
        [[1, 2, 3, 4], [7, 7]], [[1, 2, 5, 4, 6], [7, 7]]), 100 * 2 / 6)


if __name__ == "__main__":
  absltest.main()
