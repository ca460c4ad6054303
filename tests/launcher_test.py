"""jaxlab.main's user-facing text: --help, one-line errors, the final print.

Fast: in-process calls, and subprocesses only for exit codes (no JAX
computation runs).
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import ml_collections

from jaxlab import _optional
from jaxlab import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LauncherTest(absltest.TestCase):

  def _tmp(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path

  def _launch(self, *args, cwd=None):
    """`python -m jaxlab.main ARGS` in an empty directory (by default)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "jaxlab.main", *args],
                          cwd=cwd or self._tmp(), env=env, capture_output=True,
                          text=True, timeout=300)

  def test_help_with_a_config_lists_presets_args_and_field_defaults(self):
    text = main.config_help("lm_tiny")
    self.assertIn(f"--config=lm_tiny ({main.CONFIG_DIR}/lm_tiny.py)", text)
    self.assertIn("The demo: a tiny byte-level decoder", text)
    self.assertIn("Presets (--config=lm_tiny:P1,P2,...):\n  tiny       the "
                  "test / colab miniature", text)
    self.assertIn("Arguments (--config=lm_tiny:KEY=VALUE): none\n", text)
    self.assertIn("\n  train.steps=300\n", text)
    self.assertIn("\n  optim.lr=0.003\n", text)
    self.assertIn("\n  experiment='train'\n", text)
    tiny = main.config_help("lm_tiny:tiny")
    self.assertIn("Fields (--config.FIELD=VALUE; defaults with tiny; meaning "
                  "below each):", tiny)
    self.assertIn("\n  train.steps=40\n", tiny)
    # key=value arguments with their defaults; several presets.
    text = main.config_help("finetune")
    self.assertIn("init_from=''", text.split("Arguments")[1].split("\n")[0])
    text = main.config_help("pmc")
    presets = text.split("Presets (--config=pmc:P1,P2,...):\n")[1].split(
        "Arguments")[0]
    self.assertContainsSubset(
        {"tiny", "small", "table"},
        {line.split()[0] for line in presets.splitlines()
         if line.startswith("  ") and not line.startswith("   ")})
    # A path works as well as a name.
    self.assertIn("train.steps=40", main.config_help(
        os.path.join(main.CONFIG_DIR, "lm_tiny.py") + ":tiny"))

  def test_help_from_the_command_line(self):
    proc = self._launch("--config=generate:tiny", "--help")
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertIn("Presets (--config=generate:P1,P2,...):\n  tiny ",
                  proc.stdout)
    self.assertIn("\n  max_new_tokens=24\n", proc.stdout)
    self.assertIn("\n  init_from=''\n      The one checkpoint field",
                  proc.stdout)
    proc = self._launch("--helpshort")
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertIn("--workdir", proc.stdout)
    self.assertIn("Packaged configs (--config=NAME[:preset]", proc.stdout)
    for name in ("lm_tiny", "generate", "finetune", "rl"):
      self.assertIn(name, proc.stdout.split("Packaged configs")[1])
    proc = self._launch("--config=nope", "--help")
    self.assertEqual(proc.returncode, 2)
    self.assertTrue(proc.stderr.startswith(
        "error: --config=nope: no config file 'nope' and no packaged config "
        "of that name; packaged configs: calibration, "), proc.stderr)

  def test_missing_or_broken_config_file_is_one_line(self):
    tmp = self._tmp()
    raising = os.path.join(tmp, "raising.py")
    with open(raising, "w") as f:
      f.write("def get_config():\n  open('/nonexistent/jaxlab/data.txt')\n")
    broken = os.path.join(tmp, "broken.py")
    with open(broken, "w") as f:
      f.write("def get_config(:\n")
    cases = [
        # Relative to an empty directory: not there (and not a name).
        ("jaxlab/configs/lm_tiny.py", "no config file "
         "'jaxlab/configs/lm_tiny.py'; packaged configs: "),
        ("nope:tiny", "no packaged config of that name"),
        (raising, "/nonexistent/jaxlab/data.txt"),
        (broken, f"{broken}:1: SyntaxError"),
    ]
    for value, needle in cases:
      proc = self._launch(f"--config={value}", f"--workdir={tmp}/w")
      self.assertEqual(proc.returncode, 2, (value, proc.stderr))
      self.assertNotIn("Traceback", proc.stderr)
      self.assertLen(proc.stderr.strip().splitlines(), 1, proc.stderr)
      self.assertIn(needle, proc.stderr)

  def test_unknown_experiment_lists_only_runnable_experiments(self):
    config = ml_collections.ConfigDict({"experiment": "nope"})
    with self.assertRaises(ValueError) as cm:
      main.run_experiment(config, self._tmp())
    msg = str(cm.exception)
    self.assertStartsWith(msg, "config.experiment='nope' is not an experiment")
    valid = msg.split("valid: ")[1].split(", ")
    self.assertContainsSubset({"train", "generate", "rl", "pmc"}, set(valid))
    for module in ("launch_local", "report", "results", "compile", "bench"):
      self.assertNotIn(module, valid)

  def test_final_print_lists_only_files_that_exist(self):
    work = self._tmp()
    self.assertEqual(main.outputs_message(work, {}), f"Workdir: {work}")
    with open(os.path.join(work, "results.json"), "w") as f:
      json.dump({}, f)
    open(os.path.join(work, "samples.jsonl"), "w").close()
    # What generate leaves: no metrics, no tensorboard, no checkpoints.
    self.assertEqual(
        main.outputs_message(work, {"checkpoint_dir": None}),
        f"Results: {work}/results.json\nSamples: {work}/samples.jsonl")
    open(os.path.join(work, "metrics.jsonl"), "w").close()
    self.assertIn(f"Metrics: {work}/metrics.jsonl\n",
                  main.outputs_message(work, {}) + "\n")
    os.makedirs(os.path.join(work, "tensorboard"))
    os.makedirs(os.path.join(work, "checkpoints"))
    msg = main.outputs_message(
        work, {"checkpoint_dir": os.path.join(work, "checkpoints")})
    self.assertIn(f"Metrics: {work}/metrics.jsonl (TensorBoard: "
                  f"{work}/tensorboard)", msg)
    self.assertTrue(msg.endswith(f"Checkpoints: {work}/checkpoints"), msg)
    self.assertNotIn("Checkpoints", main.outputs_message(
        work, {"checkpoint_dir": os.path.join(work, "gone")}))

  def test_a_missing_extra_is_one_line_naming_it(self):
    def run(*unused_args, **unused_kw):
      _optional.require("jaxlab_no_such_module", "video",
                        user="jaxlab.data.synthetic.video_reason.io")

    err = io.StringIO()
    with mock.patch.object(main.app, "run", run), \
        mock.patch.object(sys, "argv", ["jaxlab"]), \
        contextlib.redirect_stderr(err), \
        self.assertRaises(SystemExit) as cm:
      main.entry()
    self.assertEqual(cm.exception.code, 2)
    self.assertEqual(err.getvalue(),
                     "error: jaxlab.data.synthetic.video_reason.io needs "
                     "jaxlab_no_such_module: pip install 'jaxlab[video]'\n")


if __name__ == "__main__":
  absltest.main()
