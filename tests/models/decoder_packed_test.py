"""Packed batches attend through segment ids, not a dense mask.

`Decoder.forward(segment_ids=, positions=)` without a cache or padding mask
hands each layer's attention the segment ids and its sliding window (the
splash kernel's inputs on TPU) instead of one dense `[B, 1, T, T]` mask.
The reference is the dense mask the decoder builds when anything forces it
(an all-True `extra_mask` denies nothing): logits and gradients must be
equal, with global, sliding-window and mixed layers, causal and
bidirectional, unrolled and scanned.
"""

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.models import decoder as decoder_lib


def _packed(b=2, t=24, seed=0, vocab=97):
  """Token ids, segment ids and positions of 2-4 packed documents a row."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, vocab, (b, t))
  seg = np.zeros((b, t), np.int32)
  pos = np.zeros((b, t), np.int32)
  for r in range(b):
    cuts = np.sort(rng.choice(np.arange(3, t - 2), size=int(rng.integers(
        1, 4)), replace=False))
    bounds = [0, *cuts, t]
    for s, (a, z) in enumerate(zip(bounds[:-1], bounds[1:])):
      seg[r, a:z] = s + 1
      pos[r, a:z] = np.arange(z - a)
  return jnp.asarray(ids), jnp.asarray(seg), jnp.asarray(pos)


class PackedSegmentsTest(parameterized.TestCase):

  # Unrolled models have 2 layers: the segment-id path and the dense mask
  # are chosen per layer (one sliding and one global layer in
  # "mixed_layers"), and a second layer already reads the first one's
  # packed states; these eager forwards and backwards cost per layer. The
  # scanned model keeps 4 layers, 2 per scanned period: the scan carries
  # the segment ids across iterations.
  @parameterized.named_parameters(
      ("global", {"num_layers": 2}),
      ("window", {"num_layers": 2, "sliding_window": 5}),
      ("mixed_layers", {"num_layers": 2, "sliding_window": 4, "layer_types": (
          "sliding_attention", "full_attention")}),
      ("bidirectional", {"num_layers": 2, "causal": False}),
      ("scanned_mixed", {"num_layers": 4, "sliding_window": 4,
                         "scan_layers": True,
                         "layer_types": ("sliding_attention",
                                         "full_attention") * 2}),
  )
  def test_equals_the_dense_mask(self, extra):
    cfg = decoder_lib.DecoderConfig(
        vocab_size=97, dim=32, num_heads=4, num_kv_heads=2,
        mlp_dim=64, max_position_embeddings=64, **extra)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    ids, seg, pos = _packed()
    dense = jnp.ones((1, 1, ids.shape[1], ids.shape[1]), bool)

    def loss_fn(mask):
      def loss(m):
        logits = m(ids, positions=pos, segment_ids=seg, extra_mask=mask)
        return jnp.mean(jax.nn.log_softmax(logits)[..., 3]), logits
      return nnx.value_and_grad(loss, has_aux=True)(model)

    (l_s, logits_s), g_s = loss_fn(None)
    (l_d, logits_d), g_d = loss_fn(dense)
    # Same masked softmax on both paths (the XLA path builds the mask per
    # layer instead of once): equal up to float32 reassociation.
    np.testing.assert_allclose(logits_s, logits_d, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(l_s, l_d, atol=1e-6, rtol=1e-6)
    for a, c in zip(jax.tree.leaves(g_s), jax.tree.leaves(g_d)):
      np.testing.assert_allclose(a, c, atol=2e-6, rtol=2e-4)

  def test_documents_do_not_see_each_other(self):
    # The second document's logits equal those of the document alone.
    cfg = decoder_lib.DecoderConfig(vocab_size=97, dim=32, num_layers=2,
                                    num_heads=4, num_kv_heads=2, mlp_dim=64,
                                    sliding_window=3)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(1))
    ids, seg, pos = _packed(b=1, seed=3)
    start = int(np.argmax(np.asarray(seg[0]) == 2))
    end = int(np.sum(np.asarray(seg[0]) <= 2))
    # Jitted rather than dispatched op by op: the same two forwards.
    fwd = nnx.jit(lambda m, x, p, s: m(x, positions=p, segment_ids=s))
    packed = fwd(model, ids, pos, seg)
    alone = fwd(model, ids[:, start:end], None, None)
    np.testing.assert_allclose(packed[:, start:end], alone, atol=2e-5,
                               rtol=2e-5)


if __name__ == "__main__":
  absltest.main()
