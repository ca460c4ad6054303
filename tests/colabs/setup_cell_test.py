"""Every notebook's first cell: the checkout or JAXLAB_SOURCE; one preset env.

Fast (nothing is executed in a kernel): the first cell is run with `exec`
under a stand-in `google.colab` module and a recording `subprocess.run`, and
each committed notebook is compared with what its builder writes now.
"""

import importlib.util
import os
import shutil
import sys
import tempfile
import types
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import nbformat

from jaxlab.testing import notebooks

COLABS = notebooks.COLABS
# Discovered, not listed: every colabs/*.ipynb, and notebook -> (builder
# file, function returning the notebook) from colabs/_build_*.py (their
# NOTEBOOKS, or _build_<name>_colab.py's build()); see
# `jaxlab.testing.notebooks.builders`.
PATHS = notebooks.notebooks()  # file name -> path (plugin dirs included)
NOTEBOOKS = tuple(sorted(PATHS))
BUILDERS = notebooks.builders()


def _first_cell(name: str) -> str:
  nb = nbformat.read(PATHS[name], as_version=4)
  return nb.cells[0]


class SetupCellTest(parameterized.TestCase):

  def test_every_notebook_has_a_builder(self):
    self.assertEqual(set(NOTEBOOKS), set(BUILDERS))

  @parameterized.named_parameters(*[(n[:-6], n) for n in sorted(BUILDERS)])
  def test_notebook_is_what_its_builder_writes(self, name):
    builder, fn = BUILDERS[name]
    built = getattr(notebooks.load_builder(builder), fn)()
    committed = nbformat.read(PATHS[name], as_version=4)
    self.assertEqual([(c.cell_type, c.source) for c in committed.cells],
                     [(c.cell_type, c.source) for c in built.cells],
                     f"re-run python {os.path.relpath(builder)}")

  def _tmp(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path

  def _exec_first_cell(self, name, *, cwd, env, colab=True, installed=True):
    """Runs `name`'s first cell in `cwd`; returns (namespace, pip calls)."""
    cell = _first_cell(name)
    self.assertEqual(cell.cell_type, "code")
    old_path, old_cwd = list(sys.path), os.getcwd()
    self.addCleanup(sys.path.__setitem__, slice(None), old_path)
    self.addCleanup(os.chdir, old_cwd)
    os.chdir(cwd)
    calls = []
    modules = ({"google.colab": types.ModuleType("google.colab")} if colab
               else {})
    environ = {k: v for k, v in os.environ.items()
               if k not in (notebooks.PRESET_ENV, "JAXLAB_SOURCE")}
    environ.update(env)
    find_spec = importlib.util.find_spec
    with mock.patch.dict(sys.modules, modules), \
        mock.patch("subprocess.run",
                   lambda *a, **kw: calls.append((a, kw))), \
        mock.patch("importlib.util.find_spec",
                   lambda n, *a: (find_spec(n, *a) if installed or n != "jaxlab"
                                  else None)), \
        mock.patch.dict(os.environ, environ, clear=True):
      if not colab:
        sys.modules.pop("google.colab", None)
      ns = {}
      exec(cell.source, ns)  # pylint: disable=exec-used
    if "WORKDIR" in ns:
      self.addCleanup(os.rmdir, ns["WORKDIR"])
    return ns, calls, old_path

  @parameterized.named_parameters(*[(n[:-6], n) for n in sorted(BUILDERS)])
  def test_first_cell_installs_the_configured_source_and_reads_one_preset(
      self, name):
    with open(PATHS[name]) as f:
      text = f.read()
    self.assertNotIn("JAXLAB_COLAB_ARG", text)
    self.assertNotIn("github.com", text)  # no URL that does not exist
    elsewhere = self._tmp()  # not a checkout
    source = "jaxlab[video] @ git+https://example.org/mirror/jaxlab"
    ns, calls, old_path = self._exec_first_cell(
        name, cwd=elsewhere, env={notebooks.PRESET_ENV: "tiny,smoke",
                                  "JAXLAB_SOURCE": source})
    self.assertEqual(calls, [(([sys.executable, "-m", "pip", "install", "-q",
                                source],), {"check": True})])
    self.assertEqual(ns["PRESET"], "tiny,smoke")
    self.assertEqual(sys.path, old_path)  # installed, not a checkout
    self.assertTrue(os.path.isdir(ns["WORKDIR"]))

  def test_the_runtime_accelerator_extra_is_added(self):
    elsewhere = self._tmp()
    wheel = "/content/jaxlab-0.1.0-py3-none-any.whl"
    _, calls, _ = self._exec_first_cell(
        "vudg.ipynb", cwd=elsewhere,
        env={"JAXLAB_SOURCE": wheel, "COLAB_TPU_ADDR": "10.0.0.2:8470"})
    self.assertEqual(calls[0][0][0][-1], wheel + "[tpu]")
    with mock.patch("shutil.which",
                    lambda n: "/usr/bin/nvidia-smi" if n == "nvidia-smi"
                    else None):
      _, calls, _ = self._exec_first_cell(
          "vudg.ipynb", cwd=elsewhere,
          env={"JAXLAB_SOURCE": "git+https://example.org/mirror/jaxlab"})
    self.assertEqual(calls[0][0][0][-1],
                     "jaxlab[cuda] @ git+https://example.org/mirror/jaxlab")

  def test_no_source_and_no_checkout_says_what_to_set(self):
    elsewhere = self._tmp()
    with self.assertRaisesRegex(RuntimeError, "set JAXLAB_SOURCE .*%env "
                                "JAXLAB_SOURCE=.*or open the notebook from a "
                                "checkout's colabs/ folder"):
      self._exec_first_cell("vudg.ipynb", cwd=elsewhere, env={},
                            installed=False)
    # jaxlab already installed (e.g. a re-run): nothing to do.
    ns, calls, old_path = self._exec_first_cell("vudg.ipynb", cwd=elsewhere,
                                                env={})
    self.assertEqual(calls, [])
    self.assertEqual(sys.path, old_path)
    self.assertEqual(ns["PRESET"], "tiny")

  def test_in_the_checkout_installs_nothing(self):
    for cwd in (COLABS, os.path.dirname(COLABS)):
      for colab in (True, False):
        ns, calls, _ = self._exec_first_cell(
            "pmc_unlearning.ipynb", cwd=cwd, colab=colab,
            env={"JAXLAB_SOURCE": "ignored-in-a-checkout"})
        self.assertEqual(calls, [])
        self.assertEqual(sys.path[0], os.path.dirname(COLABS))
        self.assertEqual(ns["PRESET"], "tiny")  # the builder's default
        sys.path.pop(0)


if __name__ == "__main__":
  absltest.main()
