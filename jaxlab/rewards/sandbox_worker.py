"""The child side of `jaxlab.rewards.sandbox`: a warm zygote for untrusted code.

Run only as a script (`python -I sandbox_worker.py`) by
`jaxlab.rewards.sandbox`; it imports nothing from jaxlab. Protocol: the
zygote prints one JSON line `{"ready": ...}` once warm, then reads one JSON
job per line on stdin and answers one JSON line per job on stdout.

Process tree of one job (each job gets fresh processes; nothing of a job
survives it):

  zygote       trusted, the caller's uid; numpy and matplotlib imported and a
               warm-up figure drawn once, so a job pays a fork, not an
               interpreter start.
  supervisor   forked per job, trusted. Points stdio at the job's capped log
               files, unshares namespaces (network, pid, mount, ipc, uts when
               the kernel allows; as non-root through a user namespace),
               forks the job and SIGKILLs it at the wall-clock deadline.
  job          pid 1 of the new pid namespace when there is one (its death
               kills every process the code made). As root: private mounts
               (/proc of the namespace, /tmp = the throw-away work dir, empty
               read-only /dev/shm, /var/tmp, /run/lock; a directory above
               the interpreter that the sandbox user cannot search, such as
               a 0700 /root, replaced by an empty tmpfs with only the
               interpreter's dirs bound back read-only), resource limits,
               supplementary groups cleared, setgid/setuid to the sandbox
               user, umask 077, no_new_privs, parent-death signal. Then the
               in-process layers (capped stdout/stderr, socket stubs, the
               audit hook) and finally the untrusted code. The rendering is
               written as `__sandbox_out__.npy` into the work dir; the parent
               validates it.
"""

import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
PR_SET_CHILD_SUBREAPER = 36
OUT_NAME = "__sandbox_out__.npy"
LOG_NAME = "__sandbox_log__.json"
ERROR_MARKER = "__SANDBOX_ERROR__ "

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                        ctypes.c_ulong, ctypes.c_char_p)
_libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong, ctypes.c_ulong)


def _check(ret: int, what: str) -> None:
  if ret != 0:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
  if hasattr(os, "unshare"):  # Python >= 3.12
    os.unshare(flags)
  else:
    _check(_libc.unshare(flags), "unshare")


def _mount(src, target, fstype, flags, data=None) -> None:
  enc = lambda s: None if s is None else os.fsencode(s)
  _check(_libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)),
         f"mount {target}")


def _prctl(option: int, arg: int) -> None:
  _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl {option}")


# Modules a plotting program may import: loaded once here (a job then pays
# no import), and without a mount namespace the job, running as an
# unprivileged user, may not be able to read the Python installation (e.g.
# a pyenv under /root; with one, `_private_mounts` exposes it).
_PRELOAD = (
    "math", "cmath", "random", "statistics", "json", "colorsys", "fractions",
    "decimal", "datetime", "calendar", "time", "itertools", "functools",
    "collections", "collections.abc", "string", "re", "textwrap", "operator",
    "copy", "io", "csv", "dataclasses", "typing", "enum", "numbers", "heapq",
    "bisect", "warnings", "pathlib", "os", "sys", "numpy", "numpy.random",
    "numpy.linalg", "numpy.ma", "numpy.fft", "matplotlib",
    "matplotlib.pyplot", "matplotlib.patches", "matplotlib.colors",
    "matplotlib.cm", "matplotlib.ticker", "matplotlib.dates",
    "matplotlib.gridspec", "matplotlib.lines", "matplotlib.patheffects",
    "matplotlib.font_manager", "matplotlib.image", "matplotlib.markers",
    "matplotlib.transforms", "matplotlib.collections", "matplotlib.text",
    "matplotlib.animation", "mpl_toolkits.mplot3d", "PIL.Image", "encodings.idna",
    "encodings.ascii", "encodings.latin_1", "encodings.utf_16",
    "encodings.utf_32", "encodings.cp1252", "encodings.unicode_escape",
    "encodings.raw_unicode_escape", "unicodedata", "stringprep", "base64",
    "hashlib", "struct", "array", "zlib", "gzip", "pickle", "pprint",
    "traceback", "inspect", "logging", "contextlib", "abc", "types",
    "weakref", "secrets", "uuid", "locale", "glob", "fnmatch", "shutil",
    "tempfile", "signal", "threading", "queue", "urllib.parse")


