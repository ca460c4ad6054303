"""Every notebook's first cell: installs jaxlab in Colab, one preset variable.

Fast (nothing is executed in a kernel): the first cell is run with `exec`
under a stand-in `google.colab` module and a recording `subprocess.run`, and
each committed notebook is compared with what its builder writes now.
"""

import glob
import importlib.util
import os
import sys
import types
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import nbformat

from jaxlab.testing import notebooks

COLABS = notebooks.COLABS
NOTEBOOKS = tuple(sorted(os.path.basename(p) for p in
                         glob.glob(os.path.join(COLABS, "*.ipynb"))))
# notebook -> (builder file, function returning the notebook)
BUILDERS = {
    "pmc_unlearning.ipynb": ("_build_pmc_colabs.py", "pmc_notebook"),
    "mathfimer.ipynb": ("_build_pmc_colabs.py", "mathfimer_notebook"),
    "trust_grpo.ipynb": ("_build_grpo_colabs.py", "trust_notebook"),
    "chart_to_code.ipynb": ("_build_grpo_colabs.py", "chart_notebook"),
    "rope_extension.ipynb": ("_build_rope_colabs.py", "rope_extension"),
    "frequency_entropy.ipynb": ("_build_rope_colabs.py", "frequency_entropy"),
    "rerank_cl_vs_sft.ipynb": ("_build_rerank_colab.py", "build"),
    "sipit.ipynb": ("_build_sipit_colab.py", "build"),
    "controller.ipynb": ("_build_controller_colab.py", "build"),
    "stabletoken.ipynb": ("_build_stabletoken_colab.py", "build"),
    "vulcan.ipynb": ("_build_vulcan_colab.py", "build"),
    "calibration.ipynb": ("_build_calibration_colab.py", "build"),
    "uncertainty.ipynb": ("_build_uncertainty_colab.py", "build"),
    "dpad.ipynb": ("_build_dpad_colab.py", "build"),
    "lestd.ipynb": ("_build_lestd_colab.py", "build"),
    "video_reason.ipynb": ("_build_video_reason_colab.py", "build"),
    "streaming_thinker.ipynb": ("_build_streaming_thinker_colab.py", "build"),
    "speckv.ipynb": ("_build_speckv_colab.py", "build"),
    "vudg.ipynb": ("_build_vudg_colab.py", "build"),
}


def _load(filename: str) -> types.ModuleType:
  spec = importlib.util.spec_from_file_location(
      filename[:-3], os.path.join(COLABS, filename))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _first_cell(name: str) -> str:
  nb = nbformat.read(os.path.join(COLABS, name), as_version=4)
  return nb.cells[0]


class SetupCellTest(parameterized.TestCase):

  def test_every_notebook_has_a_builder(self):
    self.assertEqual(set(NOTEBOOKS), set(BUILDERS))

  @parameterized.named_parameters(*[(n[:-6], n) for n in sorted(BUILDERS)])
  def test_notebook_is_what_its_builder_writes(self, name):
    builder, fn = BUILDERS[name]
    built = getattr(_load(builder), fn)()
    committed = nbformat.read(os.path.join(COLABS, name), as_version=4)
    self.assertEqual([(c.cell_type, c.source) for c in committed.cells],
                     [(c.cell_type, c.source) for c in built.cells],
                     f"re-run python colabs/{builder}")

  @parameterized.named_parameters(*[(n[:-6], n) for n in sorted(BUILDERS)])
  def test_first_cell_installs_in_colab_and_reads_one_preset_variable(
      self, name):
    cell = _first_cell(name)
    self.assertEqual(cell.cell_type, "code")
    with open(os.path.join(COLABS, name)) as f:
      self.assertNotIn("JAXLAB_COLAB_ARG", f.read())

    calls = []
    old_path = list(sys.path)
    self.addCleanup(sys.path.__setitem__, slice(None), old_path)
    fake_colab = types.ModuleType("google.colab")
    env = {notebooks.PRESET_ENV: "tiny,smoke"}
    with mock.patch.dict(sys.modules, {"google.colab": fake_colab}), \
        mock.patch("subprocess.run",
                   lambda *a, **kw: calls.append((a, kw))), \
        mock.patch.dict(os.environ, env):
      ns = {}
      exec(cell.source, ns)  # pylint: disable=exec-used
    self.assertEqual(calls, [(([sys.executable, "-m", "pip", "install", "-q",
                                "git+https://github.com/jaxlab/jaxlab"],),
                              {"check": True})])
    self.assertEqual(ns["PRESET"], "tiny,smoke")
    self.assertEqual(sys.path, old_path)  # installed, not a checkout
    self.assertTrue(os.path.isdir(ns["WORKDIR"]))
    os.rmdir(ns["WORKDIR"])

  def test_outside_colab_uses_the_checkout(self):
    cell = _first_cell("pmc_unlearning.ipynb")
    old_path, old_cwd = list(sys.path), os.getcwd()
    self.addCleanup(sys.path.__setitem__, slice(None), old_path)
    self.addCleanup(os.chdir, old_cwd)
    os.chdir(COLABS)
    calls = []
    sys.modules.pop("google.colab", None)
    env = dict(os.environ)
    env.pop(notebooks.PRESET_ENV, None)
    with mock.patch("subprocess.run",
                    lambda *a, **kw: calls.append((a, kw))), \
        mock.patch.dict(os.environ, env, clear=True):
      ns = {}
      exec(cell.source, ns)  # pylint: disable=exec-used
    self.assertEqual(calls, [])
    self.assertEqual(sys.path[0], os.path.dirname(COLABS))
    self.assertEqual(ns["PRESET"], "tiny")  # the builder's default
    os.rmdir(ns["WORKDIR"])


if __name__ == "__main__":
  absltest.main()
