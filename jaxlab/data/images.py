"""Small image-classification data sets made here (no download), via grain.

    images, labels = images.load("digits")          # [N, 8, 8, 1] in [0, 1]
    images, labels = images.load("procedural", num_classes=10, image_size=16)
    (tr_x, tr_y), (ev_x, ev_y) = images.split(images, labels, eval_fraction=0.2)
    sub_x, sub_y = images.select_classes(tr_x, tr_y, classes=(0, 1, 2))
    ds = images.batches(sub_x, sub_y, batch_size=64, seed=0)   # grain MapDataset

`digits` is scikit-learn's bundled 8x8 handwritten digits (1797 images, 10
classes, shipped inside the package). `procedural` draws coloured shapes
(disc, square, ring, horizontal and vertical stripes, cross, ...) with random
position, size, colour jitter and pixel noise; class c is shape
`c % num_shapes` in palette `c // num_shapes`, so classes that share a shape
or a palette are confusable. Examples are dicts `{"images", "labels"}`: what
the `classification` loss (`jaxlab.objectives.classification`) reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import grain
import numpy as np

from jaxlab import _optional
from jaxlab import registry
from jaxlab.data import pipeline

DATASETS: registry.Registry = registry.Registry("image dataset")


@DATASETS.register("digits")
def digits(**unused) -> tuple[np.ndarray, np.ndarray]:
  """scikit-learn's bundled digits: `[1797, 8, 8, 1]` float32 in [0, 1]."""
  if unused:
    raise ValueError(f"data: digits takes no options, got {sorted(unused)}")
  datasets = _optional.require("sklearn.datasets", "vision")
  d = datasets.load_digits()
  x = (d.images.astype(np.float32) / 16.0)[..., None]
  return x, d.target.astype(np.int32)


_PALETTES = np.array([
    [[0.9, 0.2, 0.2], [0.1, 0.1, 0.3]],   # red on dark blue
    [[0.2, 0.8, 0.3], [0.3, 0.1, 0.1]],   # green on dark red
    [[0.9, 0.8, 0.2], [0.1, 0.2, 0.2]],   # yellow on dark teal
    [[0.3, 0.5, 0.9], [0.2, 0.2, 0.1]],   # blue on dark olive
], np.float32)
_SHAPES = ("disc", "square", "ring", "hstripes", "vstripes", "cross")


def _shape_mask(shape: str, yy: np.ndarray, xx: np.ndarray, cy: float,
                cx: float, r: float) -> np.ndarray:
  dy, dx = yy - cy, xx - cx
  if shape == "disc":
    return dy * dy + dx * dx <= r * r
  if shape == "square":
    return (np.abs(dy) <= r * 0.85) & (np.abs(dx) <= r * 0.85)
  if shape == "ring":
    d2 = dy * dy + dx * dx
    return (d2 <= r * r) & (d2 >= (0.55 * r) ** 2)
  if shape == "hstripes":
    return (np.floor(yy / 2) % 2 == 0) & (np.abs(dx) <= r) & (np.abs(dy) <= r)
  if shape == "vstripes":
    return (np.floor(xx / 2) % 2 == 0) & (np.abs(dx) <= r) & (np.abs(dy) <= r)
  if shape == "cross":
    w = max(r * 0.3, 0.8)
    return ((np.abs(dy) <= w) & (np.abs(dx) <= r)) | (
        (np.abs(dx) <= w) & (np.abs(dy) <= r))
  raise ValueError(f"unknown shape {shape!r}")