def warm_up() -> None:
  """Imports the plotting stack and draws once (fonts, mathtext, lazies)."""
  import importlib  # pylint: disable=g-import-not-at-top
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  for name in _PRELOAD:
    try:
      importlib.import_module(name)
    except Exception:  # pylint: disable=broad-except
      pass
  import numpy as np  # pylint: disable=g-import-not-at-top
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axs = plt.subplots(2, 3, figsize=(3, 2), dpi=50)
  axs[0, 0].bar(["a", "b"], [1, 2], label="bar")
  axs[0, 0].legend()
  axs[0, 1].plot([1, 2, 3], "o--")
  axs[0, 1].set_title(r"$\alpha^2$ title")
  sc = axs[0, 2].scatter([1, 2], [2, 1], c=[0.1, 0.9])
  fig.colorbar(sc, ax=axs[0, 2])
  axs[1, 0].pie([1, 2, 3], labels=["x", "y", "z"], autopct="%1.0f%%")
  axs[1, 1].hist(np.arange(10.0), bins=3)
  axs[1, 2].imshow(np.zeros((4, 4)))
  axs[1, 2].annotate("t", (1, 1), xytext=(2, 2),
                     arrowprops={"arrowstyle": "->"})
  fig.suptitle("warm")
  fig.tight_layout()
  fig.canvas.draw()
  np.asarray(fig.canvas.buffer_rgba())
  plt.close("all")


# ---------------------------------------------------------------------------
# The job process (B).
# ---------------------------------------------------------------------------


def _limit(kind: int, soft: int, hard: int | None = None) -> None:
  try:
    resource.setrlimit(kind, (soft, soft if hard is None else hard))
  except (ValueError, OSError):
    pass


_PRIVATE_DIRS = ("/tmp", "/dev/shm", "/var/tmp", "/run/lock")


def _under(path: str, d: str) -> bool:
  return path.startswith(d.rstrip("/") + "/")


def _outermost(paths) -> list[str]:
  """Sorted, without any path that lies inside another one."""
  out = []
  for p in sorted(set(paths)):
    if not any(p == q or _under(p, q) for q in out):
      out.append(p)
  return out


def _python_dirs() -> list[str]:
  """The interpreter's own directories (prefixes and sys.path entries),
  outermost only: what the job must still read after the temp dirs are
  replaced (a virtualenv or checkout under /tmp, e.g. a CI clone)."""
  return _outermost(os.path.realpath(p) for p in (
      sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
      *sys.path) if p and os.path.isdir(p))


def _needed_dirs() -> list[str]:
  """What the job reads after the privilege drop, outermost only.

  The interpreter's prefixes (stdlib, lib-dynload, the virtualenv), the
  sys.path entries and site dirs inside them, the directories of the
  top-level packages the zygote imported (also those that a `.pth` file put
  elsewhere) and matplotlib's data dir (fonts are opened lazily). Not the
  other sys.path entries (e.g. an editable checkout of a project): the job
  does not need them.
  """
  import site  # pylint: disable=g-import-not-at-top
  prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix,
              sys.base_exec_prefix}
  real = [os.path.realpath(p) for p in prefixes if p]
  cands = set(real)
  for p in (*sys.path, *site.getsitepackages()):
    r = os.path.realpath(p) if p else ""
    if r and any(r == q or _under(r, q) for q in real):
      cands.add(r)
  for name, mod in list(sys.modules.items()):
    path = getattr(mod, "__path__", None)  # a package (maybe a namespace)
    if "." in name or name == "__main__" or path is None:
      continue
    try:
      cands.update(os.path.realpath(p) for p in list(path))
    except TypeError:
      pass
  mpl = sys.modules.get("matplotlib")
  if mpl is not None:
    try:
      cands.add(os.path.realpath(mpl.get_data_path()))
    except Exception:  # pylint: disable=broad-except
      pass
  return _outermost(p for p in cands if os.path.isdir(p))


