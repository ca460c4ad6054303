"""Experiment "frequency_entropy": FE maps of a trained LM and an alpha sweep.

Trains (or resumes) the decoder of `config.model` on `config.data` (as one
continuous token stream cut into `train.seq_len` windows, `StreamSource`),
then on `fe.num_eval_seqs` held-out sequences of `train.seq_len` tokens
computes SpectrumFE and SequenceFE for every (layer, head, rotary pair) and
pairing, draws heatmaps, and sweeps the weighted-RoPE alpha over the spec's
selection rules plus equal-size quantile selections, reporting perplexity.
Writes `results.json` and PNGs (`fe_<metric>_<pairing>.png`, `sweep.png`).
"""

import os
import time
from typing import Any

import numpy as np
from flax import nnx

from jaxlab.analysis import frequency_entropy as fe
from jaxlab.data import sources as data_sources
from jaxlab.data import tokenizers
from jaxlab.train import trainer
from jaxlab.experiments import results as results_lib


class StreamSource:
  """LM examples cut from one continuous token stream (no padding, no resets).

  The FE signal runs over positions 0..L-1 of one sequence (spec C.1), so
  the model is trained the same way: documents (each starting with BOS) are
  concatenated into one stream and cut into windows of `seq_len + 1`, so
  every row has positions 0..L-1 and every target is a real token. (The
  library packer instead resets positions per document and pads rows; a
  whole-row forward pass then extrapolates past the longest document and
  scores padding, which inflated the probe's perplexity to 212 against an
  eval loss of 0.29 nats in a first run.)
  """

  def __init__(self, token_lists, seq_len: int):
    stream = np.concatenate([np.asarray(t, np.int32) for t in token_lists])
    n = (len(stream) - 1) // seq_len
    if n < 1:
      raise ValueError(f"corpus of {len(stream)} tokens is shorter than one "
                       f"sequence of train.seq_len={seq_len}")
    self.stream, self.seq_len, self.n = stream, seq_len, n

  def __len__(self) -> int:
    return self.n

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    w = self.stream[i * self.seq_len:(i + 1) * self.seq_len + 1]
    return {"inputs": w[:-1], "targets": w[1:],
            "loss_mask": np.ones(self.seq_len, np.float32)}


def sources(config):
  """(train, eval) stream sources of `config.data` (synthetic or jsonl)."""
  d = config.data
  tok = tokenizers.ByteTokenizer()
  if d.source == "synthetic":
    texts = data_sources.synthetic_corpus(int(d.num_docs),
                                          seed=int(d.data_seed))
  elif d.source == "jsonl":
    texts = data_sources.read_jsonl(d.path, text_key=d.text_key)
  else:
    raise ValueError(f"data.source={d.source!r}; valid for this experiment: "
                     "synthetic, jsonl")
  n_eval = max(1, int(len(texts) * float(d.eval_fraction)))
  seq_len = int(config.train.seq_len)
  toks = [tok.encode(t, add_bos=True, add_eos=True) for t in texts]
  return (StreamSource(toks[:-n_eval], seq_len),
          StreamSource(toks[-n_eval:], seq_len))


def eval_tokens(config) -> np.ndarray:
  """`[num_eval_seqs, seq_len]` held-out token ids of the run's corpus."""
  _, ev = sources(config)
  n = min(int(config.fe.num_eval_seqs), len(ev))
  return np.stack([np.asarray(ev[i]["inputs"]) for i in range(n)])


