"""StableToken's miniature data (spec E): log-mels of synthetic speech.

Per seed: render synthetic utterances (`jaxlab.data.synthetic.speech`), make
perturbed training copies (`jaxlab.data.audio.random_perturbation`) and
held-out noisy copies at the spec's evaluation settings (`cfg.perturb`),
and compute their log-mel features in JAX (`make_data`).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxlab.data import audio
from jaxlab.data.synthetic import speech


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
