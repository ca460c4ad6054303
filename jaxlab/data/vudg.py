"""VUDG as released (paper S): the multiple-choice rows and their videos.

    qs = from_rows(pipeline.read_split(config.data, "test"))   # hf source
    path = video_path(root, "test", qs[0])   # root/testset/<domain>/<video>
    videos, qs = load("/tmp/vudg/test_multi.json")   # a JSON list file

The release (github.com/VUDG-Video/VUDG, data/test_multi.json; the
dataset card huggingface.co/datasets/QLGalaxy/VUDG README.md: splits
train = train_multi.json, test = test_mul.json, test_open.json) is a JSON
list of `{QA_num, video, domain, question, answer, question_type}` rows
(S.2; the card's features list no QA_num): `question` is the stem followed
by newline-separated "(A) ..." options, `answer` a letter A-F,
`question_type` 1-4 (action, attribute, object, temporal). Videos are
files under data/trainset and data/testset, by domain (the zero-shot
script joins `ds_path/domain/video`). Domain ids as in the release's
`DOMAINS` (the shift types of S.1), "egocentric video" read as jaxlab's
"egocentric".

The procedural stand-in (`jaxlab.data.synthetic.video_domains`) writes and
reads the same schema.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxlab import _optional

# VUDG's `DOMAINS` (S.1): shift type -> domain code ids.
DOMAINS: dict[str, tuple[str, ...]] = {
    "style": ("cartoon", "movie-TVshow", "game", "virtual"),
    "viewpoint": ("egocentric", "surveillance", "shaky"),
    "environment": ("foggy", "night", "rainy", "snowy"),
}
ALL_DOMAINS: tuple[str, ...] = tuple(d for ds in DOMAINS.values() for d in ds)
SHIFT_TYPE: dict[str, str] = {d: s for s, ds in DOMAINS.items() for d in ds}
QUESTION_TYPES: dict[int, str] = {1: "action", 2: "attribute", 3: "object",
                                  4: "temporal"}
LETTERS = "ABCDEF"
# The release's domain ids where they differ from jaxlab's (test_multi.json
# and zero_shot/qwen2.5vl.py's DOMAINS write "egocentric video").
RELEASE_ALIASES: dict[str, str] = {"egocentric video": "egocentric"}
RELEASE_NAME: dict[str, str] = {v: k for k, v in RELEASE_ALIASES.items()}
# Video folders of the release (README "Data Preparation": data/trainset,
# data/testset; the zero-shot script reads <testset>/<domain>/<video>).
VIDEO_FOLDERS: dict[str, str] = {"train": "trainset", "test": "testset"}


def check_domains(domains: Sequence[str], field: str = "domains"
                  ) -> tuple[str, ...]:
  """The domains, or one clear error naming the unknown one."""
  for d in domains:
    if d not in SHIFT_TYPE:
      raise ValueError(f"{field}: unknown domain {d!r}; valid: "
                       f"{', '.join(ALL_DOMAINS)}")
  return tuple(domains)


def canonical_domain(name: str) -> str:
  """jaxlab's id of a domain named as in the release."""
  return RELEASE_ALIASES.get(name, name)


@dataclasses.dataclass(frozen=True)
class MCQ:
  """One multiple-choice row in VUDG's `test_multi.json` schema (S.2).

  `question` is the stem followed by newline-separated "(A) ..." options;
  `answer` the correct letter; `options` and `answer_text` are parsed from
  it (or set by the generator).
  """
  qa_num: int
  video: str
  domain: str
  question: str
  answer: str
  question_type: int
  stem: str
  options: tuple[str, ...]
  # The release's domain name (its video folder); not part of equality.
  folder: str = dataclasses.field(default="", compare=False)

  @property
  def answer_text(self) -> str:
    return self.options[LETTERS.index(self.answer)]

  @property
  def shift_type(self) -> str:
    return SHIFT_TYPE[self.domain]

  def to_json(self) -> dict[str, Any]:
    domain = self.folder or RELEASE_NAME.get(self.domain, self.domain)
    return {"QA_num": self.qa_num, "video": self.video,
            "domain": domain, "question": self.question,
            "answer": self.answer, "question_type": self.question_type}


def format_question(stem: str, options: Sequence[str]) -> str:
  return stem + "".join(f"\n({LETTERS[i]}) {o}" for i, o in enumerate(options))


_OPTION_RE = re.compile(r"^\(([A-F])\)\s*(.*)$")


def parse_question(text: str) -> tuple[str, tuple[str, ...]]:
  """(stem, options) of a VUDG question ("stem\\n(A) x\\n(B) y...")."""
  stem_lines, options = [], []
  for line in text.split("\n"):
    m = _OPTION_RE.match(line.strip())
    if m:
      if LETTERS.index(m.group(1)) != len(options):
        raise ValueError(f"options out of order at {line.strip()!r}")
      options.append(m.group(2).strip())
    elif options:
      options[-1] += " " + line.strip()   # a wrapped option
    else:
      stem_lines.append(line)
  return "\n".join(stem_lines).strip(), tuple(options)


