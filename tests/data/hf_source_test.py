"""hf_source: local copies laid out as on the Hub (parquet, json, a README's
configs, subset folders and files), splits, max_rows, digests, errors;
grain_source: ArrayRecord / Parquet globs."""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import datasets

from jaxlab.data import grain_source
from jaxlab.data import hf_source

datasets.disable_progress_bars()

QA = {"question": [f"what is {i} plus 1?" for i in range(12)],
      "answer": [f"{i + 1}" for i in range(12)]}

README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*.parquet
  - split: test
    path: main/test-*.parquet
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*.parquet
---
# a GSM8K-shaped card
"""


def write_array_record(path, rows):
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  w = array_record_module.ArrayRecordWriter(path, "group_size:1")
  for r in rows:
    w.write(r if isinstance(r, bytes) else json.dumps(r).encode())
  w.close()


class HfSourceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root)
    self.cache = os.path.join(self.root, "cache")
    self.ds = datasets.Dataset.from_dict(QA)

  def _gsm_layout(self):
    d = os.path.join(self.root, "gsm")
    for sub in ("main", "socratic"):
      os.makedirs(os.path.join(d, sub))
    self.ds.to_parquet(f"{d}/main/train-00000-of-00001.parquet")
    self.ds.select(range(5)).to_parquet(f"{d}/main/test-00000-of-00001.parquet")
    self.ds.select(range(3)).to_parquet(
        f"{d}/socratic/train-00000-of-00001.parquet")
    with open(os.path.join(d, "README.md"), "w") as f:
      f.write(README)
    return d

  def test_readme_configs_select_subset_and_split(self):
    d = self._gsm_layout()
    test = hf_source.load_rows(d, subset="main", split="test",
                               cache_dir=self.cache)
    self.assertLen(test, 5)
    self.assertEqual(test[4], {"question": "what is 4 plus 1?", "answer": "5"})
    self.assertLen(hf_source.load_rows(d, subset="socratic",
                                       cache_dir=self.cache), 3)
    self.assertLen(hf_source.load_rows(d, subset="main", max_rows=7,
                                       cache_dir=self.cache), 7)
    self.assertEqual(
        [os.path.basename(f) for f in hf_source.data_files(d, "main", "test")],
        ["test-00000-of-00001.parquet"])

  def test_subset_folder_and_subset_file_without_configs(self):
    d = os.path.join(self.root, "tofu")
    os.makedirs(os.path.join(d, "forget01"))
    self.ds.to_json(os.path.join(d, "forget10.json"))
    self.ds.select(range(2)).to_json(
        os.path.join(d, "forget01", "train.jsonl"))
    self.assertLen(hf_source.load_rows(d, subset="forget10",
                                       cache_dir=self.cache), 12)
    self.assertLen(hf_source.load_rows(d, subset="forget01",
                                       cache_dir=self.cache), 2)
    with self.assertRaisesRegex(ValueError, "folders: forget01"):
      hf_source.load_rows(d, subset="retain90", cache_dir=self.cache)

  def test_subset_file_under_data_is_the_split_asked_for(self):
    # LongBench's data.zip: data/<task>.jsonl, the `test` split of its
    # loading script (THUDM/LongBench LongBench.py).
    d = os.path.join(self.root, "longbench")
    os.makedirs(os.path.join(d, "data"))
    self.ds.to_json(os.path.join(d, "data", "qasper.jsonl"))
    self.ds.select(range(3)).to_json(os.path.join(d, "data", "trec.jsonl"))
    test = hf_source.load_rows(d, subset="qasper", split="test",
                               cache_dir=self.cache)
    self.assertEqual(test.to_list(), self.ds.to_list())
    self.assertLen(hf_source.load_rows(d, subset="trec", split="test",
                                       cache_dir=self.cache), 3)
    self.assertEqual(
        [os.path.relpath(f, d) for f in hf_source.data_files(d, "trec",
                                                             "test")],
        [os.path.join("data", "trec.jsonl")])
    self.assertLen(hf_source.digest(d, "trec", ("test",)), 64)
    self.assertNotEqual(hf_source.digest(d, "trec", ("test",)),
                        hf_source.digest(d, "qasper", ("test",)))

  def test_data_dir_splits_in_json_and_parquet_agree(self):
    rows = {}
    for kind in ("parquet", "json"):
      d = os.path.join(self.root, kind, "data")
      os.makedirs(d)
      getattr(self.ds, f"to_{kind}")(f"{d}/train-00000-of-00001.{kind}")
      getattr(self.ds.select(range(4)), f"to_{kind}")(
          f"{d}/validation-00000-of-00001.{kind}")
      rows[kind] = hf_source.load_rows(os.path.dirname(d), split="validation",
                                       cache_dir=self.cache)
    self.assertEqual(rows["parquet"].to_list(), rows["json"].to_list())
    self.assertLen(rows["json"], 4)

  def test_unknown_split_and_missing_path_name_what_exists(self):
    d = self._gsm_layout()
    with self.assertRaisesRegex(ValueError, r"no split 'validation'.*test"):
      hf_source.load_rows(d, subset="main", split="validation",
                          cache_dir=self.cache)
    with self.assertRaisesRegex(FileNotFoundError, "does not exist"):
      hf_source.load_rows(os.path.join(self.root, "nope", "x"))
    with self.assertRaisesRegex(ValueError, "needs data.path"):
      hf_source.load_rows("")

  def test_digest_is_content_and_split_specific(self):
    d = self._gsm_layout()
    a = hf_source.digest(d, "main", ("train",))
    self.assertEqual(a, hf_source.digest(d, "main", ("train",)))
    self.assertNotEqual(a, hf_source.digest(d, "main", ("test",)))
    copy = os.path.join(self.root, "copy")
    shutil.copytree(d, copy)  # another place, same bytes: same digest
    self.assertEqual(a, hf_source.digest(copy, "main", ("train",)))
    self.ds.select(range(11)).to_parquet(
        f"{copy}/main/train-00000-of-00001.parquet")
    self.assertNotEqual(a, hf_source.digest(copy, "main", ("train",)))


class GrainSourceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root)

  def test_array_record_json_and_text_records_across_shards(self):
    rows = [{"question": q, "answer": a}
            for q, a in zip(QA["question"], QA["answer"])]
    write_array_record(f"{self.root}/train-00000-of-00002.array_record",
                       rows[:5])
    write_array_record(f"{self.root}/train-00001-of-00002.array_record",
                       rows[5:])
    got = grain_source.load_rows(f"{self.root}/train-*.array_record")
    self.assertLen(got, 12)
    self.assertEqual([got[i] for i in range(12)], rows)
    self.assertLen(grain_source.load_rows(
        f"{self.root}/train-*.array_record", max_rows=4), 4)
    write_array_record(f"{self.root}/text.array_record",
                       ["plain text".encode()])
    self.assertEqual(grain_source.load_rows(
        f"{self.root}/text.array_record", text_key="body")[0],
                     {"body": "plain text"})

  def test_parquet_globs_and_errors(self):
    datasets.Dataset.from_dict(QA).to_parquet(f"{self.root}/a.parquet")
    got = grain_source.load_rows(f"{self.root}/*.parquet",
                                 cache_dir=f"{self.root}/cache")
    self.assertEqual(got[3], {"question": "what is 3 plus 1?", "answer": "4"})
    with self.assertRaisesRegex(FileNotFoundError, "matches no file"):
      grain_source.load_rows(f"{self.root}/*.array_record")
    write_array_record(f"{self.root}/b.array_record", [{"text": "x"}])
    with self.assertRaisesRegex(ValueError, "one kind per split"):
      grain_source.load_rows(f"{self.root}/a.parquet,{self.root}/b.array_record")


if __name__ == "__main__":
  absltest.main()
