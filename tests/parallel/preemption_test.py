"""jaxlab.parallel.preemption: Ctrl-C / SIGTERM as a flag loops poll.

The end-to-end checks (SIGINT to a training's process group saves a
checkpoint, exits 0, and the relaunch matches an uninterrupted run) are in
tests/experiments/main_test.py.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest

from jaxlab.io import stages
from jaxlab.parallel import preemption

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class PreemptionTest(absltest.TestCase):

  def tearDown(self):
    preemption.clear()
    super().tearDown()

  def test_first_signal_sets_the_flag_and_raises_nothing(self):
    for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
      with self.subTest(name):
        before = signal.getsignal(sig)
        with preemption.handling():
          self.assertFalse(preemption.requested())
          os.kill(os.getpid(), sig)  # delivered before kill returns
          self.assertTrue(preemption.requested())
          self.assertEqual(preemption.reason(), name)
          with self.assertRaises(preemption.Preempted):
            preemption.check()
        # The previous handlers are back once the outermost use ends.
        self.assertIs(signal.getsignal(sig), before)

  def test_nested_uses_share_the_outer_flag(self):
    with preemption.handling():
      os.kill(os.getpid(), signal.SIGTERM)
      with preemption.handling():  # e.g. the trainer inside the launcher
        self.assertTrue(preemption.requested())  # not cleared by the inner
        self.assertIs(signal.getsignal(signal.SIGINT), preemption._handle)  # pylint: disable=protected-access
      # The inner exit leaves the outer handlers installed.
      self.assertIs(signal.getsignal(signal.SIGINT), preemption._handle)  # pylint: disable=protected-access
    with preemption.handling():  # a new outermost use: a new run
      self.assertFalse(preemption.requested())

  def test_second_ctrl_c_exits_at_once(self):
    # In a child: os._exit ends the process.
    script = textwrap.dedent("""
        import os, signal, time
        from jaxlab.parallel import preemption
        with preemption.handling():
          os.kill(os.getpid(), signal.SIGINT)
          print("flag", preemption.requested(), flush=True)
          os.kill(os.getpid(), signal.SIGINT)
          print("not reached", flush=True)
        """)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True,
        text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"))
    self.assertEqual(proc.returncode, preemption.ABORT_EXIT_CODE)
    self.assertEqual(proc.stdout, "flag True\n")
    self.assertIn("Second Ctrl-C: aborting without saving.", proc.stderr)
    self.assertNotIn("Traceback", proc.stderr)


class StageBoundaryTest(absltest.TestCase):
  """`stages.cached` starts no stage after a signal and saves none cut
  short by one."""

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
    self.key = {"seed": 0}

  def tearDown(self):
    preemption.clear()
    super().tearDown()

  def test_signal_during_a_stage_saves_nothing(self):
    path = os.path.join(self.dir, "eval.json")

    def compute():
      preemption.request("SIGINT")  # arrives while the stage runs
      return {"acc": 0.5}

    with self.assertRaises(preemption.Preempted):
      stages.cached(path, self.key, compute)
    self.assertFalse(os.path.exists(path))
    self.assertFalse(stages.is_current(path, self.key))
    # The re-run (a new process: flag clear) computes and saves the stage.
    preemption.clear()
    calls = []
    value = stages.cached(path, self.key,
                          lambda: calls.append(1) or {"acc": 0.75})
    self.assertEqual(value, {"acc": 0.75})
    self.assertLen(calls, 1)
    with open(path) as f:
      self.assertEqual(json.load(f), {"acc": 0.75})

  def test_signal_before_a_stage_starts_none(self):
    done = os.path.join(self.dir, "done.json")
    stages.cached(done, self.key, lambda: [1, 2])
    preemption.request("SIGTERM")
    # A saved stage is still read (cheap, no work lost) ...
    self.assertEqual(stages.cached(done, self.key, lambda: self.fail("no")),
                     [1, 2])
    # ... but no new one starts.
    with self.assertRaisesRegex(preemption.Preempted, "SIGTERM"):
      stages.cached(os.path.join(self.dir, "next.json"), self.key,
                    lambda: self.fail("must not start"))


if __name__ == "__main__":
  absltest.main()
