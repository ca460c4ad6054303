"""Container demos: File (terminal commands), Card (piles), Chip (cups).

Card and Chip are real recordings in the paper; here they are synthetic
stand-ins (spec R.4): a card is a strip coloured by suit and rank, a chip a
block coloured by value; contents are face-down / covered except at the
reveal, while the card or chip an operation moves is shown with it.
File frames are terminal screenshots (Pillow's bitmap font): the command of
each step, and the `ls` listing at the reveal.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from jaxlab.data.synthetic.video_reason import core
from jaxlab.data.synthetic.video_reason import render as R

FILE_NAMES = tuple(f"{l}.{e}" for l in "abcdefgh"
                   for e in ("txt", "py", "json", "csv"))
RANKS = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
SUITS = ("S", "H", "D", "C")
DECK = tuple(r + s for s in SUITS for r in RANKS)
CHIP_VALUES = (5, 10, 20, 50, 100)


def _with(state, i, items):
  return state[:i] + (tuple(items),) + state[i + 1:]


def _containers_text(state, label: str, base: int) -> str:
  return "; ".join(f"{label}{i + base}: " + (", ".join(str(x) for x in c)
                                             or "none")
                   for i, c in enumerate(state))


def _parse_containers(text: str, label: str, base: int, item_re: str,
                      convert) -> tuple:
  t = core.norm(text)
  parts = re.findall(label + r"\s*(\d+)\s*:\s*([^;]*)", t)
  if not parts:
    raise core.MalformedAnswerError(f"no '{label}{base}: ...' entries in "
                                    f"{text!r}")
  found = {}
  for idx, body in parts:
    i = int(idx) - base
    if i < 0 or i in found:
      raise core.MalformedAnswerError(f"bad or repeated '{label}{idx}' in "
                                      f"{text!r}")
    found[i] = tuple(convert(x) for x in re.findall(item_re, body))
  if sorted(found) != list(range(len(found))):
    raise core.MalformedAnswerError(f"missing {label} entries in {text!r}")
  return tuple(found[i] for i in range(len(found)))


def _multiset_minus(a, b) -> tuple:
  rest = list(b)
  out = []
  for x in a:
    if x in rest:
      rest.remove(x)
    else:
      out.append(x)
  return tuple(sorted(out, key=str))


class _ContainerEngine(core.Engine):
  """Shared texts of the container demos (diffs are per container)."""
  label = ""
  base = 0
  item_re = r"\S+"

  def convert(self, x):
    return x

  def format_state(self, state):
    return _containers_text(state, self.label, self.base)

  def parse_state(self, text):
    return _parse_containers(text, self.label, self.base, self.item_re,
                             self.convert)

  def diff(self, at, other, params):
    return tuple(_multiset_minus(a, b) for a, b in zip(at, other))

  def format_diff(self, diff):
    return _containers_text(diff, self.label, self.base)

  def parse_diff(self, text):
    return tuple(tuple(sorted(c, key=str)) for c in self.parse_state(text))


@core.DEMOS.register("file")
class FileEngine(_ContainerEngine):
  """1-2 directories; touch / rm -r / cp / mv with brace lists."""
  name, key = "file", "file_sys"
  sizes = (1, 2)
  op_noun = "commands"
  state_phrase = "list of files in every path"
  diff_phrase = "files"
  label, base = "path", 0
  item_re = r"[a-z]\.(?:txt|py|json|csv)"
  op_sep = " & "
  predict_len = 2  # at most 2 commands, touch and rm only (spec R.3)

  def init_state(self, rng, size):
    return tuple(tuple(sorted(rng.choice(FILE_NAMES, int(rng.integers(3, 11)),
                                         replace=False).tolist()))
                 for _ in range(size))

  def _ops_of(self, state, rng, kinds):
    n = len(state)
    while True:
      kind = str(rng.choice(kinds))
      i = int(rng.integers(n))
      j = (i + 1) % n
      src = set(state[i])
      if kind == "touch":
        pool = sorted(set(FILE_NAMES) - src)
      elif kind == "rm":
        pool = sorted(src)
      else:
        pool = sorted(src - set(state[j]))
      if pool:
        k = min(len(pool), int(rng.integers(1, 3)))
        names = tuple(sorted(rng.choice(pool, k, replace=False).tolist()))
        return (kind, i, names, j if kind in ("cp", "mv") else None)

  def kinds(self, state):
    return ("touch", "rm", "cp", "mv") if len(state) > 1 else ("touch", "rm")

  def sample_op(self, state, rng, prev=None):
    return self._ops_of(state, rng, self.kinds(state))

  def sample_predict_op(self, state, rng, prev=None):
    return self._ops_of(state, rng, ("touch", "rm"))

  def apply(self, state, op):
    kind, i, names, j = op
    n = len(state)
    if not (0 <= i < n) or (j is not None and not (0 <= j < n and j != i)):
      raise core.IllegalOperationError(f"file: no such path in {op}")
    src, names = set(state[i]), set(names)
    if kind == "touch":
      if names & src:
        raise core.IllegalOperationError(f"file: touch of existing {op}")
      return _with(state, i, sorted(src | names))
    if not names <= src:
      raise core.IllegalOperationError(f"file: missing source in {op}")
    if kind == "rm":
      return _with(state, i, sorted(src - names))
    if j is None or names & set(state[j]):
      raise core.IllegalOperationError(f"file: bad destination in {op}")
    out = _with(state, j, sorted(set(state[j]) | names))
    if kind == "mv":
      out = _with(out, i, sorted(src - names))
    return out

  def undo(self, state, op):
    kind, i, names, j = op
    inverse = {"touch": ("rm", i, names, None), "rm": ("touch", i, names, None),
               "mv": ("mv", j, names, i)}
    if kind == "cp":
      if j is None or not set(names) <= set(state[i]):
        raise core.IllegalOperationError(f"file: cannot undo {op}")
      return self.apply(state, ("rm", j, names, None))
    return self.apply(state, inverse[kind])

  def instruction(self, reveal):
    return ("The video shows a terminal session on 1-2 directories (path0, "
            "path1). Commands: 'touch' creates files that do not exist yet; "
            "'rm -r' deletes existing files; 'cp' copies and 'mv' moves "
            "existing files to a directory that does not contain them; "
            "'{a.txt,b.py}' lists several files. The 'ls' output of every "
            f"directory is shown at the {reveal} of the video.")

  def op_text(self, op):
    kind, i, names, j = op
    target = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
    cmd = {"touch": "touch", "rm": "rm -r", "cp": "cp", "mv": "mv"}[kind]
    dst = f" path{j}/" if j is not None else ""
    return f"{cmd} path{i}/{target}{dst}"

  def parse_op(self, text):
    t = core.norm(text)
    m = re.search(r"(touch|rm(?:\s+-rf|\s+-r)?|cp|mv)\s+path(\d+)/"
                  r"(\{[^}]*\}|[a-z]\.(?:txt|py|json|csv))"
                  r"(?:\s+path(\d+)/?)?", t)
    if not m:
      raise core.MalformedAnswerError(f"file: not a command: {text!r} "
                                      "(expected e.g. 'touch path0/a.txt')")
    kind = m.group(1).split()[0]
    names = tuple(sorted(re.findall(r"[a-z]\.(?:txt|py|json|csv)",
                                    m.group(3))))
    j = int(m.group(4)) if m.group(4) is not None else None
    if kind in ("cp", "mv") and j is None:
      raise core.MalformedAnswerError(f"file: {kind} needs a destination: "
                                      f"{text!r}")
    return (kind, int(m.group(2)), names, j if kind in ("cp", "mv") else None)

  def count_spec(self, rng, size):
    kind = str(rng.choice(("touch", "rm", "cp", "mv") if size > 1
                          else ("touch", "rm")))
    shown = {"rm": "rm -r"}.get(kind, kind)
    return (f"How many '{shown}' commands were executed?", {"kind": kind})

  def count_match(self, params, op):
    return op[0] == params["kind"]

  def compare_spec(self, rng, size, timestamp):
    other = "end" if timestamp == "start" else "start"
    return (f"Which files are in each path at the {timestamp} of the video "
            f"but not at the {other}?", {})

  def solve(self, state, target, max_len):
    ops = []
    for i, (cur, tgt) in enumerate(zip(state, target)):
      rm = tuple(sorted(set(cur) - set(tgt)))
      add = tuple(sorted(set(tgt) - set(cur)))
      if rm:
        ops.append(("rm", i, rm, None))
      if add:
        ops.append(("touch", i, add, None))
    return ops

  def render(self, state, op, *, reveal, frame_size):
    if reveal:
      lines = []
      for i, c in enumerate(state):
        lines += [f"$ ls path{i}", " ".join(c[:5]), " ".join(c[5:10]),
                  " ".join(c[10:])]
    else:
      lines = ["$ " + (self.op_text(op) if op is not None else "")]
    return R.text_frame(lines, frame_size)


@core.DEMOS.register("card")
class CardEngine(_ContainerEngine):
  """1-2 piles of distinct cards, listed top to bottom."""
  name, key = "card", "card"
  sizes = (1, 2)
  op_noun = "card operations"
  state_phrase = "list of cards in every pile from top to bottom"
  diff_phrase = "cards"
  label, base = "pile", 1
  item_re = r"(?:10|[2-9]|[ajqk])[shdc]"
  synthetic_stand_in = True

  def convert(self, x):
    return x.upper()

  def init_state(self, rng, size):
    cards = rng.choice(DECK, 6 * size, replace=False).tolist()
    return tuple(tuple(cards[6 * p:6 * p + int(rng.integers(3, 7))])
                 for p in range(size))

  def sample_op(self, state, rng, prev=None):
    i = int(rng.integers(len(state)))
    if state[i] and rng.random() < 0.5:
      return ("remove", i, state[i][-1])
    used = {c for pile in state for c in pile}
    return ("add", i, str(rng.choice([c for c in DECK if c not in used])))

  sample_predict_op = sample_op

  def apply(self, state, op):
    kind, i, card = op
    if not 0 <= i < len(state):
      raise core.IllegalOperationError(f"card: no pile {i + 1}")
    pile = state[i]
    if kind == "add":
      if any(card in p for p in state):
        raise core.IllegalOperationError(f"card: {card} is already in a pile")
      return _with(state, i, (card,) + pile)
    if not pile or (card is not None and pile[-1] != card):
      raise core.IllegalOperationError(f"card: {card} is not at the bottom")
    return _with(state, i, pile[:-1])

  def undo(self, state, op):
    kind, i, card = op
    pile = state[i]
    if kind == "add":
      if not pile or pile[0] != card:
        raise core.IllegalOperationError(f"card: cannot undo {op}")
      return _with(state, i, pile[1:])
    if any(card in p for p in state):
      raise core.IllegalOperationError(f"card: cannot undo {op}")
    return _with(state, i, pile + (card,))

  def instruction(self, reveal):
    return ("The video shows 1-2 piles of playing cards, face down. In each "
            "step a card is shown and added to the top of a pile, or the "
            "bottom card of a pile is removed and shown. Cards are written "
            "rank + suit (e.g. 10H, QS). The faces of all cards are shown at "
            f"the {reveal} of the video. (Synthetic stand-in rendering.)")

  def op_text(self, op):
    kind, i, card = op
    if kind == "add":
      return f"add {card} to the top of pile {i + 1}"
    return f"remove {card} from the bottom of pile {i + 1}"

  def parse_op(self, text):
    t = core.norm(text)
    m = re.search(r"(add|remove)\s+((?:10|[2-9]|[ajqk])[shdc])\s+.*?pile\s*"
                  r"(\d+)", t)
    if not m:
      raise core.MalformedAnswerError(f"card: not an operation: {text!r} "
                                      "(expected e.g. 'add 3H to the top of "
                                      "pile 1')")
    return (m.group(1), int(m.group(3)) - 1, m.group(2).upper())

  def count_spec(self, rng, size):
    kind = str(rng.choice(("add", "remove")))
    p = int(rng.integers(size))
    what = ("added to the top of" if kind == "add" else
            "removed from the bottom of")
    return (f"How many cards were {what} pile {p + 1}?",
            {"kind": kind, "pile": p})

  def count_match(self, params, op):
    return op[0] == params["kind"] and op[1] == params["pile"]

  def solve(self, state, target, max_len):
    ops = []
    for i, (cur, tgt) in enumerate(zip(state, target)):
      for r in range(len(cur) + 1):
        kept = cur[:len(cur) - r]
        if len(kept) <= len(tgt) and tgt[len(tgt) - len(kept):] == kept:
          ops += [("remove", i, c) for c in reversed(cur[len(cur) - r:])]
          ops += [("add", i, c) for c in reversed(tgt[:len(tgt) - len(kept)])]
          break
    return ops

  def render(self, state, op, *, reveal, frame_size):
    frame = R.canvas(frame_size, (30, 110, 50))
    n = len(state)
    col_w = frame_size // max(n, 1)
    top = max(2, frame_size // 6)
    strip = max(1, (frame_size - 2 * top) // max(8, max(len(p) for p in state)
                                                  if state else 8))
    for i, pile in enumerate(state):
      x0, x1 = i * col_w + 2, (i + 1) * col_w - 2
      for k, card in enumerate(pile):
        y0 = top + k * strip
        self._card(frame, y0, x0, y0 + strip, x1, card, reveal)
      if op is not None and op[1] == i:
        colour = R.GREEN if op[0] == "add" else R.RED
        y0 = 0 if op[0] == "add" else frame_size - top
        self._card(frame, y0, x0, y0 + top, x1, op[2], True)
        R.fill(frame, y0, x0, y0 + top, x0 + 2, colour)
    return frame

  @staticmethod
  def _card(frame, y0, x0, y1, x1, card, face):
    if not face:
      R.fill(frame, y0, x0, y1, x1, (120, 20, 30))
      return
    suit, rank = SUITS.index(card[-1]), RANKS.index(card[:-1])
    mid = (x0 + x1) // 2
    R.fill(frame, y0, x0, y1, mid, R.PALETTE[1 + suit])
    R.fill(frame, y0, mid, y1, x1, R.PALETTE[6 + rank])


@core.DEMOS.register("chip")
class ChipEngine(_ContainerEngine):
  """1-2 cups of chips valued 5, 10, 20, 50 or 100 (a multiset per cup)."""
  name, key = "chip", "chip"
  sizes = (1, 2)
  op_noun = "chip operations"
  state_phrase = "list of chip values in every cup"
  diff_phrase = "chips"
  label, base = "cup", 1
  item_re = r"\d+"
  synthetic_stand_in = True

  def convert(self, x):
    return int(x)

  def init_state(self, rng, size):
    return tuple(tuple(sorted(int(v) for v in rng.choice(
        CHIP_VALUES, int(rng.integers(2, 7))))) for _ in range(size))

  def sample_op(self, state, rng, prev=None):
    i = int(rng.integers(len(state)))
    if state[i] and rng.random() < 0.5:
      return ("remove", i, int(rng.choice(state[i])))
    return ("add", i, int(rng.choice(CHIP_VALUES)))

  sample_predict_op = sample_op

  def apply(self, state, op):
    kind, i, v = op
    if not 0 <= i < len(state) or v not in CHIP_VALUES:
      raise core.IllegalOperationError(f"chip: bad operation {op}")
    cup = list(state[i])
    if kind == "add":
      cup.append(v)
    elif v in cup:
      cup.remove(v)
    else:
      raise core.IllegalOperationError(f"chip: no {v} chip in cup {i + 1}")
    return _with(state, i, sorted(cup))

  def undo(self, state, op):
    kind, i, v = op
    return self.apply(state, ("remove" if kind == "add" else "add", i, v))

  def instruction(self, reveal):
    return ("The video shows 1-2 cups holding poker chips valued 5, 10, 20, "
            "50 or 100. In each step one chip is shown and added to a cup, "
            "or taken out of a cup and shown. The chips in every cup are "
            f"shown at the {reveal} of the video. (Synthetic stand-in "
            "rendering.)")

  def op_text(self, op):
    kind, i, v = op
    return (f"add {v} to cup {i + 1}" if kind == "add"
            else f"remove {v} from cup {i + 1}")

  def parse_op(self, text):
    m = re.search(r"(add|remove)\s+(\d+)\s+(?:chip\s+)?(?:to|from)\s+cup\s*"
                  r"(\d+)", core.norm(text))
    if not m:
      raise core.MalformedAnswerError(f"chip: not an operation: {text!r} "
                                      "(expected e.g. 'add 20 to cup 1')")
    return (m.group(1), int(m.group(3)) - 1, int(m.group(2)))

  def count_spec(self, rng, size):
    kind = str(rng.choice(("add", "remove")))
    c = int(rng.integers(size))
    what = "added to" if kind == "add" else "removed from"
    return (f"How many chips were {what} cup {c + 1}?",
            {"kind": kind, "cup": c})

  def count_match(self, params, op):
    return op[0] == params["kind"] and op[1] == params["cup"]

  def compare_spec(self, rng, size, timestamp):
    c = int(rng.integers(size))
    return (f"At which time is the total value of the chips in cup {c + 1} "
            "higher, the start or the end of the video, and by how much? "
            "Answer 'start, D', 'end, D' or 'equal, 0'.", {"cup": c})

  def diff(self, at, other, params):
    start, end = (at, other) if params["timestamp"] == "start" else (other,
                                                                      at)
    c = params["cup"]
    d = sum(end[c]) - sum(start[c])
    return ("end" if d > 0 else "start" if d < 0 else "equal", abs(d))

  def format_diff(self, diff):
    return f"{diff[0]}, {diff[1]}"

  def parse_diff(self, text):
    m = re.search(r"(start|end|equal)\D*(\d+)", core.norm(text))
    if not m:
      raise core.MalformedAnswerError(f"chip: expected 'start, D', 'end, D' "
                                      f"or 'equal, 0', got {text!r}")
    return (m.group(1), int(m.group(2)))

  def solve(self, state, target, max_len):
    ops = []
    for i, (cur, tgt) in enumerate(zip(state, target)):
      ops += [("remove", i, v) for v in _multiset_minus(cur, tgt)]
      ops += [("add", i, v) for v in _multiset_minus(tgt, cur)]
    return ops

  def render(self, state, op, *, reveal, frame_size):
    frame = R.canvas(frame_size, R.BACKGROUND)
    n = len(state)
    col_w = frame_size // max(n, 1)
    top = max(2, frame_size // 6)
    strip = max(1, (frame_size - 2 * top) // max(8, max(len(c) for c in state)
                                                  if state else 8))
    for i, cup in enumerate(state):
      x0, x1 = i * col_w + 2, (i + 1) * col_w - 2
      if reveal:
        for k, v in enumerate(cup):
          y0 = frame_size - top - (k + 1) * strip
          R.fill(frame, y0, x0, y0 + strip, x1,
                 R.PALETTE[1 + CHIP_VALUES.index(v)])
      else:
        R.fill(frame, top, x0, frame_size - top, x1, (110, 110, 110))
      if op is not None and op[1] == i:
        R.fill(frame, 0, x0, top, x1, R.PALETTE[1 + CHIP_VALUES.index(op[2])])
        R.fill(frame, 0, x0, top, x0 + 2, R.GREEN if op[0] == "add"
               else R.RED)
    return frame
