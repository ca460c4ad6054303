"""Mini-VUDG: procedural multiple-choice video QA under 11 domain shifts.

    train = generate("train", clips_per_domain=24, seed=0, num_frames=8,
                     size=16)
    train.questions[0].question   # "What does the person do first?\n(A) ..."
    train.frames(train.questions[0].video)   # float32 [F, S, S, 3] in [0, 1]
    export(train, "/tmp/vudg")              # VUDG layout: JSON + npz videos
    again = load("/tmp/vudg/train.json")    # also reads the real VUDG files

The stand-in of papers/O-S.md S.6 [inferred design]. A *script* (one clip)
is an actor (head + body blob) doing two actions in sequence (first half,
second half of the clip; K = 8 actions: walk left, walk right, jump,
crouch, wave, spin, throw, lift) beside one object (6 shapes x 8 colours)
on a sky/ground background. Four questions per clip, one per VUDG question
type (S.2): 1 action ("What does the person do first?"), 2 attribute
("What colour is the <shape>?"), 3 object ("Which object is in the
scene?"), 4 temporal ("What does the person do after they <first
action>?"). Each has 6 options: the answer and 5 distractors from the same
vocabulary (for actions, never the clip's other action), shuffled; letters
A-F.

Each clip is rendered in exactly one of the 11 VUDG domains (S.1: the code
ids of its `DOMAINS` dict), by a deterministic transform of the clean
render: style (cartoon: posterise + thick edges; game: palette quantisation
+ HUD; movie-TVshow: letterbox + film grain; virtual: flat shading +
gradient sky), viewpoint (egocentric: zoomed crop following the actor with
forward drift; surveillance: high-angle downscale, grayscale, timestamp;
shaky: random-walk translation jitter) and environment (foggy: depth-ramp
blend to grey, low contrast; night: gamma 2.5, blue tint, sensor noise;
rainy: diagonal streaks; snowy: falling white particles). Train and test
scripts come from disjoint seed streams (source isolation, S.1).

Everything is seeded: the same (split, domains, clips_per_domain, seed,
num_frames, size) gives identical frames, questions and answers.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import numpy as np

from jaxlab.data import vudg as release
# The release's schema lives in jaxlab.data.vudg; re-exported here.
from jaxlab.data.vudg import (  # pylint: disable=unused-import
    ALL_DOMAINS, DOMAINS, LETTERS, MCQ, QUESTION_TYPES, RELEASE_ALIASES,
    SHIFT_TYPE, check_domains, format_question, parse_question, read_video)

ACTIONS = ("walk left", "walk right", "jump", "crouch", "wave", "spin",
           "throw", "lift")
COLOURS = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.2),
           "blue": (0.1, 0.3, 0.95), "yellow": (0.95, 0.9, 0.1),
           "purple": (0.6, 0.1, 0.8), "cyan": (0.1, 0.9, 0.9),
           "orange": (1.0, 0.55, 0.0), "pink": (1.0, 0.5, 0.75)}
SHAPES = ("ball", "box", "ring", "bar", "cross", "pole")
SPLITS = ("train", "test")
_SPLIT_STREAM = {"train": 0, "test": 1}
_ACTOR = (0.95, 0.8, 0.6)
_SKIES = ((0.55, 0.75, 0.95), (0.7, 0.8, 0.9), (0.6, 0.7, 0.8),
          (0.8, 0.85, 0.95))
_GROUNDS = ((0.35, 0.55, 0.3), (0.5, 0.45, 0.35), (0.45, 0.45, 0.45),
            (0.4, 0.5, 0.3))


def vocabulary() -> tuple[str, ...]:
  """Every answer string (one tokenizer special each keeps prompts short)."""
  return ACTIONS + tuple(COLOURS) + SHAPES


# -- scripts and clean rendering -----------------------------------------------


@dataclasses.dataclass(frozen=True)
class Script:
  """One clip's latent content (what the questions are generated from)."""
  actions: tuple[str, str]
  colour: str
  shape: str
  sky: int
  ground: int
  x0: float          # actor's start column in units of size / 16
  object_side: int   # +1: object right of the actor, -1: left


