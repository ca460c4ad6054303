"""Parity of jaxlab.evals.text with the rouge_score package and by hand."""

import functools
import random

from absl.testing import absltest
from absl.testing import parameterized
from rouge_score import rouge_scorer
from rouge_score import tokenizers

from jaxlab.evals import text

_PAIRS = [
    ("The quick brown fox jumps over the lazy dog",
     "The quick brown dog jumps on the log."),
    ("", "something"), ("something", ""), ("", ""), ("...", "!!!"),
    ("Hello, WORLD!!", "hello world"),
    ("He was born in 1984 in Paris.", "Born: 1984, Paris (France)"),
    ("Café naïve résumé ÉCOLE", "cafe naive resume ecole"),
    ("日本語 text with 中文 and emoji 😀 ok", "text ok with emoji"),
    ("the the the the cat", "the cat the cat"),
    ("running runs runner ran easily", "run running ran easy easili"),
    ("generalization generalizations generalize", "generalized general"),
    ("studies studying studied", "study studi"),
    ("I don't know.", "I do not know"),
    ("a b c d e f", "f e d c b a"),
    ("x1 y2-z3_w4", "x1 y2 z3 w4"),
    ("relational conditional rational", "relate condition ration"),
    ("Tab\tand\nnewline  spaces", "tab and newline spaces"),
    ("İstanbul ǅemal ß", "istanbul dzemal ss"),
    ("caresses ponies ties caress cats", "caress poni ti caress cat"),
]


class RougeParityTest(parameterized.TestCase):

  @parameterized.product(stem=[True, False])
  def test_matches_rouge_score(self, stem):
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"],
                                      use_stemmer=stem)
    for pred, ref in _PAIRS + [(b, a) for a, b in _PAIRS]:
      want = scorer.score(ref, pred)  # rouge_score takes (target, prediction)
      for name, got in (("rougeL", text.rouge_l(pred, ref, use_stemmer=stem)),
                        ("rouge1", text.rouge_1(pred, ref, use_stemmer=stem)),
                        ("rouge2", text.rouge_2(pred, ref, use_stemmer=stem))):
        w = want[name]
        self.assertEqual(got, (w.precision, w.recall, w.fmeasure),
                         msg=f"{name} stem={stem} {pred!r} vs {ref!r}")

  def test_hand_computed_lcs(self):
    # ref: [the, cat, sat, on, the, mat] (6); pred: [the, cat, on, mat] (4).
    p, r, f = text.rouge_l("the cat on mat", "The cat sat on the mat.")
    self.assertEqual((p, r), (1.0, 4 / 6))
    self.assertAlmostEqual(f, 2 * 1.0 * (4 / 6) / (1 + 4 / 6))
    self.assertEqual(text.rouge_l_recall("nothing shared", "the cat"), 0.0)

  @parameterized.product(stem=[True, False])
  def test_tokenizer_matches_rouge_score_default(self, stem):
    default = tokenizers.DefaultTokenizer(use_stemmer=stem)
    for pred, ref in _PAIRS:
      for s in (pred, ref):
        self.assertEqual(text.rouge_tokenize(s, use_stemmer=stem),
                         default.tokenize(s), s)

  def test_tokenizer_stems_long_tokens_only(self):
    self.assertEqual(text.rouge_tokenize("Ponies, cats & dogs!"),
                     ["poni", "cat", "dog"])
    self.assertEqual(text.rouge_tokenize("Ponies, cats", use_stemmer=False),
                     ["ponies", "cats"])

  def test_rouge_n_rejects_bad_n(self):
    for n in (0, 10):
      with self.assertRaisesRegex(ValueError, "1 <= n <= 9"):
        text.rouge_n("a", "a", n)

  def test_rouge_n_beyond_two_matches_rouge_score(self):
    pred, ref = "a b c d e f g", "a b c d x f g a b c d"
    want = rouge_scorer.RougeScorer(["rouge3"]).score(ref, pred)["rouge3"]
    self.assertEqual(text.rouge_n(pred, ref, 3, use_stemmer=False),
                     tuple(want))
    # Hand count: pred trigrams 5, ref 9, shared abc bcd (clipped once each).
    self.assertEqual(text.rouge_n(pred, ref, 3)[:2], (2 / 5, 2 / 9))


