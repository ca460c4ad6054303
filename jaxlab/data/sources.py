"""Data sources: a generated corpus, JSONL files, and prepared TFDS datasets.

All return random-access sequences (`len` + `__getitem__`), which grain's
`MapDataset.source` wraps. Nothing here downloads: TFDS must already be
prepared in `data_dir` (`tfds build` or `builder.download_and_prepare`).
"""

from collections.abc import Sequence
import json
import os
from typing import Any

import numpy as np

_SUBJECTS = ("the cat", "the dog", "a bird", "my friend", "the teacher",
             "a small child", "the old man", "our neighbour", "the robot",
             "a farmer")
_VERBS = ("sees", "likes", "follows", "helps", "finds", "paints", "calls",
          "visits", "watches", "feeds")
_OBJECTS = ("the red ball", "a green tree", "the river", "an apple",
            "the blue house", "a quiet street", "the garden", "a yellow kite",
            "the big boat", "a warm bread")
_PLACES = ("in the morning", "at night", "near the lake", "after school",
           "in the park", "every day", "on sunday", "before dinner")


def synthetic_corpus(num_docs: int = 2000, *, seed: int = 0,
                     max_sentences: int = 4) -> list[str]:
  """Small English-like documents from a template grammar plus sums.

  Learnable structure for LM demos: word choice is uniform within slots, so
  a byte model's loss falls quickly from log(259) ~ 5.6 nats/token to about
  1 as it learns spelling, then the slot vocabulary.
  """
  rng = np.random.default_rng(seed)
  docs = []
  for _ in range(num_docs):
    sentences = []
    for _ in range(int(rng.integers(1, max_sentences + 1))):
      if rng.random() < 0.2:
        a, b = (int(x) for x in rng.integers(0, 50, size=2))
        sentences.append(f"{a} plus {b} is {a + b}.")
      else:
        s = (f"{_SUBJECTS[rng.integers(len(_SUBJECTS))]} "
             f"{_VERBS[rng.integers(len(_VERBS))]} "
             f"{_OBJECTS[rng.integers(len(_OBJECTS))]} "
             f"{_PLACES[rng.integers(len(_PLACES))]}.")
        sentences.append(s[0].upper() + s[1:])
    docs.append(" ".join(sentences))
  return docs


def read_jsonl(path: str, *, text_key: str | None = "text") -> list[Any]:
  """Rows of a JSONL file; with `text_key`, the list of that string field.

  Raises:
    FileNotFoundError: the file does not exist.
    ValueError: naming `path:line` for invalid JSON, a non-object row, or a
      missing / non-string `text_key`.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f"JSONL file not found: {path}")
  rows = []
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg} at column "
                         f"{e.colno}): {line.strip()[:80]!r}") from None
      if text_key is None:
        rows.append(row)
        continue
      if not isinstance(row, dict):
        raise ValueError(f"{path}:{lineno}: expected a JSON object with a "
                         f"{text_key!r} field, got {type(row).__name__}")
      if text_key not in row:
        raise ValueError(f"{path}:{lineno}: missing field {text_key!r} "
                         f"(fields: {', '.join(sorted(row))})")
      if not isinstance(row[text_key], str):
        raise ValueError(f"{path}:{lineno}: field {text_key!r} must be a "
                         f"string, got {type(row[text_key]).__name__}")
      rows.append(row[text_key])
  if not rows:
    raise ValueError(f"{path}: no rows")
  return rows


class _FieldSource(Sequence):
  """A random-access view of one (text) field of a TFDS data source."""

  def __init__(self, source, key: str):
    self._source, self._key = source, key

  def __len__(self) -> int:
    return len(self._source)

  def __getitem__(self, i):
    value = self._source[i][self._key]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def tfds_source(name: str, *, split: str, data_dir: str,
                text_key: str | None = "text") -> Sequence:
  """A prepared TFDS dataset as a random-access source (no download).

  Uses `tfds.data_source` (ArrayRecord files). With `text_key`, items are
  that field decoded to str; otherwise feature dicts.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  if not data_dir or not os.path.isdir(data_dir):
    raise FileNotFoundError(f"TFDS data_dir not found: {data_dir!r} (prepare "
                            f"{name!r} there first; nothing downloads)")
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir,
                              download=False)
  except Exception as e:  # tfds raises several types for "not prepared"
    raise FileNotFoundError(
        f"TFDS dataset {name!r} split {split!r} is not prepared in "
        f"{data_dir} (as array_record): {e}") from None
  return source if text_key is None else _FieldSource(source, text_key)


def read_chat_jsonl(path: str, *, key: str = "messages"
                    ) -> list[list[dict[str, Any]]]:
  """Conversations of a chat JSONL file: each row `{key: [{role, content}]}`.

  A row may also be a bare list of messages. Raises ValueError naming
  `path:line` for a row that is not a list of role/content messages.
  """
  convs = []
  for lineno, row in enumerate(read_jsonl(path, text_key=None), start=1):
    messages = row.get(key) if isinstance(row, dict) else row
    ok = isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("role"), str)
        and isinstance(m.get("content"), str) for m in messages)
    if not ok:
      raise ValueError(
          f"{path}: conversation {lineno}: expected a non-empty list of "
          f"{{'role': str, 'content': str}} messages under {key!r}, got "
          f"{str(row)[:80]!r}")
    convs.append(messages)
  return convs
