"""Rows of a Hugging Face dataset: a Hub id, or a local copy laid out as on the Hub.

    rows = hf_source.load_rows("openai/gsm8k", subset="main", split="test")
    rows = hf_source.load_rows("/data/gsm8k", subset="main", split="train",
                               max_rows=1000)      # a local copy, same layout
    len(rows), rows[0]                              # random access, Arrow-backed

`config.data.source="hf"` reads `data.path` / `data.subset` / `data.split`
through `datasets.load_dataset` (`datasets` is a core dependency and needs no
torch): a dataset's configs (subsets) and splits are read the way `datasets`
reads them, from the README's `configs:` metadata or from the file layout
(`data/train-*.parquet`, `main/test-*.parquet`, `*.json`, `*.jsonl`,
`*.arrow`, `*.csv`). The rows are a memory-mapped Arrow table, so a split
larger than memory is fine and every process opens the same table and reads
only the rows it is given (`pipeline.batched_dataset`).

A local copy that declares no configs but keeps each one in a folder or file
named after it (`forget10/…`, `forget10.json`, or `data/qasper.jsonl` as in
LongBench's data.zip) is read with `data_dir` / `data_files`, so
`data.subset` names a released subset in every layout. A file per subset
names no split: its rows are the split asked for (LongBench's loading script
calls `data/<task>.jsonl` its `test` split; TOFU's files are `train`).
Nothing here downloads unless `path` is a Hub id (the user's VM, online).
"""

from __future__ import annotations

import glob
import hashlib
import os
from typing import Any

# File kinds `datasets` reads as a packaged builder (its `_EXTENSION_TO_MODULE`).
DATA_EXTENSIONS = (".parquet", ".json", ".jsonl", ".arrow", ".csv", ".tsv",
                   ".txt")


def _datasets():
  import datasets  # pylint: disable=g-import-not-at-top
  # A core dependency, imported late (1-2 s) and quiet: no progress bars in
  # logs.
  datasets.disable_progress_bars()
  return datasets


def is_local(path: str) -> bool:
  return os.path.exists(os.path.expanduser(path))


def _subset_kwargs(path: str, subset: str, split: str = ""
                   ) -> dict[str, Any]:
  """`load_dataset` keywords that select `subset` in a local copy (a file
  per subset is registered as `split`, default `train`)."""
  ds = _datasets()
  if not subset:
    return {}
  try:
    names = ds.get_dataset_config_names(path)
  except Exception:  # pylint: disable=broad-except
    names = []
  if subset in names:
    return {"name": subset}
  sub = os.path.join(path, subset)
  if os.path.isdir(sub):
    return {"data_dir": subset}
  files = []
  for folder in (path, os.path.join(path, "data")):
    files = sorted(f for f in glob.glob(os.path.join(
        glob.escape(folder), glob.escape(subset) + ".*"))
                   if f.endswith(DATA_EXTENSIONS))
    if files:
      break
  if files:  # one file per subset: no split name of its own
    name = split.split("[")[0] or "train"
    return {"data_files": {name: [os.path.relpath(f, path) for f in files]}}
  folders = sorted(d for d in os.listdir(path)
                   if os.path.isdir(os.path.join(path, d))
                   and not d.startswith("."))
  raise ValueError(
      f"data.subset={subset!r} is not in {path}: its configs are "
      f"{', '.join(n for n in names if n != 'default') or 'none declared'}"
      f"; folders: {', '.join(folders) or 'none'} (lay the copy out as on "
      "the Hub, or give data.subset='')")


