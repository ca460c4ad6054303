"""MathFimer: step splitting, PSM formatting/masks, masks per solution, expansion."""

import random

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.experiments import mathfimer as mathfimer_exp
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import arithmetic
from jaxlab.objectives import fim


class SplitTest(parameterized.TestCase):

  @parameterized.parameters(
      ("a long first line\n\nsecond long line\nanswer: 5",
       ["a long first line", "second long line", "answer: 5"]),
      ("So:\nthe next line is long\nanswer: 5",
       ["So: the next line is long", "answer: 5"]),
      ("first long line\nok\nanswer: 5", ["first long line ok", "answer: 5"]),
      ("ok\nanswer: 5", ["ok", "answer: 5"]),
      ("  only one line  ", ["only one line"]), ("\n\n", []))
  def test_split_steps(self, text, want):
    self.assertEqual(fim.split_steps(text), want)


class FormatTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tok = tokenizers.ByteTokenizer()
    self.fmt = fim.FimFormat()
    self.ids = self.fmt.add_to_tokenizer(self.tok)

  def test_sentinels_are_single_tokens(self):
    self.assertEqual(self.ids, [259, 260, 261])
    self.assertEqual(self.tok.encode("<|fim_middle|>"), [261])

  def test_psm_string_and_round_trip(self):
    ex = fim.FimExample("Compute 2 +3.", ("2 + 3 = 5",), ("answer: 5",),
                        "5 * 1 = 5")
    s = self.fmt.format(ex)
    self.assertEqual(s, "<|fim_prefix|>Compute 2 +3.\n2 + 3 = 5"
                        "<|fim_suffix|>answer: 5<|fim_middle|>5 * 1 = 5")
    self.assertEqual(self.fmt.parse(s), ex)
    for ex2 in (fim.FimExample("Q", (), ("s1", "s2"), "m"),
                fim.FimExample("Q", ("p1", "p2"), (), "m"),
                fim.FimExample("Q", (), (), "m")):
      self.assertEqual(self.fmt.parse(self.fmt.format(ex2)), ex2)
      ids, _ = self.fmt.encode(self.tok, ex2)
      self.assertEqual(self.tok.decode(ids), self.fmt.format(ex2))

  def test_mask_is_exactly_the_middle(self):
    ex = fim.FimExample("Q?", ("p",), ("s",), "mid dle")
    ids, mask = self.fmt.encode(self.tok, ex)
    masked = [t for t, m in zip(ids, mask) if m]
    self.assertEqual(masked, self.tok.encode("mid dle", add_eos=True))
    first = mask.index(1)
    self.assertEqual(ids[first - 1], self.tok.special_tokens["<|fim_middle|>"])
    self.assertEqual(sum(mask), len("mid dle") + 1)
    b = fim.encode_batch(self.fmt, self.tok, [ex], max_len=32)
    # Shifted: mask[t] = 1 iff targets[t] is a middle token or eos.
    got = b["targets"][0][b["loss_mask"][0] == 1].tolist()
    self.assertEqual(got, masked)
    # context_weight: every other real target (the prompt after bos:
    # <P> "Q?\np" <S> "s" <M> = 8 tokens) gets the weight; padding stays 0.
    w = fim.encode_batch(self.fmt, self.tok, [ex], max_len=32,
                         context_weight=0.25)["loss_mask"][0]
    n_real = len(ids) - 1
    self.assertEqual(n_real, 8 + len("mid dle") + 1)
    np.testing.assert_array_equal(w[:8], 0.25)
    np.testing.assert_array_equal(w[8:n_real], 1.0)
    np.testing.assert_array_equal(w[n_real:], 0.0)
    with self.assertRaisesRegex(ValueError, "context_weight"):
      fim.encode_batch(self.fmt, self.tok, [ex], max_len=32,
                       context_weight=2.0)

  def test_custom_sentinels_and_bad_input(self):
    fmt = fim.FimFormat("<P>", "<S>", "<M>")
    tok = tokenizers.ByteTokenizer()
    fmt.add_to_tokenizer(tok)
    ex = fim.FimExample("q", ("a",), ("b",), "c")
    self.assertEqual(fmt.format(ex), "<P>q\na<S>b<M>c")
    self.assertEqual(fmt.parse(fmt.format(ex)), ex)
    with self.assertRaisesRegex(ValueError, "step separator"):
      fmt.format(fim.FimExample("q", ("a\nb",), (), "c"))
    with self.assertRaisesRegex(ValueError, "sentinel"):
      fmt.format(fim.FimExample("q", (), (), "c<M>"))
    with self.assertRaisesRegex(ValueError, "not a PSM"):
      fmt.parse("no sentinels")

  def test_spm_order(self):
    # [inferred] SPM: suffix block, then the prefix block ending right
    # before the middle sentinel; the middle-only mask is unchanged.
    fmt = fim.FimFormat("<P>", "<S>", "<M>", order="spm")
    tok = tokenizers.ByteTokenizer()
    fmt.add_to_tokenizer(tok)
    ex = fim.FimExample("q", ("a", "b"), ("d", "e"), "c")
    self.assertEqual(fmt.format(ex), "<S>d\ne<P>q\na\nb<M>c")
    self.assertEqual(fmt.prompt("q", (), ("d",)), "<S>d<P>q\n<M>")
    for ex2 in (ex, fim.FimExample("q", (), ("d",), "c"),
                fim.FimExample("q", ("a",), (), "c")):
      self.assertEqual(fmt.parse(fmt.format(ex2)), ex2)
    ids, mask = fmt.encode(tok, ex)
    self.assertEqual([t for t, m in zip(ids, mask) if m],
                     tok.encode("c", add_eos=True))
    with self.assertRaisesRegex(ValueError, "not a SPM"):
      fmt.parse("<P>q\na<S>d<M>c")  # a PSM string
    with self.assertRaisesRegex(ValueError, "order"):
      fim.FimFormat(order="pms")