def _kept_dirs(python_dirs: list[str], work: str) -> list[str]:
  """Which interpreter dirs to bind back read-only: those strictly inside a
  replaced temp dir that do not hold the work dir (bind-mounted writable on
  its own; a dir holding it stays hidden)."""
  return [p for p in python_dirs
          if any(_under(p, d) for d in _PRIVATE_DIRS)
          and not (work == p or _under(work, p))]


def _searchable(st: os.stat_result, uid: int, gid: int) -> bool:
  """Whether uid (primary group gid, no supplementary groups) may search."""
  if st.st_uid == uid:
    return bool(st.st_mode & 0o100)
  if st.st_gid == gid:
    return bool(st.st_mode & 0o010)
  return bool(st.st_mode & 0o001)


def _blocking_ancestor(path: str, uid: int, gid: int) -> str | None:
  """The outermost proper ancestor of `path` that uid/gid cannot search
  (e.g. a 0700 /root above a virtualenv), or None."""
  anc = "/"
  for name in [""] + path.strip("/").split("/")[:-1]:
    anc = os.path.join(anc, name)
    try:
      if not _searchable(os.stat(anc), uid, gid):
        return anc
    except OSError:
      return None
  return None


def _masks(paths: list[str], uid: int, gid: int) -> list[str]:
  """The blocking ancestors of `paths` (never "/"): each gets an empty
  tmpfs with only the needed paths bound back (`_cover`)."""
  out = {_blocking_ancestor(p, uid, gid) for p in paths}
  return _outermost(m for m in out if m and m != "/")


def _skeleton(top: str, path: str) -> None:
  """Creates the missing dirs from `top` (a fresh tmpfs) down to `path`,
  root-owned 0755 whatever the umask (searchable, not writable by the
  sandbox user)."""
  cur = top
  for name in path[len(top.rstrip("/")) + 1:].split("/"):
    cur = os.path.join(cur, name)
    if not os.path.isdir(cur):
      os.mkdir(cur, 0o755)
      os.chmod(cur, 0o755)