def read_video(path: str, num_frames: int | None = None) -> np.ndarray:
  """Frames float32 `[F, H, W, 3]` in [0, 1], `num_frames` uniformly
  sampled (S.6). npz (key `frames`) / npy natively; other formats (mp4)
  through imageio when it and a plugin for the format are installed."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"video file {path} not found (video_root is "
                            "the folder the JSON's `video` paths are under)")
  if path.endswith(".npz"):
    with np.load(path) as z:
      if "frames" not in z:
        raise ValueError(f"{path}: npz without a `frames` array")
      arr = z["frames"]
  elif path.endswith(".npy"):
    arr = np.load(path)
  else:
    iio = _optional.require("imageio.v3", "video")
    try:
      arr = np.asarray(iio.imread(path))
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"cannot decode {path} ({e}); install imageio with "
                       "a video plugin (imageio[ffmpeg] or av) or convert "
                       "it to npz with a `frames` array") from e
  if arr.ndim != 4 or arr.shape[-1] != 3:
    raise ValueError(f"{path}: frames must be [F, H, W, 3], got "
                     f"{arr.shape}")
  arr = arr.astype(np.float32)
  if arr.max() > 1.0:
    arr = arr / 255.0
  if num_frames is not None:
    idx = np.linspace(0, len(arr) - 1, num_frames).round().astype(int)
    arr = arr[idx]
  return arr


def from_row(row, index: int = 0, where: str = "row") -> MCQ:
  """One released row (`{QA_num?, video, domain, question, answer,
  question_type}`; the dataset card's train split has no QA_num) as an
  `MCQ`. A bad row raises one error naming the row and the field."""
  for key in ("video", "domain", "question", "answer", "question_type"):
    if key not in row or row[key] is None:
      raise ValueError(f"{where}: missing field {key!r}")
  folder = str(row["domain"])
  domain = canonical_domain(folder)
  if domain not in SHIFT_TYPE:
    raise ValueError(f"{where}: unknown domain {folder!r}; valid: "
                     f"{', '.join(ALL_DOMAINS)} (or "
                     f"{', '.join(RELEASE_ALIASES)})")
  stem, options = parse_question(row["question"])
  answer = str(row["answer"]).strip().upper()
  if not 2 <= len(options) <= 6:
    raise ValueError(f"{where}: question has {len(options)} options "
                     "\"(A) ...\"; need 2-6")
  if answer not in LETTERS[:len(options)]:
    raise ValueError(f"{where}: answer {row['answer']!r} is not one of "
                     f"{LETTERS[:len(options)]}")
  qtype = int(row["question_type"])
  if qtype not in QUESTION_TYPES:
    raise ValueError(f"{where}: question_type {qtype} not in 1-4")
  qa_num = row.get("QA_num") if hasattr(row, "get") else None
  return MCQ(qa_num=int(index if qa_num is None else qa_num),
             video=str(row["video"]), domain=domain,
             question=row["question"], answer=answer, question_type=qtype,
             stem=stem, options=options, folder=folder)


def from_rows(rows, where: str = "VUDG") -> list[MCQ]:
  """The MCQs of released rows (a list of dicts or a datasets.Dataset)."""
  return [from_row(rows[i], i, f"{where} row {i}") for i in range(len(rows))]


def video_path(root: str, split: str, q: MCQ) -> str:
  """Where the release keeps `q`'s video: root/<trainset|testset>/<domain
  as released>/<video> (VUDG README; zero_shot/qwen2.5vl.py)."""
  if split not in VIDEO_FOLDERS:
    where = ", ".join(f"{k} ({v}/)" for k, v in VIDEO_FOLDERS.items())
    raise ValueError(f"split={split!r}: the VUDG videos are under {where}")
  return os.path.join(root, VIDEO_FOLDERS[split],
                      q.folder or RELEASE_NAME.get(q.domain, q.domain),
                      q.video)


def load(json_path: str, *, video_root: str | None = None,
         num_frames: int | None = None, load_videos: bool = True,
         domains: Sequence[str] | None = None):
  """Reads VUDG's multiple-choice JSON (a list of `{QA_num, video, domain,
  question, answer, question_type}` rows, S.2) and, optionally, its videos
  from `video_root` (default: the JSON's folder) as a
  `video_domains.VideoQASet`-like (videos, questions) pair. A bad row
  raises one error naming the row and the field."""
  with open(json_path) as f:
    rows = json.load(f)
  if not isinstance(rows, list):
    raise ValueError(f"{json_path}: expected a JSON list of question rows")
  root = video_root or os.path.dirname(os.path.abspath(json_path))
  keep = None if domains is None else set(check_domains(domains))
  questions, videos = [], {}
  for i, row in enumerate(rows):
    where = f"{json_path} row {i}"
    if "QA_num" not in row:
      raise ValueError(f"{where}: missing field 'QA_num'")
    q = from_row(row, i, where)
    if keep is not None and q.domain not in keep:
      continue
    questions.append(q)
    if load_videos and q.video not in videos:
      videos[q.video] = read_video(os.path.join(root, q.video), num_frames)
  return videos, questions
