"""User retrieval data as JSONL, loaded with grain.

One JSON object per line:

  {"query": ITEM, "positives": [ITEM, ...], "negatives": [ITEM, ...],
   "instruction": "optional task instruction"}

where ITEM is a string (text) or {"text": "...", "image": "path.png"} with
either or both fields; relative image paths resolve against the JSONL file's
folder. Rows are checked when the file is read, so a row without positives,
a malformed item or an unreadable image path raises one error naming the
line. Images are decoded lazily (in the grain map) to float32
`[S, S, 3]` in [0, 1], resized to `image_size`.

Each element has the structure of `jaxlab.data.synthetic.retrieval`
examples: {"instruction", "query", "positives", "negatives", "line"}.
"""

import json
import os
from collections.abc import Sequence

import grain
import numpy as np

DEFAULT_INSTRUCTION = "Given a query, retrieve relevant documents"


def _check_item(item, where: str, base: str) -> dict:
  if isinstance(item, str):
    return {"text": item, "image": None}
  if not isinstance(item, dict) or not (item.get("text") or item.get("image")):
    raise ValueError(f"{where}: an item must be a string or an object with "
                     f"'text' and/or 'image'; got {item!r}")
  unknown = set(item) - {"text", "image"}
  if unknown:
    raise ValueError(f"{where}: unknown item fields {sorted(unknown)}; "
                     "valid: text, image")
  image = item.get("image")
  if image is not None:
    path = image if os.path.isabs(image) else os.path.join(base, image)
    if not (os.path.isfile(path) and os.access(path, os.R_OK)):
      raise FileNotFoundError(f"{where}: image path {image!r} is not a "
                              f"readable file (resolved to {path})")
    image = path
  return {"text": item.get("text"), "image": image}


def read_rows(path: str) -> list[dict]:
  """Parses and validates every line; errors name `path:line`."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"retrieval JSONL file not found: {path}")
  base = os.path.dirname(os.path.abspath(path))
  rows = []
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if not line.strip():
        continue
      where = f"{path}:{lineno}"
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{where}: invalid JSON ({e.msg})") from None
      if not isinstance(row, dict) or "query" not in row:
        raise ValueError(f"{where}: a row must be an object with 'query', "
                         "'positives' and optionally 'negatives'")
      pos = row.get("positives")
      if not isinstance(pos, list) or not pos:
        raise ValueError(f"{where}: row has no positives; 'positives' must "
                         "be a non-empty list")
      neg = row.get("negatives", [])
      if not isinstance(neg, list):
        raise ValueError(f"{where}: 'negatives' must be a list")
      rows.append({
          "line": lineno,
          "instruction": row.get("instruction", DEFAULT_INSTRUCTION),
          "query": _check_item(row["query"], f"{where} query", base),
          "positives": [_check_item(x, f"{where} positives[{i}]", base)
                        for i, x in enumerate(pos)],
          "negatives": [_check_item(x, f"{where} negatives[{i}]", base)
                        for i, x in enumerate(neg)],
          "source": path,
      })
  if not rows:
    raise ValueError(f"{path}: no rows")
  return rows


def load_image(path: str, image_size: int, where: str = "") -> np.ndarray:
  """Decodes an image file to float32 `[image_size, image_size, 3]`."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(path) as im:
      im = im.convert("RGB").resize((image_size, image_size),
                                    Image.BILINEAR)
      return np.asarray(im, np.float32) / 255.0
  except (OSError, ValueError) as e:
    raise ValueError(f"{where}: cannot read image {path!r}: {e}") from None


class _DecodeImages(grain.transforms.Map):

  def __init__(self, image_size: int):
    self.image_size = image_size

  def map(self, row: dict) -> dict:
    where = f"{row['source']}:{row['line']}"

    def load(item):
      if item["image"] is None:
        return dict(item)
      return {"text": item["text"],
              "image": load_image(item["image"], self.image_size, where)}

    return {**row, "query": load(row["query"]),
            "positives": [load(x) for x in row["positives"]],
            "negatives": [load(x) for x in row["negatives"]]}


def retrieval_dataset(path: str, *, image_size: int = 16,
                      seed: int | None = None) -> grain.MapDataset:
  """A grain `MapDataset` of validated rows with decoded images.

  With `seed`, rows are shuffled deterministically.
  """
  ds = grain.MapDataset.source(read_rows(path))
  if seed is not None:
    ds = ds.shuffle(seed=seed)
  return ds.map(_DecodeImages(image_size))


def sample_group(example: dict, num_negatives: int, rng: np.random.Generator,
                 pool: Sequence[dict] = ()) -> tuple[str, dict, list[dict]]:
  """(instruction, query, [positive, N negatives]) for one training group.

  Negatives come from the row (without replacement when it has enough);
  rows with too few are topped up with other rows' positives from `pool`
  (random negatives).
  """
  pos = example["positives"][rng.integers(len(example["positives"]))]
  negs = list(example["negatives"])
  if len(negs) >= num_negatives:
    idx = rng.choice(len(negs), num_negatives, replace=False)
    chosen = [negs[i] for i in idx]
  else:
    chosen = negs
    others = [p for r in pool if r is not example for p in r["positives"]]
    if len(chosen) + len(others) < num_negatives:
      raise ValueError(
          f"line {example.get('line', '?')}: needs {num_negatives} "
          f"negatives but has {len(negs)} and the pool offers "
          f"{len(others)} more")
    idx = rng.choice(len(others), num_negatives - len(chosen), replace=False)
    chosen = chosen + [others[i] for i in idx]
  return example["instruction"], example["query"], [pos] + chosen
