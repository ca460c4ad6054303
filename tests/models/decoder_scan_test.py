"""Scanned decoder (`scan_layers=True`) == the unrolled decoder.

Reference: the unrolled `Decoder` (per-layer `layers[i]`, the path every
other test checks against transformers). The scanned model built with the
same seed must hold the same parameters stacked (checked element by element
against `layers[i]`), and give the same logits, gradients (compared after
`stack_layers` of the unrolled gradients), KV caches, taps, remat
behaviour, LoRA outputs and HF checkpoints.

Tolerances: both layouts run the same float32 operations per layer, only
XLA's fusion/ordering may differ, so differences are rounding: at most
about eps * K * L relative to the largest value, with eps = 2**-23 (float32),
K = 64 the longest contraction and L the number of layers.
"""

import os
import tempfile
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

from jaxlab.io import hf
from jaxlab.models import decoder as decoder_lib
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.train import lora as lora_lib

EPS = float(np.finfo(np.float32).eps)
VOCAB, DIM, MLP = 64, 32, 64


def _cfg(**kw):
  base = dict(vocab_size=VOCAB, dim=DIM, num_layers=4, num_heads=4,
              num_kv_heads=2, mlp_dim=MLP, init_std=0.2)
  base.update(kw)
  return decoder_lib.DecoderConfig(**base)


def _tol(cfg):
  return EPS * max(cfg.dim, cfg.mlp_dim) * cfg.num_layers


def _ids(b=2, t=9, seed=0):
  return jnp.asarray(np.random.RandomState(seed).randint(0, VOCAB, (b, t)),
                     jnp.int32)


def _close(test, got, want, tol, what=""):
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  test.assertEqual(got.shape, want.shape, what)
  scale = max(np.abs(want).max(), 1e-30)
  err = np.abs(got - want).max()
  test.assertLessEqual(err, tol * scale, f"{what}: {err} > {tol} * {scale}")


def _pair(cfg, seed=0):
  """(unrolled, scanned) decoders built from the same seed."""
  unrolled = decoder_lib.Decoder(cfg.replace(scan_layers=False),
                                 rngs=nnx.Rngs(seed))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    scanned = decoder_lib.Decoder(cfg.replace(scan_layers=True),
                                  rngs=nnx.Rngs(seed))
  return unrolled, scanned


_logits = nnx.jit(lambda m, ids: m(ids))
# Cached forward, jitted: op-by-op eager dispatch of every prefill / decode
# step was most of these tests' time; the computation checked is the same.
_forward = nnx.jit(lambda m, ids, mask, cache: m.forward(
    ids, attention_mask=mask, cache=cache))


def _weighted_logit_sum(graphdef, params, rest, ids, w):
  logits = nnx.merge(graphdef, params, rest)(ids)
  return jnp.sum(logits * w), logits


# One jitted value-and-grad keyed by the (static, hashable) graphdef, which
# holds the config: models of equal configs (the no-remat baselines of
# RematPolicyTest, remat=True and "full") reuse one executable instead of a
# new closure's compile per call. The same loss and gradients; the logits of
# the same forward come back as the auxiliary output (a separate `_logits`
# call on the same model and ids was one more compile per model).
_value_and_grad = jax.jit(
    jax.value_and_grad(_weighted_logit_sum, argnums=1, has_aux=True),
    static_argnums=0)


def _loss_and_grads(model, ids, w, with_logits=False):
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  (loss, logits), grads = _value_and_grad(graphdef, params, rest, ids, w)
  return (loss, grads, logits) if with_logits else (loss, grads)


def _as_scanned(model, state):
  """An unrolled model's state (e.g. gradients) in the scanned layout."""
  graphdef, _, rest = nnx.split(model, nnx.Param, ...)
  stacked = decoder_lib.stack_layers(nnx.merge(graphdef, state, rest))
  return nnx.state(stacked, nnx.Param)


