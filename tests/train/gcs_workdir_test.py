"""A `gs://BUCKET/run` workdir: every write goes through epath, none local.

GCS is faked at fsspec's boundary: the `gs` protocol is served by a local
filesystem rooted in a temporary directory (what epath's fsspec backend
reaches through `gcsfs` on a real bucket). Orbax writes arrays with
tensorstore's own GCS driver, which the fake cannot serve, so the training
test maps the checkpoint URL to the fake bucket's directory *after*
checking that the trainer handed the URL over unchanged; a separate test
checks that the `Checkpointer` gives orbax that URL as an epath.
"""

import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
from etils import epath
from etils.epath import backend as epath_backend
import fsspec
from fsspec.implementations import local as fsspec_local

from jaxlab.configs import lm_tiny
from jaxlab.experiments import report
from jaxlab.experiments import train as train_exp
from jaxlab.io import paths
from jaxlab.parallel import preemption
from jaxlab.train import checkpoint as ckpt_lib
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
URL = "gs://bkt/run"


@contextlib.contextmanager
def fake_gcs(root: str):
  """Serves `gs://X` from `root/X` through fsspec (and so through epath)."""

  class FakeGCS(fsspec_local.LocalFileSystem):
    protocol = ("gs", "gcs")
    cachable = False

    @classmethod
    def _strip_protocol(cls, path):
      path = fsspec.utils.stringify_path(path)
      for p in ("gs://", "gcs://"):
        if path.startswith(p):
          return os.path.join(root, path[len(p):]).rstrip("/")
      return super()._strip_protocol(path)

  registry = importlib.import_module("fsspec.registry")._registry  # pylint: disable=protected-access
  cache = epath_backend.fsspec_backend._get_filesystem  # pylint: disable=protected-access
  cache.cache_clear()
  with mock.patch.dict(registry, {"gs": FakeGCS, "gcs": FakeGCS}), \
      mock.patch.object(paths, "_available", lambda m: True):
    try:
      yield
    finally:
      cache.cache_clear()


def tiny_config(steps):
  c = lm_tiny.get_config("tiny")
  c.data.update(num_docs=120)
  c.train.update(steps=steps, log_every=1, eval_every=0, checkpoint_every=0,
                 async_checkpoint=False, tensorboard=True, peak_flops=1e12)
  return c


class GcsWorkdirTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    self.bucket = os.path.join(self.tmp, "bucket")  # the fake GCS
    self.cwd = os.path.join(self.tmp, "cwd")
    os.makedirs(self.bucket)
    os.makedirs(self.cwd)
    old = os.getcwd()
    os.chdir(self.cwd)  # a stray local "./gs:" would land here
    self.addCleanup(os.chdir, old)

  def test_paths_keep_urls_and_absolutize_local(self):
    self.assertEqual(paths.resolve("gs://b/run/"), "gs://b/run")
    self.assertEqual(paths.join("gs://b/run", "checkpoints"),
                     "gs://b/run/checkpoints")
    self.assertEqual(paths.resolve("rel"), os.path.join(self.cwd, "rel"))
    self.assertEqual(paths.resolve("file:///x/y"), "/x/y")

  def test_missing_filesystem_package_is_one_clear_error(self):
    with mock.patch.object(paths, "_available", lambda m: False):
      with self.assertRaisesRegex(
          ValueError, r"--workdir=gs://b/run: gs:// needs one of gcsfs, "
          r"tensorflow, none is installed; pip install gcsfs"):
        trainer.check_workdir("gs://b/run")
    with self.assertRaisesRegex(ValueError, "unsupported URL scheme 'ftp'"):
      trainer.check_workdir("ftp://b/run")
    self.assertEqual(os.listdir(self.cwd), [])

  def test_launcher_without_gcsfs_fails_before_anything(self):
    if any(paths._available(m) for m in ("gcsfs", "tensorflow")):  # pylint: disable=protected-access
      self.skipTest("gcsfs or tensorflow installed")
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "jaxlab.main", "--config=lm_tiny:tiny",
         "--workdir=gs://bkt/run1"], cwd=self.cwd, env=env,
        capture_output=True, text=True, timeout=300)
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    self.assertEqual(
        proc.stderr.strip(),
        "error: --workdir=gs://bkt/run1: gs:// needs one of gcsfs, "
        "tensorflow, none is installed; pip install gcsfs")
    self.assertEqual(os.listdir(self.cwd), [])  # no ./gs:/bkt/run1

  def test_checkpointer_gives_orbax_the_url_as_an_epath(self):
    with mock.patch.object(ckpt_lib.ocp, "CheckpointManager") as mngr:
      ckpt = ckpt_lib.Checkpointer(f"{URL}/checkpoints")
    (directory,), _ = mngr.call_args
    self.assertIsInstance(directory, epath.Path)
    self.assertEqual(os.fspath(directory), f"{URL}/checkpoints")
    self.assertEqual(ckpt.directory, f"{URL}/checkpoints")
    self.assertTrue(ckpt._data_file(3).startswith(f"{URL}/checkpoints/3/"))  # pylint: disable=protected-access
    self.assertEqual(os.listdir(self.cwd), [])

  def test_train_and_resume_in_a_bucket(self):
    self.addCleanup(preemption.clear)
    given = []
    bucket = self.bucket

    class OnFakeBucket(ckpt_lib.Checkpointer):
      """Records the directory the trainer asks for; orbax gets the fake
      bucket's local directory (tensorstore has its own GCS client)."""

      def __init__(self, directory, **kw):
        given.append(directory)
        super().__init__(directory.replace("gs://", bucket + "/"), **kw)

    write = metrics_lib.MetricsWriter.write

    def preempt_after_step_4(writer, step, *a, **kw):
      # As SIGTERM / Ctrl-C would: the flag the trainer polls.
      if step == 4:
        preemption.request("SIGTERM")
      return write(writer, step, *a, **kw)

    with fake_gcs(bucket), \
        mock.patch.object(trainer.ckpt_lib, "Checkpointer", OnFakeBucket):
      with mock.patch.object(metrics_lib.MetricsWriter, "write",
                             preempt_after_step_4):
        first = train_exp.run(tiny_config(8), URL)
      cut = json.loads(paths.read_text(f"{URL}/results.json"))
      second = train_exp.run(tiny_config(8), URL)  # resumes at step 4
      rows = metrics_lib.read_metrics(URL)
      table = report.render_workdir(URL)
    self.assertTrue(first["preempted"])
    self.assertEqual(first["step"], 4)
    self.assertTrue(cut["preempted"])
    self.assertEqual(cut["loss"], rows[3]["loss"])
    self.assertFalse(second["preempted"])
    self.assertEqual(given, [f"{URL}/checkpoints"] * 2)
    self.assertEqual(second["step"], 8)
    self.assertEqual([r["step"] for r in rows], list(range(1, 9)))

    # Everything is in the bucket, nothing in the working directory.
    self.assertEqual(os.listdir(self.cwd), [])
    run = os.path.join(bucket, "bkt", "run")
    for name in ("metrics.jsonl", "results.json", "loss.png"):
      self.assertTrue(os.path.isfile(os.path.join(run, name)), name)
    self.assertEqual(sorted(os.listdir(os.path.join(run, "checkpoints"))),
                     ["4", "8"])
    events = os.listdir(os.path.join(run, "tensorboard"))
    self.assertNotEmpty(events)
    self.assertTrue(all(e.startswith("events.out.tfevents") and
                        os.path.getsize(os.path.join(run, "tensorboard", e))
                        for e in events))

    # The resumed run's rows equal an uninterrupted local run's.
    local = os.path.join(self.tmp, "local")
    trainer.train(tiny_config(8), local)
    want = metrics_lib.read_metrics(local)
    deterministic = lambda rs: [{k: v for k, v in r.items()  # pylint: disable=g-long-lambda
                                 if not k.startswith("perf/")} for r in rs]
    self.assertEqual(deterministic(rows), deterministic(want))
    self.assertIn(f"# train: {URL}/results.json", table)
    self.assertIn(f"| loss | {second['loss']:.4f} |", table)


if __name__ == "__main__":
  absltest.main()
