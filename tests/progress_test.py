"""jaxlab.progress: stage, step / total, ETA and the heartbeat."""

import shutil
import tempfile
import threading

from absl.testing import absltest
import numpy as np

from jaxlab import progress
from jaxlab.io import stages
from jaxlab.testing import tiny_models
from jaxlab.train import runner as runner_lib


class FakeClock:

  def __init__(self):
    self.t = 100.0

  def __call__(self):
    return self.t


def reporter(**kw):
  lines, clock = [], FakeClock()
  rep = progress.Reporter("exp", clock=clock, write=lines.append, **kw)
  return rep, lines, clock


class ReporterTest(absltest.TestCase):

  def test_duration_format(self):
    self.assertEqual(progress.fmt_duration(14.4), "14s")
    self.assertEqual(progress.fmt_duration(62), "1m02s")
    self.assertEqual(progress.fmt_duration(2 * 3600 + 5 * 60 + 59), "2h05m")

  def test_updates_print_at_most_every_interval_with_eta(self):
    rep, lines, clock = reporter(every=10, heartbeat=20)
    rep.stage("GA seed 0", total=120)
    self.assertEqual(lines, ["[exp      0s] GA seed 0 (120 steps)"])
    for step in range(1, 41):  # 0.25 s a step: a line once 10 s have passed
      clock.t += 0.25
      rep.update(step, loss=3.0 - step / 100)
    self.assertLen(lines, 2)
    # 10 s for 40 steps: 0.25 s a step, 80 steps left -> 20 s.
    self.assertEqual(lines[1],
                     "[exp     10s] GA seed 0: step 40/120  loss 2.6000  "
                     "ETA 20s")

  def test_next_loop_in_a_stage_is_timed_from_its_start(self):
    rep, lines, clock = reporter(every=1000, heartbeat=1000)
    rep.stage("sweep")
    for step in range(1, 11):  # first sub-training: 1 s a step
      clock.t += 1.0
      rep.update(step, 10)
    clock.t += 50.0  # an eval between the two
    for step in range(1, 5):  # second one, 30 steps at 2 s a step
      clock.t += 2.0
      rep.update(step, 30)
    # Measured from the restart at step 1 (3 steps in 6 s): 26 left -> 52 s.
    self.assertEqual(rep.eta(), 52.0)
    self.assertIn("step 4/30", rep.status())

  def test_heartbeat_prints_status_only_after_silence(self):
    rep, lines, clock = reporter(every=10, heartbeat=20)
    rep.stage("decode LongBench")
    clock.t += 19.0
    self.assertFalse(rep.beat())
    clock.t += 1.0
    self.assertTrue(rep.beat())
    self.assertEqual(lines[-1],
                     "[exp     20s] decode LongBench  20s in stage")
    self.assertFalse(rep.beat())  # it just printed

  def test_heartbeat_thread_prints_while_the_main_thread_is_busy(self):
    beat = threading.Event()
    lines = []

    def write(line):
      lines.append(line)
      if "step 3/9" in line:
        beat.set()

    rep = progress.Reporter("exp", every=1e9, heartbeat=0.01, write=write)
    rep.stage("long stage", total=9)
    rep.update(3)  # silent: `every` is huge
    rep.start_heartbeat()
    try:
      self.assertTrue(beat.wait(timeout=120))
    finally:
      rep.stop()
    self.assertIn("long stage: step 3/9", lines[-1])


class WiringTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.lines = []
    self.rep = progress.start("wired", every=0.0, heartbeat=0,
                              write=self.lines.append)
    self.addCleanup(progress.stop)

  def test_step_runner_reports_each_update_with_its_total(self):
    model = tiny_models.tiny_decoder(seed=0)
    opt = runner_lib.optim_config(lr=1e-3)
    run = runner_lib.StepRunner(model, loss="lm", loss_config=None,
                                optim=opt, steps=3)
    x = np.ones((2, 8), np.int32)
    batch = {"inputs": x, "targets": x, "loss_mask": np.ones_like(x, bool)}
    losses = [run.step(batch, i)["loss"] for i in range(3)]
    steps = [line for line in self.lines if "step " in line]
    self.assertLen(steps, 3)
    self.assertIn("step 3/3", steps[-1])
    self.assertIn(f"loss {losses[-1]:.4f}", steps[-1])

  def test_run_seeds_and_stages_announce_themselves(self):
    work = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, work, ignore_errors=True)
    stages.run_seeds([3, 5], lambda s: {"x": s}, workdir=work)
    said = [line.split("] ", 1)[1] for line in self.lines]
    self.assertEqual(said, ["seed 3 (1/2)", "seeds/seed_3.json",
                            "seed 5 (2/2)", "seeds/seed_5.json"])


if __name__ == "__main__":
  absltest.main()
