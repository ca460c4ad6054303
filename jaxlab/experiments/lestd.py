"""Experiment "lestd": perplexity vs MHA compression ratio (paper P, P.8b).

For each seed: train a byte-level multi-head-attention decoder on the
generated corpus through `jaxlab.train.runner.train_lm`; then, data-free,
compress its attention at each target ratio with

* LeSTD: shared-basis HOOI + Algorithm 1 sparse core, ratio counting the
  stored indices (`jaxlab.compression.lestd.compress_decoder`),
* dense-core Tucker (TensorLLM, `sparse=False`), the ranks chosen by the
  same budget solver,
* per-matrix truncated SVD (`svd_compress_decoder`),

and measure held-out perplexity through each compressed model's normal
forward (the Tucker variants run `TuckerAttention` on the factors). At
`compress.latency_ratio` the forward latency and the attention weights'
memory of the dense and the Tucker models are measured. Writes
`results.json` (per-seed tables, paired comparisons LeSTD − SVD and
LeSTD − dense Tucker at each ratio) and `lestd.png`.

With `config.data.source == "hf"` (the `paper` preset) nothing is trained:
the checkpoint of `config.init_from` (`jaxlab.io.pretrained.load`) is
compressed the same three ways, and perplexity is measured on the released
WikiText-2 test split (`data.path`, `data.subset` `wikitext-2-raw-v1`,
column `text`, read through `jaxlab.data.pipeline.read_split`): the rows
are joined with blank lines ("\\n\\n") and tokenised once with the
checkpoint's own tokenizer, then scored in windows of `ppl.seq_len` every
`ppl.stride` tokens
(`jaxlab.evals.long_context.chunked_perplexity`; stride = window is the
disjoint-window protocol of SVD-LLM / TensorLLM's WikiText-2 evaluation
[inferred: the LeSTD paper does not state it]). The LeSTD model at
`compress.export_ratio` is exported as a HF checkpoint (`jaxlab.io.hf.save`,
its Tucker factors rebuilt into dense projections) under
`workdir/export`, reloaded through `pretrained.load`, and its logits are
checked against the compressed model's. A grouped-query checkpoint
(SmolLM2, Llama-3) is tensorised per KV group (`lestd.gqa="group"`, the
[inferred] extension of `jaxlab.compression.lestd.stack_attention`).

`ppl.max_windows` (0: all) keeps the first windows of the text, and
`ppl.groups` > 1 splits the scored windows into that many disjoint,
contiguous window sets: each set's perplexity is one "seed" of the tables
(seed k = window set k), so the paired comparisons LeSTD − SVD and
LeSTD − dense Tucker are paired by text chunk, each method scoring the same
tokens. The pooled perplexity over all windows is the `pooled` table.
"""

import os
import time
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxlab.analysis import figures
from jaxlab.compression import lestd
from jaxlab.data import pipeline
from jaxlab.data import sources as data_sources
from jaxlab.data import tokenizers
from jaxlab.evals.lm_cost import (  # pylint: disable=unused-import
    attention_bytes, forward_latency_ms, perplexity)
from jaxlab.evals import long_context
from jaxlab.io import hf as hf_io
from jaxlab.io import pretrained
from jaxlab.models import registry as model_registry
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib

METHODS = {"lestd": "LeSTD", "tucker": "dense Tucker", "svd": "SVD"}


