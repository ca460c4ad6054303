"""`jaxlab.data.image_rows`: ImageNet-style labelled images from every
source, each example equal to the image processor applied to the row's
image by hand.

* `tfds`: `imagenet2012` through `tfds.testing.mock_data` (the catalog's
  features: image uint8 `[H, W, 3]`, label, file_name);
* `hf`: a local copy laid out as a Hub Parquet dataset
  (`data/<split>-00000-of-00001.parquet`, columns `image` (an `Image`
  feature: {bytes, path}) and `label` (ClassLabel), as ILSVRC/imagenet-1k's
  converted Parquet files store them);
* `grain`: the same Parquet files by glob, ArrayRecord JSON rows naming
  image files, and an image folder (sorted class folders = label ids).
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import ml_collections
import numpy as np
from PIL import Image

from jaxlab.data import image_rows
from jaxlab.data import vision_processor as vp

PROC = vp.ClassifierProcessor(size=12, crop_size=8)


def _cfg(**kw):
  base = dict(source="", path="", subset="", split="train",
              eval_split="validation", eval_path="", max_rows=0,
              tfds_name="", data_dir="", cache_dir="", text_key="text")
  base.update(kw)
  return ml_collections.ConfigDict(base)


class ImageRowsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
    rng = np.random.default_rng(0)
    self.arrays = [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)
                   for h, w in rng.integers(9, 30, (6, 2))]
    self.labels = [3, 1, 3, 7, 1, 0]
    self.files = []
    for i, a in enumerate(self.arrays):
      f = os.path.join(self.root, f"img{i}.png")   # lossless
      Image.fromarray(a).save(f)
      self.files.append(f)

  def _check(self, rows, n=6):
    self.assertLen(rows, n)
    np.testing.assert_array_equal(image_rows.labels(rows), self.labels[:n])
    idx = image_rows.class_indices(rows, (1, 3))
    np.testing.assert_array_equal(idx, [i for i in range(n)
                                        if self.labels[i] in (1, 3)])
    x, y = image_rows.arrays(rows, idx, PROC)
    want = np.stack([np.moveaxis(PROC.image(self.arrays[i]), 0, -1)
                     for i in idx])
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(y, [self.labels[i] for i in idx])
    ds = image_rows.examples(rows, idx, PROC)
    np.testing.assert_array_equal(ds[1]["images"], want[1])

  def _parquet(self):
    import datasets  # pylint: disable=g-import-not-at-top
    feats = datasets.Features({
        "image": datasets.Image(),
        "label": datasets.ClassLabel(num_classes=1000)})
    d = os.path.join(self.root, "hub", "data")
    os.makedirs(d)
    datasets.Dataset.from_dict(
        {"image": self.files, "label": self.labels}, features=feats
    ).to_parquet(os.path.join(d, "train-00000-of-00001.parquet"))
    return os.path.dirname(d)

  def test_hf_local_copy(self):
    path = self._parquet()
    cfg = _cfg(source="hf", path=path,
               cache_dir=os.path.join(self.root, "cache"))
    self._check(image_rows.read(cfg, "train"))
    self.assertLen(image_rows.read(cfg, "train", max_rows=4), 4)

  def test_grain_parquet_glob(self):
    path = self._parquet()
    cfg = _cfg(source="grain", path=f"{path}/data/train-*.parquet",
               cache_dir=os.path.join(self.root, "cache"))
    self._check(image_rows.read(cfg, "train"))

  def test_grain_array_record_json_rows(self):
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
    f = os.path.join(self.root, "train.array_record")
    w = array_record_module.ArrayRecordWriter(f, "group_size:1")
    for file, label in zip(self.files, self.labels):
      w.write(json.dumps({"image": file, "label": label}).encode())
    w.close()
    self._check(image_rows.read(_cfg(source="grain", path=f), "train"))

  def test_grain_image_folder_and_max_rows(self):
    for i, (file, label) in enumerate(zip(self.files, self.labels)):
      d = os.path.join(self.root, "folder", f"class_{label:02d}")
      os.makedirs(d, exist_ok=True)
      shutil.copy(file, os.path.join(d, f"{i}.png"))
    rows = image_rows.read(_cfg(source="grain",
                                path=os.path.join(self.root, "folder")))
    # Sorted class folders: class_00, class_01, class_03, class_07.
    self.assertEqual(rows.classes, ["class_00", "class_01", "class_03",
                                    "class_07"])
    np.testing.assert_array_equal(image_rows.labels(rows),
                                  [0, 1, 1, 2, 2, 3])
    self.assertEqual(rows[0]["file_name"], os.path.join("class_00", "5.png"))
    head = image_rows.read(_cfg(source="grain", max_rows=3,
                                path=os.path.join(self.root, "folder")))
    np.testing.assert_array_equal(image_rows.labels(head), [0, 1, 1])

  def test_tfds_mock_imagenet(self):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    # mock_data's own scratch dir goes under self.root (removed after).
    with mock.patch.object(tempfile, "tempdir", self.root), \
        tfds.testing.mock_data(num_examples=5,
                               policy=tfds.testing.MockPolicy.USE_CODE):
      cfg = _cfg(source="tfds", tfds_name="imagenet2012",
                 data_dir=self.root, max_rows=4)
      rows = image_rows.read(cfg, "validation")
      self.assertLen(rows, 4)
      y = image_rows.labels(rows)
      self.assertTrue(np.all((0 <= y) & (y < 1000)))
      x, got_y = image_rows.arrays(rows, [0, 2], PROC)
      want = np.moveaxis(PROC.image(rows[2]["image"]), 0, -1)
      np.testing.assert_array_equal(x[1], want)
      np.testing.assert_array_equal(got_y, y[[0, 2]])

  def test_bad_rows_are_one_message(self):
    with self.assertRaisesRegex(ValueError, "needs `image` and `label`"):
      image_rows.labels([{"image": self.files[0]}])
    with self.assertRaisesRegex(ValueError, "no class sub-folders"):
      image_rows.ImageFolder(self.root)


if __name__ == "__main__":
  absltest.main()
