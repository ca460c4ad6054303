"""Paper G's released data: SophiaVL-R1's training rows, MathVista's eval.

    train = sophiavl.read_train(config.data)          # SophiaVL-R1 layout
    evals = sophiavl.read_eval(config.eval_data)      # MathVista layout
    img = sophiavl.image(train[0], sophiavl.image_root(config.data))

Training rows: SophiaVL-R1-130k as its repository describes and reads
them (github.com/kxfan2002/SophiaVL-R1, commit a818494:
`verl/data/demo.json`, the example row in `scripts/inference_single.py`,
`verl/data/dataset_info.json` and `verl/utils/dataset.py`): JSON (or
Parquet) files of rows {problem_id, problem, data_type ("image"),
problem_type ("multiple choice" / "numerical" / "OCR" / "free-form" /
"text"), options (list), process, solution ("<answer>5</answer>"), path
("./Math/CLEVR-Math/images/CLEVR_train_036427.png", relative to the
dataset's root, the `image_base_path`), data_source}. The Hub copy is
`bunny127/SophiaVL-R1-130k` (the README's link; its card was not in the
reference corpus, so the layout is the code's). The rows are read with
the `hf` source (`pipeline.read_split`: a local copy's JSON files are the
`train` split) and the images from `data.image_root` (default: the
`data.path` directory).

Evaluation rows: MathVista (`AI4Math/MathVista`, `testmini` / `test`;
github.com/lupantech/MathVista README "Data Format", commit 53d5258):
pid, question, image (a path such as "images/1.jpg"), decoded_image (the
Hub's `Image` feature), choices, unit, precision, answer, question_type,
answer_type, metadata, query. Scored by `jaxlab.evals.mathvista`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from jaxlab.data import image_rows
from jaxlab.data import pipeline

TRAIN_COLUMNS = ("problem", "problem_type", "solution")
EVAL_COLUMNS = ("question", "choices", "answer", "question_type",
                "answer_type")


def _check(rows, columns, where: str) -> None:
  names = set(getattr(rows, "column_names", None) or (
      rows[0].keys() if len(rows) else ()))
  missing = [c for c in columns if c not in names]
  if len(rows) and missing:
    raise ValueError(f"{where}: rows lack {missing} (have {sorted(names)})")


def _row_files(path: str) -> tuple[str, list[str]]:
  """(builder, files) of a local SophiaVL-R1 copy: its top-level JSON /
  JSONL files (the per-category files of `dataset_info.json`), else its
  Parquet files; ('', []) when it has neither (then the `hf` source's own
  inference applies). The images beside them would otherwise make
  `datasets` read the directory as an image folder."""
  for builder, exts in (("json", (".json", ".jsonl")),
                        ("parquet", (".parquet",))):
    files = sorted(
        os.path.join(d, f) for d in (path, os.path.join(path, "data"))
        if os.path.isdir(d) for f in os.listdir(d)
        if f.endswith(exts) and f not in ("dataset_info.json",))
    if files:
      return builder, files
  return "", []


def read_train(data_cfg, split: str | None = None, *,
               max_rows: int | None = None) -> list[dict[str, Any]]:
  """SophiaVL-R1 rows of `config.data` (`data.split`, `data.max_rows`).

  A local directory's row files are read as SophiaVL-R1's loader reads
  them (`load_dataset("json" | "parquet", data_files=...)`, the `train`
  split); a Hub id through the `hf` source."""
  path = os.path.expanduser(data_cfg.get("path", "") or "")
  builder, files = _row_files(path) if os.path.isdir(path) else ("", [])
  if files:
    import datasets  # pylint: disable=g-import-not-at-top
    rows = datasets.load_dataset(
        builder, data_files=files, split="train",
        cache_dir=data_cfg.get("cache_dir", "") or None)
    n = int(data_cfg.get("max_rows", 0) or 0) if max_rows is None else (
        max_rows)
    if n and n < len(rows):
      rows = rows.select(range(n))
  else:
    rows = pipeline.read_split(data_cfg, split, max_rows=max_rows)
  _check(rows, TRAIN_COLUMNS, f"data.path={data_cfg.get('path')!r} "
         "(SophiaVL-R1 layout)")
  return [dict(r) for r in rows]


def read_eval(data_cfg, split: str | None = None, *,
              max_rows: int | None = None) -> list[dict[str, Any]]:
  """MathVista-layout rows of an eval data section (`eval_data`)."""
  rows = pipeline.read_split(data_cfg, split, max_rows=max_rows)
  _check(rows, EVAL_COLUMNS, f"eval_data.path={data_cfg.get('path')!r} "
         "(MathVista layout)")
  return [dict(r) for r in rows]


def image_root(data_cfg) -> str:
  """Where relative image paths resolve: `image_root`, else the `path`
  directory (a local copy), else ''."""
  root = data_cfg.get("image_root", "") or ""
  if root:
    return os.path.expanduser(root)
  path = os.path.expanduser(data_cfg.get("path", "") or "")
  if os.path.isdir(path):
    return path
  if os.path.isfile(path):
    return os.path.dirname(path)
  return ""


def image(row: dict[str, Any], root: str) -> np.ndarray | None:
  """The row's image as uint8 `[H, W, 3]`, or None for a text row.

  A SophiaVL-R1 row's `path` (or `images`, the column its loader renames
  it to) and a MathVista row's `decoded_image` (else its `image` path),
  relative paths under `root`.
  """
  if row.get("data_type", "image") != "image":
    return None
  value = row.get("decoded_image")
  if value is None:
    value = next((row[k] for k in ("path", "images", "image")
                  if row.get(k) is not None), None)
  if isinstance(value, list):
    value = value[0] if value else None
  if isinstance(value, str) and not os.path.isabs(value):
    value = os.path.join(root, value)
  if isinstance(value, str) and not os.path.exists(value):
    raise FileNotFoundError(f"image {value!r} not found (set data.image_root"
                            " to the directory the rows' paths start from)")
  img = image_rows.decode_image(value)
  if hasattr(img, "convert"):
    img = np.asarray(img.convert("RGB"))
  img = np.asarray(img)
  if img.ndim == 2:
    img = np.repeat(img[..., None], 3, -1)
  return img.astype(np.uint8)
