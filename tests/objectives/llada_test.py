"""Tests for jaxlab.objectives.llada (LLaDA masked-diffusion losses)."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.objectives import llada
from jaxlab.testing import tiny_models
from jaxlab.train import losses

MASK = 63


def _log_softmax(z):
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


class LLaDALossTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder(0, causal=False)
    rng = np.random.default_rng(0)
    cls.x0 = jnp.asarray(rng.integers(0, 60, (3, 12)), jnp.int32)

  def test_registered(self):
    self.assertIs(losses.get("llada"), llada.llada_loss)
    self.assertIs(losses.get("llada_sft"), llada.llada_sft_loss)

  def test_forward_process_rates(self):
    masked, p = llada.forward_process(jax.random.key(0), (4000, 64), eps=0.1)
    p, masked = np.asarray(p), np.asarray(masked)
    self.assertTrue(((p >= 0.1) & (p <= 1.0)).all())
    # Per-row masked fraction tracks p_mask (Bernoulli(p) over 64 tokens).
    np.testing.assert_allclose(masked.mean(1), p, atol=0.25)
    self.assertAlmostEqual(float(np.corrcoef(masked.mean(1), p)[0, 1]), 1.0,
                           delta=0.05)

  def test_pretraining_loss_by_hand(self):
    key = jax.random.key(7)
    loss, metrics = llada.llada_loss(self.model, {"inputs": self.x0},
                                     rng=key, config={"mask_id": MASK})
    masked, p = map(np.asarray, llada.forward_process(key, self.x0.shape))
    x0 = np.asarray(self.x0)
    xt = np.where(masked, MASK, x0)
    logp = _log_softmax(np.asarray(self.model(jnp.asarray(xt),
                                              causal=False)))
    nll = -np.take_along_axis(logp, x0[..., None], -1)[..., 0]
    want = (nll * masked / p[:, None]).sum() / x0.size
    self.assertAlmostEqual(float(loss), float(want), places=4)
    self.assertEqual(float(metrics["masked_tokens"]), masked.sum())

  def test_sft_never_masks_prompt_and_normalises_by_answer(self):
    prompt = np.zeros((3, 12), bool)
    prompt[:, :5] = True
    prompt[1, :9] = True
    batch = {"inputs": self.x0, "prompt_mask": jnp.asarray(prompt)}
    key = jax.random.key(3)
    loss, _ = llada.llada_sft_loss(self.model, batch, rng=key,
                                   config={"mask_id": MASK})
    masked, p = map(np.asarray, llada.forward_process(
        key, self.x0.shape, maskable_bt=jnp.asarray(~prompt)))
    self.assertFalse((masked & prompt).any())
    x0 = np.asarray(self.x0)
    logp = _log_softmax(np.asarray(self.model(
        jnp.asarray(np.where(masked, MASK, x0)), causal=False)))
    nll = -np.take_along_axis(logp, x0[..., None], -1)[..., 0]
    per_seq = (nll * masked).sum(1) / p / (~prompt).sum(1)
    self.assertAlmostEqual(float(loss), float(per_seq.mean()), places=4)

  def test_missing_mask_id(self):
    with self.assertRaisesRegex(ValueError, "config.loss.mask_id"):
      llada.llada_loss(self.model, {"inputs": self.x0},
                       rng=jax.random.key(0), config={})


if __name__ == "__main__":
  absltest.main()
