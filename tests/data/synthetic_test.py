"""Synthetic TOFU-like facts and multi-step arithmetic generators."""

import random
import re

from absl.testing import absltest

from jaxlab.data.synthetic import arithmetic
from jaxlab.data.synthetic import facts


class FactsTest(absltest.TestCase):

  def test_splits(self):
    fs = facts.make_fact_set(50, forget_frac=0.1, seed=3)
    self.assertLen(fs.people, 50)
    self.assertLen(fs.forget, 5 * 4)
    self.assertLen(fs.retain, 45 * 4)
    self.assertLen(fs.forget_paraphrased, len(fs.forget))
    self.assertLen(fs.world, 20)
    forget_people = {x.subject for x in fs.forget}
    self.assertEmpty(forget_people & {x.subject for x in fs.retain})
    for a, b in zip(fs.forget, fs.forget_paraphrased):
      self.assertNotEqual(a.question, b.question)
      self.assertEqual((a.answer, a.value), (b.answer, b.value))
      self.assertIn(a.value, a.answer)
      self.assertIn(a.subject, a.question)
    self.assertLen({p["name"] for p in fs.people}, 50)
    self.assertEqual(facts.make_fact_set(50, seed=3).forget, fs.forget)
    self.assertNotEqual(facts.make_fact_set(50, seed=4).forget, fs.forget)

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "valid: city, year, job"):
      facts.make_fact_set(10, attributes=("shoe",))
    with self.assertRaisesRegex(ValueError, "forget_frac"):
      facts.make_fact_set(10, forget_frac=1.0)


class ArithmeticTest(absltest.TestCase):

  def test_steps_are_correct(self):
    for p in arithmetic.make_problems(200, seed=0):
      nums = [int(t) for t in re.findall(r"-?\d+", p.question)]
      self.assertTrue(3 <= len(p.steps) - 1 <= 6)
      value = nums[0]
      for step in p.steps[:-1]:
        a, op, b, _, c = step.split()
        self.assertEqual(int(a), value)
        value = {"+": value + int(b), "-": value - int(b),
                 "*": value * int(b)}[op]
        self.assertEqual(int(c), value)
        self.assertTrue(0 <= value <= 99)
      self.assertEqual(p.steps[-1], f"answer: {value}")
      self.assertEqual(arithmetic.extract_answer(p.solution), str(value))

  def test_coarsen(self):
    p = arithmetic.make_problems(1, min_ops=5, max_ops=5, seed=1)[0]
    c = arithmetic.coarsen(p, drop_frac=0.4, rng=random.Random(0))
    self.assertLen(c.steps, 6 - 2)
    self.assertEqual(c.steps[-1], p.steps[-1])
    it = iter(p.steps)
    self.assertTrue(all(s in it for s in c.steps))  # a subsequence
    self.assertIsNone(arithmetic.extract_answer("no answer here"))


if __name__ == "__main__":
  absltest.main()
