"""Qwen-VL preprocessing == transformers' Qwen2-VL image / video processors."""

import ast
import inspect
import os

from absl.testing import absltest
import numpy as np

from jaxlab.data import vision_processor as vp
from jaxlab.testing import hf_fixtures

torch = None
try:  # reference implementation (transformers' processors, CPU torch)
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import image_processing_backends  # pylint: disable=g-import-not-at-top
  from transformers.models.qwen2_vl import (  # pylint: disable=g-import-not-at-top
      image_processing_pil_qwen2_vl as ip)
except ImportError:  # pragma: no cover
  pass

# patch 4, merge 2: factor 8; images hold 256 .. 2304 pixels.
KW = dict(patch_size=4, merge_size=2, temporal_patch_size=2,
          min_pixels=16 * 16, max_pixels=48 * 48)


def _video_processor_functions():
  """`smart_resize` and `Qwen2VLVideoProcessor.patchify` from transformers'
  video processor source (the module itself imports torchvision, which is
  not installed): run alone."""
  src = os.path.join(os.path.dirname(inspect.getfile(ip)),
                     "video_processing_qwen2_vl.py")
  with open(src) as fh:
    tree = ast.parse(fh.read())
  fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)
         and n.name == "smart_resize"]
  fns += [n for c in tree.body if isinstance(c, ast.ClassDef)
          for n in c.body if isinstance(n, ast.FunctionDef)
          and n.name == "patchify"]
  import math  # pylint: disable=g-import-not-at-top
  scope = {"torch": torch, "math": math}
  exec(compile(ast.Module(fns, []), src, "exec"), scope)  # pylint: disable=exec-used
  return scope["smart_resize"], scope["patchify"]


@absltest.skipIf(torch is None, "needs torch + transformers")
class QwenVLProcessorTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hf_fixtures.inductor_cleanup()

  @classmethod
  def tearDownClass(cls):
    cls.cleanup()
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.rng = np.random.default_rng(0)
    self.ours = vp.QwenVLProcessor(**KW)

  def test_images_match_pil_processor(self):
    """Down- (100 x 60, 30 x 70: > max_pixels), up- (7 x 9: < min_pixels)
    and un-resized (16 x 24) images, channels last and first, RGBA, grey:
    bit-exact pixel_values and grids."""
    ref = ip.Qwen2VLImageProcessorPil(**KW)
    images = [self.rng.integers(0, 256, shape, dtype=np.uint8) for shape in
              [(100, 60, 3), (30, 70, 3), (7, 9, 3), (16, 24, 3),
               (3, 20, 12), (4, 20, 12), (13, 17, 1)]]
    for image in images:
      want = ref(images=[image], return_tensors="np")
      pv, grid = self.ours.images([image])
      np.testing.assert_array_equal(grid, want["image_grid_thw"])
      np.testing.assert_array_equal(pv, want["pixel_values"])
    # Resizing happened: 100 x 60 down to 56 x 32, 7 x 9 up to 16 x 24.
    self.assertEqual(self.ours.image_size(100, 60), (56, 32))
    self.assertEqual(self.ours.image_size(7, 9), (16, 24))
    # A batch concatenates in order.
    want = ref(images=images[:3], return_tensors="np")
    pv, grids = self.ours.images(images[:3])
    np.testing.assert_array_equal(grids, want["image_grid_thw"])
    np.testing.assert_array_equal(pv, want["pixel_values"])

  def test_pil_input(self):
    from PIL import Image  # pylint: disable=g-import-not-at-top
    ref = ip.Qwen2VLImageProcessorPil(**KW)
    rgba = Image.fromarray(self.rng.integers(0, 256, (21, 35, 4),
                                             dtype=np.uint8), "RGBA")
    want = ref(images=[rgba], return_tensors="np")
    pv, grid = self.ours.images([rgba])
    np.testing.assert_array_equal(grid, want["image_grid_thw"])
    np.testing.assert_array_equal(pv, want["pixel_values"])

  def test_video_matches_video_processor_steps(self):
    """A 3-frame clip at its smart_resize size (no resampling): the video
    processor's fused rescale + normalise (torch), its patchify (last frame
    repeated to 4), grid and second_per_grid_ts = T / fps."""
    vkw = dict(KW, video_min_pixels=8 * 8, video_max_pixels=48 * 48)
    ours = vp.QwenVLProcessor(**vkw)
    ref_resize, ref_patchify = _video_processor_functions()
    clip = self.rng.integers(0, 256, (3, 16, 24, 3), dtype=np.uint8)
    self.assertEqual(ref_resize(16, 24, 8, 64, 48 * 48), (16, 24))
    pv, grid, spg = ours.video(clip, fps=4.0)
    mean, std, _ = (image_processing_backends.TorchvisionBackend
                    ._fuse_mean_std_and_rescale_factor(
                        None, do_normalize=True,
                        image_mean=vp.OPENAI_CLIP_MEAN,
                        image_std=vp.OPENAI_CLIP_STD, do_rescale=True,
                        rescale_factor=1 / 255))
    x = torch.tensor(clip).permute(0, 3, 1, 2).to(torch.float32)
    x = x.sub_(mean[:, None, None]).div_(std[:, None, None])  # tvF.normalize
    want, gt, gh, gw = ref_patchify(None, x[None], 4, 2, 2)
    np.testing.assert_array_equal(grid, [[gt, gh, gw]])
    self.assertEqual((gt, gh, gw), (2, 4, 6))
    np.testing.assert_array_equal(pv, want[0].numpy())
    np.testing.assert_array_equal(spg, [0.5])
    # Resized videos: the grid follows the video pixel bounds.
    for f, h, w in ((5, 100, 60), (2, 5, 7)):
      rh, rw = ref_resize(h, w, 8, 64, 48 * 48)
      clip = self.rng.integers(0, 256, (f, h, w, 3), dtype=np.uint8)
      _, grid, _ = ours.video(clip)
      np.testing.assert_array_equal(grid, [[(f + 1) // 2, rh // 4,
                                            rw // 4]])

  def test_sample_frames_matches_video_processor(self):
    """Frame indices at a target fps (or a frame count) equal transformers'
    `Qwen2VLVideoProcessor.sample_frames` (its source run alone, with the
    processor's defaults fps 2, min 4, max 768 frames, T = 2); where its
    float arange adds an index equal to the frame count (past the end),
    ours stops at n."""
    src = os.path.join(os.path.dirname(inspect.getfile(ip)),
                       "video_processing_qwen2_vl.py")
    with open(src) as fh:
      tree = ast.parse(fh.read())
    fn = [n for c in tree.body if isinstance(c, ast.ClassDef)
          for n in c.body if isinstance(n, ast.FunctionDef)
          and n.name == "sample_frames"]
    import math  # pylint: disable=g-import-not-at-top
    import types  # pylint: disable=g-import-not-at-top
    scope = {"torch": torch, "math": math, "VideoMetadata": object}
    exec(compile(ast.Module(fn, []), src, "exec"), scope)  # pylint: disable=exec-used
    ref_self = types.SimpleNamespace(num_frames=None, fps=2,
                                     temporal_patch_size=2, min_frames=4,
                                     max_frames=768)
    ours = vp.QwenVLProcessor()
    past_end = 0
    for total, video_fps, kw in [(100, 25.0, {}), (30, 24.0, {}),
                                 (301, 29.97, {}), (2000, 30.0, {}),
                                 (9, 30.0, {}), (90, 30.0, {"fps": 1.5}),
                                 (30, 10.0, {"num_frames": 22}), (30, 10.0, {"num_frames": 26}),
                                 (97, 30.0, {"num_frames": 13})]:
      meta = types.SimpleNamespace(total_num_frames=total, fps=video_fps)
      want = scope["sample_frames"](ref_self, meta, **kw).numpy()
      got = ours.sample_frames(total, video_fps, **kw)
      if want[-1] == total:  # transformers' extra, out-of-range index
        past_end += 1
        want = want[:-1]
      np.testing.assert_array_equal(got, want, err_msg=f"{total} {kw}")
    self.assertGreater(past_end, 0)  # (30 frames, 26): 27 steps
    # Hand-computed: 4 s at 25 fps, sampled at 2 fps -> 8 frames every
    # 12.5; the 2000-frame video hits max_frames = 768.
    np.testing.assert_array_equal(ours.sample_frames(100, 25.0),
                                  [0, 12, 25, 37, 50, 62, 75, 87])
    self.assertLen(ours.sample_frames(2000, 1000.0), 4)   # min_frames
    self.assertLen(ours.sample_frames(8000, 2.0), 768)    # max_frames
    with self.assertRaisesRegex(ValueError, "not both"):
      ours.sample_frames(10, 30.0, fps=2.0, num_frames=4)
    with self.assertRaisesRegex(ValueError, "frame rate"):
      ours.sample_frames(10)

  def test_video_with_video_fps_samples_then_times_patches(self):
    """`video(frames, fps=, video_fps=)`: the sampled frames' pixels, and
    second_per_grid_ts = T / (n / F * video_fps)."""
    vkw = dict(KW, video_min_pixels=8 * 8, video_max_pixels=48 * 48)
    ours = vp.QwenVLProcessor(**vkw)
    clip = self.rng.integers(0, 256, (100, 16, 24, 3), dtype=np.uint8)
    idx = ours.sample_frames(100, 25.0, fps=2.0)
    pv, grid, spg = ours.video(clip, fps=2.0, video_fps=25.0)
    want_pv, want_grid, _ = ours.video(clip[idx], fps=2.0)
    np.testing.assert_array_equal(pv, want_pv)
    np.testing.assert_array_equal(grid, want_grid)
    np.testing.assert_allclose(spg, [2 / (8 / 100 * 25.0)])  # 1.0 s

  def test_smart_resize_matches_transformers(self):
    for h, w in ((100, 60), (7, 9), (16, 24), (1000, 30), (3, 500)):
      for lo, hi in ((256, 2304), (64, 100000)):
        self.assertEqual(vp.smart_resize(h, w, 8, lo, hi),
                         ip.smart_resize(h, w, 8, lo, hi))
    with self.assertRaisesRegex(ValueError, "aspect ratio"):
      vp.smart_resize(1, 300)

  def test_expand_placeholders(self):
    ids = [1, 5, 2, 8, 9, 5]  # image 5, video 8, image 5 again
    grids = np.array([[1, 4, 6], [1, 2, 2]])
    out = self.ours.expand_placeholders(ids, grids, [[2, 4, 4]],
                                        image_token_id=5, video_token_id=8)
    self.assertEqual(out, [1] + [5] * 6 + [2] + [8] * 8 + [9, 5])
    with self.assertRaisesRegex(ValueError, "more image grids"):
      self.ours.expand_placeholders([1, 5], grids, image_token_id=5,
                                    video_token_id=8)
    with self.assertRaisesRegex(ValueError, "more video placeholders"):
      self.ours.expand_placeholders([8], None, image_token_id=5,
                                    video_token_id=8)

  def test_from_hf(self):
    proc = vp.QwenVLProcessor.from_hf(
        {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
         "temporal_patch_size": 2, "merge_size": 2,
         "image_mean": list(vp.OPENAI_CLIP_MEAN)},
        {"size": {"shortest_edge": 100352, "longest_edge": 602112}})
    self.assertEqual((proc.min_pixels, proc.max_pixels), (3136, 12845056))
    self.assertEqual((proc.video_min_pixels, proc.video_max_pixels),
                     (100352, 602112))

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "uint8"):
      self.ours.images([np.zeros((8, 8, 3), np.float32)])
    with self.assertRaisesRegex(ValueError, "different sizes"):
      self.ours.video([np.zeros((8, 8, 3), np.uint8),
                       np.zeros((16, 8, 3), np.uint8)])


if __name__ == "__main__":
  absltest.main()