class MaskSamplingTest(absltest.TestCase):

  def test_rounds_and_short_solutions(self):
    items = [("q1", ["s1", "s2", "s3", "s4"]), ("q2", ["only"]),
             ("q3", ["a", "b"])]
    ex, stats = fim.build_fim_dataset(items, rounds=3, seed=0)
    self.assertEqual(stats, {"examples": 3 + 2, "solutions": 3,
                             "skipped_short": 1})
    for e in ex:
      steps = dict(items)[e.question]
      self.assertEqual(list(e.prefix) + [e.middle] + list(e.suffix), steps)
    mids = [e.middle for e in ex if e.question == "q1"]
    self.assertLen(set(mids), 3)  # distinct masks

  def test_empty_masks_are_intact_gaps(self):
    steps = ["s1", "s2", "s3"]
    ex = fim.sample_fim_examples("q", steps, rounds=1, rng=random.Random(0),
                                 empty_masks=2)
    self.assertLen(ex, 3)
    self.assertNotEqual(ex[0].middle, "")
    empty = ex[1:]
    for e in empty:  # the whole chain in P + S, nothing to fill
      self.assertEqual((e.middle, list(e.prefix) + list(e.suffix)),
                       ("", steps))
    self.assertLen({len(e.prefix) for e in empty}, 2)  # distinct gaps
    tok = tokenizers.ByteTokenizer()
    fmt = fim.FimFormat()
    fmt.add_to_tokenizer(tok)
    ids, mask = fmt.encode(tok, fim.FimExample("q", ("s1",), ("s2",), ""))
    # The loss is on eos alone, right after <|fim_middle|>.
    self.assertEqual((sum(mask), ids[-1], ids[-2]),
                     (1, tok.eos_id, tok.special_tokens["<|fim_middle|>"]))
    _, stats = fim.build_fim_dataset([("q", steps)], rounds=3, empty_masks=1)
    self.assertEqual(stats["examples"], 4)

  def test_coarse_gap_examples(self):
    steps = ["s1", "s2", "s3", "s4", "ans"]
    # Hand-drawn with the same rng calls: sample 2 of the 4 non-final
    # steps to delete, then one gap of the 3 kept steps.
    r = random.Random(3)
    drop = set(r.sample(range(4), 2))
    kept = [i for i in range(5) if i not in drop]
    g = r.randrange(len(kept))
    ex = fim.sample_coarse_gap_examples("q", steps, rounds=1, drop_frac=0.4,
                                        rng=random.Random(3))[0]
    self.assertEqual(ex.prefix, tuple(steps[i] for i in kept[:g]))
    self.assertEqual(ex.suffix, tuple(steps[i] for i in kept[g:]))
    # Every example: M is the first step deleted right after P (or empty
    # when P and S are adjacent in the full chain); the answer stays.
    for e in fim.sample_coarse_gap_examples(
        "q", steps, rounds=40, drop_frac=0.4, rng=random.Random(0)):
      self.assertEqual(e.suffix[-1], "ans")
      self.assertLen(e.prefix + e.suffix, 3)
      nxt = steps.index(e.prefix[-1]) + 1 if e.prefix else 0
      self.assertEqual(e.middle, "" if steps[nxt] == e.suffix[0]
                       else steps[nxt])
    self.assertEqual(fim.sample_coarse_gap_examples(
        "q", ["ans"], rounds=2, drop_frac=0.4, rng=random.Random(0)), [])
    with self.assertRaisesRegex(ValueError, "drop_frac"):
      fim.sample_coarse_gap_examples("q", steps, rounds=1, drop_frac=1.0,
                                     rng=random.Random(0))
    _, stats = fim.build_fim_dataset([("q", steps)], rounds=2, coarse_gaps=3)
    self.assertEqual(stats["examples"], 5)

  def test_with_replacement(self):
    ex = fim.sample_fim_examples("q", ["a", "b"], rounds=5,
                                 rng=random.Random(0), distinct=False)
    self.assertLen(ex, 5)


