"""`chunked_causal_attention` (attention_impl="chunked") equals XLA's causal
attention: the function itself (GQA, T not a multiple of the block, bf16
inputs), and a decoder whose config asks for it. `chunked_cached_attention`
(a long call into a KV cache, its mask kept as positions) equals XLA's
attention under the dense mask the same positions make, and a chunked
decoder prefills and decodes (the sampler) as the XLA one does.

Tolerances: both compute float32 scores and softmax; the blocked online
softmax sums each row in another order and rescales by exp(m - m'), so
outputs of magnitude ~1 differ by a few float32 ulps per block
(~T / block * eps32 ~ 1e-6 here); 1e-5 leaves room and is far below what a
wrong mask or a skipped block moves (~1e-1).
"""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import attention


def reference(q, k, v, scale):
  return jax.nn.dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                      implementation="xla")


class ChunkedAttentionTest(parameterized.TestCase):

  @parameterized.parameters(
      dict(t=37, n=4, kh=2, block=8),    # GQA, a padded last block
      dict(t=64, n=3, kh=3, block=16),   # MHA, whole blocks
      dict(t=5, n=2, kh=1, block=512),   # one block shorter than the size
  )
  def test_equals_xla_causal_attention(self, t, n, kh, block):
    rng = np.random.default_rng(t)
    q, k, v = (jnp.asarray(rng.normal(size=(2, t, c, 16)), jnp.float32)
               for c in (n, kh, kh))
    fn = jax.jit(lambda q, k, v: attention.chunked_causal_attention(
        q, k, v, scale=0.25, block_size=block))
    got = fn(q, k, v)
    want = reference(q, k, v, 0.25)
    self.assertEqual(got.shape, (2, t, n, 16))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Causal: the first query sees only the first key, so its output is
    # that key's value (for each query head of the KV head).
    np.testing.assert_allclose(got[:, 0], jnp.repeat(v[:, 0], n // kh, 1),
                               rtol=1e-6, atol=1e-6)

  def test_bfloat16_inputs(self):
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 40, 2, 8)), jnp.bfloat16)
               for _ in range(3))
    got = attention.chunked_causal_attention(q, k, v, scale=0.3,
                                             block_size=16)
    self.assertEqual(got.dtype, jnp.bfloat16)
    want = reference(q.astype(jnp.float32), k.astype(jnp.float32),
                     v.astype(jnp.float32), 0.3)
    # float32 inside, one bf16 rounding of the output (2^-8 relative).
    np.testing.assert_allclose(got.astype(jnp.float32), want, rtol=2 ** -7,
                               atol=2 ** -7)

  def test_decoder_with_chunked_attention_gives_the_same_logits(self):
    cfg = decoder_lib.DecoderConfig(
        vocab_size=64, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=8, mlp_dim=64, max_position_embeddings=64)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    chunked = decoder_lib.Decoder(cfg.replace(attention_impl="chunked"),
                                  rngs=nnx.Rngs(0))
    ids = jnp.asarray(np.random.default_rng(2).integers(0, 64, (2, 50)))
    run = nnx.jit(lambda m, x: m(x))
    with mock.patch.object(attention, "chunked_causal_attention",
                           wraps=attention.chunked_causal_attention) as spy:
      got = run(chunked, ids)
    self.assertEqual(spy.call_count, 2)  # each layer, traced once
    np.testing.assert_allclose(got, run(model, ids), rtol=1e-5, atol=1e-5)
    # A call it does not cover (a padding mask) takes XLA's path.
    self.assertIsNone(attention.select_attention_impl(
        None, q_len=50, kv_len=50, dense_mask=False))
    self.assertEqual(attention.select_attention_impl(
        "chunked", q_len=50, kv_len=50, dense_mask=True), "chunked")



def _cache_case(seed=0, b=2, t=37, s=80, n=6, kh=2, h=8, held=20):
  """Queries written at slots [held, held + t) of a cache that already holds
  tokens; row 1 is left-padded (4 padding queries) and has empty slots."""
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(b, t, n, h)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(b, s, kh, h)), jnp.float32)
          for _ in range(2))
  k_pos = -np.ones((b, kh, s), np.int32)
  k_pos[0, :, :held] = np.arange(held)
  k_pos[1, :, 5:held] = np.arange(held - 5)
  valid = np.ones((b, t), bool)
  valid[1, :4] = False
  q_pos = np.zeros((b, t), np.int32)
  q_pos[0] = held + np.arange(t)
  q_pos[1, 4:] = held - 5 + np.arange(t - 4)
  for r in range(b):
    k_pos[r, :, held:held + t] = np.where(valid[r], q_pos[r], -1)
  return q, k, v, jnp.asarray(q_pos), jnp.asarray(k_pos), valid


