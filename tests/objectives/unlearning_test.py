"""Unlearning objectives against hand-written NumPy log-prob arithmetic."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlab.models import decoder
from jaxlab.objectives import unlearning
from jaxlab.train import losses


def _np_seq_nll(logits, targets, mask):
  logits = logits.astype(np.float64)
  m = logits.max(-1, keepdims=True)
  logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
  tok = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
  return (tok * mask).sum(-1), mask.sum(-1)


def _np_logsig(x):
  return -np.log1p(np.exp(-x))


def _np_objective(name, f, fl, r, rl, ref, lam, beta, gamma):
  nll_f = f.sum() / fl.sum()
  nll_r = r.sum() / rl.sum()
  if name in ("pmc", "idk"):
    return nll_f + lam * nll_r
  if name == "ga":
    return -nll_f
  if name == "gd":
    return lam * nll_r - nll_f
  if name == "npo":
    return -(2 / beta) * np.mean(_np_logsig(beta * (f - ref))) + lam * nll_r
  if name == "simnpo":
    return (-(2 / beta) * np.mean(_np_logsig(beta * (f / fl - gamma)))
            + lam * nll_r)
  raise AssertionError(name)


class UnlearningTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    b, t, v = 3, 6, 11
    self.logits_f = rng.normal(size=(b, t, v)).astype(np.float32) * 2
    self.logits_r = rng.normal(size=(b, t, v)).astype(np.float32) * 2
    self.tgt_f = rng.integers(0, v, size=(b, t))
    self.tgt_r = rng.integers(0, v, size=(b, t))
    # Ragged answer masks (the prompt part is masked out).
    self.mask_f = np.array([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1],
                            [0, 0, 0, 0, 1, 1]], np.float32)
    self.mask_r = np.array([[0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1],
                            [1, 1, 1, 1, 1, 1]], np.float32)
    self.ref = np.array([4.0, 9.5, 1.25], np.float32)

  def test_sequence_nll(self):
    got = unlearning.sequence_nll(jnp.asarray(self.logits_f), self.tgt_f,
                                  self.mask_f)
    want = _np_seq_nll(self.logits_f, self.tgt_f, self.mask_f)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])

  @parameterized.product(name=["pmc", "idk", "ga", "gd", "npo", "simnpo"],
                         lam=[0.5, 1.5], beta=[0.1, 2.5], gamma=[0.0, 0.7])
  def test_matches_numpy(self, name, lam, beta, gamma):
    f, fl = _np_seq_nll(self.logits_f, self.tgt_f, self.mask_f)
    r, rl = _np_seq_nll(self.logits_r, self.tgt_r, self.mask_r)
    want = _np_objective(name, f, fl, r, rl, self.ref, lam, beta, gamma)
    got, _ = unlearning.get(name)(
        jnp.asarray(f, jnp.float32), jnp.asarray(fl, jnp.float32),
        jnp.asarray(r, jnp.float32), jnp.asarray(rl, jnp.float32),
        ref_forget_nll_b=jnp.asarray(self.ref), lam=lam, beta=beta,
        gamma=gamma)
    np.testing.assert_allclose(got, want, rtol=1e-5)

  def test_npo_at_reference_is_log4_over_beta(self):
    # nll == nll_ref: -(2/b) log(1/2) = 2 log 2 / b, independent of lengths.
    nll = jnp.array([3.0, 5.0])
    loss, _ = unlearning.npo(nll, jnp.array([2.0, 4.0]),
                             ref_forget_nll_b=nll, lam=0.0, beta=0.5)
    np.testing.assert_allclose(loss, 2 * np.log(2) / 0.5, rtol=1e-6)

  def test_npo_without_reference_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "forget_ref_nll"):
      unlearning.npo(jnp.ones(2), jnp.ones(2))

  def test_unknown_name(self):
    with self.assertRaisesRegex(ValueError, "valid choices: dpo, ga, gd"):
      unlearning.get("rmu")

  def test_dpo_hand_computed_value_and_gradient(self):
    # chosen (IDK) nll [2, 3], rejected (truth) nll [1, 4], refs [3, 3] and
    # [1, 2], beta 0.5: margins 0.5 * ((3-2)-(1-1)) = 0.5 and
    # 0.5 * ((3-3)-(2-4)) = 1.0; loss = mean log(1 + e^-m) = 0.393669.
    w, l = jnp.array([2.0, 3.0]), jnp.array([1.0, 4.0])
    ref_w, ref_l = jnp.array([3.0, 3.0]), jnp.array([1.0, 2.0])
    lens = jnp.array([2.0, 2.0])

    def f(w, l):
      return unlearning.dpo(w, lens, rejected_nll_b=l, ref_forget_nll_b=ref_w,
                            ref_rejected_nll_b=ref_l, lam=0.0, beta=0.5)[0]

    np.testing.assert_allclose(f(w, l), 0.393669, rtol=1e-5)
    # d/d nll_w = beta * sigmoid(-m) / B: 0.25 * [s(-0.5), s(-1)].
    g_w, g_l = jax.grad(f, argnums=(0, 1))(w, l)
    np.testing.assert_allclose(g_w, [0.094385, 0.067235], rtol=1e-4)
    np.testing.assert_allclose(g_l, [-0.094385, -0.067235], rtol=1e-4)
    # Equals the shared DPO loss on log-probs = -NLL, plus lam * NLL_r.
    r, rl = jnp.array([3.0, 1.0]), jnp.array([2.0, 2.0])
    got = unlearning.dpo(w, lens, r, rl, rejected_nll_b=l,
                         ref_forget_nll_b=ref_w, ref_rejected_nll_b=ref_l,
                         lam=1.5, beta=0.5)[0]
    np.testing.assert_allclose(got, 0.393669 + 1.5 * 4.0 / 4.0, rtol=1e-5)

  def test_dpo_without_rejected_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "rejected_nll_b"):
      unlearning.dpo(jnp.ones(2), jnp.ones(2), ref_forget_nll_b=jnp.ones(2))

  @parameterized.parameters("pmc", "ga", "gd", "npo", "simnpo", "idk", "dpo")
  def test_trainer_loss_matches_numpy_on_a_model(self, name):
    cfg = decoder.DecoderConfig(vocab_size=11, dim=16, num_layers=1,
                                num_heads=2, num_kv_heads=1, mlp_dim=32,
                                init_std=0.5)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    inp_f = rng.integers(0, 11, size=(3, 6))
    inp_r = rng.integers(0, 11, size=(3, 6))
    batch = {"forget_inputs": inp_f, "forget_targets": self.tgt_f,
             "forget_mask": self.mask_f, "retain_inputs": inp_r,
             "retain_targets": self.tgt_r, "retain_mask": self.mask_r,
             "forget_ref_nll": self.ref}
    if name == "dpo":  # rejected rows: the retain arrays, refs reversed
      batch.update(rejected_inputs=inp_r, rejected_targets=self.tgt_r,
                   rejected_mask=self.mask_r, rejected_ref_nll=self.ref[::-1])
    config = ml_collections.ConfigDict({"lam": 1.25, "beta": 0.3,
                                        "gamma": 0.2})
    loss, metrics = losses.get(f"unlearn_{name}")(
        model, jax.tree.map(jnp.asarray, batch), rng=None, config=config)
    f, fl = _np_seq_nll(np.asarray(model(jnp.asarray(inp_f))), self.tgt_f,
                        self.mask_f)
    r, rl = _np_seq_nll(np.asarray(model(jnp.asarray(inp_r))), self.tgt_r,
                        self.mask_r)
    if name == "dpo":
      margin = 0.3 * ((self.ref - f) - (self.ref[::-1] - r))
      want = (-np.mean(_np_logsig(margin))
              + 1.25 * r.sum() / rl.sum())
    else:
      want = _np_objective(name, f, fl, r, rl, self.ref, 1.25, 0.3, 0.2)
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(metrics["forget_nll"], f.sum() / fl.sum(),
                               rtol=1e-5)

  def test_ga_gradient_is_minus_nll_gradient(self):
    f = jnp.array([2.0, 3.0])
    fl = jnp.array([2.0, 2.0])
    g_ga = jax.grad(lambda x: unlearning.gradient_ascent(x, fl)[0])(f)
    g_pmc = jax.grad(lambda x: unlearning.pmc(x, fl)[0])(f)
    chex.assert_trees_all_close(g_ga, -g_pmc)
    np.testing.assert_allclose(g_pmc, [0.25, 0.25])


if __name__ == "__main__":
  absltest.main()
