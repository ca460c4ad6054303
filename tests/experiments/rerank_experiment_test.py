"""The rerank experiment's head pretraining and config sections."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.configs import rerank as rerank_configs
from jaxlab.experiments import rerank as rerank_exp
from jaxlab.models import reranker as rr
from jaxlab.train import losses


def _numpy_pretrain_loss(model, q, d):
  """The spec's pretraining BCE recomputed in float64 numpy."""
  heads = model.score_heads({"query": jnp.asarray(q), "docs": jnp.asarray(d)})
  half = q.shape[-1] // 2
  y = (np.sum(q[:, :half] * d[:, 0, :half], -1) > 0).astype(np.float64)
  u = np.asarray(heads.z_yes - heads.z_no, np.float64)[:, 0]
  um = (np.asarray(heads.z_label_pos, np.float64).mean(-1) -
        np.asarray(heads.z_label_neg, np.float64).mean(-1))[:, 0]

  def bce(x):
    return np.logaddexp(0.0, x) - y * x
  return float(np.mean(bce(u) + bce(um)))


class HeadPretrainTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.config = rerank_configs.get_config("probe,tiny")
    with self.config.unlocked():
      self.config.embedding.pretrain_steps = 5

  def _model(self, seed=0):
    e = self.config.embedding
    return rr.EmbeddingReranker(
        e.embed_dim, e.hidden, e.dim,
        num_label_tokens=self.config.reranker.labels.num_label_tokens,
        rngs=nnx.Rngs(seed))

  def test_loss_matches_numpy(self):
    model = self._model()
    rng = np.random.default_rng(0)
    q = rng.normal(size=(32, 16)).astype(np.float32)
    d = rng.normal(size=(32, 1, 16)).astype(np.float32)
    loss, metrics = losses.get("rerank_head_pretrain")(
        model, {"query": q, "docs": d}, rng=jax.random.key(0))
    self.assertAlmostEqual(float(loss), _numpy_pretrain_loss(model, q, d),
                           places=5)
    self.assertBetween(float(metrics["acc"]), 0.0, 1.0)

  def test_runner_pretraining_equals_plain_adam_loop(self):
    """The trainer-step pretraining is the old hand-written Adam loop."""
    e = self.config.embedding
    trained = rerank_exp.pretrained_embedding_model(self.config, seed=3)
    self.assertIsInstance(trained.head_dk, rr.FrozenHead)

    ref = self._model(seed=3)
    opt = nnx.Optimizer(ref, optax.adam(e.pretrain_lr), wrt=nnx.Param)
    loss_fn = losses.get("rerank_head_pretrain")

    @nnx.jit
    def step(model, opt, q, d):
      grads = nnx.grad(lambda m: loss_fn(
          m, {"query": q, "docs": d}, rng=jax.random.key(0))[0])(model)
      opt.update(model, grads)

    rng = np.random.default_rng((3, 77))
    for _ in range(e.pretrain_steps):
      q = rng.normal(size=(e.pretrain_batch_size, e.embed_dim))
      d = rng.normal(size=(e.pretrain_batch_size, 1, e.embed_dim))
      step(ref, opt, jnp.asarray(q, jnp.float32), jnp.asarray(d, jnp.float32))
    for name in ("w1", "w2", "w3", "b1"):
      np.testing.assert_allclose(getattr(trained, name)[...],
                                 getattr(ref, name)[...], atol=2e-5)
    np.testing.assert_allclose(trained.head_dk[...], ref.head_dk[...],
                               atol=2e-5)
    # Memoised per seed: a fresh instance with the same weights.
    again = rerank_exp.pretrained_embedding_model(self.config, seed=3)
    self.assertIsNot(again, trained)
    np.testing.assert_array_equal(again.w1[...], trained.w1[...])
    self.assertIsInstance(again.head_dk, rr.FrozenHead)
    # And training moved the weights (5 Adam steps of lr 3e-3).
    untrained = self._model(seed=3)
    self.assertGreater(
        float(jnp.max(jnp.abs(trained.w1[...] - untrained.w1[...]))), 1e-3)


