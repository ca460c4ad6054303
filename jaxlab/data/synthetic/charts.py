"""Procedural chart-to-code pairs (paper F miniature): grammar and charts.

    charts = make_charts(16, seed=1, fixed_axes=True)   # dicts, memoised
    charts[0]["code"]   # "plt.bar([0,1,2],[3,5,2]);plt.ylim(0,10);..."
    charts[0]["ids"]    # grammar ids of the code + EOS
    batch = sft_arrays(charts, max_len=28)   # images [B,32,32,3], ids, mask

Charts are bar / line / scatter plots of 3-4 integer values (1-9) with a
one-word title, rendered at 64x64 by the sandbox's code path (trusted
ground-truth code runs in-process, `render_trusted`). With `fixed_axes` the
code pins the y range to (0, 10), so a value is a height on a fixed scale.
The code is written in a tiny grammar, one token per step (`VOCAB`); the
policy sees the image 2x downsampled to 32x32 (`small_image`).
"""

from __future__ import annotations

import functools

import numpy as np

from jaxlab import plotting

PAD, BOS, EOS = 0, 1, 2
KINDS = ("bar", "plot", "scatter")
TITLES = ("cost", "sales", "rate", "time")
# The fixed y range of `charts.fixed_axes` (values are 1..9). Last in the
# vocabulary, so a policy without it (`fixed_axes=False`) has the first
# len(VOCAB) - 1 ids and the same initialisation as before the option.
YLIM = ";plt.ylim(0,10)"
VOCAB = (["<pad>", "<bos>", "<eos>"] + [f"plt.{k}(" for k in KINDS]
         + ["[", "]", ",", ")", ";plt.title('", "')"]
         + [str(d) for d in range(10)] + list(TITLES) + [YLIM])
TOK = {s: i for i, s in enumerate(VOCAB)}


def vocab_size(fixed_axes: bool) -> int:
  """Grammar ids the policy has: the y-range token only with fixed axes."""
  return len(VOCAB) if fixed_axes else len(VOCAB) - 1


def chart_code(kind: str, values, title: str, *,
               fixed_axes: bool = False) -> list[str]:
  """Grammar tokens of `plt.<kind>([0..n-1],[values])[;plt.ylim(0,10)]
  ;plt.title('<title>')`.

  With `fixed_axes` the chart pins its y range, so a value is a height
  on a fixed scale; without it matplotlib autoscales the axis and, with
  tick labels illegible at 64 px, only the values' ratios are visible.
  """
  xs = list(range(len(values)))
  toks = [f"plt.{kind}(", "["]
  for i, x in enumerate(xs):
    toks += ([","] if i else []) + [str(x)]
  toks += ["]", ",", "["]
  for i, v in enumerate(values):
    toks += ([","] if i else []) + [str(int(v))]
  toks += ["]", ")"] + ([YLIM] if fixed_axes else [])
  toks += [";plt.title('", title, "')"]
  return toks


def detokenize(ids) -> str:
  out = []
  for i in ids:
    if i == EOS:
      break
    if 3 <= i < len(VOCAB):
      out.append(VOCAB[i])
  return "".join(out)


def render_trusted(code: str, size=(64, 64)) -> np.ndarray:
  """The sandbox's rendering path, in-process, for trusted ground truth."""
  plt = plotting.pyplot()
  plt.close("all")
  exec(compile(code, "<gt>", "exec"), {"plt": plt, "np": np})  # noqa: S102
  fig = plt.figure(plt.get_fignums()[-1])
  h, w = size
  fig.set_dpi(100.0)
  fig.set_size_inches(w / 100.0, h / 100.0)
  fig.canvas.draw()
  img = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
  # The sandbox round-trips through PNG (lossless), so this matches it.
  plt.close("all")
  return img


@functools.lru_cache(maxsize=8)
def make_charts(n: int, seed: int, fixed_axes: bool = False) -> list[dict]:
  """`n` random charts from `seed`: kind, values, title, code, grammar ids
  and the 64x64 rendering (memoised: the held-out set is shared by seeds;
  treat the result as read-only). `fixed_axes`: see `chart_code`."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    kind = KINDS[rng.integers(len(KINDS))]
    values = rng.integers(1, 10, int(rng.integers(3, 5))).tolist()
    title = TITLES[rng.integers(len(TITLES))]
    toks = chart_code(kind, values, title, fixed_axes=fixed_axes)
    code = "".join(toks)
    img = render_trusted(code)
    out.append({"kind": kind, "values": values, "title": title, "code": code,
                "ids": [TOK[t] for t in toks] + [EOS], "image": img})
  return out


def small_image(img_hw3: np.ndarray) -> np.ndarray:
  """64x64 uint8 -> 32x32 float in [0, 1] (2x2 mean pooling)."""
  x = img_hw3.astype(np.float32) / 255.0
  return x.reshape(32, 2, 32, 2, 3).mean((1, 3))


def completion_mask(ids: np.ndarray) -> np.ndarray:
  """1 on generated tokens up to and including the first EOS."""
  gen = ids[:, 1:]
  eos = np.cumsum(gen == EOS, 1)
  keep = (eos == 0) | ((eos == 1) & (gen == EOS))
  return np.pad(keep, ((0, 0), (1, 0))).astype(np.float32)


def sft_arrays(charts, max_len: int) -> dict[str, np.ndarray]:
  """Teacher-forcing arrays: `images [B, 32, 32, 3]`, `ids [B, max_len + 1]`
  ([BOS, code.., EOS, pad..]) and `mask` (1 on the tokens to predict)."""
  ids = np.zeros((len(charts), max_len + 1), np.int32)
  for i, c in enumerate(charts):
    seq = [BOS] + c["ids"]
    ids[i, :len(seq)] = seq
  return {"images": np.stack([small_image(c["image"]) for c in charts]),
          "ids": ids, "mask": completion_mask(ids)}
