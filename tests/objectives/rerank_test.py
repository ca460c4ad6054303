"""Rerank objectives: W formulas vs NumPy, surrogate gradients == native."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.objectives import rerank
from jaxlab.train import losses


def _np_sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _np_weights(name, zy, zn, temperature, tau):
  """NumPy reference of spec 5 / 7 (positive in column 0)."""
  if name == "cl":
    e = np.exp(zy / temperature - np.max(zy / temperature, -1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    w = p.copy()
    w[:, 0] = 1.0 - p[:, 0]
    return w / temperature
  s = _np_sigmoid(zy - zn)
  if name == "sft":
    w = s.copy()
    w[:, 0] = 1.0 - s[:, 0]
    return w
  if name == "constant":
    return np.ones_like(zy)
  if name == "constant_tau_mask":
    w = (s >= tau).astype(np.float64)
    w[:, 0] = (s[:, 0] <= 1.0 - tau)
    return w
  raise KeyError(name)


def _setup(seed, b=3, g=5, d=8, v=11, k=3):
  """Random answer states h [B, G, D], unembedding M [D, V], random head R."""
  keys = jax.random.split(jax.random.key(seed), 3)
  h = jax.random.normal(keys[0], (b, g, d))
  m = jax.random.normal(keys[1], (d, v))
  r = jax.random.normal(keys[2], (d, 2))
  return h, m, r


def _heads(h, m, r, k=3):
  z = h @ m  # [B, G, V]; yes = 0, no = 1; label sets 0..k-1 / k..2k-1
  return rerank.RerankHeads(z_yes=z[..., 0], z_no=z[..., 1],
                            z_label_pos=z[..., :k], z_label_neg=z[..., k:2 * k],
                            z_rand=h @ r)


class WeightTest(parameterized.TestCase):

  @parameterized.product(name=["cl", "sft", "constant", "constant_tau_mask"],
                         temperature=[1.0, 0.5], tau=[0.1, 0.2])
  def test_weight_matches_numpy(self, name, temperature, tau):
    rng = np.random.default_rng(0)
    zy = rng.normal(size=(6, 5)) * 3
    zn = rng.normal(size=(6, 5)) * 3
    got = rerank.weights(name, jnp.asarray(zy), jnp.asarray(zn),
                         temperature=temperature, mask_tau=tau)
    np.testing.assert_allclose(np.asarray(got),
                               _np_weights(name, zy, zn, temperature, tau),
                               rtol=1e-5, atol=1e-6)

  def test_tau_mask_hand_values(self):
    # s = sigmoid(u): positive learned (s=.95), negatives .05 (learned), .5.
    u = np.log(np.array([[.95 / .05, .05 / .95, 1.0]]))
    w = rerank.weights("constant_tau_mask", jnp.asarray(u), jnp.zeros((1, 3)),
                       mask_tau=0.1)
    np.testing.assert_allclose(np.asarray(w), [[0., 0., 1.]])

  def test_cl_weights_smaller_than_sft_for_small_groups(self):
    # Spec 5: group-normalised W_CL sums to 2 W+ over the group; per-document
    # SFT weights do not shrink with the group.
    zy = jnp.zeros((1, 5))
    zn = jnp.zeros((1, 5))
    np.testing.assert_allclose(rerank.weights("cl", zy, zn), [[.8] + [.2] * 4])
    np.testing.assert_allclose(rerank.weights("sft", zy, zn), [[.5] * 5])

  def test_unknown_names(self):
    with self.assertRaisesRegex(ValueError, "valid choices: cl, constant"):
      rerank.weights("nope", jnp.zeros((1, 2)), jnp.zeros((1, 2)))
    h, m, r = _setup(0)
    with self.assertRaisesRegex(ValueError, "valid choices: cl, multi_token, "
                                "random, random_cl"):
      rerank.direction_score("nope", _heads(h, m, r))
    with self.assertRaisesRegex(ValueError, "objective"):
      rerank.group_loss(_heads(h, m, r), objective="dpo")


class GradientTest(parameterized.TestCase):

  @parameterized.parameters(0, 1, 2)
  def test_surrogate_gradient_equals_native_cl(self, seed):
    h, m, r = _setup(seed)
    for temperature in (1.0, 0.3):
      native = lambda h, m: rerank.native_cl_loss((h @ m)[..., 0],
                                                  temperature)
      surrogate = lambda h, m: rerank.group_loss(
          _heads(h, m, r), objective="url", weight="cl", direction="cl",
          temperature=temperature)[0]
      g_nat = jax.grad(native, argnums=(0, 1))(h, m)
      g_sur = jax.grad(surrogate, argnums=(0, 1))(h, m)
      chex.assert_trees_all_close(g_sur, g_nat, rtol=1e-5, atol=1e-6)

  def test_random_head_equals_native_losses_on_that_head(self):
    """URL(W, D_Rand) == native loss of the replacement head R (spec 8)."""
    h, m, r = _setup(4)
    for w_d in ("cl", "sft"):
      sur = lambda h, r: rerank.group_loss(_heads(h, m, r), weight=w_d,
                                           direction="random")[0]
      nat = lambda h, r: rerank.group_loss(
          rerank.RerankHeads(z_yes=(h @ r)[..., 0], z_no=(h @ r)[..., 1]),
          objective=w_d)[0]
      chex.assert_trees_all_close(jax.grad(sur, (0, 1))(h, r),
                                  jax.grad(nat, (0, 1))(h, r), rtol=1e-5,
                                  atol=1e-6)

  @parameterized.parameters(0, 1, 2)
  def test_surrogate_gradient_equals_native_sft(self, seed):
    h, m, r = _setup(seed)
    native = lambda h, m: rerank.native_sft_loss((h @ m)[..., 0],
                                                 (h @ m)[..., 1])
    surrogate = lambda h, m: rerank.group_loss(
        _heads(h, m, r), objective="url", weight="sft", direction="sft")[0]
    g_nat = jax.grad(native, argnums=(0, 1))(h, m)
    g_sur = jax.grad(surrogate, argnums=(0, 1))(h, m)
    chex.assert_trees_all_close(g_sur, g_nat, rtol=1e-5, atol=1e-6)

  @parameterized.product(weight=["cl", "sft", "constant", "constant_tau_mask"],
                         direction=["cl", "sft", "random", "random_cl",
                                    "random_sft", "multi_token"])
  def test_gradient_is_w_times_d(self, weight, direction):
    """dL/dh(b, 0) = -W+ D / B and dL/dh(b, i) = +W_i- D / B (spec 5)."""
    h, m, r = _setup(7)
    b = h.shape[0]
    loss = lambda h: rerank.group_loss(_heads(h, m, r), weight=weight,
                                       direction=direction)[0]
    grad = np.asarray(jax.grad(loss)(h))
    mn, rn = np.asarray(m), np.asarray(r)
    # D_Rand replaces the yes/no rows: weights read R's logits too.
    head = rn if direction.startswith("random") else mn
    z = np.asarray(h) @ head
    w = _np_weights(weight, z[..., 0], z[..., 1], 1.0, 0.1)
    rand_form = {"random": "cl" if weight == "cl" else "sft",
                 "random_cl": "cl", "random_sft": "sft"}.get(direction)
    d = {"cl": mn[:, 0], "sft": mn[:, 0] - mn[:, 1],
         "multi_token": mn[:, :3].mean(-1) - mn[:, 3:6].mean(-1)}.get(
             direction, rn[:, 0] if rand_form == "cl" else rn[:, 0] - rn[:, 1])
    sign = np.array([-1.0] + [1.0] * (h.shape[1] - 1))
    want = (sign[None, :, None] * w[..., None] * d[None, None, :]) / b
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)

  def test_native_loss_values(self):
    zy = jnp.array([[2.0, 1.0, 0.0]])
    zn = jnp.array([[0.0, 0.0, 1.0]])
    want_cl = -np.log(np.exp(2) / (np.exp(2) + np.exp(1) + 1))
    self.assertAlmostEqual(float(rerank.native_cl_loss(zy)), want_cl, 5)
    want_sft = (-np.log(_np_sigmoid(2.0)) - np.log(_np_sigmoid(-1.0)) -
                np.log(_np_sigmoid(1.0)))
    self.assertAlmostEqual(float(rerank.native_sft_loss(zy, zn)), want_sft, 5)

  def test_registered_loss_and_metrics(self):
    h, m, r = _setup(3)

    class Model:
      def score_heads(self, batch):
        del batch
        return _heads(h, m, r)

    fn = losses.get("rerank")
    loss, metrics = fn(Model(), {}, rng=jax.random.key(0),
                       config={"objective": "sft"})
    z = np.asarray(h @ m)
    self.assertAlmostEqual(
        float(loss), float(rerank.native_sft_loss(z[..., 0], z[..., 1])), 5)
    w = _np_weights("sft", z[..., 0], z[..., 1], 1.0, 0.1)
    self.assertAlmostEqual(float(metrics["w_pos"]), w[:, 0].mean(), 5)
    self.assertAlmostEqual(float(metrics["w_neg"]), w[:, 1:].mean(), 5)
    wc = _np_weights("cl", z[..., 0], z[..., 1], 1.0, 0.1)
    self.assertAlmostEqual(float(metrics["w_cl_neg"]), wc[:, 1:].mean(), 5)


if __name__ == "__main__":
  absltest.main()