def windows(config) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
  """(train data for `train_lm`, held-out windows `[E, T+1]`, vocab size).

  Documents of the generated corpus are concatenated into one byte stream
  and cut into windows of `train.seq_len + 1`; the last
  `data.eval_fraction` of the documents are held out.
  """
  tok = tokenizers.ByteTokenizer()
  texts = data_sources.synthetic_corpus(int(config.data.num_docs),
                                        seed=int(config.data.data_seed))
  n_eval = max(1, int(len(texts) * float(config.data.eval_fraction)))
  t = int(config.train.seq_len)

  def cut(docs):
    stream = np.concatenate([np.asarray(tok.encode(d, add_bos=True,
                                                   add_eos=True), np.int32)
                             for d in docs])
    n = (len(stream) - 1) // t
    return np.stack([stream[i * t:i * t + t + 1] for i in range(n)])

  train = cut(texts[:-n_eval])
  held = cut(texts[-n_eval:])[:int(config.eval_seqs)]
  if len(held) < 1:
    raise ValueError("no held-out window: raise data.num_docs or "
                     "data.eval_fraction")
  data = {"inputs": train[:, :-1], "targets": train[:, 1:],
          "loss_mask": np.ones((len(train), t), np.float32)}
  return data, held, tok.vocab_size


def lestd_config(config, ratio: float) -> lestd.LeSTDConfig:
  kw = dict(config.lestd.to_dict())
  kw["rank_fractions"] = tuple(tuple(f) for f in kw["rank_fractions"])
  kw["r3_values"] = tuple(kw["r3_values"])
  return lestd.LeSTDConfig(target_ratio=float(ratio), **kw)


def compress(model, method: str, ratio: float, config, caches
             ) -> tuple[Any, list[dict]]:
  if method == "lestd":
    return lestd.compress_decoder(model, lestd_config(config, ratio),
                                  sparse=True, hooi_caches=caches)
  if method == "tucker":
    return lestd.compress_decoder(model, lestd_config(config, ratio),
                                  sparse=False, hooi_caches=caches)
  if method == "svd":
    return lestd.svd_compress_decoder(model, ratio)
  raise ValueError(f"compress.methods entry {method!r}; valid: "
                   f"{', '.join(METHODS)}")


def _key(ratio: float) -> str:
  return f"r{int(round(100 * ratio))}"


def _plot(per_seed, ratios, methods, path):
  with figures.figure(path, figsize=(5.5, 3.8), dpi=120) as (_, ax):
    for m in methods:
      vals = np.array([[s["ppl"][m][_key(r)] for r in ratios]
                       for s in per_seed])
      sd = vals.std(0, ddof=1) if len(vals) > 1 else np.zeros(len(ratios))
      ax.errorbar(ratios, vals.mean(0), yerr=sd, marker="o", capsize=3,
                  label=METHODS[m])
    ax.axhline(np.mean([s["ppl_dense"] for s in per_seed]), color="gray",
               ls="--", label="dense")
    ax.set_xlabel("MHA compression ratio (stored / original, indices "
                  "counted)")
    ax.set_ylabel("held-out perplexity")
    ax.set_yscale("log")
    ax.legend()


def wikitext_tokens(config, tokenizer) -> tuple[np.ndarray, int]:
  """(token ids of the joined eval split, rows read).

  The split's `text` rows (WikiText as released: one line of the article
  per row, blank rows between paragraphs) joined with "\\n\\n" and encoded
  once with the checkpoint's leading special tokens (transformers'
  `tokenizer(text)`), the evaluation of SVD-LLM / TensorLLM [inferred].
  """
  split = config.data.get("eval_split", "") or config.data.split
  rows = pipeline.read_split(config.data, split)
  texts = [r["text"] for r in rows]
  ids = np.asarray(tokenizer.encode("\n\n".join(texts), add_bos=True),
                   np.int32)
  return ids, len(texts)


def _window(config, n_tokens: int) -> tuple[int, int]:
  """(window, stride), the window cut to the text when it is shorter."""
  seq, stride = int(config.ppl.seq_len), int(config.ppl.stride)
  if n_tokens < 2:
    raise ValueError(f"the eval split has {n_tokens} tokens; perplexity "
                     "needs at least 2 (raise data.max_rows)")
  seq = min(seq, n_tokens)
  return seq, min(stride if stride > 0 else seq, seq)


