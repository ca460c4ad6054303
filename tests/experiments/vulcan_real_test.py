"""Vulcan on a pretrained ViT / DeiT and ImageNet rows (the real run).

* `vulcan:paper,short` runs end to end through `python -m jaxlab.main`'s
  path (`get_config("paper,short")` + `main.run_experiment`) from a
  tiny random `DeiTForImageClassification` saved by transformers, on
  `imagenet2012` TFDS mock data (`tfds.testing.mock_data`: the catalog's
  features image / label / file_name; images of random sizes), and
  `results.json`'s `data.rows` counts the rows read of each split; the
  dense row's top-1 equals transformers' own argmax over the same
  preprocessed validation images of the target classes.
* The grain path reads an image-folder copy (class-name folders, sorted
  names = label ids) and the run's dense top-1 equals the one computed
  here by hand.
* The paper preset's train step (ViT-B/16 at 224, batch 256) compiles for
  a TPU topology from this CPU (skipped without libtpu).
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from jaxlab.configs import vulcan as vulcan_config
from jaxlab.data import image_rows
from jaxlab.data import vision_processor as vp
from jaxlab.experiments import vulcan as vulcan_exp
from jaxlab.testing import hf_fixtures

# The tiny checkpoint: 16 px images, patch 4, 1000 ImageNet classes.
PRE = {"image_processor_type": "DeiTImageProcessor", "size": 20,
       "crop_size": 16, "resample": 3, "do_center_crop": True,
       "image_mean": [0.485, 0.456, 0.406],
       "image_std": [0.229, 0.224, 0.225]}


def _short_config(init_from, **data):
  cfg = vulcan_config.get_config("paper,short")
  cfg.init_from = init_from
  cfg.data.update(**data)
  cfg.posttrain.batch_size = 4
  cfg.score_batches = 1
  cfg.rates = (0.6,)
  return cfg


class VulcanRealTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._cleanup = hf_fixtures.inductor_cleanup()
    cls.root = tempfile.mkdtemp()
    _, cls.ref = hf_fixtures.make_vit_checkpoint(
        os.path.join(cls.root, "deit"), "deit", image_size=16, patch_size=4,
        hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
        num_labels=1000, preprocessor=PRE, return_model=True, init_std=0.1)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    cls._cleanup()
    super().tearDownClass()

  def _biased(self, name, cls):
    """The tiny DeiT with class `cls`'s logit raised by 50, saved to
    `name`: it predicts `cls` everywhere, so top-1 on the target classes
    is `cls`'s share of their rows (not a trivial 0)."""
    import torch  # pylint: disable=g-import-not-at-top
    with torch.no_grad():
      self.ref.classifier.bias[cls] += 50.0
    path = os.path.join(self.root, name)
    self.ref.save_pretrained(path)
    with torch.no_grad():
      self.ref.classifier.bias[cls] -= 50.0
    with open(os.path.join(path, "preprocessor_config.json"), "w") as fh:
      json.dump(PRE, fh)
    return path

  def _ref_top1(self, rows, classes, ckpt):
    """transformers' argmax over the processor's pixel values."""
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    ref = transformers.DeiTForImageClassification.from_pretrained(
        ckpt).eval()
    proc = vp.ClassifierProcessor.from_hf(PRE)
    idx = image_rows.class_indices(rows, classes)
    x = np.stack([proc.image(image_rows.decode_image(rows[int(i)]["image"]))
                  for i in idx])
    y = np.asarray([int(rows[int(i)]["label"]) for i in idx])
    with torch.no_grad():
      logits = ref(pixel_values=torch.from_numpy(x)).logits.numpy()
    return float(np.mean(np.argmax(logits, -1) == y)), len(idx)

  def test_paper_short_on_tfds_mock_imagenet(self):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    data_dir = os.path.join(self.root, "tfds")
    os.makedirs(data_dir)
    # mock_data's own scratch dir goes under self.root (removed after).
    with mock.patch.object(tempfile, "tempdir", self.root), \
        tfds.testing.mock_data(num_examples=10,
                               policy=tfds.testing.MockPolicy.USE_CODE):
      cfg = _short_config("", data_dir=data_dir)
      self.assertEqual((cfg.data.source, cfg.data.tfds_name,
                        cfg.data.max_rows), ("tfds", "imagenet2012", 8))
      # Target classes: labels present in the first rows of both splits
      # (mock labels are random over the 1000 classes).
      train = image_rows.read(cfg.data, "train")
      val = image_rows.read(cfg.data, "validation")
      self.assertLen(train, 8)
      self.assertLen(val, 8)
      common = sorted(set(image_rows.labels(train)[:4])
                      | set(image_rows.labels(val)[:4]))
      cfg.target_classes = tuple(int(c) for c in common)
      cfg.init_from = self._biased("deit_tfds",
                                   int(image_rows.labels(val)[0]))
      want_acc, n_val = self._ref_top1(val, cfg.target_classes,
                                       cfg.init_from)
      self.assertGreater(want_acc, 0.0)
      workdir = os.path.join(self.root, "run_tfds")
      # What `python -m jaxlab.main --config=vulcan:paper,short` runs.
      from jaxlab import main  # pylint: disable=g-import-not-at-top
      main.run_experiment(cfg, workdir)
    with open(os.path.join(workdir, "results.json")) as fh:
      res = json.load(fh)
    self.assertEqual(res["data"]["rows"], {"train": 8, "validation": 8})
    self.assertEqual(res["data"]["source"], "tfds")
    self.assertEqual(res["init_from"]["spec"], cfg.init_from)
    tables = {t["id"]: t for t in res["tables"]}
    rows = {r["label"]: r for r in tables["accuracy"]["rows"]}
    self.assertEqual(set(rows), {"dense", "finetune", "Vulcan R=0.6",
                                 "Magnitude R=0.6", "Taylor R=0.6",
                                 "Generic R=0.6"})
    self.assertAlmostEqual(rows["dense"]["cells"]["acc"]["values"][0],
                           want_acc, places=6)
    self.assertEqual(res["extra"]["target_rows"]["validation"], n_val)
    self.assertLen(res["comparisons"], 3)   # Vulcan vs each baseline
    for label, row in rows.items():
      frac = row["cells"]["params_frac"]["values"][0]
      if label.endswith("R=0.6"):
        self.assertLess(frac, 1.0)

  def test_grain_image_folder(self):
    from PIL import Image  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(1)
    # ImageNet synset folders: sorted names are the label ids 0, 1, 2.
    synsets = ("n01440764", "n01443537", "n01484850")
    for split, n in (("train", 3), ("val", 2)):
      for s in synsets:
        os.makedirs(os.path.join(self.root, "folder", split, s))
        for j in range(n):
          h, w = rng.integers(14, 30, 2)
          Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                          ).save(os.path.join(self.root, "folder", split, s,
                                              f"{s}_{j}.JPEG"))
    train_dir = os.path.join(self.root, "folder", "train")
    val_dir = os.path.join(self.root, "folder", "val")
    cfg = _short_config(self._biased("deit_grain", 0), source="grain",
                        path=train_dir, eval_path=val_dir, max_rows=0)
    cfg.target_classes = (0, 2)
    cfg.methods = "vulcan"
    rows = image_rows.read(cfg.data, "validation")
    self.assertEqual(rows.classes, list(synsets))
    np.testing.assert_array_equal(image_rows.labels(rows),
                                  [0, 0, 1, 1, 2, 2])
    want_acc, n_val = self._ref_top1(rows, (0, 2), cfg.init_from)
    self.assertEqual((want_acc, n_val), (0.5, 4))
    workdir = os.path.join(self.root, "run_grain")
    vulcan_exp.run(cfg, workdir)
    with open(os.path.join(workdir, "results.json")) as fh:
      res = json.load(fh)
    self.assertEqual(res["data"]["rows"], {"train": 9, "validation": 6})
    acc = {r["label"]: r for r in res["tables"][0]["rows"]}
    self.assertAlmostEqual(acc["dense"]["cells"]["acc"]["values"][0],
                           want_acc, places=6)

  def test_errors(self):
    cfg = _short_config("")
    with self.assertRaisesRegex(ValueError, "needs config.init_from"):
      vulcan_exp.run(cfg, os.path.join(self.root, "err"))


if __name__ == "__main__":
  absltest.main()
