"""The multimodal reranker on the Qwen2.5-VL architecture (arch qwen2_5_vl).

The reference is `jaxlab.models.qwen2_vl.Qwen2VL.forward` (equal to
transformers' `Qwen2_5_VLForConditionalGeneration`, tests/models/
qwen2_vl_test.py) on each unpadded prompt with the processor's patches of
its own images: the reranker must be exactly that model.
"""

import json
import os
import tempfile
import time

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.data import rerank_tokens
from jaxlab.data import vision_processor as vp
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import qwen2_vl
from jaxlab.models import reranker as rr

TEMPLATE = rr.PromptTemplate(system="", template="{system}I:{instruction}\n"
                             "Q:{query}\nD:{document}\nA:")
SIZE = 16  # image side: grid 4 x 4 patches of 4, 2 x 2 merged = 4 tokens


def _build(seed=0):
  tok = rerank_tokens.make_tokenizer(words=("red", "circle"))
  dec = decoder_lib.DecoderConfig(vocab_size=320, dim=32, num_layers=2,
                                  num_heads=2, num_kv_heads=1, mlp_dim=64,
                                  init_std=0.2, qkv_bias=True)  # Qwen2
  # Block 0 attends within 8-pixel windows (one merged unit each: 4
  # windows per image), block 1 within the whole image.
  vision = qwen2_vl.VisionConfig(depth=2, hidden_size=16, intermediate_size=32,
                                 num_heads=2, patch_size=4,
                                 temporal_patch_size=2, spatial_merge_size=2,
                                 window_size=8, fullatt_block_indexes=(1,))
  cfg = rr.RerankerConfig.from_tokenizer(
      tok, decoder=dec, vit=None, num_label_tokens=4, arch="qwen2_5_vl",
      vision=vision, image_size=SIZE, image_mean=vp.OPENAI_CLIP_MEAN,
      image_std=vp.OPENAI_CLIP_STD)
  return tok, cfg, rr.Reranker(cfg, rngs=nnx.Rngs(seed))


def _group(seed=0):
  """One query/document pair with two images (query's and document's) and a
  text document: rows of 2 and 1 images, the second shorter (padded)."""
  im = np.random.default_rng(seed).random((2, SIZE, SIZE, 3)).astype(
      np.float32)
  return ("find", {"text": "red", "image": im[0]},
          [{"text": "circle", "image": im[1]}, "red circle"]), im


def _pixel_values(images):
  """The processor's patches of [0, 1] HWC images, concatenated."""
  mean = np.asarray(vp.OPENAI_CLIP_MEAN, np.float32)
  std = np.asarray(vp.OPENAI_CLIP_STD, np.float32)
  rows, grids = [], []
  for img in images:
    x = ((img - mean) / std).transpose(2, 0, 1)[None]
    pv, grid = qwen2_vl.patchify(x, qwen2_vl.VisionConfig(
        patch_size=4, temporal_patch_size=2, spatial_merge_size=2))
    rows.append(pv)
    grids.append(grid)
  return np.concatenate(rows), grids


class QwenVLRerankerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tok, cls.cfg, cls.model = _build()
    group, cls.images = _group()
    cls.batch = rr.collate_groups([group], cls.tok, cls.cfg, TEMPLATE,
                                  max_len=48)
    cls.row_images = [cls.images[:2], cls.images[:1]]

  def test_config_and_placeholders(self):
    cfg = self.cfg
    self.assertEqual(cfg.num_image_tokens, 4)  # 1 * 4 * 4 / 2^2
    self.assertEqual(cfg.vl.mrope_section, (2, 3, 3))  # head_dim 16
    self.assertEqual(cfg.vision.out_hidden_size, 32)
    self.assertEqual(cfg.image_token_id, self.tok.token_id("<image>"))
    ids = self.batch["input_ids"][0]
    np.testing.assert_array_equal(
        (ids == cfg.image_token_id).sum(-1), [8, 4])
    self.assertEqual(self.batch["pixel_values"].shape,
                     (1, 2, 2, 16, 3 * 2 * 4 * 4))
    self.assertTrue(np.all(self.batch["pixel_values"][0, 1, 1] == 0))
    with self.assertRaisesRegex(ValueError, "cuts an image"):
      rr.collate_groups([_group()[0]], self.tok, cfg, TEMPLATE, max_len=14)

  def test_heads_equal_qwen2vl_logits(self):
    """(a) yes/no and label logits at the answer position == Qwen2VL.forward
    of each unpadded prompt with its own images; eager and jitted."""
    batch = {k: jnp.asarray(v) for k, v in self.batch.items()}
    heads = self.model.score_heads(batch)
    score = nnx.jit(lambda m, b: m.score_heads(b))
    jitted = score(self.model, batch)
    cfg = self.cfg
    for g in range(2):
      n = int(self.batch["answer_index"][0, g]) + 1
      pv, grids = _pixel_values(self.row_images[g])
      logits = np.asarray(self.model.vl.forward(
          jnp.asarray(self.batch["input_ids"][:, g, :n]),
          pixel_values=pv, image_grid_thw=grids).logits[0, -1])
      want = np.concatenate([logits[[cfg.yes_id, cfg.no_id]],
                             logits[list(cfg.label_pos_ids)],
                             logits[list(cfg.label_neg_ids)]])
      tol = 1e-5 * max(1.0, float(np.abs(logits).max()))
      for h in (heads, jitted):
        got = np.concatenate([np.asarray(h.z_yes[0, g:g + 1]),
                              np.asarray(h.z_no[0, g:g + 1]),
                              np.asarray(h.z_label_pos[0, g]),
                              np.asarray(h.z_label_neg[0, g])])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol)
    # The images matter (the check is not vacuous): other pixels, other
    # score for the image prompt.
    other = dict(batch, pixel_values=batch["pixel_values"][..., ::-1])
    moved = score(self.model, other)
    self.assertGreater(abs(float(moved.z_yes[0, 0] - heads.z_yes[0, 0])),
                       1e-4)

  def test_collate_positions_are_rope_index(self):
    """(b) mrope_positions == rope_index of each unpadded prompt (padding
    0); the first image run at s: t = s, (h, w) = s + (0 0 1 1, 0 1 0 1),
    the text after it resumes at s + max(h, w) = s + 2."""
    pos = self.batch["mrope_positions"]
    self.assertEqual(pos.shape, (1, 2, 3, 48))
    for g in range(2):
      ids = self.batch["input_ids"][0, g]
      n = int(self.batch["answer_index"][0, g]) + 1
      want, _ = qwen2_vl.rope_index(
          ids[None, :n], self.cfg.vl,
          image_grid_thw=[(1, 4, 4)] * len(self.row_images[g]))
      np.testing.assert_array_equal(pos[0, g, :, :n], want[:, 0])
      np.testing.assert_array_equal(pos[0, g, :, n:], 0)
    ids = self.batch["input_ids"][0, 0]
    s = int(np.argmax(ids == self.cfg.image_token_id))
    np.testing.assert_array_equal(
        pos[0, 0, :, s:s + 5],
        [[s, s, s, s, s + 2], [s, s, s + 1, s + 1, s + 2],
         [s, s + 1, s, s + 1, s + 2]])

  def test_export_is_a_qwen2_5_vl_checkpoint(self):
    """`io.hf.save(model.vl, cfg.vl)` then `io.hf.load`: the same logits."""
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory() as d:
      hf.save(self.model.vl, self.cfg.vl, d)
      with open(os.path.join(d, "config.json")) as f:
        self.assertEqual(json.load(f)["architectures"],
                         ["Qwen2_5_VLForConditionalGeneration"])
      loaded, _ = hf.load(d)
    n = int(self.batch["answer_index"][0, 0]) + 1
    ids = jnp.asarray(self.batch["input_ids"][:, 0, :n])
    pv, grids = _pixel_values(self.row_images[0])
    a = self.model.vl.forward(ids, pixel_values=pv, image_grid_thw=grids)
    b = loaded.forward(ids, pixel_values=pv, image_grid_thw=grids)
    np.testing.assert_allclose(b.logits, a.logits, rtol=1e-6, atol=1e-6)


  def test_exported_reranker_in_transformers_scores_the_same(self):
    """The exported backbone in transformers'
    `Qwen2_5_VLForConditionalGeneration`, given the collated batch (right
    padding, rows of 2 and 1 images) with `mm_token_type_ids` = (ids ==
    image id), computes its own M-RoPE positions (`get_rope_index`) and
    gives the heads' logits at the answer positions: the prompts need no
    `<|vision_start|>` tokens in transformers 5."""
    try:
      import torch  # pylint: disable=g-import-not-at-top
      import transformers  # pylint: disable=g-import-not-at-top
    except ImportError:  # pragma: no cover
      self.skipTest("needs torch + transformers")
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    from jaxlab.testing import hf_fixtures  # pylint: disable=g-import-not-at-top
    cleanup = hf_fixtures.inductor_cleanup()
    self.addCleanup(cleanup)
    ids = self.batch["input_ids"][0]                      # [G, T]
    mask = self.batch["attention_mask"][0]
    pv, grids = _pixel_values([im for row in self.row_images for im in row])
    with tempfile.TemporaryDirectory() as d:
      hf.save(self.model.vl, self.cfg.vl, d)
      ref = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
          d, attn_implementation="eager").eval()
      inputs = dict(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    pixel_values=torch.tensor(pv),
                    image_grid_thw=torch.tensor(np.asarray(grids)))
      with torch.no_grad():
        logits = ref(**inputs, mm_token_type_ids=torch.tensor(
            (ids == self.cfg.image_token_id).astype(np.int64))).logits.numpy()
        plain = ref(**inputs).logits.numpy()  # 1-D positions: differs
    heads = self.model.score_heads(
        {k: jnp.asarray(v) for k, v in self.batch.items()})
    cfg = self.cfg
    for g in range(2):
      z = logits[g, int(self.batch["answer_index"][0, g])]
      tol = 2 ** 8 * np.finfo(np.float32).eps * max(1.0, np.abs(z).max())
      np.testing.assert_allclose(
          [float(heads.z_yes[0, g]), float(heads.z_no[0, g])],
          z[[cfg.yes_id, cfg.no_id]], rtol=0, atol=tol)
    a = int(self.batch["answer_index"][0, 0])
    self.assertGreater(np.abs(plain[0, a] - logits[0, a]).max(), 1e-3)


