"""Run untrusted, model-generated matplotlib code and capture the figure.

MSRL (spec F item 4, R_exec and R_vis) executes the code a policy writes.
That code is hostile by assumption, so `render_chart` never runs it in the
calling (training) process, and it must hold when the trainer runs as root.
Layers of defence (docs/sandbox.md says what each guarantees and what not):

1. Fresh processes per job, forked from a warm zygote interpreter
   (`sandbox_worker.py`, started with `python -I` and no `preexec_fn`, so it
   is safe from a threaded JAX process). A trusted per-job supervisor
   SIGKILLs the job at the wall-clock deadline; the parent kills the whole
   worker process group if even the supervisor does not answer.
2. Namespaces when the kernel allows (root: network, pid, mount, ipc, uts;
   non-root: the same through a user namespace): no network interface but a
   down loopback, the job is pid 1 so its death kills every process it made,
   a private /proc, and /tmp replaced by the throw-away work dir (empty
   read-only /dev/shm, /var/tmp, /run/lock). The mounts also let the dropped
   user read the interpreter where a directory above it is private (a
   virtualenv under a 0700 /root): that directory is an empty tmpfs in the
   job with only the interpreter's dirs bound back read-only
   (`RenderResult.covered`; no mode on disk changes). Otherwise the socket
   blocking of layer 5 alone; `RenderResult.net_mode` says which.
3. Privilege drop when the worker is root: supplementary groups cleared,
   setresgid/setresuid to `user`/`group` (default nobody/nogroup), verified
   (and `setuid(0)` checked to fail), umask 077, no_new_privs, not dumpable.
   The work dir is the only directory the job owns. Not root: skipped.
4. `resource` limits that bind the unprivileged user: CPU seconds, address
   space (a 6 GB allocation is a MemoryError), file size (bounds files and
   captured output), open files, processes (RLIMIT_NPROC, default 0: no new
   process; it counts every process of the uid, see docs/sandbox.md), no
   core dumps.
5. In-process: capped stdout/stderr writers, socket stubs, and an audit hook
   (`sys.addaudithook`, irremovable from Python) refusing sockets, process
   creation, signals, ctypes and file access outside the work dir. It is a
   speed bump, not the boundary: layers 2-4 hold when it is bypassed
   (`audit_hook=False` runs without it, as the tests do to prove that).
6. The rendering comes back as an `.npy` file in the work dir, read without
   following links, size-capped, parsed without pickle, and its shape and
   dtype checked before use. The throw-away dir is removed afterwards.

`run_program` (and `SandboxPool.run_program`) runs a plain program as the
same job without a figure: ok iff it ran to its end (code-generation
pass@k, `jaxlab.rewards.code_exec`).

`SandboxPool` keeps warm zygotes (matplotlib imported once) so a rollout
pays a fork instead of an interpreter start; each job is as isolated as in
`render_chart`. The child renders with the Agg backend at exactly
`size=(H, W)` pixels.
"""

from __future__ import annotations

import atexit
import dataclasses
import grp
import io
import json
import os
import pwd
import queue
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "sandbox_worker.py")
_OUT_NAME = "__sandbox_out__.npy"
_LOG_NAME = "__sandbox_log__.json"
_MAX_LOG_BYTES = 8 << 20
_ERROR_MARKER = "__SANDBOX_ERROR__ "
# A job error that may come from an interpreter dir the job cannot read (not
# a refusal of the audit hook, whose messages start with "sandbox:").
_LOOKS_UNREADABLE = re.compile(
    r"^(PermissionError|FileNotFoundError|ModuleNotFoundError|ImportError|"
    r"OSError)(?!: sandbox:)")


