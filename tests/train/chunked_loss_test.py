"""Chunked cross-entropy (`config.loss.chunk_size`) equals the plain LM loss.

Reference: the plain `lm_loss` over full `[B, T, V]` logits; the chunked
path must give the same loss and the same gradient for every parameter,
with a chunk size that does not divide B*T (padding rows masked out) and
a loss mask with zeros.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.models import decoder
from jaxlab.train import losses


class ChunkedLossTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cfg = decoder.DecoderConfig(vocab_size=97, dim=32, num_layers=1,
                                num_heads=2, num_kv_heads=1, mlp_dim=64)
    cls.model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 97, (3, 11)).astype(np.int32)
    mask = (rng.random((3, 10)) > 0.3).astype(np.float32)
    cls.batch = {"inputs": jnp.asarray(ids[:, :-1]),
                 "targets": jnp.asarray(ids[:, 1:]),
                 "loss_mask": jnp.asarray(mask)}

  def _value_and_grad(self, chunk):
    graphdef, params, rest = nnx.split(self.model, nnx.Param, ...)
    cfg = ml_collections.ConfigDict({"name": "lm", "chunk_size": chunk})

    @jax.jit
    def f(params):
      m = nnx.merge(graphdef, params, rest)
      loss, aux = losses.lm_loss(m, self.batch, rng=None, config=cfg)
      return loss, aux["tokens"]
    (loss, tokens), grads = jax.value_and_grad(f, has_aux=True)(params)
    return loss, tokens, grads

  def test_chunked_equals_plain_loss_and_gradient(self):
    loss0, tok0, g0 = self._value_and_grad(0)
    # Hand check of the plain loss: mean NLL over masked tokens.
    logits = np.asarray(self.model(self.batch["inputs"]), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    y = np.asarray(self.batch["targets"])
    m = np.asarray(self.batch["loss_mask"])
    nll = -np.take_along_axis(logp, y[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss0, (nll * m).sum() / m.sum(), rtol=1e-5)
    # 7 does not divide 30 rows: the padded rows must not count.
    loss1, tok1, g1 = self._value_and_grad(7)
    np.testing.assert_allclose(loss1, loss0, rtol=1e-6)
    self.assertEqual(float(tok1), float(tok0))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        a, b, rtol=1e-5, atol=1e-7), g1, g0)

  def test_model_without_unembed_names_the_field(self):
    cfg = ml_collections.ConfigDict({"name": "lm", "chunk_size": 4})
    with self.assertRaisesRegex(ValueError, "config.loss.chunk_size"):
      losses.lm_loss(lambda x, **kw: x, self.batch, rng=None, config=cfg)


if __name__ == "__main__":
  absltest.main()
