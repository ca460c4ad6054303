"""One figure writer for experiments: a matplotlib figure saved to a path.

    with figures.figure(path, figsize=(6, 3.6)) as (fig, ax):
      ax.plot(...)
    # tight layout, saved at `dpi`, closed; the path is `figure(...).path`

Uses the non-interactive Agg backend (no display needed); matplotlib is
imported only when a figure is written.
"""

from __future__ import annotations

import contextlib

from jaxlab import plotting


@contextlib.contextmanager
def figure(path: str, *, figsize=(6, 3.6), nrows: int = 1, ncols: int = 1,
           dpi: int = 100, **subplots_kw):
  """Yields `(fig, axes)` of `plt.subplots(nrows, ncols)`; on exit applies
  `tight_layout`, saves to `path` and closes the figure."""
  plt = plotting.pyplot()
  fig, axes = plt.subplots(nrows, ncols, figsize=figsize, **subplots_kw)
  try:
    yield fig, axes
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
  finally:
    plt.close(fig)
