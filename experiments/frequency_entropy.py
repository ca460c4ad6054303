"""Experiment "frequency_entropy": FE maps of a trained LM and an alpha sweep.

Trains (or resumes) the decoder of `config.model` on `config.data`, then on
`fe.num_eval_seqs` held-out sequences of `train.seq_len` tokens computes
SpectrumFE and SequenceFE for every (layer, head, rotary pair) and pairing,
draws heatmaps, and sweeps the weighted-RoPE alpha over the spec's
selection rules plus equal-size quantile selections, reporting perplexity.
Writes `results.json` and PNGs (`fe_<metric>_<pairing>.png`, `sweep.png`).
"""

import os
import json
from typing import Any

import numpy as np
from flax import nnx

from jaxlab.analysis import frequency_entropy as fe
from jaxlab.data import pipeline
from jaxlab.data import tokenizers
from jaxlab.train import trainer


def eval_tokens(config) -> np.ndarray:
  """`[num_eval_seqs, seq_len]` held-out token ids of the run's corpus."""
  tok = tokenizers.ByteTokenizer()
  _, ev = pipeline.lm_sources(config.data, seq_len=int(config.train.seq_len),
                              tokenizer=tok)
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


def run(config, workdir: str) -> dict[str, Any]:
  res = trainer.train(config, workdir)
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
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(out, f, indent=1)
  return out
