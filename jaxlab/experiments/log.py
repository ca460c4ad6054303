"""An experiment's progress lines, timed from the run's start.

    log = log_lib.logger("pmc")
    log("GA seed 0")          # [pmc     12s] GA seed 0

Each message names the stage that starts (`jaxlab.progress.stage`): the
step / total, loss and ETA lines of the sub-trainings under it, and the
heartbeat when a stage is long and silent, carry its name. Printed on
process 0 only, flushed at once.
"""

from __future__ import annotations

from typing import Callable

from jaxlab import progress


def logger(name: str) -> Callable[[str], None]:
  """A `log(msg)` that starts stage `msg` of run `name` (progress lines
  `[name  Ns] ...` on process 0). Under `jaxlab.main` the run's reporter is
  already started; elsewhere (a notebook, a test) one is started here
  without a heartbeat thread."""
  rep = progress.current()
  if rep.name != name:
    rep = progress.start(name, heartbeat=0)

  def log(msg: str) -> None:
    rep.stage(msg)

  return log
