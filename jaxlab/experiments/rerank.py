"""Paper A miniature: the W x D probing table on synthetic multimodal retrieval.

For each cell ("W/D" surrogate or "native/cl|sft"), each negatives count N and
each seed, trains the multimodal reranker (`jaxlab.models.reranker`) with the
generic trainer and the registered `"rerank"` loss, then reranks held-out
synthetic queries (1 positive + 15 negatives, half near-duplicates) and
scores nDCG@10 / MRR@10. Writes WORKDIR/results.json (`jaxlab.experiments.results`
schema: per-seed nDCG@10, MRR@10 and mean W+ / W- of each cell, the claimed
paired comparisons), table.md and per-run workdirs under WORKDIR/runs/ (a
finished run is skipped on re-launch).

Every training is the trainer's: the reranker cells through `trainer.train`
on the registered `"rerank"` loss, the embedding miniature's head
pretraining through `jaxlab.train.runner.StepRunner` on
`"rerank_head_pretrain"`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.experiments import results as results_lib
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import retrieval as synth
from jaxlab.evals import ranking
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import reranker as rr
from jaxlab.models import vit as vit_lib
from jaxlab.objectives import rerank as rerank_obj
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import runner as runner_lib
from jaxlab.train import trainer

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


def make_tokenizer(config) -> tokenizers.Tokenizer:
  """Byte tokenizer with specials, or an imported model's sentencepiece."""
  if config.data.tokenizer == "sentencepiece":
    return tokenizers.SentencePieceTokenizer(config.data.tokenizer_path)
  if config.data.tokenizer != "byte":
    raise ValueError(f"data.tokenizer={config.data.tokenizer!r}; valid: "
                     "byte, sentencepiece")
  words = synth.VOCAB_WORDS if config.task.word_tokens else ()
  return rr.make_tokenizer(words=words)


