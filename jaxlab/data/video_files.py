"""Video files of released benchmarks: decoding and Qwen2.5-VL frame choice.

    frames, video_fps = read_video("videos/cup/state3_op5_start.mp4")
    idx, sample_fps = qwen_vl_frame_indices(len(frames), video_fps, fps=1.0)
    h, w = qwen_vl_video_size(len(idx), *frames.shape[1:3],
                              max_pixels=360 * 420)

`read_video` decodes an mp4 (or any format imageio's ffmpeg plugin reads:
the `video` extra) into uint8 frames `[F, H, W, 3]` with the stream's frame
rate; `.npz` (a `frames` array, optional `fps`) and `.npy` need no ffmpeg.

The released evaluation scripts of VideoReasonBench (`eval_huggingface.py`:
`nframes` 32, `max_pixels` 448 * 448) and VUDG (`zero_shot/qwen2.5vl.py`:
`fps` 1, `max_pixels` 360 * 420) hand the video to qwen-vl-utils'
`process_vision_info`, which picks the frames and their size before the
processor sees them (qwen-vl-utils `vision_process.py`: `smart_nframes`,
`_read_video_*`, `fetch_video`):

* `nframes` given: round(nframes / 2) * 2 frames; else `fps` (default 2):
  total / video_fps * fps clamped to [ceil2(4), floor2(min(768, total))]
  and to `total`, floored to a multiple of 2 (FRAME_FACTOR).
* indices = round(linspace(0, total - 1, n)); the sampled rate is
  n / total * video_fps (the processor's `fps`, so second_per_grid_ts =
  temporal_patch_size / sampled rate).
* size: `smart_resize(H, W, 28, min_pixels, max_pixels)` with min_pixels
  128 * 28 * 28 and max_pixels = min(the item's `max_pixels`, max(min(768
  * 28 * 28, total_pixels / n * 2), 1.05 * min_pixels)), total_pixels
  128000 * 28 * 28 * 0.9.

qwen-vl-utils resizes with torchvision's bicubic (antialiased) on the
decoded frames; `jaxlab.data.vision_processor` resizes with PIL's bicubic
(equal when the frames already have the target size, else within a grey
level or so).
"""

from __future__ import annotations

import math
import os

import numpy as np

from jaxlab import _optional
from jaxlab.data import vision_processor

FRAME_FACTOR = 2          # qwen-vl-utils FRAME_FACTOR
IMAGE_FACTOR = 28         # patch 14 x merge 2
FPS = 2.0
FPS_MIN_FRAMES = 4
FPS_MAX_FRAMES = 768
VIDEO_MIN_PIXELS = 128 * 28 * 28
VIDEO_MAX_PIXELS = 768 * 28 * 28
VIDEO_TOTAL_PIXELS = int(128000 * 28 * 28 * 0.9)


def read_video(path: str) -> tuple[np.ndarray, float]:
  """(frames uint8 `[F, H, W, 3]`, frames per second) of a video file."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"video file {path} not found (the release's "
                            "videos must be unpacked under data.path)")
  if path.endswith(".npz"):
    with np.load(path) as z:
      if "frames" not in z:
        raise ValueError(f"{path}: npz without a `frames` array")
      arr = np.asarray(z["frames"])
      fps = float(z["fps"]) if "fps" in z else 1.0
  elif path.endswith(".npy"):
    arr, fps = np.load(path), 1.0
  else:
    iio = _optional.require("imageio.v3", "video")
    try:
      arr = np.asarray(iio.imread(path))
      fps = float(iio.immeta(path).get("fps") or 0.0)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"cannot decode {path} ({e}); install the `video` "
                       "extra (imageio + imageio-ffmpeg)") from e
  if arr.ndim != 4 or arr.shape[-1] != 3:
    raise ValueError(f"{path}: frames must be [F, H, W, 3], got {arr.shape}")
  if arr.dtype != np.uint8:
    arr = np.clip(np.round(arr * 255.0 if arr.max() <= 1.0 else arr), 0,
                  255).astype(np.uint8)
  if not fps > 0:
    raise ValueError(f"{path}: the stream has no frame rate")
  return arr, fps


def _round(x, f):
  return round(x / f) * f


def qwen_vl_frame_indices(total_frames: int, video_fps: float, *,
                          fps: float | None = None,
                          nframes: int | None = None,
                          min_frames: int = FPS_MIN_FRAMES,
                          max_frames: int = FPS_MAX_FRAMES
                          ) -> tuple[np.ndarray, float]:
  """(frame indices, sampled fps) as qwen-vl-utils' `smart_nframes` and
  its readers choose them (module docstring)."""
  if fps is not None and nframes is not None:
    raise ValueError("give fps or nframes, not both (qwen-vl-utils)")
  total = int(total_frames)
  if nframes is not None:
    n = _round(nframes, FRAME_FACTOR)
  else:
    fps = FPS if fps is None else float(fps)
    lo = math.ceil(min_frames / FRAME_FACTOR) * FRAME_FACTOR
    hi = math.floor(min(max_frames, total) / FRAME_FACTOR) * FRAME_FACTOR
    n = total / video_fps * fps
    n = min(min(max(n, lo), hi), total)
    n = math.floor(n / FRAME_FACTOR) * FRAME_FACTOR
  if not FRAME_FACTOR <= n <= total:
    raise ValueError(f"cannot sample {n} frames (fps={fps}, nframes="
                     f"{nframes}) of a {total}-frame video: need "
                     f"{FRAME_FACTOR} <= n <= {total}")
  idx = np.round(np.linspace(0, total - 1, n)).astype(np.int64)
  return idx, n / max(total, 1e-6) * float(video_fps)


def qwen_vl_video_size(num_frames: int, height: int, width: int, *,
                       max_pixels: int | None = None,
                       min_pixels: int = VIDEO_MIN_PIXELS,
                       total_pixels: int = VIDEO_TOTAL_PIXELS,
                       factor: int = IMAGE_FACTOR) -> tuple[int, int]:
  """(h, w) qwen-vl-utils' `fetch_video` resizes the frames to."""
  cap = max(min(VIDEO_MAX_PIXELS, total_pixels / num_frames * FRAME_FACTOR),
            int(min_pixels * 1.05))
  if max_pixels is not None:
    cap = min(max_pixels, cap)
  return vision_processor.smart_resize(height, width, factor, min_pixels,
                                       int(cap))
