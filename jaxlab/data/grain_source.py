"""Rows of ArrayRecord or Parquet files named by globs: `data.source="grain"`.

    rows = grain_source.load_rows("/data/c4/train-*.array_record")
    rows = grain_source.load_rows("gs://bucket/sft/*.parquet,/more/*.parquet")

The TPU-native file path (MaxText's `dataset_type=grain`): ArrayRecord
files through grain's `ArrayRecordDataSource` (random access, each record
read when a process asks for it), Parquet files through `datasets`' Parquet
reader (a memory-mapped Arrow table). Either way the result is a random-access
sequence of dict rows that `pipeline.Documents` tokenises lazily.

An ArrayRecord record is one row: a JSON object (`{"text": ...}`, `{"messages":
[...]}`, ...) or, when it is not JSON, UTF-8 text, read as `{text_key: text}`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import grain
from etils import epath

ARRAY_RECORD = (".array_record", ".arrayrecord")


def expand(globs: str | Sequence[str]) -> list[str]:
  """The files `globs` name (comma-separated; local or gs://), sorted.

  Raises:
    FileNotFoundError: a glob matches nothing.
  """
  if isinstance(globs, str):
    globs = [g.strip() for g in globs.split(",") if g.strip()]
  files = []
  for g in globs:
    p = epath.Path(g)
    if any(c in g for c in "*?["):
      parent = p.parent
      while any(c in str(parent) for c in "*?["):
        parent = parent.parent
      rel = str(p)[len(str(parent)):].lstrip("/")
      found = sorted(str(f) for f in parent.glob(rel)) if parent.exists() else []
    else:
      found = [str(p)] if p.exists() else []
    if not found:
      raise FileNotFoundError(f"data.path glob {g!r} matches no file")
    files += found
  return files


class _Records(Sequence):
  """ArrayRecord records decoded as dict rows (random access)."""

  def __init__(self, files: list[str], text_key: str):
    self._src = grain.sources.ArrayRecordDataSource(files)
    self._text_key = text_key

  def __len__(self) -> int:
    return len(self._src)

  def decode(self, record: bytes) -> dict[str, Any]:
    try:
      row = json.loads(record)
    except (json.JSONDecodeError, UnicodeDecodeError):
      row = None
    if isinstance(row, dict):
      return row
    try:
      return {self._text_key: record.decode("utf-8")}
    except UnicodeDecodeError:
      raise ValueError(
          "an ArrayRecord record is neither a JSON object nor UTF-8 text "
          f"({record[:40]!r}); write one JSON row per record") from None

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(len(self)))]
    return self.decode(self._src[int(i)])


def load_rows(path: str | Sequence[str], *, text_key: str = "text",
              max_rows: int = 0, cache_dir: str | None = None):
  """The rows of the ArrayRecord or Parquet files `path` names.

  Args:
    path: globs (a comma-separated string or a list), all ArrayRecord or all
      Parquet.
    text_key: the column a plain-text ArrayRecord record is read into.
    max_rows: keep the first `max_rows` rows (0: all).
    cache_dir: the `datasets` cache for Parquet (None: its default).
  """
  files = expand(path)
  kinds = {"array_record" if f.endswith(ARRAY_RECORD) else
           "parquet" if f.endswith(".parquet") else f for f in files}
  if len(kinds) > 1 or not kinds <= {"array_record", "parquet"}:
    raise ValueError(
        "data.source='grain' reads ArrayRecord (*.array_record) or Parquet "
        f"(*.parquet) files, one kind per split; got {sorted(kinds)}")
  if kinds == {"parquet"}:
    from jaxlab.data import hf_source  # pylint: disable=g-import-not-at-top
    rows = hf_source._datasets().load_dataset(  # pylint: disable=protected-access
        "parquet", data_files={"train": files}, split="train",
        cache_dir=cache_dir or None)
    if max_rows and max_rows < len(rows):
      rows = rows.select(range(int(max_rows)))
    return rows
  rows = _Records(files, text_key)
  if max_rows and max_rows < len(rows):
    return _Head(rows, int(max_rows))
  return rows


class _Head(Sequence):
  """The first `n` rows of a random-access source."""

  def __init__(self, rows, n: int):
    self._rows, self._n = rows, n

  def __len__(self) -> int:
    return self._n

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(self._n))]
    if not -self._n <= i < self._n:
      raise IndexError(i)
    return self._rows[i % self._n]


def digest(path: str | Sequence[str]) -> str:
  """sha256 of the files' names and bytes, in sorted order."""
  import hashlib  # pylint: disable=g-import-not-at-top
  h = hashlib.sha256()
  for f in expand(path):
    p = epath.Path(f)
    h.update(p.name.encode() + b"\0")
    with p.open("rb") as fh:
      for block in iter(lambda: fh.read(1 << 20), b""):
        h.update(block)
  return h.hexdigest()
