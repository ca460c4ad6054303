"""`jaxlab.rewards.sandbox.render_chart(probe=...)`: trusted instrumentation
around untrusted code, its JSON log back through the sandbox.

The prefix runs before the code (its patch sees the code's calls), the
suffix after it in the prefix's namespace (the code cannot reach it by
name), the log comes back parsed; a code failure, a suffix failure or a
malformed probe give no log; the audit hook still holds for the code.
"""

from absl.testing import absltest

from jaxlab.rewards import sandbox

PREFIX = """
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
calls = []
_bar = Axes.bar
def _logged(self, *a, **k):
  calls.append(len(a[1]))
  return _bar(self, *a, **k)
Axes.bar = _logged
"""
SUFFIX = "__log__ = {'calls': calls, 'axes': len(plt.gcf().axes)}\n"


class SandboxProbeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.pool = sandbox.SandboxPool(workers=1)

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()
    super().tearDownClass()

  def _run(self, code, probe=None):
    return sandbox.render_chart(
        code, pool=self.pool, timeout_s=20.0,
        probe=probe or {"prefix": PREFIX, "suffix": SUFFIX})

  def test_log_of_the_codes_calls(self):
    r = self._run("import matplotlib.pyplot as plt\n"
                  "fig, axs = plt.subplots(1, 2)\n"
                  "axs[0].bar([1, 2, 3], [1, 2, 3])\n"
                  "axs[1].bar([1], [4])\n")
    self.assertTrue(r.ok, r.error)
    self.assertIsNone(r.image)
    self.assertEqual(r.log, {"calls": [3, 1], "axes": 2})

  def test_code_cannot_reach_the_probe_namespace(self):
    # `calls` / `__log__` in the code's globals are its own; a log file it
    # writes itself is replaced by the suffix's.
    r = self._run("calls = ['forged']\n__log__ = 'forged'\n"
                  "open('__sandbox_log__.json', 'w').write('[1]')\n"
                  "import matplotlib.pyplot as plt\nplt.figure()\n")
    self.assertTrue(r.ok, r.error)
    self.assertEqual(r.log, {"calls": [], "axes": 0})

  def test_failures_give_no_log(self):
    r = self._run("raise KeyError('x')")
    self.assertFalse(r.ok)
    self.assertIsNone(r.log)
    self.assertIn("KeyError", r.error)
    r = self._run("x = 1", {"prefix": PREFIX, "suffix": "1 / 0\n"})
    self.assertFalse(r.ok)
    self.assertIn("ZeroDivisionError", r.error)
    r = self._run("x = 1", {"prefix": PREFIX,
                            "suffix": "__log__ = object()\n"})
    self.assertFalse(r.ok)   # not JSON-serialisable: no log written
    with self.assertRaisesRegex(ValueError, "probe must be"):
      self._run("x = 1", {"prefix": PREFIX})

  def test_audit_hook_still_holds(self):
    r = self._run("open('/etc/hostname').read()")
    self.assertFalse(r.ok)
    self.assertIn("sandbox:", r.error)


if __name__ == "__main__":
  absltest.main()
