"""Image and video preprocessing of HF processors (numpy + PIL, no torch).

`ClassifierProcessor` is a ViT / DeiT image classifier's (resize, centre
crop, rescale, normalise: `pixel_values` `[B, 3, h, w]`, see its
docstring); the rest of this module is Qwen2-VL / Qwen2.5-VL's:

    proc = vision_processor.QwenVLProcessor(patch_size=14, merge_size=2)
    pixel_values, image_grid_thw = proc.images([img_a, img_b])
    pixel_values_videos, video_grid_thw, second_per_grid_ts = proc.video(
        frames_fhwc, fps=2.0)
    ids = proc.expand_placeholders(ids, image_grid_thw, video_grid_thw,
                                   image_token_id=..., video_token_id=...)

This is transformers' `Qwen2VLImageProcessorPil` (images) and
`Qwen2VLVideoProcessor` (videos), step by step:

1. RGB: a PIL image is converted to RGB (alpha composited onto white); a
   uint8 array `[H, W, C]` or `[C, H, W]` (the channel axis found as
   transformers' `infer_channel_dimension_format` does: the first axis if
   it has 1, 3 or 4 entries, else the last) has 1 channel repeated to 3 and
   4 channels composited onto white (`round(a * rgb + (1 - a) * 255)`).
2. Resize (`smart_resize`): with factor = patch_size * merge_size,
   (h, w) = (round(H / f) f, round(W / f) f); if h w > max_pixels they
   become floor(H / beta / f) f (at least f) with beta = sqrt(H W /
   max_pixels); if h w < min_pixels, ceil(H beta / f) f with beta =
   sqrt(min_pixels / (H W)). The uint8 image is resized to (h, w) with
   PIL's bicubic filter. Videos use their own pixel bounds
   (`video_min_pixels`, `video_max_pixels`; with `cap_pixels_per_frame`
   the max is also min(max, 0.9 * max_video_tokens * f^2 * T / frames),
   floored at 1.05 * min).
3. Rescale and normalise: images as the PIL processor does them,
   float32(float64(x) / 255), then (x - mean) / std in float32; videos as
   the torch video processor does them, fused: (float32(x) - 255 mean) /
   (255 std) (mean, std in float32 times 255, in float32).
4. Patchify (`patchify`): frames (an image is one frame, repeated
   `temporal_patch_size` times; a video's last frame is repeated up to a
   multiple of it) are cut into `[t * gh * gw, C * T * P * P]` rows
   (channel, temporal, row, column inside a patch), 2 x 2 merge blocks
   contiguous; grid (t, gh, gw) = (frames / T, h / P, w / P).

The video frames are resized with PIL's bicubic filter frame by frame;
transformers' video processor resizes with torchvision, whose bicubic
rounding may differ by one grey level. Frames already at the
`smart_resize` size are not resampled (both agree exactly then).
`second_per_grid_ts` = temporal_patch_size / fps (Qwen2.5-VL's processor;
default fps 2). `sample_frames` picks the frames of a recorded video at a
target fps as the video processor's `sample_frames` does (`video(...,
video_fps=)` applies it). A placeholder token of an image / video stands for
t * gh * gw / merge_size^2 tokens (`expand_placeholders`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxlab.nn import patches

# OpenAI CLIP's normalisation (transformers' OPENAI_CLIP_MEAN / _STD).
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def smart_resize(height: int, width: int, factor: int = 28,
                 min_pixels: int = 56 * 56,
                 max_pixels: int = 14 * 14 * 4 * 1280) -> tuple[int, int]:
  """(h, w): multiples of `factor`, h * w within [min_pixels, max_pixels],
  the aspect ratio kept as closely as possible (transformers' and
  qwen-vl-utils' `smart_resize`)."""
  if min(height, width) < 1:
    raise ValueError(f"image of size {height} x {width}: both sides must "
                     "be >= 1")
  if max(height, width) / min(height, width) > 200:
    raise ValueError("absolute aspect ratio must be smaller than 200, got "
                     f"{max(height, width) / min(height, width)}")
  h_bar = round(height / factor) * factor
  w_bar = round(width / factor) * factor
  if h_bar * w_bar > max_pixels:
    beta = math.sqrt((height * width) / max_pixels)
    h_bar = max(factor, math.floor(height / beta / factor) * factor)
    w_bar = max(factor, math.floor(width / beta / factor) * factor)
  elif h_bar * w_bar < min_pixels:
    beta = math.sqrt(min_pixels / (height * width))
    h_bar = math.ceil(height * beta / factor) * factor
    w_bar = math.ceil(width * beta / factor) * factor
  return h_bar, w_bar


def patchify(frames_fchw: np.ndarray, *, patch_size: int,
             temporal_patch_size: int, merge_size: int
             ) -> tuple[np.ndarray, tuple[int, int, int]]:
  """(rows `[t * gh * gw, C * T * P * P]` float32, grid (t, gh, gw)) of
  resized, normalised frames `[F, C, H, W]` (F = 1: an image, repeated
  over the temporal patch; else a video, its last frame repeated up to a
  multiple of `temporal_patch_size`): `jaxlab.nn.patches.qwen_vl_patchify`
  on the host."""
  return patches.qwen_vl_patchify(
      np.asarray(frames_fchw, np.float32), patch_size=patch_size,
      temporal_patch_size=temporal_patch_size, merge_size=merge_size)


def _to_rgb_chw(image) -> np.ndarray:
  """uint8 `[3, H, W]` of a PIL image or a uint8 array (see module doc)."""
  if hasattr(image, "convert") and hasattr(image, "getbands"):  # PIL
    from PIL import Image  # pylint: disable=g-import-not-at-top
    if "A" in image.getbands() or image.info.get("transparency") is not None:
      rgba = image.convert("RGBA")
      white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
      image = Image.alpha_composite(white, rgba)
    return np.moveaxis(np.asarray(image.convert("RGB")), -1, 0)
  x = np.asarray(image)
  if x.dtype != np.uint8:
    raise ValueError(f"images must be uint8 arrays (0..255) or PIL images, "
                     f"got dtype {x.dtype}")
  if x.ndim == 2:
    x = x[None]
  elif x.ndim != 3:
    raise ValueError(f"image of shape {x.shape}; expected [H, W], "
                     "[H, W, C] or [C, H, W]")
  elif x.shape[0] not in (1, 3, 4):
    if x.shape[-1] not in (1, 3, 4):
      raise ValueError(f"image of shape {x.shape}: no channel axis of 1, "
                       "3 or 4 entries")
    x = np.moveaxis(x, -1, 0)
  if x.shape[0] == 1:
    x = np.repeat(x, 3, axis=0)
  elif x.shape[0] == 4:
    alpha = x[3:4] / 255
    x = np.round(alpha * x[:3] + (1 - alpha) * 255).astype(np.uint8)
  return x


def resize(image_chw: np.ndarray, height: int, width: int,
           resample: int = 3) -> np.ndarray:
  """uint8 `[C, height, width]`: PIL resampling of uint8 `[C, H, W]`
  (transformers' PIL backend); `resample` is PIL's filter number, as
  preprocessor_config.json writes it (2 bilinear, 3 bicubic, the
  default)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  x = np.asarray(image_chw)
  if x.shape[1:] == (height, width):
    return x
  img = Image.fromarray(np.ascontiguousarray(np.moveaxis(x, 0, -1)))
  out = np.asarray(img.resize((width, height),
                              resample=Image.Resampling(int(resample))))
  return np.moveaxis(out.reshape(height, width, -1), -1, 0)


def center_crop(image_chw: np.ndarray, height: int, width: int
                ) -> np.ndarray:
  """The centred `height` x `width` window of `[C, H, W]` (transformers'
  `center_crop`: top = (H - height) // 2; a side shorter than the crop is
  first zero-padded, ceil((crop - side) / 2) before it)."""
  x = np.asarray(image_chw)
  h, w = x.shape[1:]
  if height > h or width > w:
    nh, nw = max(height, h), max(width, w)
    top, left = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
    padded = np.zeros(x.shape[:1] + (nh, nw), x.dtype)
    padded[:, top:top + h, left:left + w] = x
    x, h, w = padded, nh, nw
  top, left = (h - height) // 2, (w - width) // 2
  return x[:, top:top + height, left:left + width]


def _size_of(size: Any, field: str) -> dict[str, int]:
  """A preprocessor_config.json `size` / `crop_size` as {"height",
  "width"} or {"shortest_edge"} (an int is a square, as transformers'
  `get_size_dict` reads the ViT / DeiT legacy configs)."""
  if isinstance(size, (int, np.integer)):
    return {"height": int(size), "width": int(size)}
  size = dict(size or {})
  if size.get("height") and size.get("width"):
    return {"height": int(size["height"]), "width": int(size["width"])}
  if size.get("shortest_edge") and not size.get("longest_edge"):
    return {"shortest_edge": int(size["shortest_edge"])}
  raise ValueError(f"preprocessor_config.json: {field}={size!r}; supported: "
                   "an int, {height, width} or {shortest_edge}")


# ImageNet normalisation (transformers' IMAGENET_DEFAULT_MEAN / _STD).
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class ClassifierProcessor:
  """An image classifier's preprocessing: transformers' PIL-backend
  `ViTImageProcessorPil` / `DeiTImageProcessorPil` (`PilBackend.
  _preprocess`), from a `preprocessor_config.json` (`from_hf`).

  Per image: RGB uint8 `[3, H, W]` (`_to_rgb_chw`), resize to `size`
  ({height, width}; or {shortest_edge}: the short side to it, the long
  one int(s * long / short)) with PIL filter `resample`, centre crop to
  `crop_size`, rescale (float64 x * rescale_factor, then float32) and
  normalise ((x - mean) / std in float32): `pixel_values` `[B, 3, h, w]`
  float32, what `ViTClassifier(pixel_values=...)` reads. Defaults are
  DeiT's (`facebook/deit-base-patch16-224`: 256 bicubic, crop 224,
  ImageNet mean / std).
  """
  size: Any = dataclasses.field(
      default_factory=lambda: {"height": 256, "width": 256})
  resample: int = 3
  do_resize: bool = True
  do_center_crop: bool = True
  crop_size: Any = dataclasses.field(
      default_factory=lambda: {"height": 224, "width": 224})
  do_rescale: bool = True
  rescale_factor: float = 1 / 255
  do_normalize: bool = True
  image_mean: tuple[float, ...] = IMAGENET_DEFAULT_MEAN
  image_std: tuple[float, ...] = IMAGENET_DEFAULT_STD

  def __post_init__(self):
    object.__setattr__(self, "size", _size_of(self.size, "size"))
    object.__setattr__(self, "crop_size",
                       _size_of(self.crop_size, "crop_size"))
    if "height" not in self.crop_size:
      raise ValueError("crop_size needs height and width")
    for name in ("image_mean", "image_std"):
      value = getattr(self, name)
      value = ((float(value),) * 3 if np.ndim(value) == 0
               else tuple(map(float, value)))
      if len(value) != 3:
        raise ValueError(f"{name} needs 3 values (RGB), got {value}")
      object.__setattr__(self, name, value)

  @classmethod
  def from_hf(cls, preprocessor: Mapping[str, Any]) -> "ClassifierProcessor":
    """From a `preprocessor_config.json` dict (missing keys: the
    defaults of the class its `image_processor_type` names, ViT's or
    DeiT's)."""
    kind = str(preprocessor.get("image_processor_type")
               or preprocessor.get("feature_extractor_type") or "")
    base = {}
    if kind.startswith("ViT"):  # ViTImageProcessor's class defaults
      base = dict(size={"height": 224, "width": 224}, resample=2,
                  do_center_crop=False, image_mean=(0.5, 0.5, 0.5),
                  image_std=(0.5, 0.5, 0.5))
    fields = {f.name for f in dataclasses.fields(cls)}
    base.update({k: v for k, v in preprocessor.items()
                 if k in fields and v is not None})
    return cls(**base)

  def output_size(self, height: int, width: int) -> tuple[int, int]:
    """(h, w) of the resize of a `height` x `width` image."""
    if not self.do_resize:
      return height, width
    if "shortest_edge" in self.size:
      s = self.size["shortest_edge"]
      short, long = (width, height) if width <= height else (height, width)
      new_short, new_long = s, int(s * long / short)
      return ((new_long, new_short) if width <= height
              else (new_short, new_long))
    return self.size["height"], self.size["width"]

  def image(self, image) -> np.ndarray:
    """pixel_values `[3, h, w]` float32 of one image (PIL or uint8)."""
    x = _to_rgb_chw(image)
    if self.do_resize:
      x = resize(x, *self.output_size(*x.shape[1:]), resample=self.resample)
    if self.do_center_crop:
      x = center_crop(x, self.crop_size["height"], self.crop_size["width"])
    if self.do_rescale:  # float64 product, then float32 (transformers)
      x = (x.astype(np.float64) * self.rescale_factor).astype(np.float32)
    else:
      x = x.astype(np.float32)
    if self.do_normalize:
      mean = np.asarray(self.image_mean, x.dtype)
      std = np.asarray(self.image_std, x.dtype)
      x = ((x.T - mean) / std).T
    return x

  def __call__(self, images: Sequence[Any]) -> np.ndarray:
    """pixel_values `[B, 3, h, w]` float32 of a list of images."""
    if not len(images):
      raise ValueError("images is empty")
    out = [self.image(im) for im in images]
    shapes = {x.shape for x in out}
    if len(shapes) > 1:
      raise ValueError(f"images resize to different shapes {sorted(shapes)}"
                       "; give size as {height, width} or crop them")
    return np.stack(out)


@dataclasses.dataclass(frozen=True)
class QwenVLProcessor:
  """Preprocessing of Qwen2-VL / Qwen2.5-VL (defaults: transformers'
  `Qwen2VLImageProcessor` / `Qwen2VLVideoProcessor` defaults)."""
  patch_size: int = 14
  temporal_patch_size: int = 2
  merge_size: int = 2
  min_pixels: int = 56 * 56
  max_pixels: int = 28 * 28 * 1280
  video_min_pixels: int = 128 * 28 * 28
  video_max_pixels: int = 28 * 28 * 768
  cap_pixels_per_frame: bool = False
  max_video_tokens: int = 128000
  image_mean: tuple[float, ...] = OPENAI_CLIP_MEAN
  image_std: tuple[float, ...] = OPENAI_CLIP_STD
  rescale_factor: float = 1 / 255
  do_resize: bool = True
  do_rescale: bool = True
  do_normalize: bool = True
  # Frame sampling (`sample_frames`; transformers' video processor).
  fps: float = 2.0
  min_frames: int = 4
  max_frames: int = 768

  def __post_init__(self):
    for name in ("patch_size", "temporal_patch_size", "merge_size"):
      if int(getattr(self, name)) < 1:
        raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
    object.__setattr__(self, "image_mean", tuple(map(float,
                                                     self.image_mean)))
    object.__setattr__(self, "image_std", tuple(map(float, self.image_std)))
    if len(self.image_mean) != 3 or len(self.image_std) != 3:
      raise ValueError("image_mean and image_std need 3 values (RGB), got "
                       f"{self.image_mean}, {self.image_std}")

  @classmethod
  def from_hf(cls, preprocessor: Mapping[str, Any],
              video: Mapping[str, Any] | None = None) -> "QwenVLProcessor":
    """From a `preprocessor_config.json` (and optionally a
    `video_preprocessor_config.json`) dict: `min_pixels` / `max_pixels` or
    `size` {shortest_edge, longest_edge}, patch sizes, mean / std."""
    def bounds(d, lo, hi):
      size = dict(d.get("size") or {})
      return (int(d.get("min_pixels") or size.get("shortest_edge") or lo),
              int(d.get("max_pixels") or size.get("longest_edge") or hi))

    base = cls()
    kw = {k: preprocessor[k] for k in (
        "patch_size", "temporal_patch_size", "merge_size", "image_mean",
        "image_std", "rescale_factor", "do_resize", "do_rescale",
        "do_normalize") if preprocessor.get(k) is not None}
    kw["min_pixels"], kw["max_pixels"] = bounds(
        preprocessor, base.min_pixels, base.max_pixels)
    if video is not None:
      kw["video_min_pixels"], kw["video_max_pixels"] = bounds(
          video, base.video_min_pixels, base.video_max_pixels)
      if video.get("cap_pixels_per_frame") is not None:
        kw["cap_pixels_per_frame"] = bool(video["cap_pixels_per_frame"])
    return cls(**kw)

  @property
  def factor(self) -> int:
    return self.patch_size * self.merge_size

  def _patchify(self, frames):
    return patchify(frames, patch_size=self.patch_size,
                    temporal_patch_size=self.temporal_patch_size,
                    merge_size=self.merge_size)

  def image_size(self, height: int, width: int) -> tuple[int, int]:
    """The (h, w) an image of `height` x `width` is resized to."""
    if not self.do_resize:
      return height, width
    return smart_resize(height, width, self.factor, self.min_pixels,
                        self.max_pixels)

  def video_size(self, num_frames: int, height: int, width: int
                 ) -> tuple[int, int]:
    """The (h, w) the frames of a video are resized to."""
    if not self.do_resize:
      return height, width
    max_pixels = self.video_max_pixels
    if self.cap_pixels_per_frame:
      total = int(self.max_video_tokens * self.factor * self.factor * 0.9)
      max_pixels = max(min(max_pixels,
                           total * self.temporal_patch_size // num_frames),
                       int(self.video_min_pixels * 1.05))
    return smart_resize(height, width, self.factor, self.video_min_pixels,
                        max_pixels)

  def image(self, image) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(pixel_values `[gh * gw, C*T*P*P]`, grid (1, gh, gw)) of one
    image."""
    x = _to_rgb_chw(image)
    x = resize(x, *self.image_size(*x.shape[1:]))
    if self.do_rescale:  # float64 product, then float32 (transformers)
      x = (x.astype(np.float64) * self.rescale_factor).astype(np.float32)
    else:
      x = x.astype(np.float32)
    if self.do_normalize:
      mean = np.asarray(self.image_mean, x.dtype)
      std = np.asarray(self.image_std, x.dtype)
      x = ((x.T - mean) / std).T
    return self._patchify(x[None])

  def images(self, images: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(pixel_values `[sum gh * gw, C*T*P*P]` float32, image_grid_thw `[N,
    3]` int64) of a list of images, in order."""
    if not len(images):
      raise ValueError("images is empty")
    out = [self.image(im) for im in images]
    return (np.concatenate([pv for pv, _ in out]),
            np.asarray([g for _, g in out], np.int64))

  def sample_frames(self, total_num_frames: int,
                    video_fps: float | None = None, *,
                    fps: float | None = None,
                    num_frames: int | None = None) -> np.ndarray:
    """Indices of the frames to keep of a video of `total_num_frames`
    recorded at `video_fps` (transformers' `Qwen2VLVideoProcessor.
    sample_frames`): `num_frames` rounded to a multiple of
    temporal_patch_size T, or (default) `fps` (default `self.fps`) frames
    per second of the video, clamped to [min_frames, min(max_frames,
    total) floored to T] and floored to a multiple of T; the indices are
    the integer parts of i * total / n, computed as transformers' float32
    `torch.arange` does. Where that arange rounds up to n + 1 steps its
    last index equals `total_num_frames` (past the video's end); it is
    dropped here, so exactly n frames come back."""
    t, total = self.temporal_patch_size, int(total_num_frames)
    if total < 1:
      raise ValueError(f"total_num_frames={total_num_frames} must be >= 1")
    if fps is not None and num_frames is not None:
      raise ValueError("sample_frames: give fps or num_frames, not both")
    if num_frames is not None:
      n = round(num_frames / t) * t
    else:
      fps = self.fps if fps is None else fps
      if video_fps is None or video_fps <= 0 or fps <= 0:
        raise ValueError(f"sampling at fps={fps} needs the video's frame "
                         f"rate (video_fps={video_fps}, both > 0)")
      hi = math.floor(min(self.max_frames, total) / t) * t
      n = min(max(total / video_fps * fps, self.min_frames), hi, total)
      n = math.floor(n / t) * t
    if not 1 <= n <= total:
      raise ValueError(f"cannot sample {n} frames (num_frames={num_frames},"
                       f" fps={fps}) of a {total}-frame video")
    step = total / n
    idx = (np.arange(math.ceil(total / step)) * step).astype(np.float32)
    return idx.astype(np.int64)[:n]

  def video(self, frames, *, fps: float = 2.0,
            video_fps: float | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pixel_values_videos `[t * gh * gw, C*T*P*P]`, video_grid_thw `[1,
    3]`, second_per_grid_ts `[1]` = temporal_patch_size / fps) of one
    video: frames `[F, H, W, C]` / `[F, C, H, W]` uint8 or a list of
    images (all of one size), taken at `fps` frames per second.

    With `video_fps`, `frames` is the whole video recorded at that rate:
    it is first sampled at `fps` (`sample_frames`), and the time per
    temporal patch uses the sampled rate n / F * video_fps (transformers'
    `VideoMetadata.sampled_fps`)."""
    if video_fps is not None:
      idx = self.sample_frames(len(frames), video_fps, fps=fps)
      fps = len(idx) / len(frames) * video_fps
      frames = [frames[int(i)] for i in idx]
    frames = [_to_rgb_chw(f) for f in frames]
    if not frames:
      raise ValueError("a video needs at least one frame")
    if len({f.shape for f in frames}) != 1:
      raise ValueError("video frames of different sizes: "
                       f"{sorted({f.shape for f in frames})}")
    if fps <= 0:
      raise ValueError(f"fps={fps} must be > 0")
    h, w = self.video_size(len(frames), *frames[0].shape[1:])
    x = np.stack([resize(f, h, w) for f in frames]).astype(np.float32)
    if self.do_normalize:  # the torch processor's fused rescale + normalise
      scale = 1.0 / self.rescale_factor if self.do_rescale else 1.0
      mean = np.asarray(self.image_mean, np.float32) * np.float32(scale)
      std = np.asarray(self.image_std, np.float32) * np.float32(scale)
      x = (x - mean[:, None, None]) / std[:, None, None]
    elif self.do_rescale:
      x = x * np.float32(self.rescale_factor)
    pv, grid = self._patchify(x)
    return (pv, np.asarray([grid], np.int64),
            np.asarray([self.temporal_patch_size / fps], np.float64))

  def num_tokens(self, grid_thw) -> list[int]:
    """Placeholder tokens of each image / video: t * gh * gw / merge^2."""
    return [int(np.prod(g)) // self.merge_size ** 2
            for g in np.asarray(grid_thw).reshape(-1, 3)]

  def expand_placeholders(self, input_ids: Sequence[int], image_grid_thw=None,
                          video_grid_thw=None, *, image_token_id: int,
                          video_token_id: int) -> list[int]:
    """`input_ids` with its k-th image (video) token repeated
    `num_tokens` of the k-th image (video) grid times (the processor's
    placeholder expansion, on ids)."""
    counts = {image_token_id: iter(self.num_tokens(image_grid_thw)
                                   if image_grid_thw is not None else ()),
              video_token_id: iter(self.num_tokens(video_grid_thw)
                                   if video_grid_thw is not None else ())}
    out = []
    for tok in input_ids:
      tok = int(tok)
      if tok in counts:
        n = next(counts[tok], None)
        if n is None:
          kind = "image" if tok == image_token_id else "video"
          raise ValueError(f"more {kind} placeholders than {kind} grids")
        out.extend([tok] * n)
      else:
        out.append(tok)
    for tok, rest in counts.items():
      if next(rest, None) is not None:
        kind = "image" if tok == image_token_id else "video"
        raise ValueError(f"more {kind} grids than {kind} placeholders")
    return out
