"""Board demos: Number (sliding puzzle), Circle (lights-out), Cup (swaps).

Conventions fixed here (spec R.2), with rows stored display-top first:
- Number: cells "(a,1)" = (row letter from the top, 1-based column); a move
  word is the direction the *tile* moves (the blank moves the other way); the
  operation text names the moving tile's cell before the move, "(b,3) up".
- Circle: cells "(a,0)" = (column letter, 0-based row); black = 1, white = 0;
  left = x-1, right = x+1, up = y-1, down = y+1; the circle's landing cell
  and its 4 in-bounds orthogonal neighbours flip (the start cell does not).
  The operation text names the circle's cell before the move.
- Cup: cells "a1" = (row a, column 1); a swap is "(a1, b2)".
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from jaxlab.data.synthetic.video_reason import core
from jaxlab.data.synthetic.video_reason import render as R

DIRS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
_DIR_RE = r"(up|down|left|right)"


def _side(state) -> int:
  return len(state)


def _swap(board, a, b):
  rows = [list(r) for r in board]
  rows[a[0]][a[1]], rows[b[0]][b[1]] = rows[b[0]][b[1]], rows[a[0]][a[1]]
  return tuple(tuple(r) for r in rows)


def _find(board, value):
  for r, row in enumerate(board):
    for c, v in enumerate(row):
      if v == value:
        return r, c
  raise ValueError(value)


def _cell_dict_diff(at, other) -> tuple:
  return tuple(((r, c), at[r][c]) for r in range(len(at))
               for c in range(len(at)) if at[r][c] != other[r][c])


def _square_side(count: int, text: str) -> int:
  n = int(round(count ** 0.5))
  if n < 2 or n * n != count:
    raise core.MalformedAnswerError(
        f"expected one entry per cell of an N x N board, got {count} in "
        f"{text!r}")
  return n


@core.DEMOS.register("number")
class NumberEngine(core.Engine):
  """N x N sliding puzzle; tiles 1..N^2-1 hidden under blue squares."""
  name, key = "number", "hrd"
  sizes = (3, 4)
  op_noun = "moved blue squares"
  state_phrase = "number on every square of the board"
  diff_phrase = "squares"

  def init_state(self, rng, size):
    return tuple(tuple(int(v) for v in row)
                 for row in rng.permutation(size * size).reshape(size, size))

  def _tile_for(self, state, direction):
    br, bc = _find(state, 0)
    dr, dc = DIRS[direction]
    r, c = br - dr, bc - dc
    n = _side(state)
    return (r, c) if 0 <= r < n and 0 <= c < n else None

  def legal_ops(self, state, prev=None):
    ops = []
    for d in DIRS:
      if prev is not None and d == OPPOSITE[prev[2]]:
        continue  # no immediate reversal [inferred, spec R.4]
      tile = self._tile_for(state, d)
      if tile is not None:
        ops.append((tile[0], tile[1], d))
    return ops

  def resolve(self, state, op):
    r, c, d = op
    tile = self._tile_for(state, d)
    if tile is None or (r is not None and (r, c) != tile):
      raise core.IllegalOperationError(f"number: no tile can move {d} "
                                       f"from {op}")
    return (tile[0], tile[1], d)

  def apply(self, state, op):
    r, c, d = self.resolve(state, op)
    dr, dc = DIRS[d]
    return _swap(state, (r, c), (r + dr, c + dc))

  def undo(self, state, op):
    r, c, d = op
    dr, dc = DIRS[d]
    n = _side(state)
    if r is None or not (0 <= r + dr < n and 0 <= c + dc < n) or \
        state[r][c] != 0:
      raise core.IllegalOperationError(f"number: cannot undo {op}")
    return _swap(state, (r, c), (r + dr, c + dc))

  def instruction(self, reveal):
    shown = ("The numbers are shown at the beginning of the video and then "
             "hidden under blue squares." if reveal == "start" else
             "The numbers are hidden under blue squares and only shown at "
             "the end of the video.")
    return ("The video shows a sliding puzzle on a board: each square holds "
            "a number, 0 is the blank. In each move, a square next to the "
            "blank slides into it; the move word is the direction the square "
            "moves. Cells are written (row letter, column number), 'a' is "
            f"the top row and columns count from 1 on the left. {shown}")

  def op_text(self, op):
    r, c, d = op
    if r is None:
      return d
    return f"({core.row_letter(r)},{c + 1}) {d}"

  def parse_op(self, text):
    t = core.norm(text)
    m = re.search(r"\(\s*([a-z])\s*,\s*(\d+)\s*\)\s*" + _DIR_RE, t)
    if m:
      return (core.letter_index(m.group(1)), int(m.group(2)) - 1, m.group(3))
    m = re.fullmatch(r"(?:\d+(?:st|nd|rd|th)\s*:\s*)?" + _DIR_RE, t)
    if m:
      return (None, None, m.group(1))
    raise core.MalformedAnswerError(f"number: not a move: {text!r} (expected "
                                    "e.g. '(a,2) right')")

  def format_state(self, state):
    return ", ".join(f"({core.row_letter(r)},{c + 1}): {v}"
                     for r, row in enumerate(state) for c, v in enumerate(row))

  def parse_state(self, text):
    cells = re.findall(r"\(\s*([a-z])\s*,\s*(\d+)\s*\)\s*:\s*(\d+)",
                       core.norm(text))
    n = _square_side(len(cells), text)
    board = [[None] * n for _ in range(n)]
    for row, col, v in cells:
      r, c = core.letter_index(row), int(col) - 1
      if not (0 <= r < n and 0 <= c < n) or board[r][c] is not None:
        raise core.MalformedAnswerError(f"number: bad or repeated cell "
                                        f"({row},{col}) in {text!r}")
      board[r][c] = int(v)
    return tuple(tuple(r) for r in board)

  def count_spec(self, rng, size):
    d = str(rng.choice(list(DIRS)))
    return (f"How many times was the '{d}' move performed?", {"dir": d})

  def count_match(self, params, op):
    return op[2] == params["dir"]

  def diff(self, at, other, params):
    return _cell_dict_diff(at, other)

  def format_diff(self, diff):
    return ", ".join(f"({core.row_letter(r)},{c + 1}): {v}"
                     for (r, c), v in diff) or "none"

  def parse_diff(self, text):
    t = core.norm(text)
    cells = re.findall(r"\(\s*([a-z])\s*,\s*(\d+)\s*\)\s*:\s*(\d+)", t)
    if not cells and "none" not in t:
      raise core.MalformedAnswerError(f"number: no '(a,1): v' cells or "
                                      f"'none' in {text!r}")
    return tuple(sorted(((core.letter_index(a), int(b) - 1), int(v))
                        for a, b, v in cells))

  def render(self, state, op, *, reveal, frame_size):
    n = _side(state)
    frame = R.canvas(frame_size, R.GRID)
    for (r, c), box in zip(np.ndindex(n, n), R.grid_cells(frame_size, n)):
      v = state[r][c]
      colour = R.PALETTE[v] if reveal else (R.PALETTE[0] if v == 0
                                            else R.MASK_BLUE)
      R.fill(frame, *box, colour)
      if op is not None and (r, c) == (op[0], op[1]):
        R.fill(frame, *box, R.HIGHLIGHT)
        R.arrow_bar(frame, box, op[2], R.WHITE)
    return frame


@core.DEMOS.register("circle")
class CircleEngine(core.Engine):
  """Lights-out with a moving red circle; pieces shown only at the reveal."""
  name, key = "circle", "grid"
  sizes = (3, 4)
  op_noun = "circle moves"
  state_phrase = "colour of the piece at every intersection"
  diff_phrase = "pieces"

  def init_state(self, rng, size):
    board = tuple(tuple(int(v) for v in row)
                  for row in rng.integers(0, 2, (size, size)))
    return (board, (int(rng.integers(size)), int(rng.integers(size))))

  def view(self, state):
    return state[0]

  def legal_ops(self, state, prev=None):
    board, (y, x) = state
    n = len(board)
    ops = []
    for d, (dy, dx) in DIRS.items():
      if prev is not None and d == OPPOSITE[prev[2]]:
        continue
      if 0 <= y + dy < n and 0 <= x + dx < n:
        ops.append((y, x, d))
    return ops

  @staticmethod
  def _flip(board, y, x):
    rows = [list(r) for r in board]
    n = len(rows)
    for dy, dx in ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)):
      if 0 <= y + dy < n and 0 <= x + dx < n:
        rows[y + dy][x + dx] ^= 1
    return tuple(tuple(r) for r in rows)

  def resolve(self, state, op):
    board, pos = state
    y, x, d = op
    if y is not None and (y, x) != pos:
      raise core.IllegalOperationError(f"circle: the circle is at {pos}, "
                                       f"not {(y, x)}")
    dy, dx = DIRS[d]
    n = len(board)
    if not (0 <= pos[0] + dy < n and 0 <= pos[1] + dx < n):
      raise core.IllegalOperationError(f"circle: {d} leaves the board")
    return (pos[0], pos[1], d)

  def apply(self, state, op):
    y, x, d = self.resolve(state, op)
    dy, dx = DIRS[d]
    return (self._flip(state[0], y + dy, x + dx), (y + dy, x + dx))

  def undo(self, state, op):
    y, x, d = op
    dy, dx = DIRS[d]
    if y is None or state[1] != (y + dy, x + dx):
      raise core.IllegalOperationError(f"circle: cannot undo {op}")
    return (self._flip(state[0], y + dy, x + dx), (y, x))

  def instruction(self, reveal):
    shown = ("The pieces are shown only at the beginning of the video." if
             reveal == "start" else "The pieces are shown only at the end of "
             "the video.")
    return ("The video shows a board with a black or white piece at every "
            "intersection and a red circle. In each move the circle moves "
            "to an adjacent intersection; the piece where it lands and the "
            "pieces at its up, down, left and right neighbours flip colour "
            "(the start position does not flip). Positions are written "
            "(column letter, row number), rows count from 0 at the top. "
            f"{shown}")

  def op_text(self, op):
    y, x, d = op
    return d if y is None else f"({core.row_letter(x)},{y}) {d}"

  def parse_op(self, text):
    t = core.norm(text)
    m = re.search(r"\(\s*([a-z])\s*,\s*(\d+)\s*\)\s*" + _DIR_RE, t)
    if m:
      return (int(m.group(2)), core.letter_index(m.group(1)), m.group(3))
    m = re.fullmatch(r"(?:\d+(?:st|nd|rd|th)\s*:\s*)?" + _DIR_RE, t)
    if m:
      return (None, None, m.group(1))
    raise core.MalformedAnswerError(f"circle: not a move: {text!r} (expected "
                                    "e.g. '(a,0) right')")

  def format_state(self, board):
    return ", ".join(
        f"({core.row_letter(x)},{y}): {'black' if v else 'white'}"
        for y, row in enumerate(board) for x, v in enumerate(row))

  def parse_state(self, text):
    cells = re.findall(r"\(\s*([a-z])\s*,\s*(\d+)\s*\)\s*:\s*(black|white)",
                       core.norm(text))
    n = _square_side(len(cells), text)
    board = [[None] * n for _ in range(n)]
    for col, row, v in cells:
      y, x = int(row), core.letter_index(col)
      if not (0 <= y < n and 0 <= x < n) or board[y][x] is not None:
        raise core.MalformedAnswerError(f"circle: bad or repeated cell "
                                        f"({col},{row}) in {text!r}")
      board[y][x] = int(v == "black")
    return tuple(tuple(r) for r in board)

  def count_spec(self, rng, size):
    d = str(rng.choice(list(DIRS)))
    return (f"How many times was the '{d}' move performed?", {"dir": d})

  def count_match(self, params, op):
    return op[2] == params["dir"]

  def diff(self, at, other, params):
    return _cell_dict_diff(at[0], other[0])

  def format_diff(self, diff):
    return ", ".join(f"({core.row_letter(x)},{y}): "
                     f"{'black' if v else 'white'}"
                     for (y, x), v in diff) or "none"

  def parse_diff(self, text):
    t = core.norm(text)
    cells = re.findall(r"\(\s*([a-z])\s*,\s*(\d+)\s*\)\s*:\s*(black|white)",
                       t)
    if not cells and "none" not in t:
      raise core.MalformedAnswerError(f"circle: no '(a,0): black' cells or "
                                      f"'none' in {text!r}")
    return tuple(sorted(((int(y), core.letter_index(x)), int(v == "black"))
                        for x, y, v in cells))

  def render(self, state, op, *, reveal, frame_size):
    board, pos = state
    n = len(board)
    frame = R.canvas(frame_size, R.GRID)
    for (y, x), box in zip(np.ndindex(n, n), R.grid_cells(frame_size, n)):
      colour = ((R.BLACK if board[y][x] else R.WHITE) if reveal
                else R.BACKGROUND)
      R.fill(frame, *box, colour)
      if (y, x) == pos:
        y0, x0, y1, x1 = box
        m = max(1, (y1 - y0) // 4)
        R.fill(frame, y0 + m, x0 + m, y1 - m, x1 - m, R.RED)
        if op is not None:
          R.arrow_bar(frame, box, op[2], R.RED)
    return frame


@core.DEMOS.register("cup")
class CupEngine(core.Engine):
  """N x N cups, each over a coin or nothing; swaps carry the contents."""
  name, key = "cup", "cup"
  sizes = (3, 4)
  op_noun = "cup swaps"
  state_phrase = "list of positions of the cups covering a coin"
  diff_phrase = "cup positions"
  coin_prob = 0.4  # [inferred, spec R.4]
  predict_len = 2

  def init_state(self, rng, size):
    return tuple(tuple(int(v) for v in row)
                 for row in (rng.random((size, size)) < self.coin_prob))

  def view(self, state):
    return tuple((r, c) for r, row in enumerate(state)
                 for c, v in enumerate(row) if v)

  def legal_ops(self, state, prev=None):
    n = len(state)
    cells = [(r, c) for r in range(n) for c in range(n)]
    return [(a, b) for i, a in enumerate(cells) for b in cells[i + 1:]
            if (a, b) != prev]  # no immediate repeat: swaps self-invert

  def apply(self, state, op):
    a, b = op
    n = len(state)
    if a == b or not all(0 <= v < n for v in a + b):
      raise core.IllegalOperationError(f"cup: bad swap {op}")
    return _swap(state, a, b)

  undo = apply

  def solve(self, state, target, max_len):
    have, goal = set(self.view(state)), set(self.view(target))
    extra, missing = sorted(have - goal), sorted(goal - have)
    if len(extra) != len(missing):
      return []  # a different number of coins: unreachable by swaps
    return [tuple(sorted((a, b))) for a, b in zip(extra, missing)]

  def instruction(self, reveal):
    shown = ("At the beginning of the video all cups are lifted to show the "
             "coins." if reveal == "start" else "At the end of the video all "
             "cups are lifted to show the coins.")
    return ("The video shows a board of cups; each cup covers a coin or "
            "nothing. In each step two cups are swapped together with their "
            "contents. Positions are written row letter + column number, "
            f"'a1' is the top-left cup. {shown}")

  @staticmethod
  def _cell(rc) -> str:
    return f"{core.row_letter(rc[0])}{rc[1] + 1}"

  def op_text(self, op):
    return f"({self._cell(op[0])}, {self._cell(op[1])})"

  def parse_op(self, text):
    cells = re.findall(r"\b([a-z])(\d+)\b", core.norm(text))
    if len(cells) != 2:
      raise core.MalformedAnswerError(f"cup: not a swap: {text!r} (expected "
                                      "e.g. '(a1, b2)')")
    a, b = sorted((core.letter_index(r), int(c) - 1) for r, c in cells)
    return (a, b)

  def format_state(self, cells):
    return ", ".join(self._cell(rc) for rc in cells) or "none"

  def parse_state(self, text):
    t = core.norm(text)
    cells = re.findall(r"\b([a-z])(\d+)\b", t)
    if not cells and "none" not in t:
      raise core.MalformedAnswerError(f"cup: no positions like 'a1' or "
                                      f"'none' in {text!r}")
    return tuple(sorted(set((core.letter_index(r), int(c) - 1)
                            for r, c in cells)))

  def count_spec(self, rng, size):
    r = int(rng.integers(size))
    return (f"How many swaps involved a cup in row {core.row_letter(r)}?",
            {"row": r})

  def count_match(self, params, op):
    return op[0][0] == params["row"] or op[1][0] == params["row"]

  def diff(self, at, other, params):
    return _cell_dict_diff(at, other)

  def format_diff(self, diff):
    return ", ".join(f"{self._cell(rc)}: {'coin' if v else 'empty'}"
                     for rc, v in diff) or "none"

  def parse_diff(self, text):
    t = core.norm(text)
    cells = re.findall(r"\b([a-z])(\d+)\s*:\s*(coin|empty)", t)
    if not cells and "none" not in t:
      raise core.MalformedAnswerError(f"cup: no 'a1: coin' entries or 'none' "
                                      f"in {text!r}")
    return tuple(sorted(((core.letter_index(r), int(c) - 1), int(v == "coin"))
                        for r, c, v in cells))

  def render(self, state, op, *, reveal, frame_size):
    n = len(state)
    frame = R.canvas(frame_size, R.BACKGROUND)
    swapped = set(op) if op is not None else set()
    for (r, c), box in zip(np.ndindex(n, n), R.grid_cells(frame_size, n)):
      y0, x0, y1, x1 = box
      if reveal:
        R.fill(frame, *box, R.PALETTE[0])
        if state[r][c]:
          m = max(1, (y1 - y0) // 4)
          R.fill(frame, y0 + m, x0 + m, y1 - m, x1 - m, R.PALETTE[3])
      else:
        R.fill(frame, *box, R.HIGHLIGHT if (r, c) in swapped else
               R.MASK_BLUE)
    return frame