@dataclasses.dataclass
class RenderResult:
  """Outcome of `render_chart`.

  ok: the code ran to completion and produced a figure of the right size
    (with a `probe`: the code and the probe's suffix ran and left a log).
  image: uint8 `[H, W, 3]` RGB rendering, or None (always None with a
    `probe`).
  error: a short reason when not ok ("timeout", the exception, ...), else "".
  stdout / stderr: the first `max_output_bytes` of the child's output.
  net_mode: "netns" (own network namespace), "audit-hook" (socket blocking
    only) or "none" (neither).
  fs_mode: "private-tmp" (mount namespace, /tmp = the work dir) or "shared".
  uid: the uid the code ran as (-1 if unknown); dropped: whether the
    privilege drop ran; pid_ns: whether the job had its own pid namespace.
  covered: ancestors of the interpreter's dirs that the sandbox user cannot
    search (a 0700 /root above a virtualenv): in the job's mount namespace
    each was an empty tmpfs with only those dirs bound back read-only.
  unreachable: interpreter dirs the job could still not read (no mount
    namespace to expose them); a failure to read a file there names them
    in `error`.
  log: with a `probe`, the JSON value its suffix left in `__log__`
    (parsed from at most 8 MiB; written by the job's process, so only as
    trustworthy as the code), else None.
  """
  ok: bool
  image: np.ndarray | None
  error: str
  stdout: str = ""
  stderr: str = ""
  elapsed_s: float = 0.0
  net_mode: str = ""
  fs_mode: str = ""
  uid: int = -1
  dropped: bool = False
  pid_ns: bool = False
  covered: tuple[str, ...] = ()
  unreachable: tuple[str, ...] = ()
  log: Any = None


def _default_mplconfigdir() -> str:
  """A persistent, per-user matplotlib config/cache dir shared by workers.

  Reusing it keeps the font cache warm (building it takes seconds); only the
  trusted zygote reads it, before any job runs.
  """
  path = os.environ.get("MPLCONFIGDIR")
  if path:
    return path
  path = os.path.join(tempfile.gettempdir(), f"jaxlab_mpl_{os.getuid()}")
  os.makedirs(path, mode=0o700, exist_ok=True)
  return path


def _identity(user: str | int, group: str | int) -> tuple[int, int]:
  """(uid, gid) of the sandbox identity; refuses a privileged one."""
  try:
    uid = user if isinstance(user, int) else pwd.getpwnam(user).pw_uid
  except KeyError:
    raise ValueError(f"user={user!r}: no such user") from None
  try:
    gid = group if isinstance(group, int) else grp.getgrnam(group).gr_gid
  except KeyError:
    if group != "nogroup":
      raise ValueError(f"group={group!r}: no such group") from None
    gid = pwd.getpwuid(uid).pw_gid  # e.g. RHEL: no "nogroup", use nobody's
  if uid == 0 or gid == 0:
    raise ValueError(f"user={user!r}, group={group!r}: the sandbox identity "
                     "must not be root")
  return int(uid), int(gid)


class _Worker:
  """One zygote process (`sandbox_worker.py`) and its line protocol."""

  def __init__(self, python: str | None = None):
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": _default_mplconfigdir(), "LANG": "C.UTF-8",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    self.proc = subprocess.Popen(
        [python or sys.executable, "-I", _WORKER], cwd="/", env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    self._buf = b""
    self.euid: int | None = None

  def wait_ready(self, timeout_s: float) -> None:
    if self.euid is not None:
      return
    line = self._readline(time.monotonic() + timeout_s)
    if line is None:
      self.kill()
      raise OSError("the sandbox worker did not start")
    self.euid = int(json.loads(line)["euid"])

  def _readline(self, deadline: float) -> bytes | None:
    fd = self.proc.stdout.fileno()
    while b"\n" not in self._buf:
      left = deadline - time.monotonic()
      if left <= 0 or not select.select([fd], [], [], left)[0]:
        return None
      chunk = os.read(fd, 1 << 16)
      if not chunk:
        return None
      self._buf += chunk
    line, self._buf = self._buf.split(b"\n", 1)
    return line

  def run(self, job: dict, wait_s: float) -> dict | None:
    """Sends one job; its reply, or None (then the worker is killed)."""
    try:
      self.proc.stdin.write(json.dumps(job).encode() + b"\n")
      self.proc.stdin.flush()
      line = self._readline(time.monotonic() + wait_s)
      if line is not None:
        return json.loads(line)
    except (OSError, ValueError):
      pass
    self.kill()
    return None

  def alive(self) -> bool:
    return self.proc.poll() is None

  def kill(self) -> None:
    try:
      os.killpg(self.proc.pid, signal.SIGKILL)
    except OSError:
      pass
    try:
      self.proc.kill()
    except OSError:
      pass
    self.proc.wait()
    for f in (self.proc.stdin, self.proc.stdout):
      try:
        f.close()
      except OSError:
        pass

  def close(self) -> None:
    """Ends the zygote (EOF on its stdin), killing it if it lingers."""
    try:
      self.proc.stdin.close()
      self.proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
      pass
    self.kill()


