"""The Trust-GRPO miniature's task (paper G): (a + b) mod K with thinking.

    task = make_task(config.task)
    task.prompt(qi)                      # [BOS, a, b]
    task.outcome(qi, [v0 + 2, ans0 + 2, EOS])    # R^o
    task.thinking(qi, completion)        # the synthetic judge's R^t
    batch = format_batch(task, rng, batch_size=64, hack_prob=0.5)

    vtask = make_task(dict(config.task, visual=True))   # the `vl` policy's
    vtask.prompt(qi)                     # [BOS]: the operands are not text
    vtask.images([qi])                   # [1, 16, 16, 3]: they are pixels

A tiny decoder answers "(a + b) mod K" as `<think> <answer> EOS`. The
thinking token is a value token v (the "worked" thinking, "I get v") or
the degenerate filler HACK. Outcome R^o = 1 iff the thinking is a value
token and the answer is right (the degenerate style never gives a right
answer). The synthetic thinking reward model (the judge) is informative
on most questions (high for the right v, low for a wrong v, lowest for
HACK) and hackable on a fixed subset (there it rates HACK highest and
every value token low). `format_batch` is the format warm start's data:
random thinking, answer = thinking value (no question's answer taught).

The visual task (`visual=True`, SophiaVL-R1's setting: a Qwen2.5-VL
policy reads the question from an image) asks the same questions with
the operands drawn instead of written: the prompt is `[BOS]` alone and
`images(qis)` gives each question's `render_operands(a, b)`, a
`[H, W, 3]` image in {0, 1} with a lit 2 x 2 cells in the top half and b
in the bottom half (one cell per 4 x 4 patch, so a patch-4 vision tower
sees each cell in one patch). `format_batch` then returns the
`prefix_lm_nll` arrays (`jaxlab.objectives.prefix_lm`) with the images.
"""

from __future__ import annotations

import numpy as np

PAD, BOS, EOS, HACK = 0, 1, 2, 3
HACK_TEXT = "hmm hmm"  # the degenerate thinking, as the learned TRM reads it
_A0 = 4  # question tokens a: _A0 .. _A0+K-1, b: next K, values v: next K,
         # answers: next K.
CELL, STRIDE = 2, 4  # a lit cell: CELL x CELL pixels, one per STRIDE square