class QwenVLRerankExperimentTest(absltest.TestCase):

  def test_vl_smoke_run(self):
    """(c) `rerank` preset vl,tiny,smoke end to end: the imported Qwen2
    fixture is the language model, a LoRA-trained cell, finite nDCG. One
    of the preset's two cells (each run's fixed cost, mostly compiles and
    the final checkpoint, is ~25 s on a 2-core CPU)."""
    from jaxlab.configs import rerank as rerank_configs  # pylint: disable=g-import-not-at-top
    from jaxlab.experiments import rerank as rerank_exp  # pylint: disable=g-import-not-at-top
    config = rerank_configs.get_config("vl,tiny,smoke")
    self.assertEqual((config.reranker.arch, config.table, config.lora.rank,
                      config.cells),
                     ("qwen2_5_vl", "vl_probe", 16, "sft/sft,cl/cl"))
    with config.unlocked():
      config.cells = "cl/cl"
    with tempfile.TemporaryDirectory() as wd:
      t0 = time.time()
      out = rerank_exp.run(config, wd)
      print(f"[vl smoke] {time.time() - t0:.1f}s {out}")
      with open(os.path.join(wd, "results.json")) as f:
        res = json.load(f)
      runs = res["extra"]["runs"]
      # The fixture's decoder weights are the language model's.
      from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
      dec, _ = hf.load(os.path.join(wd, "backbone"))
      cfg = rerank_exp.ensure_backbone(config, wd)
      tok = rerank_exp.make_tokenizer(cfg)
      model = rerank_exp.make_model(cfg, rerank_exp.reranker_config(cfg, tok),
                                    0)
    self.assertEqual([r["cell"] for r in runs], ["cl/cl"])
    self.assertEqual(res["extra"]["cells"], ["cl/cl"])
    for r in runs:
      self.assertTrue(np.isfinite(r["ndcg@10"]))
      self.assertBetween(r["ndcg@10"], 0.0, 1.0)
    self.assertEqual(res["tables"][0]["id"], "vl_probe")
    self.assertIsInstance(model.vl, qwen2_vl.Qwen2VL)
    np.testing.assert_array_equal(
        model.vl.language_model.embed_vd[...], dec.embed_vd[...])
    jax.tree.map(np.testing.assert_array_equal,
                 nnx.to_pure_dict(nnx.state(model.vl.language_model)),
                 nnx.to_pure_dict(nnx.state(dec)))


if __name__ == "__main__":
  absltest.main()
