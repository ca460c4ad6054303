"""`chunked_causal_attention` (attention_impl="chunked") equals XLA's causal
attention: the function itself (GQA, T not a multiple of the block, bf16
inputs), and a decoder whose config asks for it.

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


if __name__ == "__main__":
  absltest.main()