def _read_capped(path: str, cap: int) -> str:
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
  except OSError:
    return ""
  with os.fdopen(fd, "rb") as f:
    return f.read(cap).decode("utf-8", "replace")


def _load_image(path: str, hw: tuple[int, int]):
  """Reads and validates the child's `.npy` rendering (untrusted bytes)."""
  h, w = hw
  cap = h * w * 3 + 4096
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
  except OSError:
    return None, "no image was written"
  try:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
      return None, "the image is not a regular file"
    if st.st_size > cap:
      return None, "image file too large"
    with os.fdopen(fd, "rb") as f:
      fd = -1
      data = f.read(cap + 1)
  finally:
    if fd >= 0:
      os.close(fd)
  try:
    arr = np.load(io.BytesIO(data), allow_pickle=False)
  except Exception as e:  # pylint: disable=broad-except
    return None, f"unreadable image: {type(e).__name__}"
  if not isinstance(arr, np.ndarray) or arr.dtype != np.uint8 or (
      arr.shape != (h, w, 3)):
    return None, (f"bad image {getattr(arr, 'dtype', '?')} "
                  f"{getattr(arr, 'shape', '?')}, wanted uint8 {(h, w, 3)}")
  return np.array(arr, np.uint8, copy=True), ""


def _probe(probe: dict | None) -> dict | None:
  if not probe:
    return None
  if set(probe) != {"prefix", "suffix"} or not all(
      isinstance(v, str) for v in probe.values()):
    raise ValueError("probe must be {'prefix': str, 'suffix': str} (trusted "
                     f"source), got keys {sorted(probe)}")
  return dict(probe)


def _load_log(path: str) -> tuple[Any, str]:
  """Reads the probe's JSON log (untrusted bytes): capped, no links."""
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
  except OSError:
    return None, "no probe log was written"
  try:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
      return None, "the probe log is not a regular file"
    with os.fdopen(fd, "rb") as f:
      fd = -1
      data = f.read(_MAX_LOG_BYTES + 1)
  finally:
    if fd >= 0:
      os.close(fd)
  if len(data) > _MAX_LOG_BYTES:
    return None, "probe log too large"
  try:
    return json.loads(data.decode("utf-8")), ""
  except (ValueError, UnicodeDecodeError) as e:
    return None, f"unreadable probe log: {type(e).__name__}"


