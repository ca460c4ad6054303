"""Paper A miniature: the W x D probing table on synthetic multimodal retrieval.

For each cell ("W/D" surrogate or "native/cl|sft"), each negatives count N and
each seed, trains the multimodal reranker (`jaxlab.models.reranker`) with the
generic trainer and the registered `"rerank"` loss, then reranks held-out
synthetic queries (1 positive + 15 negatives, half near-duplicates) and
scores nDCG@10 / MRR@10. Writes WORKDIR/results.json (`jaxlab.experiments.results`
schema: per-seed nDCG@10, MRR@10 and mean W+ / W- of each cell, the claimed
paired comparisons), table.md (rendered from it) and per-run workdirs under
WORKDIR/runs/ (a finished run is skipped on re-launch).

The pieces are the library's: the tokenizer and sources in
`jaxlab.data.synthetic.rerank_groups`, the cells, models, head pretraining
and evaluation in `jaxlab.experiments.rerank.probe`; every training is the
trainer's (`trainer.train` on the `"rerank"` loss; the head pretraining
through `jaxlab.train.runner.StepRunner`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time

import numpy as np
from flax import nnx

from jaxlab.data import tokenizers
from jaxlab.data.synthetic.rerank_groups import (  # pylint: disable=unused-import
    GroupSource, embedding_eval_inputs, embedding_source, eval_inputs,
    make_tokenizer, retrieval_source)
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib
from jaxlab.models import reranker as rr
from jaxlab.objectives import rerank as rerank_obj
from jaxlab.experiments.rerank.probe import (  # pylint: disable=unused-import
    W_KEYS, embedding_evaluate, evaluate, learnable_random_head, make_model,
    ChatGroupSource, make_vl_model, mean_w, parse_cell,
    pretrain_embedding_model, pretrained_embedding_model, reranker_config,
    summarize, vl_reranker_config)
from jaxlab.train import lora as lora_lib
from jaxlab.train import trainer


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
    vocab = tokenizers.padded_vocab_size(make_tokenizer(config).vocab_size)
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
    cfg.loss.update(fields)
  t = config.task
  embedding = config.model_kind == "embedding"
  if embedding:
    source = embedding_source(config, int(t.train_examples),
                              int(t.data_seed) + int(seed), n_neg)
    model = pretrained_embedding_model(config, int(seed))
  else:
    source = GroupSource(
        retrieval_source(t, t.train_examples, int(t.data_seed) + int(seed),
                         n_neg), tok, rcfg, template,
        int(config.prompt.max_len), config.reranker.labels.image_token)
    model = make_model(config, rcfg, seed,
                       learn_random_head=fields["direction"] == "random")
  res = trainer.train(cfg, workdir, model=model, train_source=source)
  trained, _ = nnx.merge(res["train_state"].graphdef, res["train_state"].state)
  if lora_lib.has_lora(trained):
    lora_lib.merge_lora(trained)
  direction = rerank_obj.resolve_direction(fields["weight"],
                                           fields["direction"])
  score = embedding_evaluate if embedding else evaluate
  out = {"cell": cell, "negatives": int(n_neg), "seed": int(seed),
         "final_loss": res.get("loss"),
         **score(trained, *evalset, config, direction), **mean_w(workdir)}
  with open(done, "w") as f:
    json.dump(out, f, indent=1)
  return out


def row_label(cell: str, n_neg: int, with_n: bool) -> str:
  return f"{cell} N={n_neg}" if with_n else cell


TITLES = {
    "probe": "W × D probing: held-out reranking after training each cell",
    "negatives": "Negatives sweep: held-out reranking after training with N "
                 "negatives per query",
    "mm_probe": "W × D probing on the multimodal reranker (ViT + imported "
                "decoder, LoRA): held-out reranking",
    "directions": "Direction probes (D_Rand, multi-token) and native losses "
                  "beside their reference cells: held-out reranking after "
                  "training each cell",
    "mm_directions": "Direction probes and native losses on the multimodal "
                     "reranker (ViT + imported decoder, LoRA): held-out "
                     "reranking",
    "vl_probe": "W × D probing on the Qwen2.5-VL reranker (imported "
                "language model, LoRA): held-out reranking",
    "vl_directions": "Direction probes and native losses on the Qwen2.5-VL "
                     "reranker (imported language model, LoRA): held-out "
                     "reranking",
    "smollm2": "CL vs SFT on SmolLM2-135M-Instruct (LoRA), real text in "
               "M-BEIR's layout (Python reference continuations): held-out "
               "reranking of 8 candidates"}


def results_table(runs: list[dict], k: int, with_n: bool,
                  table_id: str = "probe") -> results_lib.Table:
  """Per-seed nDCG@k, MRR@k and mean weights of every (cell, N)."""
  cols = [results_lib.Column(f"ndcg@{k}", f"nDCG@{k} × 100", decimals=1,
                             scale=100),
          results_lib.Column(f"mrr@{k}", f"MRR@{k} × 100", decimals=1,
                             scale=100)]
  cols += [results_lib.Column(key, label) for key, label in zip(W_KEYS, (
      "mean W+", "mean W−", "W_CL+", "W_CL−", "W_SFT+", "W_SFT−"))]
  table = results_lib.Table(table_id, TITLES.get(table_id,
                                                 f"rerank {table_id}"),
                            columns=cols,
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
  in a sweep, also CL - SFT (spec outcome 4: the gap narrows as N grows),
  and in a run without the cross cells CL - SFT too."""
  pairs = list(DIRECTION_CLAIMED if table_id.endswith("directions")
               else CLAIMED)
  # The paper's CL against its SFT (weight and direction together): in a
  # sweep (spec outcome 4), and in a run of those two cells alone (the
  # `paper` and `smollm2` presets), where no W x D cell splits them.
  if with_n or not {"cl/sft", "sft/cl"} & set(cells):
    pairs.append(("cl/cl", "sft/sft"))
  return [results_lib.Comparison(table_id, f"ndcg@{k}",
                                 row_label(a, n_neg, with_n),
                                 row_label(b, n_neg, with_n))
          for n_neg in sweep for a, b in pairs if a in cells and b in cells]