class ChunkedCachedAttentionTest(parameterized.TestCase):

  # Slot order (`skip`) is a causal decoder's default positions.
  @parameterized.parameters(
      [dict(window=w, skip=sk, causal=c, block=bl)
       for w in (None, 9) for bl in (8, 512)
       for sk, c in ((True, True), (False, True), (False, False))])
  def test_equals_xla_attention_under_the_dense_mask(self, window, skip,
                                                     causal, block):
    q, k, v, q_pos, k_pos, valid = _cache_case()
    mask = attention.PositionMask(
        q_pos_bt=q_pos, k_pos_bks=k_pos,
        slot0=jnp.int32(20) if skip else None, causal=causal,
        sliding_window=window)
    got = jax.jit(lambda q, k, v, m: attention.chunked_cached_attention(
        q, k, v, m, scale=8 ** -0.5, block_size=block))(q, k, v, mask)
    want = jax.nn.dot_product_attention(q, k, v, mask=mask.dense(6),
                                        scale=8 ** -0.5, implementation="xla")
    # Real queries only: a padding query (no allowed key) is uniform over
    # the keys it visits, which need not be all of them (never read).
    np.testing.assert_allclose(np.asarray(got)[valid],
                               np.asarray(want)[valid], rtol=1e-5, atol=1e-5)
    # Padding queries (no allowed key) are finite, not NaN: masked scores
    # are finfo.min, so exp(s - m) never sees -inf - -inf.
    self.assertTrue(np.isfinite(np.asarray(got)).all())

  def test_which_cached_calls_go_chunked(self):
    call = attention.chunked_cached_call
    n = attention.CACHED_ATTENTION_MAX_Q
    self.assertTrue(call("chunked", q_len=n + 1, platform="cpu"))
    self.assertFalse(call("chunked", q_len=n, platform="cpu"))  # decode
    # TPU: splash takes no cache, so long prefills go chunked by default.
    long_q = attention.SPLASH_MIN_AUTO_LEN
    self.assertTrue(call(None, q_len=long_q, platform="tpu"))
    self.assertTrue(call("splash", q_len=long_q, platform="tpu"))
    self.assertFalse(call(None, q_len=long_q - 1, platform="tpu"))
    self.assertFalse(call("xla", q_len=32768, platform="tpu"))
    for platform in ("cpu", "gpu"):
      self.assertFalse(call(None, q_len=32768, platform=platform))

  def test_decoder_prefill_and_decode_equal_xla(self):
    from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
    cfg = decoder_lib.DecoderConfig(
        vocab_size=64, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=8, mlp_dim=64, max_position_embeddings=128)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    chunked = decoder_lib.Decoder(cfg.replace(attention_impl="chunked"),
                                  rngs=nnx.Rngs(0))
    rng = np.random.default_rng(3)
    ids = jnp.asarray(rng.integers(1, 64, (2, 40)))
    valid = np.ones((2, 40), bool)
    valid[1, :7] = False                     # a left-padded row
    out = {}
    for name, m in (("xla", model), ("chunked", chunked)):
      cache = m.init_cache(2, 64)
      with mock.patch.object(attention, "chunked_cached_attention",
                             wraps=attention.chunked_cached_attention) as spy:
        pre = m.forward(ids, attention_mask=jnp.asarray(valid), cache=cache)
      out[name] = (pre.logits, spy.call_count)
      nxt = m.forward(ids[:, -1:], cache=pre.cache)
      out[name] += (nxt.logits,)
    self.assertEqual(out["xla"][1], 0)
    self.assertEqual(out["chunked"][1], 2)   # the prefill, each layer
    np.testing.assert_allclose(np.asarray(out["chunked"][0])[valid],
                               np.asarray(out["xla"][0])[valid],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["chunked"][2], out["xla"][2], rtol=1e-5,
                               atol=1e-5)
    # The sampler (its own prefill and decode loop): the same greedy tokens.
    prompts = [list(rng.integers(1, 64, 33)), list(rng.integers(1, 64, 21))]
    jax.clear_caches()  # so the sampler's prefill is traced under the spy
    with mock.patch.object(attention, "chunked_cached_attention",
                           wraps=attention.chunked_cached_attention) as spy:
      toks = [sampler.generate(m, prompts, max_new_tokens=8).tokens
              for m in (model, chunked)]
    np.testing.assert_array_equal(toks[0], toks[1])
    # Its prefill leaves the default positions to the model, so the kernel
    # may skip the key blocks past each query block (`slot0` set): half
    # the attention FLOPs of a long prompt.
    self.assertEqual(spy.call_count, 2)
    for call in spy.call_args_list:
      self.assertIsNotNone(call.args[3].slot0)


if __name__ == "__main__":
  absltest.main()
