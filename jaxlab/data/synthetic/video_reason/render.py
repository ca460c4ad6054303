"""A pure-numpy rasteriser for the demos (spec R.4: keeps the stack CPU-light).

Values are drawn as colours of one fixed palette (a tile number, a chip
value, a card's suit and rank), so that a frame encoder can read them at
32x32; text (the File demo's terminal) goes through Pillow's bitmap font.
"""

from __future__ import annotations

import numpy as np

# 20 well-separated RGB colours; index = value (0 = the blank / empty).
PALETTE = np.array([
    (20, 20, 20), (230, 25, 75), (60, 180, 75), (255, 225, 25),
    (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
    (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128),
    (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0),
    (170, 255, 195), (128, 128, 0), (255, 215, 180), (0, 0, 128),
], np.uint8)
BACKGROUND = (235, 235, 235)
GRID = (90, 90, 90)
MASK_BLUE = (40, 70, 200)
HIGHLIGHT = (255, 200, 0)
RED = (220, 0, 0)
GREEN = (0, 170, 0)
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)


def canvas(size: int, colour=BACKGROUND) -> np.ndarray:
  frame = np.empty((size, size, 3), np.uint8)
  frame[:] = colour
  return frame


def fill(frame: np.ndarray, y0: int, x0: int, y1: int, x1: int,
         colour) -> None:
  h, w = frame.shape[:2]
  frame[max(y0, 0):min(y1, h), max(x0, 0):min(x1, w)] = colour


def grid_cells(size: int, n: int) -> list[tuple[int, int, int, int]]:
  """Cell boxes (y0, x0, y1, x1) of an n x n board on a size x size frame,
  row-major, with a one-pixel gap."""
  cs = size // n
  off = (size - cs * n) // 2
  return [(off + r * cs + 1, off + c * cs + 1, off + (r + 1) * cs,
           off + (c + 1) * cs) for r in range(n) for c in range(n)]


def arrow_bar(frame: np.ndarray, box, direction: str, colour) -> None:
  """A bar on the side of `box` that points in `direction`."""
  y0, x0, y1, x1 = box
  t = max(1, (y1 - y0) // 4)
  if direction == "up":
    fill(frame, y0, x0, y0 + t, x1, colour)
  elif direction == "down":
    fill(frame, y1 - t, x0, y1, x1, colour)
  elif direction == "left":
    fill(frame, y0, x0, y1, x0 + t, colour)
  else:
    fill(frame, y0, x1 - t, y1, x1, colour)


def text_frame(lines: list[str], size: int) -> np.ndarray:
  """A terminal screenshot: light text on black, Pillow's bitmap font."""
  from PIL import Image, ImageDraw, ImageFont  # pylint: disable=g-import-not-at-top
  scale = max(1, 256 // size)
  img = Image.new("RGB", (size * scale, size * scale), (10, 10, 10))
  draw = ImageDraw.Draw(img)
  font = ImageFont.load_default_imagefont()
  y = 1
  for line in lines:
    draw.text((1, y), line, fill=(200, 255, 200), font=font)
    y += 11
  img = img.resize((size, size), Image.Resampling.BOX)
  return np.asarray(img, np.uint8)