def run(config, workdir: str) -> dict:
  """Every (N, cell, seed); writes WORKDIR/results.json (the
  `jaxlab.experiments.results` schema: the per-seed table, the claimed paired
  comparisons, the summary table and per-run metrics under `extra`) and
  table.md."""
  t0 = time.time()
  if config.get("data") is not None and config.data.get("source") == "hf":
    return run_mbeir(config, workdir, t0)
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
  res = results_lib.write(
      workdir, "rerank",
      tables=[results_table(runs, k, len(sweep) > 1, config.table)],
      comparisons=comparisons(cells, sweep, len(sweep) > 1, k, config.table),
      extra={"table": table, "runs": runs, "cells": cells,
             "negatives": list(sweep), "seeds": list(config.seeds)},
      config=config, start_time=t0)
  md = report.render_table(res, config.table, name="rerank")
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write(md)
  print(md, flush=True)
  best = max(table, key=lambda r: r[f"ndcg@{k}_mean"])
  return {"best_cell": best["cell"], f"best_ndcg@{k}": best[f"ndcg@{k}_mean"],
          "num_runs": len(runs)}


def _text_backbone(config) -> bool:
  """True when `init_from` is a text LM (a GGUF, a shipped name, a trainer
  checkpoint, or an HF directory whose config has no vision tower): the
  reranker is then the imported decoder alone."""
  from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  from jaxlab.models import decoder as decoder_lib  # pylint: disable=g-import-not-at-top
  src = pretrained.path(config.init_from)
  if os.path.isfile(os.path.join(src, "config.json")):
    return "vision_config" not in hf.read_config(src)
  return isinstance(pretrained.load_config(config.init_from),
                    decoder_lib.DecoderConfig)