def export_and_reload(compressed, original, cfg, path: str,
                      ids: np.ndarray, tokenizer=None) -> dict[str, Any]:
  """Saves `compressed` as a HF checkpoint at `path` (Tucker factors rebuilt
  dense, `lestd.dense_decoder`; the checkpoint's tokenizer files beside it
  when `tokenizer` is a `HFTokenizer`), reloads it with `pretrained.load`
  and returns the largest |logit difference| on `ids` `[B, T]`."""
  hf_io.save(lestd.dense_decoder(compressed, original), cfg, path)
  if hasattr(tokenizer, "hf"):
    tokenizer.hf.save_pretrained(path)
  reloaded, _ = pretrained.load(path)
  a = np.asarray(long_context.model_logits(compressed, ids), np.float32)
  b = np.asarray(long_context.model_logits(reloaded, ids), np.float32)
  return {"path": path, "max_abs_logit_diff": float(np.max(np.abs(a - b))),
          "logit_scale": float(np.max(np.abs(a)))}


def run_pretrained(config, workdir: str) -> dict[str, Any]:
  """The `paper` run: compress `init_from`'s attention, WikiText-2 PPL."""
  t_start = time.time()
  os.makedirs(workdir, exist_ok=True)
  if not config.get("init_from"):
    raise ValueError("lestd with data.source='hf' compresses a pretrained "
                     "checkpoint: set config.init_from")
  ratios = [float(r) for r in config.compress.ratios]
  methods = list(config.compress.methods)
  model, cfg = pretrained.load(config.init_from)
  tok = pretrained.tokenizer(config.init_from)
  ids, n_rows = wikitext_tokens(config, tok)
  seq, stride = _window(config, len(ids))
  n_text = len(ids)
  max_windows = int(config.ppl.get("max_windows", 0))
  if max_windows > 0:
    ids = ids[:(max_windows - 1) * stride + seq]
  n_groups = max(1, int(config.ppl.get("groups", 1)))
  n_windows = (len(ids) - seq) // stride + 1
  if n_groups > n_windows:
    raise ValueError(f"ppl.groups={n_groups} is more than the {n_windows} "
                     "windows of the text (lower ppl.groups, or raise "
                     "ppl.max_windows / data.max_rows)")
  group_of = np.arange(n_windows) * n_groups // n_windows
  batch = int(config.ppl.batch_size)
  what = config.ppl.get("text_name", "") or "WikiText-2 test"

  def ppl_of(m) -> tuple[float, list[float]]:
    """(pooled perplexity, per-window-set perplexities)."""
    out = long_context.chunked_perplexity(
        m, ids, chunk_len=seq, stride=stride, batch_size=batch,
        per_window=True)
    nll = np.asarray(out["window_nll"])
    cnt = np.asarray(out["window_tokens"])
    per = [float(np.exp(nll[group_of == k].sum() / cnt[group_of == k].sum()))
           for k in range(n_groups)]
    return out["perplexity"], per

  sets = (f"; seeds = {n_groups} disjoint sets of consecutive windows"
          if n_groups > 1 else "")
  ppl = results_lib.Table(
      "perplexity", f"{what} perplexity ({len(ids)} tokens, window "
      f"{seq}, stride {stride}{sets}) of {config.init_from} at each target "
      "attention compression ratio (stored words / original, indices "
      "counted)",
      row_label="method",
      columns=[results_lib.Column(_key(r), f"ratio {r:g}", decimals=2)
               for r in ratios])
  pooled = results_lib.Table(
      "pooled", f"{what} perplexity pooled over all {n_windows} windows "
      f"({seq} tokens, stride {stride})", row_label="method",
      columns=[results_lib.Column(_key(r), f"ratio {r:g}", decimals=2)
               for r in ratios])
  achieved = results_lib.Table(
      "achieved", "Achieved ratio (mean over layers) at each target",
      row_label="method",
      columns=[results_lib.Column(_key(r), f"target {r:g}", decimals=3)
               for r in ratios])
  t0 = time.time()
  dense_ppl, dense_per = ppl_of(model)
  eval_s = time.time() - t0
  for r in ratios:
    pooled.add("dense", _key(r), None, dense_ppl)
    for k, v in enumerate(dense_per):
      ppl.add("dense", _key(r), k, v)
  rec = {"ppl_dense": dense_ppl, "ppl": {}, "ppl_sets": {"dense": dense_per},
         "seconds": {"dense_eval": eval_s}}
  plans, export = {}, None
  caches = [{} for _ in model.layers]
  er = float(config.compress.export_ratio)
  for m in methods:
    rec["ppl"][m] = {}
    for r in ratios:
      t0 = time.time()
      cm, infos = compress(model, m, r, config, caches)
      t1 = time.time()
      v, per = ppl_of(cm)
      rec["seconds"][f"{m}@{r:g}"] = {"compress": t1 - t0,
                                      "eval": time.time() - t1}
      rec["ppl"][m][_key(r)] = v
      rec["ppl_sets"][f"{m}@{r:g}"] = per
      pooled.add(METHODS[m], _key(r), None, v)
      for k, pv in enumerate(per):
        ppl.add(METHODS[m], _key(r), k, pv)
      achieved.add(METHODS[m], _key(r), None,
                   float(np.mean([i["ratio"] for i in infos])))
      if m == "lestd":
        achieved.add("LeSTD (values only)", _key(r), None,
                     float(np.mean([i["value_ratio"] for i in infos])))
      plans[f"{m}@{r:g}"] = infos
      if m == "lestd" and abs(r - er) < 1e-9:
        export = export_and_reload(
            cm, model, cfg, os.path.join(workdir, "export"),
            ids[None, :seq], tok) | {"method": m, "ratio": r}
  rows_read = {config.data.get("eval_split", "") or config.data.split:
               n_rows}
  comparisons = []
  if n_groups >= 2:
    for r in ratios:
      for b in ("svd", "tucker"):
        if "lestd" in methods and b in methods:
          comparisons.append(results_lib.Comparison(
              "perplexity", _key(r), METHODS["lestd"], METHODS[b]))
  extra = {"per_seed": [rec], "plans": plans, "export": export,
           "eval": {"tokens": int(len(ids)), "text_tokens": int(n_text),
                    "window": seq, "stride": stride, "rows": n_rows,
                    "windows": int(n_windows), "groups": n_groups}}
  try:  # the machine's load while the run shared it (timings are noisy)
    extra["load_average"] = list(os.getloadavg())
  except OSError:
    pass
  return results_lib.write(
      workdir, config.get("results_name", "") or "lestd",
      tables=[ppl, pooled, achieved], comparisons=comparisons,
      extra=extra, config=config, start_time=t_start,
      data=results_lib.data_provenance(config, rows=rows_read))


