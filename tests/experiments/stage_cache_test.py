"""jaxlab.io.stages and the experiments that cache stages with it.

For each caching experiment (dpad, speckv, rope_extension,
streaming_thinker) on its smoke preset, training and evaluation are
replaced by counting fakes (the fake training leaves a mark on the
parameters, the fake evaluation reports it), and `run` is called again
after changing one field: a field that determines the trained model
retrains, an evaluation-only field re-evaluates the saved model, an
unchanged config recomputes nothing.
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import numpy as np

from jaxlab.configs import dpad as dpad_config
from jaxlab.configs import rope_extension as rope_config
from jaxlab.configs import speckv as speckv_config
from jaxlab.configs import streaming_thinker as st_config
from jaxlab.decoding import streaming as sd
from jaxlab.experiments import dpad
from jaxlab.experiments import rope_extension
from jaxlab.experiments import speckv
from jaxlab.experiments import streaming_thinker
from jaxlab.io import params as params_io
from jaxlab.io import stages
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry


def _checksum(model) -> float:
  return float(sum(np.abs(np.asarray(x, np.float64)).sum()
                   for x in jax.tree.leaves(nnx.state(model, nnx.Param))))


def _mark(model, amount: float):
  nnx.update(model, jax.tree.map(lambda x: x + amount,
                                 nnx.state(model, nnx.Param)))
  return model


def _tempdir(test) -> str:
  out = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, out, ignore_errors=True)
  return out


def _tiny_decoder(seed=0):
  return decoder_lib.Decoder(
      decoder_lib.DecoderConfig(vocab_size=16, dim=8, num_layers=1,
                                num_heads=2, num_kv_heads=1, mlp_dim=16),
      rngs=nnx.Rngs(seed))


class StagesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = _tempdir(self)
    self.config = dpad_config.get_config("smoke")

  def test_key_digest_is_config_key(self):
    k = stages.key(self.config, ("model", "optim"))
    self.assertEqual(stages.digest(k),
                     params_io.config_key(self.config, "model", "optim")[1])

  def test_key_exclude_and_extra(self):
    k = stages.key(self.config, ("task",), exclude=("task.kind",), seed=3)
    self.assertNotIn("kind", k["task"])
    self.assertEqual(k["seed"], 3)
    with self.assertRaisesRegex(ValueError, "not a field"):
      stages.key(self.config, ("task",), exclude=("task.nope",))
    with self.assertRaisesRegex(ValueError, "no field"):
      stages.key(self.config, ("nope",))

  def test_json_reused_while_key_holds(self):
    path = os.path.join(self.dir, "eval.json")
    calls = []
    compute = lambda: calls.append(1) or {"x": (1, 2)}
    self.assertEqual(stages.cached(path, {"a": 1}, compute), {"x": [1, 2]})
    self.assertEqual(stages.cached(path, {"a": 1}, compute), {"x": [1, 2]})
    self.assertLen(calls, 1)
    with open(path) as f:  # the plain value, readable without stages
      self.assertEqual(json.load(f), {"x": [1, 2]})
    stages.cached(path, {"a": 2}, compute)
    self.assertLen(calls, 2)
    self.assertTrue(stages.is_current(path, {"a": 2}))
    self.assertFalse(stages.is_current(path, {"a": 1}))

  def test_file_without_digest_is_recomputed(self):
    path = os.path.join(self.dir, "eval.json")
    with open(path, "w") as f:
      json.dump({"old": 1}, f)
    self.assertEqual(stages.cached(path, {"a": 1}, lambda: {"new": 1}),
                     {"new": 1})

  def test_npz_single_and_dict(self):
    path = os.path.join(self.dir, "params.npz")
    trains = []

    def train():
      trains.append(1)
      return _mark(_tiny_decoder(), 0.5), [{"step": 0, "loss": 1.5}]
    model, info = stages.cached(path, {"k": 1}, train, kind="npz",
                                init=_tiny_decoder)
    again, info2 = stages.cached(path, {"k": 1}, train, kind="npz",
                                 init=_tiny_decoder)
    self.assertLen(trains, 1)
    self.assertEqual(info, info2)
    self.assertAlmostEqual(_checksum(again), _checksum(model), places=3)
    self.assertNotAlmostEqual(_checksum(again), _checksum(_tiny_decoder()),
                              places=3)
    params_io.load(_tiny_decoder(), path)  # plain npz (no meta)
    stages.cached(path, {"k": 2}, train, kind="npz", init=_tiny_decoder)
    self.assertLen(trains, 2)

    pattern = os.path.join(self.dir, "{name}.npz")
    pair = lambda: {"a": _tiny_decoder(), "b": _tiny_decoder(1)}
    calls = []
    train2 = lambda: calls.append(1) or ({k: _mark(m, 1.0) for k, m in
                                          pair().items()}, "info")
    first, _ = stages.cached(pattern, {"k": 1}, train2, kind="npz",
                             init=pair)
    second, info = stages.cached(pattern, {"k": 1}, train2, kind="npz",
                                 init=pair)
    self.assertLen(calls, 1)
    self.assertEqual(info, "info")
    self.assertAlmostEqual(_checksum(second["b"]), _checksum(first["b"]),
                           places=3)
    os.remove(os.path.join(self.dir, "b.npz"))  # one file gone: retrain
    stages.cached(pattern, {"k": 1}, train2, kind="npz", init=pair)
    self.assertLen(calls, 2)

  def test_directory(self):
    a = stages.directory(self.dir, "train", {"k": 1})
    self.assertEqual(a, stages.directory(self.dir, "train", {"k": 1}))
    self.assertNotEqual(a, stages.directory(self.dir, "train", {"k": 2}))
    self.assertTrue(os.path.isfile(os.path.join(a, "stage.json")))


# -- the experiments -----------------------------------------------------------


class _Counts:
  def __init__(self):
    self.train = 0
    self.eval = 0
    self.seen = []   # checksums the evaluations saw


def _dpad_run(config, workdir):
  n = _Counts()

  def train(config, seed):
    n.train += 1
    return _mark(dpad.build_model(config, seed), 0.25), [{"step": 0,
                                                          "loss": 1.0}]

  def decode_all(model, config, gen_lens, variants, **kw):
    del kw
    n.eval += 1
    n.seen.append(_checksum(model))
    keys = ("exact_match", "latency_s", "speedup", "nfe", "tokens_processed",
            "flops", "agree_vanilla")
    return {str(g): {v: {k: 1.0 for k in keys} for v in variants}
            for g in gen_lens}

  with mock.patch.object(dpad, "train_model", side_effect=train), \
       mock.patch.object(dpad, "decode_all", side_effect=decode_all), \
       mock.patch.object(dpad.results_lib, "write"):
    dpad.run(config, workdir)
  return n


def _speckv_run(config, workdir):
  n = _Counts()

  def train(config, tok, seed):
    n.train += 1
    target, draft = speckv.build_models(config, tok.vocab_size, seed)
    return _mark(target, 0.25), _mark(draft, 0.5), {"target": [],
                                                    "draft": []}

  def evaluate(target, draft, config, tok, examples, timing=False):
    del tok, examples, timing
    n.eval += 1
    n.seen.append(_checksum(target) + _checksum(draft))
    return {name: {str(b): {c.key: 1.0 for c in speckv.COLUMNS}
                   for b in config.methods.budgets}
            for name in config.methods.names}

  with mock.patch.object(speckv, "train_models", side_effect=train), \
       mock.patch.object(speckv, "evaluate", side_effect=evaluate), \
       mock.patch.object(speckv, "importance_correlation",
                         return_value=0.5), \
       mock.patch.object(speckv.results_lib, "write"):
    speckv.run(config, workdir)
  return n


def _rope_run(config, workdir):
  n = _Counts()
  n.train_dirs = []

  def train(config, train_dir, seed, tok):
    del tok
    n.train += 1
    n.train_dirs.append(train_dir)
    model = model_registry.get_spec(config.model, seed=seed).factory()
    return _mark(model, 0.25), {"loss": 1.0}

  def evaluate_seed(model, config, tok):
    del tok
    n.eval += 1
    n.seen.append(_checksum(model))
    lengths = [int(config.task.train_len) * int(f)
               for f in config.task.eval_factors]
    methods = list(config.methods)
    return {"lengths": lengths, "methods": methods,
            "metrics": {m: {k: [0.5] * len(lengths) for k in methods}
                        for m in ("passkey", "passkey_token_acc",
                                  "perplexity")}}

  with mock.patch.object(rope_extension, "train_model", side_effect=train), \
       mock.patch.object(rope_extension, "evaluate_seed",
                         side_effect=evaluate_seed), \
       mock.patch.object(rope_extension, "_plot_metric"), \
       mock.patch.object(rope_extension, "plot_cumulative_scale"), \
       mock.patch.object(rope_extension, "plot_learning_curves"), \
       mock.patch.object(rope_extension.results_lib, "write"):
    rope_extension.run(config, workdir)
  return n


def _streaming_run(config, workdir):
  n = _Counts()

  def train(config, method, seed):
    n.train += 1
    model = decoder_lib.Decoder(model_registry.decoder_config(config.model),
                                rngs=nnx.Rngs(seed))
    return _mark(model, 0.25), [{"step": 0, "loss": 1.0}]

  def evaluate(model, config, method, stories):
    del method, stories
    n.eval += 1
    n.seen.append(_checksum(model))
    keys = ["accuracy", "unit_accuracy", "ttft_tokens", "reasoning_tokens"]
    keys += [sd.delay_key(float(k))
             for k in config.clock.tokens_per_tick]
    return {k: 1.0 for k in keys}, []

  with mock.patch.object(streaming_thinker, "train_model",
                         side_effect=train), \
       mock.patch.object(streaming_thinker, "evaluate",
                         side_effect=evaluate), \
       mock.patch.object(streaming_thinker.results_lib, "write"):
    streaming_thinker.run(config, workdir)
  return n


def _set(config, path, value):
  *parents, leaf = path.split(".")
  node = config
  for p in parents:
    node = node[p]
  node[leaf] = value
  return config


# (name, config factory, run, trainings per run, a field that determines
#  the trained model, a field that only the evaluation reads)
EXPERIMENTS = (
    ("dpad", lambda: dpad_config.get_config("smoke"), _dpad_run, 1,
     ("optim.b2", 0.9), ("decode.threshold", 0.8)),
    ("speckv", lambda: speckv_config.get_config("smoke"), _speckv_run, 1,
     ("optim.b2", 0.9), ("task.samples", 2)),
    ("rope_extension", lambda: rope_config.get_config("smoke"), _rope_run,
     1, ("optim.b2", 0.9), ("task.samples", 2)),
    ("streaming_thinker", lambda: st_config.get_config("smoke"),
     _streaming_run, 3, ("optim.b2", 0.9), ("decode.max_new_tokens", 10)),
)


class ExperimentStagesTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(e[0], *e[1:]) for e in EXPERIMENTS])
  def test_stage_recomputed_iff_its_fields_change(
      self, make_config, run, trainings, train_field, eval_field):
    workdir = _tempdir(self)
    first = run(make_config(), workdir)
    self.assertEqual((first.train, first.eval), (trainings, trainings))

    again = run(make_config(), workdir)  # nothing changed: all reloaded
    self.assertEqual((again.train, again.eval), (0, 0))

    c = _set(make_config(), *eval_field)  # evaluation only: same model
    ev = run(c, workdir)
    self.assertEqual((ev.train, ev.eval), (0, trainings))
    np.testing.assert_allclose(ev.seen, first.seen, rtol=1e-5)
    again = run(_set(make_config(), *eval_field), workdir)
    self.assertEqual((again.train, again.eval), (0, 0))

    c = _set(_set(make_config(), *eval_field), *train_field)
    tr = run(c, workdir)  # a training field: retrained, re-evaluated
    self.assertEqual((tr.train, tr.eval), (trainings, trainings))
    if hasattr(tr, "train_dirs"):  # the trainer's checkpoints: elsewhere
      self.assertNotEqual(tr.train_dirs, first.train_dirs)

  def test_dpad_init_from_digest(self):
    """A model continued from another run's params.npz retrains when that
    file is retrained (its digest is part of the key)."""
    base, cont = _tempdir(self), _tempdir(self)
    _dpad_run(dpad_config.get_config("smoke"), base)
    c = dpad_config.get_config("smoke")
    c.init_from = os.path.join(base, "seed{seed}", "params.npz")
    key = dpad.train_key(c, 0)
    self.assertIsNotNone(key["init_from_digest"])
    self.assertEqual(_dpad_run(c, cont).train, 1)
    self.assertEqual(_dpad_run(c, cont).train, 0)
    _dpad_run(_set(dpad_config.get_config("smoke"), "optim.b2", 0.9), base)
    self.assertNotEqual(dpad.train_key(c, 0), key)
    self.assertEqual(_dpad_run(c, cont).train, 1)


if __name__ == "__main__":
  absltest.main()