def builder_kwargs(path: str, subset: str = "", split: str = ""
                   ) -> dict[str, Any]:
  """The `datasets.load_dataset` keywords for `path` / `subset` (`split`:
  the split a file-per-subset copy is read as).

  Raises:
    ValueError: `path` is neither an existing local copy nor a Hub id, or a
      local copy has no subset of that name.
  """
  if not path:
    raise ValueError("data.source='hf' needs data.path (a Hub dataset id "
                     "such as 'openai/gsm8k', or a local copy laid out as on "
                     "the Hub)")
  local = os.path.expanduser(path)
  if os.path.exists(local):
    if os.path.isfile(local):  # one data file
      ext = os.path.splitext(local)[1].lstrip(".")
      ext = {"jsonl": "json", "tsv": "csv", "txt": "text"}.get(ext, ext)
      return {"path": ext, "data_files": [local]}
    return {"path": local, **_subset_kwargs(local, subset, split)}
  if path.startswith(("/", "./", "../", "~")) or path.count("/") > 1:
    raise FileNotFoundError(f"data.path={path!r} does not exist (a local "
                            "copy laid out as on the Hub, or a Hub id "
                            "'org/name')")
  return {"path": path, **({"name": subset} if subset else {})}


def load_rows(path: str, *, subset: str = "", split: str = "train",
              max_rows: int = 0, cache_dir: str | None = None):
  """The `split` rows of `path` / `subset` as a `datasets.Dataset`.

  Args:
    path: a Hub id (downloaded into the `datasets` cache, online) or a local
      directory laid out as on the Hub, or one data file.
    subset: the dataset's config name as released ('' for none).
    split: a split name as released (`train`, `test`, `validation`, ...);
      `datasets`' slicing syntax (`train[:1000]`) works too.
    max_rows: keep only the first `max_rows` rows (0: all).
    cache_dir: the `datasets` cache (None: its default, `HF_DATASETS_CACHE`).

  Raises:
    FileNotFoundError / ValueError: one message naming the path, subset and
      split and what the dataset has instead.
  """
  ds = _datasets()
  kw = builder_kwargs(path, subset, split)
  where = f"data.path={path!r}" + (f", data.subset={subset!r}" if subset
                                   else "")
  try:
    rows = ds.load_dataset(**kw, split=split, cache_dir=cache_dir or None)
  except ValueError as e:
    if "unknown split" in str(e).lower():
      raise ValueError(f"{where}: no split {split!r} ({e}); set data.split /"
                       " data.eval_split to a released split") from None
    raise ValueError(f"{where}: {e}") from None
  except FileNotFoundError as e:
    raise FileNotFoundError(f"{where}: {e}") from None
  except Exception as e:  # pylint: disable=broad-except
    if type(e).__name__ in ("DatasetNotFoundError", "ConnectionError",
                            "OfflineModeIsEnabled", "HfHubHTTPError"):
      raise FileNotFoundError(
          f"{where}: cannot load it ({type(e).__name__}: {e}). Offline, pass "
          "a local copy laid out as on the Hub") from None
    raise
  if max_rows and max_rows < len(rows):
    rows = rows.select(range(int(max_rows)))
  return rows


def data_files(path: str, subset: str = "", split: str = "") -> list[str]:
  """The local files `load_rows` reads for `split` ('' = every split)."""
  ds = _datasets()
  kw = builder_kwargs(path, subset, split)
  local = os.path.expanduser(path)
  if not os.path.exists(local):
    return []
  builder = ds.load_dataset_builder(**kw)
  files = builder.config.data_files or {}
  split = split.split("[")[0]
  keys = [split] if split and split in files else list(files)
  return sorted({str(f) for k in keys for f in files[k]})


def digest(path: str, subset: str = "", splits: tuple[str, ...] = ()
           ) -> str | None:
  """A content digest of the rows `load_rows` reads.

  A local copy: the sha256 of the data files of `splits` (relative names and
  bytes), the same on every machine holding the same files. A Hub id: the
  `datasets` builder hash (it names the Hub revision). None when it cannot
  be computed (offline Hub id).
  """
  local = os.path.expanduser(path)
  if os.path.exists(local):
    files = sorted({f for s in (splits or ("",))
                    for f in data_files(path, subset, s)})
    root = local if os.path.isdir(local) else os.path.dirname(local)
    h = hashlib.sha256()
    for f in files:
      f = f.split("::")[0]
      h.update(os.path.relpath(f, root).encode() + b"\0")
      with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
          h.update(block)
    return h.hexdigest()
  try:
    return "hub:" + _datasets().load_dataset_builder(
        **builder_kwargs(path, subset)).hash
  except Exception:  # pylint: disable=broad-except
    return None