class ScanParityTest(parameterized.TestCase):

  def _assert_states_close(self, got, want, tol):
    got_flat = dict(nnx.to_flat_state(got))
    want_flat = dict(nnx.to_flat_state(want))
    self.assertEqual(set(got_flat), set(want_flat))
    for path, var in want_flat.items():
      _close(self, got_flat[path].get_value(), var.get_value(), tol,
             str(path))

  def test_same_seed_same_params_stacked(self):
    cfg = _cfg(qkv_bias=True, qk_norm=True)
    unrolled, scanned = _pair(cfg)
    self.assertLen(scanned.scan_blocks, 1)
    for i, blk in enumerate(unrolled.layers):
      np.testing.assert_array_equal(scanned.scan_blocks[0].attn.q_dnh[i],
                                    blk.attn.q_dnh[...])
      np.testing.assert_array_equal(scanned.scan_blocks[0].mlp.down_fd[i],
                                    blk.mlp.down_fd[...])
      np.testing.assert_array_equal(
          scanned.scan_blocks[0].attn.k_norm.scale[i],
          blk.attn.k_norm.scale[...])
    q = scanned.scan_blocks[0].attn.q_dnh
    self.assertEqual(q.shape, (4, DIM, 4, 8))
    self.assertEqual(tuple(q.get_metadata()["out_sharding"]),
                     ("layers", "embed", "heads", "head_dim"))
    # stack / unstack convert exactly.
    stacked = decoder_lib.stack_layers(unrolled)
    jax.tree.map(np.testing.assert_array_equal,
                 nnx.state(stacked, nnx.Param), nnx.state(scanned, nnx.Param))
    back = decoder_lib.unstack_layers(scanned)
    jax.tree.map(np.testing.assert_array_equal, nnx.state(back, nnx.Param),
                 nnx.state(unrolled, nnx.Param))
    self.assertFalse(back.cfg.scan_layers)
    with self.assertRaisesRegex(AttributeError, "unstack_layers"):
      _ = scanned.layers

  @parameterized.named_parameters(
      ("gqa_untied", dict()),
      ("gqa_tied_remat", dict(tie_embeddings=True, remat=True)),
      ("minimal_remat_bias", dict(remat="minimal", qkv_bias=True)),
      ("mha_qknorm_full_remat", dict(num_kv_heads=4, qk_norm=True,
                                     remat="full")),
  )
  def test_logits_and_grads(self, kw):
    cfg = _cfg(**kw)
    unrolled, scanned = _pair(cfg)
    ids = _ids()
    w = jax.random.normal(jax.random.key(5), (2, 9, VOCAB))
    l0, g0, z0 = _loss_and_grads(unrolled, ids, w, with_logits=True)
    l1, g1, z1 = _loss_and_grads(scanned, ids, w, with_logits=True)
    tol = _tol(cfg)
    _close(self, z1, z0, tol, "logits")
    _close(self, l1, l0, tol * 10, "loss")
    self._assert_states_close(g1, _as_scanned(unrolled, g0), tol)

  @parameterized.named_parameters(("plain", False), ("remat", True))
  def test_kv_cache_prefill_and_decode(self, remat):
    cfg = _cfg(remat=remat)
    unrolled, scanned = _pair(cfg)
    ids = _ids(2, 8, seed=1)
    mask = jnp.asarray([[1] * 5, [0, 0, 1, 1, 1]], bool)  # left padded row
    caches = [m.init_cache(2, 10) for m in (unrolled, scanned)]
    tol = _tol(cfg)
    outs = [_forward(m, ids[:, :5], mask, c)
            for m, c in zip((unrolled, scanned), caches)]
    for step in range(4):
      ref, got = outs
      _close(self, got.logits, ref.logits, tol, f"logits step {step}")
      self.assertEqual(got.cache.num_layers, cfg.num_layers)
      for i in range(cfg.num_layers):
        _close(self, got.cache.k[i], ref.cache.k[i], tol, f"k{i}")
        _close(self, got.cache.v[i], ref.cache.v[i], tol, f"v{i}")
      np.testing.assert_array_equal(got.cache.positions, ref.cache.positions)
      self.assertEqual(int(got.cache.index), int(ref.cache.index))
      if step < 3:
        nxt = ids[:, 5 + step:6 + step]
        outs = [_forward(m, nxt, None, o.cache)
                for m, o in zip((unrolled, scanned), outs)]
    # The eager decode step scans too.
    _close(self, scanned.forward(ids[:, :1], cache=outs[1].cache).logits,
           _forward(unrolled, ids[:, :1], None, outs[0].cache).logits, tol,
           "eager decode")

  def test_taps_and_per_layer_rope_weights(self):
    cfg = _cfg(nope_layers=(1, 3))  # period 2: rope, nope, rope, nope
    unrolled, scanned = _pair(cfg)
    self.assertEqual(cfg.resolved_scan_period, 2)
    self.assertLen(scanned.scan_blocks, 2)
    ids = _ids()
    weights = jax.random.uniform(jax.random.key(2),
                                 (cfg.num_layers, cfg.resolved_head_dim // 2))
    kw = dict(output_hidden_states=True, output_qk=True,
              output_attentions=True, rope_pair_weights=weights)
    ref, got = unrolled.forward(ids, **kw), scanned.forward(ids, **kw)
    tol = _tol(cfg)
    _close(self, got.logits, ref.logits, tol, "logits")
    self.assertLen(got.hidden_states, cfg.num_layers + 1)
    for i, (a, b) in enumerate(zip(got.hidden_states, ref.hidden_states)):
      _close(self, a, b, tol, f"hidden {i}")
    for i in range(cfg.num_layers):
      _close(self, got.qk[i][0], ref.qk[i][0], tol, f"q{i}")
      _close(self, got.qk[i][1], ref.qk[i][1], tol, f"k{i}")
      _close(self, got.attentions[i], ref.attentions[i], tol, f"probs{i}")
    # The per-layer weights matter (else the check above is vacuous).
    plain = unrolled.forward(ids).logits
    self.assertGreater(float(jnp.abs(plain - ref.logits).max()), 1e-3)

  def test_periodic_sliding_window_pattern(self):
    # Window on 2 of every 3 layers, plus NoPE on the global layers.
    types = ("sliding_attention", "sliding_attention", "full_attention") * 2
    cfg = _cfg(num_layers=6, layer_types=types, sliding_window=3,
               nope_layers=(2, 5))
    self.assertEqual(cfg.resolved_scan_period, 3)
    self.assertEqual(cfg.layer_spec(0), decoder_lib.LayerSpec(True, 3, None))
    self.assertEqual(cfg.layer_spec(5),
                     decoder_lib.LayerSpec(False, None, None))
    unrolled, scanned = _pair(cfg)
    self.assertEqual(scanned.scan_blocks[0].attn.q_dnh.shape[0], 2)
    self.assertFalse(scanned.scan_blocks[2].attn.use_rope)
    ids = _ids(2, 10)
    w = jax.random.normal(jax.random.key(6), (2, 10, VOCAB))
    tol = _tol(cfg)
    l0, g0, z0 = _loss_and_grads(unrolled, ids, w, with_logits=True)
    l1, g1 = _loss_and_grads(scanned, ids, w)
    _close(self, l1, l0, tol * 10, "loss")
    self._assert_states_close(g1, _as_scanned(unrolled, g0), tol)
    # Cached decode through the pattern.
    outs = [_forward(m, ids[:, :7], None, m.init_cache(2, 10))
            for m in (unrolled, scanned)]
    steps = [_forward(m, ids[:, 7:8], None, o.cache).logits
             for m, o in zip((unrolled, scanned), outs)]
    _close(self, steps[1], steps[0], tol, "decode")
    # Per-layer windows do something, and all-sliding layer_types is the
    # old one-window-for-all model.
    full = decoder_lib.Decoder(cfg.replace(layer_types=()).replace(
        sliding_window=None), rngs=nnx.Rngs(0))
    self.assertGreater(float(jnp.abs(_logits(full, ids) - z0).max()), 1e-3)
    # (On 2 layers: whether every layer's window comes from layer_types or
    # from the one window is per layer, so the depth does not matter, and
    # two 6-layer unrolled compiles cost more than the rest of the test.)
    all_sliding = decoder_lib.Decoder(_cfg(
        num_layers=2, layer_types=("sliding_attention",) * 2,
        sliding_window=3), rngs=nnx.Rngs(0))
    one_window = decoder_lib.Decoder(_cfg(num_layers=2, sliding_window=3),
                                     rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(_logits(all_sliding, ids),
                                  _logits(one_window, ids))

  def test_sliding_rope_theta_scans(self):
    types = ("sliding_attention", "full_attention") * 2
    cfg = _cfg(layer_types=types, sliding_window=4, sliding_rope_theta=100.0)
    unrolled, scanned = _pair(cfg)
    self.assertEqual(cfg.resolved_scan_period, 2)
    ids = _ids(2, 9)
    _close(self, scanned(ids), unrolled(ids), _tol(cfg), "logits")
    other = decoder_lib.Decoder(cfg.replace(sliding_rope_theta=None),
                                rngs=nnx.Rngs(0))
    self.assertGreater(float(jnp.abs(other(ids) - unrolled(ids)).max()),
                       1e-3)

  def test_non_periodic_pattern(self):
    cfg = _cfg(nope_layers=(0,))
    self.assertEqual(cfg.resolved_scan_period, 4)
    with self.assertWarnsRegex(UserWarning, "no period"):
      scanned = decoder_lib.Decoder(cfg.replace(scan_layers=True),
                                    rngs=nnx.Rngs(0))
    unrolled = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    ids = _ids()
    _close(self, scanned(ids), unrolled(ids), _tol(cfg), "logits")
    with self.assertRaisesRegex(ValueError, "not periodic"):
      _cfg(nope_layers=(0,), scan_period=2)
    with self.assertRaisesRegex(ValueError, "divide"):
      _cfg(scan_period=3)

  def test_lora_on_scanned_model(self):
    cfg = _cfg()
    unrolled, _ = _pair(cfg)
    targets = ("q_dnh", "o_nhd", "gate_df")
    lora_lib.add_lora(unrolled, rank=2, alpha=4.0, targets=targets,
                      rngs=nnx.Rngs(1))
    # Non-zero B so the adapters change the function.
    for blk in unrolled.layers:
      for mod, name in ((blk.attn, "q_dnh"), (blk.attn, "o_nhd"),
                        (blk.mlp, "gate_df")):
        b = getattr(mod, name + "_lora_b")
        b[...] = 0.3 * jax.random.normal(jax.random.key(b.shape[-1]),
                                         b.shape)
    scanned = decoder_lib.stack_layers(unrolled)
    a = scanned.scan_blocks[0].attn.o_nhd_lora_a
    self.assertEqual(a.shape, (4, 4, 8, 2))
    self.assertEqual(tuple(a.get_metadata()["out_sharding"]),
                     ("layers", "heads", "head_dim", "lora_rank"))
    ids = _ids()
    ref = _logits(lora_lib.merge_lora(nnx.clone(unrolled)), ids)
    got = _logits(lora_lib.merge_lora(nnx.clone(scanned)), ids)
    _close(self, got, ref, _tol(cfg), "lora logits")
    self.assertGreater(float(jnp.abs(ref - _logits(unrolled, ids)).max()),
                       1e-3)
    # add_lora directly on a scanned model: stacked factors, one per layer.
    _, fresh = _pair(cfg)
    lora_lib.add_lora(fresh, rank=2, alpha=4.0, targets=targets,
                      rngs=nnx.Rngs(1))
    b = fresh.scan_blocks[0].mlp.gate_df_lora_b
    self.assertEqual(b.shape, (4, 2, MLP))
    b[...] = 0.3 * jax.random.normal(jax.random.key(9), b.shape)
    got = _logits(lora_lib.merge_lora(nnx.clone(fresh)), ids)
    want = _logits(lora_lib.merge_lora(decoder_lib.unstack_layers(fresh)), ids)
    _close(self, got, want, _tol(cfg), "lora on scanned")
    # Gradients flow to the stacked factors only through merge_lora.
    graphdef, lora, rest = nnx.split(fresh, lora_lib.LoRA, ...)

    def loss(lora, rest):
      m = lora_lib.merge_lora(nnx.merge(graphdef, lora, rest, copy=True))
      return jnp.mean(m(ids) ** 2)

    grads = jax.jit(jax.grad(loss))(lora, rest)
    ga = grads["scan_blocks"][0]["mlp"]["gate_df_lora_a"][...]
    self.assertEqual(ga.shape, (4, DIM, 2))
    self.assertTrue(np.all(np.abs(np.asarray(ga)).sum((1, 2)) > 0))


class RematPolicyTest(parameterized.TestCase):

  def test_normalised(self):
    self.assertIs(_cfg(remat="full").remat, True)
    self.assertIs(_cfg(remat="none").remat, False)
    self.assertEqual(_cfg(remat="minimal").remat, "minimal")
    self.assertIs(_cfg(remat="minimal").remat_policy,
                  jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    with self.assertRaisesRegex(ValueError, "remat"):
      _cfg(remat="some")

  @parameterized.product(remat=(True, "full", "minimal", "none"),
                         scan=(False, True))
  def test_same_loss_and_grads_as_no_remat(self, remat, scan):
    cfg = _cfg(num_layers=2, scan_layers=scan)
    ids = _ids()
    w = jax.random.normal(jax.random.key(3), (2, 9, VOCAB))
    base = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    l0, g0 = _loss_and_grads(base, ids, w)
    model = decoder_lib.Decoder(cfg.replace(remat=remat), rngs=nnx.Rngs(0))
    l1, g1 = _loss_and_grads(model, ids, w)
    tol = _tol(cfg)
    _close(self, l1, l0, tol * 10, "loss")
    jax.tree.map(lambda a, b: _close(self, a, b, tol), g1, g0)


class ScanShardingTest(absltest.TestCase):

  def test_layers_axis_replicated_by_default_rules(self):
    from jaxlab import parallel  # pylint: disable=g-import-not-at-top
    mesh = parallel.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    with jax.set_mesh(mesh), nnx.logical_axis_rules(parallel.DEFAULT_RULES):
      abstract = nnx.eval_shape(lambda: decoder_lib.Decoder(
          _cfg(scan_layers=True), rngs=nnx.Rngs(0)))
      shardings = nnx.get_named_sharding(nnx.state(abstract), mesh)
    spec = shardings["scan_blocks"][0]["mlp"]["gate_df"].get_value().spec
    self.assertEqual(tuple(spec), (None, "fsdp", "tensor"))


class ScanHfRoundTripTest(parameterized.TestCase):

  def test_per_layer_attention_is_not_exported(self):
    types = ("sliding_attention", "full_attention")
    for cfg in (_cfg(num_layers=2, layer_types=types, sliding_window=3),
                _cfg(num_layers=2, layer_types=types[1:] * 2,
                     sliding_window=3),
                _cfg(num_layers=2, sliding_window=3, sliding_rope_theta=10.)):
      with self.assertRaisesRegex(ValueError, "per-layer attention"):
        hf.config_to_hf(cfg)
    self.assertEqual(hf.config_to_hf(_cfg(
        num_layers=2, layer_types=types[:1] * 2, sliding_window=3))[
            "architectures"], ["MistralForCausalLM"])

  @parameterized.named_parameters(("untied", False), ("tied", True))
  def test_export_import_and_transformers_parity(self, tied):
    cfg = _cfg(tie_embeddings=tied, max_position_embeddings=64)
    unrolled, scanned = _pair(cfg)
    root = tempfile.mkdtemp()
    path = hf.save(scanned, scanned.cfg, os.path.join(root, "scanned"))
    ref_path = hf.save(unrolled, unrolled.cfg, os.path.join(root, "ref"))

    def tensors(p):
      with safe_open(os.path.join(p, hf.SINGLE_FILE), framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}

    got, want = tensors(path), tensors(ref_path)
    self.assertEqual(set(got), set(want))
    self.assertIn("model.layers.3.mlp.down_proj.weight", got)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name], name)
    loaded, lcfg = hf.load(path, scan_layers=True)
    self.assertTrue(lcfg.scan_layers)
    jax.tree.map(np.testing.assert_array_equal, nnx.state(loaded, nnx.Param),
                 nnx.state(scanned, nnx.Param))
    ids = _ids(2, 12)
    ref = hfx.hf_logits(hfx.load_hf_model(path), np.asarray(ids))
    out = np.asarray(loaded(ids))
    # transformers computes in a different order (torch matmuls, its own
    # RoPE tables): rounding of the same float32 model.
    _close(self, out, ref, _tol(cfg) * 4, "vs transformers")
    self.assertGreater(np.abs(ref).max(), 1.0)


if __name__ == "__main__":
  absltest.main()