class EditAndMatchTest(parameterized.TestCase):

  @parameterized.parameters(
      ("kitten", "sitting", 3), ("", "abc", 3), ("abc", "", 3), ("", "", 0),
      ("flaw", "lawn", 2), ("héllo", "hello", 1), ("abc", "abc", 0))
  def test_levenshtein(self, a, b, want):
    self.assertEqual(text.levenshtein(a, b), want)
    self.assertEqual(text.levenshtein(b, a), want)

  def test_levenshtein_words_and_normalised(self):
    self.assertEqual(text.levenshtein("a b c".split(), "a x c d".split()), 2)
    self.assertEqual(text.normalized_levenshtein("kitten", "sitting"), 3 / 7)
    self.assertEqual(text.normalized_levenshtein("", ""), 0.0)

  def test_levenshtein_and_lcs_match_recursive_definitions(self):
    """rapidfuzz vs the textbook recursions on chars, unicode and word lists."""
    rng = random.Random(0)

    def ref_lev(a, b):
      @functools.lru_cache(None)
      def d(i, j):
        if i == 0 or j == 0:
          return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1,
                   d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))
      return d(len(a), len(b))

    def ref_lcs(a, b):
      @functools.lru_cache(None)
      def l(i, j):
        if i == 0 or j == 0:
          return 0
        if a[i - 1] == b[j - 1]:
          return l(i - 1, j - 1) + 1
        return max(l(i - 1, j), l(i, j - 1))
      return l(len(a), len(b))

    # Latin, a combining accent, CJK, an astral-plane emoji, the empty string.
    alphabets = ["abc", "ae\u0301é", "日本語", "😀😁a", "ß"]
    words = ["the", "cat", "日本", "😀", ""]
    for trial in range(120):
      if trial % 3 == 2:
        a = [rng.choice(words) for _ in range(rng.randint(0, 6))]
        b = [rng.choice(words) for _ in range(rng.randint(0, 6))]
      else:
        alpha = "".join(rng.sample(alphabets, 2))
        a = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 8)))
        b = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 8)))
      d = ref_lev(tuple(a), tuple(b))
      self.assertEqual(text.levenshtein(a, b), d, (a, b))
      self.assertEqual(text.lcs_length(a, b), ref_lcs(tuple(a), tuple(b)),
                       (a, b))
      n = max(len(a), len(b))
      self.assertEqual(text.normalized_levenshtein(a, b), d / n if n else 0.0)
      self.assertEqual(text.edit_similarity(a, b), 1 - d / n if n else 1.0)

  def test_unit_edit_distance_matches_a_dp_reference(self):
    """UED% on integer token sequences = 100 * sum DP distance / sum |clean|."""
    rng = random.Random(1)

    def ref_lev(a, b):  # row-by-row Wagner-Fischer
      row = list(range(len(b) + 1))
      for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
          prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1,
                                     prev + (x != y))
      return row[-1]

    def dedup(u):
      return [x for i, x in enumerate(u) if i == 0 or x != u[i - 1]]

    clean = [[rng.randrange(300, 310) for _ in range(rng.randint(1, 30))]
             for _ in range(20)]
    noisy = [[x if rng.random() < 0.7 else rng.randrange(300, 312)
              for x in u if rng.random() < 0.9] for u in clean]
    for dd in (False, True):
      f = dedup if dd else list
      want = 100.0 * sum(ref_lev(f(c), f(n)) for c, n in zip(clean, noisy)
                         ) / sum(len(f(c)) for c in clean)
      self.assertAlmostEqual(
          text.unit_edit_distance(clean, noisy, dedup=dd), want, places=10)
    # Hand: one substitution in 4 units + one deletion in 2 -> 2 / 6.
    self.assertAlmostEqual(text.unit_edit_distance(
        [[1, 2, 3, 4], [7, 7]], [[1, 2, 9, 4], [7]]), 100 * 2 / 6)
    self.assertAlmostEqual(text.unit_edit_distance(
        [[1, 2, 3, 4], [7, 7]], [[1, 2, 9, 4], [7]], dedup=True), 100 * 1 / 5)

  def test_edit_distances_of_astral_and_empty_strings(self):
    # One code point per emoji (not two UTF-16 units): one substitution.
    self.assertEqual(text.levenshtein("a😀b", "a😁b"), 1)
    self.assertEqual(text.levenshtein("", "😀😀"), 2)
    self.assertEqual(text.lcs_length("", ""), 0)
    self.assertEqual(text.lcs_length("ab😀c", "a😀bc"), 3)
    self.assertEqual(text.edit_similarity("", ""), 1.0)
    self.assertEqual(text.edit_similarity("", "x"), 0.0)

  @parameterized.parameters(
      ("The answer is 17.", "answer is 17", True),
      ("  17 ", "17", True), ("17", "18", False),
      ("Paris!", "paris", True), ("ｆｕｌｌ width", "full width", True),
      ("an apple", "apple", True), ("1,000", "1000", True))
  def test_exact_match(self, a, b, want):
    self.assertEqual(text.exact_match(a, b), want)

  def test_exact_match_without_normalisation(self):
    self.assertFalse(text.exact_match("Paris", "paris", normalize=False))
    self.assertTrue(text.exact_match("Paris", "Paris", normalize=False))


if __name__ == "__main__":
  absltest.main()
