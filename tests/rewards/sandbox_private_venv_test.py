"""The sandbox from a virtualenv under a private (0700) directory, as root.

Run as root with the virtualenv in root's home (mode 0700, as in most
containers), the dropped `nobody` user cannot search the directory above the
interpreter, so every chart failed on a font matplotlib opens lazily
(issue 34, item 3). `_private_layout` builds that case outside the temp
dirs (the sandbox replaces those and binds the interpreter back, which hid
the bug on CI): a 0700 directory holding a virtualenv with its own copy of
matplotlib (mpl-data included; hard links, nothing's mode changes) and a
copy of the sandbox's part of jaxlab. From it a benign chart renders exactly
as in-process, nothing else of the private directory becomes visible, and
the hostile suites of sandbox_escape_test and sandbox_test pass unchanged.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from unittest import mock

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from absl.testing import absltest

from jaxlab.rewards import sandbox
import sandbox_escape_test  # pylint: disable=g-bad-import-order
import sandbox_test  # pylint: disable=g-bad-import-order

_PROJECT = sandbox_escape_test._PROJECT  # pylint: disable=protected-access
_IS_ROOT = os.geteuid() == 0
_FAST = 30.0
# A lazily opened font file (no warm-up draws with it) and text in it, so
# the job must read matplotlib's data dir after the privilege drop.
_CHART = (
    "import os\nimport matplotlib\nimport matplotlib.pyplot as plt\n"
    "from matplotlib.font_manager import FontProperties\n"
    "serif = FontProperties(fname=os.path.join(\n"
    "    matplotlib.get_data_path(), 'fonts', 'ttf', 'DejaVuSerif-Bold.ttf'))\n"
    "fig, ax = plt.subplots()\n"
    "ax.bar(['a', 'b', 'c'], [3, 5, 2], color='red')\n"
    "ax.set_title('Abc', fontproperties=serif, fontsize=40)\n")


def _link_tree(src: str, dst: str) -> None:
  """Copies a tree as hard links (same modes: nothing is chmod-ed)."""
  def link(s, d):
    try:
      os.link(s, d)
    except OSError:  # another file system
      shutil.copy2(s, d)
  shutil.copytree(src, dst, symlinks=True, copy_function=link)


def _private_layout() -> str:
  """A 0700 dir D outside the temp dirs: D/venv (matplotlib copied in, the
  rest of this interpreter's packages through a .pth file) and D/repo (the
  sandbox's part of jaxlab)."""
  base = "/var/lib" if os.path.isdir("/var/lib") else "/"
  root = tempfile.mkdtemp(prefix="jaxlab_private_", dir=base)
  assert os.stat(root).st_mode & 0o777 == 0o700
  venv = os.path.join(root, "venv")
  base_python = getattr(sys, "_base_executable", sys.executable)
  subprocess.run([base_python, "-m", "venv", "--without-pip", venv],
                 check=True, capture_output=True, timeout=120)
  python = os.path.join(venv, "bin", "python")
  site = subprocess.run(
      [python, "-c", "import sysconfig; print(sysconfig.get_paths()"
       "['purelib'])"], check=True, capture_output=True, text=True,
      timeout=60).stdout.strip()
  host_site = sysconfig.get_paths()["purelib"]
  with open(os.path.join(site, "jaxlab_test_host.pth"), "w") as f:
    f.write(host_site + "\n")  # numpy, PIL, ...: after our matplotlib
  mpl = os.path.dirname(matplotlib.__file__)
  _link_tree(mpl, os.path.join(site, "matplotlib"))
  toolkits = os.path.join(os.path.dirname(mpl), "mpl_toolkits")
  if os.path.isdir(toolkits):
    _link_tree(toolkits, os.path.join(site, "mpl_toolkits"))
  for rel in ("jaxlab/__init__.py", "jaxlab/rewards/__init__.py",
              "jaxlab/rewards/sandbox.py", "jaxlab/rewards/sandbox_worker.py"):
    os.makedirs(os.path.dirname(os.path.join(root, "repo", rel)),
                exist_ok=True)
    shutil.copy2(os.path.join(_PROJECT, rel), os.path.join(root, "repo", rel))
  os.mkdir(os.path.join(root, "mplconfig"), 0o700)  # like ~/.cache
  return root


# One layout and one warm pool for the module's three classes (built by the
# first class that runs, removed by tearDownModule), as sandbox_test and
# sandbox_escape_test share `sandbox.shared_pool()`: each job still gets
# fresh processes, and no test writes to the layout but the one that adds
# and removes its own note file.
_SHARED: dict[str, object] = {}


def _shared(key: str, build):
  if key not in _SHARED:
    _SHARED[key] = build()
  return _SHARED[key]


def tearDownModule():  # pylint: disable=invalid-name
  if "pool" in _SHARED:
    _SHARED.pop("pool").close()
  if "layout" in _SHARED:
    shutil.rmtree(_SHARED.pop("layout"), True)


class _PrivateLayout:
  """Mixin: the class's pool (and one-shot workers) run from the layout."""

  @classmethod
  def setUpClass(cls):
    cls.layout = _shared("layout", _private_layout)
    cls.python = os.path.join(cls.layout, "venv", "bin", "python")
    env = mock.patch.dict(os.environ, {
        "MPLCONFIGDIR": os.path.join(cls.layout, "mplconfig")})
    env.start()
    cls.addClassCleanup(env.stop)
    cls.private_pool = _shared(
        "pool", lambda: sandbox.SandboxPool(1, python=cls.python))
    super().setUpClass()

  @classmethod
  def _pool(cls):
    return cls.private_pool


@absltest.skipUnless(_IS_ROOT, "the privilege drop is tested as root (CI)")
class PrivateVenvTest(_PrivateLayout, absltest.TestCase):

  def test_layout_is_private(self):
    # Without the sandbox's mounts the sandbox user could not read it.
    r = self._pool().render(_CHART, timeout_s=_FAST, namespaces=False)
    self.assertFalse(r.ok)
    self.assertTrue(r.dropped)
    self.assertIn("Permission denied", r.error)
    venv = os.path.realpath(os.path.join(self.layout, "venv"))
    self.assertIn(venv, r.unreachable)
    # The error says what the job could not read and why.
    self.assertIn(f"cannot read {', '.join(r.unreachable)}", r.error)
    self.assertIn("no mount namespace", r.error)

  def test_benign_chart_matches_in_process(self):
    r = self._pool().render(_CHART + "print('done')\n", timeout_s=_FAST,
                            size=(48, 64))
    self.assertTrue(r.ok, r.error + r.stderr)
    self.assertTrue(r.dropped)
    self.assertEqual(r.fs_mode, "private-tmp")
    self.assertIn(os.path.realpath(self.layout), r.covered)
    self.assertEqual(r.unreachable, ())
    self.assertIn("done", r.stdout)
    # The same chart drawn here, as the worker draws it.
    with plt.style.context("default"):
      env = {"plt": plt, "np": np, "__name__": "__main__"}
      exec(_CHART, env)  # pylint: disable=exec-used
      fig = plt.gcf()
      fig.set_dpi(100.0)
      fig.set_size_inches(64 / 100.0, 48 / 100.0)
      fig.canvas.draw()
      want = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
      plt.close(fig)
    self.assertEqual(r.image.shape, (48, 64, 3))
    self.assertGreater(int((r.image != 255).any(-1).sum()), 100)
    np.testing.assert_array_equal(r.image, want)

  def test_one_shot_and_lazy_stdlib(self):
    r = sandbox.render_chart(
        "import email.mime.text, xml.dom.minidom, sqlite3\n" + _CHART,
        timeout_s=_FAST, python=self.python)
    self.assertTrue(r.ok, r.error + r.stderr)

  def test_nothing_else_becomes_visible(self):
    # A world-readable file in the 0700 dir stays out of reach: the dir is
    # an empty tmpfs in the job, with only the virtualenv bound back.
    note = os.path.join(self.layout, "note.txt")
    with open(note, "w") as f:
      f.write("private")
    os.chmod(note, 0o644)
    self.addCleanup(os.remove, note)
    r = self._pool().render(
        "import os\n"
        f"print(sorted(os.listdir({self.layout!r})))\n"
        f"print(os.access({self.layout!r}, os.W_OK))\n"
        f"open({note!r}).read()\n", timeout_s=_FAST, audit_hook=False)
    self.assertFalse(r.ok)
    self.assertIn("['venv']", r.stdout)
    self.assertIn("False", r.stdout)
    self.assertIn("No such file", r.error)
    r = self._pool().render(  # and the virtualenv is read-only
        f"open({os.path.join(self.layout, 'venv', 'x')!r}, 'w')\n",
        timeout_s=_FAST, audit_hook=False)
    self.assertFalse(r.ok)
    self.assertRegex(r.error, "Read-only|Permission denied")


class PrivateVenvEscapeTest(_PrivateLayout,
                            sandbox_escape_test.SandboxEscapeTest):
  """The escape suite; the unprivileged case with the repository there too."""

  def _unprivileged_setup(self):
    return self.python, os.path.join(self.layout, "repo")

  def test_leak_check_sees_a_descendant_and_not_a_stranger(self):
    self.skipTest("no sandbox involved: run by SandboxEscapeTest")


@absltest.skipUnless(_IS_ROOT, "the privilege drop is tested as root (CI)")
class PrivateVenvSandboxTest(_PrivateLayout, sandbox_test.SandboxTest):
  """The hostile and benign cases of sandbox_test."""


if __name__ == "__main__":
  absltest.main()
