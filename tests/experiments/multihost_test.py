"""Multi-host on one machine: 2 JAX processes x 4 CPU devices form one mesh.

One workdir goes through every topology change and a crash; its metric rows
must equal those of an uninterrupted single-process run on 8 devices:

  0. Reference: 1 process x 8 devices (in this test process), 16 steps.
  1. Its checkpoint 4 and rows 1-4 start the workdir (a 1-process checkpoint).
  2. 2 processes x 4 devices (mesh data=2, fsdp=2, tensor=2 over both):
     resume from the single-process checkpoint 4 (a run to step 32, whose
     steps up to 16 are the reference's); process 1 is SIGKILLed
     after checkpoint 8 is committed -> process 0 must stop on its own within
     a bounded time (JAX heartbeat) with a clear message.
  3. Both relaunched (jaxlab/experiments/launch_local.py): resume from the last
     complete checkpoint (8), no more than one interval lost; to step 12.
  4. 1 process x 8 devices: resume from the 2-process checkpoint 12, 13-16.

Run with XLA_FLAGS=--xla_force_host_platform_device_count=8 (the suite's
setting); the subprocesses get 4 devices each.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time

from absl.testing import absltest
import jax
import numpy as np

from jaxlab.configs import lm_tiny
from jaxlab.experiments import launch_local
from jaxlab import parallel
from jaxlab.data import pipeline
from jaxlab.parallel import distributed
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# lm_tiny's tiny preset, smaller still; constant LR after warmup so that a
# run's `train.steps` does not change its first steps; 2 KV heads so that
# tensor=2 divides them; an eval row every 4 steps.
OVERRIDES = {
    "train.checkpoint_every": 4, "train.log_every": 1, "train.eval_every": 4,
    "train.eval_batches": 1, "train.tensorboard": False,
    "train.peak_flops": 1e12, "train.keep_checkpoints": 5,
    "data.num_docs": 120, "optim.schedule": "constant",
    "model.num_kv_heads": 2, "mesh.data": 2, "mesh.fsdp": 2,
    "mesh.tensor": 2,
}
HEARTBEAT_S = 10
# Generous bounds that only catch hangs (the machine may be heavily loaded).
RUN_TIMEOUT_S = 300
SURVIVOR_TIMEOUT_S = 120


def config(steps, **extra):
  c = lm_tiny.get_config("tiny")
  c.update_from_flattened_dict(dict(OVERRIDES, **{"train.steps": steps},
                                    **extra))
  return c


def cli_flags(workdir, steps, **extra):
  flat = dict(OVERRIDES, **{"train.steps": steps}, **extra)
  return (["--config=jaxlab/configs/lm_tiny.py:tiny", f"--workdir={workdir}",
           f"--heartbeat_timeout_s={HEARTBEAT_S}"] +
          [f"--config.{k}={v}" for k, v in flat.items()])


def deterministic(rows):
  return [{k: v for k, v in r.items() if not k.startswith("perf/")}
          for r in rows]


def assert_rows_close(test, got, want):
  got, want = deterministic(got), deterministic(want)
  test.assertEqual([r["step"] for r in got], [r["step"] for r in want])
  for g, w in zip(got, want):
    test.assertEqual(sorted(g), sorted(w), f"step {w['step']}")
    for k in w:
      # Cross-process all-reduces (gloo) may sum in another order than the
      # in-process ones: equal up to float32 rounding.
      np.testing.assert_allclose(g[k], w[k], rtol=2e-5, atol=2e-6,
                                 err_msg=f"step {w['step']} {k}")


class MultihostTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if jax.device_count() < 8 or jax.process_count() != 1:
      self.skipTest("needs XLA_FLAGS=--xla_force_host_platform_device_count=8")
    self.tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    # The relaunch reuses the first 2-process run's compiled programs.
    self.env = dict(os.environ,
                    JAX_COMPILATION_CACHE_DIR=f"{self.tmp}/jax_cache",
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")

  def test_two_processes_match_one_survive_a_kill_and_cross_resume(self):
    t0 = time.time()
    phase = lambda name: print(f"[{time.time() - t0:6.1f}s] {name}",
                               flush=True)
    ref = f"{self.tmp}/ref"
    trainer.train(config(16), ref)
    want = metrics_lib.read_metrics(ref)
    self.assertEqual([r["step"] for r in want], list(range(1, 17)))
    self.assertLess(want[-1]["loss"], want[0]["loss"] - 1.0)  # it learns

    phase("reference done")
    # 1. One process, steps 1-4: the reference run's checkpoint 4 and rows.
    wd = f"{self.tmp}/run"
    shutil.copytree(f"{ref}/checkpoints/4", f"{wd}/checkpoints/4")
    with open(f"{wd}/metrics.jsonl", "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in want[:4])

    phase("1 process, steps 1-4 done")
    # 2. Two processes resume from the 1-process checkpoint (slowed steps so
    # that the kill lands mid-run); SIGKILL process 1 after checkpoint 8.
    # `train.steps=32`: the constant LR makes its first steps those of a
    # 16-step run (as the relaunch's 12 below), and 23 steps of 0.5 s after
    # step 9 leave the kill more slack than 7 of 1 s did, with 2.5 s less
    # sleep before it.
    with launch_local.LocalCluster(
        cli_flags(wd, 32, **{"train.debug_step_sleep_s": 0.5}),
        num_processes=2, devices_per_process=4, stream=False,
        env=self.env) as cluster:
      deadline = time.time() + RUN_TIMEOUT_S
      while time.time() < deadline:
        rows = metrics_lib.read_metrics(wd)
        if (os.path.isdir(f"{wd}/checkpoints/8") and rows
            and rows[-1]["step"] >= 9):
          break
        if any(p.poll() is not None for p in cluster.procs):
          self.fail("a process exited early:\n" + cluster.output(0)[-3000:]
                    + cluster.output(1)[-3000:])
        time.sleep(0.2)
      else:
        self.fail("no checkpoint 8 in time:\n" + cluster.output(0)[-3000:])
      last_logged = rows[-1]["step"]
      phase(f"checkpoint 8 written, step {last_logged} logged: kill")
      os.killpg(cluster.procs[1].pid, signal.SIGKILL)
      killed_at = time.time()
      # Complete checkpoints only (orbax commits by renaming a tmp dir).
      committed = max(int(d) for d in os.listdir(f"{wd}/checkpoints")
                      if d.isdigit())
      try:
        rc0 = cluster.procs[0].wait(timeout=SURVIVOR_TIMEOUT_S)
      except subprocess.TimeoutExpired:
        self.fail(f"process 0 still running {SURVIVOR_TIMEOUT_S}s after its "
                  "peer was killed")
      survivor_s = time.time() - killed_at
      cluster.kill_all()  # joins the output threads
      out0 = cluster.output(0)
    print(f"survivor stopped {survivor_s:.1f}s after the kill "
          f"(heartbeat {HEARTBEAT_S}s); last logged step {last_logged}")
    self.assertNotEqual(rc0, 0)
    self.assertIn("Resuming from", out0)
    self.assertIn(f"{wd}/checkpoints/4 (step 4)", out0)
    # JAX's heartbeat verdict, or ours when a collective raised first.
    self.assertRegex(out0, r"another task died[\s\S]*stopped sending "
                     r"heartbeats|error: process 0 of 2 stopped: ")

    phase("survivor exited")
    # 3. Relaunch both: resume from the last checkpoint (8), to step 12.
    with launch_local.LocalCluster(cli_flags(wd, 12), num_processes=2,
                                   devices_per_process=4, stream=False,
                                   env=self.env) as cluster:
      rc = cluster.wait(timeout=RUN_TIMEOUT_S)
      out0 = cluster.output(0)
      self.assertEqual(rc, 0, out0[-3000:] + cluster.output(1)[-3000:])
    self.assertGreaterEqual(committed, 8)
    self.assertIn(f"Resuming from {wd}/checkpoints/{committed} (step "
                  f"{committed})", out0)
    # Steps redone: at most one checkpoint interval.
    self.assertLessEqual(last_logged - committed,
                         OVERRIDES["train.checkpoint_every"])
    self.assertNotIn("Resuming", cluster.output(1))  # only process 0 logs

    phase("relaunched 2 processes done")
    # 4. One process resumes from the 2-process checkpoint 12: steps 13-16.
    trainer.train(config(16), wd)

    phase("1 process, steps 13-16 done")
    assert_rows_close(self, metrics_lib.read_metrics(wd), want)

  def test_process_rows_rebuild_the_single_process_batches(self):
    examples = [{"x": np.array([i], np.int32)} for i in range(10)]
    one = pipeline.batched_dataset(examples, global_batch=4, seed=3)
    # Two processes owning rows {0, 1} and {2, 3} (contiguous, as on a
    # data-major mesh), and three owning interleaved rows: concatenating
    # their local batches in row order gives the single-process batch, over
    # several epochs (10 examples, 4 per batch: 2.5 epochs in 6 steps).
    for owners in ([[0, 1], [2, 3]], [[0, 3], [1], [2]]):
      parts = [iter(pipeline.batched_dataset(examples, global_batch=4,
                                             seed=3, local_rows=rows))
               for rows in owners]
      order = np.argsort(np.concatenate(owners))
      for step in range(6):
        got = np.concatenate([next(p)["x"][:, 0] for p in parts])[order]
        np.testing.assert_array_equal(got, one[step]["x"][:, 0])
    # On this process's 8-device mesh every row is local.
    mesh = parallel.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    sh = parallel.batch_sharding(mesh)
    self.assertEqual(parallel.mesh.process_batch_rows(sh, (8,)),
                     list(range(8)))

  def test_partial_distributed_flags_are_one_clear_error(self):
    with self.assertRaisesRegex(ValueError, "--num_processes missing"):
      distributed.initialize("127.0.0.1:1234", None, 0)
    with self.assertRaisesRegex(ValueError, r"--process_id=2 must be in"):
      distributed.initialize("127.0.0.1:1234", 2, 2)
    with self.assertRaisesRegex(ValueError, "must be HOST:PORT"):
      distributed.initialize("localhost", 2, 0)
    self.assertFalse(distributed.initialize())  # no flags: one process

  def test_launcher_kills_the_others_when_one_fails(self):
    # A stand-in program: process 1 fails, process 0 would run for 10 min.
    pkg = f"{self.tmp}/fake"
    os.makedirs(pkg)
    with open(f"{pkg}/fake_worker.py", "w") as f:
      f.write(textwrap.dedent("""\
          import sys, time
          pid = [a for a in sys.argv if a.startswith("--process_id=")][0]
          print("worker", pid, flush=True)
          if pid.endswith("=1"):
            time.sleep(0.5)
            sys.exit(5)
          time.sleep(600)
          """))
    env = dict(os.environ, PYTHONPATH=pkg)
    cluster = launch_local.LocalCluster(["--x=1"], num_processes=2,
                                        module="fake_worker", env=env,
                                        stream=False)
    with cluster:
      rc = cluster.wait(timeout=60)
    self.assertEqual(rc, 5)
    self.assertEqual(cluster.first_failure, (1, 5))
    self.assertEqual(cluster.procs[0].returncode, -signal.SIGKILL)
    self.assertIn("worker --process_id=0", cluster.output(0))
    self.assertEqual(
        cluster.env["XLA_FLAGS"].split()[-1],
        "--xla_force_host_platform_device_count=4")
    self.assertGreater(cluster.port, 0)
    self.assertNotEqual(launch_local.free_port(), 0)


if __name__ == "__main__":
  absltest.main()
