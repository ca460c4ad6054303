"""Ctrl-C and SIGTERM as a preemption flag that loops poll.

    with preemption.handling():          # the launcher and the trainer
      for step in ...:
        ...
        if preemption.requested():       # at a step / stage boundary
          save(); break

The first SIGINT (what a terminal's Ctrl-C sends to the whole process group)
or SIGTERM only sets a flag and prints one line; the loop that polls it saves
at its next boundary and stops (the trainer: a checkpoint, then the
launcher exits 0 with the resume command). Nothing is raised inside
whatever Python code the signal lands in, so an interrupt that arrives
during an XLA garbage-collection callback or a data worker's bookkeeping is
never swallowed. A second SIGINT aborts at once (`os._exit(130)`), for a
loop that is stuck or takes too long to reach its boundary.

Code between boundaries that caches whole stages (`jaxlab.io.stages`) raises
`Preempted` once the flag is set, so an experiment's seed/stage loops stop at
the next stage boundary without saving a stage that was cut short.

Multi-process runs: SIGTERM is left to JAX's preemption notifier (every
process stops at the same step: orbax's `reached_preemption`); a SIGINT is
turned into a SIGTERM to this process so it takes the same path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator

# Exit status of a run stopped by the second Ctrl-C (the shell's 128 + SIGINT).
ABORT_EXIT_CODE = 128 + signal.SIGINT

_lock = threading.Lock()
_requested: str | None = None   # "SIGINT" / "SIGTERM" / a reason given
_sigints = 0
_depth = 0
_old: dict[int, object] = {}


class Preempted(Exception):  # pylint: disable=g-bad-exception-name
  """A loop stopped at a boundary because preemption was requested.

  The launcher catches it: what was saved stays, the run exits 0 and a
  re-run of the same command resumes.
  """


def requested() -> bool:
  """Whether a preemption (Ctrl-C, SIGTERM, `request`) is pending."""
  return _requested is not None


def reason() -> str | None:
  """"SIGINT", "SIGTERM", the reason given to `request`, or None."""
  return _requested


def request(why: str = "requested") -> None:
  """Sets the flag as a signal would (tests; other notifiers)."""
  global _requested
  with _lock:
    if _requested is None:
      _requested = why


def clear() -> None:
  """Clears the flag (a new run in the same process)."""
  global _requested, _sigints
  with _lock:
    _requested, _sigints = None, 0


def check() -> None:
  """Raises `Preempted` when the flag is set (for stage boundaries)."""
  if _requested is not None:
    raise Preempted(f"{_requested}: stopped at a stage boundary")


def _say(msg: str) -> None:
  try:
    print(msg, file=sys.stderr, flush=True)
  except (OSError, ValueError):  # closed stream: nothing to tell
    pass


def _multi_process() -> bool:
  jax = sys.modules.get("jax")
  try:
    return jax is not None and jax.process_count() > 1
  except Exception:  # pylint: disable=broad-except
    return False


def _handle(signum, frame):
  """The handler: sets the flag; a second SIGINT exits at once."""
  del frame
  global _requested, _sigints
  name = signal.Signals(signum).name
  if signum == signal.SIGINT:
    _sigints += 1
    if _sigints > 1:
      _say("Second Ctrl-C: aborting without saving.")
      os._exit(ABORT_EXIT_CODE)  # pylint: disable=protected-access
    if _multi_process():
      # JAX's notifier owns SIGTERM: every process stops at one step.
      os.kill(os.getpid(), signal.SIGTERM)
      return
  if _requested is None:
    _requested = name
    _say(f"{name}: finishing the current step, then saving and exiting "
         "(Ctrl-C again to abort without saving).")


@contextlib.contextmanager
def handling() -> Iterator[None]:
  """Installs the SIGINT/SIGTERM handlers for the enclosed code.

  Nested uses share the outermost installation (the launcher's, around a
  whole experiment; the trainer's, for a library call); the outermost clears
  the flag on entry and restores the previous handlers on exit. Outside the
  main thread (where Python cannot install handlers) it does nothing. In a
  multi-process run SIGTERM stays with JAX's preemption notifier.
  """
  global _depth
  outer = False
  with _lock:
    if _depth == 0 and threading.current_thread() is threading.main_thread():
      outer = True
  if outer:
    clear()
    sigs = [signal.SIGINT]
    if not _multi_process():
      sigs.append(signal.SIGTERM)
    for s in sigs:
      _old[s] = signal.signal(s, _handle)
  _depth += 1
  try:
    yield
  finally:
    _depth -= 1
    if outer:
      for s, h in list(_old.items()):
        signal.signal(s, h)
      _old.clear()