@DATASETS.register("procedural")
def procedural(*, num_classes: int = 10, per_class: int = 200,
               image_size: int = 16, noise: float = 0.15, seed: int = 0,
               num_shapes: int = 5) -> tuple[np.ndarray, np.ndarray]:
  """Coloured shapes `[num_classes * per_class, S, S, 3]` in [0, 1]."""
  if not 1 <= num_shapes <= len(_SHAPES):
    raise ValueError(f"data.num_shapes={num_shapes}: must be in "
                     f"[1, {len(_SHAPES)}]")
  if num_classes < 1 or num_classes > num_shapes * len(_PALETTES):
    raise ValueError(f"data.num_classes={num_classes}: must be in [1, "
                     f"num_shapes * {len(_PALETTES)}]")
  rng = np.random.default_rng(seed)
  s = image_size
  yy, xx = np.mgrid[0:s, 0:s].astype(np.float32)
  xs, ys = [], []
  for c in range(num_classes):
    shape = _SHAPES[c % num_shapes]
    fg, bg = _PALETTES[c // num_shapes]
    for _ in range(per_class):
      r = rng.uniform(0.22, 0.38) * s
      cy, cx = rng.uniform(r * 0.8, s - r * 0.8, size=2)
      mask = _shape_mask(shape, yy, xx, cy, cx, r)[..., None]
      jit_fg = np.clip(fg + rng.normal(0, 0.08, 3), 0, 1)
      jit_bg = np.clip(bg + rng.normal(0, 0.08, 3), 0, 1)
      img = np.where(mask, jit_fg, jit_bg) + rng.normal(0, noise, (s, s, 3))
      xs.append(np.clip(img, 0, 1).astype(np.float32))
      ys.append(c)
  return np.stack(xs), np.asarray(ys, np.int32)


def load(name: str, **options) -> tuple[np.ndarray, np.ndarray]:
  """(images `[N, H, W, C]` float32 in [0, 1], labels `[N]` int32)."""
  return DATASETS.get(name)(**options)


def split(images: np.ndarray, labels: np.ndarray, *, eval_fraction: float,
          seed: int = 0):
  """Stratified split: ((train_x, train_y), (eval_x, eval_y))."""
  if not 0 < eval_fraction < 1:
    raise ValueError(f"data.eval_fraction={eval_fraction}: must be in (0, 1)")
  rng = np.random.default_rng(seed)
  tr, ev = [], []
  for c in np.unique(labels):
    idx = rng.permutation(np.flatnonzero(labels == c))
    k = max(1, int(round(len(idx) * eval_fraction)))
    ev.append(idx[:k])
    tr.append(idx[k:])
  tr, ev = np.sort(np.concatenate(tr)), np.sort(np.concatenate(ev))
  return (images[tr], labels[tr]), (images[ev], labels[ev])


def check_classes(classes: Sequence[int], num_classes: int,
                  field: str = "target_classes") -> tuple[int, ...]:
  """`classes` as a sorted tuple, or one clear error (empty, out of range)."""
  out = tuple(sorted({int(c) for c in classes}))
  if not out:
    raise ValueError(f"{field} is empty: give at least one class id in "
                     f"[0, {num_classes})")
  bad = [c for c in out if not 0 <= c < num_classes]
  if bad:
    raise ValueError(f"{field} has class ids {bad} outside [0, "
                     f"{num_classes})")
  return out


def select_classes(images: np.ndarray, labels: np.ndarray,
                   classes: Sequence[int], *, num_classes: int | None = None,
                   field: str = "target_classes"):
  """The examples whose label is in `classes` (labels keep their ids)."""
  n = int(labels.max()) + 1 if num_classes is None else num_classes
  classes = check_classes(classes, n, field)
  keep = np.isin(labels, classes)
  return images[keep], labels[keep]


def examples(images: np.ndarray, labels: np.ndarray) -> grain.MapDataset:
  """A grain MapDataset of `{"images": [H, W, C], "labels": []}` dicts."""
  if len(images) != len(labels):
    raise ValueError(f"{len(images)} images but {len(labels)} labels")
  return grain.MapDataset.range(len(labels)).map(
      lambda i: {"images": images[i], "labels": labels[i]})


def batches(images: np.ndarray, labels: np.ndarray, *, batch_size: int,
            seed: int, shuffle: bool = True, repeat: bool = True
            ) -> grain.MapDataset:
  """Batched (shuffled, repeated) examples through `pipeline.batched_dataset`.

  Batches larger than the data set are capped at its size.
  """
  return pipeline.batched_dataset(
      examples(images, labels), global_batch=min(batch_size, len(labels)),
      seed=seed, shuffle=shuffle, repeat=repeat, process_index=0,
      process_count=1)
