"""GSM8K extraction and exact match: parity with lm-evaluation-harness."""


from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.evals import gsm8k
from jaxlab.testing.gsm8k_reference import ref_score


ANSWER = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 1200"
# (completion, gold `answer` field): edge cases of the two filters.
CASES = [
    ("She pays 5 * 240 = 1200 dollars.\n#### 1200", ANSWER),
    ("#### 1,200", ANSWER),                      # comma inside the number
    ("The answer is $1,200.", ANSWER),           # $, comma, trailing period
    ("The answer is 1200.", ANSWER),
    ("#### 1200.", ANSWER),                       # period in strict's group
    ("#### 1200.00", ANSWER),                     # not 1200 as a string
    ("She had 3 apples, ate 1, so 2 are left.", "#### 2"),
    ("It drops by -7 degrees.", "... \n#### -7"),  # negative
    ("It drops to - 7 degrees.", "#### -7"),
    ("#### -7\nThe answer is 7", "#### -7"),
    ("I do not know.", ANSWER),                   # no number at all
    ("", ANSWER),
    ("1200 is wrong; it is 24", ANSWER),          # flexible takes the last
    ("#### 24 then #### 1200", ANSWER),           # strict takes the first
    ("The total is 12,00", ANSWER),
    ("Cost: $.5", "#### .5"),
    ("cost 5$", "#### 5"),
    ("answer: 7", "#### 7"),                      # one digit: 2nd group
    ("x = 3.5.", "The price is $3.50.\n#### 3.5"),
    ("#### 3.50", "#### 3.5"),
    ("Wait.\n#### 1,2,0,0", ANSWER),
    ("#### 18\n\nQuestion: next", "#### 18"),
    ("He has 1000000 coins", "#### 1,000,000"),
]


class Gsm8kTest(parameterized.TestCase):

  @parameterized.product(filter_name=["strict-match", "flexible-extract"])
  def test_matches_the_harness(self, filter_name):
    for completion, answer in CASES:
      self.assertEqual(
          gsm8k.is_correct(completion, answer, filter_name),
          bool(ref_score(completion, answer, filter_name)),
          (filter_name, completion, answer))
    got = gsm8k.score([c for c, _ in CASES], [a for _, a in CASES],
                      filter_name)
    want = [ref_score(c, a, filter_name) for c, a in CASES]
    np.testing.assert_array_equal(got, want)

  def test_extraction_by_hand(self):
    f, s = gsm8k.FLEXIBLE, gsm8k.STRICT
    self.assertEqual(gsm8k.extract("The answer is $1,200.", f), "$1,200.")
    self.assertEqual(gsm8k.extract("The answer is $1,200.", s), "[invalid]")
    self.assertEqual(gsm8k.extract("#### -7\nok 8", s), "-7")
    self.assertEqual(gsm8k.extract("#### -7\nok 8", f), "8")
    self.assertEqual(gsm8k.extract("answer: 7", f), "7")
    self.assertEqual(gsm8k.extract("nothing", f), gsm8k.INVALID)
    self.assertEqual(gsm8k.target(ANSWER), "1200")
    self.assertEqual(gsm8k.target("#### 1,000,000"), "1000000")
    self.assertEqual(gsm8k.normalize("$1,200."), "1200")

  def test_expected_labels_by_hand(self):
    want = {"The answer is $1,200.": (False, True),
            "#### 1200.00": (False, False),
            "1200 is wrong; it is 24": (False, False),
            "#### 24 then #### 1200": (False, True),
            "#### 1,200": (True, True)}
    for completion, (strict, flexible) in want.items():
      self.assertEqual(gsm8k.is_correct(completion, ANSWER, gsm8k.STRICT),
                       strict, completion)
      self.assertEqual(gsm8k.is_correct(completion, ANSWER, gsm8k.FLEXIBLE),
                       flexible, completion)

  def test_cut_at_the_tasks_stop_strings(self):
    self.assertEqual(gsm8k.cut("#### 4\nQuestion: 5 + 5?\n#### 10"),
                     "#### 4\n")
    self.assertEqual(gsm8k.cut("12</s>13<|im_end|>"), "12")
    self.assertEqual(gsm8k.cut("no stop 7"), "no stop 7")
    self.assertEqual(gsm8k.cut("a|b", until=("|",)), "a")

  def test_answer_class_groups_equal_answers(self):
    classes = [gsm8k.answer_class(c) for c in
               ("so $1,200.", "it is 1200", "1200.", "no idea", "1,201")]
    self.assertEqual(classes, ["1200", "1200", "1200", None, "1201"])

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "unknown GSM8K filter 'loose'"):
      gsm8k.extract("1", "loose")
    with self.assertRaisesRegex(ValueError, "2 completions for 1 answers"):
      gsm8k.score(["1", "2"], ["#### 1"])


if __name__ == "__main__":
  absltest.main()
