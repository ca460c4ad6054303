"""A directory built once per test session, shared by the xdist workers.

    out = session_cache.build_once("pretrained/smollm2.float32", write)
    # write(tmp_dir) fills a fresh directory; `out` is the finished one,
    # or None outside a test session (no `$JAXLAB_TEST_SCRATCH`).

Under pytest `tests/conftest.py` sets `$JAXLAB_TEST_SCRATCH`, one scratch
directory per run. The first process that asks for `key` runs
`write(tmp)` into `<scratch>/jaxlab-session-cache/<key>.tmp<pid>` under an
exclusive `fcntl` lock and renames it to `<key>`, so the directory is
complete or absent; a process that asks meanwhile waits on the lock, then
reads the finished directory. Used for what several test modules build
alike and is slow to build: the converted SmolLM2 arrays
(`pretrained_fixtures`), the tiny LLaDA / Dream checkpoints
(`diffusion_fixtures`).
"""

from __future__ import annotations

from collections.abc import Callable
import fcntl
import os
import shutil

SCRATCH_ENV = "JAXLAB_TEST_SCRATCH"


def path(key: str) -> str | None:
  """Where `key`'s directory is (or will be); None outside a session."""
  root = os.environ.get(SCRATCH_ENV)
  return os.path.join(root, "jaxlab-session-cache", key) if root else None


def build_once(key: str, write: Callable[[str], object]) -> str | None:
  """`key`'s directory, `write` into it by the first process that asks
  (module docstring); None outside a test session (`write` not called)."""
  out = path(key)
  if out is None:
    return None
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with open(f"{out}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # one builds, the others wait
    if not os.path.isdir(out):
      tmp = f"{out}.tmp{os.getpid()}"
      shutil.rmtree(tmp, ignore_errors=True)
      try:
        write(tmp)
      except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed build leaves none
        raise
      os.replace(tmp, out)  # complete or absent
  return out