def _run(worker: _Worker, code: str, *, timeout_s: float,
         size: tuple[int, int], cpu_s: int | None, mem_bytes: int,
         fsize_bytes: int, max_output_bytes: int, max_procs: int,
         max_open_files: int, user: str | int, group: str | int,
         namespaces: bool, audit_hook: bool, start: float,
         kind: str = "chart", probe: dict | None = None) -> RenderResult:
  """One job on a ready worker: throw-away dir, run, validate, clean up.

  `kind`: "chart" (the figure comes back as the image) or "program" (ok
  iff the code ran to its end and exited 0; no image). `probe`: a chart
  job's trusted instrumentation (`render_chart`)."""
  if kind not in ("chart", "program"):
    raise ValueError(f"kind={kind!r} must be 'chart' or 'program'")
  if probe and kind != "chart":
    raise ValueError("a probe is for chart jobs (kind='chart')")
  if not isinstance(code, str):
    raise ValueError(f"code must be a str, got {type(code).__name__}")
  h, w = (int(s) for s in size)
  if h < 8 or w < 8 or h * w > 4096 * 4096:
    raise ValueError(f"size={size} must be (H, W) with 8 <= H, W and H*W "
                     "<= 4096**2")
  if timeout_s <= 0:
    raise ValueError(f"timeout_s={timeout_s} must be > 0")
  drop = worker.euid == 0
  uid, gid = _identity(user, group) if drop else (-1, -1)
  root = tempfile.mkdtemp(prefix="jaxlab_sandbox_")
  try:
    work = os.path.join(root, "work")
    os.mkdir(work, 0o700)
    if drop:
      os.chown(work, uid, gid)
      os.chmod(root, 0o711)  # traversable, not listable; logs stay 0600
    job = dict(code=code, root=root, work=work, height=h, width=w,
               timeout_s=float(timeout_s),
               cpu_s=int(cpu_s if cpu_s is not None else int(timeout_s) + 1),
               mem_bytes=int(mem_bytes), fsize_bytes=int(fsize_bytes),
               max_output=int(max_output_bytes), max_procs=int(max_procs),
               max_open_files=int(max_open_files), drop=drop, uid=uid,
               gid=gid, namespaces=bool(namespaces),
               audit_hook=bool(audit_hook), kind=kind,
               probe=_probe(probe))
    rep = worker.run(job, wait_s=float(timeout_s) + max(10.0, timeout_s))
    stdout = _read_capped(os.path.join(root, "out.txt"), max_output_bytes)
    stderr = _read_capped(os.path.join(root, "err.txt"), max_output_bytes)
    elapsed = time.monotonic() - start
    if rep is None:
      return RenderResult(False, None, f"timeout after {timeout_s:g}s "
                          "(the worker stopped answering)", stdout, stderr,
                          elapsed)
    info = dict(net_mode=rep.get("net_mode", ""),
                fs_mode=rep.get("fs_mode", ""), uid=int(rep.get("uid", -1)),
                dropped=bool(rep.get("dropped", False)),
                pid_ns=bool(rep.get("pid_ns", False)),
                covered=tuple(str(p) for p in rep.get("covered", ())),
                unreachable=tuple(str(p) for p in rep.get("unreachable", ())))
    if "supervisor_error" in rep:
      return RenderResult(False, None,
                          f"sandbox failed: {rep['supervisor_error']}",
                          stdout, stderr, elapsed, **info)
    if rep.get("timed_out"):
      return RenderResult(False, None, f"timeout after {timeout_s:g}s",
                          stdout, stderr, elapsed, **info)
    rc = int(rep.get("returncode", -1))
    if rc != 0:
      if _ERROR_MARKER in stderr:
        error = stderr.rsplit(_ERROR_MARKER, 1)[1].strip()
      elif rep.get("signal"):
        error = f"killed by signal {rep['signal']}"
      else:
        error = f"exit code {rc}"
      if info["unreachable"] and _LOOKS_UNREADABLE.search(error):
        error += (f" [the sandbox user (uid {info['uid']}) cannot read "
                  f"{', '.join(info['unreachable'])}: "
                  f"{rep.get('unreachable_why', '?')}; see docs/sandbox.md]")
      return RenderResult(False, None, error, stdout, stderr, elapsed, **info)
    if drop and not info["dropped"]:
      return RenderResult(False, None, "privilege drop not confirmed",
                          stdout, stderr, elapsed, **info)
    if kind == "program":
      return RenderResult(True, None, "", stdout, stderr, elapsed, **info)
    if probe:
      log, error = _load_log(os.path.join(work, _LOG_NAME))
      return RenderResult(not error, None, error, stdout, stderr, elapsed,
                          log=log, **info)
    image, error = _load_image(os.path.join(work, _OUT_NAME), (h, w))
    return RenderResult(image is not None, image, error, stdout, stderr,
                        elapsed, **info)
  finally:
    shutil.rmtree(root, ignore_errors=True)


_JOB_DEFAULTS = dict(timeout_s=10.0, size=(64, 64), cpu_s=None,
                     mem_bytes=2 << 30, fsize_bytes=16 << 20,
                     max_output_bytes=64 << 10, max_procs=0,
                     max_open_files=64, user="nobody", group="nogroup",
                     namespaces=True, audit_hook=True, probe=None)


