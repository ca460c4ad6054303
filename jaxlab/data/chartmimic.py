"""ChartMimic's direct-mimic charts as released: image + gold Python script.

    rows = chartmimic.load_rows("/data/ChartMimic", subset="direct_600")
    rows = chartmimic.load_rows("ChartMimic/ChartMimic")   # Hub id (online)

The release (github.com/ChartMimic/ChartMimic README at c9e149c, "Download
Data"): `dataset-iclr.tar.gz` of the Hub dataset `ChartMimic/ChartMimic`,
extracted into `dataset/`, holds one directory per task, `direct_600/`,
`direct_1800/`, `customized_600/`, `customized_1800/` (the old release,
`dataset-old.tar.gz`: `ori_500/` for direct mimic). A direct task directory
holds, per chart, `<type>_<n>.pdf` (the chart; chart2code/data/data_utils.py
`Chart2CodeDataset` lists the `.pdf`s, sorted, and reads the `.png` beside
each, converting the PDF at 120 dpi when it is missing) and `<type>_<n>.py`
(the gold script; `Code4EvaluationDataset` lists the `.py`s). The direct
prompt's `figsize` is the chart's entry in the repository's
`dimentions_info.jsonl` (`idx` = `<type>_<n>`, `width`, `height` in inches;
agents/direct_agent.py `_get_pdf_dimensions`).

`path` is the extracted `dataset/` directory or a task directory itself
(`subset` then empty), or a Hub id: `dataset-iclr.tar.gz` is fetched with
`huggingface_hub.snapshot_download` and extracted beside it. The sizes come
from a `dimentions_info.jsonl` in the directory or one of its two parents
(where the repository keeps it), else from the gold script's `figsize=`.
ReachQA's chart-to-code test set (the paper's second benchmark) reads the
same way from its directory (`data/reachqa_test/`: `code/<NNNNN>.py`,
`images/<NNNNN>.jpg`).
Rows: `name`, `chart_type`, `image` (path of the `.png`), `code` (the gold
script), `width`, `height` (as the source writes them, for the prompt),
sorted by name; `max_rows` > 0 keeps the first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from typing import Any

DEFAULT_SUBSET = "direct_600"
ARCHIVE = "dataset-iclr.tar.gz"
DIMENSIONS = "dimentions_info.jsonl"  # (sic) the repository's file name
_FIGSIZE = re.compile(
    r"figsize\s*=\s*[\(\[]\s*([0-9.]+)\s*,\s*([0-9.]+)\s*[\)\]]")


def _hub_copy(repo_id: str) -> str:
  """The extracted release of a Hub dataset (online only)."""
  try:
    import huggingface_hub  # pylint: disable=g-import-not-at-top
    snap = huggingface_hub.snapshot_download(
        repo_id, repo_type="dataset", allow_patterns=[ARCHIVE])
  except Exception as e:  # pylint: disable=broad-except
    raise FileNotFoundError(
        f"data.path={repo_id!r} is not a directory and fetching it from the "
        f"Hugging Face Hub failed ({type(e).__name__}); download "
        f"{ARCHIVE} (`huggingface-cli download {repo_id} {ARCHIVE} "
        "--repo-type dataset`), extract it and set data.path to the "
        "directory") from None
  out = os.path.join(snap, "dataset")
  if not os.path.isdir(out):
    with tarfile.open(os.path.join(snap, ARCHIVE)) as tar:
      tar.extractall(out, filter="data")
  return out


def task_dir(path: str, subset: str = DEFAULT_SUBSET) -> str:
  """The directory of the task's charts (`path/subset`, or `path`)."""
  root = path if os.path.isdir(path) else _hub_copy(path)
  cands = ([os.path.join(root, subset), os.path.join(root, "dataset", subset)]
           if subset else []) + [root]
  for cand in cands:
    if os.path.isdir(cand) and (_is_reachqa(cand) or any(
        f.endswith(".py") for f in os.listdir(cand))):
      return cand
  raise FileNotFoundError(
      f"no ChartMimic task directory {subset or '(data.path itself)'!r} "
      f"with <type>_<n>.py / .png files under {root!r} (released layout: "
      f"{ARCHIVE} extracted: direct_600/, direct_1800/, ...; set "
      "data.subset to the task directory)")


