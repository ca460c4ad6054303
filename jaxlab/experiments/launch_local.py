r"""Runs `jaxlab.main` as N JAX processes on this machine (one mesh).

    python -m jaxlab.experiments.launch_local --num_processes=2 \
        --devices_per_process=4 -- \
        --config=jaxlab/configs/lm_tiny.py:tiny --workdir=/tmp/mh \
        --config.mesh.data=2 --config.mesh.fsdp=2 --config.mesh.tensor=2

Everything after `--` is passed to every process, followed by
`--coordinator_address=127.0.0.1:PORT --num_processes=N --process_id=I`
(the port is picked free at launch). Each process gets
`XLA_FLAGS=--xla_force_host_platform_device_count=K` and, by default,
`JAX_PLATFORMS=cpu`, so N x K fake CPU devices form one mesh: the multi-host
code path (gloo collectives, per-process data, multi-process orbax
checkpoints) on a laptop. Output lines are prefixed `[pI]`. When one process
fails, the others are killed and the launcher exits non-zero; Ctrl-C /
SIGTERM forwards SIGTERM to every process (a checkpoint is saved at the next
step) and kills them if they do not stop within `--grace_s`.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
  """A TCP port free on 127.0.0.1 right now (chosen by the OS)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def process_env(devices_per_process: int, platform: str | None = "cpu",
                base: dict[str, str] | None = None) -> dict[str, str]:
  """Environment of one process: K fake host devices, repo on the path."""
  env = dict(os.environ if base is None else base)
  flags_ = [f for f in env.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")]
  flags_.append(
      f"--xla_force_host_platform_device_count={devices_per_process}")
  env["XLA_FLAGS"] = " ".join(flags_)
  if platform:
    env["JAX_PLATFORMS"] = platform
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  env["PYTHONUNBUFFERED"] = "1"
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
  return env


def process_command(args: Sequence[str], *, port: int, num_processes: int,
                    process_id: int, module: str = "jaxlab.main"
                    ) -> list[str]:
  return [sys.executable, "-m", module, *args,
          f"--coordinator_address=127.0.0.1:{port}",
          f"--num_processes={num_processes}", f"--process_id={process_id}"]


class LocalCluster:
  """N processes of `module` joined on loopback; each in its own group.

  `start()` launches them; `wait()` streams/collects their output, kills all
  when one fails, and returns the worst exit code. Use as a context manager
  so every process group is killed however the caller exits.
  """

  def __init__(self, args: Sequence[str], *, num_processes: int,
               devices_per_process: int = 4, platform: str | None = "cpu",
               env: dict[str, str] | None = None, port: int | None = None,
               module: str = "jaxlab.main", stream: bool = True,
               grace_s: float = 30.0):
    if num_processes < 1:
      raise ValueError(f"--num_processes={num_processes} must be >= 1")
    if devices_per_process < 1:
      raise ValueError(f"--devices_per_process={devices_per_process} must be >= 1")
    self.args = list(args)
    self.num_processes = num_processes
    self.port = port or free_port()
    self.env = process_env(devices_per_process, platform, env)
    self.module = module
    self.stream = stream
    self.grace_s = grace_s
    self.procs: list[subprocess.Popen] = []
    self.outputs: list[list[str]] = []
    self._threads: list[threading.Thread] = []
    self._lock = threading.Lock()
    self.first_failure: tuple[int, int] | None = None  # (process, rc)

  def start(self) -> "LocalCluster":
    for i in range(self.num_processes):
      cmd = process_command(self.args, port=self.port,
                            num_processes=self.num_processes, process_id=i,
                            module=self.module)
      proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
      self.procs.append(proc)
      self.outputs.append([])
      t = threading.Thread(target=self._pump, args=(i, proc), daemon=True)
      t.start()
      self._threads.append(t)
    return self

  def _pump(self, i: int, proc: subprocess.Popen) -> None:
    for line in proc.stdout:
      self.outputs[i].append(line)
      if self.stream:
        with self._lock:
          sys.stdout.write(f"[p{i}] {line}")
          sys.stdout.flush()

  def output(self, i: int) -> str:
    return "".join(self.outputs[i])

  def signal_all(self, sig: int) -> None:
    for p in self.procs:
      if p.poll() is None:
        try:
          os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
          pass

  def kill_all(self) -> None:
    """SIGKILLs every process group still running and reaps them."""
    self.signal_all(signal.SIGKILL)
    for p in self.procs:
      try:
        p.wait(timeout=30)
      except subprocess.TimeoutExpired:
        pass
    for t in self._threads:
      t.join(timeout=5)

  def wait(self, timeout: float | None = None) -> int:
    """Waits for all; kills the rest when one fails.

    Returns 0 when every process succeeded, else the exit code of the first
    process that failed (128 + signal if a signal killed it). On `timeout`
    every process is killed and 124 is returned.
    """
    deadline = None if timeout is None else time.time() + timeout
    while True:
      codes = [p.poll() for p in self.procs]
      failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
      if failed and self.first_failure is None:
        self.first_failure = failed[0]
        i, c = failed[0]
        self._say(f"process {i} exited with {_describe(c)}; stopping the "
                  "other processes")
        self.kill_all()
        break
      if all(c is not None for c in codes):
        break
      if deadline is not None and time.time() > deadline:
        self._say(f"timed out after {timeout:.0f}s; killing all processes")
        self.kill_all()
        return 124
      time.sleep(0.1)
    for t in self._threads:
      t.join(timeout=5)
    if self.first_failure is not None:
      return _exit_code(self.first_failure[1])
    return max(_exit_code(p.returncode) for p in self.procs)

  def _say(self, msg: str) -> None:
    with self._lock:
      print(f"[launch_local] {msg}", file=sys.stderr, flush=True)

  def __enter__(self) -> "LocalCluster":
    return self.start() if not self.procs else self

  def __exit__(self, *exc) -> None:
    self.kill_all()


def _exit_code(code: int) -> int:
  return code if code >= 0 else 128 - code


def _describe(code: int) -> str:
  if code < 0:
    try:
      return f"signal {signal.Signals(-code).name}"
    except ValueError:
      return f"signal {-code}"
  return f"exit code {code}"


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if "--" in argv:
    split = argv.index("--")
    own, forwarded = argv[:split], argv[split + 1:]
  else:
    own, forwarded = argv, []
  parser = argparse.ArgumentParser(
      prog="python -m jaxlab.experiments.launch_local", allow_abbrev=False,
      description="Runs jaxlab.main as N JAX processes on loopback; "
                  "flags after -- go to every process.")
  parser.add_argument("--num_processes", type=int, default=2)
  parser.add_argument("--devices_per_process", type=int, default=4)
  parser.add_argument("--platform", default="cpu",
                      help="JAX_PLATFORMS for the processes ('' to keep)")
  parser.add_argument("--grace_s", type=float, default=30.0,
                      help="after Ctrl-C/SIGTERM, seconds before SIGKILL")
  parser.add_argument("--timeout_s", type=float, default=None)
  opts, unknown = parser.parse_known_args(own)
  forwarded = unknown + forwarded
  try:
    cluster = LocalCluster(forwarded, num_processes=opts.num_processes,
                           devices_per_process=opts.devices_per_process,
                           platform=opts.platform or None,
                           grace_s=opts.grace_s)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2

  stopping = threading.Event()

  def on_signal(signum, frame):
    del frame
    if stopping.is_set():  # second Ctrl-C: kill now
      cluster.kill_all()
      return
    stopping.set()
    cluster._say(f"{signal.Signals(signum).name}: forwarding SIGTERM (a "  # pylint: disable=protected-access
                 f"checkpoint is saved at the next step); SIGKILL in "
                 f"{opts.grace_s:.0f}s")
    cluster.signal_all(signal.SIGTERM)
    timer = threading.Timer(opts.grace_s, cluster.kill_all)
    timer.daemon = True
    timer.start()

  signal.signal(signal.SIGINT, on_signal)
  signal.signal(signal.SIGTERM, on_signal)
  with cluster:
    return cluster.wait(timeout=opts.timeout_s)


if __name__ == "__main__":
  sys.exit(main())
