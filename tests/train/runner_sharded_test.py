"""Sub-trainings on a mesh: `StepRunner` and `train_lm` on 8 (fake) devices
give the one-device losses and weights; the mesh a sub-training gets from
`parallel.batch_mesh` / `parallel.mesh_from_config`.

Compared in float64: a mesh changes the order of the reductions (gradient
all-reduce, FSDP gathers, tensor-parallel partial sums), which in float32
differs by ~1e-7 relative and Adam's m / (sqrt(v) + eps) scales up to ~1e-5
on entries whose gradients nearly cancel (see runner_test). In float64 the
same reordering is ~1e-16 relative, so a few steps agree to 1e-9 and any
real difference (a row dropped or counted twice by the batch split, a
wrong weight sharding) is far above that.
"""

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import ml_collections
import numpy as np

from jaxlab import parallel
from jaxlab.models import decoder
from jaxlab.train import runner

_VOCAB = 16


def _model(seed: int = 0):
  cfg = decoder.DecoderConfig(vocab_size=_VOCAB, dim=32, num_layers=2,
                              num_heads=2, num_kv_heads=2, mlp_dim=64,
                              max_position_embeddings=16,
                              param_dtype="float64", dtype="float64")
  return decoder.Decoder(cfg, rngs=nnx.Rngs(seed))


def _data(n: int = 24, t: int = 10, seed: int = 0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, _VOCAB, (n, t + 1)).astype(np.int32)
  mask = (rng.random((n, t)) < 0.8).astype(np.float32)
  return {"inputs": ids[:, :-1], "targets": ids[:, 1:], "loss_mask": mask}


def _params(model):
  return jax.tree.map(np.asarray, nnx.state(model, nnx.Param))


class BatchMeshTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")

  def test_largest_divisor_of_the_batch(self):
    shape = lambda m: tuple(m.shape.values())  # noqa: E731
    self.assertEqual(shape(parallel.batch_mesh(8)), (8, 1, 1))
    self.assertEqual(shape(parallel.batch_mesh(12)), (6, 1, 1))
    self.assertEqual(shape(parallel.batch_mesh(7)), (7, 1, 1))
    self.assertEqual(shape(parallel.batch_mesh(5, tensor=2)), (1, 1, 2))
    self.assertEqual(shape(parallel.batch_mesh(12, tensor=2, fsdp=4)),
                     (1, 4, 2))
    self.assertEqual(shape(parallel.batch_mesh()), (8, 1, 1))
    self.assertEqual(parallel.batch_mesh(6).devices.size, 6)

  def test_mesh_from_config(self):
    shape = lambda m: tuple(m.shape.values())  # noqa: E731
    c = ml_collections.ConfigDict({"mesh": {"data": -1, "fsdp": 1,
                                            "tensor": 1}})
    self.assertEqual(shape(parallel.mesh_from_config(c)), (8, 1, 1))
    self.assertEqual(shape(parallel.mesh_from_config(c, batch=16)),
                     (8, 1, 1))
    self.assertEqual(shape(parallel.mesh_from_config(c, batch=12)),
                     (6, 1, 1))
    c.mesh.update(data=1, fsdp=-1)                 # FSDP over every chip
    self.assertEqual(shape(parallel.mesh_from_config(c, batch=12)),
                     (3, 2, 1))
    c.mesh.update(data=2, fsdp=2, tensor=2)
    self.assertEqual(shape(parallel.mesh_from_config(c, batch=8)),
                     (2, 2, 2))
    self.assertEqual(shape(parallel.mesh_from_config(c, batch=6)),
                     (3, 1, 2))
    self.assertEqual(shape(parallel.mesh_from_config(
        {"data": -1}, batch=5, devices=jax.devices()[:1])), (1, 1, 1))
    # A sub-training's rows per update are one micro-batch.
    c = ml_collections.ConfigDict({"mesh": {"data": -1, "fsdp": 1,
                                            "tensor": 1},
                                   "optim": {"grad_accum": 4}})
    self.assertEqual(shape(runner.mesh_for(c, 24)), (6, 1, 1))
    c.optim.grad_accum = 1
    self.assertEqual(shape(runner.mesh_for(c, 24)), (8, 1, 1))


class ShardedSubTrainingTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")

  @parameterized.named_parameters(
      ("dp_fsdp_tp", {"data": 2, "fsdp": 2, "tensor": 2}),
      ("data8", {"data": 8, "fsdp": 1, "tensor": 1}))
  def test_step_runner_on_8_devices_equals_one(self, mesh_cfg):
    data = _data()
    ocfg = runner.optim_config(lr=1e-2, warmup_steps=1, weight_decay=0.1,
                               schedule="cosine", clip_norm=0.5)
    with jax.enable_x64(True):
      curves, params = [], []
      for mesh in (None, parallel.make_mesh(mesh_cfg)):
        model = _model()
        r = runner.StepRunner(model, loss="lm", loss_config=None, optim=ocfg,
                              steps=4, seed=0, mesh=mesh,
                              rules=parallel.DEFAULT_RULES)
        rng = np.random.default_rng(1)
        losses = []
        for step in range(4):
          idx = rng.choice(len(data["inputs"]), 8, replace=False)
          losses.append(r.step({k: v[idx] for k, v in data.items()},
                               step)["loss"])
        if mesh is not None:   # the state is really on the mesh
          gate = r.model().layers[0].mlp.gate_df[...]
          self.assertEqual(gate.sharding.mesh.shape, mesh.shape)
          self.assertEqual(gate.sharding.spec, jax.P("fsdp", "tensor"))
        r.write_back()
        curves.append(losses)
        params.append(_params(model))
      np.testing.assert_allclose(curves[1], curves[0], rtol=1e-10)
      chex.assert_trees_all_close(params[1], params[0], atol=1e-9, rtol=0)
      moved = max(float(np.abs(a - b).max()) for a, b in zip(
          jax.tree.leaves(params[0]), jax.tree.leaves(_params(_model()))))
      self.assertGreater(moved, 1e-3)          # the weights did move

  def test_train_lm_on_8_devices_equals_one(self):
    data = _data()
    with jax.enable_x64(True):
      logs, params = [], []
      for mesh in (None, parallel.batch_mesh(12)):   # data = 6 of 8 devices
        model = _model(1)
        logs.append(runner.train_lm(model, data, steps=5, batch_size=12,
                                    lr=1e-2, warmup_steps=1, seed=3,
                                    log_every=1, mesh=mesh,
                                    rules=parallel.DEFAULT_RULES))
        params.append(_params(model))
      self.assertLen(logs[0], 5)
      np.testing.assert_allclose([r["loss"] for r in logs[1]],
                                 [r["loss"] for r in logs[0]], rtol=1e-10)
      chex.assert_trees_all_close(params[1], params[0], atol=1e-9, rtol=0)
      self.assertLess(logs[0][-1]["loss"], logs[0][0]["loss"])


if __name__ == "__main__":
  absltest.main()
