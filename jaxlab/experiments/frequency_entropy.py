"""Experiment "frequency_entropy": FE maps of an LM and an attenuation sweep.

Trains (or resumes) the decoder of `config.model` on `config.data` (one
continuous token stream, `StreamSource`), computes SpectrumFE / SequenceFE
of every (layer, head, rotary pair) and pairing on `fe.num_eval_seqs`
held-out sequences, draws heatmaps, and sweeps the weighted-RoPE alpha over
the spec's rules and equal-size quantile selections (perplexity). With
`init_from` (preset `smollm2`) nothing is trained: `run_pretrained`, which
probes the text of `jaxlab.data.prose`, or with `data.source == "hf"` (the
`paper` preset: WikiText-103 `wikitext-103-raw-v1` as released, or any `hf`
dataset with a `text` column) the rows of `data.split` (probe windows) and
`data.eval_split` (held-out windows), `probe_texts`. The NoPE layers of a
pretrained model are its checkpoint's (`model.cfg.nope_layers`, from its
config.json: Llama 4's `no_rope_layers`). With `config.downstream.tasks`
pointing at multiple-choice sets as released (HellaSwag, TruthfulQA MC,
MMLU), the paper's downstream evaluation follows (`downstream`): the pairs
of `downstream.rule` attenuated by `downstream.alpha`, every choice scored
by its log-likelihood as lm-evaluation-harness does
(`jaxlab.evals.multiple_choice`), base vs attenuated, paired per question.
"""

import os
import time
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.analysis import frequency_entropy as fe
from jaxlab.data import hf_source, pipeline, prose, streams
from jaxlab.data import multiple_choice as mc_data
from jaxlab.evals import multiple_choice as mc
from jaxlab.data.streams import StreamSource  # pylint: disable=unused-import
from jaxlab.io import pretrained
from jaxlab.train import trainer
from jaxlab.experiments import results as results_lib


def sources(config):
  """(train, eval) stream sources of `config.data` (synthetic or jsonl)."""
  return streams.byte_stream_sources(config.data, int(config.train.seq_len))


def eval_tokens(config) -> np.ndarray:
  """`[num_eval_seqs, seq_len]` held-out token ids of the run's corpus."""
  return sources(config)[1].rows(int(config.fe.num_eval_seqs))


SELECTION_LABELS = fe.selection_labels(0.1)


def results_tables(out: dict[str, Any], seed: int) -> tuple[list, list]:
  """One seed's tables (per-layer FE, RoPE vs NoPE, alpha sweep).

  Runs of other seeds (`--config.seed=N`) are merged by
  `python -m jaxlab.experiments.report --add NAME WORKDIR WORKDIR ...`.
  """
  col = results_lib.Column
  nope = set(out["nope_layers"])
  first = next(iter(out["per_layer"].values()))
  layers = results_lib.Table(
      "per_layer", "mean FE per layer",
      [col(f"layer{i}", f"layer {i} ({'NoPE' if i in nope else 'RoPE'})", 3)
       for i in range(len(first))], row_label="")
  names = {"spectrum": "SpectrumFE", "sequence": "SequenceFE"}
  for key, vals in out["per_layer"].items():
    metric, p = key.split("_", 1)
    p = "native pairs" if p == "native" else f"{p} (non-native)"
    layers.add_seed(f"{names[metric]}, {p}", seed,
                    {f"layer{i}": v for i, v in enumerate(vals)})
  pairings = [k[len("sequence_fe_rope_vs_nope_"):] for k in out
              if k.startswith("sequence_fe_rope_vs_nope_")]
  rvn = results_lib.Table(
      "rope_vs_nope", "mean SequenceFE of the RoPE layers and the NoPE layer",
      [col(p, f"{p} pairing", 3) for p in pairings], row_label="layers")
  for p in pairings:
    v = out[f"sequence_fe_rope_vs_nope_{p}"]
    rvn.add("RoPE layers", p, seed, v["rope"])
    rvn.add("NoPE layer", p, seed, v["nope"])
  sweeps = out["sweeps"]
  alphas = next(iter(sweeps.values()))["alpha"]
  sweep = results_lib.Table(
      "sweep", "perplexity after attenuating the selected pairs by alpha",
      [col("n", "pairs selected", 1)] +
      [col(f"a{a:g}", f"alpha {a:g}", 3) for a in alphas],
      row_label="selection")
  for name, sw in sweeps.items():
    vals = {"n": sw["num_selected"]} | ({f"a{a:g}": p for a, p in zip(
        sw["alpha"], sw["perplexity"])} if sw["num_selected"] else {})
    sweep.add_seed(SELECTION_LABELS.get(name, name), seed, vals)
  comparisons = [results_lib.Comparison("rope_vs_nope", p, "RoPE layers",
                                        "NoPE layer") for p in pairings]
  lo_spec, lo_seq = (SELECTION_LABELS["spectrum_low_q"],
                     SELECTION_LABELS["sequence_low_q"])
  if "spectrum_low_q" in sweeps and "sequence_low_q" in sweeps:
    for a in alphas:
      if a < 1:
        comparisons.append(results_lib.Comparison("sweep", f"a{a:g}",
                                                  lo_spec, lo_seq))
  if "spectrum_low_q" in sweeps and "random_q" in sweeps and alphas:
    comparisons.append(results_lib.Comparison(
        "sweep", f"a{alphas[0]:g}", lo_spec, SELECTION_LABELS["random_q"]))
  return [layers, rvn, sweep], comparisons


