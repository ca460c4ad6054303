"""RMSNorm and SwiGLU against NumPy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn import mlp
from jaxlab.nn import norm


class RMSNormTest(absltest.TestCase):

  def test_matches_numpy(self):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(2, 3, 8)).astype(np.float32) * 3
    layer = norm.RMSNorm(8, eps=1e-5)
    scale = rng.normal(size=(8,)).astype(np.float32)
    layer.scale[...] = jnp.asarray(scale)
    ref = scale * x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1,
                                      keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(layer(jnp.asarray(x))), ref,
                               rtol=1e-5, atol=1e-6)

  def test_eps_matters_and_bf16_dtype(self):
    x = jnp.full((1, 4), 1e-3)
    # mean(x^2) = 1e-6; eps = 1e-6 halves it -> 1/sqrt(2).
    np.testing.assert_allclose(norm.RMSNorm(4, eps=1e-6)(x),
                               np.full((1, 4), 1 / np.sqrt(2)), rtol=1e-4)
    y = norm.RMSNorm(4)(x.astype(jnp.bfloat16))
    self.assertEqual(y.dtype, jnp.bfloat16)


class SwiGLUTest(absltest.TestCase):

  def test_matches_numpy(self):
    layer = mlp.SwiGLU(8, 16, rngs=nnx.Rngs(0), init_std=0.5)
    x = np.asarray(jax.random.normal(jax.random.key(1), (2, 3, 8)))
    g = x @ np.asarray(layer.gate_df[...])
    u = x @ np.asarray(layer.up_df[...])
    silu = g / (1 + np.exp(-g))
    ref = (silu * u) @ np.asarray(layer.down_fd[...])
    self.assertGreater(np.abs(ref).max(), 0.1)
    np.testing.assert_allclose(np.asarray(layer(jnp.asarray(x))), ref,
                               rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