class ExpandTest(absltest.TestCase):

  def test_round_inserts_and_filters(self):
    fmt = fim.FimFormat()
    items = [("Q1", ["1 + 2 = 3", "3 * 2 = 6", "answer: 6"]),
             ("Q2", ["single step"])]
    seen = []

    def fill(prompts):
      seen.extend(prompts)
      # gap 1: a new step; gap 2: near-copy of y_2 ("answer: 6").
      return ["3 - 0 = 3\nextra line", "answer: 6 "]

    out, st = fim.expand_round(items, fill, fmt=fmt, eta=0.8)
    self.assertEqual(seen, [fmt.prompt("Q1", ["1 + 2 = 3"],
                                       ["3 * 2 = 6", "answer: 6"]),
                            fmt.prompt("Q1", ["1 + 2 = 3", "3 * 2 = 6"],
                                       ["answer: 6"])])
    self.assertEqual(out[0], ["1 + 2 = 3", "3 - 0 = 3", "3 * 2 = 6",
                              "answer: 6"])
    self.assertEqual(out[1], ["single step"])
    self.assertEqual((st.gaps, st.inserted, st.rejected_similar,
                      st.rejected_empty, st.skipped_short), (2, 1, 1, 0, 1))
    self.assertEqual(st.insertion_rate, 0.5)
    self.assertEqual((st.steps_before, st.steps_after), (2.0, 2.5))

  def test_first_gap_has_an_empty_prefix(self):
    fmt = fim.FimFormat()
    items = [("a=1,b=a+1,c=b+1; c?", ["c=b+1=3", "answer: 3"])]
    seen = []

    def fill(prompts):
      seen.extend(prompts)
      return ["b=a+1=2", "answer: 3"]  # gap before y_1: new; before y_2: copy

    out, st = fim.expand(items, fill, fmt=fmt, first_gap=True)
    self.assertEqual(seen, [fmt.prompt(items[0][0], [],
                                       ["c=b+1=3", "answer: 3"]),
                            fmt.prompt(items[0][0], ["c=b+1=3"],
                                       ["answer: 3"])])
    self.assertTrue(seen[0].startswith(
        "<|fim_prefix|>a=1,b=a+1,c=b+1; c?\n<|fim_suffix|>"))
    self.assertEqual(out[0], ["b=a+1=2", "c=b+1=3", "answer: 3"])
    self.assertEqual((st[0]["gaps"], st[0]["inserted"],
                      st[0]["rejected_similar"]), (2, 1, 1))
    # Off (the default): only the gap between y_1 and y_2.
    _, st = fim.expand(items, lambda ps: ["x"] * len(ps), fmt=fmt)
    self.assertEqual(st[0]["gaps"], 1)

  def test_similarity_threshold_is_strict(self):
    # ratio("abcd", "abce") = 2*3/8 = 0.75: kept at eta=0.75? No: > is
    # required to reject, so 0.75 is inserted at eta=0.75 and rejected at 0.7.
    self.assertEqual(fim.similarity("abcd", "abce"), 0.75)
    items = [("Q", ["x1", "abce"])]
    fill = lambda ps: ["abcd"] * len(ps)
    _, st = fim.expand_round(items, fill, eta=0.75)
    self.assertEqual(st.inserted, 1)
    _, st = fim.expand_round(items, fill, eta=0.7)
    self.assertEqual(st.rejected_similar, 1)

  def test_multiple_rounds_and_empty(self):
    items = [("Q", ["aaaa", "bbbb"])]
    counter = iter(range(100))
    fill = lambda ps: [f"new{next(counter)}" for _ in ps]
    out, hist = fim.expand(items, fill, rounds=3)
    # Round r has (steps - 1) gaps; all inserted: 2 -> 3 -> 5 -> 9 steps.
    self.assertLen(out[0], 9)
    self.assertEqual([h["gaps"] for h in hist], [1, 2, 4])
    _, st = fim.expand_round(items, lambda ps: ["  \n"] * len(ps))
    self.assertEqual(st.rejected_empty, 1)
    with self.assertRaisesRegex(ValueError, "returned 0 middles"):
      fim.expand_round(items, lambda ps: [])
    np.testing.assert_equal(fim.clean_middle("\n  x y \nz"), "x y")


