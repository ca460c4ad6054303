"""Vulcan: exact merge of a collapsed cluster, exact SVD head pruning (full
rank, and low rank with the softmax rescale), width/rate/budget accounting
by hand, the regularisers against numpy, dual ascent, and bad input."""

import math

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.compression import vulcan
from jaxlab.data import images
from jaxlab.models import vit_classifier as vc

_CFG = vc.ViTClassifierConfig(image_size=8, patch_size=4, channels=1, dim=16,
                              num_layers=2, num_heads=2, head_dim=8,
                              mlp_dim=16, num_classes=10, init_std=0.3)


def _model(seed=0):
  return vc.ViTClassifier(_CFG, rngs=nnx.Rngs(seed))


class VulcanTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.x = np.random.default_rng(0).uniform(size=(12, 8, 8, 1)).astype(
        np.float32)
    cls.y = np.arange(12, dtype=np.int32) % 10
    cls.vcfg = vulcan.VulcanConfig(rate=0.5, width_multiple=2, min_width=2)
    cls.model = _model()
    cls.plan = vulcan.make_plan(cls.model, [cls.x], cls.vcfg)
    cls.dense_logits = vulcan.logits(cls.model, cls.x)

  def test_merging_collapsed_clusters_leaves_logits_unchanged(self):
    model = _model()
    plan = self.plan
    self.assertLess(sum(plan.widths.mlp), 2 * _CFG.mlp_dim)
    for l, block in enumerate(model.blocks):   # collapse: members = anchor
      a = plan.anchor_of_neuron(l)
      block.mlp.w1_dm[...] = block.mlp.w1_dm[...][:, a]
      block.mlp.b1_m[...] = block.mlp.b1_m[...][a]
    full_heads = vulcan.Plan(
        vulcan.Widths(plan.widths.mlp, (8, 8), (8, 8)), plan.cluster,
        plan.anchor, plan.rate)
    small = vulcan.prune(model, full_heads)
    self.assertEqual(vc.count_params(small), small.cfg.num_params())
    self.assertLess(vc.count_params(small), vc.count_params(model))
    np.testing.assert_allclose(vulcan.logits(small, self.x),
                               vulcan.logits(model, self.x), atol=1e-5)
    l1, l2 = vulcan.collapse_penalty(
        model, [jnp.asarray(plan.anchor_of_neuron(l)) for l in range(2)],
        [1, 1])
    self.assertEqual((float(l1), float(l2)), (0.0, 0.0))

  def test_svd_head_pruning_at_full_rank_is_exact(self):
    full = vulcan.Plan(vulcan.Widths((16, 16), (8, 8), (8, 8)),
                       (np.arange(16),) * 2, (np.arange(16),) * 2, 0.0)
    small = vulcan.prune(self.model, full)
    np.testing.assert_allclose(vulcan.logits(small, self.x),
                               self.dense_logits, atol=1e-4)

  def test_svd_head_pruning_of_low_rank_heads_is_exact_with_rescale(self):
    model = _model(1)
    rng = np.random.default_rng(1)
    for block in model.blocks:   # rank(Ŵ_Q) = rank(Ŵ_V) = 3 in every head
      for w, b in ((block.attn.wq_dhk, block.attn.bq_hk),
                   (block.attn.wv_dhv, block.attn.bv_hv)):
        aug = np.einsum("hkr,hrj->hkj", rng.normal(size=(2, 8, 3)),
                        rng.normal(size=(2, 3, 17)) * 0.3)
        w[...] = jnp.asarray(np.transpose(aug[..., :16], (2, 0, 1)),
                              jnp.float32)
        b[...] = jnp.asarray(aug[..., 16], jnp.float32)
    want = vulcan.logits(model, self.x)
    ident = (np.arange(16),) * 2
    small = vulcan.prune(model, vulcan.Plan(
        vulcan.Widths((16, 16), (3, 3), (3, 3)), ident, ident, 0.5))
    self.assertEqual(small.blocks[0].attn.wq_dhk.shape, (16, 2, 3))
    np.testing.assert_allclose(vulcan.logits(small, self.x), want,
                               atol=2e-4)
    # Without the sqrt(r / d_k) factor the logits would change.
    self.assertGreater(float(np.abs(want - self.dense_logits).max()), 1e-3)

  def test_regularisers_match_numpy(self):
    model, plan = self.model, self.plan
    anchors = [plan.anchor_of_neuron(l) for l in range(2)]
    counts = [int(np.sum(np.bincount(c) > 1)) for c in plan.cluster]
    l1, l2 = vulcan.collapse_penalty(model, [jnp.asarray(a) for a in anchors],
                                     counts)
    want1 = want2 = 0.0
    for block, a, n in zip(model.blocks, anchors, counts):
      w = np.concatenate([np.asarray(block.mlp.w1_dm[...]),
                          np.asarray(block.mlp.b1_m[...])[None]])
      diff = w - w[:, a]
      want1 += np.abs(diff).sum() / (n + 1e-10)
      want2 += np.square(diff).sum() / (n + 1e-10)
    np.testing.assert_allclose([float(l1), float(l2)], [want1, want2],
                               rtol=1e-5)
    r1, _ = vulcan.rank_penalty(model, (3, 5), (2, 8))
    want = 0.0
    for block, rq, rv in zip(model.blocks, (3, 5), (2, 8)):
      m = vulcan.head_matrices(block.attn)
      for mat, r in ((m["q"], rq), (m["v"], rv)):
        want += sum(np.linalg.svd(np.asarray(mat[h]), compute_uv=False)[r:]
                    .sum() for h in range(2))
    np.testing.assert_allclose(float(r1), want / 4, rtol=1e-4)

  def test_dual_ascent_multipliers_rise_by_rho_per_step(self):
    trainee = vulcan.VulcanTrainee(_model(), self.plan, self.vcfg)
    batches = images.batches(self.x, self.y, batch_size=12, seed=0)
    logs = vulcan.train(trainee, batches, steps=3,
                        optim_cfg=vulcan.optim(lr=1e-3, rho=0.5),
                        log_every=1)
    # Adam's first steps move by lr * sign(grad); the grads are the
    # (positive) constraint values, and lr = -rho: ascent by 0.5 a step.
    np.testing.assert_allclose(np.asarray(trainee.lagrange[...]), [1.5, 1.5],
                               atol=1e-3)
    self.assertGreater(logs[0]["collapse_l1"], 0.0)
    self.assertEqual(logs[0]["lambda1"], 0.0)


