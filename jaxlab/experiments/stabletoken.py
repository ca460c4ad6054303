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

The real run (`config.data.source` in tfds / hf / grain / audio: the
`paper` preset) reads LibriSpeech (`jaxlab.data.librispeech`: the TFDS
builder's rows, a Hub copy, or the released FLAC / WAV directories),
computes Whisper's log-mel features of each clean utterance, of perturbed
training copies (spec E.3) and of held-out copies at the evaluation
settings (spec E.6), initialises the tokenizer's encoder from the Whisper
checkpoint `config.init_from` (`jaxlab.models.whisper.WhisperTokenizer`:
Voting-LFQ at the same depth fraction as the paper's block 16 of 32, a
character CTC head for the ASR loss), trains each variant with the same
step runner and reports UED, character error rate and WER (jiwer's) of
the greedy CTC transcripts; `data.rows` in results.json counts the
utterances read.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from jaxlab.analysis.stabletoken_plots import plot, plot_from_results  # pylint: disable=unused-import
from jaxlab.data import librispeech
from jaxlab.data.synthetic.stabletoken_data import make_data, speech_config  # pylint: disable=unused-import
from jaxlab.evals.speech_tokens import evaluate, phone_error_rate  # pylint: disable=unused-import
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib
from jaxlab.objectives.stabletoken_train import (  # pylint: disable=unused-import
    LABELS, VARIANTS, n_voters, train_variant, variant_configs)

# `config.data.source` values that select the real run.
REAL_SOURCES = ("tfds", "hf", "grain", "audio")


def _variants(config) -> list[str]:
  # A tuple of registered names (a comma-separated string still works).
  variants = [v.strip() for v in (config.variants.split(",")
              if isinstance(config.variants, str) else config.variants)
              if v.strip()]
  for v in variants:
    variant_configs(config, v)  # unknown names fail before any work
  return variants


def whisper_tokenizer(config, variant: str, seed: int):
  """The variant's `WhisperTokenizer`, its encoder `config.init_from`'s."""
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  from jaxlab.models import whisper  # pylint: disable=g-import-not-at-top
  enc, wcfg = pretrained.load(config.init_from)
  if not isinstance(enc, whisper.Whisper):
    raise ValueError(f"stabletoken: config.init_from={config.init_from!r} "
                     f"is not a Whisper checkpoint (got {type(enc).__name__})")
  model_cfg, _ = variant_configs(config, variant)
  if model_cfg.quantizer != "voting_lfq":
    raise ValueError(f"stabletoken: variant {variant!r} (quantizer "
                     f"{model_cfg.quantizer!r}) has no Whisper form; use the "
                     f"Voting-LFQ variants")
  lower, upper = int(model_cfg.lower_layers), int(model_cfg.upper_layers)
  # The quantizer at the paper's depth fraction (block 16 of 32).
  after = max(1, round(wcfg.encoder_layers * lower / (lower + upper)))
  tcfg = whisper.WhisperTokenizerConfig(
      whisper=wcfg, quantize_after=after,
      vocab_size=len(librispeech.CHARS) + 1,
      n_voters=int(model_cfg.n_voters), bits=int(model_cfg.bits),
      num_clean=int(model_cfg.num_clean),
      codebook_scale=float(model_cfg.codebook_scale),
      pool=int(model_cfg.get("pool", 2)))
  return whisper.tokenizer_from_whisper(enc, tcfg, seed=seed), wcfg


def run_real(config, workdir: str) -> dict[str, Any]:
  """The real run (module docstring)."""
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  variants = _variants(config)
  if not config.get("init_from", ""):
    raise ValueError("stabletoken: the real run (data.source="
                     f"{config.data.source!r}) needs config.init_from, a "
                     "Whisper checkpoint (e.g. openai/whisper-large-v3)")
  data_cfg = config.data
  split, eval_split = data_cfg.split, data_cfg.get("eval_split", "") or ""
  train_utts = librispeech.read_utterances(data_cfg, split)
  held_utts = (librispeech.read_utterances(data_cfg, eval_split)
               if eval_split else [])
  if not held_utts:  # no eval split: hold out the last 10 %
    k = max(1, len(train_utts) // 10)
    train_utts, held_utts = train_utts[:-k] or train_utts, train_utts[-k:]
    eval_split = f"{split}[held-out]"
  rows = {split: len(train_utts), eval_split: len(held_utts)}
  clips = (librispeech.read_noise_clips(data_cfg.noise_dir)
           if data_cfg.get("noise_dir", "") else None)
  kinds = [k for k in config.perturb.eval.keys() if clips or k != "clip"]
  table = results_lib.Table(
      "ued", "UED % between tokens of held-out clean and noisy copies, "
      "character error rate (CER) and WER of greedy CTC",
      [results_lib.Column("ued_avg", "UED % avg ↓", decimals=1)]
      + [results_lib.Column(f"ued_{k}", f"UED {k}", decimals=1)
         for k in kinds]
      + [results_lib.Column(c, label, decimals=1, scale=100) for c, label in
         (("per_clean", "CER clean %"), ("per_noisy", "CER noisy %"),
          ("wer_clean", "WER clean %"), ("wer_noisy", "WER noisy %"))],
      row_label="variant")
  summary: dict[str, dict[str, list[float]]] = {}
  curves = {}
  feats = config.features
  for seed in config.seeds:
    data = None  # the seed's features and noisy copies, shared by variants
    for v in variants:
      model, wcfg = whisper_tokenizer(config, v, seed)
      data = data or librispeech.tokenizer_data(
          train_utts, held_utts, n_mels=wcfg.num_mel_bins,
          num_samples=wcfg.num_frames * int(feats.hop), hop=int(feats.hop),
          train_table={k: tuple(x) for k, x in config.perturb.train.items()},
          eval_settings={k: float(config.perturb.eval[k]) for k in kinds},
          noisy_copies=int(config.utterances.noisy_copies), clips=clips,
          seed=1000 * int(seed))
      model, curve = train_variant(config, v, data, seed, model=model)
      ev = evaluate(model, data, n_voters(config, v))
      curves[f"{v}/seed{seed}"] = curve
      vals = {k: ev[k] for k in ["ued_avg"] + [f"ued_{k}" for k in kinds]
              + ["per_clean", "per_noisy"]}
      vals.update({k: ev.get(k, float("nan"))
                   for k in ("wer_clean", "wer_noisy")})
      table.add_seed(LABELS.get(v, v), seed, vals)
      for k, x in vals.items():
        summary.setdefault(v, {}).setdefault(k, []).append(x)
      print(f"seed {seed} {v:14s} UED {ev['ued_avg']:.1f} WER clean "
            f"{100 * vals['wer_clean']:.1f} noisy "
            f"{100 * vals['wer_noisy']:.1f} ({time.time() - t0:.0f}s)",
            flush=True)
  res = results_lib.write(
      workdir, "stabletoken", tables=[table],
      extra={"curves": curves, "summary": summary}, config=config,
      start_time=t0, data=results_lib.data_provenance(config, rows=rows))
  means = {v: float(np.mean(s["ued_avg"])) for v, s in summary.items()}
  return {"wall_time_s": res["wall_time_s"], "summary": summary,
          "ued_means": means, "rows": rows,
          **{f"ued_avg/{v}": m for v, m in means.items()}}


def run(config, workdir: str) -> dict[str, Any]:
  if config.data.get("source", "") in REAL_SOURCES:
    return run_real(config, workdir)
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  variants = _variants(config)
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
