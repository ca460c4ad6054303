"""The first cell of every jaxlab notebook (used by colabs/_build_*.py).

The cell finds jaxlab where it exists: the repository checkout the notebook
sits in (opened from `colabs/` or the root: put on `sys.path`, nothing
installed); otherwise it pip-installs `JAXLAB_SOURCE` (set in the cell or as
an environment variable, e.g. `%env JAXLAB_SOURCE=...` in Colab): a pip spec,
a checkout or wheel path, or `git+https://HOST/OWNER/jaxlab` of a mirror,
optionally with extras (`jaxlab[video] @ git+...`); without extras given,
the runtime's accelerator extra is added (`[tpu]` on a TPU runtime,
`[cuda]` on a GPU one). With no source and no
jaxlab installed it stops with one message saying what to set (the project
has no public URL, so none is guessed). It then reads the config preset from
the one environment variable `JAXLAB_COLAB_PRESET` (what the tests set; "" is
the config's full default) and makes a scratch `WORKDIR`.
"""

# The environment variable every notebook reads its config preset from.
PRESET_ENV = "JAXLAB_COLAB_PRESET"
# Where the cell installs jaxlab from when the notebook is not in a checkout.
SOURCE_ENV = "JAXLAB_SOURCE"

_TEMPLATE = '''\
# Setup: use the jaxlab checkout this notebook sits in; elsewhere (Colab)
# pip-install JAXLAB_SOURCE: a pip spec, a wheel or checkout path, or
# git+https://HOST/REPO of a copy (set it here or with %env {source_env}=...).
import importlib.util, json, os, shutil, subprocess, sys, tempfile
JAXLAB_SOURCE = os.environ.get("{source_env}", "")
ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "colabs" else os.getcwd()
if os.path.isfile(os.path.join(ROOT, "jaxlab", "main.py")):
  sys.path.insert(0, ROOT)  # the checkout: nothing to install
elif JAXLAB_SOURCE:
  # The runtime's accelerator extra: [tpu] on a TPU runtime, [cuda] on a GPU.
  EXTRA = ("tpu" if os.environ.get("COLAB_TPU_ADDR") or os.path.exists("/dev/accel0")
           else "cuda" if shutil.which("nvidia-smi") else "")
  SPEC = JAXLAB_SOURCE
  if EXTRA and "[" not in SPEC:
    SPEC = (f"jaxlab[{{EXTRA}}] @ {{SPEC}}" if "://" in SPEC
            else f"{{SPEC}}[{{EXTRA}}]")
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", SPEC], check=True)
elif importlib.util.find_spec("jaxlab") is None:
  raise RuntimeError(
      "jaxlab is not installed and this notebook is not in a jaxlab checkout: "
      "set JAXLAB_SOURCE (in this cell, or %env {source_env}=...) to a pip "
      "source of jaxlab (a wheel or checkout path, or git+https://HOST/REPO) "
      "or open the notebook from a checkout's colabs/ folder")
# Config preset (jaxlab/configs/<name>.py:<preset>); "" is the full default.
PRESET = os.environ.get("{env}", "{default}")
WORKDIR = tempfile.mkdtemp(prefix="colab_")
print("preset:", repr(PRESET), "| workdir:", WORKDIR)'''


def setup_cell(default_preset: str = "tiny") -> str:
  """Source of the first code cell; `default_preset` when the env is unset."""
  return _TEMPLATE.format(source_env=SOURCE_ENV, env=PRESET_ENV,
                          default=default_preset)


def notebook(cells, *, default_preset: str = "tiny"):
  """A Python 3 notebook: the setup cell, then `cells`.

  `cells` are `(kind, source)` pairs, kind "md" (markdown) or "code".
  """
  from nbformat import v4  # pylint: disable=g-import-not-at-top
  nb = v4.new_notebook()
  nb.cells = [v4.new_code_cell(setup_cell(default_preset))] + [
      v4.new_markdown_cell(s) if kind == "md" else v4.new_code_cell(s)
      for kind, s in cells]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  return nb


def write(nb, filename: str) -> str:
  """Writes `nb` as colabs/<filename>; returns (and prints) the path."""
  import os  # pylint: disable=g-import-not-at-top
  import nbformat  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), filename)
  nbformat.write(nb, path)
  print(path)
  return path
