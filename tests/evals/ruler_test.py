"""RULER-like synthetic suite in jaxlab.evals.long_context (paper M)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.evals import long_context as lc

TOK = ByteTokenizer()


def _text(ids):
  return TOK.decode([int(i) for i in ids])


class RulerTest(parameterized.TestCase):

  @parameterized.product(task=lc.RULER_TASKS, question_first=(False, True))
  def test_prompt_holds_answer_and_question_side(self, task, question_first):
    ex = lc.ruler_example(task, TOK, length=500, depth=0.4,
                          rng=np.random.default_rng(3),
                          question_first=question_first)
    self.assertLen(ex.prompt_ids, 500)
    text = _text(ex.prompt_ids)
    t = lc.RulerTemplates()
    if question_first:
      self.assertTrue(text.endswith(t.question_first_lead))
      self.assertFalse(text.startswith(t.filler[:10]))
    else:
      self.assertTrue(text.startswith(t.filler[:5]) or "VAR" in text[:30]
                      or "special" in text[:40])
    if task == "variable_tracking":
      self.assertLen(ex.parts, 3)
      head = f"VAR {ex.parts[0]} = "
      value = text[text.index(head) + len(head):][:7]
      self.assertIn(f"value {value}?", text)
      for prev, name in zip(ex.parts, ex.parts[1:]):  # the chain, in order
        self.assertLess(text.index(f"VAR {prev} ="),
                        text.index(f"VAR {name} = VAR {prev}."))
      self.assertEqual(ex.answer, " ".join(ex.parts))
    else:
      pos = [text.index(f"number is: {v}.") for v in ex.parts]
      self.assertEqual(pos, sorted(pos))  # parts in prompt order
      self.assertEqual(ex.answer, ", ".join(ex.parts))
      self.assertLen(ex.parts, 2 if task == "niah_multivalue" else 1)
    self.assertEqual(_text(ex.answer_ids), ex.answer)

  def test_scores_hand_computed(self):
    ex = lc.ruler_example("niah_multivalue", TOK, length=300, depth=0.5,
                          rng=np.random.default_rng(0))
    ans = ex.answer_ids.tolist()
    wrong = ans[:3] + [TOK.encode("x")[0]] + ans[4:]
    s = lc.ruler_scores([ex, ex], [ans + [1, 2], wrong], tokenizer=TOK)
    self.assertEqual(s["exact"], 0.5)
    self.assertAlmostEqual(s["token_accuracy"],
                           (1 + (len(ans) - 1) / len(ans)) / 2)
    self.assertEqual(s["part_recall"], 0.75)  # 2/2 and 1/2 values found
    self.assertEqual(s["groups"]["niah_multivalue/last"]["n"], 2)

  def test_suite_and_errors(self):
    exs = lc.ruler_suite(TOK, lengths=[500], depths=[0.2, 0.8], samples=1)
    self.assertLen(exs, 3 * 2 * 2)
    again = lc.ruler_suite(TOK, lengths=[500], depths=[0.2, 0.8], samples=1)
    self.assertEqual([e.answer for e in exs], [e.answer for e in again])
    with self.assertRaisesRegex(ValueError, "unknown RULER task 'qa'"):
      lc.ruler_example("qa", TOK, length=300, depth=0.5,
                       rng=np.random.default_rng(0))


if __name__ == "__main__":
  absltest.main()
