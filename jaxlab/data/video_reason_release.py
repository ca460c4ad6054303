"""VideoReasonBench as released (paper R): questions/*.json and the videos.

    rows = load_questions("/data/video_reason_bench", max_rows=8)
    rows[0]["video"]      # "videos/cup/state3_op5_start.mp4" (under root)
    video_file(root, rows[0])

The release: github.com/llyx97/video_reason_bench `questions/<demo>.json`
(demos hrd = Number, file_sys, cup, grid = Circle, card, chip), each a
JSON object `{id: row}` whose rows carry `video` (a path relative to the
release root, "videos/<demo>/state{N}_op{T}_{start|end}.mp4"), `question`
(the full prompt: task instruction + question + "Provide a summary of the
final answer after 'Final Answer:'"), `answer` ("" for
prediction_operation, which is verified by simulation), `dim` (skill id),
`visible_time`, `num_state`, `num_operation` and the script (`states`,
`moves`, `coords`, `commands`, `actions`, by demo); the videos come from
the dataset huggingface.co/datasets/lyx97/reasoning_videos (`videos.zip`,
unpacked beside `questions/`). `eval_huggingface.py`'s `load_data` keys
each row `<demo>_<id>` and adds `demo`; the run then shuffles the rows
with `random.seed(42)` (`random.shuffle(items)`), which `load_questions`
repeats so that `max_rows` takes the rows that run would take first.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

DEMOS = ("hrd", "file_sys", "cup", "grid", "card", "chip")  # load_data order
FIELDS = ("video", "question", "answer", "dim", "visible_time", "num_state",
          "num_operation")


def load_questions(root: str, *, demos: tuple[str, ...] = DEMOS,
                   max_rows: int = 0, shuffle: bool = True
                   ) -> list[dict[str, Any]]:
  """The release's question rows (dicts with `id` and `demo` added)."""
  qdir = os.path.join(root, "questions")
  if not os.path.isdir(qdir):
    raise FileNotFoundError(
        f"{qdir} not found: data.path must be a local copy of the release "
        "(questions/*.json of github.com/llyx97/video_reason_bench and "
        "videos/ from lyx97/reasoning_videos' videos.zip, unpacked beside)")
  rows = {}
  for demo in demos:
    if demo not in DEMOS:
      raise ValueError(f"unknown demo {demo!r}; valid: {', '.join(DEMOS)}")
    path = os.path.join(qdir, f"{demo}.json")
    if not os.path.isfile(path):
      continue
    with open(path) as f:
      data = json.load(f)
    if not isinstance(data, dict):
      raise ValueError(f"{path}: expected a JSON object {{id: row}} as "
                       "released")
    for key, row in data.items():
      for field in FIELDS:
        if field not in row:
          raise ValueError(f"{path} row {key!r}: missing field {field!r}")
      rows[f"{demo}_{key}"] = dict(row, demo=demo, id=f"{demo}_{key}")
  if not rows:
    raise FileNotFoundError(f"{qdir}: no <demo>.json of {', '.join(demos)}")
  items = list(rows.items())
  if shuffle:
    state = random.getstate()
    random.seed(42)
    random.shuffle(items)
    random.setstate(state)
  out = [r for _, r in items]
  return out[:max_rows] if max_rows > 0 else out


def video_file(root: str, row: dict[str, Any]) -> str:
  """The row's video file (its `video` path under the release root)."""
  return os.path.join(root, row["video"])