def _selections(maps, config) -> dict[str, np.ndarray]:
  f = float(config.fe.fraction)
  rope_l = np.asarray(maps["rope_layer"], bool)[:, None, None]
  sel = {f"rule_{r}": fe.select_pairs(maps, r) for r in config.fe.rules}
  spec, seq = maps["spectrum"], maps["sequence"]
  t_low_spec = fe.quantile_threshold(spec, f, "below", where=rope_l)
  t_high_spec = fe.quantile_threshold(spec, f, "above", where=rope_l)
  t_low_seq = fe.quantile_threshold(seq, f, "below", where=rope_l)
  sel["spectrum_low_q"] = fe.threshold_mask(spec, t_low_spec, "below") & rope_l
  sel["spectrum_high_q"] = fe.threshold_mask(spec, t_high_spec,
                                             "above") & rope_l
  sel["sequence_low_q"] = fe.threshold_mask(seq, t_low_seq, "below") & rope_l
  rng = np.random.default_rng(int(config.fe.seed))
  pool = np.argwhere(np.broadcast_to(rope_l, spec.shape))
  k = int(sel["sequence_low_q"].sum())
  rand = np.zeros(spec.shape, bool)
  for idx in pool[rng.choice(len(pool), size=k, replace=False)]:
    rand[tuple(idx)] = True
  sel["random_q"] = rand
  return sel


def _plot_sweep(sweeps, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 3.6))
  for name, sw in sweeps.items():
    if sw["num_selected"]:
      ax.plot(sw["alpha"], sw["perplexity"], marker="o",
              label=f"{name} (n={sw['num_selected']})")
  ax.set_xlabel("alpha")
  ax.set_ylabel("perplexity")
  ax.set_yscale("log")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


SELECTION_LABELS = {
    "rule_a": "rule a: SpectrumFE > 0.4", "rule_b": "rule b: SequenceFE < 0.6",
    "rule_c": "rule c: SpectrumFE < 0.2", "rule_a+b": "rule a+b",
    "spectrum_low_q": "SpectrumFE lowest 10%",
    "spectrum_high_q": "SpectrumFE highest 10%",
    "sequence_low_q": "SequenceFE lowest 10%",
    "random_q": "random pairs (as many as SequenceFE lowest)"}


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
    metric, pairing = key.split("_", 1)
    pairing = ("native pairs" if pairing == "native"
               else f"{pairing} (non-native)")
    layers.add_seed(f"{names[metric]}, {pairing}", seed,
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
    vals = {"n": sw["num_selected"]}
    if sw["num_selected"]:
      vals.update({f"a{a:g}": p for a, p in zip(sw["alpha"],
                                               sw["perplexity"])})
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


def run(config, workdir: str) -> dict[str, Any]:
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
    labels = [f"layer {i}" + ("" if r else " (NoPE)")
              for i, r in enumerate(maps["rope_layer"])]
    for metric in ("spectrum", "sequence"):
      out["plots"].append(fe.plot_fe_heatmaps(
          maps[metric], os.path.join(workdir, f"fe_{metric}_{pairing}.png"),
          title=f"{metric.capitalize()}FE ({pairing} pairing, {c.which})",
          layer_labels=labels))
      out["per_layer"][f"{metric}_{pairing}"] = np.nanmean(
          maps[metric], axis=(1, 2)).tolist()
  native = maps_by_pairing.get("native", next(iter(maps_by_pairing.values())))
  rope_l = native["rope_layer"]
  for pairing, maps in maps_by_pairing.items():
    out[f"sequence_fe_rope_vs_nope_{pairing}"] = {
        "rope": float(np.nanmean(maps["sequence"][rope_l])),
        "nope": (float(np.nanmean(maps["sequence"][~rope_l]))
                 if (~rope_l).any() else None)}
  sweeps = {name: fe.alpha_sweep(model, ids, sel, alphas=tuple(c.alphas),
                                 mode=c.mode)
            for name, sel in _selections(native, config).items()}
  out["sweeps"] = sweeps
  out["baseline_perplexity"] = fe.perplexity(model, ids)
  out["plots"].append(_plot_sweep(sweeps, os.path.join(workdir,
                                                       "sweep.png")))
  tables, comparisons = results_tables(out, int(config.seed))
  results_lib.write(workdir, "frequency_entropy", tables=tables,
                    comparisons=comparisons, extra=out, config=config,
                    start_time=t0)
  return out
