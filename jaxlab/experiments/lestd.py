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
"""

import os
import time
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxlab.analysis import figures
from jaxlab.compression import lestd
from jaxlab.data import sources as data_sources
from jaxlab.data import tokenizers
from jaxlab.evals.lm_cost import (  # pylint: disable=unused-import
    attention_bytes, forward_latency_ms, perplexity)
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


def run(config, workdir: str) -> dict[str, Any]:
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