def _cover(dirs: list[str], ro: list[str], rw: list[str]) -> None:
  """In a private mount namespace, as root: an empty root-owned 0755 tmpfs
  on each of `dirs` (in order), then each path of `ro` (read-only,
  recursively) and `rw` (as is) inside it bound back at its own path.
  Nothing else of the covered dir is visible; the bound paths keep their
  own owners and modes."""
  fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in {*ro, *rw}}
  try:
    for d in dirs:
      _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
             "size=64k,mode=755")
      for p in sorted(q for q in {*ro, *rw} if _under(q, d)):
        _skeleton(d, p)
        if p in rw:
          _mount(f"/proc/self/fd/{fds[p]}", p, None, MS_BIND)
        else:
          _mount(f"/proc/self/fd/{fds[p]}", p, None, MS_BIND | MS_REC)
          _mount("none", p, None,
                 MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
  finally:
    for f in fds.values():
      os.close(f)


def _private_mounts(work: str, pid_ns: bool, needed: list[str],
                    drop_to: tuple[int, int] | None) -> tuple[str, list[str]]:
  """Root only, in a new mount namespace: private /proc and temp dirs, and
  the interpreter made reachable for the sandbox user.

  /tmp, /var/tmp, /dev/shm and /run/lock become empty root-owned 0755
  tmpfs mounts (the sandbox user cannot write there), with the work dir
  bind-mounted back at its own path, and the interpreter's directories
  that lived under them (`_python_dirs`) bind-mounted back read-only.
  When dropping to `drop_to` = (uid, gid): each directory of `needed`
  (`_needed_dirs`) below an ancestor that uid cannot search (a virtualenv
  or pyenv in a 0700 /root) is exposed the same way: that ancestor gets an
  empty tmpfs with only the needed dirs bound back read-only (and the work
  dir, if it lies there too), so nothing else of it becomes visible and no
  permission on disk changes. Returns the work dir's path and the covered
  ancestors.
  """
  _mount("none", "/", None, MS_REC | MS_PRIVATE)
  if pid_ns:
    try:  # a /proc that shows only this namespace's processes
      _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
      pass
  work = os.path.realpath(work)
  holds_work = lambda p: work == p or _under(work, p)
  masks = []
  if drop_to is not None:
    blocked = [p for p in needed
               if not any(_under(p, d) for d in _PRIVATE_DIRS)
               and not holds_work(p)]
    masks = _masks(blocked, *drop_to)
  temp = [d for d in _PRIVATE_DIRS
          if os.path.isdir(d) and not os.path.islink(d)]
  ro = _outermost(
      _kept_dirs(_outermost(_python_dirs() + needed), work)
      + [p for p in needed
         if any(_under(p, m) for m in masks) and not holds_work(p)])
  _cover(temp + masks, ro, [work])
  return work, masks


_NEEDED: list[str] | None = None  # `_needed_dirs()` of the warm zygote


def _unreachable(dirs: list[str]) -> list[str]:
  """Which of `dirs` this process (after the drop) cannot list."""
  return [p for p in dirs if not os.access(p, os.R_OK | os.X_OK)]


def job_main(job: dict, ns: dict, setup_fd: int) -> None:
  """Hardens this process, then runs the untrusted code (never returns)."""
  os.setsid()
  work = job["work"]
  setup = {"fs_mode": "shared", "dropped": False}
  drop_to = (int(job["uid"]), int(job["gid"])) if job["drop"] else None
  # Before the drop (the job may not see them); computed once by the zygote.
  needed = _NEEDED if _NEEDED is not None else _needed_dirs()
  if ns.get("mnt") and os.geteuid() == 0:
    try:
      work, masks = _private_mounts(work, ns.get("pid", False), needed,
                                    drop_to)
      setup["fs_mode"] = "private-tmp"
      setup["covered"] = masks
    except OSError as e:
      setup["fs_error"] = str(e)
  os.chdir(work)
  cpu = int(job["cpu_s"])
  _limit(resource.RLIMIT_CPU, cpu, cpu + 1)
  _limit(resource.RLIMIT_AS, int(job["mem_bytes"]))
  _limit(resource.RLIMIT_FSIZE, int(job["fsize_bytes"]))
  _limit(resource.RLIMIT_NOFILE, int(job["max_open_files"]))
  _limit(resource.RLIMIT_NPROC, int(job["max_procs"]))
  _limit(resource.RLIMIT_CORE, 0)
  _limit(resource.RLIMIT_MEMLOCK, 0)
  _limit(resource.RLIMIT_MSGQUEUE, 0)
  if job["drop"]:
    uid, gid = int(job["uid"]), int(job["gid"])
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if (os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid,) * 3
        or os.getgroups()):
      raise RuntimeError("privilege drop did not hold")
    try:
      os.setuid(0)
    except PermissionError:
      pass
    else:
      raise RuntimeError("could regain root after the drop")
    setup["dropped"] = True
    blocked = _unreachable(needed)
    if blocked:  # the job fails only if it needs a file there
      setup["unreachable"] = blocked
      setup["unreachable_why"] = (
          f"mounts failed: {setup['fs_error']}" if "fs_error" in setup else
          "their own mode on disk, or they hold the work dir" if ns.get(
              "mnt") else
          "no mount namespace to expose them (namespaces=False, or the "
          "kernel refused one)")
  os.umask(0o077)
  _prctl(PR_SET_NO_NEW_PRIVS, 1)
  _prctl(PR_SET_DUMPABLE, 0)
  _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # cleared by setuid: set after
  setup.update(uid=os.getuid(), gid=os.getgid())
  os.environ.update(HOME=work, TMPDIR=work)
  os.write(setup_fd, json.dumps(setup).encode())
  os.close(setup_fd)
  _run_untrusted(job, work, needed)


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


