"""Data: packing/padding, per-host split, deterministic resumable iteration,
JSONL errors, TFDS through `tfds.data_source` on a dataset prepared here."""

import os
import shutil
import tempfile
import threading

from absl.testing import absltest
import numpy as np

from jaxlab.data import pipeline
from jaxlab.data import sources
from jaxlab.data import tokenizers


class PackingTest(absltest.TestCase):

  def test_pack_hand_computed(self):
    # Docs of 4 and 3 tokens -> 3 and 2 (input, target) pairs; seq_len 6
    # packs both into one row; the third doc (5 tokens) starts a new row.
    rows = pipeline.lm_examples([[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]],
                                seq_len=6, pad_id=0, mode="pack")
    self.assertLen(rows, 2)
    r = rows[0]
    np.testing.assert_array_equal(r["inputs"], [1, 2, 3, 5, 6, 0])
    np.testing.assert_array_equal(r["targets"], [2, 3, 4, 6, 7, 0])
    np.testing.assert_array_equal(r["segment_ids"], [1, 1, 1, 2, 2, 0])
    np.testing.assert_array_equal(r["positions"], [0, 1, 2, 0, 1, 0])
    np.testing.assert_array_equal(r["loss_mask"], [1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(rows[1]["inputs"], [8, 9, 10, 11, 0, 0])

  def test_pad_and_long_document_chunks(self):
    rows = pipeline.lm_examples([list(range(1, 10))], seq_len=4, pad_id=0,
                                mode="pad")
    # 9 tokens -> 8 next-token pairs -> chunks [1..5], [5..9].
    self.assertLen(rows, 2)
    np.testing.assert_array_equal(rows[0]["inputs"], [1, 2, 3, 4])
    np.testing.assert_array_equal(rows[0]["targets"], [2, 3, 4, 5])
    np.testing.assert_array_equal(rows[1]["inputs"], [5, 6, 7, 8])
    np.testing.assert_array_equal(rows[1]["targets"], [6, 7, 8, 9])
    with self.assertRaisesRegex(ValueError, "data.packing='zip'.*pack, pad"):
      pipeline.lm_examples([[1, 2]], seq_len=4, pad_id=0, mode="zip")


class BatchingTest(absltest.TestCase):

  def _examples(self, n=20):
    return [{"x": np.array([i], np.int32)} for i in range(n)]

  def test_per_host_split_is_disjoint_and_covers(self):
    seen = []
    for pi in range(2):
      ds = pipeline.batched_dataset(self._examples(), global_batch=4, seed=0,
                                    shuffle=False, repeat=False,
                                    process_index=pi, process_count=2)
      got = np.concatenate([b["x"][:, 0] for b in ds])
      np.testing.assert_array_equal(got, np.arange(pi, 20, 2))
      seen.extend(got)
    self.assertEqual(sorted(seen), list(range(20)))

  def test_shuffle_is_deterministic_reshuffles_and_resumes(self):
    make = lambda seed: pipeline.batched_dataset(self._examples(),
                                                 global_batch=5, seed=seed)
    it = iter(make(3))
    epoch1 = np.concatenate([next(it)["x"][:, 0] for _ in range(4)])
    epoch2 = np.concatenate([next(it)["x"][:, 0] for _ in range(4)])
    self.assertEqual(sorted(epoch1), list(range(20)))  # a permutation
    self.assertFalse(np.array_equal(epoch1, epoch2))  # new order each epoch
    again = np.concatenate([b["x"][:, 0] for b in
                            [make(3)[i] for i in range(4)]])
    np.testing.assert_array_equal(again, epoch1)
    self.assertFalse(np.array_equal(
        np.concatenate([make(4)[i]["x"][:, 0] for i in range(4)]), epoch1))
    # Iterator state round-trip: resume from batch 3 gives batches 3, 4, ...
    it = iter(make(3))
    for _ in range(3):
      next(it)
    state = it.get_state()
    expected = [next(it)["x"] for _ in range(2)]
    resumed = iter(make(3))
    resumed.set_state(state)
    for want in expected:
      np.testing.assert_array_equal(next(resumed)["x"], want)

  def test_iterator_reads_at_most_prefetch_batches_ahead(self):
    # Rows pass `transform` when read. After the first batch of a repeated
    # stream, at most 1 + prefetch batches (3 x 4 rows) have been read:
    # grain's default (500 elements ahead) would read 500 batches here.
    lock, seen = threading.Lock(), []
    full = threading.Event()

    def count(row):
      with lock:
        seen.append(int(row["x"][0]))
        if len(seen) >= 12:
          full.set()
      return row

    ds = pipeline.batched_dataset(self._examples(), global_batch=4, seed=0,
                                  shuffle=False, transform=count, prefetch=2,
                                  read_threads=1)
    it = iter(ds)
    np.testing.assert_array_equal(next(it)["x"][:, 0], [0, 1, 2, 3])
    # The buffer refills in the background: wait on it (an event, not a
    # sleep), then check that nothing beyond it was read.
    self.assertTrue(full.wait(timeout=120))
    with lock:
      self.assertLessEqual(len(seen), 12)
      self.assertEqual(sorted(seen), list(range(12)))
    with self.assertRaisesRegex(ValueError, "data.prefetch=0"):
      pipeline.batched_dataset(self._examples(), global_batch=4, seed=0,
                               prefetch=0)

  def test_batch_errors(self):
    with self.assertRaisesRegex(ValueError, "fewer than one batch"):
      pipeline.batched_dataset(self._examples(3), global_batch=4, seed=0)
    with self.assertRaisesRegex(ValueError, "divisible by the number of"):
      pipeline.batched_dataset(self._examples(), global_batch=3, seed=0,
                               process_index=0, process_count=2)


class SourcesTest(absltest.TestCase):

  def _tmp(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path

  def test_synthetic_corpus_deterministic(self):
    a = sources.synthetic_corpus(50, seed=1)
    self.assertEqual(a, sources.synthetic_corpus(50, seed=1))
    self.assertNotEqual(a, sources.synthetic_corpus(50, seed=2))
    sums = [s for d in a for s in d.split(". ") if " plus " in s]
    for s in sums:  # the arithmetic sentences are correct
      x, rest = s.split(" plus ")
      y, z = rest.rstrip(".").split(" is ")
      self.assertEqual(int(x) + int(y), int(z))

  def test_jsonl_rows_and_errors(self):
    d = self._tmp()
    path = os.path.join(d, "a.jsonl")
    with open(path, "w") as f:
      f.write('{"text": "hello"}\n\n{"text": "world", "id": 2}\n')
    self.assertEqual(sources.read_jsonl(path), ["hello", "world"])
    cases = [('{"text": "ok"}\n{"text": bad}\n', r"a.jsonl:2: invalid JSON"),
             ('{"text": "ok"}\n{"body": "x"}\n',
              r"a.jsonl:2: missing field 'text' \(fields: body\)"),
             ('[1, 2]\n', r"a.jsonl:1: expected a JSON object"),
             ('{"text": 3}\n', r"a.jsonl:1: field 'text' must be a string")]
    for content, pattern in cases:
      with open(path, "w") as f:
        f.write(content)
      with self.assertRaisesRegex(ValueError, pattern):
        sources.read_jsonl(path)
    with self.assertRaisesRegex(FileNotFoundError, "nope.jsonl"):
      sources.read_jsonl(os.path.join(d, "nope.jsonl"))

  def test_tfds_data_source_on_prepared_dir(self):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    class JaxlabTinyText(tfds.core.GeneratorBasedBuilder):
      VERSION = tfds.core.Version("1.0.0")

      def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({"text": tfds.features.Text()}))

      def _split_generators(self, dl_manager):
        del dl_manager
        return {"train": self._generate_examples(8),
                "test": self._generate_examples(2)}

      def _generate_examples(self, n):
        for i in range(n):
          yield i, {"text": f"document number {i}"}

    d = self._tmp()
    JaxlabTinyText(data_dir=d, file_format="array_record").download_and_prepare()
    src = sources.tfds_source("jaxlab_tiny_text", split="train", data_dir=d)
    self.assertLen(src, 8)
    self.assertEqual(sorted(src[i] for i in range(8)),
                     sorted(f"document number {i}" for i in range(8)))
    tok = tokenizers.ByteTokenizer()
    ex = pipeline.lazy_padded_examples(src, tok, seq_len=24)
    first = ex[0]
    ids = tok.encode(src[0], add_bos=True, add_eos=True)
    np.testing.assert_array_equal(first["inputs"][:len(ids) - 1], ids[:-1])
    self.assertEqual(first["loss_mask"].sum(), len(ids) - 1)
    with self.assertRaisesRegex(FileNotFoundError, "not prepared"):
      sources.tfds_source("jaxlab_tiny_text", split="validation", data_dir=d)


if __name__ == "__main__":
  absltest.main()