class ConfigSectionsTest(absltest.TestCase):

  def test_sections_reach_their_classes(self):
    config = rerank_configs.get_config("tiny")
    with config.unlocked():
      config.reranker.decoder.num_layers = 3
      config.reranker.vit.num_layers = 2
      config.reranker.labels.num_label_tokens = 4
    tok = rerank_exp.make_tokenizer(config)
    rcfg = rerank_exp.reranker_config(config, tok)
    self.assertEqual(rcfg.decoder.num_layers, 3)
    self.assertEqual(rcfg.decoder.dim, 48)
    self.assertEqual(rcfg.vit.num_layers, 2)
    self.assertEqual(rcfg.vit.patch_size, 8)
    self.assertEqual(rcfg.vit.out_dim, rcfg.decoder.dim)
    self.assertLen(rcfg.label_pos_ids, 2)
    self.assertEqual(rcfg.yes_id, tok.token_id("<yes>"))
    self.assertEqual(rcfg.decoder.vocab_size % 64, 0)

  def test_unknown_preset_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "unknown preset 'probes'"):
      rerank_configs.get_config("probes,tiny")

  def test_sweep_tables_and_comparisons(self):
    """The negatives preset: rows per (cell, N), CL - SFT at every N."""
    config = rerank_configs.get_config("negatives,tiny")
    self.assertEqual(tuple(config.negatives_sweep), (2, 4, 8, 16, 32))
    self.assertEqual(config.table, "negatives")
    comps = rerank_exp.comparisons(["sft/sft", "cl/cl"], (2, 32), True, 10,
                                   "negatives")
    self.assertEqual([(c.table, c.a, c.b) for c in comps],
                     [("negatives", "cl/cl N=2", "sft/sft N=2"),
                      ("negatives", "cl/cl N=32", "sft/sft N=32")])
    runs = [{"cell": "cl/cl", "negatives": 32, "seed": s, "ndcg@10": v,
             "mrr@10": v, **{k: 0.5 for k in rerank_exp.W_KEYS}}
            for s, v in ((0, 0.25), (1, 0.75))]
    table = rerank_exp.results_table(runs, 10, True, "negatives")
    js = table.to_json()
    self.assertEqual((js["id"], js["row_label"]), ("negatives", "W / D, N"))
    self.assertEqual(js["rows"][0]["label"], "cl/cl N=32")
    self.assertEqual(js["rows"][0]["cells"]["ndcg@10"],
                     {"seeds": [0, 1], "values": [0.25, 0.75]})

  def test_mm_preset_imports_a_fixture_with_lora(self):
    config = rerank_configs.get_config("mm,tiny")
    self.assertEqual((config.model_kind, config.table, config.lora.rank,
                      config.backbone.fixture),
                     ("multimodal", "mm_probe", 16, "qwen2"))
    self.assertLen(config.cells.split(","), 6)
    self.assertEqual(rerank_exp.ensure_backbone(
        rerank_configs.get_config("probe,tiny"), "/nonexistent").init_from,
                     "")
    with config.unlocked():
      config.init_from = "/some/dir"
    with self.assertRaisesRegex(ValueError, "init_from or backbone.fixture"):
      rerank_exp.ensure_backbone(config, "/nonexistent")
    with config.unlocked():
      config.init_from = ""
      config.backbone.fixture = "gpt2"
    with self.assertRaisesRegex(ValueError, "backbone.fixture='gpt2'"):
      rerank_exp.ensure_backbone(config, "/nonexistent")

  def test_direction_presets_have_their_own_table_and_claims(self):
    """`directions,native`: reference cells first, table "directions"
    ("mm_directions" with mm); its claims pair each probe with the
    reference it replaces, probe first (a − b = probe − reference)."""
    config = rerank_configs.get_config("directions,native,tiny")
    self.assertEqual(config.table, "directions")
    cells = config.cells.split(",")
    self.assertEqual(cells[:3], ["sft/sft", "cl/sft", "cl/cl"])
    self.assertLen(cells, 9)
    mm = rerank_configs.get_config("directions,mm,tiny")
    self.assertEqual((mm.table, mm.model_kind, tuple(mm.seeds)),
                     ("mm_directions", "multimodal", (0, 1, 2)))
    self.assertEqual(rerank_configs.get_config("all,tiny").table, "probe")
    comps = rerank_exp.comparisons(cells, (4,), False, 10, "directions")
    self.assertEqual([(c.table, c.a, c.b) for c in comps], [
        ("directions", "sft/random", "sft/sft"),
        ("directions", "cl/random", "cl/cl"),
        ("directions", "sft/multi_token", "sft/sft"),
        ("directions", "cl/multi_token", "cl/sft"),
        ("directions", "native/sft", "sft/sft"),
        ("directions", "native/cl", "cl/cl")])
    # The probe table keeps its W-vs-D claims only.
    probe = rerank_exp.comparisons(
        rerank_configs.get_config("probe,tiny").cells.split(","), (4,),
        False, 10, "probe")
    self.assertLen(probe, 5)
    self.assertNotIn("sft/random", {c.a for c in probe})

  def test_parse_cell(self):
    self.assertEqual(rerank_exp.parse_cell("cl/sft"),
                     {"objective": "url", "weight": "cl", "direction": "sft"})
    self.assertEqual(rerank_exp.parse_cell("native/cl")["objective"], "cl")
    with self.assertRaisesRegex(ValueError, "unknown weight"):
      rerank_exp.parse_cell("bogus/sft")


class LearnableRandomHeadTest(absltest.TestCase):

  def test_random_head_is_retyped_for_lora(self):
    """With LoRA the trainer optimises only `LoRA` variables: the D_Rand
    head becomes one (the same array); nothing else does."""
    from jaxlab.train import lora as lora_lib  # pylint: disable=g-import-not-at-top
    config = rerank_configs.get_config("tiny")
    rcfg = rerank_exp.reranker_config(config,
                                      rerank_exp.make_tokenizer(config))
    model = nnx.eval_shape(lambda: rr.Reranker(rcfg, rngs=nnx.Rngs(0)))
    self.assertNotIsInstance(model.rand_head_dk, lora_lib.LoRA)
    self.assertEmpty(jax.tree.leaves(nnx.state(model, lora_lib.LoRA)))
    before = model.rand_head_dk.get_value()
    rerank_exp.learnable_random_head(model)
    self.assertIsInstance(model.rand_head_dk, lora_lib.LoRA)
    self.assertIs(model.rand_head_dk.get_value(), before)
    trained = jax.tree.leaves(nnx.state(model, lora_lib.LoRA))
    self.assertLen(trained, 1)
    self.assertEqual(trained[0].shape, (rcfg.decoder.dim, 2))
    model.rand_head_dk = None
    with self.assertRaisesRegex(ValueError, "random_direction=False"):
      rerank_exp.learnable_random_head(model)


if __name__ == "__main__":
  absltest.main()
