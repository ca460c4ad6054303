"""An experiment's progress lines, timed from its start.

    log = log_lib.logger("pmc")
    log("GA seed 0")          # [pmc     12s] GA seed 0

Printed on process 0 only, flushed at once (a long run's log shows where it
is); the seconds count from `logger()`'s call.
"""

from __future__ import annotations

import time
from typing import Callable

import jax


def logger(name: str) -> Callable[[str], None]:
  """A `log(msg)` that prints `[name  Ns] msg` on process 0."""
  t0 = time.time()

  def log(msg: str) -> None:
    if jax.process_index() == 0:
      print(f"[{name} {time.time() - t0:6.0f}s] {msg}", flush=True)

  return log
