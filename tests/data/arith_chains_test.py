"""jaxlab.data.synthetic.arith_chains: chains, copy/reverse, padding."""

from absl.testing import absltest
import numpy as np

from jaxlab.data.synthetic import arith_chains as ac


class ArithChainsTest(absltest.TestCase):

  def test_chain_answer_is_the_worked_chain(self):
    c = ac.make_chains(0, 1, min_ops=3, max_ops=3)[0]
    text, ans = ac.decode(c.prompt), ac.decode(c.answer)
    self.assertTrue(text.endswith("?"))
    x = int(text[0])
    for i in range(3):
      op, d = text[1 + 2 * i], int(text[2 + 2 * i])
      x = {"+": x + d, "-": x - d, "*": x * d}[op] % 10
      self.assertEqual(ans[5 * i:5 * i + 5], f"{op}{d}={x};")

  def test_copy_and_reverse(self):
    for kind, flip in (("copy", False), ("reverse", True)):
      for c in ac.make_chains(3, 20, min_ops=4, max_ops=9, kind=kind):
        digits = ac.decode(c.prompt)[:-1]
        self.assertTrue(4 <= len(digits) <= 9)
        self.assertEqual(ac.decode(c.prompt)[-1], "?")
        self.assertEqual(ac.decode(c.answer),
                         digits[::-1] if flip else digits)

  def test_right_padding_puts_the_copy_a_constant_offset_after(self):
    chains = ac.make_chains(1, 8, min_ops=4, max_ops=10, kind="copy")
    arr = ac.training_arrays(chains, prompt_len=16, gen_len=24,
                             pad="right")
    for row, c in zip(arr["inputs"], chains):
      n = len(c.answer)
      np.testing.assert_array_equal(row[16:16 + n], row[:n])
      self.assertTrue((row[16 + n:] == ac.EOS).all())
      self.assertEqual(row[n], ac.encode("?")[0])
      self.assertTrue((row[n + 1:16] == ac.PAD).all())
    np.testing.assert_array_equal(arr["prompt_mask"][:, :16], 1)
    np.testing.assert_array_equal(arr["prompt_mask"][:, 16:], 0)
    left = ac.pad_prompt([1, 2], 4, "left")
    self.assertEqual(left, [ac.PAD, ac.PAD, 1, 2])

  def test_errors_name_the_field(self):
    with self.assertRaisesRegex(ValueError, "task.kind='sort'"):
      ac.make_chains(0, 1, min_ops=1, max_ops=2, kind="sort")
    with self.assertRaisesRegex(ValueError, "task.pad='middle'"):
      ac.pad_prompt([1], 4, "middle")
    with self.assertRaisesRegex(ValueError, "task.min_ops"):
      ac.make_chains(0, 1, min_ops=0, max_ops=2)

  def test_exact_match_cuts_at_eos(self):
    c = ac.Chain(ac.encode("12?"), ac.encode("12"))
    gen = np.array([ac.encode("12") + [ac.EOS, 5], ac.encode("125") +
                    [ac.EOS]])
    np.testing.assert_array_equal(ac.exact_match(gen, [c, c]), [True, False])


if __name__ == "__main__":
  absltest.main()
