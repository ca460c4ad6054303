"""ViT patch encoder and multimodal reranker."""

import tempfile

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.data import rerank_tokens
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import reranker as rr
from jaxlab.models import vit as vit_lib
from jaxlab.objectives import rerank
from jaxlab.train import losses

TEMPLATE = rr.PromptTemplate(system="", template="{system}I:{instruction}\n"
                             "Q:{query}\nD:{document}\nA:")


def _build(random_direction=False, num_label_tokens=4, seed=0):
  tok = rerank_tokens.make_tokenizer(words=("red", "circle"))
  dec = decoder_lib.DecoderConfig(vocab_size=320, dim=32, num_layers=1,
                                  num_heads=2, num_kv_heads=1, mlp_dim=64,
                                  init_std=0.2)
  vit = vit_lib.ViTConfig(image_size=8, patch_size=4, dim=32, num_layers=1,
                          num_heads=2, mlp_dim=32, out_dim=32, init_std=0.2)
  cfg = rr.RerankerConfig.from_tokenizer(
      tok, decoder=dec, vit=vit, num_label_tokens=num_label_tokens,
      random_direction=random_direction)
  return tok, cfg, rr.Reranker(cfg, rngs=nnx.Rngs(seed))


class ViTTest(absltest.TestCase):

  def test_patchify_matches_loop(self):
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype(np.float32)
    got = np.asarray(vit_lib.patchify(jnp.asarray(x), 4))
    want = np.stack([np.stack([x[b, r:r + 4, c:c + 4].reshape(-1)
                               for r in (0, 4) for c in (0, 4)])
                     for b in range(2)])
    np.testing.assert_array_equal(got, want)

  def test_output_shape_and_bad_size(self):
    cfg = vit_lib.ViTConfig(image_size=8, patch_size=4, dim=16, num_layers=1,
                            num_heads=2, mlp_dim=16, out_dim=24)
    enc = vit_lib.ViTEncoder(cfg, rngs=nnx.Rngs(0))
    chex.assert_shape(enc(jnp.zeros((3, 8, 8, 3))), (3, 4, 24))
    with self.assertRaisesRegex(ValueError, "images must be"):
      enc(jnp.zeros((1, 16, 16, 3)))
    with self.assertRaisesRegex(ValueError, "multiple of patch_size"):
      vit_lib.ViTConfig(image_size=10, patch_size=4)


