"""Seeded video generation in the paper's 2 x 2 design (spec R.1, R.4).

Per demo: state size x reveal x operation count, one video per cell and
count (the paper: sizes {3, 4} or {1, 2} sets, reveal {start, end}, 5..14
operations, 240 videos). A video's frames are: the revealed S_1 (reveal
"start") for `reveal_frames` frames, then `frames_per_op` frames per
operation drawing o_t over the masked S_t, then S_T masked (reveal "start")
or revealed for `reveal_frames` frames (reveal "end").
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from jaxlab.data.synthetic.video_reason import core
from jaxlab.data.synthetic.video_reason import questions as Q

MIN_SIZE = {"number": 2, "circle": 2, "cup": 2, "file": 1, "card": 1,
            "chip": 1}
MAX_SIZE = {"number": 6, "circle": 6, "cup": 6, "file": 2, "card": 2,
            "chip": 2}


def video_path(engine: core.Engine, size: int, num_ops: int, reveal: str,
               index: int = 0) -> str:
  suffix = f"_v{index}" if index else ""
  return (f"videos/{engine.key}/state{size}_op{num_ops}_{reveal}{suffix}"
          ".mp4")


def check_cell(demo: str, size: int, num_ops: int, reveal: str) -> None:
  """One clear error for a bad demo / size / operation count / reveal."""
  core.DEMOS.get(demo)
  if not MIN_SIZE[demo] <= size <= MAX_SIZE[demo]:
    raise ValueError(f"size={size} is out of range for demo {demo!r}: "
                     f"{MIN_SIZE[demo]}..{MAX_SIZE[demo]}")
  if num_ops < 2:
    raise ValueError(f"num_ops must be >= 2, got {num_ops}")
  if reveal not in core.REVEALS:
    raise ValueError(f"reveal must be one of {core.REVEALS}, got {reveal!r}")


def render_video(engine: core.Engine, states: Sequence, ops: Sequence,
                 reveal: str, *, frame_size: int = 32, frames_per_op: int = 1,
                 reveal_frames: int = 1):
  """(frames [F, H, W, 3] uint8, frame -> state index, frame -> op index)."""
  if frame_size < 8:
    raise ValueError(f"frame_size must be >= 8, got {frame_size}")
  frames, fs, fo = [], [], []

  def add(t, op_index, revealed, count):
    op = ops[op_index] if op_index >= 0 else None
    frame = engine.render(states[t], op, reveal=revealed,
                          frame_size=frame_size)
    for _ in range(count):
      frames.append(frame)
      fs.append(t)
      fo.append(op_index)

  if reveal == "start":
    add(0, -1, True, reveal_frames)
  for t in range(len(ops)):
    add(t, t, False, frames_per_op)
  add(len(ops), -1, reveal == "end", reveal_frames)
  return np.stack(frames).astype(np.uint8), fs, fo


def make_video(demo: str, size: int, num_ops: int, reveal: str, *,
               seed: int = 0, index: int = 0, frame_size: int = 32,
               frames_per_op: int = 1, reveal_frames: int = 1,
               skills: Sequence[str] = tuple(core.SKILLS)) -> Q.Video:
  """One video and its questions; a pure function of its arguments."""
  check_cell(demo, size, num_ops, reveal)
  engine = core.get_engine(demo)
  demo_id = core.DEMOS.names().index(demo)
  rng = np.random.default_rng(
      [seed, demo_id, size, num_ops, core.REVEALS.index(reveal), index])
  states = [engine.init_state(rng, size)]
  ops = []
  for _ in range(num_ops):
    op = engine.sample_op(states[-1], rng, ops[-1] if ops else None)
    ops.append(op)
    states.append(engine.apply(states[-1], op))
  frames, fs, fo = render_video(engine, states, ops, reveal,
                                frame_size=frame_size,
                                frames_per_op=frames_per_op,
                                reveal_frames=reveal_frames)
  path = video_path(engine, size, num_ops, reveal, index)
  qs = Q.make_questions(engine, states, ops, reveal, size, path, rng, skills)
  return Q.Video(demo, size, reveal, states, ops, frames, fs, fo, qs, path)


def generate(demos: Iterable[str] = tuple(core.DEMOS.names()),
             sizes: dict[str, Sequence[int]] | Sequence[int] | None = None,
             num_ops: Sequence[int] = tuple(range(5, 15)),
             reveals: Sequence[str] = core.REVEALS, *,
             videos_per_cell: int = 1, seed: int = 0, frame_size: int = 32,
             frames_per_op: int = 1, reveal_frames: int = 1,
             skills: Sequence[str] = tuple(core.SKILLS),
             progress: bool = True) -> list[Q.Video]:
  """The benchmark layout: every (demo, size, reveal, num_ops, index).

  With the defaults: 6 demos x 2 sizes x 2 reveals x 10 counts = 240 videos
  and 1440 questions, as the paper. `sizes` is one list for every demo or a
  dict demo -> sizes (default: each engine's two paper sizes).
  """
  demos = list(demos)
  for d in demos:
    core.DEMOS.get(d)
  for s in skills:
    core.check_skill(s)
  cells = []
  for d in demos:
    eng_sizes = (sizes.get(d, core.DEMOS.get(d).sizes)
                 if isinstance(sizes, dict) else
                 (sizes or core.DEMOS.get(d).sizes))
    for size in eng_sizes:
      for reveal in reveals:
        for t in num_ops:
          check_cell(d, size, t, reveal)
          cells += [(d, size, t, reveal, k) for k in range(videos_per_cell)]
  it = cells
  if progress:
    from tqdm import auto as tqdm  # pylint: disable=g-import-not-at-top
    it = tqdm.tqdm(cells, desc="videos", unit="video")
  return [make_video(d, size, t, reveal, seed=seed, index=k,
                     frame_size=frame_size, frames_per_op=frames_per_op,
                     reveal_frames=reveal_frames, skills=skills)
          for d, size, t, reveal, k in it]


def records(videos: Sequence[Q.Video]) -> list[dict]:
  return [r for v in videos for r in v.questions]


def vid2txt(video: Q.Video) -> str:
  """The paper's text-transcript baseline (App. C.2): states and operations
  as text, the masked states written '?'."""
  eng = video.engine
  lines = []
  for t, state in enumerate(video.states):
    shown = (t == 0 and video.reveal == "start") or (
        t == len(video.states) - 1 and video.reveal == "end")
    lines.append(f"State {t + 1}: "
                 + (eng.format_state(eng.view(state)) if shown else "?"))
    if t < len(video.ops):
      lines.append(f"Operation {t + 1}: {eng.op_text(video.ops[t])}")
  return "\n".join(lines)