class ArithmeticCheckTest(parameterized.TestCase):

  @parameterized.parameters(("7 * 3 = 21", True), ("21 - 4 = 17", True),
                            ("21 - 4 = 18", False), ("2 + 2 = 4", True),
                            ("answer: 4", None), ("2 + x = 4", None),
                            ("2 / 2 = 1", None), ("", None))
  def test_step_is_correct(self, step, want):
    self.assertEqual(arithmetic.step_is_correct(step), want)

  def test_variables_format_step_check(self):
    q = "a=7,b=a*3,c=b-4; c?"
    self.assertEqual(arithmetic.question_values(q),
                     {"a": ("7", 7), "b": ("a*3", 21), "c": ("b-4", 17)})
    self.assertTrue(arithmetic.step_is_correct("c=b-4=17", q))
    self.assertFalse(arithmetic.step_is_correct("c=b-4=18", q))  # value
    self.assertFalse(arithmetic.step_is_correct("c=a-4=17", q))  # definition
    self.assertFalse(arithmetic.step_is_correct("d=c+1=18", q))  # unknown
    self.assertIsNone(arithmetic.step_is_correct("answer: 17", q))
    with self.assertRaisesRegex(ValueError, "needs its question"):
      arithmetic.step_is_correct("c=b-4=17")
    items = [(q, ["b=a*3=21", "c=b-4=16", "answer: 17"])]
    self.assertAlmostEqual(mathfimer_exp.correct_step_frac(items), 0.5)
    self.assertEqual(mathfimer_exp.inserted_steps(
        [(q, ["answer: 17"])], items, with_question=True),
                     [(q, "b=a*3=21"), (q, "c=b-4=16")])

  def test_experiment_helpers(self):
    before = [("Q", ["1 + 2 = 3", "answer: 6"])]
    after = [("Q", ["1 + 2 = 3", "3 * 2 = 6", "3 * 2 = 7", "answer: 6"])]
    self.assertEqual(mathfimer_exp.inserted_steps(before, after),
                     ["3 * 2 = 6", "3 * 2 = 7"])
    # Computation steps only (the answer line is excluded): 2 of 3 right.
    self.assertAlmostEqual(mathfimer_exp.correct_step_frac(after), 2 / 3)


if __name__ == "__main__":
  absltest.main()