def reranker_config(config, tok) -> rr.RerankerConfig:
  """`config.reranker`'s sections as `DecoderConfig(**decoder)`,
  `ViTConfig(**vit)` and `RerankerConfig.from_tokenizer(**labels)`; the
  vocabulary, context length, image size and ViT output width follow from
  the tokenizer, the prompt, the task and the decoder."""
  r = config.reranker
  vocab = -(-tok.vocab_size // 64) * 64
  dec = decoder_lib.DecoderConfig(
      **r.decoder, vocab_size=vocab,
      max_position_embeddings=max(int(config.prompt.max_len), 64))
  vit = vit_lib.ViTConfig(**r.vit, image_size=config.task.image_size,
                          out_dim=dec.dim)
  labels = dict(r.labels)
  for key in ("label_tokens_pos", "label_tokens_neg"):
    labels[key] = tuple(labels[key])
  cfg = rr.RerankerConfig.from_tokenizer(
      tok, decoder=dec, vit=vit, random_direction=True, **labels)
  if config.init_from:
    # Import the decoder's architecture; the ViT projects to its width.
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    dcfg = hf.config_from_hf(hf._read_config(config.init_from))  # pylint: disable=protected-access
    cfg = dataclasses.replace(
        cfg, decoder=dcfg, vit=dataclasses.replace(vit, out_dim=dcfg.dim))
  return cfg


def ensure_backbone(config, workdir: str):
  """With `backbone.fixture` set, writes a tiny random HF checkpoint of that
  architecture to WORKDIR/backbone (once; `jaxlab.testing.hf_fixtures`,
  transformers' own `save_pretrained`) sized to the tokenizer's vocabulary,
  and returns a copy of `config` whose `init_from` points at it."""
  b = config.backbone
  if not b.fixture:
    return config
  if config.init_from:
    raise ValueError("set either init_from or backbone.fixture, not both")
  if b.fixture not in ("llama", "qwen2"):
    raise ValueError(f"backbone.fixture={b.fixture!r}; valid: llama, qwen2 "
                     "or '' (none)")
  path = os.path.join(workdir, "backbone")
  if not os.path.exists(os.path.join(path, "config.json")):
    from jaxlab.testing import hf_fixtures  # pylint: disable=g-import-not-at-top
    vocab = -(-make_tokenizer(config).vocab_size // 64) * 64
    hf_fixtures.make_hf_checkpoint(
        path + ".tmp", b.fixture, vocab_size=vocab,
        hidden_size=int(b.hidden_size),
        intermediate_size=int(b.intermediate_size),
        num_layers=int(b.num_layers), num_heads=int(b.num_heads),
        num_kv_heads=int(b.num_kv_heads), init_std=float(b.init_std),
        seed=int(b.seed),
        max_position_embeddings=max(int(config.prompt.max_len), 64))
    os.replace(path + ".tmp", path)
  config = copy.deepcopy(config)
  with config.unlocked():
    config.init_from = path
  return config


def make_model(config, rcfg: rr.RerankerConfig, seed: int, *,
               learn_random_head: bool = False):
  """Zero-arg factory (full fine-tuning) or, with `init_from`, an instance
  whose decoder is an imported HF checkpoint (use with `lora.rank`).

  With `learn_random_head` and `lora.rank` > 0, the D_Rand head R (spec 8:
  "a randomly initialised, learnable projection") is re-typed as a
  `jaxlab.train.lora.LoRA` variable, the type the trainer optimises under
  LoRA, so it is learned beside the adapters (otherwise LoRA would leave it
  frozen at its random init); `merge_lora` ignores it (no `_lora_a/_b`
  pair) and the model reads it as before.
  """
  if not config.init_from:
    return lambda: rr.Reranker(rcfg, rngs=nnx.Rngs(seed))
  from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
  dec, _ = hf.load(config.init_from)
  model = rr.Reranker(rcfg, rngs=nnx.Rngs(seed))
  model.decoder = dec
  if learn_random_head and int(config.lora.rank) > 0:
    learnable_random_head(model)
  return model


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


class GroupSource:
  """Random-access training groups: dicts of `[G, ...]` numpy arrays."""

  def __init__(self, synth_source, tok, rcfg, template, max_len,
               image_token=rr.IMAGE_TOKEN):
    self.src, self.tok, self.rcfg = synth_source, tok, rcfg
    self.image_token = image_token
    self.template, self.max_len = template, max_len

  def __len__(self):
    return len(self.src)

  def __getitem__(self, i):
    ex = self.src[i]
    batch = rr.collate_groups(
        [(ex["instruction"], ex["query"], ex["positives"] + ex["negatives"])],
        self.tok, self.rcfg, self.template, max_len=self.max_len,
        image_token=self.image_token)
    return {k: v[0] for k, v in batch.items()}


def eval_inputs(config, tok, rcfg, template):
  """Flattened candidate prompts `[Q*C, 1, ...]` and labels `[Q, C]`."""
  t = config.task
  src = synth.SyntheticRetrieval(
      int(t.eval_queries), seed=int(t.eval_seed),
      tasks=tuple(t.tasks.split(",")),
      num_negatives=int(t.eval_candidates) - 1,
      hard_fraction=float(t.hard_fraction), image_size=int(t.image_size),
      doc_style=int(t.doc_style))
  groups, labels, tasks = [], [], []
  for i in range(len(src)):
    ex, cands, lab = synth.eval_candidates(src, i)
    groups.append((ex["instruction"], ex["query"], cands))
    labels.append(lab)
    tasks.append(ex["task"])
  batch = rr.collate_groups(groups, tok, rcfg, template,
                            max_len=int(config.prompt.max_len),
                            image_token=config.reranker.labels.image_token)
  flat = {k: v.reshape((-1, 1) + v.shape[2:]) for k, v in batch.items()}
  return flat, np.stack(labels), np.array(tasks)


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _score(graphdef, params, batch, kind, direction):
  model = nnx.merge(graphdef, params)
  return rerank_obj.rank_score(model.score_heads(batch), kind,
                               direction)[:, 0]


def evaluate(model, flat, labels, tasks, config, direction) -> dict:
  graphdef, params = nnx.split(model)
  kind = config.eval.rank_score
  direction = direction if kind == "direction" else "sft"
  scores = ranking.batched_scores(
      lambda chunk: _score(graphdef, params,
                           {k: jnp.asarray(v) for k, v in chunk.items()},
                           kind, direction),
      flat, int(config.eval.batch_size)).reshape(labels.shape)
  k = int(config.eval.k)
  out = {f"ndcg@{k}": ranking.ndcg_at_k(scores, labels, k),
         f"mrr@{k}": ranking.mrr_at_k(scores, labels, k),
         "recall@1": ranking.recall_at_k(scores, labels, 1)}
  for task in sorted(set(tasks)):
    sel = tasks == task
    out[f"ndcg@{k}/{task}"] = ranking.ndcg_at_k(scores[sel], labels[sel], k)
  return out


def _mean_w(workdir: str) -> dict:
  rows = [r for r in metrics_lib.read_metrics(workdir) if "w_pos" in r]
  return {k: float(np.mean([r[k] for r in rows])) if rows else float("nan")
          for k in W_KEYS}


# -- the spec's embedding miniature ---------------------------------------------


def embedding_source(config, size, seed, n_neg):
  e = config.embedding
  return synth.EmbeddingRetrieval(
      size, seed=seed, embed_dim=int(e.embed_dim), num_negatives=int(n_neg),
      hard_fraction=float(config.task.hard_fraction),
      pos_noise=float(e.pos_noise), hard_noise=float(e.hard_noise))


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


def embedding_eval_inputs(config):
  t = config.task
  src = embedding_source(config, int(t.eval_queries), int(t.eval_seed),
                         int(t.eval_candidates) - 1)
  qs, docs, labels = [], [], []
  for i in range(len(src)):
    ex = src[i]
    order = np.random.default_rng((int(t.eval_seed), i, 1)).permutation(
        len(ex["docs"]))
    qs.append(ex["query"])
    docs.append(ex["docs"][order])
    labels.append((order == 0).astype(np.int32))
  return {"query": np.stack(qs), "docs": np.stack(docs)}, np.stack(labels)


def embedding_evaluate(model, inputs, labels, config, direction) -> dict:
  kind = config.eval.rank_score
  heads = model.score_heads({k: jnp.asarray(v) for k, v in inputs.items()})
  scores = np.asarray(rerank_obj.rank_score(
      heads, kind, direction if kind == "direction" else "sft"))
  k = int(config.eval.k)
  return {f"ndcg@{k}": ranking.ndcg_at_k(scores, labels, k),
          f"mrr@{k}": ranking.mrr_at_k(scores, labels, k),
          "recall@1": ranking.recall_at_k(scores, labels, 1)}


def run_one(config, workdir, *, cell, n_neg, seed, tok, rcfg, template,
            evalset) -> dict:
  done = os.path.join(workdir, "run.json")
  if os.path.exists(done):
    with open(done) as f:
      return json.load(f)
  fields = parse_cell(cell)
  cfg = copy.deepcopy(config)
  with cfg.unlocked():
    cfg.seed = int(seed)
    for key, value in fields.items():
      cfg.loss[key] = value
  t = config.task
  embedding = config.model_kind == "embedding"
  if embedding:
    source = embedding_source(config, int(t.train_examples),
                              int(t.data_seed) + int(seed), n_neg)
    model = pretrained_embedding_model(config, int(seed))
  else:
    src = synth.SyntheticRetrieval(
        int(t.train_examples), seed=int(t.data_seed) + int(seed),
        tasks=tuple(t.tasks.split(",")), num_negatives=int(n_neg),
        hard_fraction=float(t.hard_fraction), image_size=int(t.image_size),
        doc_style=int(t.doc_style))
    source = GroupSource(src, tok, rcfg, template,
                         int(config.prompt.max_len),
                         config.reranker.labels.image_token)
    model = make_model(config, rcfg, seed,
                       learn_random_head=fields["direction"] == "random")
  res = trainer.train(cfg, workdir, model=model, train_source=source)
  ts = res["train_state"]
  trained, _ = nnx.merge(ts.graphdef, ts.state)
  from jaxlab.train import lora as lora_lib  # pylint: disable=g-import-not-at-top
  if lora_lib.has_lora(trained):
    lora_lib.merge_lora(trained)
  direction = rerank_obj.resolve_direction(fields["weight"],
                                           fields["direction"])
  if embedding:
    metrics = embedding_evaluate(trained, *evalset, config, direction)
  else:
    metrics = evaluate(trained, *evalset, config, direction)
  out = {"cell": cell, "negatives": int(n_neg), "seed": int(seed),
         "final_loss": res.get("loss"), **metrics, **_mean_w(workdir)}
  with open(done, "w") as f:
    json.dump(out, f, indent=1)
  return out


def summarize(runs: list[dict], k: int) -> list[dict]:
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


def markdown(table: list[dict], k: int) -> str:
  lines = [f"| cell (W/D) | N | nDCG@{k} (mean ± std) | MRR@{k} | mean W+ | "
           "mean W- | W_CL+ / W_CL- | W_SFT+ / W_SFT- |",
           "|---|---|---|---|---|---|---|---|"]
  for r in table:
    lines.append(
        f"| {r['cell']} | {r['negatives']} | {100 * r[f'ndcg@{k}_mean']:.1f}"
        f" ± {100 * r[f'ndcg@{k}_std']:.1f} | {100 * r[f'mrr@{k}_mean']:.1f}"
        f" | {r['w_pos_mean']:.3f} | {r['w_neg_mean']:.3f} | "
        f"{r['w_cl_pos_mean']:.3f} / {r['w_cl_neg_mean']:.3f} | "
        f"{r['w_sft_pos_mean']:.3f} / {r['w_sft_neg_mean']:.3f} |")
  return "\n".join(lines) + "\n"


def row_label(cell: str, n_neg: int, with_n: bool) -> str:
  return f"{cell} N={n_neg}" if with_n else cell


def results_table(runs: list[dict], k: int, with_n: bool,
                  table_id: str = "probe") -> results_lib.Table:
  """Per-seed nDCG@k, MRR@k and mean weights of every (cell, N)."""
  cols = [results_lib.Column(f"ndcg@{k}", f"nDCG@{k} × 100", decimals=1,
                             scale=100),
          results_lib.Column(f"mrr@{k}", f"MRR@{k} × 100", decimals=1,
                             scale=100),
          results_lib.Column("w_pos", "mean W+"),
          results_lib.Column("w_neg", "mean W−"),
          results_lib.Column("w_cl_pos", "W_CL+"),
          results_lib.Column("w_cl_neg", "W_CL−"),
          results_lib.Column("w_sft_pos", "W_SFT+"),
          results_lib.Column("w_sft_neg", "W_SFT−")]
  title = {"probe": "W × D probing: held-out reranking after training "
                    "each cell",
           "negatives": "Negatives sweep: held-out reranking after training "
                        "with N negatives per query",
           "mm_probe": "W × D probing on the multimodal reranker (ViT + "
                       "imported decoder, LoRA): held-out reranking",
           "directions": "Direction probes (D_Rand, multi-token) and native "
                         "losses beside their reference cells: held-out "
                         "reranking after training each cell",
           "mm_directions": "Direction probes and native losses on the "
                            "multimodal reranker (ViT + imported decoder, "
                            "LoRA): held-out reranking",
           }.get(table_id, f"rerank {table_id}")
  table = results_lib.Table(table_id, title, columns=cols,
                            row_label="W / D, N" if with_n else "W / D")
  for r in runs:
    table.add_seed(row_label(r["cell"], r["negatives"], with_n), r["seed"],
                   {c.key: r[c.key] for c in cols})
  return table


# The README's claims, each a paired difference of nDCG over seeds: W at
# fixed D, D at fixed W, and the tau-mask against the constant weight.
CLAIMED = (("cl/sft", "sft/sft"), ("cl/cl", "sft/cl"), ("sft/cl", "sft/sft"),
           ("cl/cl", "cl/sft"), ("constant_tau_mask/sft", "constant/sft"))


# The direction tables' claims (spec 8 and 6): each probe direction against
# the direction it replaces under the same weight (D_Rand under W_CL is R_y,
# against D_CL = M_y; under W_SFT R_y - R_n, against D_SFT; the multi-token
# direction is an SFT-style difference, against D_SFT), and each native loss
# against its surrogate cell (the URL reproduces it: difference 0).
DIRECTION_CLAIMED = (("sft/random", "sft/sft"), ("cl/random", "cl/cl"),
                     ("sft/multi_token", "sft/sft"),
                     ("cl/multi_token", "cl/sft"),
                     ("native/sft", "sft/sft"), ("native/cl", "cl/cl"))


def comparisons(cells, sweep, with_n: bool, k: int, table_id: str = "probe"
                ) -> list[results_lib.Comparison]:
  """CLAIMED pairs (DIRECTION_CLAIMED in a `*directions` table) at each N;
  in a sweep, also CL - SFT (spec outcome 4: the gap narrows as N grows)."""
  pairs = list(DIRECTION_CLAIMED if table_id.endswith("directions")
               else CLAIMED)
  if with_n:
    pairs.append(("cl/cl", "sft/sft"))
  out = []
  for n_neg in sweep:
    for a, b in pairs:
      if a in cells and b in cells:
        out.append(results_lib.Comparison(
            table_id, f"ndcg@{k}", row_label(a, n_neg, with_n),
            row_label(b, n_neg, with_n)))
  return out


def run(config, workdir: str) -> dict:
  """Every (N, cell, seed); writes WORKDIR/results.json (the
  `jaxlab.experiments.results` schema: the per-seed table, the claimed paired
  comparisons, the summary table and per-run metrics under `extra`) and
  table.md."""
  t0 = time.time()
  config = ensure_backbone(config, workdir)
  tok = make_tokenizer(config)
  rcfg = reranker_config(config, tok)
  template = rr.PromptTemplate(system=config.prompt.system,
                               template=config.prompt.template)
  cells = [c.strip() for c in config.cells.split(",") if c.strip()]
  for c in cells:
    parse_cell(c)
  sweep = tuple(config.negatives_sweep) or (int(config.task.num_negatives),)
  if config.model_kind == "embedding":
    evalset = embedding_eval_inputs(config)
  elif config.model_kind == "multimodal":
    evalset = eval_inputs(config, tok, rcfg, template)
  else:
    raise ValueError(f"config.model_kind={config.model_kind!r}; valid: "
                     "embedding, multimodal")
  k = int(config.eval.k)
  runs = []
  for n_neg in sweep:
    for cell in cells:
      for seed in config.seeds:
        wd = os.path.join(workdir, "runs", f"N{n_neg}",
                          cell.replace("/", "__"), f"seed{seed}")
        os.makedirs(wd, exist_ok=True)
        r = run_one(config, wd, cell=cell, n_neg=n_neg, seed=seed, tok=tok,
                    rcfg=rcfg, template=template, evalset=evalset)
        print(f"[rerank] N={n_neg} {cell} seed={seed}: nDCG@{k}="
              f"{r[f'ndcg@{k}']:.4f} W+={r['w_pos']:.3f} "
              f"W-={r['w_neg']:.3f}", flush=True)
        runs.append(r)
  table = summarize(runs, k)
  results_lib.write(
      workdir, "rerank",
      tables=[results_table(runs, k, len(sweep) > 1, config.table)],
      comparisons=comparisons(cells, sweep, len(sweep) > 1, k, config.table),
      extra={"table": table, "runs": runs, "cells": cells,
             "negatives": list(sweep), "seeds": list(config.seeds)},
      config=config, start_time=t0)
  md = markdown(table, k)
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write(md)
  print(md, flush=True)
  best = max(table, key=lambda r: r[f"ndcg@{k}_mean"])
  return {"best_cell": best["cell"], f"best_ndcg@{k}": best[f"ndcg@{k}_mean"],
          "num_runs": len(runs)}
