"""StableToken miniature (spec E, "CPU-only miniature"): see jaxlab/configs/stabletoken.py.

Per seed: render synthetic speech (jaxlab.data.synthetic.speech), make
perturbed training copies (jaxlab.data.audio.random_perturbation) and
held-out noisy copies at the spec's evaluation settings, compute log-mels in
JAX (`jaxlab.data.synthetic.stabletoken_data`), then train each variant's
tokenizer with the generic step runner (registered loss `stabletoken`,
`jaxlab.objectives.stabletoken_train`) and measure
(`jaxlab.evals.speech_tokens`)

  * UED% between the 25 Hz tokens of each held-out clean utterance and its
    noisy copy (jaxlab.evals.text.unit_edit_distance), per noise type;
  * the clean and noisy phone error rate of greedy CTC (the "matched CTC
    accuracy" the comparison needs);
  * bit-vote recoveries: noisy frames where most branches' own tokens
    differ from the clean token but the bitwise vote still gives it.

Writes WORKDIR/results.json (tables `ued`, `recovery`), stabletoken.png.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from jaxlab.analysis.stabletoken_plots import plot, plot_from_results  # pylint: disable=unused-import
from jaxlab.data.synthetic.stabletoken_data import make_data, speech_config  # pylint: disable=unused-import
from jaxlab.evals.speech_tokens import evaluate, phone_error_rate  # pylint: disable=unused-import
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib
from jaxlab.objectives.stabletoken_train import (  # pylint: disable=unused-import
    LABELS, VARIANTS, n_voters, train_variant, variant_configs)

def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  # A tuple of registered names (a comma-separated string still works).
  variants = [v.strip() for v in (config.variants.split(",")
              if isinstance(config.variants, str) else config.variants)
              if v.strip()]
  for v in variants:
    variant_configs(config, v)  # unknown names fail before any work
  kinds = list(config.perturb.eval.keys())
  ued_cols = [results_lib.Column("ued_avg", "UED % avg ↓", decimals=1)]
  ued_cols += [results_lib.Column(f"ued_{k}", f"UED {k}", decimals=1)
               for k in kinds]
  ued_cols += [results_lib.Column("per_clean", "PER clean %", decimals=1,
                                  scale=100),
               results_lib.Column("per_noisy", "PER noisy %", decimals=1,
                                  scale=100)]
  ued = results_lib.Table(
      "ued", "UED % between tokens of held-out clean and noisy copies, and "
      "CTC phone error rate (PER)", ued_cols, row_label="variant")
  rec = results_lib.Table(
      "recovery", "Bit-vote recoveries on held-out noisy copies (summed over "
      "noise types)",
      [results_lib.Column("frames", "frames", decimals=0),
       results_lib.Column("majority_wrong", "most branches wrong", decimals=0),
       results_lib.Column("recovered", "vote recovers the clean token",
                          decimals=0),
       results_lib.Column("recovered_frac", "recovered / most wrong %",
                          decimals=1, scale=100)], row_label="variant")
  summary: dict[str, dict[str, list[float]]] = {}
  curves = {}
  for seed in config.seeds:
    data = make_data(config, seed)
    for v in variants:
      model, curve = train_variant(config, v, data, seed)
      voters = n_voters(config, v)
      ev = evaluate(model, data, voters)
      curves[f"{v}/seed{seed}"] = curve
      row = LABELS.get(v, v)
      vals = {k: ev[k] for k in ["ued_avg"] + [f"ued_{k}" for k in kinds]
              + ["per_clean", "per_noisy"]}
      ued.add_seed(row, seed, vals)
      for k, x in vals.items():
        summary.setdefault(v, {}).setdefault(k, []).append(x)
      if voters > 1:
        r = ev["recovery"]
        rec.add_seed(row, seed, {
            "frames": r["frames"], "majority_wrong": r["majority_wrong"],
            "recovered": r["recovered"],
            "recovered_frac": r["recovered"] / max(r["majority_wrong"], 1)})
      print(f"seed {seed} {v:14s} UED {ev['ued_avg']:.1f} PER clean "
            f"{100 * ev['per_clean']:.1f} noisy {100 * ev['per_noisy']:.1f} "
            f"recovered {ev['recovery']['recovered']}/"
            f"{ev['recovery']['majority_wrong']} "
            f"({time.time() - t0:.0f}s)", flush=True)
  comparisons = [results_lib.Comparison("ued", "ued_avg", LABELS["full"],
                                        LABELS[b])
                 for b in variants if b != "full" and "full" in variants]
  png = plot(summary, kinds, os.path.join(workdir, "stabletoken.png"))
  res = results_lib.write(workdir, "stabletoken", tables=[ued, rec],
                          comparisons=comparisons,
                          extra={"curves": curves, "summary": summary},
                          config=config, start_time=t0)
  means = {v: float(np.mean(s["ued_avg"])) for v, s in summary.items()}
  return {"wall_time_s": res["wall_time_s"], "plot": png,
          "summary": summary, "ued_means": means,
          "table_markdown": report.render_table(res, "ued",
                                                name="stabletoken"),
          **{f"ued_avg/{v}": m for v, m in means.items()}}
