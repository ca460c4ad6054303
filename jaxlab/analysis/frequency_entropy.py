"""Frequency Entropy (FE) probing of rotary pairs (paper C, spec C.1-C.5).

For each layer l, head h and rotary pair j, the signal is the norm of the
post-RoPE query (or key) sub-vector over positions,
s_j = (||q_0^(j)||, ..., ||q_{L-1}^(j)||) (spec C.1). Two normalised spectral
entropies in [0, 1] summarise it:

  SpectrumFE (C.2): STFT (frame F, hop H, Hann window [inferred]), frame power
    spectra averaged, p_k = S_k / sum S, H = -sum p log2 p, / log2 K with
    K = F/2 + 1. Low = energy in a few bins ("bands").
  SequenceFE (C.3): |DFT|^2 of the whole signal, DC dropped, k = 1..L/2-1,
    normalised entropy / log2(L/2 - 1). Low = one dominant tone
    ("periodicity"); NoPE layers sit near 1.

Weighted RoPE (C.4) multiplies the rotated sub-vector of selected pairs by
alpha: q*_m^(j) = alpha_{l,h,j} R q_m^(j) (and the same for k), so pair j's
logit contribution scales by alpha^2. `weighted_rope_model` realises it
exactly by scaling the pair's q-projection columns (a rotation commutes with
a scalar); `rope_pair_weights_from_alpha` instead feeds the decoder's
`rope_pair_weights` hook, which scales each pair's rotation *angle* (a
different, frequency-domain attenuation kept as an option). With alpha = 1
both leave the logits bit-identical.

Typical use:

    maps = fe_maps(model, ids_bt, frame=128, hop=64)        # dict of arrays
    sel = select_pairs(maps, rule="a+b")                     # bool [L, N, P]
    alpha = alpha_table(sel, 0.1)
    attenuated = weighted_rope_model(model, alpha)
    ppl = perplexity(attenuated, ids_bt)

On a pretrained model (`jaxlab.io.pretrained`; preset
`jaxlab/configs/frequency_entropy.py:smollm2`): `maps_from_qk` on one
`capture_qk` forward gives q and k maps per sequence, `fe_group_means`
summarises them by depth and by pair band, `fe_selections` builds the
attenuation arms (spec rules, equal-size quantile arms, a per-row random
control) and `selection_scores` / `next_token_scores` give per-sequence
next-token accuracy and NLL under each arm.
"""

from collections.abc import Mapping, Sequence
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import plotting

PAIRINGS = ("native", "half_split", "adjacent")
WINDOWS = ("hann", "hamming", "rect")
SIDES = ("above", "below")
# Selection rules of spec C.4: (a) SpectrumFE > 0.4, (b) SequenceFE < 0.6,
# (c) the control SpectrumFE < 0.2 (band core).
RULES = {
    "a": (("spectrum", "above", 0.4),),
    "b": (("sequence", "below", 0.6),),
    "c": (("spectrum", "below", 0.2),),
    "a+b": (("spectrum", "above", 0.4), ("sequence", "below", 0.6)),
}
MODES = ("magnitude", "angle")


# -- signals -----------------------------------------------------------------