def _make_hook(work, read_roots):
  """Builds the audit hook; its state lives only in this closure.

  Everything the hook calls is bound here, so user code that monkeypatches
  `os` or `posixpath` after the hook is armed cannot change its decisions.
  """
  realpath, fsdecode, sep = os.path.realpath, os.fsdecode, os.sep
  path_like = os.PathLike
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
  read_events = frozenset({"os.listdir", "os.scandir", "os.getxattr",
                           "os.listxattr", "glob.glob"})
  work_roots = (work,)
  both_roots = (work,) + tuple(read_roots)

  def inside(path, roots):
    if isinstance(path, int):
      return True  # an already-open descriptor
    try:
      p = realpath(fsdecode(path))
    except Exception:  # pylint: disable=broad-except
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
        if isinstance(a, (str, bytes, path_like)) and not inside(a, roots):
          raise PermissionError(
              f"sandbox: {event}({a!r}) outside the work dir")
  return hook


class _NoSocket:

  def __init__(self, *a, **k):
    raise PermissionError("sandbox: network access is not allowed")


def _run_untrusted(job: dict, work: str, needed: list[str]) -> None:
  """The in-process layers, then `exec` of the code and the rendering."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import socket  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  cap = int(job["max_output"])
  sys.stdout = _CappedWriter(open(1, "w", closefd=False), cap)
  sys.stderr = _CappedWriter(open(2, "w", closefd=False), cap)
  h, w, dpi = int(job["height"]), int(job["width"]), 100.0
  # Relative to the cwd (the work dir): works even where the sandbox user
  # may not search the work dir's ancestors.
  out_path = OUT_NAME
  try:
    code = compile(job["code"], "<generated>", "exec")
  except BaseException as e:  # pylint: disable=broad-except
    _fail(e)
  # A probe (trusted instrumentation, e.g. jaxlab.rewards.chartmimic): its
  # prefix runs before the audit hook (it may import and patch the
  # plotting stack), its suffix after the code, in a namespace of its own;
  # the suffix leaves a JSON-serialisable `__log__`, written to LOG_NAME.
  # The code shares the interpreter, so it can tamper with its own log:
  # the parent treats the log as untrusted bytes (size-capped JSON).
  probe = job.get("probe") or None
  trusted: dict = {"__name__": "__probe__", "__builtins__": __builtins__}
  if probe:
    try:
      prefix = compile(probe["prefix"], "<probe-prefix>", "exec")
      exec(prefix, trusted)  # pylint: disable=exec-used
    except BaseException as e:  # pylint: disable=broad-except
      _fail(RuntimeError(f"probe prefix failed: {type(e).__name__}: {e}"))
  if job["audit_hook"]:
    read_roots = tuple(sorted({os.path.realpath(p) for p in (
        sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
        os.path.dirname(np.__file__), os.path.dirname(matplotlib.__file__),
        matplotlib.get_data_path(), matplotlib.get_cachedir(),
        matplotlib.get_configdir(), "/usr/share/fonts", *needed)
        if p}))
    socket.socket = _NoSocket
    socket.create_connection = _NoSocket
    socket.socketpair = _NoSocket
    # Process creation that is not audited goes through _posixsubprocess:
    # unload it (its re-import is refused by the hook).
    subprocess._fork_exec = None  # pylint: disable=protected-access
    subprocess._posixsubprocess = None  # pylint: disable=protected-access
    for m in ("_posixsubprocess", "_ctypes", "ctypes", "_socket"):
      sys.modules.pop(m, None)
    sys.addaudithook(_make_hook(os.path.realpath(work), read_roots))
  plt.show = lambda *a, **k: None
  if job.get("kind") == "program":
    # A plain program (`jaxlab.rewards.sandbox.run_program`): exit 0 iff it
    # runs to its end. Fresh globals holding only the builtins, as the
    # code_eval metric's `exec(check_program, {})` (huggingface/evaluate
    # metrics/code_eval/execute.py, a7dd338): no `__name__`, no plt / np,
    # and any exception (SystemExit included) fails it.
    try:
      exec(code, {"__builtins__": __builtins__})  # pylint: disable=exec-used
    except BaseException as e:  # pylint: disable=broad-except
      _fail(e)
    try:
      sys.stdout.flush()
      sys.stderr.flush()
    except BaseException:  # pylint: disable=broad-except
      pass
    os._exit(0)  # pylint: disable=protected-access
  env = {"__name__": "__main__", "__builtins__": __builtins__, "plt": plt,
         "np": np}
  try:
    exec(code, env)  # pylint: disable=exec-used
    if probe:
      suffix = compile(probe["suffix"], "<probe-suffix>", "exec")
      exec(suffix, trusted)  # pylint: disable=exec-used
      with open(LOG_NAME, "w") as f:
        json.dump(trusted.get("__log__"), f)
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(0)  # pylint: disable=protected-access
    nums = plt.get_fignums()
    if not nums:
      raise RuntimeError("the code produced no figure")
    fig = plt.figure(nums[-1])
    fig.set_dpi(dpi)
    fig.set_size_inches(w / dpi, h / dpi)
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    if rgba.shape[:2] != (h, w):
      raise RuntimeError(f"rendered {rgba.shape[:2]}, wanted {(h, w)}")
    np.save(out_path, np.ascontiguousarray(rgba[..., :3], np.uint8),
            allow_pickle=False)
  except BaseException as e:  # pylint: disable=broad-except
    _fail(e)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access


def _fail(e: BaseException) -> None:
  try:
    try:  # what the code printed before it failed (capped)
      sys.stdout.flush()
    except BaseException:  # pylint: disable=broad-except
      pass
    sys.stderr.write(f"\n{ERROR_MARKER}{type(e).__name__}: {e}"[:2000])
    sys.stderr.flush()
  finally:
    os._exit(3)  # pylint: disable=protected-access


# ---------------------------------------------------------------------------
# The supervisor (A).
# ---------------------------------------------------------------------------


def _try_unshare(job: dict) -> dict:
  if not job["namespaces"]:
    return {}
  if os.geteuid() == 0:
    candidates = (
        (CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
         CLONE_NEWUTS), CLONE_NEWNET | CLONE_NEWPID, CLONE_NEWNET)
  else:  # unprivileged: only through a new user namespace
    candidates = (
        CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC,
        CLONE_NEWUSER | CLONE_NEWNET)
  for flags in candidates:
    try:
      _unshare(flags)
    except OSError:
      continue
    return {"net": bool(flags & CLONE_NEWNET),
            "pid": bool(flags & CLONE_NEWPID),
            "mnt": bool(flags & CLONE_NEWNS),
            "user": bool(flags & CLONE_NEWUSER)}
  return {}


def _kill(pid: int) -> None:
  for fn, arg in ((os.killpg, pid), (os.kill, pid)):
    try:
      fn(arg, signal.SIGKILL)
    except OSError:
      pass


def _children() -> list[int]:
  """Pids whose parent is this process (orphans reparented to us)."""
  me, out = os.getpid(), []
  for d in os.listdir("/proc"):
    if d.isdigit():
      try:
        with open(f"/proc/{d}/stat", "rb") as f:
          stat = f.read()
        if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
          out.append(int(d))
      except (OSError, ValueError, IndexError):
        pass
  return out


def _reap_all(pgid: int, limit_s: float = 5.0) -> None:
  """Kills and reaps every process the job left (we are their subreaper)."""
  deadline = time.monotonic() + limit_s
  while True:
    try:
      pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
      return
    if pid:
      continue
    if time.monotonic() > deadline:
      return
    _kill(pgid)
    for child in _children():
      _kill(child)
    time.sleep(0.002)


def supervise(job: dict, report_fd: int) -> dict:
  """Runs one job in a fresh child and returns what happened."""
  root = job["root"]
  flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
  out = os.open(os.path.join(root, "out.txt"), flags, 0o600)
  err = os.open(os.path.join(root, "err.txt"), flags, 0o600)
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  os.dup2(out, 1)
  os.dup2(err, 2)
  os.closerange(3, report_fd)
  os.closerange(report_fd + 1, 1 << 16)
  ns = _try_unshare(job)
  try:  # orphans of the job are reparented to us, so we can reap them
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
  except OSError:
    pass
  setup_r, setup_w = os.pipe()
  start = time.monotonic()
  pid = os.fork()
  if pid == 0:
    try:
      os.close(setup_r)
      os.close(report_fd)
      job_main(job, ns, setup_w)
    except BaseException as e:  # pylint: disable=broad-except
      _fail(RuntimeError(f"sandbox setup failed: {type(e).__name__}: {e}"))
    os._exit(4)  # pylint: disable=protected-access
  os.close(setup_w)
  timed_out = False
  try:
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    if not poller.poll(max(0.0, float(job["timeout_s"])) * 1000):
      timed_out = True
  except OSError:  # no pidfd: poll with sleeps
    deadline = start + float(job["timeout_s"])
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
      if time.monotonic() > deadline:
        timed_out = True
        break
      time.sleep(0.005)
  if timed_out:
    _kill(pid)
  try:
    _, status = os.waitpid(pid, 0)
  except ChildProcessError:
    status = 0
  _reap_all(pid)  # whatever the code left behind
  elapsed = time.monotonic() - start
  setup = {}
  try:
    setup = json.loads(os.read(setup_r, 65536).decode() or "{}")
  except (OSError, ValueError):
    pass
  result = {"elapsed_s": elapsed, "timed_out": timed_out,
            "net_mode": "netns" if ns.get("net") else (
                "audit-hook" if job["audit_hook"] else "none"),
            "pid_ns": bool(ns.get("pid")), "user_ns": bool(ns.get("user")),
            **setup}
  if os.WIFSIGNALED(status):
    result["signal"] = signal.Signals(os.WTERMSIG(status)).name
    result["returncode"] = -os.WTERMSIG(status)
  else:
    result["returncode"] = os.WEXITSTATUS(status)
  return result


# ---------------------------------------------------------------------------
# The zygote.
# ---------------------------------------------------------------------------


def run_job(job: dict, keep_closed: tuple[int, ...]) -> dict:
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.close(r)
    for fd in keep_closed:
      os.close(fd)
    try:
      os.write(w, json.dumps(supervise(job, w)).encode())
    except BaseException as e:  # pylint: disable=broad-except
      try:
        os.write(w, json.dumps({"supervisor_error":
                                f"{type(e).__name__}: {e}"}).encode())
      except OSError:
        pass
    os._exit(0)  # pylint: disable=protected-access
  os.close(w)
  chunks = []
  while True:
    b = os.read(r, 65536)
    if not b:
      break
    chunks.append(b)
  os.close(r)
  os.waitpid(pid, 0)
  try:
    return json.loads(b"".join(chunks).decode())
  except ValueError:
    return {"supervisor_error": "the supervisor died"}


def main() -> None:
  cmd_fd, rep_fd = os.dup(0), os.dup(1)
  null = os.open(os.devnull, os.O_RDWR)
  os.dup2(null, 0)
  os.dup2(null, 1)  # stray prints must not corrupt the protocol
  os.close(null)
  warm_up()
  global _NEEDED
  _NEEDED = _needed_dirs()
  rep = os.fdopen(rep_fd, "wb", buffering=0)
  rep.write(json.dumps({"ready": True, "euid": os.geteuid()}).encode() +
            b"\n")
  with os.fdopen(cmd_fd, "rb") as cmd:
    for line in cmd:
      try:
        job = json.loads(line)
      except ValueError:
        break
      reply = run_job(job, (cmd_fd, rep_fd))
      rep.write(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
  main()
