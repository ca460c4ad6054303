"""matplotlib without a display, one way for the whole library.

    from jaxlab import plotting
    plt = plotting.pyplot()      # the Agg backend, then matplotlib.pyplot

Figures are written to files (PNG next to `results.json`), on machines with
no display; matplotlib is imported only when a figure is drawn.
`jaxlab.analysis.figures.figure` builds on it for the common "one figure to
one path" case.
"""

from types import ModuleType


def pyplot() -> ModuleType:
  """`matplotlib.pyplot` on the non-interactive Agg backend."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt
