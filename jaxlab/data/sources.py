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

from jaxlab import _optional

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
  tfds = _optional.require("tensorflow_datasets", "tfds")
  data_dir = os.path.expanduser(data_dir) if data_dir else data_dir
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


# Row fields besides the messages that are chat-template keywords.
CHAT_ROW_KWARGS = ("tools", "documents")


def _message_problem(m: Any) -> str | None:
  """Why `m` is not a chat message (None when it is one)."""
  if not isinstance(m, dict) or not isinstance(m.get("role"), str):
    return "a message must be a dict with a string 'role'"
  content = m.get("content")
  calls = m.get("tool_calls")
  if "content" not in m and not calls:
    return (f"a message needs 'content' (a string, parts or null beside "
            f"'tool_calls'); it has {sorted(m)}")
  if calls is not None and not (isinstance(calls, list) and all(
      isinstance(c, dict) for c in calls)):
    return "'tool_calls' must be a list of dicts"
  if content is None:
    return None if calls else ("'content' may be null only beside "
                               "'tool_calls'")
  if isinstance(content, str):
    return None
  if isinstance(content, list) and all(
      isinstance(part, dict) and isinstance(part.get("type"), str)
      for part in content):
    return None  # content parts: {"type": "text" | "image" | ..., ...}
  return ("'content' must be a string, a list of {'type': ...} parts or "
          "null (with 'tool_calls')")


def read_chat_rows(path: str, *, key: str = "messages"
                   ) -> list[dict[str, Any]]:
  """Rows of a chat JSONL file: `{"messages": [...], "tools": [...]?}`.

  Each row is `{key: [messages], "tools"?: [...], "documents"?: [...]}` or a
  bare list of messages. A message is `{"role": str, "content": str | [parts]
  | null, ...}` (content parts such as `{"type": "image"}` / `{"type":
  "text", "text": ...}`; null content beside `tool_calls`); other message
  fields (`tool_calls`, `reasoning_content`, `name`, ...) are kept for the
  chat template. The returned rows have the messages under "messages" and
  the row's `tools`/`documents` (chat-template keywords) when present.
  Raises ValueError naming `path:line` for a malformed row.
  """
  rows = []
  for lineno, row in enumerate(read_jsonl(path, text_key=None), start=1):
    messages = row.get(key) if isinstance(row, dict) else row
    problem = None
    if not isinstance(messages, list) or not messages:
      problem = f"expected a non-empty list of messages under {key!r}"
    else:
      for j, m in enumerate(messages):
        why = _message_problem(m)
        if why:
          problem = f"message {j}: {why}"
          break
    extras = {}
    if problem is None and isinstance(row, dict):
      for name in CHAT_ROW_KWARGS:
        if row.get(name) is not None:
          if not isinstance(row[name], list):
            problem = f"{name!r} must be a list"
          extras[name] = row[name]
    if problem:
      raise ValueError(f"{path}: conversation {lineno}: {problem}, got "
                       f"{str(row)[:80]!r}")
    rows.append({"messages": messages, **extras})
  return rows


def read_chat_jsonl(path: str, *, key: str = "messages"
                    ) -> list[list[dict[str, Any]]]:
  """The conversations (message lists) of a chat JSONL file.

  See `read_chat_rows`, which also keeps each row's `tools`/`documents`.
  """
  return [row["messages"] for row in read_chat_rows(path, key=key)]