class RerankerTest(absltest.TestCase):

  def test_tokenizer_specials_are_the_models(self):
    # The data layer's tokenizer and the model name the same strings.
    self.assertEqual(rerank_tokens.IMAGE_TOKEN, rr.IMAGE_TOKEN)
    self.assertEqual(rerank_tokens.LABEL_TOKENS_POS, rr.LABEL_TOKENS_POS)
    self.assertEqual(rerank_tokens.LABEL_TOKENS_NEG, rr.LABEL_TOKENS_NEG)
    self.assertIs(rerank.RerankHeads, rr.RerankHeads)

  def test_label_ids_come_from_tokenizer(self):
    tok, cfg, _ = _build(num_label_tokens=6)
    self.assertEqual(cfg.yes_id, tok.encode("<yes>")[0])
    self.assertEqual(tok.decode([cfg.no_id]), "<no>")
    self.assertEqual(cfg.image_token_id, tok.encode("<image>")[0])
    self.assertEqual([tok.decode([i]) for i in cfg.label_neg_ids],
                     ["<no>", "<false>", "<wrong>"])
    with self.assertRaisesRegex(ValueError, "num_label_tokens"):
      rr.RerankerConfig.from_tokenizer(tok, decoder=cfg.decoder, vit=cfg.vit,
                                       num_label_tokens=3)

  def test_placeholders_replaced_in_order(self):
    _, cfg, model = _build()
    p = cfg.vit.num_patches
    img = cfg.image_token_id
    ids = jnp.array([[5, img, img, img, img, 6, img, img, img, img, 7]])
    images = jax.random.uniform(jax.random.key(1), (1, 2, 8, 8, 3))
    emb = model.embed_inputs(ids, images)
    feats = model.vit(images[0])  # [2, P, D]
    np.testing.assert_allclose(emb[0, 1:1 + p], feats[0], rtol=1e-6)
    np.testing.assert_allclose(emb[0, 6:6 + p], feats[1], rtol=1e-6)
    tok_emb = model.decoder.embed(ids)
    np.testing.assert_array_equal(emb[0, jnp.array([0, 5, 10])],
                                  tok_emb[0, jnp.array([0, 5, 10])])

  def test_heads_match_decoder_logits_and_padding(self):
    tok, cfg, model = _build()
    docs = ["red circle 3", "blue square 4"]
    b1 = rr.collate_groups([("find", "red circle", docs)], tok, cfg, TEMPLATE,
                           max_len=40)
    b2 = rr.collate_groups([("find", "red circle", docs)], tok, cfg, TEMPLATE,
                           max_len=56)
    ids = b1["input_ids"][0, 0]
    n = int(b1["answer_index"][0, 0]) + 1
    self.assertEqual(tok.decode(ids[:n]), "I:find\nQ:red circle\nD:red circle"
                     " 3\nA:")
    # Compiled: one program per shape instead of op-by-op dispatch.
    heads = nnx.jit(lambda m, b: m.score_heads(b))
    h1 = heads(model, {k: jnp.asarray(v) for k, v in b1.items()})
    h2 = heads(model, {k: jnp.asarray(v) for k, v in b2.items()})
    logits = nnx.jit(lambda m, x: m.decoder(x))(model,
                                                jnp.asarray(ids[None, :n]))
    self.assertAlmostEqual(float(h1.z_yes[0, 0]),
                           float(logits[0, -1, cfg.yes_id]), places=4)
    self.assertAlmostEqual(float(h1.z_no[0, 0]),
                           float(logits[0, -1, cfg.no_id]), places=4)
    chex.assert_trees_all_close(h1, h2, atol=1e-5)  # right padding is inert
    chex.assert_shape(h1.z_label_pos, (1, 2, 2))

  def test_truncation_keeps_answer_suffix(self):
    tok, cfg, _ = _build()
    b = rr.collate_groups([("find", "q", ["x" * 100, "y"])], tok, cfg,
                          TEMPLATE, max_len=20)
    ids = b["input_ids"][0, 0]
    self.assertEqual(int(b["answer_index"][0, 0]), 19)
    self.assertTrue(tok.decode(ids).endswith("xxx\nA:"))

  def test_image_changes_only_image_prompts(self):
    tok, cfg, model = _build()
    rng = np.random.default_rng(0)
    im1, im2 = rng.random((2, 8, 8, 3)).astype(np.float32)
    score = nnx.jit(lambda m, b: m.score_heads(b))  # one compile, same shapes

    def heads(image):
      docs = [{"text": "red", "image": image}, {"text": "red", "image": None}]
      b = rr.collate_groups([("find", "circle", docs)], tok, cfg, TEMPLATE,
                            max_len=48)
      return score(model, {k: jnp.asarray(v) for k, v in b.items()})

    a, b = heads(im1), heads(im2)
    self.assertGreater(abs(float(a.z_yes[0, 0] - b.z_yes[0, 0])), 1e-4)
    self.assertAlmostEqual(float(a.z_yes[0, 1]), float(b.z_yes[0, 1]), 6)

  def test_surrogate_equals_native_through_model(self):
    """Registered loss: grad of URL(W_SFT, D_SFT) == grad of native SFT."""
    tok, cfg, model = _build()
    img = np.random.default_rng(1).random((8, 8, 3)).astype(np.float32)
    groups = [("find", {"text": "red", "image": img},
               ["red circle", {"text": None, "image": img}, "circle"]),
              ("find", "circle", ["circle", "red", {"text": "x",
                                                    "image": img}])]
    batch = {k: jnp.asarray(v) for k, v in rr.collate_groups(
        groups, tok, cfg, TEMPLATE, max_len=60).items()}
    fn = losses.get("rerank")
    confs = [({"objective": "url", "weight": w_d, "direction": w_d},
              {"objective": w_d}) for w_d in ("sft", "cl")]

    # Compiled: the four gradients in one program (one compile) instead of
    # one program per loss or op-by-op dispatch.
    @nnx.jit
    def grads(m):
      return [[nnx.grad(lambda m, conf=conf: fn(
          m, batch, rng=jax.random.key(0), config=conf)[0])(m)
               for conf in pair] for pair in confs]

    for g_url, g_nat in grads(model):
      chex.assert_trees_all_close(nnx.to_pure_dict(g_url),
                                  nnx.to_pure_dict(g_nat),
                                  rtol=1e-4, atol=1e-7)

  def test_random_direction_is_learnable(self):
    tok, cfg, model = _build(random_direction=True)
    batch = {k: jnp.asarray(v) for k, v in rr.collate_groups(
        [("f", "red", ["red", "circle"])], tok, cfg, TEMPLATE,
        max_len=24).items()}
    grads = nnx.jit(nnx.grad(lambda m: rerank.group_loss(
        m.score_heads(batch), direction="random")[0]))(model)
    self.assertGreater(float(jnp.abs(grads.rand_head_dk[...]).sum()), 0.)
    # The LM head gets no gradient under D_Rand (weights use z_y, z_n only
    # through stop_gradient).
    self.assertEqual(float(jnp.abs(grads.decoder.lm_head_dv[...]).sum()), 0.)


