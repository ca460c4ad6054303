"""Unlearning probes: drift, the MC least-likely attack, real-authors QA."""

import math
import types

from absl.testing import absltest
from flax import nnx
import jax
import numpy as np

from jaxlab.data import tokenizers
from jaxlab.data.synthetic import real_authors
from jaxlab.evals import unlearning as ue
from jaxlab.models import decoder


def _qa(answer, value, attribute="city"):
  return types.SimpleNamespace(answer=answer, value=value,
                               attribute=attribute)


class PureRulesTest(absltest.TestCase):

  def test_logprob_drift_hand_computed(self):
    new = np.array([[-1.0, -2.0, 0.0], [-3.0, 0.0, 0.0]])
    ref = np.array([[-0.5, -2.5, 9.0], [-1.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    # d = [-0.5, +0.5, -2.0] (the masked-out 9.0 is ignored).
    got = ue.logprob_drift(new, ref, mask)
    self.assertAlmostEqual(got["drift"], -2.0 / 3.0)
    self.assertAlmostEqual(got["abs_drift"], 1.0)
    self.assertAlmostEqual(got["ratio_drop"], 1.0 - math.exp(-2.0 / 3.0))
    with self.assertRaisesRegex(ValueError, "no token"):
      ue.logprob_drift(new, ref, np.zeros_like(mask))

  def test_least_likely_choice_picks_the_lowest_first_on_ties(self):
    self.assertEqual(ue.least_likely_choice([-1.2, -3.4, -0.5, -3.4]), 1)
    self.assertEqual(ue.least_likely_choice([0.0, 0.0]), 0)

  def test_mc_attack_accuracy_hand_computed(self):
    scores = np.array([[-1.0, -5.0, -2.0],    # least 1, most 0
                       [-4.0, -3.0, -0.1],    # least 0, most 2
                       [-2.0, -2.0, -9.0]])   # least 2, most 0 (tie: first)
    got = ue.mc_attack_accuracy(scores, [1, 0, 1])
    self.assertAlmostEqual(got["mc_least_likely_acc"], 2.0 / 3.0)
    self.assertAlmostEqual(got["mc_most_likely_acc"], 0.0)
    with self.assertRaisesRegex(ValueError, "N = len"):
      ue.mc_attack_accuracy(scores, [0, 1])

  def test_mc_options(self):
    items = [_qa("Ab Cd was born in Oslo.", "Oslo"),
             _qa("Ef Gh was born in Rome.", "Rome")]
    pool = {"city": ["Oslo", "Rome", "Lima", "Kyiv", "Oslo"]}
    options, correct = ue.mc_options(items, pool, num_options=4, seed=3)
    self.assertEqual(sorted(options[0]),
                     sorted(f"Ab Cd was born in {c}."
                            for c in ("Oslo", "Rome", "Lima", "Kyiv")))
    self.assertEqual(options[0][correct[0]], "Ab Cd was born in Oslo.")
    self.assertEqual(options[1][correct[1]], "Ef Gh was born in Rome.")
    with self.assertRaisesRegex(ValueError, "num_options - 1 = 4"):
      ue.mc_options(items, pool, num_options=5)

  def test_unrelated_value_texts(self):
    items = [_qa("a", "Oslo"), _qa("b", "Oslo"), _qa("c", "teal", "colour")]
    prefixes, conts = ue.unrelated_value_texts(items)
    n_city = len(ue.UNRELATED_CONTEXTS["city"])
    n_col = len(ue.UNRELATED_CONTEXTS["colour"])
    self.assertEqual(conts, ["Oslo"] * n_city + ["teal"] * n_col)
    self.assertEqual(prefixes[:n_city], list(ue.UNRELATED_CONTEXTS["city"]))

  def test_real_authors(self):
    qa = real_authors.real_authors_qa(2)
    self.assertEqual(qa[1].question, "Who wrote the book Hamlet?")
    self.assertEqual(qa[1].answer,
                     "The book Hamlet was written by William Shakespeare.")
    self.assertEqual(qa[1].value, "William Shakespeare")
    with self.assertRaisesRegex(ValueError, "num real authors"):
      real_authors.real_authors_qa(99)


class ModelProbesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tok = tokenizers.ByteTokenizer()
    cfg = decoder.DecoderConfig(vocab_size=cls.tok.vocab_size, dim=16,
                                num_layers=1, num_heads=2, num_kv_heads=1,
                                mlp_dim=32, init_std=0.5)
    cls.model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    cls.other = decoder.Decoder(cfg, rngs=nnx.Rngs(1))

  def test_continuation_logprobs_equal_direct_log_softmax(self):
    prefixes, conts = ["Q: x\nA: ", "hi "], ["Oslo.", "yo"]
    logp, mask = ue.continuation_logprobs(self.model, self.tok, prefixes,
                                          conts, max_len=16, batch_size=4)
    for i, (p, c) in enumerate(zip(prefixes, conts)):
      p_ids = self.tok.encode(p, add_bos=True)
      ids = p_ids + self.tok.encode(c)
      logits = np.asarray(self.model(np.asarray([ids[:-1]])))[0]
      ls = jax.nn.log_softmax(logits.astype(np.float64), -1)
      want = [ls[t - 1, ids[t]] for t in range(len(p_ids), len(ids))]
      self.assertEqual(mask[i].sum(), len(c))
      np.testing.assert_allclose(logp[i][mask[i] > 0], want, rtol=1e-4,
                                 atol=1e-5)

  def test_value_drift_and_mc_attack_on_a_model(self):
    items = [_qa("Ab was born in Oslo.", "Oslo"),
             _qa("Cd was born in Rome.", "Rome")]
    self.assertEqual(ue.value_drift(self.model, self.model, self.tok, items,
                                    max_len=64)["abs_drift"], 0.0)
    d = ue.value_drift(self.model, self.other, self.tok, items, max_len=64)
    self.assertGreater(d["abs_drift"], 0.0)
    # The attack picks exactly the argmin of the options' mean log-lik.
    pool = {"city": ["Oslo", "Rome", "Lima", "Kyiv"]}
    prompts = ["Q: a\nA: ", "Q: b\nA: "]
    got = ue.mc_attack(self.model, self.tok, items, prompts, pool,
                       num_options=3, seed=0, max_len=32)
    options, correct = ue.mc_options(items, pool, num_options=3, seed=0)
    hits = []
    for p, opts, c in zip(prompts, options, correct):
      lp, m = ue.continuation_logprobs(self.model, self.tok, [p] * 3, opts,
                                       max_len=32)
      hits.append(int(np.argmin(lp.sum(-1) / m.sum(-1))) == c)
    self.assertAlmostEqual(got["mc_least_likely_acc"], np.mean(hits))


if __name__ == "__main__":
  absltest.main()
