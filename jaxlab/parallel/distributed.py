"""Joining several JAX processes into one mesh (`jax.distributed`).

    # explicit (any machine, e.g. N processes on loopback for testing):
    distributed.initialize("127.0.0.1:12345", num_processes=2, process_id=i)
    # auto-detected (TPU VM pod slice, Slurm, Open MPI), opt-in only:
    distributed.initialize(auto=True)   # or JAXLAB_DISTRIBUTED=auto

Must run before any JAX computation (the first computation initialises the
backends, after which the process can no longer join a cluster). After it,
`jax.devices()` lists every process's devices and `jax.make_mesh` builds one
mesh spanning them all; each process only feeds and reads its own devices.

Failure model. JAX's coordination service (hosted by process 0) tracks a
heartbeat from every process: when a process dies, the others are terminated
by JAX within `heartbeat_timeout_s` (immediately if process 0 itself died),
with the message "Terminating process because the JAX distributed service
detected fatal errors. This most likely indicates that another task died".
A Python error in one process (for example a collective that fails because
its peer's socket closed) is reported by `fail` with a one-line summary and
the process exits at once instead of waiting in JAX's shutdown barrier for
peers that will never arrive. Relaunching every process with the same command
resumes from the last complete checkpoint.
"""

import os
import sys

from absl import logging
import jax

# Environment switch for the no-argument cluster auto-detection of
# `jax.distributed.initialize()`. It is opt-in because auto-detection probes
# cluster environments (Slurm variables, TPU metadata) that may be present
# on a machine where the user meant a single-process run.
AUTO_ENV = "JAXLAB_DISTRIBUTED"
# Exit status of a process stopped because the multi-process run failed.
EXIT_FAILED = 3

_state = {"initialized": False}


def auto_requested() -> bool:
  """Whether `JAXLAB_DISTRIBUTED=auto` asks for cluster auto-detection."""
  return os.environ.get(AUTO_ENV, "").strip().lower() in ("auto", "1", "true")


def use_cpu_collectives() -> None:
  """Selects gloo for cross-process collectives of the CPU backend.

  Without a CPU collectives implementation a computation over devices of
  several processes fails on CPU. The setting only affects the CPU client, so
  it is harmless on GPU/TPU runs; an explicit choice (e.g. "mpi") is kept.
  """
  current = jax.config.jax_cpu_collectives_implementation
  if current in (None, "", "none"):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")


def initialize(coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None, *, auto: bool = False,
               heartbeat_timeout_s: int = 60,
               initialization_timeout_s: int = 300,
               shutdown_timeout_s: int = 60) -> bool:
  """Joins this process to a multi-process JAX run. Returns True if joined.

  Args:
    coordinator_address: "host:port" of process 0 (it hosts the coordination
      service on that port). Given together with `num_processes` and
      `process_id`; cluster auto-detection is then switched off.
    num_processes: number of processes in the run.
    process_id: this process's index, 0 <= process_id < num_processes.
    auto: no explicit arguments: let `jax.distributed.initialize()` detect
      a TPU pod slice / Slurm / Open MPI cluster. A single machine without a
      cluster environment stays a single process.
    heartbeat_timeout_s: a process silent for this long is declared dead and
      every process of the run is stopped (bounded failure time).
    initialization_timeout_s: how long to wait for every process to join.
    shutdown_timeout_s: how long a finishing process waits for the others at
      JAX's shutdown barrier.

  Raises:
    ValueError: partial or inconsistent explicit arguments (naming the flag),
      or a call after JAX has already computed something.
  """
  if _state["initialized"] or jax.distributed.is_initialized():
    return jax.process_count() > 1
  explicit = (coordinator_address, num_processes, process_id)
  if any(v not in (None, "") for v in explicit):
    missing = [n for n, v in zip(("--coordinator_address", "--num_processes",
                                  "--process_id"), explicit)
               if v in (None, "")]
    if missing:
      raise ValueError(f"multi-process run: {', '.join(missing)} missing; "
                       "give --coordinator_address=HOST:PORT, "
                       "--num_processes=N and --process_id=I together")
    if ":" not in coordinator_address:
      raise ValueError(f"--coordinator_address={coordinator_address!r} must "
                       "be HOST:PORT (the address of process 0)")
    if int(num_processes) < 1 or not 0 <= int(process_id) < int(num_processes):
      raise ValueError(f"--process_id={process_id} must be in "
                       f"[0, --num_processes={num_processes})")
    kwargs = dict(coordinator_address=coordinator_address,
                  num_processes=int(num_processes), process_id=int(process_id),
                  cluster_detection_method="deactivate")
  elif auto:
    kwargs = {}
  else:
    return False

  use_cpu_collectives()
  _state["initialized"] = True
  try:
    jax.distributed.initialize(
        **kwargs, initialization_timeout=int(initialization_timeout_s),
        heartbeat_timeout_seconds=int(heartbeat_timeout_s),
        shutdown_timeout_seconds=int(shutdown_timeout_s))
  except (ValueError, RuntimeError) as e:
    if kwargs:  # explicit arguments: a real error
      if "before" in str(e) or "already" in str(e):
        raise ValueError(f"jax.distributed could not start: {e}. It must be "
                         "set up before any JAX computation") from None
      raise
    # auto: no cluster environment found, i.e. a plain single-host run.
    logging.info("single-process run (jax.distributed auto-detection: %s)", e)
    return False
  if jax.process_index() == 0:
    print(f"jax.distributed: {jax.process_count()} processes, "
          f"{jax.device_count()} devices ({jax.local_device_count()} per "
          "process). If a process dies, the others are stopped within "
          f"~{int(heartbeat_timeout_s)}s (JAX: \"another task died\"); "
          "re-run every process to resume from the last checkpoint.",
          flush=True)
  return jax.process_count() > 1


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def is_main_process() -> bool:
  """True on process 0, which alone writes metrics, logs and results."""
  return jax.process_index() == 0


def fail(error: BaseException, *, resume_hint: str = "") -> None:
  """Reports a failed multi-process run in one line and exits now.

  Exiting with `os._exit` skips JAX's shutdown barrier, which would otherwise
  wait `shutdown_timeout_s` for peers that died. Does nothing (returns) in a
  single-process run so the caller can re-raise.
  """
  if not (jax.distributed.is_initialized() and jax.process_count() > 1):
    return
  first = (str(error).strip().splitlines() or [type(error).__name__])[0]
  msg = (f"error: process {jax.process_index()} of {jax.process_count()} "
         f"stopped: {type(error).__name__}: {first[:500]}. In a multi-process "
         "run this usually means another process died or was killed (see its "
         "log); the whole run stops. Relaunch every process with the same "
         "command to resume from the last checkpoint")
  if resume_hint:
    msg += f" ({resume_hint})"
  print(msg + ".", file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(EXIT_FAILED)  # pylint: disable=protected-access
