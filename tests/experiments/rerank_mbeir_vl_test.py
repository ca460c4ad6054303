"""Paper A's reranker on a Qwen2.5-VL checkpoint, and `rerank:paper,short`
on an M-BEIR-layout copy with image queries and candidates.

The checkpoint is a tiny random transformers
`Qwen2_5_VLForConditionalGeneration` with its tokenizer, chat template and
preprocessor config (`jaxlab.testing.vl_fixtures`). The M-BEIR copy follows
the TIGER-Lab/M-BEIR layout as UniIR's `src/data/mbeir_dataset.py` reads it
(`query/<split>/mbeir_<task>_<split>.jsonl` rows with `qid`, `query_txt`,
`query_img_path`, `query_modality`, `pos_cand_list`, `neg_cand_list`,
`task_id`; `cand_pool/local/mbeir_<task>_cand_pool.jsonl` rows with `did`,
`txt`, `img_path`, `modality`; `img_path` relative to the dataset root,
`os.path.join(mbeir_data_dir, img_path)`), with small PNGs written here
under `mbeir_images/`.

(a) The reranker's yes / no logits at the answer position (hence both
scores: CL's z_y, SFT's sigmoid(z_y - z_n)) equal transformers' forward on
the same ids and pixels. (b) The e2e run through `main.run_experiment`:
rows counted, LoRA factors trained while every base weight (vision tower
and language model) is the checkpoint's, and nDCG@10 per task and their
average equal sklearn's `ndcg_score` on the run's own scores.
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np
from flax import nnx
from PIL import Image
from sklearn import metrics as sk_metrics

from jaxlab import main
from jaxlab.configs import rerank as rerank_config
from jaxlab.evals import vl_chat
from jaxlab.io import pretrained
from jaxlab.models import reranker as rr
from jaxlab.objectives import rerank as rerank_obj
from jaxlab.testing import vl_fixtures
from jaxlab.train import trainer

SIDE = 16       # image side: 4 x 4 patches of 4, 2 x 2 merged = 4 tokens
WORDS = ["cat", "dog", "fish", "bird", "tree", "rock"]
TEMPLATE = rr.PromptTemplate(
    system="Judge.",
    template="<Instruct>: {instruction}\n<Query>: {query}\n"
             "<Document>: {document}")


def _png(path, seed, shape=(12, 20)):
  """A random RGB PNG (not square: the reranker resizes it to SIDE)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  px = np.random.default_rng(seed).integers(0, 256, shape + (3,), np.uint8)
  Image.fromarray(px).save(path)
  return path