class AccountingTest(absltest.TestCase):

  def test_ffn_widths_global_threshold_by_hand(self):
    scores = [np.arange(8.0), np.arange(10.0, 18.0)]
    # R = 0.5 of 16 -> k = 8, θ = the 8th smallest = 7: layer 0 keeps 1
    # (raised to min_width 2), layer 1 keeps 8.
    self.assertEqual(vulcan.ffn_widths(scores, 0.5, width_multiple=1,
                                       min_width=2), [2, 8])
    self.assertEqual(vulcan.ffn_widths(scores, 0.5, width_multiple=4,
                                       min_width=2, uniform=True), [4, 4])

  def test_layer_rates_by_hand(self):
    stats = vulcan.ERankStats(qk=(2.0, 2.0), vo=(2.0, 6.0))
    # E = (4, 8), Σ 1/E = 0.375: rate_l = 0.5 * 2 / 0.375 / E = (2/3, 1/3).
    rates = vulcan.layer_rates(stats, 0.5)
    np.testing.assert_allclose(rates, [(2 / 3, 2 / 3), (0.5, 1 / 6)])

  def test_budget_hand_case_and_unreachable_budget(self):
    cfg = vc.ViTClassifierConfig(image_size=4, patch_size=2, channels=1,
                                 dim=4, num_layers=1, num_heads=1,
                                 head_dim=4, mlp_dim=8, num_classes=3)
    # Dense: embed 44 + block (16 + Q,K 2*4*5 + V 4*5 + O 4*4+4 + MLP
    # 32+8+32+4 = 172) + head 23 = 239.
    self.assertEqual(vulcan.cost(cfg), 239.0)
    vcfg = vulcan.VulcanConfig(width_multiple=1, min_width=1,
                               uniform_widths=True)
    scores = [np.arange(8.0)]
    stats = vulcan.ERankStats(qk=(1.0,), vo=(1.0,))
    # Uniform widths at R: mlp floor(8(1-R)), qk = v = floor(4(1-R)).
    # R=0.5: mlp 4, qk=v 2: block 16 + 20 + 10 + 12 + 16+4+16+4 = 98 ->
    # 165 = 0.690 of 239; R=0.49 keeps mlp 4, qk=v 2 as well (floors), R=0.37:
    # mlp 5, qk=v 2 -> 174. So a 0.70 budget is first met at R = 0.38.
    rate, widths = vulcan.rate_for_budget(cfg, scores, stats, 0.70, vcfg)
    self.assertAlmostEqual(rate, 0.38)
    self.assertEqual(widths, vulcan.Widths((4,), (2,), (2,)))
    self.assertEqual(vulcan.cost(widths.apply(cfg)), 165.0)
    with self.assertRaisesRegex(ValueError,
                                "vulcan.budget=0.3 of the params cannot be "
                                "met: the smallest model"):
      vulcan.rate_for_budget(cfg, scores, stats, 0.3, vcfg)
    with self.assertRaisesRegex(ValueError, r"must be in \(0, 1\]"):
      vulcan.rate_for_budget(cfg, scores, stats, 0.0, vcfg)

  def test_empty_target_class_set_is_one_clear_error(self):
    x, y = np.zeros((4, 8, 8, 1), np.float32), np.arange(4, dtype=np.int32)
    with self.assertRaisesRegex(ValueError, "target_classes is empty"):
      images.select_classes(x, y, [], num_classes=10)


if __name__ == "__main__":
  absltest.main()
