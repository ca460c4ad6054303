"""Paper A's W x D probe: cells, reranker building, evaluation by rank score.

The library side of `jaxlab.experiments.rerank`: a cell ("W/D" surrogate or
"native/cl|sft") as `config.loss` fields (`parse_cell`), the multimodal
reranker's config from the experiment's sections (`reranker_config`), its
model (random or with an imported HF decoder, `make_model`), the learnable
D_Rand head under LoRA (`learnable_random_head`), the embedding miniature's
frozen pretrained head (`pretrained_embedding_model`), and held-out
reranking scored by the objective's `rank_score` (`evaluate`,
`embedding_evaluate`: nDCG@k, MRR@k, recall@1), with the mean loss weights
logged by the `"rerank"` loss (`mean_w`) and the per-cell summary
(`summarize`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.data import tokenizers
from jaxlab.evals import ranking
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import qwen2_vl
from jaxlab.models import reranker as rr
from jaxlab.models import vit as vit_lib
from jaxlab.objectives import rerank as rerank_obj
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import runner as runner_lib

W_KEYS = ("w_pos", "w_neg", "w_cl_pos", "w_cl_neg", "w_sft_pos", "w_sft_neg")


def parse_cell(cell: str) -> dict:
  """'sft/cl' -> loss fields; 'native/cl' -> native objective."""
  parts = cell.strip().split("/")
  if len(parts) != 2:
    raise ValueError(f"config.cells entry {cell!r} must be 'W/D' or "
                     "'native/cl' / 'native/sft'")
  w, d = parts
  if w == "native":
    if d not in ("cl", "sft"):
      raise ValueError(f"config.cells entry {cell!r}: native objective must "
                       "be cl or sft")
    return {"objective": d, "weight": d, "direction": d}
  if w not in rerank_obj.WEIGHTS:
    raise ValueError(f"config.cells entry {cell!r}: unknown weight {w!r}; "
                     f"valid: {', '.join(sorted(rerank_obj.WEIGHTS))}")
  if d not in rerank_obj.DIRECTIONS:
    raise ValueError(f"config.cells entry {cell!r}: unknown direction {d!r}; "
                     f"valid: {', '.join(sorted(rerank_obj.DIRECTIONS))}")
  return {"objective": "url", "weight": w, "direction": d}


def reranker_config(config, tok) -> rr.RerankerConfig:
  """`config.reranker`'s sections as `DecoderConfig(**decoder)`,
  `ViTConfig(**vit)` (arch "qwen2_5_vl": `qwen2_vl.VisionConfig(**vision)`
  instead) and `RerankerConfig.from_tokenizer(**labels)`; the
  vocabulary, context length, image size and ViT output width follow from
  the tokenizer, the prompt, the task and the decoder."""
  r = config.reranker
  vocab = tokenizers.padded_vocab_size(tok.vocab_size)
  dec = decoder_lib.DecoderConfig(
      **r.decoder, vocab_size=vocab,
      max_position_embeddings=max(int(config.prompt.max_len), 64))
  vit = vit_lib.ViTConfig(**r.vit, image_size=config.task.image_size,
                          out_dim=dec.dim)
  labels = dict(r.labels)
  for key in ("label_tokens_pos", "label_tokens_neg"):
    labels[key] = tuple(labels[key])
  arch = r.get("arch", "vit_decoder")
  extra = {}
  if arch == "qwen2_5_vl":
    # The Qwen2.5-VL tower instead of the ViT; the processor's (OpenAI
    # CLIP) normalisation; its output width follows the decoder.
    from jaxlab.data import vision_processor as vp  # pylint: disable=g-import-not-at-top
    vision = dict(r.vision)
    vision["fullatt_block_indexes"] = tuple(
        vision.get("fullatt_block_indexes", ()))
    extra = dict(arch=arch, vision=qwen2_vl.VisionConfig(
        **vision, out_hidden_size=dec.dim),
                 image_size=int(config.task.image_size),
                 image_mean=vp.OPENAI_CLIP_MEAN, image_std=vp.OPENAI_CLIP_STD)
    vit = None
  cfg = rr.RerankerConfig.from_tokenizer(
      tok, decoder=dec, vit=vit, random_direction=True, **labels, **extra)
  if config.init_from:
    # Import the decoder's architecture; the ViT (or the Qwen2.5-VL tower,
    # in `RerankerConfig`) projects to its width.
    # (`pretrained.load_config`: an HF directory, a GGUF, a shipped name.)
    from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
    dcfg = pretrained.load_config(config.init_from)
    cfg = dataclasses.replace(
        cfg, decoder=dcfg, vit=None if vit is None else dataclasses.replace(
            vit, out_dim=dcfg.dim))
  return cfg


def make_model(config, rcfg: rr.RerankerConfig, seed: int, *,
               learn_random_head: bool = False):
  """Zero-arg factory (full fine-tuning) or, with `init_from`, an instance
  whose decoder is an imported HF checkpoint (use with `lora.rank`; arch
  "qwen2_5_vl": the Qwen2VL's `language_model`, the vision tower random).

  With `learn_random_head` and `lora.rank` > 0, the D_Rand head R (spec 8:
  "a randomly initialised, learnable projection") is re-typed as a
  `jaxlab.train.lora.LoRA` variable, the type the trainer optimises under
  LoRA, so it is learned beside the adapters (otherwise LoRA would leave it
  frozen at its random init); `merge_lora` ignores it (no `_lora_a/_b`
  pair) and the model reads it as before.
  """
  if not config.init_from:
    return lambda: rr.Reranker(rcfg, rngs=nnx.Rngs(seed))
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  dec, _ = pretrained.load(config.init_from)
  model = rr.Reranker(rcfg, rngs=nnx.Rngs(seed))
  if model.vl is not None:  # Qwen2.5-VL: the LM imported, the tower random
    model.vl.language_model = dec
  else:
    model.decoder = dec
  if learn_random_head and int(config.lora.rank) > 0:
    learnable_random_head(model)
  return model


def vl_reranker_config(config, chat) -> rr.RerankerConfig:
  """The reranker config of a loaded Qwen2.5-VL / Qwen2-VL `chat`
  (`jaxlab.evals.vl_chat.VLChat`): the checkpoint's own architecture
  (`rr.from_vl`), its processor's normalisation, images
  `task.image_size` square, the label tokens of `reranker.labels`."""
  labels = dict(config.reranker.labels)
  for key in ("label_tokens_pos", "label_tokens_neg"):
    labels[key] = tuple(labels[key])
  proc = chat.processor
  return rr.from_vl(chat.tokenizer, chat.model.cfg,
                    image_size=int(config.task.image_size),
                    image_mean=tuple(proc.image_mean),
                    image_std=tuple(proc.image_std), random_direction=True,
                    **labels)


def make_vl_model(config, rcfg: rr.RerankerConfig, seed: int, *,
                  learn_random_head: bool = False) -> rr.Reranker:
  """The reranker on the whole `init_from` Qwen2.5-VL / Qwen2-VL checkpoint
  (vision tower and language model loaded, `jaxlab.io.pretrained.load`);
  a fresh load each call (the trainer may donate its buffers)."""
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  vl, _ = pretrained.load(config.init_from)
  model = rr.Reranker(rcfg, rngs=nnx.Rngs(seed), vl=vl)
  if learn_random_head and int(config.lora.rank) > 0:
    learnable_random_head(model)
  return model


class ChatGroupSource:
  """Random-access training groups (`[G, ...]` numpy arrays) collated
  through a checkpoint's chat template (`rr.collate_chat_groups`)."""

  def __init__(self, groups, chat, rcfg, template, max_len):
    self.groups, self.chat, self.rcfg = groups, chat, rcfg
    self.template, self.max_len = template, max_len

  def __len__(self):
    return len(self.groups)

  def __getitem__(self, i):
    ex = self.groups[i]
    batch = rr.collate_chat_groups(
        [(ex["instruction"], ex["query"], ex["positives"] + ex["negatives"])],
        self.chat, self.rcfg, self.template, max_len=self.max_len)
    return {k: v[0] for k, v in batch.items()}


def learnable_random_head(model: rr.Reranker) -> rr.Reranker:
  """Re-types the D_Rand head R as a `jaxlab.train.lora.LoRA` variable (same
  values, in place), the type the trainer optimises under LoRA."""
  from jaxlab.train import lora as lora_lib  # pylint: disable=g-import-not-at-top
  r = model.rand_head_dk
  if r is None:
    raise ValueError("the reranker has no random head (reranker config "
                     "random_direction=False)")
  model.rand_head_dk = lora_lib.LoRA(
      r.get_value(), out_sharding=r.get_metadata().get("out_sharding"),
      eager_sharding=False)
  return model


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _score(graphdef, params, batch, kind, direction):
  model = nnx.merge(graphdef, params)
  return rerank_obj.rank_score(model.score_heads(batch), kind,
                               direction)[:, 0]


def evaluate(model, flat, labels, tasks, config, direction, *,
             return_scores: bool = False) -> dict:
  """nDCG@k (overall and per task), MRR@k and recall@1 of the multimodal
  reranker on `eval_inputs`' candidate lists."""
  graphdef, params = nnx.split(model)
  kind = config.eval.rank_score
  direction = direction if kind == "direction" else "sft"
  scores = ranking.batched_scores(
      lambda chunk: _score(graphdef, params,
                           {k: jnp.asarray(v) for k, v in chunk.items()},
                           kind, direction),
      flat, int(config.eval.batch_size)).reshape(labels.shape)
  out = _ranking_metrics(scores, labels, int(config.eval.k))
  k = int(config.eval.k)
  for task in sorted(set(tasks)):
    sel = tasks == task
    out[f"ndcg@{k}/{task}"] = ranking.ndcg_at_k(scores[sel], labels[sel], k)
  if return_scores:
    out["scores"] = scores
  return out


def _ranking_metrics(scores, labels, k: int) -> dict:
  return {f"ndcg@{k}": ranking.ndcg_at_k(scores, labels, k),
          f"mrr@{k}": ranking.mrr_at_k(scores, labels, k),
          "recall@1": ranking.recall_at_k(scores, labels, 1)}


def embedding_evaluate(model, inputs, labels, config, direction) -> dict:
  """nDCG@k, MRR@k and recall@1 of the embedding miniature."""
  kind = config.eval.rank_score
  heads = model.score_heads({k: jnp.asarray(v) for k, v in inputs.items()})
  scores = np.asarray(rerank_obj.rank_score(
      heads, kind, direction if kind == "direction" else "sft"))
  return _ranking_metrics(scores, labels, int(config.eval.k))


def mean_w(workdir: str) -> dict:
  """Mean of each logged loss weight (`W_KEYS`) over a run's metric rows."""
  rows = [r for r in metrics_lib.read_metrics(workdir) if "w_pos" in r]
  return {k: float(np.mean([r[k] for r in rows])) if rows else float("nan")
          for k in W_KEYS}


_PRETRAINED: dict = {}


def pretrained_embedding_model(config, seed: int) -> rr.EmbeddingReranker:
  """`pretrain_embedding_model`, memoised per (embedding section, labels,
  seed) as host numpy (each cell of a sweep starts from the same weights; a
  fresh instance each call, so the trainer may donate its buffers)."""
  key = (config.embedding.to_json(), int(config.reranker.labels.
                                         num_label_tokens), int(seed))
  if key not in _PRETRAINED:
    model = pretrain_embedding_model(config, seed)
    _PRETRAINED[key] = (nnx.graphdef(model),
                        jax.tree.map(np.asarray, nnx.state(model)))
  graphdef, state = _PRETRAINED[key]
  return nnx.merge(graphdef, jax.tree.map(jnp.asarray, state))


def pretrain_embedding_model(config, seed: int) -> rr.EmbeddingReranker:
  """Builds the MLP reranker and pretrains it (head included) on a different
  binary task, sign(<q, d> over the first half of the dims), then freezes the
  head: the spec's "frozen, pretrained unembedding".

  The pretraining is the trainer's update (`jaxlab.train.runner.StepRunner`
  on the registered `"rerank_head_pretrain"` loss) with plain Adam
  (optax defaults b2 = 0.999, no clipping or decay, constant lr).
  """
  e = config.embedding
  model = rr.EmbeddingReranker(
      int(e.embed_dim), int(e.hidden), int(e.dim),
      num_label_tokens=int(config.reranker.labels.num_label_tokens),
      rngs=nnx.Rngs(seed))
  steps = int(e.pretrain_steps)
  optim = runner_lib.optim_config(lr=float(e.pretrain_lr), clip_norm=0.0,
                                  b1=0.9, b2=0.999, eps=1e-8)
  runner = runner_lib.StepRunner(model, loss="rerank_head_pretrain",
                                 loss_config=None, optim=optim, steps=steps,
                                 seed=seed)
  rng = np.random.default_rng((seed, 77))
  batch = int(e.pretrain_batch_size)
  for step in range(steps):
    q = rng.normal(size=(batch, int(e.embed_dim))).astype(np.float32)
    d = rng.normal(size=(batch, 1, int(e.embed_dim))).astype(np.float32)
    runner.step({"query": q, "docs": d}, step)
  runner.write_back()
  model.freeze_head()
  return model


def summarize(runs: list[dict], k: int) -> list[dict]:
  """Per (cell, N): seeds, nDCG@k mean and std (ddof 1), MRR@k and weight
  means (`results.json["extra"]["table"]`)."""
  rows = {}
  for r in runs:
    rows.setdefault((r["cell"], r["negatives"]), []).append(r)
  table = []
  for (cell, n), rs in rows.items():
    nd = np.array([r[f"ndcg@{k}"] for r in rs])
    row = {"cell": cell, "negatives": n, "seeds": len(rs),
           f"ndcg@{k}_mean": float(nd.mean()),
           f"ndcg@{k}_std": float(nd.std(ddof=1)) if len(rs) > 1 else 0.0,
           f"mrr@{k}_mean": float(np.mean([r[f"mrr@{k}"] for r in rs]))}
    for key in W_KEYS:
      row[f"{key}_mean"] = float(np.mean([r[key] for r in rs]))
    table.append(row)
  return table