def _write_jsonl(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")


def _write_mbeir(root):
  """webqa_task1 (text -> text) and nights_task4 (image -> image: query
  and candidates are PNGs under mbeir_images/nights_images/)."""
  counts = {}
  text_pool = [{"did": f"1:{i}", "txt": f"about the {w}", "img_path": None,
                "modality": "text"} for i, w in enumerate(WORDS)]
  img_pool = []
  for i in range(len(WORDS)):
    rel = f"mbeir_images/nights_images/cand{i}.png"
    _png(os.path.join(root, rel), seed=i)
    img_pool.append({"did": f"4:{i}", "txt": "", "img_path": rel,
                     "modality": "image"})
  _write_jsonl(os.path.join(root, "cand_pool", "local",
                            "mbeir_webqa_task1_cand_pool.jsonl"), text_pool)
  _write_jsonl(os.path.join(root, "cand_pool", "local",
                            "mbeir_nights_task4_cand_pool.jsonl"), img_pool)
  for split, idx in (("train", range(0, 4)), ("test", range(2, 6))):
    text_rows = [{"qid": f"1:{split}{i}",
                  "query_txt": f"where is the {WORDS[i]}?",
                  "query_img_path": None, "query_modality": "text",
                  "query_src_content": None, "pos_cand_list": [f"1:{i}"],
                  "neg_cand_list": [f"1:{(i + 1) % 6}"], "task_id": 1}
                 for i in idx]
    img_rows = []
    for i in idx:
      rel = f"mbeir_images/nights_images/{split}_q{i}.png"
      _png(os.path.join(root, rel), seed=100 + i)
      img_rows.append({"qid": f"4:{split}{i}", "query_txt": None,
                       "query_img_path": rel, "query_modality": "image",
                       "query_src_content": None,
                       "pos_cand_list": [f"4:{i}"],
                       "neg_cand_list": [f"4:{(i + 2) % 6}"], "task_id": 4})
    _write_jsonl(os.path.join(root, "query", split,
                              f"mbeir_webqa_task1_{split}.jsonl"), text_rows)
    _write_jsonl(os.path.join(root, "query", split,
                              f"mbeir_nights_task4_{split}.jsonl"), img_rows)
    counts[split] = len(text_rows) + len(img_rows)
  return counts


def _qwen2_vl_checkpoint(path, seed=0, init_std=0.2):
  """A tiny random transformers `Qwen2VLForConditionalGeneration` (Qwen2-VL:
  LayerNorm + quick_gelu tower, no windows) with the fixture's tokenizer,
  chat template and preprocessor config."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  vl_fixtures.make_qwen_vl_tokenizer(path)
  tok = transformers.AutoTokenizer.from_pretrained(path)
  ids = {t: tok.convert_tokens_to_ids(t) for t in vl_fixtures.SPECIALS}
  cfg = transformers.Qwen2VLConfig(
      text_config=dict(
          vocab_size=416, hidden_size=32, intermediate_size=48,
          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
          rms_norm_eps=1e-6, max_position_embeddings=4096,
          bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
          rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                           "mrope_section": [2, 3, 3]},
          tie_word_embeddings=False),
      vision_config=dict(depth=2, embed_dim=16, hidden_size=32, mlp_ratio=2,
                         num_heads=2, patch_size=4, temporal_patch_size=2,
                         spatial_merge_size=2, in_channels=3),
      image_token_id=ids["<|image_pad|>"],
      video_token_id=ids["<|video_pad|>"],
      vision_start_token_id=ids["<|vision_start|>"],
      vision_end_token_id=ids["<|vision_end|>"])
  torch.manual_seed(seed)
  model = transformers.Qwen2VLForConditionalGeneration(cfg)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" not in name and "ln_q" not in name:
        p.normal_(0.0, init_std)
  model.save_pretrained(path)
  with open(os.path.join(path, "preprocessor_config.json"), "w") as f:
    json.dump({"image_processor_type": "Qwen2VLImageProcessor",
               "patch_size": 4, "temporal_patch_size": 2, "merge_size": 2,
               "min_pixels": 64, "max_pixels": 64 * 64 * 16,
               "image_mean": [0.48145466, 0.4578275, 0.40821073],
               "image_std": [0.26862954, 0.26130258, 0.27577711]}, f)
  return path


def _pure(tree):
  return jax.tree.map(np.asarray, nnx.to_pure_dict(tree))


def _flat(tree):
  return {jax.tree_util.keystr(p): v
          for p, v in jax.tree_util.tree_leaves_with_path(tree)}


class RerankMbeirVLTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    vl_fixtures.make_qwen2_5_vl_checkpoint(cls.ckpt, patch_size=4,
                                           init_std=0.2)
    cls.ckpt2 = _qwen2_vl_checkpoint(os.path.join(cls.root, "ckpt2"))
    cls.data = os.path.join(cls.root, "M-BEIR")
    cls.counts = _write_mbeir(cls.data)
    # The tiny BPE vocabulary has no "yes" / "no" piece: two of its merges
    # stand in as the label tokens (a real checkpoint has the words).
    hf_tok = pretrained.tokenizer(cls.ckpt).hf
    cls.yes, cls.no = hf_tok.convert_ids_to_tokens([331, 338])

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_scores_equal_transformers(self):
    """(a) On Qwen2.5-VL and Qwen2-VL checkpoints: z_y, z_n (CL score z_y,
    SFT score sigmoid(z_y - z_n)) at each prompt's answer position ==
    transformers' logits of the same ids,
    attention mask and pixel values (a batch of three documents: image +
    text, text, image; the query an image + text)."""
    import transformers  # pylint: disable=g-import-not-at-top
    from jaxlab.testing import hf_fixtures  # pylint: disable=g-import-not-at-top
    self.addCleanup(hf_fixtures.inductor_cleanup())
    for ckpt, ref_cls in (
        (self.ckpt, transformers.Qwen2_5_VLForConditionalGeneration),
        (self.ckpt2, transformers.Qwen2VLForConditionalGeneration)):
      with self.subTest(ref_cls.__name__):
        self._check_scores(ckpt, ref_cls)

  def _check_scores(self, ckpt, ref_cls):
    import torch  # pylint: disable=g-import-not-at-top
    chat = vl_chat.VLChat.load(ckpt)
    cfg = rr.from_vl(chat.tokenizer, chat.model.cfg, image_size=SIDE,
                     image_mean=chat.processor.image_mean,
                     image_std=chat.processor.image_std, yes_token=self.yes,
                     no_token=self.no)
    self.assertEqual(cfg.vision.variant, "qwen2_vl" if ref_cls.__name__
                     .startswith("Qwen2VL") else "qwen2_5_vl")
    model = rr.Reranker(cfg, rngs=nnx.Rngs(0), vl=chat.model)
    img = os.path.join(self.data, "mbeir_images/nights_images/cand0.png")
    arr = np.asarray(Image.open(
        os.path.join(self.data, "mbeir_images/nights_images/cand1.png")))
    group = ("find it", {"text": "a red cat", "image": img},
             [{"text": "the dog", "image": arr},
              {"text": "a cat in a tree", "image": None},
              {"text": None, "image": img}])
    batch = rr.collate_chat_groups([group], chat, cfg, TEMPLATE, max_len=96)
    ids = batch["input_ids"][0]
    # The chat template's turns, the images as its vision blocks.
    tok = chat.tokenizer
    text = tok.decode(ids[0, :batch["answer_index"][0, 0] + 1])
    self.assertTrue(text.startswith("<|im_start|>system\nJudge.<|im_end|>"))
    self.assertTrue(text.endswith("<|im_end|>\n<|im_start|>assistant\n"))
    self.assertEqual(text.count("<|vision_start|>" + "<|image_pad|>" * 4 +
                                "<|vision_end|>"), 2)
    n_img = [2, 1, 2]
    np.testing.assert_array_equal((ids == cfg.image_token_id).sum(-1),
                                  [4 * n for n in n_img])
    heads = model.score_heads({k: jax.numpy.asarray(v)
                               for k, v in batch.items()})

    ref = ref_cls.from_pretrained(ckpt, attn_implementation="eager").eval()
    pv = np.concatenate([batch["pixel_values"][0, g, i]
                         for g, n in enumerate(n_img) for i in range(n)])
    with torch.no_grad():
      logits = ref(
          input_ids=torch.tensor(ids, dtype=torch.long),
          attention_mask=torch.tensor(batch["attention_mask"][0],
                                      dtype=torch.long),
          pixel_values=torch.tensor(pv),
          image_grid_thw=torch.tensor([cfg.image_grid] * sum(n_img)),
          mm_token_type_ids=torch.tensor(
              (ids == cfg.image_token_id).astype(np.int64))).logits.numpy()
    for g in range(3):
      z = logits[g, int(batch["answer_index"][0, g])]
      # float32 tolerance: the two sides sum the same products in another
      # order (hidden 32, one decoder layer, a 2-block tower); each
      # rounding is <= eps relative to the logit scale, and 2^8 eps bounds
      # their accumulation with room (the logits here are O(1)).
      tol = 2 ** 8 * np.finfo(np.float32).eps * max(1.0, np.abs(z).max())
      want = z[[cfg.yes_id, cfg.no_id]]
      got = [float(heads.z_yes[0, g]), float(heads.z_no[0, g])]
      np.testing.assert_allclose(got, want, rtol=0, atol=tol)
      sft = float(rerank_obj.rank_score(heads, "sft", "sft")[0, g])
      np.testing.assert_allclose(
          sft, 1 / (1 + np.exp(-(want[0] - want[1]))), rtol=0, atol=2 * tol)
    # The image matters: another picture, another score.
    other = dict(batch, pixel_values=batch["pixel_values"][..., ::-1])
    moved = model.score_heads({k: jax.numpy.asarray(v)
                               for k, v in other.items()})
    self.assertGreater(abs(float(moved.z_yes[0, 2] - heads.z_yes[0, 2])),
                       1e-4)

  def test_read_split_with_images(self):
    """Image queries / candidates keep their files (joined to the dataset
    root, as UniIR does); the text-only reading skips them; a missing image
    is one clear error."""
    from jaxlab.data import mbeir  # pylint: disable=g-import-not-at-top
    groups, n = mbeir.read_split(self.data, "test", images=True)
    self.assertEqual(n, self.counts["test"])
    self.assertLen(groups, 8)
    g = [x for x in groups if x["task"] == "nights_task4"][0]
    self.assertEqual(g["query"], {"text": None, "image": os.path.join(
        self.data, "mbeir_images/nights_images/test_q2.png")})
    self.assertEqual(g["positives"], [{"text": None, "image": os.path.join(
        self.data, "mbeir_images/nights_images/cand2.png")}])
    text_only, n = mbeir.read_split(self.data, "test")
    self.assertEqual(n, self.counts["test"])
    self.assertEqual({x["task"] for x in text_only}, {"webqa_task1"})
    bad = os.path.join(self.root, "bad")
    shutil.copytree(self.data, bad)
    os.remove(os.path.join(bad, "mbeir_images/nights_images/cand2.png"))
    with self.assertRaisesRegex(ValueError, "cand2.png' not found"):
      mbeir.read_split(bad, "test", images=True)

  def test_paper_short_runs_and_scores_ndcg(self):
    """(b) `rerank:paper,short` on the VL checkpoint, in process."""
    c = rerank_config.get_config("paper,short")
    c.init_from = self.ckpt
    c.data.path = self.data
    c.data.max_rows = 0          # every row written here
    c.reranker.labels.update(yes_token=self.yes, no_token=self.no,
                             label_tokens_pos=(self.yes,),
                             label_tokens_neg=(self.no,), num_label_tokens=2)
    c.task.update(num_negatives=2, eval_candidates=3, image_size=SIDE)
    c.prompt.system = "Judge."
    c.prompt.max_len = c.train.seq_len = 128
    c.train.update(steps=2, batch_size=8)
    c.optim.lr = 1e-2
    self.assertEqual(tuple(c.lora.targets),
                     ("q_dnh", "k_dkh", "v_dkh", "o_nhd", "gate_df", "up_df",
                      "down_fd"))
    trained = []
    real = trainer.train

    def capture(*args, **kwargs):
      res = real(*args, **kwargs)
      ts = res["train_state"]
      model, _ = nnx.merge(ts.graphdef, ts.state, copy=True)  # unmerged
      trained.append(_pure(nnx.state(model)))
      return res
    wd = os.path.join(self.root, "wd")
    with mock.patch.object(trainer, "train", side_effect=capture):
      main.run_experiment(c, wd)
    with open(os.path.join(wd, "results.json")) as f:
      res = json.load(f)
    self.assertEqual(res["data"]["rows"], self.counts)
    self.assertEqual(res["data"]["path"], self.data)

    # LoRA trained; every base weight the checkpoint's (the vision tower
    # loaded, not random; the language model frozen under LoRA).
    base, _ = pretrained.load(self.ckpt)
    want = _pure(nnx.state(base))
    self.assertLen(trained, 2)
    flat_want = _flat(want)
    for state in trained:
      got = _flat(state["vl"])
      lora_b = {k: v for k, v in got.items() if "_lora_b" in k}
      # One adapter per targeted projection of the language model, none in
      # the vision tower (its weights are named kernel / bias).
      self.assertEqual(
          sorted({k.split("'")[-2] for k in lora_b}),
          ["down_fd_lora_b", "gate_df_lora_b", "k_dkh_lora_b",
           "o_nhd_lora_b", "q_dnh_lora_b", "up_df_lora_b", "v_dkh_lora_b"])
      self.assertTrue(all(k.startswith("['language_model']") for k in lora_b))
      self.assertTrue(any(np.abs(v).max() > 0 for v in lora_b.values()))
      base_got = {k: v for k, v in got.items() if "_lora_" not in k}
      self.assertEqual(sorted(base_got), sorted(flat_want))
      for k, v in flat_want.items():
        np.testing.assert_array_equal(base_got[k], v, err_msg=k)

    extra = res["extra"]
    labels = np.array(extra["labels"])
    tasks = np.array(extra["eval_tasks"])
    self.assertEqual(extra["tasks"], ["nights_task4", "webqa_task1"])
    self.assertEqual(labels.shape, (8, 3))   # 4 test queries a task
    self.assertLen(extra["runs"], 2)
    for r in extra["runs"]:
      scores = np.array(r["scores"])
      per = []
      for task in sorted(set(tasks)):
        sel = tasks == task
        ref = sk_metrics.ndcg_score(labels[sel], scores[sel], k=10)
        np.testing.assert_allclose(r[f"ndcg@10/{task}"], ref, atol=1e-6)
        per.append(ref)
      np.testing.assert_allclose(r["ndcg@10"], np.mean(per), atol=1e-6)
      self.assertTrue(np.isfinite(r["final_loss"]))


if __name__ == "__main__":
  absltest.main()
