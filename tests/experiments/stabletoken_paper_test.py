"""`stabletoken:paper,short` end to end: a tiny random Whisper checkpoint
(transformers) as `init_from`, LibriSpeech as TFDS mock rows and as the
released FLAC directories; results.json's `data.rows` counts what was
read."""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

from jaxlab.configs import stabletoken as st_config
from jaxlab.experiments import stabletoken as st_exp
from jaxlab.testing import speech_fixtures


def _short_config(root, ckpt):
  cfg = st_config.get_config("paper,short")
  cfg.init_from = ckpt
  cfg.variants = ("full",)       # test-sized: one variant, batch 4
  cfg.train.batch_size = 4
  return cfg


class StableTokenPaperShortTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = speech_fixtures.make_whisper_checkpoint(
        os.path.join(cls.root, "whisper"))
    cfg = _short_config(cls.root, cls.ckpt)
    cfg.data.update(source="tfds", path="librispeech", data_dir=cls.root,
                    split="train_clean100", eval_split="test_clean")
    cls.cfg = cfg
    cls.workdir = os.path.join(cls.root, "work")
    with speech_fixtures.mock_librispeech(num_examples=10):
      cls.out = st_exp.run(cfg, cls.workdir)
    with open(os.path.join(cls.workdir, "results.json")) as f:
      cls.res = json.load(f)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_budget_is_short(self):
    self.assertEqual(self.cfg.data.max_rows, 8)
    self.assertEqual(self.cfg.train.steps, 2)
    self.assertEqual(tuple(self.cfg.seeds), (0,))

  def test_data_rows_count_what_was_read(self):
    d = self.res["data"]
    self.assertEqual((d["source"], d["path"]), ("tfds", "librispeech"))
    # 10 mock rows per split, `short` reads 8 of each.
    self.assertEqual(d["rows"], {"train_clean100": 8, "test_clean": 8})
    self.assertEqual(self.res["init_from"]["path"],
                     os.path.abspath(self.ckpt))

  def test_table_has_ued_and_wer(self):
    s = self.out["summary"]["full"]
    for k in ("ued_gaussian", "ued_pink", "ued_brown", "ued_bitcrush"):
      self.assertTrue(0 <= s[k][0] <= 100 * 50, (k, s[k]))
    self.assertNotIn("ued_clip", s)        # no noise clips given
    self.assertAlmostEqual(s["ued_avg"][0], np.mean(
        [s[f"ued_{k}"][0] for k in ("gaussian", "pink", "brown",
                                    "bitcrush")]))
    self.assertGreaterEqual(s["wer_clean"][0], 0.0)

  def test_released_directories(self):
    rng = np.random.default_rng(0)
    utts = [dict(speaker_id=19, chapter_id=198, utt=i, text=f"word {i}",
                 wave=(0.1 * rng.standard_normal(3200)).astype(np.float32))
            for i in range(6)]
    base = os.path.join(self.root, "LibriSpeech")
    speech_fixtures.write_librispeech_dir(os.path.join(base, "train-clean"),
                                          utts[:4])
    speech_fixtures.write_librispeech_dir(os.path.join(base, "test-clean"),
                                          utts[4:])
    cfg = _short_config(self.root, self.ckpt)
    cfg.data.update(source="audio", path=base, split="train-clean",
                    eval_split="test-clean")
    work = os.path.join(self.root, "work_dir")
    st_exp.run(cfg, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    self.assertEqual(res["data"]["rows"], {"train-clean": 4, "test-clean": 2})

  def test_not_whisper_is_a_clear_error(self):
    cfg = _short_config(self.root, "")
    cfg.data.update(source="audio", path=self.root)
    with self.assertRaisesRegex(ValueError, "needs config.init_from"):
      st_exp.run(cfg, os.path.join(self.root, "w2"))


if __name__ == "__main__":
  absltest.main()