def sample_script(rng: np.random.Generator) -> Script:
  a1, a2 = rng.choice(len(ACTIONS), 2, replace=False)
  return Script(actions=(ACTIONS[a1], ACTIONS[a2]),
                colour=tuple(COLOURS)[rng.integers(len(COLOURS))],
                shape=SHAPES[rng.integers(len(SHAPES))],
                sky=int(rng.integers(len(_SKIES))),
                ground=int(rng.integers(len(_GROUNDS))),
                x0=float(rng.uniform(5.0, 9.0)),
                object_side=int(rng.choice([-1, 1])))


def _rect(img, x0, y0, x1, y1, colour):
  s = img.shape[0]
  xa, xb = int(np.clip(round(x0), 0, s)), int(np.clip(round(x1), 0, s))
  ya, yb = int(np.clip(round(y0), 0, s)), int(np.clip(round(y1), 0, s))
  if xb > xa and yb > ya:
    img[ya:yb, xa:xb] = colour


def _draw_object(img, shape, cx, cy, u, colour):
  r = 1.5 * u
  if shape == "ball":
    s = img.shape[0]
    yy, xx = np.mgrid[0:s, 0:s] + 0.5
    img[(xx - cx) ** 2 + (yy - cy) ** 2 <= r * r] = colour
  elif shape == "box":
    _rect(img, cx - r, cy - r, cx + r, cy + r, colour)
  elif shape == "ring":
    _rect(img, cx - r, cy - r, cx + r, cy + r, colour)
    _rect(img, cx - r + u, cy - r + u, cx + r - u, cy + r - u,
          (0.5, 0.5, 0.5))
  elif shape == "bar":
    _rect(img, cx - 2 * r, cy - 0.5 * u, cx + 2 * r, cy + 0.5 * u, colour)
  elif shape == "cross":
    _rect(img, cx - r, cy - 0.5 * u, cx + r, cy + 0.5 * u, colour)
    _rect(img, cx - 0.5 * u, cy - r, cx + 0.5 * u, cy + r, colour)
  else:  # pole
    _rect(img, cx - 0.5 * u, cy - 2 * r, cx + 0.5 * u, cy + 2 * r, colour)


