"""One progress reporter for every run: stage, step / total, ETA, metric.

Every experiment runs under `jaxlab.main`, which calls `start(name)`; from
then on the lines a person watches come from here, on process 0 only:

    [pmc       12s] GA seed 0                              <- say / stage
    [pmc       31s] GA seed 0: step 40/120  loss 2.3141  ETA 1m02s
    [pmc       61s] GA seed 0: step 95/120  loss 1.9020  ETA 14s

* `stage(label, total=None)` names what runs now (a seed, a method, a
  benchmark pass) and prints it;
* `update(step, total=None, **metrics)` records where the stage is; it
  prints at most every `every` seconds (10), so a fast loop costs nothing;
  `jaxlab.train.runner.StepRunner` calls it on every optimizer step, so
  every sub-training (LoRA, GRPO, unlearning, distillation) reports itself;
* a heartbeat thread prints the last known state whenever nothing was
  printed for `heartbeat` seconds (20), so no stage (decoding, a search, a
  compile) is minutes of silence.

The ETA is the stage's mean time per step so far times the steps left.
Lines go to stdout, flushed (a log file shows where a run is); absl logging
is left to its own verbosity.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

EVERY_S = 10.0
HEARTBEAT_S = 20.0


def _is_main_process() -> bool:
  try:
    import jax  # pylint: disable=g-import-not-at-top
    return jax.process_index() == 0
  except Exception:  # pylint: disable=broad-except
    return True  # before a backend exists: a single process


def fmt_duration(seconds: float) -> str:
  """`14s`, `1m02s`, `2h05m`."""
  s = int(round(max(0.0, seconds)))
  if s < 60:
    return f"{s}s"
  if s < 3600:
    return f"{s // 60}m{s % 60:02d}s"
  return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _fmt_value(v: Any) -> str:
  if isinstance(v, float):
    return f"{v:.4f}" if abs(v) < 1e4 else f"{v:.4g}"
  return str(v)


class Reporter:
  """The state behind the module functions (one per process)."""

  def __init__(self, name: str = "jaxlab", *, every: float = EVERY_S,
               heartbeat: float = HEARTBEAT_S,
               clock: Callable[[], float] = time.monotonic,
               write: Callable[[str], None] | None = None):
    self.name = name
    self.every = float(every)
    self.heartbeat = float(heartbeat)
    self.clock = clock
    self._write = write
    self._lock = threading.Lock()
    self.t0 = clock()
    self.last_print = self.t0
    self.label = ""
    self.total: int | None = None
    self.step: int | None = None
    self.metrics: dict[str, Any] = {}
    self.stage_t0 = self.t0
    self.stage_step0 = 0
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None

  # -- printing --------------------------------------------------------------
  def _emit(self, msg: str) -> None:
    line = f"[{self.name} {self.clock() - self.t0:6.0f}s] {msg}"
    self.last_print = self.clock()
    if self._write is not None:
      self._write(line)
    elif _is_main_process():
      print(line, file=sys.stdout, flush=True)

  def say(self, msg: str) -> None:
    with self._lock:
      self._emit(msg)

  def status(self) -> str:
    """`label: step i/total  metric v  ETA t` (the parts that are known)."""
    parts = [self.label or "running"]
    if self.step is not None:
      parts[0] += f": step {self.step}" + (
          f"/{self.total}" if self.total else "")
    parts += [f"{k} {_fmt_value(v)}" for k, v in self.metrics.items()]
    eta = self.eta()
    if eta is not None:
      parts.append(f"ETA {fmt_duration(eta)}")
    elif self.step is None:
      parts.append(f"{fmt_duration(self.clock() - self.stage_t0)} in stage")
    return "  ".join(parts)

  def eta(self) -> float | None:
    """Seconds left in the stage at its mean pace so far (None unknown)."""
    if not self.total or self.step is None:
      return None
    done = self.step - self.stage_step0
    if done <= 0:
      return None
    per_step = (self.clock() - self.stage_t0) / done
    return per_step * max(0, self.total - self.step)

  # -- state -----------------------------------------------------------------
  def stage(self, label: str, total: int | None = None) -> None:
    with self._lock:
      self.label, self.total = str(label), total
      self.step, self.metrics = None, {}
      self.stage_t0, self.stage_step0 = self.clock(), 0
      self._emit(self.label + (f" ({total} steps)" if total else ""))

  def update(self, step: int, total: int | None = None,
             **metrics: Any) -> None:
    with self._lock:
      total = self.total if total is None else int(total)
      if self.step is not None and (step < self.step or total != self.total):
        # The next loop under the same stage (another seed's sub-training):
        # its pace is measured from here.
        self.stage_t0, self.stage_step0 = self.clock(), int(step)
      self.total = total
      self.step = int(step)
      self.metrics.update({k: v for k, v in metrics.items() if v is not None})
      if self.clock() - self.last_print >= self.every:
        self._emit(self.status())

  def beat(self) -> bool:
    """Prints the status when silent for `heartbeat` s; True if it did."""
    with self._lock:
      if self.clock() - self.last_print >= self.heartbeat:
        self._emit(self.status())
        return True
      return False

  # -- heartbeat thread ------------------------------------------------------
  def start_heartbeat(self) -> None:
    if self._thread is not None or self.heartbeat <= 0:
      return

    def loop():
      while not self._stop.wait(min(self.heartbeat, self.every) / 2):
        self.beat()

    self._thread = threading.Thread(target=loop, name="jaxlab-progress",
                                    daemon=True)
    self._thread.start()

  def stop(self) -> None:
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout=5)
      self._thread = None


_current = Reporter()


def start(name: str, *, every: float = EVERY_S,
          heartbeat: float = HEARTBEAT_S, **kw: Any) -> Reporter:
  """Makes a fresh reporter for run `name` current and starts its
  heartbeat; returns it."""
  global _current
  _current.stop()
  _current = Reporter(name, every=every, heartbeat=heartbeat, **kw)
  _current.start_heartbeat()
  return _current


def stop() -> None:
  """Stops the heartbeat (the run has ended)."""
  _current.stop()


def current() -> Reporter:
  return _current


def say(msg: str) -> None:
  _current.say(msg)


def stage(label: str, total: int | None = None) -> None:
  _current.stage(label, total)


def update(step: int, total: int | None = None, **metrics: Any) -> None:
  _current.update(step, total, **metrics)