def render_chart(code: str, *, timeout_s: float = 10.0,
                 size: tuple[int, int] = (64, 64),
                 cpu_s: int | None = None, mem_bytes: int = 2 << 30,
                 fsize_bytes: int = 16 << 20, max_output_bytes: int = 64 << 10,
                 max_procs: int = 0, max_open_files: int = 64,
                 user: str | int = "nobody", group: str | int = "nogroup",
                 namespaces: bool = True, audit_hook: bool = True,
                 python: str | None = None,
                 pool: SandboxPool | None = None,
                 probe: dict | None = None) -> RenderResult:
  """Runs `code` in a sandbox and returns its figure.

  Args:
    code: python source using matplotlib (`plt`, `np` are predefined too).
    timeout_s: wall-clock limit; the job (and all it started) is SIGKILLed.
    size: (H, W) of the returned image in pixels.
    cpu_s: CPU-second limit (default int(timeout_s) + 1).
    mem_bytes: address-space limit (2 GiB).
    fsize_bytes: largest file the child may write (also bounds its output).
    max_output_bytes: how much stdout/stderr is kept.
    max_procs: RLIMIT_NPROC of the job: processes its uid may have before a
      fork fails (0: none). It counts every process of that uid on the host.
    max_open_files: RLIMIT_NOFILE.
    user, group: identity the code runs as when the worker is root.
    namespaces: try network/pid/mount namespaces (False: layers 3-5 only).
    audit_hook: install the in-process audit hook (False only to test that
      the kernel-enforced layers hold on their own).
    python: interpreter of a one-shot worker (default `sys.executable`).
    pool: run on this `SandboxPool`'s warm workers instead of starting one.
    probe: trusted instrumentation `{"prefix": src, "suffix": src}`: the
      prefix runs in the job before the audit hook and the code (to patch
      the plotting stack), the suffix after the code in the prefix's
      namespace and sets `__log__`, returned as `RenderResult.log` (no
      image is rendered). Both run in the job, as sandboxed as the code.

  Returns:
    A `RenderResult`; never raises for anything the code does.
  """
  kw = dict(timeout_s=timeout_s, size=size, cpu_s=cpu_s, mem_bytes=mem_bytes,
            fsize_bytes=fsize_bytes, max_output_bytes=max_output_bytes,
            max_procs=max_procs, max_open_files=max_open_files, user=user,
            group=group, namespaces=namespaces, audit_hook=audit_hook,
            probe=probe)
  if pool is not None:
    return pool.render(code, **kw)
  return _one_shot(code, python, kw)


# A program job's defaults: code_eval's 3 s per program (huggingface/
# evaluate metrics/code_eval/code_eval.py, a7dd338: `timeout=3.0`).
_PROGRAM_DEFAULTS = dict(timeout_s=3.0)


def run_program(code: str, *, timeout_s: float = 3.0,
                cpu_s: int | None = None, mem_bytes: int = 2 << 30,
                fsize_bytes: int = 16 << 20,
                max_output_bytes: int = 64 << 10, max_procs: int = 0,
                max_open_files: int = 64, user: str | int = "nobody",
                group: str | int = "nogroup", namespaces: bool = True,
                audit_hook: bool = True, python: str | None = None,
                pool: SandboxPool | None = None) -> RenderResult:
  """Runs the Python program `code` in the sandbox; did it exit 0?

  The same job as `render_chart` (every layer of the module docstring)
  without the figure: the code is executed in fresh globals (only the
  builtins; no `__name__`, as the code_eval metric's `exec(program, {})`),
  and the result is ok iff it ran to its end: an exception (an `assert`
  failing, `SystemExit`), the wall clock (`timeout_s`, "timeout after
  ..."), a limit or a signal fail it. `image` is always None; `stdout` /
  `stderr` hold the first `max_output_bytes` of its output. Keyword
  arguments as `render_chart`'s.
  """
  kw = dict(timeout_s=timeout_s, cpu_s=cpu_s, mem_bytes=mem_bytes,
            fsize_bytes=fsize_bytes, max_output_bytes=max_output_bytes,
            max_procs=max_procs, max_open_files=max_open_files, user=user,
            group=group, namespaces=namespaces, audit_hook=audit_hook)
  if pool is not None:
    return pool.run_program(code, **kw)
  return _one_shot(code, python, dict(kw, size=(64, 64), kind="program"))


