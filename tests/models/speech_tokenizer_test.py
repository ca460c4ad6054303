"""The StableToken speech tokenizer and its registered loss."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.models import registry
from jaxlab.models import speech_tokenizer as st
from jaxlab.nn import quantizers as q
from jaxlab.objectives import stabletoken as obj
from jaxlab.train import losses

TINY = {"name": "speech_tokenizer", "n_mels": 16, "dim": 16, "num_heads": 2,
        "mlp_dim": 32, "lower_layers": 1, "upper_layers": 1, "bits": 4,
        "n_voters": 3, "num_clean": 2}


class SpeechTokenizerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    spec = registry.get_spec(TINY, vocab_size=6, seed=0)
    cls.model = nnx.jit(spec.factory)()   # one compile, not one per op
    rng = np.random.default_rng(0)
    cls.feats = jnp.asarray(rng.standard_normal((2, 24, 16)), jnp.float32)
    cls.noisy = cls.feats + 0.5 * jnp.asarray(
        rng.standard_normal((2, 24, 16)), jnp.float32)
    cls.lengths = jnp.array([24, 17])

  def test_registry_builds_it_and_rejects_unknown_fields(self):
    self.assertIsInstance(self.model, st.SpeechTokenizer)
    self.assertEqual(self.model.cfg.vocab_size, 6)
    self.assertIsInstance(self.model.quantizer, q.VotingLFQ)
    with self.assertRaisesRegex(ValueError, "model.voters is not a "
                                "SpeechTokenizerConfig field"):
      registry.get_spec({**TINY, "voters": 3})
    with self.assertRaisesRegex(ValueError, "model.n_voters must be a "
                                "positive odd number.*n_voters=2"):
      registry.get_spec({**TINY, "n_voters": 2})

  def test_tokens_are_the_bitwise_majority_at_25hz(self):
    idx, branch, mask = st.tokenize(self.model, self.feats, self.lengths)
    # 24 frames -> 12 after the stride-2 conv -> 6 tokens; 17 -> 9 -> 4.
    np.testing.assert_array_equal(mask.sum(1), [6, 4])
    bits = np.asarray(q.index_to_bits(jnp.asarray(branch), 4))  # [B,T,n,d]
    maj = np.where((bits > 0).sum(2) * 2 > 3, 1, 0)
    np.testing.assert_array_equal(idx, (maj * 2 ** np.arange(4)).sum(-1))

  def test_registered_loss_is_the_weighted_sum_of_its_terms(self):
    cfg = ml_collections.ConfigDict({
        "name": "stabletoken", "routing": "noise_aware",
        "consensus_weight": 0.25, "commit_weight": 0.5,
        "entropy_weight": 1.0, "entropy_temperature": 0.1})
    batch = {"features": self.feats, "features_noisy": self.noisy,
             "frame_lengths": self.lengths,
             "labels": jnp.array([[1, 2, 3], [4, 5, 0]]),
             "label_mask": jnp.array([[1, 1, 1], [1, 1, 0]], bool)}
    key = jax.random.key(7)
    route = q.noisy_branch_mask(key, 2, 3, 2)

    @nnx.jit
    def both(model, batch):  # one compilation for both paths
      loss, m = losses.get("stabletoken")(model, batch, rng=key, config=cfg)
      out = model(batch["features"], batch["frame_lengths"], train=True,
                  features_noisy=batch["features_noisy"], route_mask=route)
      ctc = obj.ctc_loss(out["logits"], out["token_mask"], batch["labels"],
                         batch["label_mask"])
      ent, _ = obj.lfq_entropy_loss(out["quant"].branch_pre,
                                    out["token_mask"], temperature=0.1)
      h_noisy, _ = model.encode(batch["features_noisy"],
                                batch["frame_lengths"])
      pn = model.quantizer.branch_projections(h_noisy)
      pc = model.quantizer.branch_projections(out["h"])
      return loss, m, out, ctc, ent, pn, pc

    loss, m, out, ctc, ent, pn, pc = both(self.model, batch)
    # By hand from the model's outputs with the same routing draw.
    qo, mask = out["quant"], out["token_mask"]
    p = np.asarray(qo.branch_pre)
    mk = np.asarray(mask)
    signs = np.where(p >= 0, 1.0, -1.0)
    cons = ((p - p.mean(2, keepdims=True)) ** 2).mean((2, 3))[mk].mean()
    commit = ((p - signs.mean(2, keepdims=True)) ** 2).mean((2, 3))[mk].mean()
    want = float(ctc) + 0.25 * cons + 0.5 * commit + float(ent)
    self.assertAlmostEqual(float(loss), want, places=4)
    self.assertAlmostEqual(float(m["consensus"]), cons, places=5)
    self.assertAlmostEqual(float(m["commit"]), commit, places=5)
    # Routed branches read h' (the noisy encoding), the others h.
    np.testing.assert_allclose(
        p, np.where(np.asarray(route)[:, None, :, None], pn, pc), atol=1e-5)

  def test_routing_errors(self):
    batch = {"features": self.feats, "frame_lengths": self.lengths}
    with self.assertRaisesRegex(ValueError, "needs batch\\['features_noisy'\\]"):
      obj.route_inputs(self.model, batch, rng=jax.random.key(0),
                       config={"routing": "noise_aware"})
    with self.assertRaisesRegex(ValueError, "loss.routing='both'; valid"):
      obj.route_inputs(self.model, batch, rng=jax.random.key(0),
                       config={"routing": "both"})

  def test_ctc_collapse(self):
    self.assertEqual(st.ctc_collapse(np.array([0, 3, 3, 0, 3, 2, 2, 0])),
                     [3, 3, 2])


if __name__ == "__main__":
  absltest.main()
