"""Run untrusted, model-generated matplotlib code and capture the figure.

MSRL (spec F item 4, R_exec and R_vis) executes the code a policy writes.
That code is hostile by assumption, so `render_chart` never runs it in the
calling (training) process. Layers of defence, each enough for some attacks:

1. A fresh interpreter (`python -I`: no user site, no PYTHON* env, no cwd on
   sys.path) in its own session / process group, started without
   `preexec_fn` (unsafe in a threaded JAX process). The parent kills the
   whole group with SIGKILL at the wall-clock deadline and again on exit, so
   stray children die too.
2. `resource` limits set by the child before it imports anything: CPU
   seconds (SIGXCPU / SIGKILL), address space (so a 6 GB allocation is a
   MemoryError), file size (so a file or captured output cannot fill the
   disk), open files, no core dumps, and no new processes (RLIMIT_NPROC; not
   enforced for root, where layers 3 and 1 carry it).
3. An audit hook (`sys.addaudithook`, irremovable) installed after the
   trusted imports (numpy, matplotlib) and before the user code. It refuses
   every socket operation, process creation (`subprocess.Popen`, `os.system`,
   `os.fork`, `os.posix_spawn`, `os.exec*`, `os.spawn*`), signals to other
   processes (`os.kill` could otherwise kill the trainer), raising resource
   limits, ctypes (which would bypass the hook), and any file access outside
   the throw-away working directory, except read-only access to the Python
   installation and matplotlib's data/cache. `socket.socket` is also replaced
   by a stub.
4. stdout/stderr go to capped in-process writers (and, beneath them, to files
   bounded by RLIMIT_FSIZE); the parent reads back at most `max_output_bytes`.
5. The working directory is a fresh `tempfile.mkdtemp` removed afterwards.
   The rendered PNG is treated as untrusted: size-capped, decoded, and its
   shape checked.

The child renders with the Agg backend at exactly `size=(H, W)` pixels.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

_MAX_PNG_BYTES = 32 * 1024 * 1024


@dataclasses.dataclass
class RenderResult:
  """Outcome of `render_chart`.

  ok: the code ran to completion and produced a figure of the right size.
  image: uint8 `[H, W, 3]` RGB rendering, or None.
  error: a short reason when not ok ("timeout", the exception, ...), else "".
  stdout / stderr: the first `max_output_bytes` of the child's output.
  """
  ok: bool
  image: np.ndarray | None
  error: str
  stdout: str = ""
  stderr: str = ""
  elapsed_s: float = 0.0


# The child program. It receives one JSON argument (paths and limits).
_RUNNER = r'''
import sys, os, json, resource
cfg = json.loads(sys.argv[1])

def _limit(kind, soft, hard=None):
  try:
    resource.setrlimit(kind, (soft, soft if hard is None else hard))
  except (ValueError, OSError):
    pass

_limit(resource.RLIMIT_CPU, cfg["cpu_s"], cfg["cpu_s"] + 1)
_limit(resource.RLIMIT_AS, cfg["mem_bytes"])
_limit(resource.RLIMIT_FSIZE, cfg["fsize_bytes"])
_limit(resource.RLIMIT_CORE, 0)
_limit(resource.RLIMIT_NOFILE, 256)

class _CappedWriter:
  """A text stream that keeps the first `cap` characters and drops the rest."""
  def __init__(self, stream, cap):
    self._stream, self._left = stream, cap
  def write(self, s):
    s = str(s)
    if self._left > 0:
      part = s[:self._left]
      self._left -= len(part)
      self._stream.write(part)
    return len(s)
  def flush(self):
    self._stream.flush()
  def isatty(self):
    return False

sys.stdout = _CappedWriter(sys.stdout, cfg["max_output"])
sys.stderr = _CappedWriter(sys.stderr, cfg["max_output"])

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy
import math
import socket

work = os.path.realpath(cfg["workdir"])
code_path, out_path = cfg["code_path"], cfg["out_path"]
with open(code_path) as f:
  source = f.read()
code = compile(source, "<generated>", "exec")
H, W, dpi = cfg["height"], cfg["width"], 100.0
import matplotlib.image as mimage
import subprocess
import posixpath
import genericpath

read_roots = tuple(sorted({os.path.realpath(p) for p in (
    sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
    os.path.dirname(np.__file__), os.path.dirname(matplotlib.__file__),
    matplotlib.get_data_path(), matplotlib.get_cachedir(),
    matplotlib.get_configdir(), "/usr/share/fonts") if p}))


def _make_hook(work, read_roots):
  """Builds the audit hook; its state lives only in this closure.

  Everything the hook calls is bound here, so user code that monkeypatches
  `os` or `posixpath` after the hook is armed cannot change its decisions
  (functions it calls into, like `realpath`, still look up `os.lstat` late;
  path-creating events are checked too, so a symlink out cannot be made).
  """
  realpath, fsdecode, sep = os.path.realpath, os.fsdecode, os.sep
  PathLike = os.PathLike
  blocked_prefixes = ("socket.", "subprocess.", "os.exec", "os.spawn",
                      "os.posix_spawn", "os.fork", "ctypes.", "_ctypes.",
                      "resource.", "pty.", "webbrowser.", "urllib.",
                      "http.", "ftplib.", "smtplib.", "imaplib.", "poplib.",
                      "nntplib.", "telnetlib.", "gc.get_")
  blocked = frozenset({
      "os.system", "os.kill", "os.killpg", "os.forkpty", "os.setuid",
      "os.chroot", "signal.pthread_kill", "os.chmod", "os.chown",
      "os.chflags", "os.lchown", "os.lchflags", "os.setxattr",
      "os.removexattr", "os.putenv", "os.unsetenv", "shutil.chown",
      "os.startfile", "mmap.__new__", "os.mknod", "os.mkfifo",
      "sys.addaudithook", "os.add_dll_directory"})
  blocked_imports = frozenset({"_posixsubprocess", "_ctypes", "ctypes",
                               "_socket", "_multiprocessing", "pty", "fcntl",
                               "_posixshmem", "mmap"})
  write_flags = (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND |
                 os.O_TRUNC)
  path_events = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1,
                 "os.rename": 2, "os.link": 2, "os.symlink": 2,
                 "os.truncate": 1, "os.utime": 1, "os.listdir": 1,
                 "os.scandir": 1, "os.chdir": 1, "shutil.rmtree": 1,
                 "shutil.copyfile": 2, "shutil.copytree": 2,
                 "shutil.move": 2, "os.getxattr": 1, "os.listxattr": 1,
                 "glob.glob": 1}
  # Read-only events may also look inside the Python installation (imports
  # list directories there).
  read_events = frozenset({"os.listdir", "os.scandir", "os.getxattr",
                           "os.listxattr", "glob.glob"})
  work_roots = (work,)
  both_roots = (work,) + tuple(read_roots)

  def inside(path, roots):
    if isinstance(path, int):
      return True          # an already-open descriptor
    try:
      p = realpath(fsdecode(path))
    except Exception:
      return False
    for r in roots:
      if p == r or p.startswith(r + sep):
        return True
    return False

  def hook(event, args):
    if event in blocked or event.startswith(blocked_prefixes):
      raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import":
      name = args[0] if args else ""
      if isinstance(name, str) and name.split(".")[0] in blocked_imports:
        raise PermissionError(f"sandbox: import {name} is not allowed")
      return
    if event == "open":
      path, mode, flags = (tuple(args) + (None, None, None))[:3]
      writing = isinstance(mode, str) and any(c in mode for c in "wax+")
      if isinstance(flags, int) and flags & write_flags:
        writing = True
      if path is None or inside(path, work_roots):
        return
      if not writing and inside(path, read_roots):
        return
      raise PermissionError(f"sandbox: open({path!r}) outside the work dir")
    n = path_events.get(event)
    if n is not None:
      roots = both_roots if event in read_events else work_roots
      for a in tuple(args)[:n]:
        if isinstance(a, (str, bytes, PathLike)) and not inside(a, roots):
          raise PermissionError(
              f"sandbox: {event}({a!r}) outside the work dir")
  return hook


class _NoSocket:
  def __init__(self, *a, **k):
    raise PermissionError("sandbox: network access is not allowed")

socket.socket = _NoSocket
socket.create_connection = _NoSocket
socket.socketpair = _NoSocket
plt.show = lambda *a, **k: None
# Process creation that is not audited goes through _posixsubprocess: unload
# it (its re-import is refused by the hook).
subprocess._fork_exec = None
subprocess._posixsubprocess = None
for _m in ("_posixsubprocess", "_ctypes", "ctypes", "_socket"):
  sys.modules.pop(_m, None)
_limit(resource.RLIMIT_NPROC, 0)
sys.addaudithook(_make_hook(work, read_roots))
del _make_hook

env = {"__name__": "__main__", "__builtins__": __builtins__, "plt": plt,
       "np": np}
try:
  exec(code, env)
  nums = plt.get_fignums()
  if not nums:
    raise RuntimeError("the code produced no figure")
  fig = plt.figure(nums[-1])
  fig.set_dpi(dpi)
  fig.set_size_inches(W / dpi, H / dpi)
  fig.canvas.draw()
  rgba = np.asarray(fig.canvas.buffer_rgba())
  if rgba.shape[:2] != (H, W):
    raise RuntimeError(f"rendered {rgba.shape[:2]}, wanted {(H, W)}")
  mimage.imsave(out_path, np.ascontiguousarray(rgba[..., :3]), format="png")
except BaseException as e:
  sys.stderr.write(f"\n__SANDBOX_ERROR__ {type(e).__name__}: {e}"[:2000])
  sys.stderr.flush()
  os._exit(3)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
'''


def _default_mplconfigdir() -> str:
  """A persistent, per-user matplotlib config/cache dir shared by children.

  Reusing it keeps the font cache warm (building it takes seconds); children
  only read it, since it is created and filled before the audit hook arms.
  """
  path = os.environ.get("MPLCONFIGDIR")
  if path:
    return path
  path = os.path.join(tempfile.gettempdir(), f"jaxlab_mpl_{os.getuid()}")
  os.makedirs(path, mode=0o700, exist_ok=True)
  return path


def _read_capped(path: str, cap: int) -> str:
  try:
    with open(path, "rb") as f:
      return f.read(cap).decode("utf-8", "replace")
  except OSError:
    return ""


def _kill_group(proc: subprocess.Popen) -> None:
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass


def render_chart(code: str, *, timeout_s: float = 10.0,
                 size: tuple[int, int] = (64, 64),
                 cpu_s: int | None = None, mem_bytes: int = 2 << 30,
                 fsize_bytes: int = 16 << 20, max_output_bytes: int = 64 << 10,
                 python: str | None = None) -> RenderResult:
  """Runs `code` in a sandboxed interpreter and returns its figure.

  Args:
    code: python source using matplotlib (`plt`, `np` are predefined too).
    timeout_s: wall-clock limit; the process group is SIGKILLed after it.
    size: (H, W) of the returned image in pixels.
    cpu_s: CPU-second limit (default ceil(timeout_s) + 1).
    mem_bytes: address-space limit (2 GiB).
    fsize_bytes: largest file the child may write (also bounds its output).
    max_output_bytes: how much stdout/stderr is kept.
    python: interpreter (default `sys.executable`).

  Returns:
    A `RenderResult`; never raises for anything the code does.
  """
  if not isinstance(code, str):
    raise ValueError(f"code must be a str, got {type(code).__name__}")
  h, w = (int(s) for s in size)
  if h < 8 or w < 8 or h * w > 4096 * 4096:
    raise ValueError(f"size={size} must be (H, W) with 8 <= H, W and H*W "
                     "<= 4096**2")
  start = time.monotonic()
  root = tempfile.mkdtemp(prefix="jaxlab_sandbox_")
  work = os.path.join(root, "work")
  os.mkdir(work, 0o700)
  code_path = os.path.join(root, "code.py")
  out_path = os.path.join(work, "__sandbox_out__.png")
  out_log, err_log = os.path.join(root, "out.txt"), os.path.join(root, "err.txt")
  with open(code_path, "w") as f:
    f.write(code)
  cfg = dict(workdir=work, code_path=code_path, out_path=out_path,
             height=h, width=w,
             cpu_s=int(cpu_s if cpu_s is not None else int(timeout_s) + 1),
             mem_bytes=int(mem_bytes), fsize_bytes=int(fsize_bytes),
             max_output=int(max_output_bytes))
  env = {"PATH": "/usr/bin:/bin", "HOME": work, "MPLBACKEND": "Agg",
         "MPLCONFIGDIR": _default_mplconfigdir(), "LANG": "C.UTF-8",
         "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
         "MKL_NUM_THREADS": "1", "TMPDIR": work}
  proc = None
  timed_out = False
  try:
    with open(out_log, "wb") as fo, open(err_log, "wb") as fe:
      proc = subprocess.Popen(
          [python or sys.executable, "-I", "-c",
           _RUNNER, json.dumps(cfg)],
          cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
          start_new_session=True, close_fds=True)
      try:
        proc.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    _kill_group(proc)  # children it may have left behind
    stdout = _read_capped(out_log, max_output_bytes)
    stderr = _read_capped(err_log, max_output_bytes)
    elapsed = time.monotonic() - start
    if timed_out:
      return RenderResult(False, None, f"timeout after {timeout_s:g}s",
                          stdout, stderr, elapsed)
    if proc.returncode != 0:
      marker = "__SANDBOX_ERROR__ "
      if marker in stderr:
        error = stderr.rsplit(marker, 1)[1].strip()
      elif proc.returncode < 0:
        error = f"killed by signal {signal.Signals(-proc.returncode).name}"
      else:
        error = f"exit code {proc.returncode}"
      return RenderResult(False, None, error, stdout, stderr, elapsed)
    image, error = _load_png(out_path, (h, w))
    return RenderResult(image is not None, image, error, stdout, stderr,
                        elapsed)
  except OSError as e:  # e.g. no processes left to start one
    return RenderResult(False, None, f"sandbox failed to start: {e}",
                        elapsed_s=time.monotonic() - start)
  finally:
    if proc is not None and proc.poll() is None:
      _kill_group(proc)
      proc.wait()
    shutil.rmtree(root, ignore_errors=True)


def _load_png(path: str, hw: tuple[int, int]):
  try:
    if os.path.islink(path) or not os.path.isfile(path):
      return None, "no image was written"
    if os.path.getsize(path) > _MAX_PNG_BYTES:
      return None, "image file too large"
    with open(path, "rb") as f:
      data = f.read(_MAX_PNG_BYTES + 1)
    from PIL import Image  # a matplotlib dependency
    with Image.open(io.BytesIO(data)) as im:
      if im.format != "PNG" or (im.height, im.width) != hw:
        return None, f"bad image {im.format} {im.height}x{im.width}"
      arr = np.asarray(im.convert("RGB"), np.uint8)
  except Exception as e:  # pylint: disable=broad-except
    return None, f"unreadable image: {type(e).__name__}"
  return arr, ""
