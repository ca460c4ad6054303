"""Are the metric libraries a bottleneck? ROUGE-L, Levenshtein and SSIM.

    python -m jaxlab.experiments.bench text_metrics [--repeats=5] [--out=FILE]

jaxlab computes ROUGE with `rouge_score`, edit distances with `rapidfuzz`
and SSIM with scikit-image (`jaxlab.evals.text`,
`jaxlab.rewards.chart.judges`). Each is timed per call on the inputs of its
hot path, beside the hand-written version the library replaced (kept here
only as a timing baseline):

  rouge_l_recall  PMC's reward s(x) (stemmer on): a ~40-word sample vs a
                  ~25-word reference (200 pairs over an ~80-word vocabulary,
                  so stem memos are warm after the first pass, as in a
                  reward loop);
  levenshtein     chart R_text's edit similarity: two ~30-character labels;
  ssim            chart R_vis: two 64 x 64 RGB renderings.

`calls_per_step` is how often the hot path calls the metric per update of
the default preset (PMC: `unlearn.batch_size * num_samples` samples scored;
chart: ~5 text keys and one R_vis per completion, 16 completions),
so `ms_per_step` is what the metric adds to one update. Prints one JSON
object (also written to --out when given).
"""

import argparse
import functools
import json
import platform
import random
import statistics
import time

import numpy as np

from jaxlab.evals import text
from jaxlab.rewards.chart import judges

_WORDS = ("the", "model", "was", "born", "in", "osaka", "studied", "running",
          "generalizations", "quickly", "relational", "ponies", "answered",
          "1984", "caresses", "painting", "famous", "museum", "city", "of")


# -- the former hand-written implementations (timing baselines only) --------


@functools.lru_cache(maxsize=1)
def _stemmer():
  from nltk.stem import porter  # pylint: disable=g-import-not-at-top
  return porter.PorterStemmer()


@functools.lru_cache(maxsize=65536)
def _stem(token: str) -> str:
  return _stemmer().stem(token)


def _handwritten_rouge_l_recall(pred: str, ref: str) -> float:
  import re  # pylint: disable=g-import-not-at-top
  def tok(s):
    toks = re.split(r"\s+", re.sub(r"[^a-z0-9]+", " ", s.lower()))
    toks = [_stem(t) if len(t) > 3 else t for t in toks]
    return [t for t in toks if re.match(r"^[a-z0-9]+$", t)]
  r, p = tok(ref), tok(pred)
  if not r or not p:
    return 0.0
  prev = [0] * (len(p) + 1)
  for x in r:
    cur = [0] * (len(p) + 1)
    for j, y in enumerate(p, start=1):
      cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
    prev = cur
  return prev[-1] / len(r)


def _handwritten_levenshtein(a, b) -> int:
  if len(a) < len(b):
    a, b = b, a
  prev = list(range(len(b) + 1))
  for i, x in enumerate(a, start=1):
    cur = [i] + [0] * len(b)
    for j, y in enumerate(b, start=1):
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
    prev = cur
  return prev[-1]


def _handwritten_ssim(x, y, k=7, data_range=255.0) -> float:
  def box(z):
    c = np.cumsum(np.cumsum(np.pad(z, ((1, 0), (1, 0))), 0), 1)
    return (c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]) / (k * k)
  x, y = judges._gray(x), judges._gray(y)  # pylint: disable=protected-access
  n = k * k
  c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
  mx, my = box(x), box(y)
  vx = n / (n - 1) * (box(x * x) - mx * mx)
  vy = n / (n - 1) * (box(y * y) - my * my)
  vxy = n / (n - 1) * (box(x * y) - mx * my)
  return float(np.mean(((2 * mx * my + c1) * (2 * vxy + c2)) /
                       ((mx * mx + my * my + c1) * (vx + vy + c2))))


# -- timing ------------------------------------------------------------------


def _per_call_us(fn, inputs, repeats: int) -> float:
  """Median over `repeats` of the mean microseconds per call over `inputs`."""
  fn(*inputs[0])
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for args in inputs:
      fn(*args)
    times.append((time.perf_counter() - t0) / len(inputs) * 1e6)
  return statistics.median(times)


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="python -m jaxlab.experiments.bench "
                                   "text_metrics")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  rng = random.Random(0)
  np_rng = np.random.default_rng(0)

  def sentence(n):
    return " ".join(rng.choice(_WORDS) + rng.choice(("", "s", "ing", "ed"))
                    for _ in range(n))

  rouge_in = [(sentence(40), sentence(25)) for _ in range(200)]
  lev_in = [("".join(rng.choice("abcdefgh 日本") for _ in range(30)),
             "".join(rng.choice("abcdefgh 日本") for _ in range(30)))
            for _ in range(500)]
  img_in = []
  for _ in range(20):
    a = np_rng.integers(0, 256, (64, 64, 3)).astype(np.uint8)
    img_in.append((a, np.clip(a + np_rng.normal(0, 40, a.shape), 0, 255)))
  for pred, ref in rouge_in[:20]:
    assert abs(text.rouge_l_recall(pred, ref) -
               _handwritten_rouge_l_recall(pred, ref)) < 1e-12
  for a, b in lev_in[:50]:
    assert text.levenshtein(a, b) == _handwritten_levenshtein(a, b)
  for a, b in img_in[:5]:
    assert abs(judges.ssim(a, b) - _handwritten_ssim(a, b)) < 1e-10

  # Default presets (jaxlab/configs/*.py): PMC unlearn batch 8 x 5 samples; chart
  # RL 4 prompts x group 4 = 16 completions, each with ~5 text keys (title,
  # labels, legend, ticks) and one rendering.
  rows = {
      "rouge_l_recall": (text.rouge_l_recall, _handwritten_rouge_l_recall,
                         rouge_in, 8 * 5),
      "levenshtein": (text.levenshtein, _handwritten_levenshtein, lev_in,
                      16 * 5),
      "ssim": (judges.ssim, _handwritten_ssim, img_in, 16),
  }
  out = {"machine": platform.processor() or platform.machine(),
         "repeats": args.repeats, "metrics": {}}
  for name, (lib, hand, inputs, calls) in rows.items():
    lib_us = _per_call_us(lib, inputs, args.repeats)
    hand_us = _per_call_us(hand, inputs, args.repeats)
    out["metrics"][name] = {
        "library_us_per_call": round(lib_us, 2),
        "handwritten_us_per_call": round(hand_us, 2),
        "library_over_handwritten": round(lib_us / hand_us, 3),
        "calls_per_step": calls,
        "library_ms_per_step": round(lib_us * calls / 1e3, 3),
    }
  s = json.dumps(out, indent=2)
  print(s)
  if args.out:
    with open(args.out, "w") as f:
      f.write(s + "\n")


if __name__ == "__main__":
  import sys  # pylint: disable=g-import-not-at-top
  main(sys.argv[1:])
