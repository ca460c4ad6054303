"""StableToken miniature (spec E, "CPU-only miniature"): see jaxlab/configs/stabletoken.py.

Per seed: render synthetic speech (jaxlab.data.synthetic.speech), make
perturbed training copies (jaxlab.data.audio.random_perturbation) and
held-out noisy copies at the spec's evaluation settings, compute log-mels in
JAX, then train each variant's tokenizer with the generic step runner
(registered loss `stabletoken`) and measure

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

import jax
import jax.numpy as jnp
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.data import audio
from jaxlab.data.synthetic import speech
from jaxlab.evals import text
from jaxlab.models import registry as model_registry
from jaxlab.models import speech_tokenizer as st
from jaxlab.objectives import stabletoken as _  # registers the loss  # pylint: disable=unused-import
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib

# variant -> (model overrides, loss overrides)
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "full": ({}, {"routing": "noise_aware"}),
    "no_consensus": ({}, {"routing": "noise_aware", "consensus_weight": 0.0}),
    "no_routing": ({}, {"routing": "augment"}),
    "single_branch": ({"n_voters": 1, "num_clean": 1}, {"routing": "augment"}),
    "vq": ({"quantizer": "vq"}, {"routing": "augment"}),
}
LABELS = {"full": "StableToken (full)", "no_consensus": "w/o consensus loss",
          "no_routing": "w/o noise-aware routing",
          "single_branch": "single branch (n=1)", "vq": "VQ baseline"}


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def speech_config(cfg) -> speech.SpeechConfig:
  kw = dict(cfg.speech)
  for k in ("f0_range", "formant_scale_range", "peak_range"):
    if k in kw:
      kw[k] = tuple(kw[k])
  return speech.SpeechConfig(**kw)


def _features(waves: np.ndarray, cfg) -> np.ndarray:
  f = cfg.features
  out = []
  for i in range(0, len(waves), 64):
    out.append(np.asarray(audio.log_mel(
        jnp.asarray(waves[i:i + 64]), n_fft=f.n_fft, hop=f.hop,
        n_mels=f.n_mels, pad_mode=f.pad_mode)))
  return np.concatenate(out)


def _perturbed(split, fn) -> np.ndarray:
  out = np.zeros_like(split["waves"])
  for i, n in enumerate(split["num_samples"]):
    out[i, :n] = fn(split["waves"][i, :n])
  return out


def make_data(cfg, seed: int) -> dict[str, Any]:
  """Training features (clean + perturbed copies) and held-out eval sets."""
  scfg = speech_config(cfg)
  d = cfg.utterances
  base = 1000 * int(seed)
  train = speech.make_split(scfg, d.train_utterances, seed=base + 1)
  held = speech.make_split(scfg, d.eval_utterances, seed=base + 2)
  clips_train = speech.noise_clips(scfg, d.train_clips, seed=base + 3)
  clips_eval = speech.noise_clips(scfg, d.eval_clips, seed=base + 4)
  rng = np.random.default_rng(base + 5)
  table = {k: tuple(v) for k, v in cfg.perturb.train.items()}
  copies = [_features(_perturbed(train, lambda w: audio.random_perturbation(
      w, rng, table=table, clips=clips_train)[0]), cfg)
            for _ in range(d.noisy_copies)]
  held_noisy = {}
  for kind, value in cfg.perturb.eval.items():
    held_noisy[kind] = _features(_perturbed(held, lambda w, k=kind, v=value:
                                            audio.perturb(w, k, v, rng,
                                                          clips_eval)), cfg)
  return {
      "train": {"features": _features(train["waves"], cfg),
                "noisy": np.stack(copies, 1),          # [N, C, F, M]
                "frame_lengths": audio.num_frames(train["num_samples"],
                                                  cfg.features.hop),
                "labels": train["labels"], "label_mask": train["label_mask"]},
      "held": {"features": _features(held["waves"], cfg),
               "noisy": held_noisy,
               "frame_lengths": audio.num_frames(held["num_samples"],
                                                 cfg.features.hop),
               "labels": held["labels"], "label_mask": held["label_mask"]},
  }


# ---------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------


def variant_configs(cfg, variant: str):
  if variant not in VARIANTS:
    raise ValueError(f"config.variants: unknown variant {variant!r}; valid: "
                     f"{', '.join(VARIANTS)}")
  model_over, loss_over = VARIANTS[variant]
  model_cfg = ml_collections.ConfigDict(cfg.tokenizer.to_dict())
  model_cfg.update(model_over)
  model_cfg.n_mels = cfg.features.n_mels
  loss_cfg = ml_collections.ConfigDict(cfg.loss.to_dict())
  loss_cfg.update(loss_over)
  return model_cfg, loss_cfg


def train_variant(cfg, variant: str, data: dict[str, Any], seed: int):
  """Trains one tokenizer with the trainer's step (StepRunner)."""
  model_cfg, loss_cfg = variant_configs(cfg, variant)
  spec = model_registry.get_spec(model_cfg, vocab_size=cfg.speech.num_phones
                                 + 1, seed=seed)
  model = nnx.jit(spec.factory)()
  steps, bs = int(cfg.train.steps), int(cfg.train.batch_size)
  run = runner.StepRunner(model, loss="stabletoken", loss_config=loss_cfg,
                          optim=cfg.optim, steps=steps, seed=seed)
  tr = data["train"]
  n, copies = len(tr["features"]), tr["noisy"].shape[1]
  rng = np.random.default_rng(10_000 + seed)
  curve = []
  for step in range(steps):
    idx = rng.integers(0, n, bs)
    batch = {"features": tr["features"][idx],
             "features_noisy": tr["noisy"][idx, rng.integers(0, copies, bs)],
             "frame_lengths": tr["frame_lengths"][idx],
             "labels": tr["labels"][idx], "label_mask": tr["label_mask"][idx]}
    m = run.step(batch, step)
    if step % max(1, steps // 10) == 0 or step == steps - 1:
      curve.append({"step": step, **{k: m[k] for k in
                                     ("loss", "ctc", "consensus", "entropy")}})
      print(f"  {variant} step {step}: loss {m['loss']:.3f} ctc "
            f"{m['ctc']:.3f}", flush=True)
  return run.model(), curve


def _batched(fn, feats, lengths, bs=64):
  outs = [fn(feats[i:i + bs], lengths[i:i + bs])
          for i in range(0, len(feats), bs)]
  return [np.concatenate([o[j] for o in outs]) if isinstance(outs[0][j],
                                                             np.ndarray)
          else sum((o[j] for o in outs), []) for j in range(len(outs[0]))]


def phone_error_rate(model, feats, lengths, labels, label_mask) -> float:
  hyps = []
  for i in range(0, len(feats), 64):
    hyps += st.ctc_greedy(model, feats[i:i + 64], lengths[i:i + 64])
  refs = [list(l[m]) for l, m in zip(labels, label_mask)]
  return sum(text.levenshtein(h, r) for h, r in zip(hyps, refs)) / sum(
      len(r) for r in refs)


def evaluate(model, data: dict[str, Any], n_voters: int) -> dict[str, Any]:
  """UED per noise type, PER clean/noisy, bit-vote recoveries."""
  held = data["held"]
  lens = held["frame_lengths"]
  tok = lambda f, l: st.tokenize(model, f, l)  # noqa: E731
  c_idx, _, c_mask = _batched(tok, held["features"], lens)
  out = {"per_clean": phone_error_rate(model, held["features"], lens,
                                       held["labels"], held["label_mask"])}
  ueds, pers = [], []
  rec = {"frames": 0, "majority_wrong": 0, "recovered": 0,
         "voted_wrong_branch_majority_right": 0}
  for kind, feats in held["noisy"].items():
    n_idx, n_branch, _ = _batched(tok, feats, lens)
    clean_units = [c_idx[i][c_mask[i]] for i in range(len(c_idx))]
    noisy_units = [n_idx[i][c_mask[i]] for i in range(len(n_idx))]
    out[f"ued_{kind}"] = text.unit_edit_distance(clean_units, noisy_units)
    ueds.append(out[f"ued_{kind}"])
    pers.append(phone_error_rate(model, feats, lens, held["labels"],
                                 held["label_mask"]))
    m = c_mask
    wrong_branches = (n_branch != c_idx[..., None]).sum(-1)
    maj_wrong = (wrong_branches * 2 > n_voters) & m
    voted_right = (n_idx == c_idx) & m
    rec["frames"] += int(m.sum())
    rec["majority_wrong"] += int(maj_wrong.sum())
    rec["recovered"] += int((maj_wrong & voted_right).sum())
    rec["voted_wrong_branch_majority_right"] += int(
        (~maj_wrong & ~voted_right & m).sum())
  out["ued_avg"] = float(np.mean(ueds))
  out["per_noisy"] = float(np.mean(pers))
  out["recovery"] = rec
  return out


# ---------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------


def plot(summary: dict[str, dict[str, list[float]]], kinds: list[str],
         path: str) -> str:
  variants = list(summary)
  cols = kinds + ["avg"]
  fig, ax = plt.subplots(figsize=(9, 3.6))
  width = 0.8 / max(len(variants), 1)
  for j, v in enumerate(variants):
    means = [np.mean(summary[v][f"ued_{c}"]) for c in cols]
    stds = [np.std(summary[v][f"ued_{c}"], ddof=1)
            if len(summary[v][f"ued_{c}"]) > 1 else 0.0 for c in cols]
    ax.bar(np.arange(len(cols)) + j * width, means, width, yerr=stds,
           label=LABELS.get(v, v), capsize=2)
  ax.set_xticks(np.arange(len(cols)) + width * (len(variants) - 1) / 2)
  ax.set_xticklabels(cols)
  ax.set_ylabel("UED % (lower is more stable)")
  ax.set_title("Token stability on held-out noisy copies (mean ± std over "
               "seeds)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  variants = [v.strip() for v in config.variants.split(",") if v.strip()]
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
      n_voters = (variant_configs(config, v)[0].n_voters
                  if VARIANTS[v][0].get("quantizer", "voting_lfq")
                  == "voting_lfq" else 1)
      ev = evaluate(model, data, n_voters)
      curves[f"{v}/seed{seed}"] = curve
      row = LABELS.get(v, v)
      vals = {k: ev[k] for k in ["ued_avg"] + [f"ued_{k}" for k in kinds]
              + ["per_clean", "per_noisy"]}
      ued.add_seed(row, seed, vals)
      for k, x in vals.items():
        summary.setdefault(v, {}).setdefault(k, []).append(x)
      if n_voters > 1:
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
          "table_markdown": table_markdown(summary, kinds),
          **{f"ued_avg/{v}": m for v, m in means.items()}}


def plot_from_results(results_json: str, path: str) -> str:
  """The UED plot from a (merged) results file, e.g. docs/results/
  stabletoken.json: `python -c "from jaxlab.experiments import stabletoken as s;
  s.plot_from_results('docs/results/stabletoken.json',
  'docs/papers/stabletoken.png')"`."""
  import json  # pylint: disable=g-import-not-at-top
  with open(results_json) as f:
    res = json.load(f)
  table = next(t for t in res["tables"] if t["id"] == "ued")
  inv = {label: v for v, label in LABELS.items()}
  summary = {inv.get(r["label"], r["label"]):
             {k: c["values"] for k, c in r["cells"].items()}
             for r in table["rows"]}
  kinds = [c["key"][4:] for c in table["columns"]
           if c["key"].startswith("ued_") and c["key"] != "ued_avg"]
  return plot(summary, kinds, path)


def table_markdown(summary, kinds) -> str:
  cols = ["ued_avg"] + [f"ued_{k}" for k in kinds] + ["per_clean"]
  lines = ["| variant | " + " | ".join(cols) + " |",
           "|---" * (len(cols) + 1) + "|"]
  for v, s in summary.items():
    cells = []
    for c in cols:
      scale = 100 if c.startswith("per") else 1
      cells.append(f"{scale * np.mean(s[c]):.1f}")
    lines.append(f"| {v} | " + " | ".join(cells) + " |")
  return "\n".join(lines)