def run_mbeir(config, workdir: str, t0: float) -> dict:
  """The real-data run (`paper` preset): M-BEIR as released from
  `data.path` (a local copy laid out as on the Hub, `jaxlab.data.mbeir`),
  the reranker on the `init_from` backbone with its own tokenizer, each
  cell trained with LoRA on the `data.split` queries (one positive and
  `task.num_negatives` negatives a group), then nDCG@k per task and their
  average (the paper's table) on the `data.eval_split` queries, each
  reranking `task.eval_candidates` documents. Each query's instruction is
  M-BEIR's per-task one as UniIR picks it (`mbeir.instructions`, see
  `jaxlab.data.mbeir`; "auto": when `instructions/query_instructions.tsv`
  is in `data.path`), recorded in results.json (`extra.instructions`, and
  `extra.eval_instructions` per test query).

  A text LM `init_from` reads text queries and text candidates (prompts
  `config.prompt.template` as plain text); a Qwen2.5-VL / Qwen2-VL one
  (`_text_backbone` false) reads every modality, images from the dataset
  directory, each prompt through the checkpoint's chat template and
  processor (`rr.collate_chat_groups`, images `task.image_size` square)
  and the reranker is the whole loaded model (vision tower included,
  frozen; LoRA on `lora.targets`, the language model's projections).
  """
  from jaxlab.data import mbeir  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  d = config.data
  if not os.path.isdir(d.path):
    raise ValueError(f"data.path={d.path!r}: pass a local copy of M-BEIR "
                     "laid out as on the Hub (query/<split>/*.jsonl, "
                     "cand_pool/...)")
  if not config.init_from:
    raise ValueError("the M-BEIR run needs init_from (the backbone)")
  text = _text_backbone(config)
  template = rr.PromptTemplate(system=config.prompt.system,
                               template=config.prompt.template)
  max_len = int(config.prompt.max_len)
  if text:
    tok = pretrained.tokenizer(config.init_from)
    config = copy.deepcopy(config)
    with config.unlocked():
      config.reranker.arch = "vit_decoder"
      # No image slot in a text LM: the pad piece stands in for the
      # placeholder id the reranker config resolves (never in a prompt).
      config.reranker.labels.image_token = tok.hf.convert_ids_to_tokens(
          tok.pad_id)
    rcfg = dataclasses.replace(reranker_config(config, tok), vit=None)

    def collate(triples):
      return rr.collate_groups(
          triples, tok, rcfg, template, max_len=max_len,
          image_token=config.reranker.labels.image_token)

    def source(groups):
      return GroupSource(groups, tok, rcfg, template, max_len,
                         config.reranker.labels.image_token)
    build = make_model
  else:
    # A Qwen2.5-VL / Qwen2-VL checkpoint: its chat template, processor and
    # vision tower; image queries and candidates read from data.path.
    from jaxlab.evals import vl_chat  # pylint: disable=g-import-not-at-top
    chat = vl_chat.VLChat.load(config.init_from, dtype="float32")
    rcfg = vl_reranker_config(config, chat)
    chat = dataclasses.replace(chat, model=None)  # loaded per cell below

    def collate(triples):
      return rr.collate_chat_groups(triples, chat, rcfg, template,
                                    max_len=max_len)

    def source(groups):
      return ChatGroupSource(groups, chat, rcfg, template, max_len)
    build = make_vl_model
  max_rows = int(d.max_rows)
  pool = mbeir.read_pool(d.path)
  t = config.task
  # Per-task query instructions (`mbeir.instructions`: UniIR's table pick
  # when "uniir", or "auto" and the dataset has the table).
  m = config.get("mbeir") or {}
  ins_file = m.get("instructions_file", "")
  ins_mode = mbeir.instruction_mode(d.path, m.get("instructions", "auto"),
                                    ins_file)
  read = dict(max_rows=max_rows, pool=pool, images=not text,
              instructions=ins_mode, instructions_file=ins_file)
  train, n_train = mbeir.read_split(d.path, d.split, seed=int(t.data_seed),
                                    **read)
  test, n_test = mbeir.read_split(d.path, d.eval_split,
                                  seed=int(t.eval_seed), **read)
  kind = "text query with a text positive" if text else "query"
  if not train or not test:
    raise ValueError(f"{d.path}: no {kind} in {d.split!r} ({len(train)}) or "
                     f"{d.eval_split!r} ({len(test)})")
  triples, labels, tasks = mbeir.eval_lists(test, int(t.eval_candidates),
                                            int(t.eval_seed))
  batch = collate(triples)
  flat = {k: v.reshape((-1, 1) + v.shape[2:]) for k, v in batch.items()}
  evalset = (flat, labels, tasks)
  k = int(config.eval.k)
  n_neg = int(t.num_negatives)
  cells = [c.strip() for c in config.cells.split(",") if c.strip()]
  runs = []
  for cell in cells:
    fields = parse_cell(cell)
    for seed in config.seeds:
      wd = os.path.join(workdir, "runs", cell.replace("/", "__"),
                        f"seed{seed}")
      os.makedirs(wd, exist_ok=True)
      groups = mbeir.train_groups(
          train, n_neg, max(len(train), int(config.train.batch_size)),
          int(t.data_seed) + int(seed))
      train_source = source(groups)
      cfg = copy.deepcopy(config)
      with cfg.unlocked():
        cfg.seed = int(seed)
        cfg.loss.update(fields)
      model = build(cfg, rcfg, seed,
                    learn_random_head=fields["direction"] == "random")
      res = trainer.train(cfg, wd, model=model, train_source=train_source)
      trained, _ = nnx.merge(res["train_state"].graphdef,
                             res["train_state"].state)
      if lora_lib.has_lora(trained):
        lora_lib.merge_lora(trained)
      direction = rerank_obj.resolve_direction(fields["weight"],
                                               fields["direction"])
      out = evaluate(trained, *evalset, config, direction,
                     return_scores=True)
      scores = out.pop("scores")
      per_task = [out[f"ndcg@{k}/{x}"] for x in sorted(set(tasks))]
      out[f"ndcg@{k}"] = float(np.mean(per_task))  # the paper's average
      r = {"cell": cell, "negatives": n_neg, "seed": int(seed),
           "final_loss": res.get("loss"), **out, **mean_w(wd),
           "scores": np.asarray(scores).tolist()}
      print(f"[rerank] M-BEIR {cell} seed={seed}: nDCG@{k}="
            f"{r[f'ndcg@{k}']:.4f}", flush=True)
      runs.append(r)
  table = summarize(runs, k)
  res = results_lib.write(
      workdir, "rerank",
      tables=[results_table(runs, k, False, config.table)],
      comparisons=comparisons(cells, (n_neg,), False, k, config.table),
      extra={"table": table, "runs": runs, "cells": cells,
             "tasks": sorted(set(tasks.tolist())),
             "labels": labels.tolist(), "eval_tasks": tasks.tolist(),
             "instructions": ins_mode,
             "eval_instructions": [x[0] for x in triples],
             "seeds": list(config.seeds)},
      config=config, start_time=t0,
      data=results_lib.data_provenance(
          config, rows={d.split: n_train, d.eval_split: n_test}))
  best = max(table, key=lambda r: r[f"ndcg@{k}_mean"])
  return {"best_cell": best["cell"], f"best_ndcg@{k}": best[f"ndcg@{k}_mean"],
          "num_runs": len(runs)}
