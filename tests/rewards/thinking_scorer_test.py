"""Tests for the trainable tiny thinking reward model."""

import chex
import jax
from flax import nnx
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest

from jaxlab.rewards import thinking


def _data(n, seed, pos_frac):
  """Rule: the thinking checks its result ('verify') -> 0.9, else 0.1.

  Negatives use the same vocabulary minus the cue word, and the question is
  noise, so only the thinking's cue separates the classes.
  """
  rng = np.random.default_rng(seed)
  filler = ["add", "the", "numbers", "carry", "one", "so", "we", "get",
            "then", "result", "is", "step"]
  qs, ts, ys = [], [], []
  for _ in range(n):
    a, b = rng.integers(0, 50, 2)
    words = list(rng.choice(filler, 6))
    pos = rng.random() < pos_frac
    if pos:
      words.insert(int(rng.integers(0, 6)), "verify")
    qs.append(f"what is {a} + {b} ?")
    ts.append(" ".join(words))
    ys.append(0.9 if pos else 0.1)
  return qs, ts, np.array(ys, np.float32)


def _to_float64(net):
  """Casts `net`'s weights to float64 and makes each layer compute in it."""
  nnx.update(net, jax.tree.map(lambda x: jnp.asarray(x, jnp.float64),
                               nnx.state(net, nnx.Param)))
  for layer in (net.emb, net.h, net.o):
    layer.dtype = jnp.float64  # nnx.Embed otherwise computes in param_dtype


class TinyScorerTest(absltest.TestCase):

  def test_learns_separable_rule_from_balanced_data(self):
    # Imbalanced training data (15 % positives): the balancer keeps equal
    # numbers of 0.1- and 0.9-labelled rows.
    qs, ts, ys = _data(600, 0, pos_frac=0.15)
    n_pos = int((ys > 0.5).sum())
    scorer = thinking.TinyThinkingScorer()
    info = scorer.fit(qs, ts, ys, steps=400, seed=0)
    self.assertEqual(info["num_train"], 2 * n_pos)
    tq, tt, ty = _data(200, 1, pos_frac=0.5)
    s = scorer(tq, tt)
    self.assertEqual(s.shape, (200,))
    self.assertTrue(np.all((s >= 0) & (s <= 1)))
    pos, neg = s[ty > 0.5], s[ty < 0.5]
    # Soft labels 0.9 / 0.1 are the BCE optimum: held-out means near them.
    self.assertGreater(pos.mean(), 0.75)
    self.assertLess(neg.mean(), 0.25)
    self.assertGreater(np.mean(pos[:, None] > neg[None, :]), 0.98)  # AUC

  def test_is_a_thinking_scorer_for_trust(self):
    scorer = thinking.TinyThinkingScorer()
    qs, ts, ys = _data(300, 2, pos_frac=0.5)
    scorer.fit(qs, ts, ys, steps=150)
    # A group of 4: responses 0, 1 correct with cue-less thinking, 2, 3
    # wrong with the cue: the TRM prefers the wrong ones -> gamma < 1.
    think = ["add the numbers so we get", "carry one then result is",
             "verify the numbers step", "we get verify result"]
    rt = scorer(["what is 1 + 2 ?"] * 4, think)
    gamma = float(thinking.trust_weight(rt[None], np.array([[1, 1, 0, 0]],
                                                            bool))[0])
    mu_c, mu_w = rt[:2].mean(), rt[2:].mean()
    self.assertLess(mu_c, mu_w)
    self.assertAlmostEqual(gamma, float(np.exp(mu_c - mu_w)), places=5)

  def test_fit_is_plain_adam_on_bce(self):
    """`fit` (the trainer's step) == a hand-written optax.adam loop.

    Compared in float64. In float32 the two programs (XLA fuses them
    differently) round the gradients differently by ~1e-7 relative, and
    Adam's m / (sqrt(v) + eps) turns that into ~1e-5 absolute on entries
    whose gradients nearly cancel across steps (seen: 2 of 65,568 embedding
    entries at 7.7e-6 on one Intel CPU, none on AMD). In float64 the same
    amplification (<= 1e4 there) of eps64 * lr ~ 2e-18 stays below 1e-13,
    while any real difference in the update (lr, b1/b2, bias correction,
    batch rows, loss) moves entries by >= 1e-4; atol 1e-9 sits between.
    """
    qs, ts, ys = _data(40, 3, pos_frac=0.5)
    with jax.enable_x64(True):
      scorer = thinking.TinyThinkingScorer()
      _to_float64(scorer.net)
      ref = nnx.clone(scorer.net)
      scorer.fit(qs, ts, ys, steps=3, batch_size=8,
                 lr=1e-2, balance=False, seed=4)
      ids, mask = scorer._encode(qs, ts)  # pylint: disable=protected-access
      rng = np.random.default_rng(4)
      params = nnx.state(ref, nnx.Param)
      tx = optax.adam(1e-2)
      opt_state = tx.init(params)
      graphdef, _, rest = nnx.split(ref, nnx.Param, ...)

      @jax.jit  # one compiled program instead of op-by-op float64 dispatch
      def hand_step(params, opt_state, ids_b, mask_b, ys_b):
        def loss_fn(p):
          net = nnx.merge(graphdef, p, rest)
          return jnp.mean(optax.sigmoid_binary_cross_entropy(
              net(ids_b, mask_b), ys_b))
        grads = jax.grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

      for _ in range(3):
        rows = rng.integers(0, len(ys), 8)
        params, opt_state = hand_step(params, opt_state, ids[rows],
                                      mask[rows], ys[rows])
      got = nnx.state(scorer.net, nnx.Param)
      self.assertEqual({x.dtype for x in jax.tree.leaves(got)},
                       {np.dtype(np.float64)})
      self.assertEqual(scorer.net(jnp.asarray(ids[:2]),
                                  jnp.asarray(mask[:2])).dtype, jnp.float64)
      chex.assert_trees_all_close(got, params, atol=1e-9, rtol=0)

  def test_registered_loss_and_per_bin_cap(self):
    from jaxlab.train import losses  # pylint: disable=g-import-not-at-top
    self.assertIs(losses.LOSSES.get("thinking_scorer_bce"),
                  thinking.scorer_bce_loss)
    # Bins 1 / 5 / 9 hold 10 / 3 / 6 rows: a cap of 4 keeps 4 + 3 + 4; no
    # cap keeps the smallest bin's 3 in each.
    ys = np.array([0.1] * 10 + [0.5] * 3 + [0.9] * 6, np.float32)
    qs, ts = ["q"] * len(ys), [f"t{i}" for i in range(len(ys))]
    scorer = thinking.TinyThinkingScorer()
    info = scorer.fit(qs, ts, ys, steps=1, batch_size=4, per_bin=4)
    self.assertEqual(info["num_train"], 11)
    info = scorer.fit(qs, ts, ys, steps=1, batch_size=4)
    self.assertEqual(info["num_train"], 9)

  def test_bad_labels(self):
    scorer = thinking.TinyThinkingScorer()
    with self.assertRaisesRegex(ValueError, r"\[0, 1\]"):
      scorer.fit(["q"], ["t"], [1.5])
    with self.assertRaisesRegex(ValueError, "labels must be"):
      scorer.fit(["q", "r"], ["t", "u"], [0.5])


if __name__ == "__main__":
  absltest.main()
