"""A `gs://` workdir against a real GCS server: the PyPI emulator.

`gcp-storage-emulator` serves the GCS JSON API on localhost; the test
starts it, points both GCS clients a run uses at it (gcsfs, which epath
uses for metrics, results.json, TensorBoard and plots, reads
`STORAGE_EMULATOR_HOST`; tensorstore, which orbax uses for the checkpoint
arrays, reads `TENSORSTORE_GCS_HTTP_URL`), and trains, is preempted, and
resumes with `--workdir=gs://BUCKET/run` unchanged: no part of the run is
patched, so this is the path a TPU VM takes against a real bucket.
"""

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from unittest import mock

from absl.testing import absltest
from etils import epath
from etils.epath import backend as epath_backend

from jaxlab.configs import lm_tiny
from jaxlab.experiments import report
from jaxlab.experiments import train as train_exp
from jaxlab.io import paths
from jaxlab.parallel import preemption
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import trainer

BUCKET = "bkt"
URL = f"gs://{BUCKET}/run"
STARTED = "All services started"

# The emulator as `python -c`: its media downloads get the object's
# `x-goog-generation` header, which GCS sends and the emulator (2026.7)
# omits; tensorstore's OCDBT manifest reads (orbax's checkpoint format)
# parse it ("Malformed StorageGeneration" without it).
SERVER = """
import sys
from gcp_storage_emulator.handlers import objects
_download = objects.download

def download(request, response, storage, *args, **kwargs):
  _download(request, response, storage, *args, **kwargs)
  try:
    obj = storage.get_file_obj(request.params["bucket_name"],
                               request.params["object_id"])
  except Exception:  # a 404 is already set
    return
  response["x-goog-generation"] = str(obj["generation"])
  response["x-goog-metageneration"] = str(obj["metageneration"])

objects.download = download  # before the server module builds its routes
from gcp_storage_emulator import __main__ as cli
cli.main(sys.argv[1:])
"""


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def gcs_emulator():
  """Starts the emulator with `BUCKET`; yields its URL while it serves."""
  port = _free_port()
  proc = subprocess.Popen(
      [sys.executable, "-u", "-c", SERVER, "start",
       "--port", str(port), "--in-memory", "--default-bucket", BUCKET],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines, started = [], threading.Event()

  def drain():  # reads every line: a full pipe would stall the server
    for line in proc.stdout:
      lines.append(line)
      if STARTED in line:
        started.set()
    started.set()  # exited

  reader = threading.Thread(target=drain, daemon=True)
  reader.start()
  try:
    started.wait(timeout=120)
    if proc.poll() is not None or not any(STARTED in l for l in lines):
      raise RuntimeError("the GCS emulator did not start:\n" + "".join(lines))
    yield f"http://localhost:{port}"
  finally:
    proc.terminate()
    proc.wait(timeout=60)
    reader.join(timeout=60)


@contextlib.contextmanager
def clients_on(host: str):
  """Points gcsfs (through epath) and tensorstore (through orbax) at
  `host`, anonymously."""
  gcsfs_core = importlib.import_module("gcsfs.core")
  registry = importlib.import_module("fsspec.registry")._registry  # pylint: disable=protected-access
  cache = epath_backend.fsspec_backend._get_filesystem  # pylint: disable=protected-access
  env = {"STORAGE_EMULATOR_HOST": host, "TENSORSTORE_GCS_HTTP_URL": host,
         "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator"}
  cache.cache_clear()
  # gcsfs' default class first asks a gRPC API the emulator lacks for the
  # bucket's type (hierarchical or zonal); its core class speaks JSON only.
  with mock.patch.dict(os.environ, env), mock.patch.dict(
      registry, {"gs": gcsfs_core.GCSFileSystem,
                 "gcs": gcsfs_core.GCSFileSystem}):
    gcsfs_core.GCSFileSystem.clear_instance_cache()
    try:
      yield
    finally:
      cache.cache_clear()
      gcsfs_core.GCSFileSystem.clear_instance_cache()


def tiny_config(steps):
  c = lm_tiny.get_config("tiny")
  c.data.update(num_docs=120)
  c.train.update(steps=steps, log_every=1, eval_every=0, checkpoint_every=0,
                 async_checkpoint=False, tensorboard=True, peak_flops=1e12)
  return c


class GcsEmulatorTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    for module in ("gcsfs", "gcp_storage_emulator"):
      if importlib.util.find_spec(module) is None:
        self.skipTest(f"{module} is not installed (the test extra has it)")
    self.tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    self.cwd = os.path.join(self.tmp, "cwd")
    os.makedirs(self.cwd)
    old = os.getcwd()
    os.chdir(self.cwd)  # a stray local "./gs:" would land here
    self.addCleanup(os.chdir, old)
    self.addCleanup(preemption.clear)

  def test_train_preempt_and_resume_in_an_emulated_bucket(self):
    write = metrics_lib.MetricsWriter.write

    def preempt_after_step_4(writer, step, *a, **kw):
      if step == 4:  # as SIGTERM / Ctrl-C would: the flag the trainer polls
        preemption.request("SIGINT")
      return write(writer, step, *a, **kw)

    with gcs_emulator() as host, clients_on(host):
      with mock.patch.object(metrics_lib.MetricsWriter, "write",
                             preempt_after_step_4):
        first = train_exp.run(tiny_config(8), URL)
      cut = json.loads(paths.read_text(f"{URL}/results.json"))
      second = train_exp.run(tiny_config(8), URL)  # resumes at step 4
      rows = metrics_lib.read_metrics(URL)
      table = report.render_workdir(URL)
      run = epath.Path(URL)
      names = sorted(p.name for p in run.iterdir())
      steps = sorted(p.name for p in (run / "checkpoints").iterdir())
      events = [p for p in (run / "tensorboard").iterdir()]
      event_sizes = [len(p.read_bytes()) for p in events]

    self.assertTrue(first["preempted"])
    self.assertEqual(first["step"], 4)
    self.assertTrue(cut["preempted"])
    self.assertEqual(cut["loss"], rows[3]["loss"])
    self.assertFalse(second["preempted"])
    self.assertEqual(second["step"], 8)
    self.assertEqual([r["step"] for r in rows], list(range(1, 9)))
    # Everything is in the bucket, nothing in the working directory.
    self.assertEqual(os.listdir(self.cwd), [])
    for name in ("checkpoints", "metrics.jsonl", "results.json", "loss.png",
                 "tensorboard"):
      self.assertIn(name, names)
    self.assertEqual([s for s in steps if s.isdigit()], ["4", "8"])
    self.assertNotEmpty(events)
    self.assertTrue(all(event_sizes), event_sizes)

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