def render_clean(script: Script, num_frames: int, size: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(frames `[F, S, S, 3]` float32, foreground mask `[F, S, S]`, actor
  centre `[F, 2]` (x, y) in pixels) of the script before any domain."""
  u = size / 16.0
  ground_y = 13.0 * u
  sky, ground = np.array(_SKIES[script.sky]), np.array(_GROUNDS[script.ground])
  frames = np.zeros((num_frames, size, size, 3), np.float32)
  fg = np.zeros((num_frames, size, size), bool)
  centres = np.zeros((num_frames, 2), np.float32)
  half = max(num_frames // 2, 1)
  x = script.x0 * u
  obj_colour = np.array(COLOURS[script.colour])
  for t in range(num_frames):
    seg = 0 if t < half else 1
    action = script.actions[seg]
    n_seg = half if seg == 0 else num_frames - half
    k = t if seg == 0 else t - half
    phase = k / max(n_seg - 1, 1)
    bg = np.zeros((size, size, 3), np.float32)
    bg[:] = sky
    bg[int(round(ground_y)):] = ground
    img = bg.copy()
    body_w, body_h, lift = 2.0 * u, 4.0 * u, 0.0
    arm_up = False
    ox = x + script.object_side * 3.5 * u
    oy = ground_y - 1.5 * u
    if action == "walk left":
      x -= 0.8 * u
    elif action == "walk right":
      x += 0.8 * u
    elif action == "jump":
      lift = 3.0 * u * np.sin(np.pi * phase)
    elif action == "crouch":
      body_h = (4.0 - 2.0 * phase) * u
    elif action == "wave":
      arm_up = k % 2 == 0
    elif action == "spin":
      body_w = (2.0, 0.8, 2.0, 3.2)[k % 4] * u
    elif action == "throw":
      ox = x + script.object_side * (2.0 + 4.0 * phase) * u
      oy = ground_y - (1.5 + 5.0 * np.sin(np.pi * 0.5 * phase)) * u
    elif action == "lift":
      ox = x + script.object_side * 2.0 * u
      oy = ground_y - (1.5 + 6.0 * phase) * u
    x = float(np.clip(x, 2.0 * u, 14.0 * u))
    top = ground_y - body_h - lift
    _rect(img, x - body_w / 2, top, x + body_w / 2, ground_y - lift, _ACTOR)
    _rect(img, x - u, top - 2 * u, x + u, top, _ACTOR)          # head
    if arm_up:
      _rect(img, x + body_w / 2, top - 2 * u, x + body_w / 2 + u, top,
            _ACTOR)
    else:
      _rect(img, x + body_w / 2, top, x + body_w / 2 + u, top + 2 * u,
            _ACTOR)
    _draw_object(img, script.shape, ox, oy, u, obj_colour)
    frames[t] = img
    fg[t] = np.any(np.abs(img - bg) > 1e-6, axis=-1)
    centres[t] = (x, top)
  return frames, fg, centres


# -- the 11 domain transforms ------------------------------------------------------


def _shift(img, dx, dy):
  """Translate by integer pixels, edges repeated."""
  s = img.shape[0]
  ys = np.clip(np.arange(s) - dy, 0, s - 1)
  xs = np.clip(np.arange(s) - dx, 0, s - 1)
  return img[ys][:, xs]


def _resize_nearest(img, out):
  s = img.shape[0]
  idx = np.minimum((np.arange(out) * s / out).astype(int), s - 1)
  return img[idx][:, idx]


def _cartoon(frames, fg, centres, rng):
  del fg, centres, rng
  out = np.round(frames * 3.0) / 3.0
  lum = out.mean(-1)
  edge = (np.abs(np.diff(lum, axis=1, prepend=lum[:, :1])) +
          np.abs(np.diff(lum, axis=2, prepend=lum[:, :, :1])))
  out[edge > 0.15] = 0.05
  return out


_GAME_PALETTE = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 0], [0, 1, 0],
                          [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1],
                          [0.5, 0.5, 0.5], [1, 0.5, 0], [0.5, 0.8, 1],
                          [0.3, 0.5, 0.2], [0.95, 0.75, 0.55]], np.float32)


def _game(frames, fg, centres, rng):
  del fg, centres, rng
  d = ((frames[..., None, :] - _GAME_PALETTE) ** 2).sum(-1)
  out = _GAME_PALETTE[np.argmin(d, -1)]
  s = frames.shape[1]
  bar = max(s // 16, 1)
  out[:, :bar] = (0.1, 0.1, 0.1)
  out[:, :bar, : s // 2] = (0.0, 1.0, 0.0)   # health bar HUD
  return out


def _movie(frames, fg, centres, rng):
  del fg, centres
  s = frames.shape[1]
  out = frames + rng.normal(0.0, 0.06, frames.shape).astype(np.float32)
  out = 0.9 * out + 0.05 * np.array([1.0, 0.9, 0.7], np.float32)  # grade
  bar = max(s // 8, 1)
  out[:, :bar] = 0.0
  out[:, s - bar:] = 0.0
  return out


def _virtual(frames, fg, centres, rng):
  del centres, rng
  s = frames.shape[1]
  grad = np.linspace(0.0, 1.0, s, dtype=np.float32)[:, None, None]
  sky = (1 - grad) * np.array([0.2, 0.3, 0.9]) + grad * np.array(
      [0.95, 0.95, 1.0])
  out = np.round(frames * 2.0) / 2.0 * 0.8 + 0.1       # flat shading
  ground_row = int(round(13.0 * s / 16.0))
  bg = np.broadcast_to(sky[None], frames.shape).copy()
  bg[:, ground_row:] = (0.2, 0.6, 0.2)
  return np.where(fg[..., None], out, bg)


def _egocentric(frames, fg, centres, rng):
  del fg, rng
  f, s = frames.shape[:2]
  out = np.empty_like(frames)
  for t in range(f):
    zoom = 0.75 - 0.15 * t / max(f - 1, 1)            # forward drift
    crop = max(int(round(s * zoom)), 2)
    cx, cy = centres[t]
    x0 = int(np.clip(round(cx - crop / 2), 0, s - crop))
    y0 = int(np.clip(round(cy + 2 - crop / 2), 0, s - crop))
    out[t] = _resize_nearest(frames[t, y0:y0 + crop, x0:x0 + crop], s)
  return out


def _surveillance(frames, fg, centres, rng):
  del fg, centres, rng
  f, s = frames.shape[:2]
  small = np.stack([_resize_nearest(x, s // 2 + s // 4) for x in frames])
  out = np.full_like(frames, 0.3)
  k = small.shape[1]
  out[:, s - k:, (s - k) // 2:(s - k) // 2 + k] = small   # high angle
  out = np.repeat(out.mean(-1, keepdims=True), 3, -1)     # grayscale
  w = max(s // 16, 1)
  for t in range(f):                                      # timestamp
    digits = t + 1
    out[t, :w, : min(digits * w, s)] = 1.0
  return out


def _shaky(frames, fg, centres, rng):
  del fg, centres
  s = frames.shape[1]
  amp = max(s // 8, 1)
  steps = rng.integers(-amp, amp + 1, (frames.shape[0], 2))
  walk = np.clip(np.cumsum(steps, 0), -2 * amp, 2 * amp)
  return np.stack([_shift(x, int(dx), int(dy))
                   for x, (dx, dy) in zip(frames, walk)])


def _foggy(frames, fg, centres, rng):
  del fg, centres, rng
  s = frames.shape[1]
  depth = np.linspace(0.85, 0.4, s, dtype=np.float32)[:, None, None]
  grey = np.float32(0.75)
  out = frames * (1 - depth) + grey * depth
  return 0.5 + 0.7 * (out - 0.5)


def _night(frames, fg, centres, rng):
  del fg, centres
  out = np.power(np.clip(frames, 0, 1), 2.5)
  out = out * np.array([0.55, 0.65, 1.0], np.float32)
  return out + rng.normal(0.0, 0.04, frames.shape).astype(np.float32)


def _rainy(frames, fg, centres, rng):
  del fg, centres
  f, s = frames.shape[:2]
  out = frames * 0.8
  n = max(s // 3, 2)
  for t in range(f):
    xs = rng.integers(0, s, n)
    ys = rng.integers(0, s, n)
    for x, y in zip(xs, ys):
      for j in range(max(s // 6, 2)):                      # diagonal streak
        yy, xx = y + j, x - j // 2
        if 0 <= yy < s and 0 <= xx < s:
          out[t, yy, xx] = 0.5 * out[t, yy, xx] + 0.5 * np.array(
              [0.75, 0.8, 0.95])
  return out


def _snowy(frames, fg, centres, rng):
  del fg, centres
  f, s = frames.shape[:2]
  out = frames * 0.85 + 0.15
  ground_row = int(round(13.0 * s / 16.0))
  out[:, ground_row:] = 0.9                                 # snow cover
  n = max(s // 2, 4)
  px = rng.integers(0, s, n)
  py = rng.integers(0, s, n)
  vy = rng.integers(1, max(s // 8, 1) + 2, n)
  for t in range(f):
    ys = (py + vy * t) % s
    xs = (px + t * (rng.integers(-1, 2, n))) % s
    out[t, ys, xs] = 1.0
  return out


TRANSFORMS = {"cartoon": _cartoon, "movie-TVshow": _movie, "game": _game,
              "virtual": _virtual, "egocentric": _egocentric,
              "surveillance": _surveillance, "shaky": _shaky,
              "foggy": _foggy, "night": _night, "rainy": _rainy,
              "snowy": _snowy}


def render(script: Script, domain: str, *, num_frames: int, size: int,
           rng: np.random.Generator) -> np.ndarray:
  """Frames `[F, S, S, 3]` float32 in [0, 1] of `script` in `domain`."""
  check_domains([domain], "domain")
  frames, fg, centres = render_clean(script, num_frames, size)
  return np.clip(TRANSFORMS[domain](frames, fg, centres, rng), 0.0,
                 1.0).astype(np.float32)


# -- questions -------------------------------------------------------------------


def _mcq(rng, vocab, answer, exclude, stem, *, qa_num, video, domain, qtype):
  pool = [w for w in vocab if w != answer and w not in exclude]
  distractors = [pool[i] for i in rng.choice(len(pool), 5, replace=False)]
  options = distractors + [answer]
  order = rng.permutation(6)
  options = tuple(options[i] for i in order)
  letter = LETTERS[options.index(answer)]
  return MCQ(qa_num=qa_num, video=video, domain=domain,
             question=format_question(stem, options), answer=letter,
             question_type=qtype, stem=stem, options=options)


def questions_for(script: Script, rng: np.random.Generator, *, video: str,
                  domain: str, first_qa_num: int) -> list[MCQ]:
  """The four questions (types 1-4) of one clip, answers from the script."""
  a1, a2 = script.actions
  kw = dict(video=video, domain=domain)
  return [
      _mcq(rng, ACTIONS, a1, (a2,), "What does the person do first?",
           qa_num=first_qa_num, qtype=1, **kw),
      _mcq(rng, tuple(COLOURS), script.colour, (),
           f"What colour is the {script.shape}?", qa_num=first_qa_num + 1,
           qtype=2, **kw),
      _mcq(rng, SHAPES, script.shape, (), "Which object is in the scene?",
           qa_num=first_qa_num + 2, qtype=3, **kw),
      _mcq(rng, ACTIONS, a2, (a1,),
           f"What does the person do after they {a1}?",
           qa_num=first_qa_num + 3, qtype=4, **kw),
  ]


# -- data sets -----------------------------------------------------------------------


@dataclasses.dataclass
class VideoQASet:
  """Clips (video id -> frames `[F, S, S, 3]` float32) and their MCQs."""
  videos: dict[str, np.ndarray]
  questions: list[MCQ]
  scripts: dict[str, Script] = dataclasses.field(default_factory=dict)

  def frames(self, video: str) -> np.ndarray:
    if video not in self.videos:
      raise KeyError(f"video {video!r} is not in this set (its question "
                     "names a file that was not loaded)")
    return self.videos[video]

  def domains(self) -> tuple[str, ...]:
    seen = {q.domain for q in self.questions}
    return tuple(d for d in ALL_DOMAINS if d in seen)

  def select(self, domains: Sequence[str]) -> VideoQASet:
    """The questions (and their clips) of `domains`."""
    keep = set(check_domains(domains))
    qs = [q for q in self.questions if q.domain in keep]
    vids = {q.video for q in qs}
    return VideoQASet({v: self.videos[v] for v in vids if v in self.videos},
                      qs, {v: s for v, s in self.scripts.items()
                           if v in vids})


def generate(split: str, *, domains: Sequence[str] = ALL_DOMAINS,
             clips_per_domain: int = 8, seed: int = 0, num_frames: int = 8,
             size: int = 16) -> VideoQASet:
  """A mini-VUDG split: `clips_per_domain` scripts per domain, 4 MCQs each.

  The script of clip i of domain d comes from `default_rng([seed, split,
  d, i])`, so train (split 0) and test (split 1) never share a script and
  a clip does not depend on which other domains are generated.
  """
  if split not in SPLITS:
    raise ValueError(f"split={split!r}; valid: {', '.join(SPLITS)}")
  check_domains(domains)
  if clips_per_domain < 1 or num_frames < 2 or size < 8 or size % 8:
    raise ValueError("need clips_per_domain >= 1, num_frames >= 2 and size "
                     f"a multiple of 8 (>= 8); got {clips_per_domain}, "
                     f"{num_frames}, {size}")
  videos, questions, scripts = {}, [], {}
  for d in domains:
    di = ALL_DOMAINS.index(d)
    for i in range(clips_per_domain):
      rng = np.random.default_rng([seed, _SPLIT_STREAM[split], di, i])
      script = sample_script(rng)
      video = f"{split}/{d}/{i:05d}.npz"
      videos[video] = render(script, d, num_frames=num_frames, size=size,
                             rng=rng)
      scripts[video] = script
      questions += questions_for(script, rng, video=video, domain=d,
                                 first_qa_num=len(questions))
  return VideoQASet(videos, questions, scripts)


# -- the VUDG file layout ------------------------------------------------------------


def export(data: VideoQASet, root: str, name: str = "test_multi") -> str:
  """Writes `root/<name>.json` (VUDG rows) and `root/<video>` npz files
  (`frames` uint8 `[F, H, W, 3]`); returns the JSON path."""
  os.makedirs(root, exist_ok=True)
  for video, frames in data.videos.items():
    path = os.path.join(root, video)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.savez_compressed(path, frames=np.round(
        np.clip(frames, 0, 1) * 255).astype(np.uint8))
  path = os.path.join(root, f"{name}.json")
  with open(path, "w") as f:
    json.dump([q.to_json() for q in data.questions], f, indent=1)
  return path


def load(json_path: str, *, video_root: str | None = None,
         num_frames: int | None = None, load_videos: bool = True,
         domains: Sequence[str] | None = None) -> VideoQASet:
  """`jaxlab.data.vudg.load` as a `VideoQASet` (the released JSON and,
  optionally, its videos from `video_root`, default the JSON's folder)."""
  videos, questions = release.load(json_path, video_root=video_root,
                                   num_frames=num_frames,
                                   load_videos=load_videos, domains=domains)
  return VideoQASet(videos, questions)
