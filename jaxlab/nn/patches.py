"""Qwen2-VL / Qwen2.5-VL patch layout: frames -> flattened 3-D patches.

    rows, (t, gh, gw) = patches.qwen_vl_patchify(frames_fchw, patch_size=14,
                                                 temporal_patch_size=2,
                                                 merge_size=2)

One function for the host-side processor (`jaxlab.data.vision_processor`,
numpy) and the models that patchify on the device
(`jaxlab.models.qwen2_vl`, `jaxlab.models.qwen2_vl_prefix`, jax.numpy
under `jit`): the array module follows the input. Frames `[F, C, H, W]`
(resized to multiples of patch_size * merge_size and normalised already;
F = 1 is an image, repeated over the temporal patch; a video's last frame
is repeated up to a multiple of `temporal_patch_size`) become rows
`[t * gh * gw, C * T * P * P]` (channel, temporal, row, column inside a
patch) with each 2 x 2 merge block's patches contiguous, and the grid
(t, gh, gw) = (frames / T, H / P, W / P) -- transformers'
`Qwen2VLImageProcessor` / `Qwen2VLVideoProcessor` `patchify`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def qwen_vl_patchify(frames_fchw, *, patch_size: int,
                     temporal_patch_size: int, merge_size: int):
  """(rows `[t * gh * gw, C * T * P * P]`, grid (t, gh, gw)) of frames
  `[F, C, H, W]`; numpy in, numpy (float32) out; a jax array in, jax out."""
  xp = jnp if isinstance(frames_fchw, jax.Array) else np
  x = frames_fchw if xp is jnp else np.asarray(frames_fchw, np.float32)
  if x.ndim != 4:
    raise ValueError(f"frames of shape {tuple(x.shape)}; expected "
                     "[F, C, H, W]")
  f, c, hh, ww = x.shape
  tp, p, m = temporal_patch_size, patch_size, merge_size
  if hh % (p * m) or ww % (p * m):
    raise ValueError(f"frames of size {hh} x {ww}: H and W must be "
                     f"multiples of patch_size * merge_size = {p * m}")
  if f == 1:
    x = xp.repeat(x, tp, axis=0)
  elif f % tp:
    x = xp.concatenate([x, xp.repeat(x[-1:], tp - f % tp, axis=0)])
  gt, gh, gw = x.shape[0] // tp, hh // p, ww // p
  x = x.reshape(gt, tp, c, gh // m, m, p, gw // m, m, p)
  x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
  return x.reshape(gt * gh * gw, c * tp * p * p), (gt, gh, gw)
