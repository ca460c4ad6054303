"""The report's statistics: per-cell values, paired differences by seed with
their 95 % t-intervals, and how far a rerun's cell moved (in standard
errors)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from scipy import stats

from jaxlab.experiments import results as results_lib

# -- paired statistics -----------------------------------------------------------------


def values(cell: dict[str, Any] | None) -> list[float]:
  """The finite values of a cell (None = missing / NaN, left out)."""
  if not cell:
    return []
  return [float(v) for v in cell["values"] if v is not None]


mean_std = results_lib.mean_std


def paired_differences(cell_a: dict[str, Any] | None,
                       cell_b: dict[str, Any] | None) -> list[float]:
  """a − b over the seeds both cells have (finite values), in seed order."""
  if not cell_a or not cell_b:
    return []
  b = {
      s: v
      for s, v in zip(cell_b["seeds"], cell_b["values"])
      if s is not None and v is not None
  }
  return [
      float(v) - b[s]
      for s, v in zip(cell_a["seeds"], cell_a["values"])
      if s is not None and v is not None and s in b
  ]


# Fewest paired seeds whose t-interval the tables show: at n = 2 the
# interval rests on one degree of freedom (t_{0.975, 1} = 12.7) and one
# spread estimate, which says little.
MIN_INTERVAL_SEEDS = 3
# Differences whose range is below this (relative to max(1, max |d|)) count
# as identical: float rounding of a − b, not a spread between seeds.
IDENTICAL_RTOL = 1e-9


@dataclasses.dataclass
class PairedStat:
  """Paired differences d = a − b over n seeds.

  Attributes:
    mean: mean of d.
    std: sample std of d (ddof 1; 0 for n < 2).
    n: seeds both cells have.
    low, high: the t-interval (NaN for n < 2).
    identical: n >= 1 and every d equal (up to `IDENTICAL_RTOL`).
  """
  mean: float
  std: float
  n: int
  low: float
  high: float
  identical: bool = False


def paired_interval(diffs: Sequence[float], level: float = 0.95) -> PairedStat:
  """Mean paired difference and its two-sided t-interval (n − 1 dof).

      mean(d) ± t_{(1 + level) / 2, n − 1} · s_d / sqrt(n)

  The interval is computed for every n >= 2; whether the tables show it is
  `degenerate_reason`'s call.
  """
  m, s, n = mean_std(diffs)
  identical = n >= 1 and (max(diffs) - min(diffs) <= IDENTICAL_RTOL *
                          max(1.0, max(abs(d) for d in diffs)))
  if n < 2:
    return PairedStat(m, s, n, float("nan"), float("nan"), identical)
  half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * s / math.sqrt(n)
  return PairedStat(m, s, n, m - half, m + half, identical)


def degenerate_reason(st: PairedStat) -> str | None:
  """Why a paired comparison has no informative interval, or None.

  n < `MIN_INTERVAL_SEEDS`, or differences identical in every seed (s_d = 0:
  the t-interval has zero width, which says only that the differences were
  the same, not that the mean difference is known exactly).
  """
  if st.n == 0:
    return "no seed in both rows"
  if st.n < MIN_INTERVAL_SEEDS:
    return f"n = {st.n}: no interval"
  if st.identical:
    return "identical in every seed"
  return None


# -- verifying ------------------------------------------------------------------


@dataclasses.dataclass
class Shift:
  table: str
  row: str
  column: str
  old: str
  new: str
  shift: float  # in standard errors; inf: missing in the rerun


def cell_shift(old: dict[str, Any] | None, new: dict[str, Any] | None,
               column: dict[str, Any]) -> float:
  """(mean_new − mean_old) / sqrt(s_old²/n_old + s_new²/n_new), floored.

  The denominator is at least half the displayed resolution,
  0.5 · 10^-decimals / scale. A cell the rerun lacks shifts by inf; one that
  is empty in both, by 0.
  """
  mo, so, no = mean_std(values(old))
  mn, sn, nn = mean_std(values(new))
  if no == 0 and nn == 0:
    return 0.0
  if no == 0 or nn == 0:
    return math.inf
  se = math.sqrt(so**2 / no + sn**2 / nn)
  floor = 0.5 * 10.0**(-int(column.get("decimals", 3))) / float(
      column.get("scale", 1.0))
  return (mn - mo) / max(se, floor)
