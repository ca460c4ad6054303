"""Labelled image rows of a released classification dataset (ImageNet-1k).

    rows = image_rows.read(config.data, split="validation")  # hf/tfds/grain
    idx = image_rows.class_indices(rows, classes=(50, 62, 148))
    ds = image_rows.examples(rows, idx, processor)           # grain, lazy
    x, y = image_rows.arrays(rows, idx, processor)           # in memory

Where the rows come from (`config.data.source`):

* `tfds`: `tfds.data_source(data.tfds_name or data.path, split=...,
  data_dir=data.data_dir)` through `pipeline.read_split`; `imagenet2012`'s
  features are `image` (uint8 `[H, W, 3]`), `label` (ClassLabel, 1000
  classes) and `file_name` (the TFDS catalog's `imagenet2012` page), splits
  `train` / `validation`.
* `hf`: the Hub's `ILSVRC/imagenet-1k` (or a local copy laid out as on the
  Hub) through `pipeline.read_split`: columns `image` (an `Image` feature,
  decoded to PIL) and `label` (ClassLabel), splits `train` / `validation`
  / `test` (the dataset card).
* `grain`: `data.path` (train) / `data.eval_path` (the `eval_split`) is
  either an image-folder copy, one folder per class whose sorted names
  give the label ids (torchvision's `ImageFolder` convention; ImageNet's
  synset folders `n01440764`, ... sort into the 1000 class ids), read by
  `ImageFolder`; or globs of Parquet / ArrayRecord rows
  (`grain_source.load_rows`) with `image` (encoded bytes, `{"bytes",
  "path"}` as the Hub's Parquet stores it, or a file path in a JSON
  ArrayRecord row) and `label`.

A row's image becomes the model's input through an HF image processor
(`vision_processor.ClassifierProcessor`): `examples` / `arrays` give
`{"images": [h, w, 3] float32 (normalised), "labels": int32}`, the batch of
the `classification` loss (channels last; `pixel_values` transposed).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from jaxlab.data import pipeline

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".webp",
                    ".tif", ".tiff", ".gif")


class ImageFolder(Sequence):
  """An image-folder copy: `root/<class name>/<image file>` (random access).

  Classes are the sorted sub-folder names (label = index); files are
  sorted within each class. A row is `{"image": path, "label": int,
  "file_name": the path relative to root}`; `decode_image` opens the path.
  """

  def __init__(self, root: str):
    if not os.path.isdir(root):
      raise FileNotFoundError(f"image folder {root!r} not found")
    self.root = root
    self.classes = sorted(d for d in os.listdir(root)
                          if os.path.isdir(os.path.join(root, d)))
    if not self.classes:
      raise ValueError(f"image folder {root!r} has no class sub-folders "
                       "(expected root/<class>/<image>)")
    self._files: list[tuple[str, int]] = []
    for label, name in enumerate(self.classes):
      folder = os.path.join(root, name)
      for f in sorted(os.listdir(folder)):
        if f.lower().endswith(IMAGE_EXTENSIONS):
          self._files.append((os.path.join(name, f), label))
    if not self._files:
      raise ValueError(f"image folder {root!r} has no images "
                       f"({', '.join(IMAGE_EXTENSIONS)})")

  def __len__(self) -> int:
    return len(self._files)

  def label(self, i: int) -> int:
    """The label of row `i`, without opening the image."""
    return self._files[i][1]

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(len(self)))]
    rel, label = self._files[int(i)]
    return {"image": os.path.join(self.root, rel), "label": label,
            "file_name": rel}


def _is_image_folder(path: str) -> bool:
  return bool(path) and os.path.isdir(path) and any(
      os.path.isdir(os.path.join(path, d)) for d in os.listdir(path))


def read(data_cfg, split: str | None = None, *, max_rows: int | None = None):
  """The labelled image rows of one split of `config.data` (hf / tfds /
  grain; see the module docstring). `max_rows` (default `data.max_rows`;
  0: all) keeps the first rows: what the run reads."""
  get = data_cfg.get
  split = get("split", "train") if split is None else split
  max_rows = int(get("max_rows", 0) or 0) if max_rows is None else max_rows
  if get("source", "") == "grain":
    path = (get("eval_path", "") if split and split == get("eval_split")
            else get("path", ""))
    if _is_image_folder(path):
      rows = ImageFolder(path)
      if max_rows and max_rows < len(rows):
        return _Head(rows, max_rows)
      return rows
  return pipeline.read_split(data_cfg, split, max_rows=max_rows)


class _Head(Sequence):
  """The first `n` rows of an `ImageFolder` (labels still cheap)."""

  def __init__(self, rows: ImageFolder, n: int):
    self._rows, self._n = rows, n

  def __len__(self) -> int:
    return self._n

  def label(self, i: int) -> int:
    return self._rows.label(i)

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(self._n))]
    if not 0 <= i < self._n:
      raise IndexError(i)
    return self._rows[i]


def decode_image(value: Any) -> Any:
  """A row's `image` as what the processor reads (a PIL image or a uint8
  array): a PIL image or array as is, encoded bytes, `{"bytes", "path"}`
  (the Hub's Parquet), or a file path."""
  if isinstance(value, dict):
    value = value.get("bytes") or value.get("path")
  if isinstance(value, (bytes, bytearray)):
    from PIL import Image  # pylint: disable=g-import-not-at-top
    return Image.open(io.BytesIO(value))
  if isinstance(value, (str, os.PathLike)):
    from PIL import Image  # pylint: disable=g-import-not-at-top
    return Image.open(value)
  if value is None:
    raise ValueError("an image row has no image (expected `image`: an "
                     "array, bytes, {bytes, path} or a file path)")
  return value


def _label(row: Any, where: str) -> int:
  if not isinstance(row, dict) or "label" not in row:
    keys = sorted(row) if isinstance(row, dict) else type(row).__name__
    raise ValueError(f"{where}: an image row needs `image` and `label`, got "
                     f"{keys}")
  return int(row["label"])


def labels(rows) -> np.ndarray:
  """Every row's label `[N]` int64 (an image folder's from its paths;
  others read each row: for a large split, give `data.max_rows`)."""
  if hasattr(rows, "label"):
    return np.asarray([rows.label(i) for i in range(len(rows))], np.int64)
  if hasattr(rows, "column_names") and "label" in rows.column_names:
    return np.asarray(rows["label"], np.int64)   # datasets: one column
  return np.asarray([_label(rows[i], f"row {i}") for i in range(len(rows))],
                    np.int64)


def class_indices(rows, classes: Sequence[int]) -> np.ndarray:
  """Indices of the rows whose label is in `classes` (labels kept)."""
  return np.flatnonzero(np.isin(labels(rows), np.asarray(classes)))


def example(row: Any, processor) -> dict[str, np.ndarray]:
  """`{"images": [h, w, 3] float32, "labels": int32}` of one row."""
  pixel_values = processor.image(decode_image(row["image"]))
  return {"images": np.ascontiguousarray(np.moveaxis(pixel_values, 0, -1)),
          "labels": np.int32(_label(row, "image row"))}


def examples(rows, indices: Sequence[int], processor) -> grain.MapDataset:
  """A lazy grain MapDataset of `example`s of `rows[indices]`."""
  idx = np.asarray(indices, np.int64)
  return grain.MapDataset.range(len(idx)).map(
      lambda i: example(rows[int(idx[i])], processor))


def arrays(rows, indices: Sequence[int], processor
           ) -> tuple[np.ndarray, np.ndarray]:
  """(images `[N, h, w, 3]` float32, labels `[N]` int32) of
  `rows[indices]`, read and processed now."""
  out = [example(rows[int(i)], processor) for i in indices]
  if not out:
    raise ValueError("no rows of the requested classes were read; check "
                     "target_classes against data.max_rows")
  return (np.stack([e["images"] for e in out]),
          np.asarray([e["labels"] for e in out], np.int32))