def _split_windows(config, split: str, tok, length: int, count: int
                   ) -> tuple[np.ndarray, int]:
  """(up to `count` windows `[n, length]`, rows read) of one split.

  The split's `text` rows are read in order until their tokens (each row
  encoded alone, a bound on the joined count up to merges) reach
  `count * length` plus a margin; those rows are joined by a blank line and
  cut into whole windows (`prose.token_windows(stream=True)`), as
  WikiText's rows are lines of an article with blank rows between.
  """
  rows = pipeline.read_split(config.data, split)
  texts, n_tok, need = [], 0, count * length + length // 2 + 8
  for i in range(len(rows)):
    text = rows[i]["text"]
    texts.append(text)
    n_tok += len(tok.encode(text)) + 2
    if n_tok >= need:
      break
  return prose.token_windows(tok, texts, length, stream=True,
                             max_windows=count), len(texts)


def probe_texts(config, tok) -> tuple[np.ndarray, np.ndarray,
                                      dict[str, int] | None]:
  """(probe windows, held-out windows, rows read per split or None).

  `data.source == "hf"`: probe windows of `fe.probe_len` from `data.split`
  and held-out windows of `fe.eval_len` from `data.eval_split` (the same
  split when it is empty: the held-out windows then follow the probe rows).
  Otherwise the fixed passages of `jaxlab.data.prose` (held-out passages
  `[:num_eval_seqs]`, probe passages `[probe_from:]`).
  """
  c = config.fe
  if config.data.get("source", "") != "hf":
    texts = prose.passages()
    probe = prose.token_windows(tok, texts[int(c.probe_from):], int(
        c.probe_len), stream=True, max_windows=int(c.num_probe_seqs))
    ids = prose.token_windows(tok, texts[:int(c.num_eval_seqs)],
                              int(c.eval_len))
    return probe, ids, None
  split = config.data.split
  eval_split = config.data.get("eval_split", "") or split
  probe, n_probe = _split_windows(config, split, tok, int(c.probe_len),
                                  int(c.num_probe_seqs))
  if eval_split == split:  # held-out windows after the probe's
    both, n_rows = _split_windows(
        config, split, tok, int(c.probe_len),
        int(c.num_probe_seqs) + 1 + -(-int(c.num_eval_seqs) * int(
            c.eval_len) // int(c.probe_len)))
    rest = both[len(probe):].reshape(-1)
    n = min(int(c.num_eval_seqs), len(rest) // int(c.eval_len))
    if n < 1:
      raise ValueError(f"data.split {split!r} has no held-out window of "
                       f"{c.eval_len} tokens after the probe windows")
    ids = rest[:n * int(c.eval_len)].reshape(n, int(c.eval_len))
    return probe, ids, {split: n_rows}
  ids, n_eval = _split_windows(config, eval_split, tok, int(c.eval_len),
                               int(c.num_eval_seqs))
  return probe, ids, {split: n_probe, eval_split: n_eval}


# The harness's metrics of each released layout (its task yaml's
# metric_list; truthfulqa_mc2's "acc" is `process_results_mc2`).
DOWNSTREAM_METRICS = {"hellaswag": ("acc", "acc_norm"),
                      "truthfulqa_mc1": ("acc",), "truthfulqa_mc2": ("mc2",),
                      "mmlu": ("acc",)}


def downstream_tasks(config) -> dict[str, Any]:
  """The enabled `config.downstream.tasks` (those with a `path`)."""
  d = config.get("downstream")
  if d is None:
    return {}
  out = {}
  for name, t in d.tasks.items():
    if not t.get("path", ""):
      continue
    if t.format not in mc_data.FORMATS:
      raise ValueError(f"downstream.tasks.{name}.format={t.format!r} is not "
                       f"a multiple-choice layout; valid choices: "
                       f"{', '.join(mc_data.FORMATS)}")
    out[name] = t
  return out


def read_downstream(config) -> tuple[dict[str, list], dict[str, int]]:
  """({task: [MCItem]}, {"task:split": rows read}) of the enabled tasks."""
  d, cache = config.downstream, config.data.get("cache_dir", "") or None
  items, rows_read = {}, {}
  for name, t in downstream_tasks(config).items():
    rows = hf_source.load_rows(t.path, subset=t.get("subset", ""),
                               split=t.split, max_rows=int(d.max_rows),
                               cache_dir=cache)
    k, pool = int(d.get("num_fewshot", 0)), None
    fs_split = t.get("fewshot_split", "")
    if k and mc_data.FEWSHOT_SPLITS[t.format] is not None:
      if not fs_split:
        raise ValueError(f"downstream.num_fewshot={k} but downstream.tasks."
                         f"{name}.fewshot_split is empty; the harness reads "
                         f"{mc_data.FEWSHOT_SPLITS[t.format]!r}")
      pool = hf_source.load_rows(t.path, subset=t.get("subset", ""),
                                 split=fs_split, cache_dir=cache)
      rows_read[f"{name}:{fs_split}"] = len(pool)
    items[name] = mc_data.items(rows, t.format, subset=t.get("subset", ""),
                                num_fewshot=k, fewshot_rows=pool,
                                seed=int(d.get("fewshot_seed", 1234)))
    rows_read[f"{name}:{t.split}"] = len(rows)
  return items, rows_read


def downstream(config, model, tok, native: dict[str, np.ndarray],
               items: dict[str, list]) -> tuple[Any, list, dict[str, Any]]:
  """The paper's downstream table: base vs the attenuated model (C.4, C.6).

  The pairs `downstream.rule` selects on the native query FE (RoPE layers
  only) are attenuated by `downstream.alpha` (`fe.weighted_rope_model`, or
  the rotation-angle hook with `fe.mode="angle"`); every question of every
  task is scored by both models (`jaxlab.evals.multiple_choice`). Cells
  are per question (seed = question index), so the comparisons are paired
  differences over questions with their 95 % t-intervals.
  """
  d, col = config.downstream, results_lib.Column
  sel = fe.select_pairs(native, d.rule)
  alpha_lnp = fe.alpha_table(sel, float(d.alpha))
  if config.fe.mode == "magnitude":
    models = {"base": (model, None),
              "att": (fe.weighted_rope_model(model, alpha_lnp), None)}
  else:
    w = jnp.asarray(fe.rope_pair_weights_from_alpha(alpha_lnp))
    models = {"base": (model, None), "att": (model, lambda ids, m: (
        model.forward(ids, attention_mask=m, rope_pair_weights=w).logits))}
  labels = {"base": "no attenuation",
            "att": f"rule {d.rule}, alpha {float(d.alpha):g}"}
  cols = [col(f"{name}_{m}", f"{name} {m} (%)", 1, 100)
          for name in items for m in DOWNSTREAM_METRICS[
              config.downstream.tasks[name].format]]
  table = results_lib.Table(
      "downstream", "multiple-choice accuracy (%, per question: seed = "
      "question index; lm-evaluation-harness "
      "log-likelihood scoring) with the selected pairs attenuated",
      [col("n", "pairs", 0, spread=False)] + cols, row_label="model")
  out = {"num_selected": int(sel.sum()), "rule": d.rule,
         "alpha": float(d.alpha), "tasks": {}}
  for key in ("base", "att"):
    table.add(labels[key], "n", None, 0 if key == "base" else out[
        "num_selected"])
  for name, its in items.items():
    fmt = config.downstream.tasks[name].format
    res = {}
    for key, (m, fn) in models.items():
      scores = mc.evaluate(m, tok, its, logits_fn=fn)
      res[key] = {k: scores[k].tolist() for k in DOWNSTREAM_METRICS[fmt]}
      for k in DOWNSTREAM_METRICS[fmt]:
        for i, v in enumerate(scores[k]):
          table.add(labels[key], f"{name}_{k}", i, float(v))
    out["tasks"][name] = {"questions": len(its), **{
        key: {k: float(np.mean(v)) if v else None for k, v in r.items()}
        for key, r in res.items()}, "per_question": res}
  comparisons = [results_lib.Comparison("downstream", c.key, labels["att"],
                                        labels["base"]) for c in cols]
  return table, comparisons, out


def run_pretrained(config, workdir: str) -> dict[str, Any]:
  """FE of a pretrained model's q/k; next-token accuracy under attenuation.

  Seeds: probe windows (FE tables), held-out passages (attenuation; the
  random arm draws afresh per passage, seed `fe.seed + passage`)."""
  t0, c, col = time.time(), config.fe, results_lib.Column
  model, _ = pretrained.load(config.init_from, cache=True)
  tok = pretrained.tokenizer(config.init_from)
  probe, ids, rows_read = probe_texts(config, tok)
  mc_items, mc_rows = read_downstream(config)
  # NoPE layers: the checkpoint's (its config.json; Llama 4's
  # `no_rope_layers`), never selected for attenuation.
  nope = tuple(model.cfg.nope_layers)
  qk = fe.capture_qk(model, probe)
  maps = {f"{w}_{p}": fe.maps_from_qk(qk, which=w, pairing=p, frame=int(
      c.frame), hop=int(c.hop), window=c.window, nope_layers=nope,
                                      per_sequence=True)
          for p in c.pairings for w in ("q", "k")}
  cols = [col(f"{n}_{m}", f"{n[0]} {m.capitalize()}FE" + (
      "" if n.endswith("native") else f" ({n[2:]})"), 3)
          for n in maps for m in ("spectrum", "sequence")]
  tables = []
  for gid, rows in fe.fe_group_means(maps).items():
    tables.append(results_lib.Table(
        f"fe_{gid}", f"mean FE of post-RoPE q/k by {gid} (pair 0 rotates "
        "fastest)", cols, row_label=gid))
    for label, cells in rows.items():
      for b in range(len(probe)):
        tables[-1].add_seed(label, b, {k: v[b] for k, v in cells.items()})
  native = {k: np.nanmean(v, 0) if v.ndim > 1 else v
            for k, v in maps["q_native"].items()}
  sels = fe.fe_selections(native, float(c.fraction), rules=tuple(c.rules),
                          quantiles=tuple(c.quantiles), seed=int(c.seed),
                          random_like="spectrum_low", random_rows=len(ids))
  labels = {"baseline": "no attenuation", **fe.selection_labels(
      float(c.fraction), "SpectrumFE lowest")}
  att = results_lib.Table(
      "attenuation", "next-token top-1 accuracy (%) and NLL (nats/token), "
      "selected query pairs attenuated", [col("n", "pairs", 0, spread=False)]
      + [col(f"{m}{a:g}", f"{m} alpha {a:g}", d, s) for a in c.alphas
         for m, d, s in (("acc", 1, 100), ("nll", 3, 1))],
      row_label="attenuated pairs")
  scores = fe.selection_scores(model, ids, sels, tuple(c.alphas), c.mode,
                               int(c.batch_size))
  for name in ("baseline", *sels):  # n: pairs of one (each row's) table
    sel = sels.get(name)
    att.add(labels[name], "n", None, 0 if sel is None else int(
        sel.sum((-3, -2, -1)).flat[0]))
    for a, sc in scores.get(name, {}).items():
      for i in range(len(ids)):
        att.add_seed(labels[name], i, {f"acc{a:g}": sc["accuracy"][i],
                                       f"nll{a:g}": sc["nll"][i]})
  pairs = [(n, "baseline") for n in sels] + [
      (f"{x}_low_q", f"{x}_high_q") for x in ("spectrum", "sequence")] + [
          (f"{q}_q", "random_q") for q in c.quantiles]
  comparisons = [results_lib.Comparison("attenuation", f"{m}{a:g}",
                                        labels[x], labels[y])
                 for x, y in pairs if {x, y} <= set(scores)
                 for a in c.alphas for m in ("acc", "nll")]
  out = {"scores": scores, "probe_shape": probe.shape, "eval_shape":
         ids.shape, "baseline_perplexity": float(np.exp(
             scores["baseline"][float(c.alphas[0])]["nll"].mean())),
         "nope_layers": list(nope)}
  tables.append(att)
  if mc_items:
    table, comps, out["downstream"] = downstream(config, model, tok, native,
                                                 mc_items)
    tables.append(table)
    comparisons += comps
    out["downstream"]["num_fewshot"] = int(config.downstream.get(
        "num_fewshot", 0))
    out["downstream"]["paths"] = {n: t.path for n, t in downstream_tasks(
        config).items()}
  data = (None if rows_read is None and not mc_rows else
          results_lib.data_provenance(config, rows={**(rows_read or {}),
                                                    **mc_rows}))
  results_lib.write(workdir, "frequency_entropy", tables=tables,
                    comparisons=comparisons, extra=out, config=config,
                    start_time=t0, data=data)
  return out


def run(config, workdir: str) -> dict[str, Any]:
  if config.init_from:
    return run_pretrained(config, workdir)
  t0 = time.time()
  train_src, eval_src = sources(config)
  res = trainer.train(config, workdir, train_source=train_src,
                      eval_source=eval_src)
  model, _ = nnx.merge(res["train_state"].graphdef, res["train_state"].state)
  ids = eval_tokens(config)
  c = config.fe
  out: dict[str, Any] = {"final_train_loss": res.get("loss"),
                         "seq_len": int(ids.shape[1]),
                         "num_seqs": int(ids.shape[0]),
                         "nope_layers": list(config.model.nope_layers),
                         "per_layer": {}, "plots": []}
  maps_by_pairing = {}
  for pairing in c.pairings:
    maps = fe.fe_maps(model, ids, which=c.which, pairing=pairing,
                      frame=int(c.frame), hop=int(c.hop), window=c.window)
    maps_by_pairing[pairing] = maps
    out["plots"] += fe.plot_fe_maps(maps, workdir, pairing=pairing,
                                    which=c.which)
    for metric in ("spectrum", "sequence"):
      out["per_layer"][f"{metric}_{pairing}"] = np.nanmean(
          maps[metric], axis=(1, 2)).tolist()
  native = maps_by_pairing.get("native", next(iter(maps_by_pairing.values())))
  for pairing, maps in maps_by_pairing.items():
    out[f"sequence_fe_rope_vs_nope_{pairing}"] = fe.rope_vs_nope(maps)
  sels = fe.fe_selections(native, float(c.fraction), rules=tuple(c.rules),
                          quantiles=tuple(c.quantiles), seed=int(c.seed))
  sweeps = {name: fe.alpha_sweep(model, ids, sel, alphas=tuple(c.alphas),
                                 mode=c.mode) for name, sel in sels.items()}
  out["sweeps"] = sweeps
  out["baseline_perplexity"] = fe.perplexity(model, ids)
  out["plots"].append(fe.plot_alpha_sweep(sweeps, os.path.join(workdir,
                                                               "sweep.png")))
  tables, comparisons = results_tables(out, int(config.seed))
  results_lib.write(workdir, "frequency_entropy", tables=tables,
                    comparisons=comparisons, extra=out, config=config,
                    start_time=t0)
  return out