def pair_norms(x_btnh, pairing: str = "native") -> np.ndarray:
  """Per-pair norms `[B, T, N, H/2]` of vectors `x [B, T, N, H]`.

  Args:
    x_btnh: post-RoPE queries or keys.
    pairing: "native" = the decoder's own rotation pairs, which are
      half-split (dims j and j + H/2, the rotate_half layout); "half_split"
      the same explicitly; "adjacent" = dims (2j, 2j+1), a non-native
      diagnostic that does oscillate with RoPE (spec C.5).
  """
  x = np.asarray(x_btnh, np.float64)
  h = x.shape[-1]
  if pairing in ("native", "half_split"):
    a, b = x[..., :h // 2], x[..., h // 2:]
  elif pairing == "adjacent":
    a, b = x[..., 0::2], x[..., 1::2]
  else:
    raise ValueError(f"unknown pairing {pairing!r}; valid choices: "
                     f"{', '.join(PAIRINGS)}")
  return np.sqrt(a * a + b * b)


def _window(name: str, n: int) -> np.ndarray:
  # Periodic windows (the STFT convention, as scipy.signal.get_window).
  k = np.arange(n)
  if name == "hann":
    return 0.5 - 0.5 * np.cos(2 * np.pi * k / n)
  if name == "hamming":
    return 0.54 - 0.46 * np.cos(2 * np.pi * k / n)
  if name == "rect":
    return np.ones(n)
  raise ValueError(f"unknown window {name!r}; valid choices: "
                   f"{', '.join(WINDOWS)}")


def _normalised_entropy(power: np.ndarray) -> np.ndarray:
  """-sum p log2 p / log2 K over the last axis; NaN where all power is 0."""
  total = power.sum(-1, keepdims=True)
  with np.errstate(invalid="ignore", divide="ignore"):
    p = power / total
    terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
  h = terms.sum(-1) / math.log2(power.shape[-1])
  return np.where(total[..., 0] > 0, h, np.nan)


def spectrum_fe(s, frame: int = 1024, hop: int = 512,
                window: str = "hann", drop_dc: bool = False) -> np.ndarray:
  """SpectrumFE (spec C.2) of signals `s [..., L]` -> `[...]` in [0, 1].

  Frames are taken without padding, T = 1 + (L - F) // H (7 frames for the
  paper's L=4096, F=1024, H=512); frame power spectra |rfft|^2 over
  K = F/2 + 1 bins are averaged, normalised and their entropy divided by
  log2 K. `drop_dc` (default False, as the spec) excludes bin 0.
  """
  s = np.asarray(s, np.float64)
  length = s.shape[-1]
  if frame < 2 or hop < 1 or frame > length:
    raise ValueError(f"spectrum_fe needs 2 <= frame <= signal length and "
                     f"hop >= 1; got frame={frame}, hop={hop}, L={length}")
  starts = np.arange(0, length - frame + 1, hop)
  frames = np.stack([s[..., i:i + frame] for i in starts], axis=-2)
  spec = np.abs(np.fft.rfft(frames * _window(window, frame), axis=-1)) ** 2
  power = spec.mean(-2)
  if drop_dc:
    power = power[..., 1:]
  return _normalised_entropy(power)


def sequence_fe(s) -> np.ndarray:
  """SequenceFE (spec C.3) of signals `s [..., L]` -> `[...]` in [0, 1].

  S_k = |sum_n s[n] e^{-i 2 pi k n / L}|^2 for k = 1..L/2-1 (DC and, for
  even L, Nyquist dropped), normalised entropy / log2(L/2 - 1).
  """
  s = np.asarray(s, np.float64)
  length = s.shape[-1]
  if length < 6:
    raise ValueError(f"sequence_fe needs a signal of length >= 6, got "
                     f"{length}")
  power = np.abs(np.fft.fft(s, axis=-1)[..., 1:length // 2]) ** 2
  return _normalised_entropy(power)


# -- capture and maps ----------------------------------------------------------


def capture_qk(model, input_ids_bt, **forward_kwargs
               ) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
  """Post-RoPE (q `[B,T,N,H]`, k `[B,T,K,H]`) per layer, as numpy arrays."""
  out = model.forward(jnp.asarray(input_ids_bt), output_qk=True,
                      **forward_kwargs)
  return tuple((np.asarray(q, np.float32), np.asarray(k, np.float32))
               for q, k in out.qk)


def maps_from_qk(qk, *, which: str = "q", pairing: str = "native",
                 frame: int = 1024, hop: int = 512, window: str = "hann",
                 nope_layers: Sequence[int] = (),
                 per_sequence: bool = False) -> dict[str, np.ndarray]:
  """FE of every (layer, head, pair) from captured post-RoPE q/k.

  Args:
    qk: per layer `(q [B,T,N,H], k [B,T,K,H])`, as `capture_qk` returns
      (or `Decoder.forward(..., output_qk=True).qk`).
    which: "q" (the spec's signal, C.1) or "k" (heads are then KV heads).
    pairing, frame, hop, window: see `pair_norms` and `spectrum_fe`.
    nope_layers: layers without RoPE (flagged False in "rope_layer").
    per_sequence: keep the batch axis (`[B, layers, heads, pairs]`)
      instead of averaging FE over the sequences.

  Returns:
    {"spectrum": [layers, heads, pairs], "sequence": [layers, heads, pairs],
     "rope_layer": [layers] bool (False for NoPE layers)}.
  """
  if which not in ("q", "k"):
    raise ValueError(f"which must be 'q' or 'k', got {which!r}")
  spectrum, sequence = [], []
  for q, k in qk:
    norms_bnpt = np.moveaxis(pair_norms(q if which == "q" else k, pairing),
                             1, -1)
    sp = spectrum_fe(norms_bnpt, frame, hop, window)
    sq = sequence_fe(norms_bnpt)
    spectrum.append(sp if per_sequence else np.nanmean(sp, axis=0))
    sequence.append(sq if per_sequence else np.nanmean(sq, axis=0))
  axis = 1 if per_sequence else 0
  nope = set(nope_layers)
  return {"spectrum": np.stack(spectrum, axis),
          "sequence": np.stack(sequence, axis),
          "rope_layer": np.array([i not in nope
                                  for i in range(len(spectrum))])}


def fe_maps(model, input_ids_bt, *, which: str = "q",
            pairing: str = "native", frame: int = 1024, hop: int = 512,
            window: str = "hann") -> dict[str, np.ndarray]:
  """FE of every (layer, head, pair), averaged over the batch.

  Args:
    model: a `jaxlab.models.decoder.Decoder`.
    input_ids_bt: `[B, L]` token ids; the signal length is L.
    which: "q" or "k".
    pairing, frame, hop, window: see `pair_norms` and `spectrum_fe`.

  Returns:
    {"spectrum": [layers, heads, pairs], "sequence": [layers, heads, pairs],
     "rope_layer": [layers] bool (False for NoPE layers)}.
  """
  if which not in ("q", "k"):
    raise ValueError(f"which must be 'q' or 'k', got {which!r}")
  return maps_from_qk(capture_qk(model, input_ids_bt), which=which,
                      pairing=pairing, frame=frame, hop=hop, window=window,
                      nope_layers=model.cfg.nope_layers)


def fe_group_means(maps_by_name: Mapping[str, Mapping[str, np.ndarray]], *,
                   layer_group: int = 5, pair_group: int = 8
                   ) -> dict[str, dict[str, dict[str, np.ndarray]]]:
  """Mean FE per group of layers and per group of rotary pairs, per sequence.

  Args:
    maps_by_name: {name: `maps_from_qk(..., per_sequence=True)`} (e.g.
      "q_native", "k_native"); arrays `[B, layers, heads, pairs]`.
    layer_group, pair_group: group sizes (pair 0 is the fastest-rotating).

  Returns:
    {"depth": {"layers 0-4": {"<name>_spectrum": [B], "<name>_sequence":
    [B], ...}, ...}, "pairs": {"pairs 0-7": {...}, ...}}: the NaN-ignoring
    mean over the group's (layer, head, pair) cells of each sequence.
  """
  first = np.asarray(next(iter(maps_by_name.values()))["spectrum"])
  n_layers, n_pairs = first.shape[1], first.shape[3]
  groups = {
      "depth": {f"layers {i}-{min(i + layer_group, n_layers) - 1}":
                (slice(i, i + layer_group), slice(None))
                for i in range(0, n_layers, layer_group)},
      "pairs": {f"pairs {j}-{min(j + pair_group, n_pairs) - 1}":
                (slice(None), slice(j, j + pair_group))
                for j in range(0, n_pairs, pair_group)}}
  out = {}
  for gid, rows in groups.items():
    out[gid] = {}
    for label, (ls, ps) in rows.items():
      out[gid][label] = {
          f"{name}_{m}": np.nanmean(np.asarray(mp[m])[:, ls, :, ps],
                                    axis=(1, 2, 3))
          for name, mp in maps_by_name.items()
          for m in ("spectrum", "sequence")}
  return out


def plot_fe_heatmaps(fe_lnp, path: str, *, title: str = "FE",
                     layer_labels: Sequence[str] | None = None,
                     vmin: float = 0.0, vmax: float = 1.0) -> str:
  """One heads x pairs heatmap per layer (matplotlib PNG); returns `path`."""
  plt = plotting.pyplot()
  fe = np.asarray(fe_lnp)
  n_layers = fe.shape[0]
  fig, axes = plt.subplots(1, n_layers, figsize=(3.2 * n_layers, 2.8),
                           squeeze=False)
  im = None
  for i, ax in enumerate(axes[0]):
    im = ax.imshow(fe[i], aspect="auto", vmin=vmin, vmax=vmax,
                   cmap="viridis", interpolation="nearest")
    ax.set_title(layer_labels[i] if layer_labels else f"layer {i}")
    ax.set_xlabel("rotary pair j")
    ax.set_ylabel("head")
  fig.suptitle(title)
  fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)
  return path


def plot_fe_maps(maps: Mapping[str, np.ndarray], directory: str, *,
                 pairing: str, which: str = "q") -> list[str]:
  """`fe_<metric>_<pairing>.png` heatmaps of one `fe_maps` result."""
  labels = [f"layer {i}" + ("" if r else " (NoPE)")
            for i, r in enumerate(maps["rope_layer"])]
  return [plot_fe_heatmaps(
      maps[m], os.path.join(directory, f"fe_{m}_{pairing}.png"),
      title=f"{m.capitalize()}FE ({pairing} pairing, {which})",
      layer_labels=labels) for m in ("spectrum", "sequence")]


# -- selection and attenuation ---------------------------------------------


def threshold_mask(values, threshold: float, side: str) -> np.ndarray:
  """Boolean mask of `values` strictly above/below `threshold` (NaN: False)."""
  v = np.asarray(values, np.float64)
  if side == "above":
    return np.nan_to_num(v, nan=-np.inf) > threshold
  if side == "below":
    return np.nan_to_num(v, nan=np.inf) < threshold
  raise ValueError(f"unknown side {side!r}; valid choices: {', '.join(SIDES)}")


def quantile_threshold(values, fraction: float, side: str,
                       where=None) -> float:
  """Threshold selecting about `fraction` of `values` on `side`.

  For a model whose FE range differs from the paper's (tiny models), this
  picks the threshold from the data: e.g. side="below", fraction=0.1 gives
  the 10th percentile, so `threshold_mask(v, t, "below")` selects ~10%.
  `where` (bool, same shape) restricts the pool (e.g. RoPE layers only).
  """
  if not 0.0 < fraction < 1.0:
    raise ValueError(f"fraction must be in (0, 1), got {fraction}")
  v = np.asarray(values, np.float64)
  if where is not None:
    v = v[np.broadcast_to(np.asarray(where, bool), v.shape)]
  v = v[np.isfinite(v)]
  if side == "below":
    return float(np.quantile(v, fraction))
  if side == "above":
    return float(np.quantile(v, 1.0 - fraction))
  raise ValueError(f"unknown side {side!r}; valid choices: {', '.join(SIDES)}")


def select_pairs(maps: Mapping[str, np.ndarray], rule: str = "a+b",
                 thresholds: Mapping[str, float] | None = None,
                 rope_layers_only: bool = True) -> np.ndarray:
  """Pairs to attenuate under one of the spec's rules (C.4) -> bool [L,N,P].

  Args:
    maps: output of `fe_maps`.
    rule: "a" (SpectrumFE > 0.4), "b" (SequenceFE < 0.6), "c" (control,
      SpectrumFE < 0.2) or "a+b" (union of a and b, the downstream setting).
    thresholds: optional overrides {"a": 0.45, "b": 0.5, ...} of each
      sub-rule's threshold (the paper's values are for large models).
    rope_layers_only: never select pairs of NoPE layers.
  """
  if rule not in RULES:
    raise ValueError(f"unknown rule {rule!r}; valid choices: "
                     f"{', '.join(RULES)}")
  thresholds = dict(thresholds or {})
  unknown = set(thresholds) - {"a", "b", "c"}
  if unknown:
    raise ValueError(f"unknown threshold keys {sorted(unknown)}; valid: a, b, c")
  sub_names = ("a", "b") if rule == "a+b" else (rule,)
  mask = np.zeros_like(np.asarray(maps["spectrum"]), dtype=bool)
  for name, (key, side, default) in zip(sub_names, RULES[rule]):
    mask |= threshold_mask(maps[key], thresholds.get(name, default), side)
  if rope_layers_only and "rope_layer" in maps:
    mask &= np.asarray(maps["rope_layer"], bool)[:, None, None]
  return mask


def quantile_selection(values, fraction: float, side: str,
                       where=None) -> np.ndarray:
  """The `fraction` of pairs with the lowest ("below") or highest ("above")
  FE -> bool mask, restricted to `where` (bool, broadcast to `values`)."""
  v = np.asarray(values)
  mask = threshold_mask(v, quantile_threshold(v, fraction, side, where=where),
                        side)
  if where is not None:
    mask &= np.broadcast_to(np.asarray(where, bool), v.shape)
  return mask


def random_selection(where, k: int, seed: int) -> np.ndarray:
  """`k` pairs drawn uniformly without replacement from `where` (bool).

  The equal-size random control of a quantile selection; the draw is
  `numpy.random.default_rng(seed).choice(len(pool), k, replace=False)`
  over `np.argwhere(where)`.
  """
  where = np.asarray(where, bool)
  pool = np.argwhere(where)
  if not 0 <= k <= len(pool):
    raise ValueError(f"cannot draw {k} pairs from a pool of {len(pool)}")
  rng = np.random.default_rng(int(seed))
  mask = np.zeros(where.shape, bool)
  for idx in pool[rng.choice(len(pool), size=k, replace=False)]:
    mask[tuple(idx)] = True
  return mask


QUANTILE_ARMS = {"spectrum_low": ("spectrum", "below"),
                 "spectrum_high": ("spectrum", "above"),
                 "sequence_low": ("sequence", "below"),
                 "sequence_high": ("sequence", "above")}


def fe_selections(maps: Mapping[str, np.ndarray], fraction: float, *,
                  rules: Sequence[str] = (),
                  quantiles: Sequence[str] = ("spectrum_low", "spectrum_high",
                                              "sequence_low"),
                  random_like: str | None = "sequence_low",
                  seed: int = 0, random_rows: int | None = None,
                  drop_empty: bool = False) -> dict[str, np.ndarray]:
  """The attenuation arms: spec rules and equal-size quantile selections.

  Returns {"rule_<r>": select_pairs(maps, r) for r in rules,
  "<q>_q": the `fraction` of RoPE-layer pairs lowest/highest in that FE
  (`QUANTILE_ARMS`), "random_q": as many random RoPE-layer pairs as the
  `random_like` arm (omitted when None), drawn with `seed`}. With
  `random_rows=B`, "random_q" is `[B, layers, heads, pairs]`: a fresh draw
  per evaluation row, row i with seed `seed + i` (`next_token_scores`
  takes such per-row tables). `drop_empty` leaves out arms that select
  no pair (a rule whose threshold this model's FE never crosses).
  """
  unknown = set(quantiles) - set(QUANTILE_ARMS)
  if unknown:
    raise ValueError(f"unknown quantile arms {sorted(unknown)}; valid "
                     f"choices: {', '.join(QUANTILE_ARMS)}")
  rope_l = np.asarray(maps["rope_layer"], bool)[:, None, None]
  sel = {f"rule_{r}": select_pairs(maps, r) for r in rules}
  for name in quantiles:
    key, side = QUANTILE_ARMS[name]
    sel[f"{name}_q"] = quantile_selection(maps[key], fraction, side,
                                          where=rope_l)
  if random_like is not None:
    pool = np.broadcast_to(rope_l, np.asarray(maps["spectrum"]).shape)
    k = int(sel[f"{random_like}_q"].sum())
    sel["random_q"] = (random_selection(pool, k, seed) if random_rows is None
                       else np.stack([random_selection(pool, k, seed + i)
                                      for i in range(random_rows)]))
  if drop_empty:
    sel = {name: m for name, m in sel.items() if m.any()}
  return sel


def rope_vs_nope(maps: Mapping[str, np.ndarray],
                 key: str = "sequence") -> dict[str, float | None]:
  """Mean FE (`key`) of the RoPE layers and of the NoPE layers (None if
  the model has none): the spec's periodicity control (C.1, C.3)."""
  rope_l = np.asarray(maps["rope_layer"], bool)
  v = np.asarray(maps[key])
  return {"rope": float(np.nanmean(v[rope_l])),
          "nope": float(np.nanmean(v[~rope_l])) if (~rope_l).any() else None}


def selection_labels(fraction: float = 0.1,
                     random_like: str = "SequenceFE lowest") -> dict[str, str]:
  """Display names of the `fe_selections` arms (docs table rows)."""
  pct = f"{round(fraction * 100, 6):g}%"
  return {
      "rule_a": "rule a: SpectrumFE > 0.4",
      "rule_b": "rule b: SequenceFE < 0.6",
      "rule_c": "rule c: SpectrumFE < 0.2", "rule_a+b": "rule a+b",
      "spectrum_low_q": f"SpectrumFE lowest {pct}",
      "spectrum_high_q": f"SpectrumFE highest {pct}",
      "sequence_low_q": f"SequenceFE lowest {pct}",
      "sequence_high_q": f"SequenceFE highest {pct}",
      "random_q": f"random pairs (as many as {random_like})"}


def alpha_table(selected_lnp, alpha: float) -> np.ndarray:
  """alpha_{l,h,j} = alpha where selected, else 1 (spec C.4), float32."""
  sel = np.asarray(selected_lnp, bool)
  return np.where(sel, np.float32(alpha), np.float32(1.0)).astype(np.float32)


def weighted_rope_model(model, alpha_lnp):
  """A copy of `model` whose pair (l, h, j) is multiplied by alpha (spec C.4).

  q*^(j) = alpha R q^(j) with the same for k scales pair j's logit term by
  alpha^2. Because a rotation commutes with a scalar, this equals scaling
  the pre-RoPE q columns (j, j + H/2) of head h by alpha^2 (and its bias),
  which is what this does; k is left alone so that per-query-head tables
  work with grouped KV heads. Values and the other pairs are untouched, and
  alpha = 1 multiplies by exactly 1.0, so the logits are bit-identical.

  Args:
    model: a `Decoder`.
    alpha_lnp: `[layers, heads, head_dim // 2]` (or `[layers, head_dim // 2]`
      shared by the heads).
  """
  cfg = model.cfg
  if getattr(cfg, "qk_norm", False):
    raise ValueError("weighted_rope_model scales q-projection columns, which "
                     "the decoder's qk_norm (RMSNorm of each q head before "
                     "RoPE) would undo; use a model with qk_norm=False or "
                     "mode='angle'")
  hd = cfg.resolved_head_dim
  alpha = np.asarray(alpha_lnp, np.float32)
  if alpha.ndim == 2:
    alpha = np.broadcast_to(alpha[:, None, :],
                            (alpha.shape[0], cfg.num_heads, alpha.shape[1]))
  want = (cfg.num_layers, cfg.num_heads, hd // 2)
  if alpha.shape != want:
    raise ValueError(f"alpha table has shape {alpha_lnp.shape}; expected "
                     f"{want} or {(want[0], want[2])}")
  new = nnx.clone(model)
  for i, block in enumerate(new.layers):
    a2 = alpha[i] ** 2
    col_nh = jnp.asarray(np.concatenate([a2, a2], axis=-1))  # half-split
    attn = block.attn
    attn.q_dnh[...] = (attn.q_dnh[...] * col_nh.astype(attn.q_dnh.dtype))
    if attn.q_bias_nh is not None:
      attn.q_bias_nh[...] = attn.q_bias_nh[...] * col_nh.astype(
          attn.q_bias_nh.dtype)
  return new


def rope_pair_weights_from_alpha(alpha_lnp) -> np.ndarray:
  """`[layers, head_dim // 2]` table for `Decoder.forward(rope_pair_weights=)`.

  That hook scales each pair's rotation angle (frequency), not its
  magnitude, and is shared by the heads; a table that differs across heads
  of a layer is an error.
  """
  alpha = np.asarray(alpha_lnp, np.float32)
  if alpha.ndim == 3:
    if not np.all(alpha == alpha[:, :1, :]):
      raise ValueError("mode='angle' needs an alpha table shared by the heads "
                       "([layers, pairs]); use mode='magnitude' for per-head "
                       "tables")
    alpha = alpha[:, 0, :]
  if alpha.ndim != 2:
    raise ValueError(f"alpha table must be [layers, pairs] or [layers, "
                     f"heads, pairs], got shape {alpha.shape}")
  return alpha


def attenuated_forward(model, input_ids_bt, alpha_lnp=None,
                       mode: str = "magnitude", **forward_kwargs):
  """`model.forward` with weighted RoPE; alpha None = plain model."""
  if mode not in MODES:
    raise ValueError(f"unknown attenuation mode {mode!r}; valid choices: "
                     f"{', '.join(MODES)}")
  ids = jnp.asarray(input_ids_bt)
  if alpha_lnp is None:
    return model.forward(ids, **forward_kwargs)
  if mode == "magnitude":
    return weighted_rope_model(model, alpha_lnp).forward(ids, **forward_kwargs)
  return model.forward(ids, rope_pair_weights=jnp.asarray(
      rope_pair_weights_from_alpha(alpha_lnp)), **forward_kwargs)


def perplexity(model, input_ids_bt, alpha_lnp=None, mode: str = "magnitude",
               batch_size: int = 8) -> float:
  """exp(mean next-token NLL) over `[B, L]` sequences, optionally attenuated."""
  ids = np.asarray(input_ids_bt)
  nll, count = 0.0, 0
  for start in range(0, ids.shape[0], batch_size):
    chunk = ids[start:start + batch_size]
    logits = attenuated_forward(model, chunk, alpha_lnp, mode).logits
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    tgt = jnp.asarray(chunk[:, 1:])
    nll += float(-jnp.take_along_axis(logp, tgt[..., None], -1).sum())
    count += tgt.size
  return math.exp(nll / count)


def next_token_scores(model, input_ids_bt, alpha_lnp=None,
                      mode: str = "magnitude",
                      batch_size: int = 4) -> dict[str, np.ndarray]:
  """Per-sequence next-token scores, optionally under weighted RoPE.

  For each row of `[B, L]` ids: "nll", the mean NLL (nats) of tokens
  1..L-1 given their prefix, and "accuracy", the fraction of them that are
  the model's top-1 (argmax) prediction; "tokens" = L - 1. The weighted
  model (`weighted_rope_model`) is built once for all rows; an `alpha_lnp`
  of shape `[B, layers, heads, pairs]` gives each row its own table (e.g.
  a fresh random selection per row).
  """
  if mode not in MODES:
    raise ValueError(f"unknown attenuation mode {mode!r}; valid choices: "
                     f"{', '.join(MODES)}")
  ids = np.asarray(input_ids_bt)
  if alpha_lnp is not None and np.ndim(alpha_lnp) == 4:
    if len(alpha_lnp) != len(ids):
      raise ValueError(f"{len(alpha_lnp)} per-row alpha tables for "
                       f"{len(ids)} rows")
    rows = [next_token_scores(model, ids[i:i + 1], alpha_lnp[i], mode)
            for i in range(len(ids))]
    return {"nll": np.concatenate([r["nll"] for r in rows]),
            "accuracy": np.concatenate([r["accuracy"] for r in rows]),
            "tokens": ids.shape[1] - 1}
  kwargs = {}
  if alpha_lnp is not None and mode == "magnitude":
    model = weighted_rope_model(model, alpha_lnp)
  elif alpha_lnp is not None:
    kwargs["rope_pair_weights"] = jnp.asarray(
        rope_pair_weights_from_alpha(alpha_lnp))
  nll, acc = [], []
  for start in range(0, ids.shape[0], batch_size):
    chunk = jnp.asarray(ids[start:start + batch_size])
    logits = model.forward(chunk, **kwargs).logits[:, :-1].astype(jnp.float32)
    tgt = chunk[:, 1:]
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll.append(np.asarray(-jnp.take_along_axis(logp, tgt[..., None],
                                               -1)[..., 0].mean(-1)))
    acc.append(np.asarray((logits.argmax(-1) == tgt).sum(-1)) / tgt.shape[1])
  return {"nll": np.concatenate(nll).astype(np.float64),
          "accuracy": np.concatenate(acc).astype(np.float64),
          "tokens": ids.shape[1] - 1}


def selection_scores(model, input_ids_bt,
                     selections: Mapping[str, np.ndarray],
                     alphas: Sequence[float], mode: str = "magnitude",
                     batch_size: int = 4) -> dict[str, dict[float, Any]]:
  """`next_token_scores` of every selection at every alpha, and "baseline".

  `selections` maps a name to a bool `[layers, heads, pairs]` mask (or
  `[B, layers, heads, pairs]`, one per row). Returns {name: {alpha:
  scores}}; "baseline" (no attenuation) is scored once and listed under
  every alpha; a selection of no pair is left out.
  """
  base = next_token_scores(model, input_ids_bt, batch_size=batch_size)
  out = {"baseline": {float(a): base for a in alphas}}
  for name, sel in selections.items():
    if not np.asarray(sel).any():
      continue
    out[name] = {float(a): next_token_scores(
        model, input_ids_bt, alpha_table(sel, a), mode, batch_size)
                 for a in alphas}
  return out


def plot_alpha_sweep(sweeps: Mapping[str, Mapping[str, Any]],
                     path: str) -> str:
  """Perplexity against alpha, one line per selection (`alpha_sweep`s)."""
  plt = plotting.pyplot()
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


def alpha_sweep(model, input_ids_bt, selected_lnp,
                alphas: Sequence[float] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
                mode: str = "magnitude") -> dict[str, Any]:
  """Perplexity for each alpha applied to `selected_lnp` (spec C.4 sweep)."""
  return {"alpha": [float(a) for a in alphas],
          "perplexity": [perplexity(model, input_ids_bt,
                                    alpha_table(selected_lnp, a), mode)
                         for a in alphas],
          "num_selected": int(np.asarray(selected_lnp).sum())}
