"""`io.pretrained.load(spec, *, mesh, rules, dtype)`: every checkpoint kind.

A HF directory written by transformers, the GGUF of the same model, a jaxlab
trainer checkpoint (a short `lm_tiny:tiny` run) and the shipped SmolLM2 name
give the logits of their source; on 8 fake devices with a mesh the same as
without. Also: a Hub id offline is one clear error, `results.json`'s
`init_from` provenance, the old checkpoint names' error, and the GGUF
tokenizer conversion without torch.
"""

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import main as main_lib
from jaxlab import parallel
from jaxlab.data import tokenizers
from jaxlab.experiments import results as results_lib
from jaxlab.io import gguf as gguf_io
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import pretrained_fixtures


def _gguf_test_module():
  spec = importlib.util.spec_from_file_location(
      "_pretrained_test_gguf_helpers",
      os.path.join(os.path.dirname(__file__), "gguf_test.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


SMOL = "smollm2-135m-instruct"
# float32 logits of a 2-layer model of width 32 with O(1) entries: a few
# hundred eps of reassociation across layouts/shardings.
ATOL = 1e-4


def _ids(vocab=97, t=10):
  return (np.arange(2 * t, dtype=np.int32).reshape(2, t) * 7 + 3) % vocab


def _mesh():
  return parallel.make_mesh(dict(data=2, fsdp=2, tensor=2))


# `model(ids)` compiled once per model structure and placement, shared by
# the tests (loads of one config reuse it) instead of op-by-op dispatch.
_FORWARD = nnx.jit(lambda model, ids: model(ids))


class PretrainedLoadTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.hf_dir, cls.hf_model = hfx.make_hf_checkpoint(
        os.path.join(cls.root, "hf"), "llama", num_kv_heads=2, seed=3,
        return_model=True)
    cls.gguf = _gguf_test_module().write_gguf(
        os.path.join(cls.root, "m.gguf"), cls.hf_model, "llama")
    cls.ref = hfx.hf_logits(cls.hf_model, _ids())
    # A trainer checkpoint: two steps of lm_tiny:tiny.
    from jaxlab.configs import lm_tiny  # pylint: disable=g-import-not-at-top
    from jaxlab.train import trainer  # pylint: disable=g-import-not-at-top
    c = lm_tiny.get_config("tiny")
    c.train.update(steps=2, checkpoint_every=0, async_checkpoint=False,
                   tensorboard=False, peak_flops=-1.0)
    cls.workdir = os.path.join(cls.root, "run")
    out = trainer.train(c, cls.workdir)
    ts = out["train_state"]
    with jax.set_mesh(ts.mesh):
      cls.trained = np.asarray(ts.model()(jnp.asarray(_ids(256))))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_hf_dir_and_gguf_give_the_source_logits(self):
    self.assertEqual(pretrained.kind(self.hf_dir), "hf")
    self.assertEqual(pretrained.kind(self.gguf), "gguf")
    for spec in (self.hf_dir, self.gguf):
      model, cfg = pretrained.load(spec)
      self.assertEqual(cfg.vocab_size, 97)
      out = np.asarray(_FORWARD(model, jnp.asarray(_ids())))
      np.testing.assert_allclose(out, self.ref, atol=ATOL, rtol=0)
    self.assertGreater(np.abs(self.ref[:, 1:] - self.ref[:, :-1]).mean(), .1)

  def test_trainer_checkpoint_gives_the_trained_model(self):
    ckpts = os.path.join(self.workdir, "checkpoints")
    for spec in (self.workdir, ckpts, os.path.join(ckpts, "2")):
      self.assertEqual(pretrained.kind(spec), "trainer")
      model, cfg = pretrained.load(spec)
      self.assertEqual(cfg.vocab_size, 320)  # 259 byte ids rounded to 64
      out = np.asarray(_FORWARD(model, jnp.asarray(_ids(256))))
      np.testing.assert_allclose(out, self.trained, atol=ATOL, rtol=0)
    tok = pretrained.tokenizer(self.workdir)
    self.assertIsInstance(tok, tokenizers.ByteTokenizer)
    self.assertEqual(pretrained.trainer_checkpoint(self.hf_dir), None)

  def test_sharded_load_equals_unsharded(self):
    mesh = _mesh()
    for spec, ids, ref in ((self.hf_dir, _ids(), self.ref),
                           (self.gguf, _ids(), self.ref),
                           (self.workdir, _ids(256), self.trained)):
      model, _ = pretrained.load(spec, mesh=mesh,
                                 rules=parallel.DEFAULT_RULES)
      leaves = jax.tree.leaves(model)
      self.assertTrue(any(len(x.sharding.device_set) == 8 for x in leaves
                          if hasattr(x, "sharding")))
      sharded = [x for x in leaves if hasattr(x, "sharding") and
                 not x.sharding.is_fully_replicated]
      self.assertNotEmpty(sharded, spec)
      with jax.set_mesh(mesh):
        out = np.asarray(_FORWARD(model, jnp.asarray(ids)))
      np.testing.assert_allclose(out, ref, atol=ATOL, rtol=0)

  def test_hub_id_offline_is_one_clear_error(self):
    with mock.patch("huggingface_hub.snapshot_download",
                    side_effect=OSError("offline")):
      with self.assertRaises(pretrained.MissingCheckpoint) as e:
        pretrained.load("someone/no-such-model")
    msg = str(e.exception)
    self.assertIn("no such file or directory", msg)
    self.assertIn("huggingface-cli download someone/no-such-model", msg)
    self.assertIn("config.init_from", msg)
    with self.assertRaisesRegex(pretrained.MissingCheckpoint,
                                "no such file or directory"):
      pretrained.load(os.path.join(self.root, "missing", "dir", "x"))

  def test_hub_id_downloads_when_online(self):
    with mock.patch("huggingface_hub.snapshot_download",
                    return_value=self.hf_dir) as download:
      self.assertEqual(pretrained.path("owner/name"), self.hf_dir)
    self.assertEqual(download.call_args.args, ("owner/name",))

  def test_provenance_digest_is_stable_and_tracks_files(self):
    d = os.path.join(self.root, "prov")
    shutil.copytree(self.hf_dir, d)
    a = results_lib.checkpoint_provenance(d)
    self.assertEqual(a, results_lib.checkpoint_provenance(d))
    self.assertEqual(a["path"], os.path.abspath(d))
    self.assertLen(a["digest"], 64)
    cfg = os.path.join(d, "config.json")
    with open(cfg) as fh:
      text = fh.read()
    with open(cfg, "w") as fh:
      fh.write(text + " ")
    self.assertNotEqual(a["digest"],
                        results_lib.checkpoint_provenance(d)["digest"])
    # A trainer workdir's provenance is its latest step directory.
    p = results_lib.checkpoint_provenance(self.workdir)
    self.assertEqual(p["path"], os.path.join(self.workdir, "checkpoints", "2"))
    # results.write records it when config.init_from is set.
    import ml_collections  # pylint: disable=g-import-not-at-top
    out = os.path.join(self.root, "res")
    res = results_lib.write(out, "x", config=ml_collections.ConfigDict(
        {"init_from": self.gguf}), argv=["x"])
    with open(os.path.join(out, "results.json")) as fh:
      self.assertEqual(json.load(fh)["init_from"], res["init_from"])
    self.assertEqual(res["init_from"]["path"], os.path.abspath(self.gguf))

  def test_failed_to_hf_leaves_no_folder(self):
    out = os.path.join(self.root, "to_hf_fail", "out")
    with mock.patch.object(gguf_io.json, "dump",
                           side_effect=RuntimeError("disk full")):
      with self.assertRaisesRegex(RuntimeError, "disk full"):
        gguf_io.to_hf(self.gguf, out)
    self.assertFalse(os.path.exists(out))
    self.assertEqual(os.listdir(os.path.dirname(out)), [])


class OldNamesTest(absltest.TestCase):

  def test_old_checkpoint_fields_name_init_from(self):
    for old in main_lib.RENAMED_CHECKPOINT_FIELDS:
      msg = main_lib._renamed_field_error(  # pylint: disable=protected-access
          ["jaxlab", "--config=generate", f"--config.{old}=/ckpt"])
      self.assertIn(f"--config.{old} is gone", msg)
      self.assertIn("--config.init_from=", msg)
    self.assertIsNone(main_lib._renamed_field_error(  # pylint: disable=protected-access
        ["jaxlab", "--config.init_from=/ckpt"]))

  def test_command_line_exits_with_the_message(self):
    proc = subprocess.run(
        [sys.executable, "-m", "jaxlab.main", "--config=generate:tiny",
         "--config.checkpoint=/ckpt", "--workdir=/nonexistent/w"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    self.assertEqual(proc.returncode, 2)
    self.assertIn("use --config.init_from=", proc.stderr)

  def test_no_config_keeps_an_old_name(self):
    from jaxlab import configs  # pylint: disable=g-import-not-at-top
    for name in ("generate", "dpad", "frequency_entropy", "speckv",
                 "calibration", "uncertainty", "sipit"):
      module = importlib.import_module(f"jaxlab.configs.{name}")
      c = module.get_config(None)
      self.assertIn("init_from", c, name)
      self.assertNotIn("pretrained", c, name)
      self.assertNotIn("checkpoint", c, name)
      self.assertNotIn("init_from", c.train, name)
      if "fe" in c:
        self.assertNotIn("pretrained", c.fe)
    del configs


@absltest.skipUnless(pretrained.available(SMOL), pretrained.skip_reason(SMOL))
class ShippedTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The shipped file's metadata parsed once for the class (by
    # pretrained.load and transformers' tokenizer; see gguf_parsed_once).
    parsed_once = contextlib.ExitStack()
    cls.addClassCleanup(parsed_once.close)
    parsed_once.enter_context(pretrained_fixtures.gguf_parsed_once())

  def test_shipped_name_is_its_gguf(self):
    path = pretrained.path(SMOL)
    self.assertEqual(pretrained.kind(SMOL), "gguf")
    a, _ = pretrained.load(SMOL, cache=True)
    b, _ = pretrained_fixtures.load(SMOL)  # gguf_io.load(path), per session
    self.assertTrue(path.endswith(".gguf") and os.path.isfile(path))
    ids = jnp.asarray([[1, 9690, 198, 2683, 359]])
    np.testing.assert_allclose(np.asarray(a(ids)), np.asarray(b(ids)),
                               atol=1e-4, rtol=0)

  def test_gguf_tokenizer_without_torch_equals_transformers(self):
    """The conversion with torch blocked == AutoTokenizer(gguf_file=)."""
    path = pretrained.path(SMOL)
    texts = ["Hello world!", "  spaces\tand\nnewlines ",
             "émoji 🙂 日本語", "<|im_start|>user\nhi<|im_end|>"]
    chat = [{"role": "user", "content": "What is 2+2?"}]
    out = tempfile.mkdtemp()
    code = (
        "import sys, json; sys.modules['torch'] = None\n"
        "from jaxlab.io import gguf\n"
        f"gguf.save_tokenizer({path!r}, {out + '/tok'!r})\n"
        "import transformers\n"
        f"t = transformers.AutoTokenizer.from_pretrained({out + '/tok'!r})\n"
        f"ids = [t(s)['input_ids'] for s in {texts!r}]\n"
        f"ids.append(list(t.apply_chat_template({chat!r}, "
        "add_generation_prompt=True, tokenize=True, return_dict=False)))\n"
        "print(json.dumps(ids))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    ours = json.loads(proc.stdout.strip().splitlines()[-1])
    # AutoTokenizer.from_pretrained(dir, gguf_file=file), once a process.
    ref_tok = pretrained_fixtures.hf_gguf_tokenizer(SMOL)
    ref = [ref_tok(s)["input_ids"] for s in texts]
    ref.append(list(ref_tok.apply_chat_template(
        chat, add_generation_prompt=True, tokenize=True, return_dict=False)))
    self.assertEqual(ours, ref)
    self.assertEqual(ours[-1][:2], [1, 9690])  # <|im_start|>system
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
  absltest.main()
