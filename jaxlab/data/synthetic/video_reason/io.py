"""Export and import in the paper's layout (spec R.1).

    ROOT/questions/<key>.json            one list of question records per demo
    ROOT/videos/<key>/state{N}_op{T}_{start|end}.mp4   (or .npz)

Records carry the script (`script.states` / `script.ops` as JSON, plus the
frame -> state / operation maps), so an imported video is the same object
as the exported one. mp4 files are lossless RGB H.264 (`libx264rgb`, crf 0)
written with imageio + imageio-ffmpeg; `fmt="npz"` needs no ffmpeg.
"""

from __future__ import annotations

import collections
import json
import os
from typing import Sequence

import numpy as np

from jaxlab import _optional
from jaxlab.data.synthetic.video_reason import core
from jaxlab.data.synthetic.video_reason import questions as Q

FORMATS = ("mp4", "npz")


def _check_fmt(fmt: str) -> None:
  if fmt not in FORMATS:
    raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")


def write_frames(path: str, frames: np.ndarray, fps: float = 2.0) -> None:
  """Frames [F, H, W, 3] uint8 -> a lossless mp4 (or .npz by extension)."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  if path.endswith(".npz"):
    np.savez_compressed(path, frames=frames)
    return
  iio = _optional.require("imageio.v2", "video")
  writer = iio.get_writer(path, fps=fps, codec="libx264rgb",
                          pixelformat="rgb24", macro_block_size=1,
                          ffmpeg_params=["-crf", "0", "-preset", "ultrafast"])
  try:
    for f in frames:
      writer.append_data(np.asarray(f, np.uint8))
  finally:
    writer.close()


def read_frames(path: str) -> np.ndarray:
  if not os.path.exists(path):
    raise FileNotFoundError(f"video file {path} does not exist")
  if path.endswith(".npz"):
    with np.load(path) as z:
      return z["frames"]
  iio = _optional.require("imageio.v2", "video")
  reader = iio.get_reader(path)
  try:
    return np.stack([np.asarray(f, np.uint8) for f in reader])
  finally:
    reader.close()


def _file_path(video_path: str, fmt: str) -> str:
  return video_path[:-4] + "." + fmt if video_path.endswith(".mp4") else \
      video_path


def export(videos: Sequence[Q.Video], root: str, fmt: str = "mp4",
           fps: float = 2.0) -> list[str]:
  """Writes the videos and questions under `root`; returns the JSON paths."""
  _check_fmt(fmt)
  by_key = collections.defaultdict(list)
  for v in videos:
    write_frames(os.path.join(root, _file_path(v.path, fmt)), v.frames, fps)
    script = {"states": Q.to_json(v.states), "ops": Q.to_json(v.ops),
              "op_texts": [v.engine.op_text(o) for o in v.ops],
              "frame_states": v.frame_states, "frame_ops": v.frame_ops,
              "file": _file_path(v.path, fmt)}
    for r in v.questions:
      by_key[v.engine.key].append(dict(r, script=script))
  os.makedirs(os.path.join(root, "questions"), exist_ok=True)
  out = []
  for key, recs in by_key.items():
    path = os.path.join(root, "questions", f"{key}.json")
    with open(path, "w") as f:
      json.dump(recs, f, indent=1)
    out.append(path)
  return out


def load(root: str) -> list[Q.Video]:
  """Videos (frames, script, questions) from an exported directory."""
  qdir = os.path.join(root, "questions")
  if not os.path.isdir(qdir):
    raise FileNotFoundError(f"{qdir} does not exist: expected the layout "
                            "ROOT/questions/<demo>.json + ROOT/videos/")
  videos = []
  for name in sorted(os.listdir(qdir)):
    if not name.endswith(".json"):
      continue
    with open(os.path.join(qdir, name)) as f:
      recs = json.load(f)
    grouped = collections.OrderedDict()
    for r in recs:
      grouped.setdefault(r["video"], []).append(r)
    for path, rs in grouped.items():
      script = rs[0]["script"]
      demo = rs[0]["demo"]
      core.DEMOS.get(demo)
      qs = [{k: v for k, v in r.items() if k != "script"} for r in rs]
      videos.append(Q.Video(
          demo=demo, size=rs[0]["num_state"], reveal=rs[0]["visible_time"],
          states=list(Q.from_json(script["states"])),
          ops=list(Q.from_json(script["ops"])),
          frames=read_frames(os.path.join(root, script["file"])),
          frame_states=list(script["frame_states"]),
          frame_ops=list(script["frame_ops"]), questions=qs, path=path))
  return videos