_SCORE = nnx.jit(lambda m, b: m.score_heads(b))


class ImportedDecoderRerankerTest(absltest.TestCase):
  """The reranker on an imported HF checkpoint, with and without LoRA,
  against transformers (the reference forward) on the same weights."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    from jaxlab.testing import hf_fixtures  # pylint: disable=g-import-not-at-top
    cls.hf_fixtures = hf_fixtures
    cls.tmp = tempfile.TemporaryDirectory(prefix="rerank_hf_")
    path = cls.tmp.name
    _, cls.hf_model = hf_fixtures.make_hf_checkpoint(
        path, "qwen2", vocab_size=320, hidden_size=32, intermediate_size=48,
        num_layers=1, num_heads=4, num_kv_heads=2, return_model=True)
    dec, dcfg = hf.load(path)
    cls.tok = rerank_tokens.make_tokenizer(words=("red", "circle"))
    vit = vit_lib.ViTConfig(image_size=8, patch_size=4, dim=16, num_layers=1,
                            num_heads=2, mlp_dim=16, out_dim=dcfg.dim)
    cls.cfg = rr.RerankerConfig.from_tokenizer(cls.tok, decoder=dcfg, vit=vit)
    cls.dcfg = dcfg
    cls.model = rr.Reranker(cls.cfg, rngs=nnx.Rngs(0))
    cls.model.decoder = dec
    docs = ["red circle 3", "circle", "blue red 4"]
    cls.batch = rr.collate_groups([("find", "red circle", docs)], cls.tok,
                                  cls.cfg, TEMPLATE, max_len=40)

  @classmethod
  def tearDownClass(cls):
    cls.tmp.cleanup()
    super().tearDownClass()

  def _reference_heads(self, hf_model):
    """z_yes, z_no of each prompt from transformers' logits, unpadded."""
    out = []
    for g in range(self.batch["input_ids"].shape[1]):
      n = int(self.batch["answer_index"][0, g]) + 1
      logits = self.hf_fixtures.hf_logits(
          hf_model, self.batch["input_ids"][:, g, :n])[0, -1]
      out.append((logits[self.cfg.yes_id], logits[self.cfg.no_id]))
    return np.array(out)

  def _heads(self, model):
    # Compiled (one program per model structure: the plain and the LoRA
    # one) instead of op-by-op dispatch.
    h = _SCORE(model, {k: jnp.asarray(v) for k, v in self.batch.items()})
    return np.stack([np.asarray(h.z_yes[0]), np.asarray(h.z_no[0])], -1)

  def test_heads_match_transformers(self):
    np.testing.assert_allclose(self._heads(self.model),
                               self._reference_heads(self.hf_model),
                               atol=2e-4, rtol=1e-4)

  def test_lora_merge_matches_transformers_with_merged_weights(self):
    """W + (alpha/r) A @ B on v_dkh [D, K, H] and down_fd [F, D] equals
    transformers with v_proj.weight [K*H, D] += delta.reshape(D, K*H).T and
    down_proj.weight [D, F] += delta.T."""
    import copy  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    from jaxlab.train import lora  # pylint: disable=g-import-not-at-top
    model = nnx.clone(self.model)
    lora.add_lora(model, rank=2, alpha=4.0, targets=("v_dkh", "down_fd"),
                  rngs=nnx.Rngs(1))
    layer = model.decoder.layers[0]
    rng = np.random.default_rng(0)
    for name in ("v_dkh", "down_fd"):
      b = getattr(layer.attn if name == "v_dkh" else layer.mlp,
                  name + "_lora_b")
      b[...] = jnp.asarray(rng.normal(size=b[...].shape) * 0.5, jnp.float32)
    a_v = np.asarray(layer.attn.v_dkh_lora_a[...], np.float64)
    b_v = np.asarray(layer.attn.v_dkh_lora_b[...], np.float64)
    a_d = np.asarray(layer.mlp.down_fd_lora_a[...], np.float64)
    b_d = np.asarray(layer.mlp.down_fd_lora_b[...], np.float64)
    d, kh = self.dcfg.dim, self.dcfg.num_kv_heads * self.dcfg.resolved_head_dim
    delta_v = 2.0 * np.einsum("dr,rkh->dkh", a_v, b_v).reshape(d, kh).T
    delta_d = 2.0 * (a_d @ b_d).T
    ref = copy.deepcopy(self.hf_model)
    with torch.no_grad():
      blk = ref.model.layers[0]
      blk.self_attn.v_proj.weight += torch.tensor(delta_v, dtype=torch.float32)
      blk.mlp.down_proj.weight += torch.tensor(delta_d, dtype=torch.float32)
    want = self._reference_heads(ref)
    got = self._heads(lora.merge_lora(model))
    np.testing.assert_allclose(got, want, atol=3e-4, rtol=1e-4)
    # The adapters moved the scores (the check is not vacuous).
    self.assertGreater(np.abs(want - self._reference_heads(
        self.hf_model)).max(), 1e-2)


