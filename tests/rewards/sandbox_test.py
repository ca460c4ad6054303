"""Security and function tests of jaxlab.rewards.sandbox.render_chart.

Each hostile snippet must come back with ok == False (or a harmless image),
leave nothing outside its own directory, and leave this process alive.
Hostile cases that fail fast get a generous timeout (so a loaded machine
cannot turn "refused" into "timeout"); the run-forever cases use 2 s. All
but the one-shot test run on one shared warm `SandboxPool` (each job still
gets fresh processes); escapes against the kernel layers alone are in
sandbox_escape_test.py.
"""

import os
import stat
import sys
import tempfile
from unittest import mock

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.rewards import sandbox
from jaxlab.rewards import sandbox_worker

_FAST = 30.0   # generous: these cases are refused within a second


class SandboxTest(parameterized.TestCase):
  # sandbox_private_venv_test reruns these cases from a virtualenv under a
  # 0700 directory: it overrides `python` (the one-shot worker's
  # interpreter) and `_pool`.
  python = None

  @classmethod
  def _pool(cls):
    return sandbox.shared_pool()

  def _render(self, code, **kw):
    return sandbox.render_chart(code, pool=self._pool(), **kw)

  def setUp(self):
    super().setUp()
    # A test-owned directory outside the sandbox: hostile code aims at it.
    self.outside = tempfile.mkdtemp(prefix="sandbox_test_")
    self.addCleanup(lambda: __import__("shutil").rmtree(self.outside, True))
    self.victim = os.path.join(self.outside, "victim.txt")
    with open(self.victim, "w") as f:
      f.write("keep me")

  def _sandbox_dirs(self):
    tmp = tempfile.gettempdir()
    return {d for d in os.listdir(tmp) if d.startswith("jaxlab_sandbox_")}

  def test_benign_chart_renders(self):
    # A private temp root: sandboxes of other test workers running in
    # parallel must not show up in the "directory removed" check below.
    root = tempfile.mkdtemp(prefix="sandbox_root_")
    self.addCleanup(__import__("shutil").rmtree, root, True)
    self.addCleanup(setattr, tempfile, "tempdir", tempfile.tempdir)
    tempfile.tempdir = root
    before = self._sandbox_dirs()
    r = sandbox.render_chart(
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\n"
        "ax.bar(['a', 'b', 'c'], [3, 5, 2], color='red')\n"
        "ax.set_title('abc')\nprint('done')\n",
        timeout_s=_FAST, size=(48, 64), python=self.python)  # one-shot
    self.assertTrue(r.ok, r.error + r.stderr)
    self.assertEqual(r.image.shape, (48, 64, 3))
    self.assertEqual(r.image.dtype, np.uint8)
    # Non-trivial: a white background plus pure-red bar pixels.
    self.assertGreater(r.image.std(), 20.0)
    red = (r.image[..., 0] > 200) & (r.image[..., 1] < 60) & (
        r.image[..., 2] < 60)
    self.assertGreater(int(red.sum()), 20)
    self.assertIn("done", r.stdout)
    self.assertEqual(self._sandbox_dirs() - before, set())  # dir removed

  def test_no_figure_is_not_ok(self):
    r = self._render("x = 1", timeout_s=_FAST)
    self.assertFalse(r.ok)
    self.assertIn("no figure", r.error)

  def test_exception_is_reported(self):
    r = self._render("1 / 0", timeout_s=_FAST)
    self.assertFalse(r.ok)
    self.assertIn("ZeroDivisionError", r.error)

  def test_read_outside_refused(self):
    r = self._render(f"print(open({self.victim!r}).read())",
                     timeout_s=_FAST)
    self.assertFalse(r.ok)
    self.assertIn("outside the work dir", r.error)
    self.assertNotIn("keep me", r.stdout)

  @parameterized.named_parameters(
      ("open_write", "open({p!r}, 'w').write('x')"),
      ("os_open", "import os; os.open({p!r}, os.O_WRONLY | os.O_CREAT)"),
      ("pathlib", "import pathlib; pathlib.Path({p!r}).write_text('x')"),
      ("savefig", "import matplotlib.pyplot as plt; plt.plot([1]); "
                  "plt.savefig({p!r} + '.png')"),
      ("rename_in", "open('a.txt', 'w').write('x'); import os; "
                    "os.rename('a.txt', {p!r})"),
      ("symlink_out", "import os; os.symlink({d!r}, 'link'); "
                      "open('link/new.txt', 'w').write('x')"),
  )
  def test_write_outside_refused(self, snippet):
    target = os.path.join(self.outside, "new.txt")
    r = self._render(snippet.format(p=target, d=self.outside),
                     timeout_s=_FAST)
    self.assertFalse(r.ok)
    self.assertIn("sandbox:", r.error)
    self.assertFalse(os.path.exists(target))
    self.assertFalse(os.path.exists(target + ".png"))

  @parameterized.named_parameters(
      ("remove", "import os; os.remove({v!r})"),
      ("overwrite", "open({v!r}, 'w').write('gone')"),
      ("rmtree", "import shutil; shutil.rmtree({d!r})"),
      ("chmod", "import os; os.chmod({v!r}, 0)"),
  )
  def test_outside_file_untouched(self, snippet):
    r = self._render(snippet.format(v=self.victim, d=self.outside),
                     timeout_s=_FAST)
    self.assertFalse(r.ok)
    with open(self.victim) as f:
      self.assertEqual(f.read(), "keep me")

  @parameterized.named_parameters(
      ("os_system", "import os; os.system('touch {p}')", "os.system"),
      ("popen", "import subprocess; subprocess.run(['touch', '{p}'])",
       "subprocess.Popen"),
      ("os_popen", "import os; os.popen('touch {p}')", "subprocess.Popen"),
      ("execv", "import os; os.execv('/bin/touch', ['touch', '{p}'])",
       "os.exec"),
      ("posix_spawn", "import os; os.posix_spawn('/bin/touch', "
                      "['touch', '{p}'], {{}})", "os.posix_spawn"),
      ("raw_fork_exec", "import _posixsubprocess", "_posixsubprocess"),
      ("ctypes", "import ctypes; ctypes.CDLL(None).system(b'touch {p}')",
       "ctypes"),
      ("kill_parent", "import os; os.kill(os.getppid(), 0)", "os.kill"),
  )
  def test_process_creation_refused(self, snippet, what):
    target = os.path.join(self.outside, "spawned")
    r = self._render(snippet.format(p=target), timeout_s=_FAST)
    self.assertFalse(r.ok)
    self.assertIn(what, r.error)
    self.assertFalse(os.path.exists(target))

  def test_fork_bomb(self):
    r = self._render(
        "import os\nwhile True:\n  os.fork()\n", timeout_s=_FAST)
    self.assertFalse(r.ok)
    self.assertIn("os.fork", r.error)
    r = self._render(
        "import multiprocessing as mp\n"
        "ps = [mp.Process(target=print) for _ in range(100)]\n"
        "[p.start() for p in ps]\n", timeout_s=_FAST)
    self.assertFalse(r.ok)

  @parameterized.named_parameters(
      ("socket", "import socket; socket.socket().connect(('127.0.0.1', 80))"),
      ("create_connection",
       "import socket; socket.create_connection(('127.0.0.1', 80))"),
      ("raw_socket", "import _socket; _socket.socket()"),
      ("urllib", "import urllib.request; "
                 "urllib.request.urlopen('http://127.0.0.1:1')"),
      ("dns", "import socket; socket.getaddrinfo('localhost', 80)"),
  )
  def test_network_refused(self, snippet):
    r = self._render(snippet, timeout_s=_FAST)
    self.assertFalse(r.ok)
    # "No module named": the unprivileged job cannot read a stdlib that is
    # not world-readable (pyenv under /root) beyond the modules preloaded.
    self.assertRegex(r.error, "sandbox|No module named")

  @parameterized.named_parameters(
      ("busy_loop", "while True:\n  pass\n"),
      ("sleep", "import time\ntime.sleep(1000)\n"),
      ("ignore_signals", "import signal\n"
                         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                         "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
                         "while True:\n  pass\n"),
  )
  def test_runs_forever_times_out(self, snippet):
    r = self._render(snippet, timeout_s=1.5)
    self.assertFalse(r.ok)
    self.assertRegex(r.error, "timeout|SIGKILL|SIGXCPU")

  @parameterized.named_parameters(
      ("bytearray", "x = bytearray(6 * 1024 ** 3)"),
      ("numpy", "import numpy as np; x = np.ones(6 * 1024 ** 3 // 8)"),
      ("grow", "xs = []\nwhile True:\n  xs.append(bytearray(1 << 26))\n"),
  )
  def test_memory_limit(self, snippet):
    # 512 MiB: "grow" touches every page it gets, so keep that cheap.
    r = self._render(snippet, timeout_s=_FAST, mem_bytes=512 << 20)
    self.assertFalse(r.ok)
    self.assertIn("MemoryError", r.error)

  def test_huge_output_is_capped(self):
    r = self._render(
        "print('x' * 10_000_000)\n"
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n",
        timeout_s=_FAST, max_output_bytes=1000)
    self.assertTrue(r.ok, r.error)        # a harmless image
    self.assertLessEqual(len(r.stdout), 1000)
    r = self._render(   # bypassing the capped writer hits FSIZE
        "import sys\nwhile True:\n  sys.__stdout__.write('y' * 1_000_000)\n",
        timeout_s=_FAST, fsize_bytes=4 << 20, max_output_bytes=1000)
    self.assertFalse(r.ok)
    self.assertLessEqual(len(r.stdout), 1000)

  def test_big_file_in_workdir_capped(self):
    r = self._render(
        "f = open('big.bin', 'wb')\nwhile True:\n  f.write(b'0' * (1 << 20))\n",
        timeout_s=_FAST, fsize_bytes=4 << 20)
    self.assertFalse(r.ok)
    self.assertRegex(r.error, "File too large|SIGXFSZ")

  def test_cannot_disable_the_hook(self):
    r = self._render(
        "import sys, os\n"
        "m = sys.modules['__main__']\n"
        "m.__dict__.clear()\n"
        f"open({self.victim!r}, 'w').write('gone')\n", timeout_s=_FAST)
    self.assertFalse(r.ok)
    with open(self.victim) as f:
      self.assertEqual(f.read(), "keep me")

  def test_reads_python_install_ok(self):
    r = self._render(
        "import numpy, json, colorsys, fractions\n"
        "src = open(numpy.__file__).read()\n"
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\n",
        timeout_s=_FAST)
    self.assertTrue(r.ok, r.error)

  def test_image_is_validated(self):
    # The job's .npy is untrusted bytes: only uint8 [H, W, 3] is accepted.
    d = self.outside
    load = sandbox._load_image  # pylint: disable=protected-access
    good = np.arange(8 * 10 * 3, dtype=np.uint8).reshape(8, 10, 3)
    np.save(os.path.join(d, "good.npy"), good)
    img, err = load(os.path.join(d, "good.npy"), (8, 10))
    self.assertEqual(err, "")
    np.testing.assert_array_equal(img, good)
    cases = {
        "float": (good.astype(np.float32), "bad image float32"),
        "shape": (good[:, :9], "bad image uint8"),
        "rgba": (np.zeros((8, 10, 4), np.uint8), "bad image uint8"),
        "object": (np.array([{"a": 1}], dtype=object), "unreadable image"),
        "large": (np.zeros((80, 100, 3), np.uint8), "too large"),
    }
    for name, (arr, want) in cases.items():
      path = os.path.join(d, name + ".npy")
      np.save(path, arr, allow_pickle=True)
      img, err = load(path, (8, 10))
      self.assertIsNone(img, name)
      self.assertIn(want, err, name)
    os.symlink(os.path.join(d, "good.npy"), os.path.join(d, "link.npy"))
    self.assertEqual(load(os.path.join(d, "link.npy"), (8, 10)),
                     (None, "no image was written"))
    os.mkfifo(os.path.join(d, "fifo.npy"))
    self.assertEqual(load(os.path.join(d, "fifo.npy"), (8, 10))[1],
                     "the image is not a regular file")

  def test_interpreter_dirs_under_tmp_are_kept(self):
    # A CI clone or virtualenv under /tmp must stay readable after /tmp is
    # replaced: outermost interpreter dirs inside a replaced dir are bound
    # back, except one holding the work dir (it would unhide /tmp).
    sw = sandbox_worker
    with mock.patch.object(sw.sys, "path", ["/tmp/ci/.venv/lib/site",
                                            "/tmp/ci/.venv", "/tmp/ci-b",
                                            "/usr/lib/python3"]), \
         mock.patch.object(sw.os.path, "isdir", lambda p: True), \
         mock.patch.object(sw.os.path, "realpath", lambda p: p), \
         mock.patch.object(sw.sys, "prefix", "/tmp/ci/.venv"), \
         mock.patch.object(sw.sys, "exec_prefix", "/tmp/ci/.venv"), \
         mock.patch.object(sw.sys, "base_prefix", "/opt/py"), \
         mock.patch.object(sw.sys, "base_exec_prefix", "/opt/py"):
      dirs = sw._python_dirs()  # pylint: disable=protected-access
    self.assertEqual(dirs, ["/opt/py", "/tmp/ci-b", "/tmp/ci/.venv",
                            "/usr/lib/python3"])
    kept = sw._kept_dirs(dirs, "/tmp/sandbox_x")  # pylint: disable=protected-access
    self.assertEqual(kept, ["/tmp/ci-b", "/tmp/ci/.venv"])
    self.assertEqual(sw._kept_dirs(["/tmp/ci"], "/tmp/ci/w"), [])  # pylint: disable=protected-access

  def test_blocking_ancestors_are_covered(self):
    # Which directories get an empty tmpfs with the interpreter bound back:
    # the outermost ancestor the sandbox uid/gid may not search, by the
    # kernel's rule (owner bits, else group bits, else other bits).
    sw = sandbox_worker
    d = stat.S_IFDIR
    modes = {"/": (0o755, 0, 0), "/root": (0o700, 0, 0),
             "/root/.pyenv": (0o755, 0, 0), "/root/x": (0o700, 0, 0),
             "/srv": (0o750, 0, 100), "/own": (0o071, 65534, 0),
             "/opt": (0o755, 0, 0)}
    def fake_stat(p, *a, **k):
      mode, uid, gid = modes.get(p, (0o755, 0, 0))
      return os.stat_result((d | mode, 0, 0, 0, uid, gid, 0, 0, 0, 0))
    with mock.patch.object(sw.os, "stat", fake_stat):
      def anc(p, uid=65534, gid=65534):
        return sw._blocking_ancestor(p, uid, gid)  # pylint: disable=protected-access
      self.assertEqual(anc("/root/.pyenv/versions/3.11"), "/root")
      self.assertEqual(anc("/root/x/venv"), "/root")  # outermost only
      self.assertIsNone(anc("/root/.pyenv/v", uid=0))  # the owner
      self.assertIsNone(anc("/srv/venv", gid=100))  # group bits
      self.assertEqual(anc("/srv/venv"), "/srv")
      self.assertEqual(anc("/own/venv"), "/own")  # owner bits, not other
      self.assertIsNone(anc("/opt/venv"))
      self.assertIsNone(anc("/root"))  # only ancestors, not the dir
      self.assertEqual(sw._masks(  # pylint: disable=protected-access
          ["/root/.pyenv/v", "/root/x/venv", "/srv/a", "/opt/b"],
          65534, 65534), ["/root", "/srv"])
      modes["/"] = (0o700, 0, 0)  # never a tmpfs over /
      self.assertEqual(sw._masks(["/root/v"], 65534, 65534), [])  # pylint: disable=protected-access
    import matplotlib  # pylint: disable=g-import-not-at-top
    needed = sw._needed_dirs()  # pylint: disable=protected-access
    for p in (sys.prefix, sys.base_prefix, matplotlib.get_data_path()):
      p = os.path.realpath(p)
      self.assertTrue(any(p == q or p.startswith(q + "/") for q in needed),
                      (p, needed))

  def test_bad_size(self):
    with self.assertRaisesRegex(ValueError, "size="):
      self._render("", size=(2, 2))


if __name__ == "__main__":
  absltest.main()