def _is_reachqa(directory: str) -> bool:
  return (os.path.isdir(os.path.join(directory, "code"))
          and os.path.isdir(os.path.join(directory, "images")))


def _reachqa_rows(directory: str, max_rows: int) -> list[dict[str, Any]]:
  """ReachQA's test set (github.com/hewei2001/ReachQA, data/reachqa_test/
  at 7dea078): `code/<NNNNN>.py` the gold script of `images/<NNNNN>.jpg`
  (`data.json`'s QA rows point at the same images); the figsize from the
  script."""
  names = sorted(f[:-3] for f in os.listdir(os.path.join(directory, "code"))
                 if f.endswith(".py"))
  rows = []
  for name in names:
    image = os.path.join(directory, "images", name + ".jpg")
    if not os.path.isfile(image):
      raise FileNotFoundError(f"{image} is missing (ReachQA: images/"
                              "<NNNNN>.jpg beside code/<NNNNN>.py)")
    with open(os.path.join(directory, "code", name + ".py")) as f:
      code = f.read()
    width, height = _figsize(name, code)
    rows.append({"name": name, "chart_type": "", "image": image,
                 "code": code, "width": width, "height": height})
    if max_rows and len(rows) >= max_rows:
      break
  return rows


def _figsize(name: str, code: str) -> tuple[str, str]:
  m = _FIGSIZE.search(code)
  if m is None:
    raise ValueError(
        f"{name}: no entry in {DIMENSIONS} and no figsize= in its script: "
        "the direct-mimic prompt needs the figure size")
  return m.group(1), m.group(2)


def _dimensions(directory: str) -> dict[str, tuple[str, str]]:
  d = os.path.abspath(directory)
  for cand in (d, os.path.dirname(d), os.path.dirname(os.path.dirname(d))):
    p = os.path.join(cand, DIMENSIONS)
    if os.path.isfile(p):
      out = {}
      with open(p) as f:
        for line in f:
          if line.strip():
            r = json.loads(line)
            out[str(r["idx"])] = (str(r["width"]), str(r["height"]))
      return out
  return {}


def load_rows(path: str, *, subset: str = DEFAULT_SUBSET,
              max_rows: int = 0) -> list[dict[str, Any]]:
  """The charts of one task directory as released (see the module doc)."""
  directory = task_dir(path, subset)
  if _is_reachqa(directory):
    return _reachqa_rows(directory, max_rows)
  dims = _dimensions(directory)
  names = sorted(f[:-3] for f in os.listdir(directory) if f.endswith(".py"))
  rows = []
  for name in names:
    image = os.path.join(directory, name + ".png")
    if not os.path.isfile(image):
      raise FileNotFoundError(
          f"{image} is missing: ChartMimic reads each chart's .png beside "
          "its .pdf (convert the PDF at 120 dpi, as its data_utils does)")
    with open(os.path.join(directory, name + ".py")) as f:
      code = f.read()
    idx = "_".join(name.split("_")[:2])
    if idx in dims:
      width, height = dims[idx]
    else:
      width, height = _figsize(name, code)
    rows.append({"name": name, "chart_type": name.split("_")[0],
                 "image": image, "code": code, "width": width,
                 "height": height})
    if max_rows and len(rows) >= max_rows:
      break
  return rows


def read_image(path: str):
  """The chart image as a uint8 `[H, W, 3]` array."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
  with Image.open(path) as im:
    return np.asarray(im.convert("RGB"), np.uint8)


def digest(rows: list[dict[str, Any]]) -> str:
  """sha256 of the rows' files (chart name, its .png and its .py bytes)."""
  h = hashlib.sha256()
  for r in rows:
    h.update(r["name"].encode() + b"\0")
    with open(r["image"], "rb") as f:
      h.update(f.read())
    h.update(r["code"].encode() + b"\0")
  return h.hexdigest()