def run(config, workdir: str) -> dict[str, Any]:
  if config.data.get("source", "") == "hf":
    return run_pretrained(config, workdir)
  t_start = time.time()
  os.makedirs(workdir, exist_ok=True)
  ratios = [float(r) for r in config.compress.ratios]
  methods = list(config.compress.methods)
  data, held, vocab = windows(config)
  ppl = results_lib.Table(
      "perplexity", "Held-out perplexity at each target MHA compression "
      "ratio (stored words / original, indices counted)", row_label="method",
      columns=[results_lib.Column(_key(r), f"ratio {r:g}", decimals=2)
               for r in ratios])
  achieved = results_lib.Table(
      "achieved", "Achieved ratio (mean over layers) at each target",
      row_label="method",
      columns=[results_lib.Column(_key(r), f"target {r:g}", decimals=3)
               for r in ratios])
  lr = float(config.compress.latency_ratio)
  cost = results_lib.Table(
      "cost", f"Forward latency and attention memory, dense vs compressed at "
      f"ratio {lr:g} (batch {int(config.compress.latency_batch)} x "
      f"{int(config.train.seq_len)} tokens, CPU)", row_label="model",
      columns=[results_lib.Column("latency_ms", "forward ms", decimals=2),
               results_lib.Column("held_kib", "attention arrays held (KiB)",
                                  decimals=1),
               results_lib.Column("stored_kib",
                                  "attention stored (KiB, indices counted)",
                                  decimals=1)])
  ppl.add_row("dense")
  for m in methods:
    ppl.add_row(METHODS[m])
  per_seed, plans = [], {}
  for seed in config.seeds:
    seed = int(seed)
    spec = model_registry.get_spec(config.model, vocab_size=vocab, seed=seed)
    model = spec.factory()
    logs = runner.train_lm(
        model, data, steps=int(config.train.steps),
        batch_size=int(config.train.batch_size), lr=float(config.optim.lr),
        warmup_steps=int(config.optim.warmup_steps),
        weight_decay=float(config.optim.weight_decay), seed=seed,
        log_every=max(1, int(config.train.steps) // 10))
    dense_ppl = perplexity(model, held)
    for r in ratios:
      ppl.add("dense", _key(r), seed, dense_ppl)
    rec = {"seed": seed, "ppl_dense": dense_ppl, "ppl": {}, "losses": logs}
    caches = [{} for _ in model.layers]
    models_at_lr = {}
    for m in methods:
      rec["ppl"][m] = {}
      for r in ratios:
        cm, infos = compress(model, m, r, config, caches)
        v = perplexity(cm, held)
        rec["ppl"][m][_key(r)] = v
        ppl.add(METHODS[m], _key(r), seed, v)
        achieved.add(METHODS[m], _key(r), seed,
                     float(np.mean([i["ratio"] for i in infos])))
        if m == "lestd":
          achieved.add("LeSTD (values only)", _key(r), seed,
                       float(np.mean([i["value_ratio"] for i in infos])))
        plans.setdefault(f"{m}@{r:g}", []).append(
            {"seed": seed, "layers": infos})
        if abs(r - lr) < 1e-9:
          models_at_lr[m] = (cm, infos)
    # latency and memory (dense vs the Tucker models at latency_ratio);
    # latency_repeats=0 skips the timing (the smoke preset)
    ids = jnp.asarray(np.tile(held[:1, :-1], (
        int(config.compress.latency_batch), 1)))
    reps = int(config.compress.latency_repeats)
    original_words = sum(lestd.param_count(
        lestd.stack_attention(b.attn).shape, (1, 1, 1), 0)["original"]
                         for b in model.layers)
    cost.add_seed("dense", seed, {
        "latency_ms": forward_latency_ms(model, ids, reps) if reps else None,
        "held_kib": attention_bytes(model) / 1024,
        "stored_kib": original_words * 4 / 1024})
    for m, (cm, infos) in models_at_lr.items():
      row = METHODS[m]
      stored = sum(i["ratio"] for i in infos) / len(infos) * original_words
      cost.add_seed(row, seed, {
          "latency_ms": (forward_latency_ms(cm, ids, reps)
                         if m != "svd" and reps else None),
          "held_kib": attention_bytes(cm) / 1024,
          "stored_kib": stored * 4 / 1024})
    per_seed.append(rec)
  comparisons = []
  for r in ratios:
    for b in ("svd", "tucker"):
      if "lestd" in methods and b in methods:
        comparisons.append(results_lib.Comparison(
            "perplexity", _key(r), METHODS["lestd"], METHODS[b]))
  _plot(per_seed, ratios, methods, os.path.join(workdir, "lestd.png"))
  out = results_lib.write(
      workdir, "lestd", tables=[ppl, achieved, cost], comparisons=comparisons,
      extra={"per_seed": per_seed, "plans": plans,
             "note": "SVD weights are held dense (same function as the "
                     "factored form), so no SVD latency is measured"},
      config=config, start_time=t_start)
  return out