class EmbeddingRerankerTest(absltest.TestCase):

  def test_frozen_head_and_surrogate_parity(self):
    model = rr.EmbeddingReranker(6, 16, 8, num_label_tokens=4,
                                 rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    batch = {"query": jnp.asarray(rng.normal(size=(3, 6)), jnp.float32),
             "docs": jnp.asarray(rng.normal(size=(3, 5, 6)), jnp.float32)}
    heads = model.score_heads(batch)
    z = np.asarray(heads.z_label_pos)
    self.assertEqual(z.shape, (3, 5, 2))
    np.testing.assert_array_equal(heads.z_yes, z[..., 0])
    np.testing.assert_array_equal(heads.z_no, heads.z_label_neg[..., 0])
    model.freeze_head()
    params = nnx.state(model, nnx.Param)
    self.assertNotIn("head_dk", params)
    loss = lambda m, **kw: rerank.group_loss(m.score_heads(batch), **kw)[0]
    g_url = nnx.jit(nnx.grad(lambda m: loss(m, weight="cl",
                                            direction="cl")))(model)
    g_nat = nnx.jit(nnx.grad(lambda m: loss(m, objective="cl")))(model)
    chex.assert_trees_all_close(nnx.to_pure_dict(g_url),
                                nnx.to_pure_dict(g_nat), rtol=1e-4,
                                atol=1e-7)
    self.assertNotIn("head_dk", nnx.to_pure_dict(g_url))


if __name__ == "__main__":
  absltest.main()
