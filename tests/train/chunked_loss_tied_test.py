"""Chunked cross-entropy with tied embeddings (and scanned layers).

Regression: `loss.chunk_size > 0` with `tie_embeddings=True` crashed (the
tied LM head's einsum wanted `[B, T, D]`, the chunked loss passes `[C, D]`).
Reference: the plain `lm_loss` over full `[B, T, V]` logits, checked by hand
(float64 log-softmax); the chunked loss must match its value and the
gradient of every parameter, tied and untied, for chunk sizes that divide
B*T = 30 (6) and do not (7).

Tolerance: the two differ only in float32 summation order: the loss in the
order of the per-chunk sums (rtol ~ eps * number of chunks), the gradients
through the same per-token softmax gradients (eps * K with K = 64 the
longest contraction).
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.models import decoder
from jaxlab.train import losses

EPS = float(np.finfo(np.float32).eps)
VOCAB = 64


def _batch():
  rng = np.random.default_rng(0)
  ids = rng.integers(0, VOCAB, (3, 11)).astype(np.int32)
  mask = (rng.random((3, 10)) > 0.3).astype(np.float32)
  return {"inputs": jnp.asarray(ids[:, :-1]),
          "targets": jnp.asarray(ids[:, 1:]), "loss_mask": jnp.asarray(mask)}


def _values_and_grads(model, batch, chunks):
  """The loss and its gradient for each chunk size, and the logits: one
  jitted program (one compile per case instead of one per chunk size, and
  no op-by-op forward)."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def f(params, chunk):
    m = nnx.merge(graphdef, params, rest)
    cfg = ml_collections.ConfigDict({"name": "lm", "chunk_size": chunk})
    return losses.lm_loss(m, batch, rng=None, config=cfg)[0]

  @jax.jit
  def all_chunks(params):
    logits = nnx.merge(graphdef, params, rest)(batch["inputs"])
    return logits, [jax.value_and_grad(f)(params, c) for c in chunks]

  return all_chunks(params)


class ChunkedTiedLossTest(parameterized.TestCase):

  @parameterized.product(tied=(True, False), scan=(False, True))
  def test_chunked_equals_plain(self, tied, scan):
    cfg = decoder.DecoderConfig(vocab_size=VOCAB, dim=32, num_layers=2,
                                num_heads=2, num_kv_heads=1, mlp_dim=64,
                                tie_embeddings=tied, scan_layers=scan,
                                init_std=0.1)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    batch = _batch()
    logits, ((loss0, g0), *chunked) = _values_and_grads(model, batch,
                                                        (0, 6, 7))
    logits = np.asarray(logits, np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    y, m = np.asarray(batch["targets"]), np.asarray(batch["loss_mask"])
    nll = -np.take_along_axis(logp, y[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss0, (nll * m).sum() / m.sum(),
                               rtol=64 * EPS)
    for chunk, (loss1, g1) in zip((6, 7), chunked):
      np.testing.assert_allclose(loss1, loss0, rtol=32 * EPS)
      flat0 = dict(nnx.to_flat_state(g0))
      for path, var in nnx.to_flat_state(g1):
        want = np.asarray(flat0[path].get_value())
        got = np.asarray(var.get_value())
        np.testing.assert_allclose(
            got, want, rtol=0, atol=64 * EPS * np.abs(want).max(),
            err_msg=f"chunk {chunk} {path}")

  def test_unembed_any_leading_shape(self):
    cfg = decoder.DecoderConfig(vocab_size=VOCAB, dim=32, num_layers=1,
                                num_heads=2, num_kv_heads=1, mlp_dim=64,
                                tie_embeddings=True)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    h = jax.random.normal(jax.random.key(0), (2, 3, 32))
    full = model.unembed(h)
    self.assertEqual(full.shape, (2, 3, VOCAB))
    np.testing.assert_array_equal(model.unembed(h.reshape(6, 32)),
                                  full.reshape(6, VOCAB))
    # Independent: RMSNorm then h @ E^T in float64.
    h64 = np.asarray(h, np.float64)
    normed = h64 / np.sqrt((h64 ** 2).mean(-1, keepdims=True) + cfg.norm_eps)
    ref = (normed * np.asarray(model.final_norm.scale[...])) @ np.asarray(
        model.embed_vd[...], np.float64).T
    np.testing.assert_allclose(full, ref, rtol=0,
                               atol=64 * EPS * np.abs(ref).max())


if __name__ == "__main__":
  absltest.main()
