"""Splash attention (Pallas interpret mode) against jaxlab's XLA attention.

The reference is the XLA path of `jaxlab.nn.attention`:
`jax.nn.dot_product_attention(..., implementation="xla")` with the mask of
`make_attention_mask` for arange positions, scale `head_dim ** -0.5`.

Tolerance. Inputs are uniform in [-1, 1]. Every output (and every gradient
entry) is a chain of accumulations: an H-term dot product for each logit, an
S-term softmax normaliser, an S-term weighted sum of values (and, backward,
the same sums again plus the H-term do.v). In float32 each step adds at most
about eps relative to the largest magnitude involved, so both sides are
within `C * eps * (H + 2 S)` of the exact value, relative to the largest
entry; C = 4 covers the two sides and the exp / reciprocal roundings. For
H = 64, S = 256 this is 4 * 1.19e-7 * 576 = 2.7e-4 of the largest entry.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn import attention
from jaxlab.nn import splash
from jaxlab.parallel import mesh as mesh_lib

EPS = float(jnp.finfo(jnp.float32).eps)
BLOCK = 128


def _tol(h: int, s: int) -> float:
  return 4 * EPS * (h + 2 * s)


def _inputs(b, t, n, k, h, seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)

  def u(key, shape):
    return jax.random.uniform(key, shape, jnp.float32, -1, 1)

  return (u(ks[0], (b, t, n, h)), u(ks[1], (b, t, k, h)),
          u(ks[2], (b, t, k, h)), u(ks[3], (b, t, n, h)))


def _xla(q, k, v, *, causal, sliding_window, segment_ids):
  b, t = q.shape[:2]
  pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  mask = attention.make_attention_mask(
      pos, pos, causal=causal, sliding_window=sliding_window,
      q_segment_ids_bt=segment_ids, k_segment_ids_bs=segment_ids)
  return jax.nn.dot_product_attention(q, k, v, mask=mask,
                                      scale=q.shape[-1] ** -0.5,
                                      implementation="xla")


def _splash(q, k, v, *, causal, sliding_window, segment_ids, **kw):
  return splash.splash_attention(q, k, v, causal=causal,
                                 sliding_window=sliding_window,
                                 segment_ids_bt=segment_ids, block_size=BLOCK,
                                 interpret=True, **kw)


def _value_and_grads(fn, q, k, v, w):
  """Output and d(sum(out * w))/d(q, k, v): a bounded cotangent w.

  One jitted forward + VJP (the pullback of `w` is exactly the gradient of
  sum(out * w)): the forward runs once, and the reference is compiled rather
  than dispatched op by op.
  """
  @jax.jit
  def run(q, k, v, w):
    out, pullback = jax.vjp(fn, q, k, v)
    return out, pullback(w)
  return run(q, k, v, w)


def _packed_ids(b, t, lengths):
  ids = np.concatenate([np.full(n, i) for i, n in enumerate(lengths)])
  assert ids.shape == (t,), (ids.shape, t)
  return jnp.asarray(np.broadcast_to(ids, (b, t)), jnp.int32)


class SelectionTest(parameterized.TestCase):

  def _select(self, impl=None, **kw):
    args = dict(platform="tpu", dtype=jnp.bfloat16, q_len=512, kv_len=512,
                dense_mask=False, kv_cache=False)
    args.update(kw)
    return attention.select_attention_impl(impl, **args)

  def test_tpu_picks_splash_for_supported_calls(self):
    self.assertEqual(self._select(), "splash")
    self.assertEqual(self._select(dtype=jnp.float32), "splash")

  @parameterized.named_parameters(
      ("dense_mask", dict(dense_mask=True)),
      ("kv_cache", dict(kv_cache=True)),
      ("decode_t1", dict(q_len=1, kv_len=512, kv_cache=True)),
      ("cross_lengths", dict(q_len=256, kv_len=512)),
      ("short", dict(q_len=16, kv_len=16)),
  )
  def test_tpu_falls_back_to_xla(self, kw):
    self.assertIsNone(self._select(**kw))

  def test_other_platforms(self):
    self.assertIsNone(self._select(platform="cpu"))
    self.assertIsNone(self._select(platform="cpu", dtype=jnp.float32))
    self.assertEqual(self._select(platform="gpu"), "cudnn")
    self.assertIsNone(self._select(platform="gpu", dtype=jnp.float32))
    self.assertIsNone(self._select(platform="gpu", dense_mask=True))

  def test_forced(self):
    self.assertEqual(self._select("splash", platform="cpu"), "splash")
    self.assertEqual(self._select("xla"), "xla")
    with self.assertRaisesRegex(ValueError, "splash"):
      self._select("splash", dense_mask=True)
    with self.assertRaisesRegex(ValueError, "splash"):
      self._select("splash", q_len=1, kv_len=64, kv_cache=True)

  def test_block_sizes(self):
    self.assertEqual(splash.default_block_size(100), 128)
    self.assertEqual(splash.default_block_size(300), 384)
    self.assertEqual(splash.default_block_size(4096), 512)
    bs = splash.make_block_sizes(1000)
    self.assertEqual(splash.padded_length(1000, bs), 1024)
    self.assertEqual(splash.make_block_sizes(1000, 256).block_q, 256)
    with self.assertRaisesRegex(ValueError, "multiple of 128"):
      splash.make_block_sizes(256, 100)


class SplashMatchesXlaTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # name, T, N, K, causal, window, packed segment lengths
      ("causal_mha", 256, 4, 4, True, None, None),
      ("causal_window_gqa2", 256, 4, 2, True, 48, None),
      ("causal_packed_mqa", 256, 4, 1, True, None, (100, 28, 128)),
      ("bidirectional_window_packed_gqa2", 256, 4, 2, False, 40,
       (64, 150, 42)),
      ("padded_causal_gqa2", 200, 4, 2, True, None, None),
      ("padded_packed_window_mqa", 200, 4, 1, True, 30, (90, 110)),
  )
  def test_forward_and_grads(self, t, n, k, causal, window, lengths):
    # One example: the kernel's grid runs every (example, head, block) the
    # same way, and the interpreted grid's cost is linear in it. Batches of
    # several examples are ShardedSplashTest's (B = 4, split over the mesh
    # and compared with the unsharded call).
    b, h = 1, 64
    q, kk, v, w = _inputs(b, t, n, k, h)
    seg = None if lengths is None else _packed_ids(b, t, lengths)
    kw = dict(causal=causal, sliding_window=window, segment_ids=seg)
    out, grads = _value_and_grads(lambda *a: _splash(*a, **kw), q, kk, v, w)
    ref, ref_grads = _value_and_grads(lambda *a: _xla(*a, **kw), q, kk, v, w)
    tol = _tol(h, t)
    for name, a, r in zip(("out", "dq", "dk", "dv"), (out, *grads),
                          (ref, *ref_grads)):
      self.assertEqual(a.shape, r.shape, name)
      scale = float(jnp.abs(r).max())
      self.assertGreater(scale, 0.0, name)
      np.testing.assert_allclose(np.asarray(a), np.asarray(r),
                                 atol=tol * scale, rtol=0, err_msg=name)

  def test_soft_cap_matches_explicit_reference(self):
    b, t, n, k, h, cap = 1, 256, 4, 2, 64, 0.5
    q, kk, v, w = _inputs(b, t, n, k, h, seed=1)
    q = q * 4.0  # logits up to 4 * sqrt(64) = 32: the cap matters

    def ref_fn(q, k, v):
      k = jnp.repeat(k, n // k.shape[2], axis=2)
      v = jnp.repeat(v, n // v.shape[2], axis=2)
      logits = jnp.einsum("btnh,bsnh->bnts", q, k) * h ** -0.5
      logits = cap * jnp.tanh(logits / cap)
      causal = jnp.tril(jnp.ones((t, t), bool))
      p = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
      return jnp.einsum("bnts,bsnh->btnh", p, v)

    def fn(q, k, v):
      return _splash(q, k, v, causal=True, sliding_window=None,
                     segment_ids=None, logits_soft_cap=cap)

    out, grads = _value_and_grads(fn, q, kk, v, w)
    ref, ref_grads = _value_and_grads(ref_fn, q, kk, v, w)
    tol = _tol(4 * h, t)  # q is 4x larger: logits carry 4x the rounding
    for name, a, r in zip(("out", "dq", "dk", "dv"), (out, *grads),
                          (ref, *ref_grads)):
      scale = float(jnp.abs(r).max())
      np.testing.assert_allclose(np.asarray(a), np.asarray(r),
                                 atol=tol * scale, rtol=0, err_msg=name)


class AttentionModuleTest(absltest.TestCase):

  def _modules(self, impl_a, impl_b, **kw):
    a = attention.Attention(32, 4, 2, 64, rngs=nnx.Rngs(0), init_std=0.2,
                            attention_impl=impl_a, splash_block_size=BLOCK,
                            use_rope=False, **kw)
    b = attention.Attention(32, 4, 2, 64, rngs=nnx.Rngs(0), init_std=0.2,
                            attention_impl=impl_b, use_rope=False, **kw)
    return a, b

  def test_splash_module_matches_xla_module(self):
    old = splash.INTERPRET
    splash.INTERPRET = True
    self.addCleanup(setattr, splash, "INTERPRET", old)
    b, t = 2, 256
    x = jax.random.uniform(jax.random.key(3), (b, t, 32), jnp.float32, -1, 1)
    cos = sin = None  # use_rope=False
    seg = _packed_ids(b, t, (120, 136))
    a_splash, a_xla = self._modules("splash", "xla")
    kw = dict(cos_btd=cos, sin_btd=sin, mask=None, is_causal=True,
              segment_ids_bt=seg, sliding_window=64)
    out_s, _ = a_splash(x, **kw)
    out_x, _ = a_xla(x, **kw)
    # Auto on CPU is the XLA path too.
    out_auto, _ = self._modules(None, None)[0](x, **kw)
    scale = float(jnp.abs(out_x).max())
    self.assertGreater(scale, 0.0)
    # One more contraction (the output projection, N * H = 256 terms).
    tol = _tol(64, t) + 4 * EPS * 256
    np.testing.assert_allclose(out_s, out_x, atol=tol * scale, rtol=0)
    np.testing.assert_array_equal(out_auto, out_x)

  def test_forced_splash_rejects_unsupported_calls(self):
    a = self._modules("splash", "xla")[0]
    b, t = 1, 8
    x = jnp.ones((b, t, 32))
    cos = sin = None  # use_rope=False
    mask = jnp.ones((b, 1, t, t), bool)
    with self.assertRaisesRegex(ValueError, "splash"):
      a(x, cos_btd=cos, sin_btd=sin, mask=mask)
    with self.assertRaisesRegex(ValueError, "dense mask"):
      a(x, cos_btd=cos, sin_btd=sin, mask=mask, segment_ids_bt=jnp.zeros(
          (b, t), jnp.int32))


class ShardedSplashTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("gqa2_heads_sharded", 2),
      ("mqa_kv_repeated", 1),
  )
  def test_sharded_equals_unsharded(self, k):
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices: "
                    "XLA_FLAGS=--xla_force_host_platform_device_count=8")
    b, t, n, h = 4, 256, 4, 64
    q, kk, v, w = _inputs(b, t, n, k, h, seed=2)
    seg = _packed_ids(b, t, (128, 128))

    def fn(q, k, v):
      return _splash(q, k, v, causal=True, sliding_window=None,
                     segment_ids=seg)

    out, grads = _value_and_grads(fn, q, kk, v, w)
    mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    with jax.set_mesh(mesh), nnx.logical_axis_rules(mesh_lib.DEFAULT_RULES):
      jaxpr = jax.make_jaxpr(fn)(q, kk, v).jaxpr
      sh_out, sh_grads = _value_and_grads(fn, q, kk, v, w)
    # The kernel runs inside shard_map (per shard), not partitioned by XLA.
    top = [e.primitive.name for e in jaxpr.eqns]
    self.assertIn("shard_map", top)
    self.assertNotIn("pallas_call", top)
    inner = next(e for e in jaxpr.eqns
                 if e.primitive.name == "shard_map").params["jaxpr"]
    self.assertIn("pallas_call", str(inner))
    # Same kernel and blocks per (example, head): only the order of the
    # dk/dv sums over the n query heads of a repeated KV head (MQA: k/v are
    # repeated to n heads under the mesh) can differ, by at most n eps of
    # the largest of the n terms; with inputs of one sign-symmetric
    # distribution the terms are of the size of their sum (factor 4 margin).
    # With 2 KV heads on a 2-way head axis the result is bitwise equal.
    tol = 4 * EPS * n
    for name, a, r in zip(("out", "dq", "dk", "dv"), (sh_out, *sh_grads),
                          (out, *grads)):
      scale = float(jnp.abs(r).max())
      np.testing.assert_allclose(np.asarray(a), np.asarray(r),
                                 atol=tol * scale, rtol=0, err_msg=name)


class TpuLoweringTest(absltest.TestCase):

  def test_lowers_and_compiles_for_v5e_topology(self):
    try:
      import libtpu  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      self.skipTest("libtpu is not installed")
    # Another process may hold libtpu's lock file; compile-only use is safe.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
    try:
      topo = topologies.get_topology_desc(platform="tpu",
                                          topology_name="v5e:2x2")
    except Exception as e:  # pylint: disable=broad-except
      self.skipTest(f"no TPU topology from libtpu: {e}")
    mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 1, "tensor": 2},
                              devices=topo.devices)
    b, t, n, k, h = 4, 1000, 4, 2, 128  # T = 1000 pads to 1024
    spec = jax.sharding.PartitionSpec(("data", "fsdp"), None, "tensor")
    with jax.set_mesh(mesh), nnx.logical_axis_rules(mesh_lib.DEFAULT_RULES):
      sh = jax.sharding.NamedSharding(mesh, spec)
      sq = jax.ShapeDtypeStruct((b, t, n, h), jnp.bfloat16, sharding=sh)
      sk = jax.ShapeDtypeStruct((b, t, k, h), jnp.bfloat16, sharding=sh)
      ss = jax.ShapeDtypeStruct(
          (b, t), jnp.int32,
          sharding=jax.sharding.NamedSharding(
              mesh, jax.sharding.PartitionSpec(("data", "fsdp"), None)))

      def loss(q, k, v, seg):
        out = splash.splash_attention(q, k, v, sliding_window=256,
                                      segment_ids_bt=seg, interpret=False)
        return out.astype(jnp.float32).sum()

      lowered = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(
          sq, sk, sk, ss)
      # Forward, dq and dkv kernels, as Mosaic custom calls.
      self.assertEqual(lowered.as_text().count("tpu_custom_call"), 3)
      lowered.compile()  # compile-only client: nothing runs
      # Under a mesh of TPU devices the auto-selection picks splash although
      # this host's default backend is the CPU (ahead-of-time compilation).
      self.assertEqual(jax.default_backend(), "cpu")
      self.assertEqual(attention.current_platform(), "tpu")
      self.assertEqual(attention.select_attention_impl(
          None, q_len=t, kv_len=t, dense_mask=False), "splash")
    self.assertEqual(attention.current_platform(), "cpu")


if __name__ == "__main__":
  absltest.main()
