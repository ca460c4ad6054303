"""Trainer: mesh equivalence, restore across meshes, accumulation, LoRA,
non-finite guard, incompatible checkpoints."""

import os
import shutil
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.configs import common
from jaxlab import parallel
from jaxlab.data import pipeline
from jaxlab.io import hf
from jaxlab.train import losses
from jaxlab.train import metrics as metrics_lib
from jaxlab.testing import hf_fixtures
from jaxlab.train import trainer


def tiny_config(steps=6, **train):
  c = common.base_config()
  c.model.update(vocab_size=64, dim=32, num_layers=1, num_heads=2,
                 num_kv_heads=2, mlp_dim=64)
  c.data.update(num_docs=64, eval_fraction=0.0)
  c.train.update(steps=steps, batch_size=8, seq_len=32, log_every=1,
                 eval_every=0, checkpoint_every=0, async_checkpoint=False,
                 tensorboard=False, peak_flops=1e12)
  c.train.update(**train)
  c.optim.update(lr=1e-2, warmup_steps=0, schedule="constant",
                 weight_decay=0.01)
  return c


def token_source(n=32, seq_len=32, vocab=64, seed=0):
  """Random-token LM examples with every target counted (equal counts)."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    ids = rng.integers(0, vocab // 2, size=seq_len + 1).astype(np.int32)
    ids[1::2] = ids[0:-1:2] + vocab // 2  # learnable: odd token = even + 32
    out.append({"inputs": ids[:-1], "targets": ids[1:],
                "loss_mask": np.ones(seq_len, np.float32)})
  return out


def mesh_of(data, fsdp, tensor, n=None):
  devices = jax.devices()[:n or data * fsdp * tensor]
  return parallel.make_mesh({"data": data, "fsdp": fsdp, "tensor": tensor},
                            devices=devices)


def losses_of(workdir):
  return [r["loss"] for r in metrics_lib.read_metrics(workdir)]


def params_of(result):
  ts = result["train_state"]
  model, _ = nnx.merge(ts.graphdef, ts.state)
  return nnx.state(model, nnx.Param)


class TrainerTest(absltest.TestCase):

  def _tmp(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path

  def test_mesh_equivalence_sharding_and_cross_mesh_restore(self):
    tmp = self._tmp()
    src = token_source()
    cfg = tiny_config(steps=8, checkpoint_every=4)
    # Only the 2x2x2 run's step-4 checkpoint is used (below).
    one = trainer.train(tiny_config(steps=8), f"{tmp}/one", train_source=src,
                        mesh=mesh_of(1, 1, 1))
    eight = trainer.train(cfg, f"{tmp}/eight", train_source=src,
                          mesh=mesh_of(2, 2, 2))
    l1, l8 = losses_of(f"{tmp}/one"), losses_of(f"{tmp}/eight")
    self.assertLen(l1, 8)
    self.assertLess(l1[-1], l1[0] - 0.3)  # it learns something
    np.testing.assert_allclose(l8, l1, rtol=2e-4)
    p1, p8 = params_of(one), params_of(eight)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(a), np.asarray(b), atol=2e-5), p1, p8)

    # Params really are sharded per DEFAULT_RULES on the 2x2x2 mesh.
    attn = p8["layers"][0]["attn"]
    q = attn["q_dnh"][...]   # [D=32, N=2, H=16]: (embed->fsdp, heads->tensor)
    self.assertEqual(q.sharding.spec, jax.P("fsdp", "tensor", None))
    self.assertEqual(q.addressable_shards[0].data.shape, (16, 1, 16))
    emb = p8["embed_vd"][...]  # [V=64, D=32]: (vocab->tensor, embed->fsdp)
    self.assertEqual(emb.addressable_shards[0].data.shape, (32, 16))
    down = p8["layers"][0]["mlp"]["down_fd"][...]
    self.assertEqual(down.sharding.spec, jax.P("tensor", "fsdp"))

    # A checkpoint written on the 2x2x2 mesh (step 4) restores onto a
    # 1-device mesh and finishes like the uninterrupted 1-device run. The
    # 2x2x2 run's workdir with its step-8 checkpoint removed is what a run
    # stopped after step 4 leaves (metrics past step 4 are truncated on
    # resume), so no second 2x2x2 run is needed.
    shutil.copytree(f"{tmp}/eight", f"{tmp}/moved")
    shutil.rmtree(f"{tmp}/moved/checkpoints/8")
    self.assertEqual(sorted(os.listdir(f"{tmp}/moved/checkpoints")), ["4"])
    moved = trainer.train(cfg, f"{tmp}/moved", train_source=src,
                          mesh=mesh_of(1, 1, 1))
    np.testing.assert_allclose(losses_of(f"{tmp}/moved"), l1, rtol=2e-4)
    leaf = params_of(moved)["embed_vd"][...]
    self.assertLen(leaf.sharding.device_set, 1)

  def test_grad_accum_matches_full_batch(self):
    tmp = self._tmp()
    src = token_source()
    cfg = tiny_config(steps=3)
    full = trainer.train(cfg, f"{tmp}/a", train_source=src,
                         mesh=mesh_of(2, 1, 1))
    cfg.optim.grad_accum = 2
    acc = trainer.train(cfg, f"{tmp}/b", train_source=src,
                        mesh=mesh_of(2, 1, 1))
    np.testing.assert_allclose(losses_of(f"{tmp}/b"), losses_of(f"{tmp}/a"),
                               rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(a), np.asarray(b), atol=1e-6),
                 params_of(full), params_of(acc))

  def test_lora_on_imported_hf_checkpoint_trains_only_adapters(self):
    tmp = self._tmp()
    hf_dir = hf_fixtures.make_hf_checkpoint(
        f"{tmp}/hf", vocab_size=64, hidden_size=32, intermediate_size=64,
        num_layers=1, num_heads=2, num_kv_heads=2, init_std=0.02)
    cfg = tiny_config(steps=4)
    cfg.init_from = hf_dir
    cfg.lora.update(rank=2, alpha=4.0, targets=("q_dnh", "v_dkh"))
    out = trainer.train(cfg, f"{tmp}/run", train_source=token_source(),
                        mesh=mesh_of(2, 2, 2))
    ts = out["train_state"]
    model, _ = nnx.merge(ts.graphdef, ts.state)
    fresh, _ = hf.load(hf_dir)
    # Base weights are the imported ones, untouched by training (AdamW's
    # weight decay alone would move them by ~lr * wd * |w| per step).
    for name in ("q_dnh", "v_dkh", "o_nhd"):
      np.testing.assert_array_equal(
          np.asarray(getattr(model.layers[0].attn, name)[...]),
          np.asarray(getattr(fresh.layers[0].attn, name)[...]))
    np.testing.assert_array_equal(np.asarray(model.embed_vd[...]),
                                  np.asarray(fresh.embed_vd[...]))
    b = np.asarray(model.layers[0].attn.q_dnh_lora_b[...])
    self.assertEqual(b.shape, (2, 2, 16))
    self.assertGreater(np.abs(b).max(), 0)  # zero at init, trained since
    # The merged model applies W + (alpha/r) A B.
    a = np.asarray(model.layers[0].attn.q_dnh_lora_a[...])
    merged = ts.model()
    np.testing.assert_allclose(
        np.asarray(merged.layers[0].attn.q_dnh[...]),
        np.asarray(fresh.layers[0].attn.q_dnh[...]) +
        2.0 * np.tensordot(a, b, axes=1), atol=1e-6)

  def test_non_finite_loss_names_step_and_keeps_checkpoint(self):
    tmp = self._tmp()
    src = token_source(n=16)
    for i, ex in enumerate(src):
      ex["poison"] = np.float32(i == 11)
    cfg = tiny_config(steps=8, checkpoint_every=1)
    # The step at which example 11 is first drawn (same pipeline, same seed).
    ds = pipeline.batched_dataset(src, global_batch=8, seed=cfg.seed)
    bad_step = next(s for s in range(1, 9) if ds[s - 1]["poison"].any())

    def poisoned(model, batch, *, rng, config):
      loss, aux = losses.lm_loss(model, batch, rng=rng, config=config)
      return loss + jnp.where(batch["poison"].any(), jnp.nan, 0.0), aux

    with self.assertRaisesRegex(FloatingPointError,
                                f"at step {bad_step};.*checkpoint is step "
                                f"{bad_step - 1 or None}"):
      trainer.train(cfg, tmp, train_source=src, loss_fn=poisoned,
                    mesh=mesh_of(1, 1, 1))
    steps = sorted(int(d) for d in os.listdir(f"{tmp}/checkpoints")
                   if d.isdigit())
    self.assertEqual(steps[-1] if steps else None, bad_step - 1 or None)

  def test_checkpoint_of_other_model_shape_is_refused(self):
    tmp = self._tmp()
    cfg = tiny_config(steps=2, checkpoint_every=2)
    trainer.train(cfg, tmp, train_source=token_source(),
                  mesh=mesh_of(1, 1, 1))
    before = sorted(os.listdir(f"{tmp}/checkpoints/2/state"))
    cfg.model.dim = 48
    with self.assertRaisesRegex(ValueError, "another shape.*embed_vd"):
      trainer.train(cfg, tmp, train_source=token_source(),
                    mesh=mesh_of(1, 1, 1))
    self.assertEqual(sorted(os.listdir(f"{tmp}/checkpoints")), ["2"])
    self.assertEqual(sorted(os.listdir(f"{tmp}/checkpoints/2/state")), before)


class ConfigDefaultsTest(absltest.TestCase):

  def test_missing_field_names_it_and_base_config(self):
    c = common.base_config()
    del c["lora"]
    with self.assertRaisesRegex(ValueError, r"config.lora.rank is missing "
                                r"\(no 'lora'\).*base_config\(\)"):
      trainer.build(c, model=nnx.Linear(2, 2, rngs=nnx.Rngs(0)),
                    mesh=mesh_of(1, 1, 1))

  def test_peak_flops_minus_one_means_no_mfu(self):
    c = common.base_config()
    c.train.peak_flops = -1.0
    self.assertIsNone(trainer.peak_flops_of(c, flops_known=True))
    c.train.peak_flops = 2e12
    self.assertEqual(trainer.peak_flops_of(c, flops_known=True), 2e12)
    c.train.peak_flops = 0.0   # measure, but only when FLOPs are known
    self.assertIsNone(trainer.peak_flops_of(c, flops_known=False))
    # absltest's create_tempdir needs parsed absl flags, which pytest lacks.
    workdir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, workdir, ignore_errors=True)
    writer = metrics_lib.MetricsWriter(
        workdir, total_steps=2, tokens_per_step=8,
        flops_per_step=1e9, peak_flops=None, tensorboard=False)
    writer.start(0)
    self.assertNotIn("perf/mfu", writer.perf(1))


if __name__ == "__main__":
  absltest.main()
