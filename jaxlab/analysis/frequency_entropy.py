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
"""

from collections.abc import Mapping, Sequence
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

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
  spectrum, sequence = [], []
  for q, k in capture_qk(model, input_ids_bt):
    norms_bnpt = np.moveaxis(pair_norms(q if which == "q" else k, pairing),
                             1, -1)
    spectrum.append(np.nanmean(spectrum_fe(norms_bnpt, frame, hop, window),
                               axis=0))
    sequence.append(np.nanmean(sequence_fe(norms_bnpt), axis=0))
  nope = set(model.cfg.nope_layers)
  return {"spectrum": np.stack(spectrum), "sequence": np.stack(sequence),
          "rope_layer": np.array([i not in nope
                                  for i in range(len(spectrum))])}


def plot_fe_heatmaps(fe_lnp, path: str, *, title: str = "FE",
                     layer_labels: Sequence[str] | None = None,
                     vmin: float = 0.0, vmax: float = 1.0) -> str:
  """One heads x pairs heatmap per layer (matplotlib PNG); returns `path`."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
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


def alpha_sweep(model, input_ids_bt, selected_lnp,
                alphas: Sequence[float] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
                mode: str = "magnitude") -> dict[str, Any]:
  """Perplexity for each alpha applied to `selected_lnp` (spec C.4 sweep)."""
  return {"alpha": [float(a) for a in alphas],
          "perplexity": [perplexity(model, input_ids_bt,
                                    alpha_table(selected_lnp, a), mode)
                         for a in alphas],
          "num_selected": int(np.asarray(selected_lnp).sum())}
