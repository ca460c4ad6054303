"""jaxlab.io.params: round trip, meta checks, mismatch errors."""

import os
import tempfile

from absl.testing import absltest
import chex
import jax
from flax import nnx
import numpy as np

from jaxlab.io import params
from jaxlab.models import decoder as decoder_lib


def _model(seed, dim=32):
  cfg = decoder_lib.DecoderConfig(vocab_size=40, dim=dim, num_layers=1,
                                  num_heads=2, num_kv_heads=1, mlp_dim=48)
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(seed))


class ParamsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.path = os.path.join(self.dir, "sub", "p.npz")

  def test_round_trip_restores_every_leaf_and_returns_meta(self):
    a, b = _model(0), _model(1)
    params.save(a, self.path, {"steps": 3, "final_loss": 0.25})
    self.assertFalse(os.path.exists(self.path + ".tmp.npz"))
    leaves_a = jax.tree.leaves(nnx.state(a, nnx.Param))
    self.assertGreater(np.abs(np.asarray(leaves_a[0]) - np.asarray(
        jax.tree.leaves(nnx.state(b, nnx.Param))[0])).max(), 0.0)
    saved = params.load(b, self.path, {"steps": 3})  # a subset of the meta
    self.assertEqual(saved, {"steps": 3, "final_loss": 0.25})
    chex.assert_trees_all_equal(nnx.state(a, nnx.Param),
                                nnx.state(b, nnx.Param))
    tokens = np.arange(10)[None] % 40
    np.testing.assert_array_equal(np.asarray(a(tokens)), np.asarray(b(tokens)))

  def test_other_meta_is_refused_and_leaves_the_model_alone(self):
    a, b = _model(0), _model(1)
    params.save(a, self.path, {"steps": 3})
    before = jax.tree.map(np.asarray, nnx.state(b, nnx.Param))
    with self.assertRaisesRegex(ValueError, r"p\.npz was saved with meta "
                                r"\{\"steps\": 3\}, not \{\"steps\": 4\}"):
      params.load(b, self.path, {"steps": 4})
    with self.assertRaisesRegex(ValueError, "was saved with meta"):
      params.load(b, self.path, {"lr": 1.0})  # a key it does not have
    chex.assert_trees_all_equal(before, nnx.state(b, nnx.Param))

  def test_other_shapes_are_refused(self):
    params.save(_model(0, dim=32), self.path)
    with self.assertRaisesRegex(ValueError,
                                "does not match the model's parameters"):
      params.load(_model(0, dim=16), self.path)


class ConfigKeyTest(absltest.TestCase):

  def test_digest_of_the_named_fields_only(self):
    import hashlib  # pylint: disable=g-import-not-at-top
    import json  # pylint: disable=g-import-not-at-top
    import ml_collections  # pylint: disable=g-import-not-at-top
    cfg = ml_collections.ConfigDict(
        {"model": {"dim": 8, "act": "gelu"}, "lr": 0.1, "rl": {"steps": 3}})
    meta, key = params.config_key(cfg, "model", "lr")
    self.assertEqual(meta, {"model": {"dim": 8, "act": "gelu"}, "lr": 0.1})
    want = hashlib.sha256(
        b'{"lr": 0.1, "model": {"act": "gelu", "dim": 8}}').hexdigest()[:8]
    self.assertEqual(key, want)
    self.assertEqual(json.loads(json.dumps(meta)), meta)
    cfg.rl.steps = 4                                  # not a named field
    self.assertEqual(params.config_key(cfg, "model", "lr")[1], key)
    cfg.model.dim = 16
    self.assertNotEqual(params.config_key(cfg, "model", "lr")[1], key)


if __name__ == "__main__":
  absltest.main()
