"""RULER niah rows (`jaxlab.data.ruler_niah`) and the PG19-layout copy of
Python's documentation (`jaxlab.data.pydoc_text.write_pg19_copy`).

The expected strings are RULER's (NVIDIA/RULER scripts/data/synthetic/
constants.py `TASKS['niah']`, niah.py's needle and noise haystack), with
niah.py's one-needle rewrite ("Some" -> "A", "are all" -> "is", "are" ->
"is") done by hand here.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import ml_collections

from jaxlab.data import pipeline
from jaxlab.data import pydoc_text
from jaxlab.data import ruler_niah
from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.evals import long_context as lc
from jaxlab.experiments.rope_extension import real_run

HEAD = ("A special magic number is hidden within the following text. Make "
        "sure to memorize it. I will quiz you about the number afterwards.\n")
NOISE = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
         "There and back again.")


def count(text):
  return len(ByteTokenizer().encode(text))


class NiahRowsTest(absltest.TestCase):

  def test_rows_follow_rulers_generator(self):
    rows = ruler_niah.niah_rows(count, max_seq_length=4096, num_samples=3,
                                random_seed=7)
    self.assertLen(rows, 3)
    for r in rows:
      self.assertEqual(sorted(r), sorted([
          "index", "input", "outputs", "length", "length_w_model_temp",
          "answer_prefix", "token_position_answer"]))
      (value,) = r["outputs"]
      self.assertRegex(value, r"^[1-9]\d{6}$")
      key = r["answer_prefix"].split(" for ")[1].split(" mentioned")[0]
      self.assertEqual(r["answer_prefix"], f" The special magic number for "
                       f"{key} mentioned in the provided text is")
      self.assertTrue(r["input"].startswith(HEAD))
      self.assertTrue(r["input"].endswith(
          f"\nWhat is the special magic number for {key} mentioned in the "
          "provided text?"))
      lines = r["input"][len(HEAD):].split("\n")[:-1]
      needle = f"One of the special magic numbers for {key} is: {value}."
      self.assertEqual(lines.count(needle), 1)
      self.assertEqual(set(lines) - {needle}, {NOISE})
      # RULER's length: the prompt with its answer prefix, plus the 128
      # answer tokens; no more than the budget, and no noise line short.
      full = r["input"] + r["answer_prefix"]
      self.assertEqual(r["length"], count(full) + 128)
      self.assertEqual(r["length_w_model_temp"], r["length"])
      self.assertLessEqual(r["length"], 4096)
      self.assertGreater(r["length"] + 2 * count(NOISE + "\n"), 4096)
      self.assertEqual(r["index"], r["input"].find(value))
      self.assertEqual(r["token_position_answer"],
                       count(r["input"][:r["index"]]))
      self.assertEqual(lc.ruler_row_score("niah_single_1", f" {value}.",
                                          r["outputs"]), 1.0)
    self.assertEqual(rows, ruler_niah.niah_rows(
        count, max_seq_length=4096, num_samples=3, random_seed=7))
    self.assertNotEqual(rows, ruler_niah.niah_rows(
        count, max_seq_length=4096, num_samples=3, random_seed=8))

  def test_written_directory_reads_as_rulers(self):
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp)
    path = ruler_niah.write(tmp, count, max_seq_lengths=(1024, 2048),
                            num_samples=2)
    self.assertEqual(path, os.path.join(tmp, "niah_single_1",
                                        "validation.jsonl"))
    with open(path) as f:
      lengths = [json.loads(line)["length"] for line in f]
    self.assertLen(lengths, 4)
    self.assertTrue(all(n <= 1024 for n in lengths[:2]))
    self.assertTrue(all(1024 < n <= 2048 for n in lengths[2:]))
    c = ml_collections.ConfigDict({"ruler": {
        "path": tmp, "subset": "validation", "max_rows": 0}})
    rows = real_run.ruler_rows(c)
    self.assertEqual([r["task"] for r in rows], ["niah_single_1"] * 4)

  def test_user_errors(self):
    with self.assertRaisesRegex(ValueError, "cannot hold"):
      ruler_niah.niah_rows(count, max_seq_length=200, num_samples=1)
    with self.assertRaisesRegex(ValueError, "this writer has"):
      ruler_niah.niah_rows(count, max_seq_length=4096, num_samples=1,
                           task="niah_multikey_1")


class Pg19CopyTest(absltest.TestCase):

  def test_books_in_pg19_layout(self):
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp)
    path = pydoc_text.write_pg19_copy(tmp, min_chars=50_000)
    self.assertEqual(path, os.path.join(tmp, "data",
                                        "test-00000-of-00001.parquet"))
    data = ml_collections.ConfigDict({"source": "hf", "path": tmp,
                                      "subset": "", "split": "test",
                                      "cache_dir": os.path.join(tmp, "c")})
    rows = pipeline.read_split(data, "test")
    books = pydoc_text.books(50_000)
    self.assertGreaterEqual(len(books), 5)
    self.assertLen(rows, len(books))
    self.assertEqual(sorted(rows[0]), ["publication_date", "short_book_title",
                                       "text", "url"])
    for i, b in enumerate(books):
      self.assertEqual(rows[i]["text"], b["text"])
      self.assertGreaterEqual(len(b["text"]), 50_000)
    # The topics, in sorted order, each once, each book whole topics.
    from pydoc_data import topics  # pylint: disable=g-import-not-at-top
    names = sorted(topics.topics)
    joined = "\n\n".join(b["text"] for b in books)
    first = topics.topics[names[0]].strip("\n")
    self.assertTrue(joined.startswith(first))
    self.assertTrue(books[1]["text"].startswith(
        topics.topics[books[1]["short_book_title"].split(
            "topics ")[1].split(" to ")[0]].strip("\n")))


if __name__ == "__main__":
  absltest.main()
