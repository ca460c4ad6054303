"""Launcher end to end: SIGTERM / Ctrl-C + resume == uninterrupted, bad inputs,
demo."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from unittest import mock

from absl.testing import absltest

from jaxlab.configs import generate as generate_cfg
from jaxlab.configs import lm_tiny
from jaxlab.experiments import generate as generate_exp
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib
from jaxlab.experiments import train as train_exp
from jaxlab.testing import notebooks
from jaxlab.train import metrics as metrics_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Small and fast: 1-layer dim-32 model, 16 steps, checkpoints every 5.
RUN_FLAGS = ["--config=jaxlab/configs/lm_tiny.py:tiny", "--config.train.steps=16",
             "--config.train.checkpoint_every=5", "--config.train.log_every=1",
             "--config.train.eval_every=0", "--config.train.eval_batches=1",
             "--config.data.num_docs=120", "--config.train.tensorboard=False",
             "--config.train.peak_flops=1e12"]


def _env():
  env = dict(os.environ)
  # 2 devices; the suite's compile-time flags (tests/conftest.py) kept.
  env.update(XLA_FLAGS=notebooks.kernel_xla_flags(
      os.environ.get("XLA_FLAGS", ""), 2),
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
             PYTHONPATH=ROOT)
  return env


def launch(workdir, *extra, wait=True):
  cmd = [sys.executable, "-m", "jaxlab.main", *RUN_FLAGS,
         f"--workdir={workdir}", *extra]
  proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
  if not wait:
    return proc
  out, err = proc.communicate(timeout=600)
  return proc.returncode, out, err


# One interpreter for many launcher runs: it imports jaxlab.main (and the
# modules its main() imports on every run) once, then forks a child per argv
# (before any JAX computation, so no backend threads are forked); each child
# runs the `python -m jaxlab.main` entry with that argv, its stdout / stderr
# in files and its exit status as the process's, what a user's separate
# launch would give, without the imports per case. No loss module beyond
# the trainer's is loaded before the fork (the unknown-loss case lists those
# the launcher imports itself).
_FORK_DRIVER = textwrap.dedent("""\
    import json, os, sys, traceback
    from jaxlab import main
    from jaxlab.parallel import distributed
    from jaxlab.train import trainer
    assert "jaxlab.objectives.unlearning" not in sys.modules
    outdir, runs = sys.argv[1], json.loads(sys.argv[2])
    codes = []
    for i, argv in enumerate(runs):
      sys.stdout.flush(); sys.stderr.flush()
      pid = os.fork()
      if pid == 0:
        for fd, ext in ((1, "out"), (2, "err")):
          f = os.open(f"{outdir}/{i}.{ext}", os.O_WRONLY | os.O_CREAT, 0o644)
          os.dup2(f, fd)
          os.close(f)
        sys.argv = [main.__file__, *argv]
        code = 0
        try:
          main._entry()
        except SystemExit as e:  # as the interpreter maps it at exit
          if e.code is None:
            code = 0
          elif isinstance(e.code, int):
            code = e.code
          else:
            print(e.code, file=sys.stderr)
            code = 1
        except BaseException:  # an uncaught error: traceback, status 1
          traceback.print_exc()
          code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
      codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print(json.dumps(codes))
    """)


def launch_many(runs):
  """[(returncode, stdout, stderr)] of `python -m jaxlab.main *argv` for each
  argv in `runs` (RUN_FLAGS not added), in one interpreter (_FORK_DRIVER)."""
  outdir = tempfile.mkdtemp()
  try:
    proc = subprocess.run(
        [sys.executable, "-c", _FORK_DRIVER, outdir, json.dumps(runs)],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    got = []
    for i, code in enumerate(codes):
      with open(f"{outdir}/{i}.out") as f, open(f"{outdir}/{i}.err") as g:
        got.append((code, f.read(), g.read()))
    return got
  finally:
    shutil.rmtree(outdir, ignore_errors=True)


def assert_provenance(test, res, experiment, config):
  """results.json carries what the README promises: command, commit, ..."""
  test.assertEqual(res["schema"], results_lib.SCHEMA_VERSION)
  test.assertEqual(res["experiment"], experiment)
  test.assertIsInstance(res["command"], str)
  test.assertTrue(res["command"])
  test.assertEqual(set(res["git"]), {"commit", "dirty"})
  if shutil.which("git") and os.path.isdir(os.path.join(ROOT, ".git")):
    test.assertRegex(res["git"]["commit"], r"^[0-9a-f]{40}$")
  for pkg in ("python", "jax", "flax", "numpy"):
    test.assertIn(pkg, res["packages"])
  test.assertIn("jax_backend", res["machine"])
  test.assertEqual(res["config"], results_lib.to_jsonable(config.to_dict()))
  test.assertIsNotNone(res["wall_time_s"])


def deterministic(rows):
  return [{k: v for k, v in r.items() if not k.startswith("perf/")}
          for r in rows]


class MainTest(absltest.TestCase):

  def _tmp(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path

  def test_preemption_then_resume_equals_uninterrupted(self):
    """SIGTERM to the process, and SIGINT (a terminal's Ctrl-C) to its
    process group with periodic checkpoints off: each saves a checkpoint at
    the step reached, writes results.json with `"preempted": true`, exits 0;
    the relaunch resumes there and ends as an uninterrupted run does.

    The uninterrupted run and the two interrupted ones are separate
    processes in separate workdirs that run at the same time (as do the two
    relaunches): each is signalled when its own metrics show step 7, so
    their overlap changes no step, only the test's wall time (their
    per-step sleeps and interpreter start-ups overlap)."""
    tmp = self._tmp()
    cases = [("SIGTERM", signal.SIGTERM, []),
             ("SIGINT", signal.SIGINT, ["--config.train.checkpoint_every=0"])]
    full_proc = launch(f"{tmp}/full", wait=False)
    procs = {}
    for name, _, extra in cases:
      # Slow steps down so the signal lands mid-run, after step 7 is
      # logged. A session of its own: the child leads its process group,
      # as a job started from a terminal does.
      procs[name] = launch(f"{tmp}/cut_{name}",
                           "--config.train.debug_step_sleep_s=0.5", *extra,
                           wait=False)
    def send(name, sig):
      if procs[name].poll() is not None:  # exited early: asserted below
        return
      if sig == signal.SIGINT:
        os.killpg(procs[name].pid, sig)  # what Ctrl-C does: the whole group
      else:
        procs[name].send_signal(sig)

    waiting = {name: sig for name, sig, _ in cases}
    deadline = time.time() + 300
    while waiting and time.time() < deadline:
      for name, sig in list(waiting.items()):
        rows = metrics_lib.read_metrics(f"{tmp}/cut_{name}")
        if (rows and rows[-1]["step"] >= 7) or procs[name].poll() is not None:
          send(name, waiting.pop(name))
      time.sleep(0.1)
    for name, sig in waiting.items():  # past the deadline: signal anyway
      send(name, sig)
    outs = {name: procs[name].communicate(timeout=300) for name in procs}
    out, err = full_proc.communicate(timeout=300)
    self.assertEqual(full_proc.returncode, 0, err[-3000:])
    full = metrics_lib.read_metrics(f"{tmp}/full")
    with open(f"{tmp}/full/results.json") as f:
      want = json.load(f)
    self.assertFalse(want["preempted"])
    # Recorded by config name, so the command replays on any checkout.
    self.assertIn(" --config=lm_tiny:tiny ", want["command"])

    cut_steps = {}
    for name, sig, extra in cases:
      with self.subTest(name):
        wd = f"{tmp}/cut_{name}"
        proc = procs[name]
        out, err = outs[name]
        self.assertEqual(proc.returncode, 0, err[-3000:])
        self.assertNotIn("Traceback", err)
        self.assertNotIn("KeyboardInterrupt", err)
        self.assertIn(f"{name}: saved checkpoint at step", out)
        cut_step = int(out.split("saved checkpoint at step ")[1].split(";")[0])
        self.assertBetween(cut_step, 7, 15)  # really interrupted part-way
        self.assertNotEqual(cut_step % 5, 0)  # a preemption save
        self.assertIn(f"Preempted ({name}): saved at step {cut_step} in "
                      f"{wd}/checkpoints; resume with: python -m jaxlab.main "
                      "--config=lm_tiny:tiny ", out)
        if sig == signal.SIGINT:  # periodic saves off: only the signal's
          self.assertEqual(os.listdir(f"{wd}/checkpoints"), [str(cut_step)])
        with open(f"{wd}/results.json") as f:
          cut_res = json.load(f)
        self.assertTrue(cut_res["preempted"])
        self.assertEqual(cut_res["step"], cut_step)
        self.assertEqual(cut_res["checkpoint_step"], cut_step)
        self.assertEqual(cut_res["loss"], full[cut_step - 1]["loss"])
        cut_steps[name] = cut_step

    # The relaunches (of the cases that were cut as asserted), together.
    procs = {name: launch(f"{tmp}/cut_{name}", *extra, wait=False)
             for name, _, extra in cases if name in cut_steps}
    outs = {name: procs[name].communicate(timeout=300) for name in procs}
    for name, _, _ in cases:
      if name not in cut_steps:
        continue
      with self.subTest(f"{name} resumed"):
        wd = f"{tmp}/cut_{name}"
        out, err = outs[name]
        self.assertEqual(procs[name].returncode, 0, err[-3000:])
        self.assertIn(f"Resuming from {wd}/checkpoints/{cut_steps[name]}",
                      out)
        cut = metrics_lib.read_metrics(wd)
        self.assertEqual([r["step"] for r in cut], list(range(1, 17)))
        self.assertEqual(deterministic(cut), deterministic(full))
        with open(f"{wd}/results.json") as f:
          got = json.load(f)
        self.assertFalse(got["preempted"])
        self.assertAlmostEqual(got["loss"], want["loss"], delta=1e-6)

  def test_verify_replays_a_path_form_command(self):
    """`report --verify` on a result recorded before the configs moved into
    the package (`python -m experiments.main --config=configs/X.py`)."""
    tmp = self._tmp()
    # RUN_FLAGS' run (periodic checkpoints aside): the same programs, so
    # both runs read them from the persistent compilation cache that
    # test_preemption_then_resume_equals_uninterrupted's runs wrote.
    flags = [f for f in RUN_FLAGS[1:] if "checkpoint_every" not in f]
    proc = subprocess.run(
        [sys.executable, "-m", "jaxlab.main", "--config=lm_tiny:tiny", *flags,
         f"--workdir={tmp}/run"], cwd=ROOT, env=_env(), capture_output=True,
        text=True, timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    with open(f"{tmp}/run/results.json") as f:
      res = json.load(f)
    self.assertTrue(res["command"].startswith(
        "python -m jaxlab.main --config=lm_tiny:tiny "), res["command"])
    # As committed by an older checkout: old launcher alias, config path.
    res["command"] = ("python -m experiments.main "
                      "--config=configs/lm_tiny.py:tiny "
                      f"--workdir=workdirs/old {' '.join(flags)}")
    res["tables"] = [{"id": "final", "title": "Final loss", "columns": [
        {"key": "loss", "label": "loss", "decimals": 4, "scale": 1.0}],
                      "rows": [{"label": "lm_tiny", "cells": {"loss": {
                          "seeds": [0], "values": [res["loss"]]}}}]}]
    repo = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(repo, "docs", "results"))
    with open(os.path.join(repo, "docs", "results", "old.json"), "w") as f:
      json.dump(res, f)

    run = subprocess.run

    def rerun_adding_the_table(argv, **kw):
      # The rerun's train results have no table: add the same one.
      done = run(argv, **kw)
      wd = [a for a in argv if a.startswith("--workdir=")][0][10:]
      with open(f"{wd}/results.json") as f:
        new = json.load(f)
      new["tables"] = [dict(res["tables"][0], rows=[{
          "label": "lm_tiny", "cells": {"loss": {
              "seeds": [0], "values": [new["loss"]]}}}])]
      with open(f"{wd}/results.json", "w") as f:
        json.dump(new, f)
      return done

    out = io.StringIO()
    with mock.patch.dict(os.environ, _env()), \
        mock.patch.object(report.subprocess, "run", rerun_adding_the_table):
      rc = report.verify("old", repo=repo, out=out)
    self.assertEqual(rc, 0, out.getvalue())
    text = out.getvalue()
    self.assertIn(f"$ {sys.executable} -m jaxlab.main --config=lm_tiny:tiny "
                  "--workdir=", text)
    self.assertIn("ok      +0.00 SE  final / lm_tiny / loss", text)
    self.assertIn("0 of 1 cells moved", text)

  def test_bad_inputs_give_one_clear_error(self):
    """Each bad input: a non-zero exit and one clear message on stderr, no
    traceback. The cases run through the launcher's entry in forked
    children of one interpreter (launch_many); one of them also as its own
    `python -m jaxlab.main` process (the CLI's exit status and line)."""
    tmp = self._tmp()
    locked = os.path.join(tmp, "ro")
    os.makedirs(locked)
    os.chmod(locked, 0o500)
    self.addCleanup(os.chmod, locked, 0o700)
    if os.access(locked, os.W_OK):  # running as root: permissions ignored
      locked = "/proc/jaxlab_no_such_dir"
    a_file = os.path.join(tmp, "a_file")
    with open(a_file, "w") as f:
      f.write("x")
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
      f.write('{"text": "fine"}\n{"text": "fine too"}\n{"text": oops}\n')

    flags = lambda wd, *extra: [*RUN_FLAGS, f"--workdir={wd}", *extra]  # pylint: disable=g-long-lambda
    batch_zero = ("--config.train.batch_size=0",
                  "error: train.batch_size=0 must be at least 1 (examples "
                  "per optimizer step)")
    runs = {
        "stepz": flags(f"{tmp}/w", "--config.train.stepz=3"),
        "steps": flags(f"{tmp}/w", "--config.train.steps=abc"),
        "loss": flags(f"{tmp}/l", "--config.loss.name=nope"),
        "batch": flags(f"{tmp}/b", batch_zero[0]),
        "accum": flags(f"{tmp}/b", "--config.optim.grad_accum=0"),
        "preset": ["--config=jaxlab/configs/lm_tiny.py:tinny",
                   f"--workdir={tmp}/p"],
        "locked": flags(f"{locked}/run"),
        "file": flags(a_file),
        "jsonl": flags(f"{tmp}/j", "--config.data.source=jsonl",
                       f"--config.data.path={bad}"),
    }
    # The one case also run as its own `python -m jaxlab.main` process
    # (below), started now so that it overlaps the forked runs.
    own = launch(f"{tmp}/b_own", batch_zero[0], wait=False)
    got = dict(zip(runs, launch_many(list(runs.values()))))
    for name, (rc, _, err) in got.items():
      with self.subTest(name):
        self.assertNotEqual(rc, 0, err)
        self.assertNotIn("Traceback", err)

    for name, needle in (("stepz", "stepz"), ("steps", "train.steps")):
      self.assertIn(needle, got[name][2])

    # An unknown loss name: one line listing every registered loss, including
    # those of modules no experiment imported (objectives.unlearning).
    err = got["loss"][2]
    self.assertIn("config.loss.name='nope' is not a registered loss; valid: ",
                  err)
    self.assertIn("unlearn_pmc", err)
    self.assertLen(err.strip().splitlines(), 1)

    # A batch of no examples: one line naming the field (exit 2).
    for name, msg in [
        ("batch", batch_zero[1]),
        ("accum", "error: optim.grad_accum=0 must be at least 1")]:
      rc, _, err = got[name]
      self.assertEqual(rc, 2, err)
      self.assertEqual(err.strip(), msg)
    # The same through its own interpreter: the CLI's status and one line.
    _, err = own.communicate(timeout=600)
    rc = own.returncode
    self.assertEqual(rc, 2, err)
    self.assertEqual(err.strip(), batch_zero[1])

    # An unknown preset of the config file: one line naming the valid ones.
    self.assertEqual(
        got["preset"][2].strip(),
        "error: flag --config=jaxlab/configs/lm_tiny.py:tinny: unknown preset "
        "'tinny' (in config arg 'tinny'); valid presets: tiny; valid "
        "key=value args: none")

    self.assertIn("is not writable", got["locked"][2])
    self.assertIn("is a file, not a directory", got["file"][2])
    self.assertIn(f"{bad}:3: invalid JSON", got["jsonl"][2])

  def test_loss_found_without_importing_its_module(self):
    # A fresh interpreter: the launcher imports the module registering
    # `unlearn_pmc` itself; an unknown name lists every registered loss.
    code = (
        "import sys\n"
        "from ml_collections import ConfigDict\n"
        "from jaxlab import main\n"
        "assert 'jaxlab.objectives.unlearning' not in sys.modules\n"
        "main.check_loss(ConfigDict({'loss': {'name': 'unlearn_pmc'}}))\n"
        "from jaxlab.train import losses\n"
        "print('found', losses.get('unlearn_pmc').__module__)\n"
        "try:\n"
        "  main.check_loss(ConfigDict({'loss': {'name': 'nope'}}))\n"
        "except ValueError as e:\n"
        "  print('error', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    lines = proc.stdout.strip().splitlines()
    self.assertEqual(lines[0], "found jaxlab.objectives.unlearning")
    self.assertTrue(lines[1].startswith(
        "error config.loss.name='nope' is not a registered loss; valid: "),
                    lines[1])
    for name in ("lm", "rerank", "unlearn_pmc", "unlearn_npo"):
      self.assertIn(name, lines[1].split("valid: ")[1].split(", "))

  def test_lm_tiny_loss_goes_down(self):
    tmp = self._tmp()
    cfg = lm_tiny.get_config("tiny")
    cfg.train.update(tensorboard=False, peak_flops=1e12)
    out = train_exp.run(cfg, tmp)
    rows = metrics_lib.read_metrics(tmp)
    losses = [r["loss"] for r in rows if "loss" in r]
    self.assertLen(losses, cfg.train.steps // cfg.train.log_every)
    # Uniform over 259 bytes is ln(259) = 5.56 nats; the model must do far
    # better by the end than at its first logged step.
    self.assertLess(out["loss"], losses[0] - 0.5)
    self.assertLess(out["eval/loss"], 3.0)
    with open(os.path.join(tmp, "results.json")) as f:
      res = json.load(f)
    assert_provenance(self, res, "train", cfg)
    self.assertAlmostEqual(res["loss"], out["loss"], places=6)
    self.assertEqual(res["step"], cfg.train.steps)
    self.assertTrue(os.path.exists(os.path.join(tmp, "loss.png")))
    self.assertEqual(sorted(os.listdir(os.path.join(tmp, "checkpoints"))),
                     ["20", "40"])

  def test_generate_results_carry_provenance(self):
    tmp = self._tmp()
    cfg = generate_cfg.get_config("tiny")
    cfg.max_new_tokens = 4
    out = generate_exp.run(cfg, tmp)
    with open(os.path.join(tmp, "results.json")) as f:
      res = json.load(f)
    assert_provenance(self, res, "generate", cfg)
    self.assertEqual(res["num_samples"], out["num_samples"])
    self.assertEqual(res["checkpoint"], "random")


if __name__ == "__main__":
  absltest.main()