def _one_shot(code: str, python: str | None, kw: dict) -> RenderResult:
  """One job on a fresh worker, closed afterwards."""
  start = time.monotonic()
  try:
    worker = _Worker(python)
  except OSError as e:  # e.g. no processes left to start one
    return RenderResult(False, None, f"sandbox failed to start: {e}",
                        elapsed_s=time.monotonic() - start)
  try:
    worker.wait_ready(max(120.0, kw["timeout_s"]))
    return _run(worker, code, start=start, **kw)
  except OSError as e:
    return RenderResult(False, None, f"sandbox failed to start: {e}",
                        elapsed_s=time.monotonic() - start)
  finally:
    worker.close()


class SandboxPool:
  """A few warm sandbox workers shared by threads (RL reward throughput).

  Each worker is a zygote with matplotlib imported once; every job still
  gets fresh processes, namespaces, privilege drop and limits. `render`
  takes `render_chart`'s keyword arguments (pass `pool.render` as a
  `render=` callback). A worker that stops answering is killed and
  replaced.

      with sandbox.SandboxPool(workers=2) as pool:
        r = pool.render(code, timeout_s=5.0, size=(64, 64))
  """

  def __init__(self, workers: int = 2, *, python: str | None = None,
               start_timeout_s: float = 120.0):
    if workers < 1:
      raise ValueError(f"workers={workers} must be >= 1")
    self._python = python
    self._start_timeout_s = float(start_timeout_s)
    self._idle: queue.Queue[_Worker] = queue.Queue()
    self._lock = threading.Lock()
    self._all: list[_Worker] = []
    self._closed = False
    started = [self._spawn() for _ in range(workers)]
    for wk in started:
      wk.wait_ready(self._start_timeout_s)
      self._idle.put(wk)

  def _spawn(self) -> _Worker:
    wk = _Worker(self._python)
    with self._lock:
      self._all.append(wk)
    return wk

  def render(self, code: str, **kw) -> RenderResult:
    return self._submit(code, "chart", kw)

  def run_program(self, code: str, **kw) -> RenderResult:
    """`run_program` on a warm worker (its keyword arguments)."""
    if "size" in kw:
      raise ValueError("run_program takes no size (it renders nothing)")
    return self._submit(code, "program", {**_PROGRAM_DEFAULTS, **kw})

  def _submit(self, code: str, kind: str, kw: dict) -> RenderResult:
    unknown = set(kw) - set(_JOB_DEFAULTS)
    if unknown:
      raise ValueError(f"unknown {'render' if kind == 'chart' else 'run'} "
                       f"option(s) {sorted(unknown)}")
    if self._closed:
      raise RuntimeError("the SandboxPool is closed")
    opts = {**_JOB_DEFAULTS, **kw, "kind": kind}
    start = time.monotonic()
    wk = self._idle.get()
    try:
      if not wk.alive():
        with self._lock:
          self._all.remove(wk)
        wk = self._spawn()
        wk.wait_ready(self._start_timeout_s)
      return _run(wk, code, start=start, **opts)
    except OSError as e:
      return RenderResult(False, None, f"sandbox failed to start: {e}",
                          elapsed_s=time.monotonic() - start)
    finally:
      self._idle.put(wk)

  def close(self) -> None:
    self._closed = True
    with self._lock:
      workers, self._all = self._all, []
    for wk in workers:
      wk.close()

  def __enter__(self) -> "SandboxPool":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


_SHARED: dict[tuple[int, str | None], SandboxPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(workers: int = 2, python: str | None = None) -> SandboxPool:
  """A process-wide `SandboxPool` (started on first use, closed at exit)."""
  with _SHARED_LOCK:
    pool = _SHARED.get((workers, python))
    if pool is None or pool._closed:  # pylint: disable=protected-access
      pool = _SHARED[(workers, python)] = SandboxPool(workers, python=python)
      atexit.register(pool.close)
    return pool
