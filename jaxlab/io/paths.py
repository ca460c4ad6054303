"""Workdir paths: local directories or URLs (`gs://BUCKET/run`), via epath.

Every file the trainer, its checkpoints, its metrics and `results.json`
write goes through `etils.epath`, so a workdir may be anything epath
reaches: a local directory, or a `gs://` / `s3://` URL (a bucket every host
of a pod slice sees). A URL is kept as it is (never joined to the current
directory); a local path is made absolute.

    workdir = paths.resolve("gs://my-bucket/run1")   # unchanged
    paths.write_text(paths.join(workdir, "results.json"), text)

epath reads `gs://` with TensorFlow's gfile when TensorFlow is installed,
else with fsspec's `gcsfs`; `check_backend` says which to install when
neither is.
"""

from __future__ import annotations

import importlib.util
import os
import posixpath

from etils import epath

# URL scheme -> (modules epath can use for it, what to install).
BACKENDS = {
    "gs": (("gcsfs", "tensorflow"), "pip install gcsfs"),
    "s3": (("s3fs", "tensorflow"), "pip install s3fs"),
    "az": (("adlfs",), "pip install adlfs"),
    "hf": (("huggingface_hub",), "pip install huggingface_hub"),
}


def scheme(path: str) -> str | None:
  """"gs" for `gs://b/x`; None for a local path."""
  path = os.fspath(path)
  head, sep, _ = path.partition("://")
  return head if sep and head.isidentifier() else None


def is_url(path) -> bool:
  return scheme(os.fspath(path)) is not None


def _available(module: str) -> bool:
  try:
    return importlib.util.find_spec(module) is not None
  except (ImportError, ValueError):
    return False


def check_backend(path: str, *, field: str = "--workdir") -> None:
  """Raises ValueError naming the package to install when epath cannot
  reach `path`'s scheme (e.g. `gs://` without gcsfs or TensorFlow)."""
  s = scheme(path)
  if s is None:
    return
  if s == "file":
    return
  if s not in BACKENDS:
    raise ValueError(f"{field}={path}: unsupported URL scheme {s!r}; "
                     f"supported: a local path or "
                     f"{', '.join(k + '://' for k in BACKENDS)}")
  modules, fix = BACKENDS[s]
  if not any(_available(m) for m in modules):
    raise ValueError(f"{field}={path}: {s}:// needs one of "
                     f"{', '.join(modules)}, none is installed; {fix}")


def resolve(path) -> str:
  """A URL unchanged (`file://X` becomes the local path X); a local path
  absolute, with `~` expanded."""
  path = os.fspath(path)
  if path.startswith("file://"):
    path = path[len("file://"):]
  if is_url(path):
    return path.rstrip("/")
  return os.path.abspath(os.path.expanduser(path))


def join(base, *parts: str) -> str:
  """`base/part/...` for a URL or a local path."""
  base = os.fspath(base)
  if is_url(base):
    return posixpath.join(base, *parts)
  return os.path.join(base, *parts)


def epath_of(path) -> epath.Path:
  """The epath of a URL or local path (local: absolute)."""
  return epath.Path(resolve(path))


def exists(path) -> bool:
  return epath_of(path).exists()


def makedirs(path) -> None:
  epath_of(path).mkdir(parents=True, exist_ok=True)


def read_text(path) -> str:
  return epath_of(path).read_text()


def write_text(path, text: str) -> None:
  """Writes `text` to `path` whole: locally via a temporary file and a
  rename (a reader never sees half a file); on object stores, one upload
  (objects appear whole)."""
  p = epath_of(path)
  if is_url(resolve(path)):
    p.write_text(text)
    return
  p.parent.mkdir(parents=True, exist_ok=True)
  tmp = p.parent / (p.name + ".tmp")
  tmp.write_text(text)
  os.replace(tmp, p)


def write_bytes(path, data: bytes) -> None:
  epath_of(path).write_bytes(data)
