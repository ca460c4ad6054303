"""Executes the colabs in tests (nbclient) and returns what they printed."""

import contextlib
import os
import tempfile

import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
COLABS = os.path.join(ROOT, "colabs")
# The one environment variable a notebook reads its config preset from
# (colabs/_setup_cell.py writes the cell that reads it).
PRESET_ENV = "JAXLAB_COLAB_PRESET"


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


def run_notebook(name: str, *, preset: str | None = None, timeout_s: int = 600,
                 **env: str) -> str:
  """Runs `colabs/<name>` top to bottom; returns its concatenated text output.

  `preset` (e.g. "tiny") reaches the kernel as `JAXLAB_COLAB_PRESET`, which
  is how a notebook picks its CPU-sized config preset; `env` sets other
  variables. A failing cell raises `nbclient.exceptions.CellExecutionError`
  with the cell's traceback.

  The kernel's temp directory (`TMPDIR`: the notebook's `WORKDIR` and
  whatever else it writes there) is a fresh one, removed afterwards.
  """
  if preset is not None:
    env[PRESET_ENV] = preset
  nb = nbformat.read(os.path.join(COLABS, name), as_version=4)
  with tempfile.TemporaryDirectory(prefix="kernel_tmp_") as tmp, \
      _environ(**{"TMPDIR": tmp, **env}):
    NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                   resources={"metadata": {"path": COLABS}}).execute()
  return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                 for o in c.get("outputs", []))
