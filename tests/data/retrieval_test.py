"""Synthetic universal-retrieval generator and the JSONL loader."""

import dataclasses
import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from PIL import Image

from jaxlab.data import retrieval_jsonl
from jaxlab.data.synthetic import retrieval as synth


class SyntheticTest(parameterized.TestCase):

  def test_deterministic_and_modalities(self):
    src = synth.SyntheticRetrieval(8, seed=3, num_negatives=4, image_size=16)
    a, b = src[5], src[5]
    self.assertEqual(a["scene"], b["scene"])
    np.testing.assert_array_equal(a["query"]["image"], b["query"]["image"])
    kinds = {}
    for i in range(4):
      ex = src[i]
      q, d = ex["query"], ex["positives"][0]
      kinds[ex["task"]] = (q["text"] is not None, q["image"] is not None,
                           d["text"] is not None, d["image"] is not None)
      self.assertLen(ex["negatives"], 4)
    self.assertEqual(kinds, {"t2t": (True, False, True, False),
                             "t2i": (True, False, False, True),
                             "i2t": (False, True, True, False),
                             "it2it": (True, True, True, True)})

  @parameterized.parameters((0.5, 4), (0.0, 4), (1.0, 6), (0.25, 8))
  def test_hard_negative_ratio(self, frac, n):
    rng = np.random.default_rng(0)
    ex = synth.make_example(rng, task="t2t", num_negatives=n,
                            hard_fraction=frac)
    scene = ex["scene"]
    diffs = [sum(getattr(scene, f.name) != getattr(s, f.name)
                 for f in dataclasses.fields(scene))
             for s in ex["negative_scenes"]]
    self.assertNotIn(0, diffs)
    # Hard negatives differ in exactly one attribute; random ones may too by
    # chance, so check a lower bound and that frac=1 gives all hard.
    self.assertGreaterEqual(sum(d == 1 for d in diffs), round(n * frac))
    if frac == 1.0:
      self.assertEqual(diffs, [1] * n)

  def test_drawing_places_shape_and_digit(self):
    rng = np.random.default_rng(0)
    scene = synth.Scene("square", "green", "8", "top-right")
    img = synth.draw(scene, 16, rng)
    self.assertEqual(img.shape, (16, 16, 3))
    np.testing.assert_allclose(img[4, 12], synth.COLOURS["green"])  # centre
    # Digit 8 (white) in the bottom-left quadrant, nothing else there.
    quad = img[8:, :8]
    white = np.all(quad == 1.0, axis=-1)
    self.assertEqual(int(white.sum()), 13)  # pixels of the 3x5 glyph "8"
    self.assertEqual(float(img[8:, 8:].sum()), 0.0)

  def test_eval_candidates(self):
    src = synth.SyntheticRetrieval(4, seed=1, num_negatives=9)
    ex, cands, labels = synth.eval_candidates(src, 2)
    self.assertLen(cands, 10)
    self.assertEqual(int(labels.sum()), 1)
    self.assertIs(cands[int(np.argmax(labels))], ex["positives"][0])

  def test_bad_task(self):
    with self.assertRaisesRegex(ValueError, "valid: t2t, t2i, i2t, it2it"):
      synth.SyntheticRetrieval(4, tasks=("v2v",))


class EmbeddingRetrievalTest(absltest.TestCase):

  def test_planted_relevance(self):
    src = synth.EmbeddingRetrieval(400, seed=2, embed_dim=16, num_negatives=4,
                                   hard_fraction=0.5, pos_noise=0.5,
                                   hard_noise=1.0)
    ex = src[3]
    np.testing.assert_array_equal(ex["docs"], src[3]["docs"])
    self.assertEqual(ex["docs"].shape, (5, 16))
    d2 = np.stack([np.sum((src[i]["docs"] - src[i]["query"]) ** 2, -1)
                   for i in range(len(src))]).mean(0)
    # E||noise||^2 = sigma^2 * dim; random negatives: 2 * dim.
    np.testing.assert_allclose(d2, [0.25 * 16, 16, 16, 32, 32], rtol=0.1)


class JsonlTest(absltest.TestCase):

  def _write(self, rows):
    d = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, d, ignore_errors=True)
    img = (np.arange(4 * 4 * 3).reshape(4, 4, 3) * 5).astype(np.uint8)
    Image.fromarray(img).save(os.path.join(d, "a.png"))
    path = os.path.join(d, "data.jsonl")
    with open(path, "w") as f:
      for r in rows:
        f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path, img

  def test_loads_with_grain(self):
    path, img = self._write([
        {"query": "a cat", "positives": [{"image": "a.png", "text": "cat"}],
         "negatives": ["a dog", {"text": "a car"}]},
        {"query": {"image": "a.png"}, "positives": ["pic"],
         "instruction": "caption it"},
    ])
    ds = retrieval_jsonl.retrieval_dataset(path, image_size=4)
    self.assertLen(ds, 2)
    row = ds[0]
    self.assertEqual(row["query"], {"text": "a cat", "image": None})
    np.testing.assert_allclose(row["positives"][0]["image"], img / 255.0,
                               atol=1e-6)
    self.assertEqual([n["text"] for n in row["negatives"]], ["a dog", "a car"])
    self.assertEqual(ds[1]["instruction"], "caption it")
    self.assertEqual(ds[1]["negatives"], [])
    # Row 1 has no negatives: topped up from the other row's positives.
    rows = [ds[0], ds[1]]
    _, _, docs = retrieval_jsonl.sample_group(rows[1], 1,
                                              np.random.default_rng(0), rows)
    self.assertEqual(docs[0]["text"], "pic")
    self.assertEqual(docs[1]["text"], "cat")

  def test_row_without_positives_names_line(self):
    path, _ = self._write([{"query": "q", "positives": ["p"]},
                           {"query": "q", "positives": []}])
    with self.assertRaisesRegex(ValueError, r"data\.jsonl:2: row has no "
                                "positives"):
      retrieval_jsonl.read_rows(path)
    path, _ = self._write([{"query": "q", "negatives": ["n"]}])
    with self.assertRaisesRegex(ValueError, r":1: row has no positives"):
      retrieval_jsonl.read_rows(path)

  def test_unreadable_image_names_line(self):
    path, _ = self._write([{"query": "q", "positives": ["p"]}, "",
                           {"query": "q", "positives": [{"image": "nope.png"}]}])
    with self.assertRaisesRegex(FileNotFoundError,
                                r":3 positives\[0\]: image path 'nope.png'"):
      retrieval_jsonl.read_rows(path)

  def test_corrupt_image_and_bad_json_name_line(self):
    path, _ = self._write([{"query": {"image": "bad.png"}, "positives": ["p"]}])
    with open(os.path.join(os.path.dirname(path), "bad.png"), "w") as f:
      f.write("not a png")
    ds = retrieval_jsonl.retrieval_dataset(path)
    with self.assertRaisesRegex(ValueError, r"data\.jsonl:1: cannot read"):
      ds[0]
    path, _ = self._write(['{"query": "q", "positives": ["p"]}', "{oops"])
    with self.assertRaisesRegex(ValueError, r":2: invalid JSON"):
      retrieval_jsonl.read_rows(path)
    with self.assertRaisesRegex(FileNotFoundError, "not found"):
      retrieval_jsonl.read_rows(path + ".missing")


if __name__ == "__main__":
  absltest.main()
