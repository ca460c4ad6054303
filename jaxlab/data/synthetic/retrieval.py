"""Synthetic universal multimodal retrieval (paper A's CPU miniature).

A *scene* is (shape, colour, digit, position): a coloured shape drawn in one
quadrant of a black image and a white digit in the opposite quadrant, with
random jitter of size and offset so two drawings of one scene differ. Items
are text (a caption of the scene), an image, or both. Four tasks cover the
universal-retrieval modality pairs:

  t2t    caption query    -> caption (another phrasing)
  t2i    caption query    -> image
  i2t    image query      -> caption
  it2it  image + partial caption -> image + caption

Negatives are random scenes or hard near-duplicates (one attribute changed),
mixed at `hard_fraction` (spec 9: random : hard = 1 : 1 -> 0.5).

Every example is a dict

  {"task", "instruction", "query": item, "positives": [item],
   "negatives": [item, ...]}

with item = {"text": str | None, "image": float32 [S, S, 3] in [0, 1] | None},
the same structure `jaxlab.data.retrieval_jsonl` yields for user data.
Generation is deterministic in (seed, index), so `SyntheticRetrieval` is a
random-access source for grain.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

COLOURS = {"red": (1.0, 0.1, 0.1), "green": (0.1, 0.9, 0.1),
           "blue": (0.2, 0.3, 1.0), "yellow": (1.0, 0.9, 0.1),
           "purple": (0.7, 0.2, 0.9), "cyan": (0.1, 0.9, 0.9)}
SHAPES = ("circle", "square", "triangle", "cross")
POSITIONS = ("top-left", "top-right", "bottom-left", "bottom-right")
DIGITS = tuple(str(i) for i in range(10))
ATTRIBUTES = ("shape", "colour", "digit", "position")
TASKS = ("t2t", "t2i", "i2t", "it2it")
INSTRUCTIONS = {
    "t2t": "find the same scene text",
    "t2i": "find the image of the text",
    "i2t": "find the caption of the image",
    "it2it": "find the same scene",
}
# Words the captions use; a word-level tokenizer can make each one token.
VOCAB_WORDS = tuple(COLOURS) + SHAPES + POSITIONS + tuple(
    INSTRUCTIONS.values())

# 3x5 bitmap digits, rows top to bottom.
_FONT = {
    "0": ("111", "101", "101", "101", "111"),
    "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"),
    "3": ("111", "001", "111", "001", "111"),
    "4": ("101", "101", "111", "001", "001"),
    "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"),
    "7": ("111", "001", "010", "010", "010"),
    "8": ("111", "101", "111", "101", "111"),
    "9": ("111", "101", "111", "001", "111"),
}


@dataclasses.dataclass(frozen=True)
class Scene:
  shape: str
  colour: str
  digit: str
  position: str


def random_scene(rng: np.random.Generator) -> Scene:
  return Scene(SHAPES[rng.integers(len(SHAPES))],
               tuple(COLOURS)[rng.integers(len(COLOURS))],
               DIGITS[rng.integers(10)],
               POSITIONS[rng.integers(len(POSITIONS))])


def near_duplicate(scene: Scene, rng: np.random.Generator) -> Scene:
  """The scene with exactly one attribute changed (a hard negative)."""
  attr = ATTRIBUTES[rng.integers(len(ATTRIBUTES))]
  choices = {"shape": SHAPES, "colour": tuple(COLOURS), "digit": DIGITS,
             "position": POSITIONS}[attr]
  current = getattr(scene, attr)
  others = [c for c in choices if c != current]
  return dataclasses.replace(scene, **{attr: others[rng.integers(
      len(others))]})


def draw(scene: Scene, size: int, rng: np.random.Generator) -> np.ndarray:
  """Renders a scene as float32 `[size, size, 3]` in [0, 1]."""
  if size < 12:
    raise ValueError(f"image size must be >= 12 pixels, got {size}")
  img = np.zeros((size, size, 3), np.float32)
  q = size // 2
  qi = POSITIONS.index(scene.position)
  row0, col0 = (qi // 2) * q, (qi % 2) * q
  radius = q * rng.uniform(0.28, 0.42)
  cy = row0 + q / 2 + rng.uniform(-0.1, 0.1) * q
  cx = col0 + q / 2 + rng.uniform(-0.1, 0.1) * q
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
  dy, dx = yy - cy, xx - cx
  if scene.shape == "circle":
    mask = dy ** 2 + dx ** 2 <= radius ** 2
  elif scene.shape == "square":
    mask = (np.abs(dy) <= radius * 0.85) & (np.abs(dx) <= radius * 0.85)
  elif scene.shape == "triangle":
    mask = (dy <= radius) & (dy >= -radius) & (
        np.abs(dx) <= (dy + radius) / 2)
  else:  # cross
    arm = max(radius * 0.3, 0.6)
    mask = ((np.abs(dy) <= arm) & (np.abs(dx) <= radius)) | (
        (np.abs(dx) <= arm) & (np.abs(dy) <= radius))
  img[mask] = COLOURS[scene.colour]
  # Digit in the diagonally opposite quadrant, scaled to the quadrant.
  oi = 3 - qi
  scale = max(1, q // 8)
  glyph = np.array([[c == "1" for c in r] for r in _FONT[scene.digit]])
  glyph = np.kron(glyph, np.ones((scale, scale), bool))
  gh, gw = glyph.shape
  r0 = (oi // 2) * q + (q - gh) // 2 + rng.integers(-1, 2) * (q > gh + 1)
  c0 = (oi % 2) * q + (q - gw) // 2 + rng.integers(-1, 2) * (q > gw + 1)
  r0 = int(np.clip(r0, 0, size - gh))
  c0 = int(np.clip(c0, 0, size - gw))
  img[r0:r0 + gh, c0:c0 + gw][glyph] = 1.0
  return img


def caption(scene: Scene, style: int = 0) -> str:
  """A caption; style 0 for queries, 1 for documents (different order)."""
  if style == 0:
    return f"{scene.colour} {scene.shape} {scene.position} {scene.digit}"
  return f"{scene.digit} and {scene.position} {scene.colour} {scene.shape}"


def partial_caption(scene: Scene) -> str:
  return f"{scene.colour} {scene.shape}"


def _item(scene: Scene, task: str, role: str, size: int,
          rng: np.random.Generator, doc_style: int = 1) -> dict:
  """Item for `role` in {"query", "document"} of a task."""
  style = 0 if role == "query" else doc_style
  if task == "t2t":
    return {"text": caption(scene, style), "image": None}
  if task == "t2i":
    return ({"text": caption(scene, 0), "image": None} if role == "query"
            else {"text": None, "image": draw(scene, size, rng)})
  if task == "i2t":
    return ({"text": None, "image": draw(scene, size, rng)}
            if role == "query" else {"text": caption(scene, style),
                                     "image": None})
  if task == "it2it":
    text = partial_caption(scene) if role == "query" else caption(scene,
                                                                   style)
    return {"text": text, "image": draw(scene, size, rng)}
  raise ValueError(f"unknown retrieval task {task!r}; valid: "
                   f"{', '.join(TASKS)}")


def _negative_scenes(scene: Scene, n: int, hard_fraction: float,
                     rng: np.random.Generator) -> list[Scene]:
  num_hard = int(round(n * hard_fraction))
  out = []
  for i in range(n):
    while True:
      neg = (near_duplicate(scene, rng) if i < num_hard
             else random_scene(rng))
      if neg != scene:
        break
    out.append(neg)
  order = rng.permutation(n)
  return [out[i] for i in order]


def make_example(rng: np.random.Generator, *, task: str, num_negatives: int,
                 hard_fraction: float = 0.5, image_size: int = 16,
                 doc_style: int = 1) -> dict:
  """One query with one positive and `num_negatives` negatives.

  doc_style: caption phrasing of documents (1: reordered w.r.t. queries, 0:
  the query's phrasing, an easier copy-matching task).
  """
  if not 0.0 <= hard_fraction <= 1.0:
    raise ValueError(f"hard_fraction must be in [0, 1], got {hard_fraction}")
  scene = random_scene(rng)
  negs = _negative_scenes(scene, num_negatives, hard_fraction, rng)
  return {
      "task": task,
      "instruction": INSTRUCTIONS[task],
      "query": _item(scene, task, "query", image_size, rng),
      "positives": [_item(scene, task, "document", image_size, rng,
                          doc_style)],
      "negatives": [_item(s, task, "document", image_size, rng, doc_style)
                    for s in negs],
      "scene": scene,
      "negative_scenes": negs,
  }


class SyntheticRetrieval:
  """Random-access source: example i is a deterministic function of (seed, i).

  Usable directly or as `grain.MapDataset.source(SyntheticRetrieval(...))`.
  Tasks cycle with the index so every batch mixes modalities.
  """

  def __init__(self, size: int, *, seed: int = 0,
               tasks: Sequence[str] = TASKS, num_negatives: int = 4,
               hard_fraction: float = 0.5, image_size: int = 16,
               doc_style: int = 1):
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
      raise ValueError(f"unknown retrieval tasks {bad or tasks}; valid: "
                       f"{', '.join(TASKS)}")
    if num_negatives < 1:
      raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
    self.size, self.seed, self.tasks = size, seed, tuple(tasks)
    self.num_negatives, self.hard_fraction = num_negatives, hard_fraction
    self.image_size, self.doc_style = image_size, doc_style

  def __len__(self) -> int:
    return self.size

  def __getitem__(self, index: int) -> dict:
    if not 0 <= index < self.size:
      raise IndexError(index)
    rng = np.random.default_rng((self.seed, index))
    return make_example(rng, task=self.tasks[index % len(self.tasks)],
                        num_negatives=self.num_negatives,
                        hard_fraction=self.hard_fraction,
                        image_size=self.image_size,
                        doc_style=self.doc_style)


def eval_candidates(source: SyntheticRetrieval, index: int
                    ) -> tuple[dict, list[dict], np.ndarray]:
  """(query example, shuffled candidates, labels) for ranking evaluation.

  The candidate list is the positive plus the example's negatives (the
  "first-stage" list), shuffled deterministically; labels are 1/0.
  """
  ex = source[index]
  cands = ex["positives"] + ex["negatives"]
  labels = np.array([1] + [0] * len(ex["negatives"]), np.int32)
  order = np.random.default_rng((source.seed, index, 1)).permutation(
      len(cands))
  return ex, [cands[i] for i in order], labels[order]


class EmbeddingRetrieval:
  """Spec A's CPU miniature: random embeddings with planted relevance.

  Query q ~ N(0, I); positive q + pos_noise * eps; hard negatives are
  near-duplicates q + hard_noise * eps (hard_noise > pos_noise); random
  negatives ~ N(0, I). Element i: {"query": [E], "docs": [1 + N, E]} with the
  positive first (float32), deterministic in (seed, i).
  """

  def __init__(self, size: int, *, seed: int = 0, embed_dim: int = 16,
               num_negatives: int = 4, hard_fraction: float = 0.5,
               pos_noise: float = 0.8, hard_noise: float = 1.1):
    if num_negatives < 1:
      raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
    self.size, self.seed, self.embed_dim = size, seed, embed_dim
    self.num_negatives, self.hard_fraction = num_negatives, hard_fraction
    self.pos_noise, self.hard_noise = pos_noise, hard_noise

  def __len__(self) -> int:
    return self.size

  def __getitem__(self, index: int) -> dict:
    if not 0 <= index < self.size:
      raise IndexError(index)
    rng = np.random.default_rng((self.seed, index))
    e, n = self.embed_dim, self.num_negatives
    q = rng.normal(size=e)
    num_hard = int(round(n * self.hard_fraction))
    docs = [q + self.pos_noise * rng.normal(size=e)]
    docs += [q + self.hard_noise * rng.normal(size=e) for _ in range(num_hard)]
    docs += [rng.normal(size=e) for _ in range(n - num_hard)]
    return {"query": q.astype(np.float32),
            "docs": np.stack(docs).astype(np.float32)}
