"""The first cell of every jaxlab notebook (used by colabs/_build_*.py).

In Colab (`google.colab` imported) the cell pip-installs this repository's
package (jaxlab plus the `configs` and `experiments` packages, see
pyproject.toml) from `JAXLAB_REPO_URL`; elsewhere it puts the checkout the
notebook sits in on `sys.path`. It then reads the config preset from the one
environment variable `JAXLAB_COLAB_PRESET` (what the tests set; "" is the
config's full default) and makes a scratch `WORKDIR`.
"""

# The environment variable every notebook reads its config preset from.
PRESET_ENV = "JAXLAB_COLAB_PRESET"
# This repository (no URL is recorded in pyproject.toml or the README): the
# one place to change for a fork or mirror.
REPO_URL = "https://github.com/jaxlab/jaxlab"

_TEMPLATE = '''\
# Setup: in Colab, install jaxlab (with jaxlab/configs/ and jaxlab/experiments/) from its
# repository; anywhere else, use the checkout this notebook sits in.
JAXLAB_REPO_URL = "{repo_url}"  # this repository; edit for a fork or mirror
import json, os, subprocess, sys, tempfile
if "google.colab" in sys.modules:
  subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                  "git+" + JAXLAB_REPO_URL], check=True)
else:
  ROOT = os.path.abspath("..") if os.path.basename(os.getcwd()) == "colabs" else os.getcwd()
  sys.path.insert(0, ROOT)
# Config preset (jaxlab/configs/<name>.py:<preset>); "" is the full default.
PRESET = os.environ.get("{env}", "{default}")
WORKDIR = tempfile.mkdtemp(prefix="colab_")
print("preset:", repr(PRESET), "| workdir:", WORKDIR)'''


def setup_cell(default_preset: str = "tiny") -> str:
  """Source of the first code cell; `default_preset` when the env is unset."""
  return _TEMPLATE.format(repo_url=REPO_URL, env=PRESET_ENV,
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
