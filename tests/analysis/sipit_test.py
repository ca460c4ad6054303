"""SipIt inversion (paper Q): exact recovery, policies agree, bad input."""

import tempfile

from absl.testing import absltest
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.analysis import injectivity
from jaxlab.analysis import sipit
from jaxlab.io import hf as hf_io
from jaxlab.testing import hf_fixtures
from jaxlab.train import runner

V = 64
T = 6


def _bigram_data(seed: int = 0) -> dict[str, np.ndarray]:
  """Sequences of a noisy bigram chain over V tokens (the "text")."""
  rng = np.random.default_rng(seed)
  nxt = rng.integers(V, size=V)
  seqs = np.zeros((64, 17), np.int32)
  seqs[:, 0] = rng.integers(V, size=64)
  for t in range(1, 17):
    seqs[:, t] = np.where(rng.random(64) < 0.8, nxt[seqs[:, t - 1]],
                          rng.integers(V, size=64))
  return {"inputs": seqs[:, :-1], "targets": seqs[:, 1:],
          "loss_mask": np.ones((64, 16), np.float32)}


def _models():
  """(imported, trained, hf_model): a tiny random transformers Llama read by
  `jaxlab.io.hf.load`, and a copy trained 30 trainer steps. One config, so
  every compiled SipIt function is shared by both."""
  with tempfile.TemporaryDirectory() as tmp:
    path, hf_model = hf_fixtures.make_hf_checkpoint(
        tmp, "llama", vocab_size=V, return_model=True, init_std=0.1)
    imported, _ = hf_io.load(path)
    trained, _ = hf_io.load(path)
  logs = runner.train_lm(trained, _bigram_data(), steps=30, batch_size=16,
                         lr=1e-2, log_every=29)
  # The runner leaves the weights on its one-device mesh; placing them like
  # the imported ones lets both models share every compiled function.
  nnx.update(trained, jax.tree.map(lambda x: jnp.asarray(np.asarray(x)),
                                   nnx.state(trained)))
  return imported, trained, hf_model, logs


class SipItTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.imported, cls.model, cls.hf_model, cls.logs = _models()
    cls.ids = np.random.default_rng(1).integers(V, size=(2, T))
    cls.states = sipit.layer_states(cls.model, cls.ids)  # [L+1, B, T, D]

  def test_training_moved_the_model(self):
    self.assertLess(self.logs[-1]["loss"], self.logs[0]["loss"] - 0.5)

  def test_trained_exact_recovery_every_layer_both_policies(self):
    medians = {}
    for layer in range(3):
      grad = sipit.invert(self.model, self.states[layer], layer=layer)
      rand = sipit.invert(self.model, self.states[layer], layer=layer,
                          policy="random")
      np.testing.assert_array_equal(grad.ids, self.ids)
      np.testing.assert_array_equal(rand.ids, grad.ids)
      self.assertTrue(grad.verified.all() and rand.verified.all())
      medians[layer] = (grad.stats()["median_proposals"],
                        rand.stats()["median_proposals"])
    print("median proposals per token (gradient, random), |V|/2 =", V / 2,
          medians)
    for g, r in medians.values():
      self.assertLessEqual(g, V / 8)    # far below |V|/2
      self.assertGreater(r, V / 8)      # brute force: about |V|/2
    # The random policy's count is the rank of the true token in its
    # permutation (seeded), whatever the layer.
    self.assertEqual(medians[0][1], medians[2][1])

  def test_imported_recovers_from_transformers_hidden_states(self):
    import torch  # pylint: disable=g-import-not-at-top
    with torch.no_grad():
      out = self.hf_model(input_ids=torch.as_tensor(self.ids),
                          output_hidden_states=True)
    # HF's hidden_states[l] (l < L) is the residual after block l; its last
    # entry has the final norm applied (our final_norm switch).
    for layer, final_norm in ((0, False), (1, False), (2, True)):
      target = out.hidden_states[layer].numpy()
      cfg = sipit.SipItConfig(final_norm=final_norm)
      grad = sipit.invert(self.imported, target, layer=layer, config=cfg)
      rand = sipit.invert(self.imported, target, layer=layer, config=cfg,
                          policy="random")
      np.testing.assert_array_equal(grad.ids, self.ids)
      np.testing.assert_array_equal(rand.ids, self.ids)
      self.assertLessEqual(grad.stats()["median_proposals"], V / 8)

  def test_single_prompt_l2_ball_and_unpacking(self):
    ids, res = sipit.invert(self.model, self.states[2][0], layer=-1,
                            tol=1e-4)
    np.testing.assert_array_equal(ids, self.ids[0])
    self.assertEqual(res.layer, 2)
    self.assertEqual(res.proposals.shape, (T,))
    self.assertIsInstance(res.seconds, float)
    self.assertLess(res.distance.max(), 1e-4)

  def test_tied_rows_are_indistinguishable(self):
    src, dst = int(self.ids[0, 2]), (int(self.ids[0, 2]) + 1) % V
    tied = injectivity.tie_embedding_rows(self.model, src, dst)
    other = self.ids[0].copy()
    other[2] = dst
    both = sipit.layer_states(tied, np.stack([self.ids[0], other]))
    np.testing.assert_array_equal(both[2][0], both[2][1])  # a collision
    res = sipit.invert(tied, both[2][1], layer=2, policy="random")
    # Both tokens verify; which one is returned depends on proposal order.
    self.assertIn(int(res.ids[2]), (src, dst))
    self.assertTrue(res.verified.all())

  def test_bad_input(self):
    good = self.states[1]
    with self.assertRaisesRegex(ValueError, r"width 31 .* \(cfg.dim\) is 32"):
      sipit.invert(self.model, good[..., :31], layer=1)
    with self.assertRaisesRegex(ValueError, r"layer=3 is out of range.*0\.\.2"):
      sipit.invert(self.model, good, layer=3)
    with self.assertRaisesRegex(ValueError, "unknown SipIt policy 'greedy'"):
      sipit.invert(self.model, good, layer=1, policy="greedy")


if __name__ == "__main__":
  absltest.main()
