"""LibriSpeech readers: TFDS rows (`tfds.testing.mock_data`), the released
FLAC directories, WAV directories; CTC labels; StableToken's noisy copies
of real audio."""

import os
import shutil
import tempfile

from absl.testing import absltest
import ml_collections
import numpy as np

from jaxlab.data import audio
from jaxlab.data import librispeech
from jaxlab.testing import speech_fixtures


def _cfg(**kw):
  d = dict(source="tfds", path="", tfds_name="", data_dir="", split="train",
           eval_split="", max_rows=0, subset="", cache_dir="")
  d.update(kw)
  return ml_collections.ConfigDict(d)


def _tone(n, f0, seed):
  rng = np.random.default_rng(seed)
  t = np.arange(n) / 16000
  return (0.3 * np.sin(2 * np.pi * f0 * t)
          + 0.01 * rng.standard_normal(n)).astype(np.float32)


class LibriSpeechTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root)

  def test_tfds_rows(self):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    cfg = _cfg(path="librispeech", data_dir=self.root, split="test_clean",
               max_rows=3)
    with speech_fixtures.mock_librispeech(num_examples=5):
      utts = librispeech.read_utterances(cfg)
      src = tfds.data_source("librispeech", split="test_clean",
                             download=False)
      want = [src[i] for i in range(3)]
    self.assertLen(utts, 3)
    for u, row in zip(utts, want):
      np.testing.assert_array_equal(
          u["wave"], row["speech"].astype(np.float32) / 32768.0)
      self.assertEqual(u["text"], row["text"])
      self.assertEqual(u["id"], row["id"])
      self.assertEqual(u["speaker_id"], int(row["speaker_id"]))

  def test_released_directory(self):
    utts = [dict(speaker_id=19, chapter_id=198, utt=1, text="a cat",
                 wave=_tone(4000, 200, 0)),
            dict(speaker_id=19, chapter_id=198, utt=0, text="the dog's",
                 wave=_tone(3000, 300, 1)),
            dict(speaker_id=8, chapter_id=5, utt=3, text="hi",
                 wave=_tone(2000, 400, 2))]
    split = os.path.join(self.root, "LibriSpeech", "test-clean")
    speech_fixtures.write_librispeech_dir(split, utts)
    cfg = _cfg(source="audio", path=os.path.join(self.root, "LibriSpeech"),
               split="test-clean")
    got = librispeech.read_utterances(cfg)
    # Transcript order within a chapter, chapters by sorted path.
    self.assertEqual([u["id"] for u in got],
                     ["19-198-0001", "19-198-0000", "8-5-0003"])
    self.assertEqual([u["text"] for u in got], ["A CAT", "THE DOG'S", "HI"])
    self.assertEqual((got[2]["speaker_id"], got[2]["chapter_id"]), (8, 5))
    # 16-bit PCM round trip: within half a quantisation step.
    np.testing.assert_allclose(got[0]["wave"], utts[0]["wave"], rtol=0,
                               atol=0.5 / 32768 + 1e-7)
    self.assertLen(librispeech.read_utterances(cfg, max_rows=2), 2)

  def test_wav_directory_and_errors(self):
    audio.write_wav(os.path.join(self.root, "b.wav"), _tone(1600, 300, 0))
    audio.write_wav(os.path.join(self.root, "a.wav"), _tone(800, 300, 1))
    with open(os.path.join(self.root, "a.txt"), "w") as f:
      f.write("hello world\n")
    got = librispeech.read_utterances(_cfg(source="audio", path=self.root))
    self.assertEqual([(u["id"], u["text"], u["wave"].size) for u in got],
                     [("a", "hello world", 800), ("b", "", 1600)])
    with self.assertRaisesRegex(ValueError, "data.source='nope'"):
      librispeech.read_utterances(_cfg(source="nope"))
    with self.assertRaisesRegex(FileNotFoundError, "not a directory"):
      librispeech.read_utterances(_cfg(source="audio", path="/no/such"))

  def test_hub_rows(self):
    # openslr/librispeech_asr rows: `audio` as decoded {array,
    # sampling_rate} or as stored {bytes, path}; other rates resample.
    import io  # pylint: disable=g-import-not-at-top
    import soundfile  # pylint: disable=g-import-not-at-top
    w = _tone(1600, 300, 0)
    buf = io.BytesIO()
    soundfile.write(buf, w, 16000, format="FLAC", subtype="PCM_16")
    row = {"file": "x.flac", "audio": {"bytes": buf.getvalue(), "path": None},
           "text": "HI THERE", "speaker_id": 3, "chapter_id": 4,
           "id": "3-4-0000"}
    u = librispeech.utterance_of_row(row)
    self.assertEqual((u["id"], u["text"], u["speaker_id"]),
                     ("3-4-0000", "HI THERE", 3))
    np.testing.assert_allclose(u["wave"], w, atol=0.5 / 32768 + 1e-7)
    row["audio"] = {"array": np.repeat(w, 2), "sampling_rate": 32000}
    self.assertEqual(librispeech.utterance_of_row(row)["wave"].size, 1600)
    with self.assertRaisesRegex(ValueError, "no 'speech' .TFDS. or 'audio'"):
      librispeech.utterance_of_row({"text": "a"})

  def test_hub_copy_through_read_split(self):
    # A local copy laid out as on the Hub (data/<split>-*.parquet) whose
    # `audio` column is a datasets.Audio feature (FLAC bytes).
    import datasets  # pylint: disable=g-import-not-at-top
    import io  # pylint: disable=g-import-not-at-top
    import soundfile  # pylint: disable=g-import-not-at-top
    waves = [_tone(800 * (i + 1), 300, i) for i in range(3)]
    blobs = []
    for w in waves:
      buf = io.BytesIO()
      soundfile.write(buf, w, 16000, format="FLAC", subtype="PCM_16")
      blobs.append({"bytes": buf.getvalue(), "path": None})
    d = os.path.join(self.root, "ls", "data")
    os.makedirs(d)
    datasets.Dataset.from_dict({
        "file": ["a.flac", "b.flac", "c.flac"], "audio": blobs,
        "text": ["A", "B C", "D"], "speaker_id": [1, 1, 2],
        "chapter_id": [5, 5, 6], "id": ["1-5-0000", "1-5-0001", "2-6-0000"],
    }).cast_column("audio", datasets.Audio(sampling_rate=16000)).to_parquet(
        os.path.join(d, "test-00000-of-00001.parquet"))
    cfg = _cfg(source="hf", path=os.path.join(self.root, "ls"), split="test",
               max_rows=2, cache_dir=os.path.join(self.root, "cache"))
    got = librispeech.read_utterances(cfg)
    self.assertEqual([u["id"] for u in got], ["1-5-0000", "1-5-0001"])
    self.assertEqual(got[1]["text"], "B C")
    np.testing.assert_allclose(got[1]["wave"], waves[1],
                               atol=0.5 / 32768 + 1e-7)

  def test_char_labels(self):
    labels, mask = librispeech.char_labels(["It's A", "b!"])
    # blank 0, " " 1, "'" 2, a 3, ..., i 11, s 21, t 22
    np.testing.assert_array_equal(labels, [[11, 22, 2, 21, 1, 3],
                                           [4, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(mask.sum(1), [6, 1])
    self.assertEqual(librispeech.labels_to_text([11, 22, 2, 21, 0, 1, 3]),
                     "it's a")
    self.assertEqual(librispeech.normalize_transcript(" HELLO,  World "),
                     "hello world")

  def test_noise_conditions_on_real_audio(self):
    utts = [dict(text="a b", wave=_tone(6000, 200 + 50 * i, i))
            for i in range(3)]
    d = librispeech.tokenizer_data(
        utts[:2], utts[2:], n_mels=16, num_samples=8000, noisy_copies=2,
        seed=0)
    tr, held = d["train"], d["held"]
    self.assertEqual(tr["features"].shape, (2, 50, 16))
    self.assertEqual(tr["noisy"].shape, (2, 2, 50, 16))
    np.testing.assert_array_equal(tr["frame_lengths"], [38, 38])
    # Every evaluation setting but the clip (no clips given) is applied.
    self.assertEqual(sorted(held["noisy"]),
                     sorted(k for k in audio.EVAL_PERTURBATIONS
                            if k != "clip"))
    # The noisy copies are the perturbed waves' features: recompute one.
    rng = np.random.default_rng(0)
    w = utts[0]["wave"]
    c0 = audio.random_perturbation(w, rng)[0]  # copy 0 of wave 0: first
    want, _ = audio.whisper_features([c0], n_mels=16, num_samples=8000)
    np.testing.assert_allclose(tr["noisy"][0, 0], want[0], atol=1e-6)
    self.assertGreater(np.abs(held["noisy"]["gaussian"]
                              - held["features"]).max(), 1e-3)
    clips = [_tone(500, 1000, 9)]
    d = librispeech.tokenizer_data(utts[:1], utts[1:], n_mels=16,
                                   num_samples=8000, clips=clips)
    self.assertIn("clip", d["held"]["noisy"])


if __name__ == "__main__":
  absltest.main()
