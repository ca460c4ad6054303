"""Executes the colabs in tests (nbclient) and returns what they printed."""

import contextlib
import glob
import importlib.util
import os
import re
import sys
import tempfile
import types

import nbformat
from nbclient import NotebookClient

from jaxlab import registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
COLABS = os.path.join(ROOT, "colabs")
# The one environment variable a notebook reads its config preset from
# (colabs/_setup_cell.py writes the cell that reads it).
PRESET_ENV = "JAXLAB_COLAB_PRESET"


def colab_dirs() -> tuple[str, ...]:
  """`colabs/`, then the plugin directories' `colabs/` (JAXLAB_PLUGIN_PATH)."""
  return (COLABS,) + registry.plugin_subdirs("colabs")


def notebooks(dirs: tuple[str, ...] | None = None) -> dict[str, str]:
  """Notebook file name -> path of every `*.ipynb` of `dirs` (default:
  `colab_dirs()`; the first directory wins a name)."""
  out: dict[str, str] = {}
  for d in colab_dirs() if dirs is None else dirs:
    for path in sorted(glob.glob(os.path.join(d, "*.ipynb"))):
      out.setdefault(os.path.basename(path), path)
  return out


def load_builder(path: str) -> types.ModuleType:
  """The builder module at `path` (its directory on sys.path meanwhile, for
  its `import _setup_cell`)."""
  old = list(sys.path)
  spec = importlib.util.spec_from_file_location(
      os.path.basename(path)[:-3], path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  finally:
    sys.path[:] = old
  return module


def builders(dirs: tuple[str, ...] | None = None
             ) -> dict[str, tuple[str, str]]:
  """Notebook file -> (builder path, function name), by discovery.

  Every `_build_*.py` of `dirs` (default: `colab_dirs()`) is a builder:
  its `NOTEBOOKS = {"file.ipynb": fn, ...}` names what it builds; without
  one, `_build_<name>_colab.py` builds `<name>.ipynb` with `build()`. A new
  notebook is a new builder file: no list to edit.
  """
  out: dict[str, tuple[str, str]] = {}
  for d in colab_dirs() if dirs is None else dirs:
    for path in sorted(glob.glob(os.path.join(d, "_build_*.py"))):
      module = load_builder(path)
      table = getattr(module, "NOTEBOOKS", None)
      if table is None:
        m = re.fullmatch(r"_build_(\w+)_colab\.py", os.path.basename(path))
        if m is None or not callable(getattr(module, "build", None)):
          raise ValueError(
              f"{path}: a notebook builder defines NOTEBOOKS = "
              "{'name.ipynb': fn} or is _build_<name>_colab.py with build()")
        table = {f"{m.group(1)}.ipynb": module.build}
      for name, fn in table.items():
        if name in out:
          raise ValueError(f"{name} is built by both {out[name][0]} and "
                           f"{path}")
        out[name] = (path, fn.__name__)
  return out


@contextlib.contextmanager
def _environ(**env: str):
  """Sets environment variables for the kernel, restoring them afterwards."""
  old = {k: os.environ.get(k) for k in env}
  os.environ.update(env)
  try:
    yield
  finally:
    for k, v in old.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v


_DEVICE_COUNT = re.compile(r"--xla_force_host_platform_device_count=\S*")


def kernel_xla_flags(flags: str, devices: int) -> str:
  """`flags` with `--xla_force_host_platform_device_count=<devices>`."""
  kept = _DEVICE_COUNT.sub("", flags).split()
  return " ".join(
      [f"--xla_force_host_platform_device_count={int(devices)}"] + kept)


def run_notebook(name: str, *, preset: str | None = None, timeout_s: int = 600,
                 devices: int | None = 1, **env: str) -> str:
  """Runs `colabs/<name>` top to bottom; returns its concatenated text output.

  `preset` (e.g. "tiny") reaches the kernel as `JAXLAB_COLAB_PRESET`, which
  is how a notebook picks its CPU-sized config preset; `env` sets other
  variables. A failing cell raises `nbclient.exceptions.CellExecutionError`
  with the cell's traceback.

  `devices` (default 1) is the number of host-platform devices the kernel
  sees (`--xla_force_host_platform_device_count` in its `XLA_FLAGS`, the
  test process's other flags kept): one, like a CPU Colab runtime. The
  suite's 8 fake devices are for sharding tests, which the experiment
  tests run on 8; a notebook on 8 fake CPU devices prints the same lines
  and compiles and runs every program 8-way on the same 2 cores. `None`
  keeps the test process's flags.

  The kernel's temp directory (`TMPDIR`: the notebook's `WORKDIR` and
  whatever else it writes there) is a fresh one, removed afterwards.
  """
  if preset is not None:
    env[PRESET_ENV] = preset
  if devices is not None and "XLA_FLAGS" not in env:
    env["XLA_FLAGS"] = kernel_xla_flags(os.environ.get("XLA_FLAGS", ""),
                                        devices)
  nb = nbformat.read(os.path.join(COLABS, name), as_version=4)
  with tempfile.TemporaryDirectory(prefix="kernel_tmp_") as tmp, \
      _environ(**{"TMPDIR": tmp, **env}):
    NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                   resources={"metadata": {"path": COLABS}}).execute()
  return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                 for o in c.get("outputs", []))
