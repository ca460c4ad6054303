"""ViT / DeiT preprocessing == transformers' PIL-backend image processors.

`vision_processor.ClassifierProcessor.from_hf(preprocessor_config.json)`
gives the `pixel_values` of `ViTImageProcessorPil` / `DeiTImageProcessorPil`
(resize with the config's PIL filter, centre crop, rescale, normalise)
exactly, on images of several sizes and modes; the Hub's legacy configs
(`size: 256`, `crop_size: 224`) read as squares, as transformers reads
them. (transformers' default `ViTImageProcessor` is its torchvision
backend, not installed here; the PIL backend is the reference.)
"""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.data import vision_processor as vp

try:  # reference implementation
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from transformers.models.deit import image_processing_pil_deit as deit_ip  # pylint: disable=g-import-not-at-top
  from transformers.models.vit import image_processing_pil_vit as vit_ip  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover
  deit_ip = vit_ip = None

# preprocessor_config.json of facebook/deit-base-patch16-224 and
# google/vit-base-patch16-224 (the Hub's files; legacy int sizes), cut to
# small sizes so the test is fast.
DEIT = {"crop_size": 24, "do_center_crop": True, "do_normalize": True,
        "do_resize": True, "feature_extractor_type": "DeiTFeatureExtractor",
        "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225], "resample": 3, "size": 28}
VIT = {"do_normalize": True, "do_resize": True,
       "feature_extractor_type": "ViTFeatureExtractor",
       "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
       "resample": 2, "size": 24}


def _images():
  rng = np.random.default_rng(0)
  arrays = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            for h, w in ((37, 53), (24, 24), (80, 31), (19, 19))]
  gray = Image.fromarray(rng.integers(0, 256, (30, 41), dtype=np.uint8))
  return arrays + [Image.fromarray(arrays[0]), gray.convert("RGB")]


@absltest.skipIf(deit_ip is None, "transformers is not installed")
class ClassifierProcessorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("deit", DEIT, "DeiTImageProcessorPil"),
      ("vit", VIT, "ViTImageProcessorPil"),
      ("deit_shortest_edge", {**DEIT, "size": {"shortest_edge": 28}},
       "DeiTImageProcessorPil"),
      ("crop_larger_than_image", {**DEIT, "size": 20, "crop_size": 22},
       "DeiTImageProcessorPil"))
  def test_equals_transformers(self, pre, cls_name):
    module = deit_ip if cls_name.startswith("DeiT") else vit_ip
    kw = {k: v for k, v in pre.items() if k != "feature_extractor_type"}
    for k in ("size", "crop_size"):
      if isinstance(kw.get(k), int):
        kw[k] = {"height": kw[k], "width": kw[k]}
    ref = getattr(module, cls_name)(**kw)
    proc = vp.ClassifierProcessor.from_hf(pre)
    for image in _images():
      want = np.asarray(ref([image], return_tensors="np")["pixel_values"])
      got = proc([image])
      self.assertEqual(got.dtype, np.float32)
      np.testing.assert_array_equal(got, want)

  def test_vit_defaults_and_sizes(self):
    proc = vp.ClassifierProcessor.from_hf(
        {"image_processor_type": "ViTImageProcessor"})
    self.assertEqual((proc.size, proc.resample, proc.do_center_crop,
                      proc.image_mean), ({"height": 224, "width": 224}, 2,
                                         False, (0.5, 0.5, 0.5)))
    deit = vp.ClassifierProcessor()
    self.assertEqual(deit.output_size(300, 400), (256, 256))
    short = vp.ClassifierProcessor(size={"shortest_edge": 256})
    self.assertEqual(short.output_size(300, 400), (256, 341))
    self.assertEqual(short.output_size(400, 300), (341, 256))
    x = np.arange(2 * 5 * 6).reshape(2, 5, 6)
    np.testing.assert_array_equal(vp.center_crop(x, 3, 2), x[:, 1:4, 2:4])

  def test_bad_size_is_one_message(self):
    with self.assertRaisesRegex(ValueError, "size="):
      vp.ClassifierProcessor(size={"longest_edge": 3})


if __name__ == "__main__":
  absltest.main()
