"""The short-question set and its answer normaliser / grader (papers N, J)."""

from absl.testing import absltest

from jaxlab.data import short_qa


class ExtractAnswerTest(absltest.TestCase):

  def test_hand_cases(self):
    cases = [
        ("The capital of France is Paris.", "What is the capital of France?",
         "paris"),
        # The span after the copula restates the question: the one before.
        ("Paris is the capital of France.", "What is the capital of France?",
         "paris"),
        ("The capital of Kenya is indeed Nairobi and is big.",
         "What is the capital of Kenya?", "nairobi"),
        ("Norway's capital city is Oslo.", "What is the capital of Norway?",
         "oslo"),
        ("7 + 5 = 12.", "What is 7 + 5?", "12"),
        ("12 is indeed 6 times 7.", "What is 6 times 7?", "12"),
        ("The opposite of hot would need to be cold,",
         "What is the opposite of hot?", "cold"),
        ("Tuesday.\nMore text", "What day comes after Monday?", "tuesday"),
        ("Spiders have eight legs and are able to",
         "How many legs does a spider have?", "8"),
        ("Eight", "How many legs does a spider have?", "8"),
        ("The capital of Argentina is Buenos Aires, a big city.",
         "What is the capital of Argentina?", "buenos aires"),
        ('The plural of "mouse" is "mice".', "What is the plural of mouse?",
         "mice"),
        ("Kenya is a landlocked nation in East Africa",
         "What is the capital of Kenya?", "landlocked nation in east"),
        ("", "What is 1 + 1?", None),
        ("  \n\n", "What is 1 + 1?", None),
    ]
    for text, question, want in cases:
      self.assertEqual(short_qa.extract_answer(text, question), want,
                       (text, question))

  def test_grade_and_canonical(self):
    q = short_qa.Question("What is the capital of Ukraine?", ("kyiv", "kiev"),
                          "capital")
    self.assertTrue(short_qa.grade(q, "The capital of Ukraine is Kiev."))
    self.assertTrue(short_qa.grade(q, "Kyiv"))
    self.assertFalse(short_qa.grade(q, "The capital of Ukraine is Lviv."))
    self.assertFalse(short_qa.grade(q, "Kyiv-Pechersk Lavra is a monastery"))
    # Both spellings are one class (the first reference answer).
    self.assertEqual(short_qa.canonical(q, "It is Kiev."), "kyiv")
    self.assertEqual(short_qa.canonical(q, "Lviv!"), "lviv")
    self.assertIsNone(short_qa.canonical(q, ""))
    self.assertEqual(short_qa.cluster_key(q, ""), "<no answer> ")


class QuestionSetTest(absltest.TestCase):

  def test_set(self):
    pools = short_qa.all_questions()
    self.assertEqual(set(pools), set(short_qa.CATEGORIES))
    # Successors wrap around; products and sums are right.
    succ = {q.text: q.answers[0] for q in pools["successor"]}
    self.assertEqual(succ["What day comes after Sunday?"], "monday")
    self.assertEqual(succ["What month comes after December?"], "january")
    for q in pools["arithmetic"]:
      a, op, b = q.text.removeprefix("What is ").rstrip("?").split()
      want = int(a) + int(b) if op == "+" else int(a) * int(b)
      self.assertEqual(q.answers, (str(want),))
    for qs in pools.values():  # every reference is already normalised
      for q in qs:
        for a in q.answers:
          self.assertEqual(short_qa.extract_answer(a, q.text), a, q)
    a = short_qa.question_set(("capital", "plural"), num_questions=10, seed=1)
    self.assertEqual(a, short_qa.question_set(("capital", "plural"),
                                              num_questions=10, seed=1))
    self.assertNotEqual(a, short_qa.question_set(("capital", "plural"),
                                                 num_questions=10, seed=2))
    self.assertEqual({q.category for q in short_qa.question_set(
        ("plural",))}, {"plural"})
    with self.assertRaisesRegex(ValueError, "unknown question categories"):
      short_qa.question_set(("capitals",))


if __name__ == "__main__":
  absltest.main()
