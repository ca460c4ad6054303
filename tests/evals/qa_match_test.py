"""TriviaQA's normalised exact match: parity with the official script
(ported in jaxlab/testing/triviaqa_reference.py) and hand-computed cases."""

from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.evals import qa_match
from jaxlab.testing import triviaqa_reference as ref

# Strings that exercise each normalisation step: case, ASCII punctuation
# (replaced by a space, not deleted), the quotes ‘ ’ ´ `, underscores,
# articles on word boundaries only, whitespace runs, non-ASCII letters.
TEXTS = [
    "The Beatles", "the beatles!", "Beatles, The", "  A   Tale of Two Cities ",
    "an apple a day", "Theatre", "anaconda", "Rock'n'roll", "rock n roll",
    "U.S.A.", "u s a", "USA", "‘Hamlet’", "Hamlet´s `ghost`", "Mr_Bean",
    "mr bean", "Saint-Saëns", "saint saëns", "CO2", "1,000", "1 000", "3.14",
    "", "   ", "The", "a", "Dr. Who?", "dr who", "hello\tworld\nagain",
    "Ünïcödé — dash", "50%", "e=mc^2", "Isaac Newton", "Sir Isaac Newton",
]


class NormalizeTest(parameterized.TestCase):

  def test_equals_the_official_normaliser(self):
    for t in TEXTS:
      self.assertEqual(qa_match.normalize(t), ref.ref_normalize(t), t)

  @parameterized.parameters(
      ("The Beatles!", "beatles"), ("Rock'n'roll", "rock n roll"),
      ("U.S.A.", "u s"),  # the lone "a" is an article
      ("Mr_Bean", "mr bean"), ("Theatre", "theatre"),
      ("‘Hamlet’", "hamlet"), ("an apple a day", "apple day"), ("The", ""))
  def test_by_hand(self, text, want):
    self.assertEqual(qa_match.normalize(text), want)

  def test_exact_match_equals_the_official_is_exact_match(self):
    aliases = [["beatles", "fab four"], ["u s a", "united states"],
               ["mr bean"], ["saint saëns"], ["1 000", "one thousand"]]
    for gold in aliases:
      for t in TEXTS:
        self.assertEqual(qa_match.exact_match(t, gold),
                         ref.ref_exact_match(t, gold), (t, gold))
    self.assertTrue(qa_match.exact_match("The Beatles.", ["beatles"]))
    self.assertTrue(qa_match.exact_match("1,000", ["1 000"]))
    self.assertFalse(qa_match.exact_match("Beatles John", ["beatles"]))
    self.assertFalse(qa_match.exact_match("x", []))

  def test_answer_text_and_class(self):
    self.assertEqual(qa_match.answer_text("\n  Paris.\nIt is in France."),
                     "Paris.")
    self.assertEqual(qa_match.answer_text("The Beatles<|im_end|>junk"),
                     "The Beatles")
    self.assertEqual(qa_match.answer_text("Question: who?"), "")
    self.assertEqual(qa_match.answer_class("The Beatles!\nyes"), "beatles")
    self.assertIsNone(qa_match.answer_class("  \n ... \n"))
    self.assertTrue(qa_match.is_correct("the Fab Four\n(band)",
                                        ["Beatles", "Fab Four"]))
    self.assertFalse(qa_match.is_correct("Fab\nFour", ["Fab Four"]))


if __name__ == "__main__":
  absltest.main()
