"""Mesh shapes from config, rules, born-sharded creation, shard_params."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.models import decoder

CFG = decoder.DecoderConfig(vocab_size=64, dim=32, num_layers=1, num_heads=2,
                            num_kv_heads=2, mlp_dim=64)


class MeshTest(parameterized.TestCase):

  @parameterized.parameters(
      ({"data": -1}, 8, (8, 1, 1)),
      ({"data": 2, "fsdp": -1, "tensor": 2}, 8, (2, 2, 2)),
      ({"data": 1, "fsdp": 1, "tensor": -1}, 4, (1, 1, 4)),
      ({"data": 2, "fsdp": 2, "tensor": 2}, 8, (2, 2, 2)),
  )
  def test_shape_fills_minus_one(self, cfg, n, want):
    self.assertEqual(parallel.mesh_shape(cfg, n), want)

  @parameterized.parameters(
      ({"data": -1, "fsdp": -1}, "at most one"),
      ({"data": 3, "fsdp": -1}, "not divisible by 3"),
      ({"data": 2, "fsdp": 2}, "needs 4 devices but 8"),
      ({"data": 0}, "mesh.data must be"),
  )
  def test_shape_errors(self, cfg, msg):
    with self.assertRaisesRegex(ValueError, msg):
      parallel.mesh_shape(cfg, 8)

  def test_rules_validation_and_spec(self):
    rules = parallel.rules_from_config((("embed", "fsdp"),
                                        ("batch", ("data", "fsdp"))))
    self.assertEqual(parallel.logical_to_spec(("batch", None, "embed"), rules),
                     jax.P(("data", "fsdp"), None, "fsdp"))
    with self.assertRaisesRegex(ValueError, "unknown mesh axis 'model'"):
      parallel.rules_from_config((("mlp", "model"),))

  def test_created_sharded_and_shard_params_agree(self):
    mesh = parallel.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    factory = lambda: decoder.Decoder(CFG, rngs=nnx.Rngs(0))
    with jax.set_mesh(mesh), nnx.logical_axis_rules(parallel.DEFAULT_RULES):
      graphdef, state = parallel.create_sharded(factory)
      host = parallel.shard_params(factory(), mesh)
      _, abs_state = parallel.abstract_model(factory, mesh)
    model = nnx.merge(graphdef, state)
    gate = model.layers[0].mlp.gate_df[...]  # [D=32, F=64] (embed, mlp)
    self.assertEqual(gate.sharding.spec, jax.P("fsdp", "tensor"))
    self.assertEqual({s.data.shape for s in gate.addressable_shards},
                     {(16, 32)})
    host_gate = host.layers[0].mlp.gate_df[...]
    self.assertEqual(host_gate.sharding, gate.sharding)
    np.testing.assert_allclose(np.asarray(host_gate), np.asarray(gate),
                               atol=1e-7)
    abs_gate = abs_state["layers"][0]["mlp"]["gate_df"].get_value()
    self.assertEqual(abs_gate.shape, (32, 64))
    self.assertEqual(abs_gate.sharding.spec, jax.P("fsdp", "tensor"))
    # The same forward pass on the sharded and host copies.
    ids = np.arange(8, dtype=np.int32).reshape(2, 4)
    np.testing.assert_allclose(np.asarray(model(ids)),
                               np.asarray(host(ids)), atol=1e-5)


if __name__ == "__main__":
  absltest.main()
