"""`frequency_entropy:paper,short` probes WikiText-103 as released.

A random transformers Llama checkpoint with a tiny BPE tokenizer beside it,
and a WikiText-103-layout copy written here (Salesforce/wikitext on the Hub,
tree main/wikitext-103-raw-v1: `train-0000{0,1}-of-00002.parquet` and
`test-00000-of-00001.parquet`, the one column `text`, one line of an
article per row with blank rows between paragraphs). The probe windows are
cut from the train rows and the held-out windows from the test rows, in
order, and `results.json` counts the rows read.
"""

import json
import os
import shutil
import tempfile

import datasets
import numpy as np
from absl.testing import absltest

from jaxlab.configs import frequency_entropy as fe_config
from jaxlab.data import prose
from jaxlab.experiments import frequency_entropy as fe_exp
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures

LINE = (" The {w} river flows north through the valley , and the town of "
        "{w} stands on its banks . It was founded in {y} . \n")
WORDS = ("Avon", "Tay", "Dee", "Wye", "Usk", "Exe", "Cam", "Ure", "Aire",
         "Nene", "Tees", "Wear")


def _rows(start: int, n: int) -> list[str]:
  out = []
  for i in range(start, start + n):
    out += ["", f" = {WORDS[i % 12]} = \n", "",
            LINE.format(w=WORDS[i % 12], y=1100 + 7 * i)]
  return out


class FrequencyEntropyWikitextTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=400,
                                     hidden_size=32, num_layers=2,
                                     init_std=0.2,
                                     max_position_embeddings=256)
    cls.data = os.path.join(cls.root, "wikitext")
    d = os.path.join(cls.data, "wikitext-103-raw-v1")
    os.makedirs(d)
    cls.train = _rows(0, 6) + _rows(6, 6)
    cls.test = _rows(20, 6)
    datasets.Dataset.from_dict({"text": cls.train[:24]}).to_parquet(
        os.path.join(d, "train-00000-of-00002.parquet"))
    datasets.Dataset.from_dict({"text": cls.train[24:]}).to_parquet(
        os.path.join(d, "train-00001-of-00002.parquet"))
    datasets.Dataset.from_dict({"text": cls.test}).to_parquet(
        os.path.join(d, "test-00000-of-00001.parquet"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _config(self):
    c = fe_config.get_config("paper,short")
    c.init_from = self.ckpt
    c.data.path = self.data
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.fe.update(probe_len=32, eval_len=16, frame=16, hop=8, num_probe_seqs=2,
                num_eval_seqs=3, alphas=(0.1,), batch_size=3)
    for t in c.downstream.tasks.values():  # frequency_entropy_downstream_test
      t.path = ""
    return c

  def test_probe_and_eval_windows_come_from_the_splits(self):
    c = self._config()
    self.assertEqual((c.data.source, c.data.subset, c.data.split,
                      c.data.eval_split), ("hf", "wikitext-103-raw-v1",
                                           "train", "test"))
    tok = pretrained.tokenizer(self.ckpt)
    probe, ids, rows = fe_exp.probe_texts(c, tok)
    self.assertLessEqual(rows["train"], 8)  # short: at most 8 rows
    self.assertLessEqual(rows["test"], 8)
    np.testing.assert_array_equal(probe, prose.token_windows(
        tok, self.train[:rows["train"]], 32, stream=True, max_windows=2))
    np.testing.assert_array_equal(ids, prose.token_windows(
        tok, self.test[:rows["test"]], 16, stream=True, max_windows=3))
    self.assertEqual((probe.shape, ids.shape), ((2, 32), (3, 16)))
    # The probe starts with the first train row's text.
    self.assertEqual(list(probe[0, :4]),
                     tok.encode("\n\n".join(self.train[:2]))[:4])

  def test_run_records_rows_read(self):
    c = self._config()
    work = os.path.join(self.root, "run")
    out = fe_exp.run(c, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    _, _, rows = fe_exp.probe_texts(c, pretrained.tokenizer(self.ckpt))
    self.assertEqual(res["data"]["rows"], rows)
    self.assertEqual((res["data"]["source"], res["data"]["subset"]),
                     ("hf", "wikitext-103-raw-v1"))
    self.assertEqual(tuple(out["probe_shape"]), (2, 32))
    self.assertEqual(tuple(out["eval_shape"]), (3, 16))
    self.assertTrue(np.isfinite(out["baseline_perplexity"]))

  def test_one_split_keeps_held_out_after_probe(self):
    c = self._config()
    c.data.eval_split = ""
    c.data.max_rows = 0
    tok = pretrained.tokenizer(self.ckpt)
    probe, ids, rows = fe_exp.probe_texts(c, tok)
    stream = prose.token_windows(tok, self.train[:rows["train"]], 32,
                                 stream=True).reshape(-1)
    np.testing.assert_array_equal(probe.reshape(-1), stream[:64])
    np.testing.assert_array_equal(ids.reshape(-1), stream[64:64 + 48])


if __name__ == "__main__":
  absltest.main()
