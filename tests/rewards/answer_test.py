"""Verifiable-answer rewards: hand-computed cases."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.rewards import answer


class AnswerRewardTest(parameterized.TestCase):

  @parameterized.parameters(
      ("3 + 4 = 7.", "7", "numeric", 1.0),
      ("It is 1,000 exactly", "1000", "numeric", 1.0),
      ("first 7 then 8", "7", "numeric", 0.0),   # the last number counts
      ("no number here", "7", "numeric", 0.0),
      ("3.50", "3.5", "numeric", 1.0),
      ("The Eiffel Tower!", "eiffel tower", "normalized", 1.0),
      ("Eiffel", "eiffel tower", "normalized", 0.0),
      (" 7 ", "7", "exact", 1.0),
  )
  def test_hand_cases(self, completion, ref, collapse, want):
    self.assertEqual(answer.answer_reward(completion, ref, collapse=collapse),
                     want)

  def test_batch_and_errors(self):
    np.testing.assert_array_equal(
        answer.answer_rewards(["so 5", "6", ""], ["5", "5", "5"]),
        np.asarray([1, 0, 0], np.float32))
    with self.assertRaisesRegex(ValueError, "unreadable"):
      answer.answer_reward("5", "five", collapse="numeric")
    with self.assertRaisesRegex(ValueError, "collapsing function 'numbers'"):
      answer.answer_reward("5", "5", collapse="numbers")
    with self.assertRaisesRegex(ValueError, "2 completions for 1 answers"):
      answer.answer_rewards(["1", "2"], ["1"])


if __name__ == "__main__":
  absltest.main()
