"""ViT / DeiT classifiers saved by transformers load through `io.hf.load`.

A tiny random `ViTForImageClassification`, `DeiTForImageClassification`
and `DeiTForImageClassificationWithTeacher` (transformers + CPU torch,
`save_pretrained`) load as `ViTClassifier`, and `model(pixel_values=x)`
(`[B, 3, H, W]`) equals transformers' logits within 2^8 eps scale; the
pixel values come from the HF image processor (PIL backend) on real-sized
images, as the experiment feeds them. Also: a round trip through
`save_vit`, the same weights placed on 8 fake devices, and the errors.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from jaxlab.data import vision_processor as vp
from jaxlab.io import hf
from jaxlab.io.hf import vit as hf_vit
from jaxlab.models import vit_classifier as vc
from jaxlab.testing import hf_fixtures

EPS = float(np.finfo(np.float32).eps)


def _hf_logits(model, pixel_values):
  import torch  # pylint: disable=g-import-not-at-top
  with torch.no_grad():
    return model(pixel_values=torch.from_numpy(pixel_values)).logits.numpy()


class HFViTTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._cleanup = hf_fixtures.inductor_cleanup()

  @classmethod
  def tearDownClass(cls):
    cls._cleanup()
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
    rng = np.random.default_rng(0)
    # Four images of other sizes than the model's, through DeiT's
    # processor (resize 20, crop 16, ImageNet mean / std).
    self.images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                   for h, w in ((23, 31), (16, 16), (40, 18), (21, 21))]
    proc = vp.ClassifierProcessor(size=20, crop_size=16)
    self.x = proc(self.images)

  @parameterized.parameters("vit", "deit", "deit_teacher")
  def test_logits_equal_transformers(self, arch):
    path, ref = hf_fixtures.make_vit_checkpoint(
        os.path.join(self.root, arch), arch, return_model=True)
    model, cfg = hf.load(path)
    self.assertIsInstance(model, vc.ViTClassifier)
    self.assertEqual((cfg.dim, cfg.num_layers, cfg.num_heads, cfg.mlp_dim,
                      cfg.num_classes, cfg.norm_eps), (32, 2, 2, 64, 10,
                                                       1e-12))
    self.assertEqual(cfg.distillation_token, arch != "vit")
    self.assertEqual(cfg.num_tokens, 16 + 1 + (arch != "vit"))
    self.assertEqual(self.x.shape, (4, 3, 16, 16))
    got = np.asarray(model(pixel_values=self.x))
    want = _hf_logits(ref, self.x)
    self.assertGreater(np.abs(want).max(), 1.0)
    np.testing.assert_allclose(
        got, want, rtol=0, atol=2 ** 8 * EPS * np.abs(want).max())
    # The parameter count of the config is the module's and transformers'.
    n_hf = sum(p.numel() for p in ref.parameters())
    self.assertEqual(cfg.num_params(), vc.count_params(model))
    self.assertEqual(cfg.num_params(), n_hf)

  def test_save_round_trip_and_transformers_reads_it(self):
    import transformers  # pylint: disable=g-import-not-at-top
    path = hf_fixtures.make_vit_checkpoint(os.path.join(self.root, "a"),
                                           "deit_teacher", seed=3)
    model, cfg = hf.load(path)
    out = hf.save(model, cfg, os.path.join(self.root, "b"))
    again, _ = hf.load(out)
    np.testing.assert_array_equal(np.asarray(again(pixel_values=self.x)),
                                  np.asarray(model(pixel_values=self.x)))
    ref = transformers.AutoModelForImageClassification.from_pretrained(
        out).eval()
    np.testing.assert_allclose(
        np.asarray(model(pixel_values=self.x)), _hf_logits(ref, self.x),
        rtol=0, atol=2 ** 8 * EPS * 10)

  def test_pretrained_door(self):
    from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
    pre = {"image_processor_type": "ViTImageProcessor", "size": 16}
    path = hf_fixtures.make_vit_checkpoint(os.path.join(self.root, "p"),
                                           "vit", preprocessor=pre)
    model, cfg = pretrained.load(path)
    self.assertIsInstance(model, vc.ViTClassifier)
    self.assertEqual(pretrained.load_config(path), cfg)
    proc = pretrained.image_processor(path)
    self.assertEqual((proc.size, proc.resample, proc.do_center_crop,
                      proc.image_mean), ({"height": 16, "width": 16}, 2,
                                         False, (0.5, 0.5, 0.5)))

  def test_sharded_load_equals_unsharded(self):
    from jaxlab import parallel  # pylint: disable=g-import-not-at-top
    import ml_collections  # pylint: disable=g-import-not-at-top
    path = hf_fixtures.make_vit_checkpoint(os.path.join(self.root, "v"),
                                           "vit")
    mesh = parallel.make_mesh(ml_collections.ConfigDict(
        dict(data=1, fsdp=4, tensor=2)))
    model, _ = hf.load(path)
    sharded, _ = hf.load(path, mesh=mesh, rules=parallel.DEFAULT_RULES)
    self.assertEqual(len(jax.devices()), 8)
    # fc1 `[d, m]` = (embed, mlp): split 4 x 2 over fsdp x tensor.
    w1 = sharded.blocks[0].mlp.w1_dm[...]
    self.assertEqual(w1.sharding.shard_shape(w1.shape), (8, 32))
    np.testing.assert_allclose(np.asarray(sharded(pixel_values=self.x)),
                               np.asarray(model(pixel_values=self.x)),
                               rtol=0, atol=1e-5)

  def test_errors(self):
    path = hf_fixtures.make_vit_checkpoint(os.path.join(self.root, "e"),
                                           "vit")
    with open(os.path.join(path, "config.json")) as fh:
      c = json.load(fh)
    c["hidden_act"] = "relu"
    with open(os.path.join(path, "config.json"), "w") as fh:
      json.dump(c, fh)
    with self.assertRaisesRegex(ValueError, "hidden_act='relu'"):
      hf.load(path)
    with self.assertRaisesRegex(ValueError, "float32 only"):
      hf_vit.load_vit(path, dtype="bfloat16")
    with self.assertRaisesRegex(ValueError, "exactly one"):
      vc.ViTClassifier(vc.ViTClassifierConfig(), rngs=__import__(
          "flax").nnx.Rngs(0))()


if __name__ == "__main__":
  absltest.main()