def operand_capacity(size: int) -> int:
  """Cells one operand's half of a `size` x `size` image holds."""
  return (size // 2 // STRIDE) * (size // STRIDE)


def render_operands(a: int, b: int, size: int = 16) -> np.ndarray:
  """The question's operands as an image `[size, size, 3]` in {0, 1}.

  The top half shows `a` lit cells, the bottom half `b`: cell j of a half
  is the CELL x CELL square at row STRIDE * (j // n) + 1, column
  STRIDE * (j % n) + 1 of that half (n = size // STRIDE cells per row;
  row-major fill), white on black. Deterministic, no fonts.
  """
  if size % (2 * STRIDE):
    raise ValueError(f"image size={size} must be a multiple of {2 * STRIDE}")
  cap = operand_capacity(size)
  if not (0 <= a <= cap and 0 <= b <= cap):
    raise ValueError(f"operands ({a}, {b}) do not fit {cap} cells per half "
                     f"of a {size} x {size} image")
  img = np.zeros((size, size, 3), np.float32)
  n, off = size // STRIDE, (STRIDE - CELL) // 2
  for half, count in enumerate((a, b)):
    for j in range(count):
      r = half * size // 2 + STRIDE * (j // n) + off
      c = STRIDE * (j % n) + off
      img[r:r + CELL, c:c + CELL] = 1.0
  return img


class Task:
  """(a + b) mod K with value/degenerate thinking and a hackable subset."""

  def __init__(self, modulus: int, hackable_frac: float, task_seed: int,
               trm_right: float, trm_wrong: float, trm_hack: float,
               trm_hack_hackable: float, trm_value_hackable: float,
               visual: bool = False, image_size: int = 16):
    k = self.k = modulus
    self.visual, self.image_size = bool(visual), int(image_size)
    if self.visual and k - 1 > operand_capacity(self.image_size):
      raise ValueError(f"modulus={k}: operands up to {k - 1} do not fit a "
                       f"{image_size} x {image_size} image's "
                       f"{operand_capacity(self.image_size)} cells per half")
    self.questions = [(a, b) for a in range(k) for b in range(k)]
    rng = np.random.default_rng(task_seed)
    n_hack = int(round(hackable_frac * len(self.questions)))
    self.hackable = set(rng.choice(len(self.questions), n_hack,
                                   replace=False).tolist())
    self.trm = dict(right=trm_right, wrong=trm_wrong, hack=trm_hack,
                    hack_h=trm_hack_hackable, value_h=trm_value_hackable)
    self.v0, self.ans0 = _A0 + 2 * k, _A0 + 3 * k
    self.vocab_size = _A0 + 4 * k

  def prompt(self, qi: int, visual: bool | None = None) -> list[int]:
    """[BOS, a, b]; visual (default: the task's): [BOS], the operands are
    in `images`."""
    if self.visual if visual is None else visual:
      return [BOS]
    a, b = self.questions[qi]
    return [BOS, _A0 + a, _A0 + self.k + b]

  def images(self, qis) -> np.ndarray:
    """`[len(qis), H, W, 3]`: `render_operands` of each question."""
    return np.stack([render_operands(*self.questions[q], self.image_size)
                     for q in qis]).reshape(-1, self.image_size,
                                            self.image_size, 3)

  def answer(self, qi: int) -> int:
    a, b = self.questions[qi]
    return (a + b) % self.k

  def parse(self, completion) -> tuple[int | None, int] | None:
    """(thinking value or None for HACK, answer) of `<think> <ans> EOS`."""
    c = list(completion)
    if len(c) != 3 or c[2] != EOS:
      return None
    if not self.ans0 <= c[1] < self.ans0 + self.k:
      return None
    if c[0] == HACK:
      return None, c[1] - self.ans0
    if self.v0 <= c[0] < self.v0 + self.k:
      return c[0] - self.v0, c[1] - self.ans0
    return None

  def is_hack(self, completion) -> bool:
    return len(completion) > 0 and completion[0] == HACK

  def outcome(self, qi, completion) -> float:
    """R^o: 1 iff well formed, worked (non-degenerate) thinking, right answer."""
    p = self.parse(completion)
    return float(p is not None and p[0] is not None and
                 p[1] == self.answer(qi))

  def question_text(self, qi: int) -> str:
    """The question as the learned TRM reads it, e.g. "3 + 4 mod 5"."""
    a, b = self.questions[qi]
    return f"{a} + {b} mod {self.k}"

  def thinking_text(self, completion) -> str | None:
    """The thinking as text ("i get 2" / "hmm hmm"); None if malformed."""
    p = self.parse(completion)
    if p is None:
      return None
    return HACK_TEXT if p[0] is None else f"i get {p[0]}"

  def completion(self, value: int | None) -> list[int]:
    """A well-formed completion with thinking `value` (None = HACK)."""
    if value is None:
      return [HACK, self.ans0, EOS]
    return [self.v0 + value, self.ans0 + value, EOS]

  def thinking(self, qi, completion) -> float:
    """The synthetic TRM score of the thinking token."""
    p = self.parse(completion)
    if p is None:
      return 0.0
    if qi in self.hackable:
      return self.trm["hack_h"] if p[0] is None else self.trm["value_h"]
    if p[0] is None:
      return self.trm["hack"]
    return self.trm["right"] if p[0] == self.answer(qi) else self.trm["wrong"]


def make_task(tk) -> Task:
  """The task of a `config.task` section (fields of `Task`)."""
  return Task(tk["modulus"], tk["hackable_frac"], tk["task_seed"],
              tk["trm_right"], tk["trm_wrong"], tk["trm_hack"],
              tk["trm_hack_hackable"], tk["trm_value_hackable"],
              visual=tk.get("visual", False),
              image_size=tk.get("image_size", 16))


def judge_table(task: Task) -> np.ndarray:
  """The synthetic judge's `[questions, 1 + K]` scores (layout of `table`)."""
  return np.array([[task.thinking(q, task.completion(v))
                    for v in [None] + list(range(task.k))]
                   for q in range(len(task.questions))], np.float32)


def trm_training_data(task: Task, cfg, seed: int
                      ) -> tuple[list[str], list[str], np.ndarray]:
  """Judge-labelled (question, thinking, label) rows for the learned TRM.

  Labels are the judge's score plus N(0, `label_noise`^2), rounded to 0.1
  and clipped to [0, 1] (the 72B judge's 0.1-step scores, spec G item 1).
  """
  rng = np.random.default_rng(seed)
  qs, ts, ys = [], [], []
  for _ in range(cfg.samples):
    qi = int(rng.integers(len(task.questions)))
    v = None if rng.random() < cfg.hack_prob else int(rng.integers(task.k))
    comp = task.completion(v)
    y = task.thinking(qi, comp) + cfg.label_noise * rng.normal()
    qs.append(task.question_text(qi))
    ts.append(task.thinking_text(comp))
    ys.append(float(np.clip(np.round(y * 10.0) / 10.0, 0.0, 1.0)))
  return qs, ts, np.asarray(ys, np.float32)


def format_batch(task: Task, rng: np.random.Generator, *, batch_size: int,
                 hack_prob: float) -> dict[str, np.ndarray]:
  """One format warm-start batch (`lm` loss arrays): random questions, HACK
  thinking w.p. `hack_prob` (then a random answer), else a random value v
  answered by v; the loss covers the thinking, answer and EOS tokens.

  A visual task's batch is `prefix_lm_nll`'s: `images [B, H, W, 3]`,
  `ids [B, 4]` ([BOS, think, answer, EOS]) and `mask` (1 on the last 3).
  """
  k = task.k
  rows, qs = [], rng.integers(0, len(task.questions), batch_size)
  for q in qs:
    v = int(rng.integers(k))
    think = HACK if rng.random() < hack_prob else task.v0 + v
    ans = int(rng.integers(k)) if think == HACK else v
    rows.append(task.prompt(int(q)) + [think, task.ans0 + ans, EOS])
  ids = np.array(rows, np.int32)
  if task.visual:
    mask = np.zeros(ids.shape, np.float32)
    mask[:, 1:] = 1.0
    return {"images": task.images(qs.tolist()), "ids": ids, "mask": mask}
  mask = np.zeros((len(rows), ids.shape[1] - 1), np.float32)
  mask[:, 2:] = 1.0  # targets ids[3:]: thinking, answer, EOS
  return {"inputs": ids[:, :-1], "targets": ids[:, 1:], "loss_mask": mask}
