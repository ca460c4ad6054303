"""Rotary position embeddings (Su et al., 2021) with a registry of scalings.

`inv_freq(method, ...)` returns the per-pair inverse frequencies theta_i
(shape `[head_dim // 2]`) and an attention scale; `apply_rope` rotates q/k with
them. Context-extension methods register a function under a name, so a config
picks one by string:

    inv, scale = rope.inv_freq("default", head_dim=64, base=10000.0)
    inv, scale = rope.inv_freq("mrope_pro", head_dim=64, base=1e4, factor=8,
                               original_max_position=2048)

Registered scalings (spec: papers/A-G.md, section D.3):

  default       plain RoPE, theta_i = b^(-2i/d).
  pi            position interpolation, theta_i / S.
  ntk           NTK-aware, b' = b * S^(d/(d-2))  (s_i = S^(i/(D_r-1))).
  dynamic_ntk   NTK with S re-derived from the current length (HF "dynamic").
  yarn          YaRN / NTK-by-parts with the index ramp of the official code
                and Hugging Face (`_compute_yarn_parameters`).
  yarn_rotation YaRN with the paper's rotation-count ramp (regressive lambda).
  llama3        Llama-3.1 wavelength-banded scaling.
  mrope_uni     MrRoPE-Uni: s_i = S^(t/n) across [d_l, d_h].
  mrope_pro     MrRoPE-Pro: s_i = S^(t(t+1)/(n(n+1))) across [d_l, d_h].

Every extension but `default` is a *cumulative scale* s_i on the default
frequencies, theta'_i = theta_i / s_i (MrRoPE eq. 10/15); `cumulative_scale`
and `step_ratio` (lambda_i = s_{i+1}/s_i) expose it for plotting, and
`rope_bound` / `rope_bound_first_root` give the RoPE bound
B(m) = sum_j cos(m theta'_j) (spec D.6).

The rotation follows the half-split ("rotate_half") layout of Llama/Qwen2
checkpoints: pair i couples dims i and i + head_dim/2.
"""

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import registry
from jaxlab.nn import dtypes

# name -> fn(*, head_dim, base, factor, original_max_position, beta_fast,
#            beta_slow, **options) -> (inv_freq [head_dim//2] float64, scale)
ScalingFn = Callable[..., tuple[np.ndarray, float]]
_SCALINGS: registry.Registry[ScalingFn] = registry.Registry(
    "RoPE scaling method")
register = _SCALINGS.register
available = _SCALINGS.names


def default_inv_freq(head_dim: int, base: float) -> np.ndarray:
  """theta_i = base^(-2i/d), i = 0..d/2-1 (RoFormer eq. 15)."""
  if head_dim % 2:
    raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
  exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
  return 1.0 / (base ** exponents)


@register("default")
def _default(*, head_dim, base, **unused) -> tuple[np.ndarray, float]:
  del unused
  return default_inv_freq(head_dim, base), 1.0


# Scalings whose frequencies depend on the current sequence length: the one
# place that knows it. `scaling_tables` passes them `seq_len=` (a static
# length) and `extension_scaling` gives them factor 1, because they derive the
# stretch from the length themselves.
_LENGTH_DEPENDENT = {"dynamic_ntk"}


def uses_seq_len(method: str) -> bool:
  """Whether `method` needs the current sequence length (`seq_len=`)."""
  return method in _LENGTH_DEPENDENT


def _need_original(method: str, original_max_position: int | None) -> int:
  if original_max_position is None or original_max_position <= 0:
    raise ValueError(
        f"RoPE scaling {method!r} needs original_max_position (the "
        f"pre-training context length L), got {original_max_position!r}")
  return int(original_max_position)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
  """YaRN attention temperature 0.1 * mscale * ln S + 1 (1 for S <= 1).

  MrRoPE App. A.2 / YaRN eq. 22: cos and sin are multiplied by this, so the
  logits scale by its square.
  """
  if factor <= 1.0:
    return 1.0
  return 0.1 * mscale * math.log(factor) + 1.0


def _yarn_attention_factor(factor: float, attention_factor: float | None,
                           mscale: float | None,
                           mscale_all_dim: float | None) -> float:
  # Same precedence as transformers: an explicit attention_factor wins; then
  # DeepSeek-style mscale / mscale_all_dim (both set and non-zero); then the
  # paper's 0.1 ln S + 1.
  if attention_factor is not None:
    return float(attention_factor)
  if mscale and mscale_all_dim:
    return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
  return yarn_mscale(factor)


def correction_dim(num_rotations: float, head_dim: int, base: float,
                   original_max_position: int) -> float:
  """YaRN's dim(r) = D ln(L / (2 pi r)) / (2 ln b) (MrRoPE spec D.2).

  The (fractional, 0-based) pair index whose wavelength fits `num_rotations`
  turns into the original context L.
  """
  return (head_dim * math.log(original_max_position /
                              (num_rotations * 2 * math.pi)) /
          (2 * math.log(base)))


def rotation_counts(head_dim: int, base: float,
                    original_max_position: int) -> np.ndarray:
  """r_i = L theta_i / (2 pi): turns pair i completes within L `[d/2]`."""
  return original_max_position * default_inv_freq(head_dim, base) / (
      2 * math.pi)


def band_boundaries(*, head_dim: int, base: float, original_max_position: int,
                    beta_fast: float = 32.0, beta_slow: float = 1.0,
                    boundary: str = "yarn_floor_ceil") -> tuple[int, int]:
  """(d_l, d_h): 0-based first and last pair of the MrRoPE middle band.

  `boundary="yarn_floor_ceil"` (spec D.2, default): d_l = floor(dim(beta_fast)),
  d_h = ceil(dim(beta_slow)), clipped to [0, D_r - 1].
  `boundary="turn_grid"` (the third-party variant the spec mentions):
  d_l = last index with more than beta_fast turns, d_h = first index with
  fewer than beta_slow turns (off by one from the first in general).
  """
  half = head_dim // 2
  if boundary == "yarn_floor_ceil":
    lo = math.floor(correction_dim(beta_fast, head_dim, base,
                                   original_max_position))
    hi = math.ceil(correction_dim(beta_slow, head_dim, base,
                                  original_max_position))
  elif boundary == "turn_grid":
    turns = rotation_counts(head_dim, base, original_max_position)
    above = np.nonzero(turns > beta_fast)[0]
    below = np.nonzero(turns < beta_slow)[0]
    lo = int(above[-1]) if above.size else 0
    hi = int(below[0]) if below.size else half - 1
  else:
    raise ValueError(f"unknown boundary {boundary!r}; valid choices: "
                     "yarn_floor_ceil, turn_grid")
  lo = min(max(lo, 0), half - 1)
  hi = min(max(hi, 0), half - 1)
  return lo, hi


@register("pi")
def _pi(*, head_dim, base, factor, **unused):
  """Position interpolation (Chen et al. 2023): m -> m / S, i.e. s_i = S."""
  del unused
  return default_inv_freq(head_dim, base) / factor, 1.0


@register("ntk")
def _ntk(*, head_dim, base, factor, **unused):
  """NTK-aware: b' = b S^(d/(d-2)), i.e. s_i = S^(i/(D_r-1)) (spec D.3)."""
  del unused
  new_base = base * factor ** (head_dim / (head_dim - 2))
  return default_inv_freq(head_dim, new_base), 1.0


@register("dynamic_ntk")
def _dynamic_ntk(*, head_dim, base, factor, original_max_position,
                 seq_len: int | None = None, **unused):
  """Dynamic NTK (HF "dynamic"): NTK with the base grown for `seq_len`.

  b' = b (S L'/L - (S - 1))^(d/(d-2)), L' = max(seq_len, L), so sequences
  within the original length L use the default frequencies. `L` is the
  model's original context (`max_position_embeddings` in transformers).
  """
  del unused
  length = _need_original("dynamic_ntk", original_max_position)
  cur = length if seq_len is None else max(int(seq_len), length)
  new_base = base * ((factor * cur / length) - (factor - 1)) ** (
      head_dim / (head_dim - 2))
  return default_inv_freq(head_dim, new_base), 1.0


def _ramp(lo: float, hi: float, n: int) -> np.ndarray:
  if lo == hi:
    hi += 0.001  # as the official code: avoids 0/0 for a single-pair band
  return np.clip((np.arange(n, dtype=np.float64) - lo) / (hi - lo), 0, 1)


@register("yarn")
def _yarn(*, head_dim, base, factor, original_max_position, beta_fast,
          beta_slow, attention_factor: float | None = None,
          mscale: float | None = None, mscale_all_dim: float | None = None,
          truncate: bool = True, **unused):
  """YaRN, index-ramp variant of the official code and transformers.

  theta'_i = gamma_i theta_i + (1 - gamma_i) theta_i / S with
  gamma_i = 1 - clip((i - low) / (high - low), 0, 1), low/high = dim(beta_fast)
  / dim(beta_slow) (floored/ceiled when `truncate`), clipped to [0, d - 1]
  exactly like `transformers.modeling_rope_utils._compute_yarn_parameters`.
  """
  del unused
  length = _need_original("yarn", original_max_position)
  beta_fast = beta_fast or 32.0
  beta_slow = beta_slow or 1.0
  low = correction_dim(beta_fast, head_dim, base, length)
  high = correction_dim(beta_slow, head_dim, base, length)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  # Clip bound d - 1 (not d/2 - 1) is the reference code's; kept for parity.
  low, high = max(low, 0), min(high, head_dim - 1)
  gamma = 1.0 - _ramp(low, high, head_dim // 2)
  theta = default_inv_freq(head_dim, base)
  inv = theta / factor * (1 - gamma) + theta * gamma
  return inv, _yarn_attention_factor(factor, attention_factor, mscale,
                                     mscale_all_dim)


@register("yarn_rotation")
def _yarn_rotation(*, head_dim, base, factor, original_max_position,
                   beta_fast, beta_slow, attention_factor: float | None = None,
                   mscale: float | None = None,
                   mscale_all_dim: float | None = None, **unused):
  """YaRN with the paper's rotation-count ramp (spec D.3, variant (i)).

  gamma_i = clip((r_i - beta_slow) / (beta_fast - beta_slow), 0, 1) with
  r_i = L theta_i / (2 pi); s_i = 1 / (gamma_i + (1 - gamma_i) / S). Its step
  ratio lambda_i = s_{i+1} / s_i decreases across the band (regressive).
  """
  del unused
  length = _need_original("yarn_rotation", original_max_position)
  turns = rotation_counts(head_dim, base, length)
  gamma = np.clip((turns - beta_slow) / (beta_fast - beta_slow), 0, 1)
  theta = default_inv_freq(head_dim, base)
  inv = gamma * theta + (1 - gamma) * theta / factor
  return inv, _yarn_attention_factor(factor, attention_factor, mscale,
                                     mscale_all_dim)


@register("llama3")
def _llama3(*, head_dim, base, factor, original_max_position,
            low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
            **unused):
  """Llama-3.1 scaling (as transformers' `_compute_llama3_parameters`).

  Wavelengths above L/low_freq_factor are divided by S, those below
  L/high_freq_factor are kept, and the band between interpolates smoothly.
  """
  del unused
  length = _need_original("llama3", original_max_position)
  if high_freq_factor <= low_freq_factor:
    raise ValueError("llama3 needs high_freq_factor > low_freq_factor, got "
                     f"{high_freq_factor} <= {low_freq_factor}")
  theta = default_inv_freq(head_dim, base)
  wavelen = 2 * math.pi / theta
  low_wavelen = length / low_freq_factor
  high_wavelen = length / high_freq_factor
  scaled = np.where(wavelen > low_wavelen, theta / factor, theta)
  smooth = (length / wavelen - low_freq_factor) / (
      high_freq_factor - low_freq_factor)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
  return np.where(medium, smoothed, scaled), 1.0


def _mrope(name: str, exponent_fn, *, head_dim, base, factor,
           original_max_position, beta_fast, beta_slow,
           attention_factor, boundary):
  length = _need_original(name, original_max_position)
  lo, hi = band_boundaries(head_dim=head_dim, base=base,
                           original_max_position=length, beta_fast=beta_fast,
                           beta_slow=beta_slow, boundary=boundary)
  idx = np.arange(head_dim // 2)
  n = hi - lo
  if n <= 0:  # degenerate band: a step from extrapolation to interpolation
    expo = (idx >= hi).astype(np.float64)
  else:
    t = np.clip(idx - lo, 0, n).astype(np.float64)
    expo = exponent_fn(t, n)
  scale = factor ** expo
  attn = (float(attention_factor) if attention_factor is not None
          else yarn_mscale(factor))
  return default_inv_freq(head_dim, base) / scale, attn


@register("mrope_uni")
def _mrope_uni(*, head_dim, base, factor, original_max_position, beta_fast,
               beta_slow, attention_factor: float | None = None,
               boundary: str = "yarn_floor_ceil", **unused):
  """MrRoPE-Uni: s_i = S^(t/n), t = clip(i - d_l, 0, n), n = d_h - d_l.

  Uniform radix factors lambda_d = S^(1/n) inside [d_l, d_h) (spec D.3);
  attention scale 0.1 ln S + 1 (spec D.4).
  """
  del unused
  return _mrope("mrope_uni", lambda t, n: t / n, head_dim=head_dim, base=base,
                factor=factor, original_max_position=original_max_position,
                beta_fast=beta_fast, beta_slow=beta_slow,
                attention_factor=attention_factor, boundary=boundary)


@register("mrope_pro")
def _mrope_pro(*, head_dim, base, factor, original_max_position, beta_fast,
               beta_slow, attention_factor: float | None = None,
               boundary: str = "yarn_floor_ceil", **unused):
  """MrRoPE-Pro: s_i = S^(t(t+1)/(n(n+1))) (spec D.3, progressive).

  lambda_d = S^eps_d with eps_d = 2(1 + d - d_l)/((1 + d_h - d_l)(d_h - d_l)),
  an increasing arithmetic progression summing to 1; attention scale
  0.1 ln S + 1 (spec D.4).
  """
  del unused
  return _mrope("mrope_pro", lambda t, n: t * (t + 1) / (n * (n + 1)),
                head_dim=head_dim, base=base, factor=factor,
                original_max_position=original_max_position,
                beta_fast=beta_fast, beta_slow=beta_slow,
                attention_factor=attention_factor, boundary=boundary)


_COMMON_ARGS = ("head_dim", "base", "factor", "original_max_position",
                "beta_fast", "beta_slow")


def _accepted_options(fn: ScalingFn) -> tuple[str, ...]:
  return tuple(p.name for p in inspect.signature(fn).parameters.values()
               if p.kind == p.KEYWORD_ONLY and p.name not in _COMMON_ARGS)


def _compute(method: str, *, head_dim: int, base: float, factor: float,
             original_max_position: int | None, beta_fast: float,
             beta_slow: float, options: dict[str, Any]
             ) -> tuple[np.ndarray, float]:
  """Validated float64 inv_freq and attention scale."""
  if method not in _SCALINGS:
    raise ValueError(
        f"unknown RoPE scaling method {method!r}; valid choices: "
        f"{', '.join(available())}")
  if factor is None or factor < 1.0:
    raise ValueError(
        f"RoPE scaling factor must be >= 1 (got {factor}); valid choices of "
        f"method: {', '.join(available())}")
  if head_dim % 2 or head_dim < 4:
    raise ValueError(f"RoPE needs an even head_dim >= 4, got {head_dim}")
  fn = _SCALINGS[method]
  if method != "default":
    accepted = _accepted_options(fn)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
      raise ValueError(
          f"RoPE scaling {method!r} got unknown option(s) {unknown}; valid "
          f"options: {', '.join(accepted) or 'none'}")
  inv, scale = fn(head_dim=head_dim, base=base, factor=float(factor),
                  original_max_position=original_max_position,
                  beta_fast=beta_fast, beta_slow=beta_slow, **options)
  inv = np.asarray(inv, dtype=np.float64)
  if inv.shape != (head_dim // 2,):
    raise ValueError(f"{method}: inv_freq has shape {inv.shape}, expected "
                     f"({head_dim // 2},)")
  return inv, float(scale)


def inv_freq(method: str, *, head_dim: int, base: float, factor: float = 1.0,
             original_max_position: int | None = None,
             beta_fast: float = 32.0, beta_slow: float = 1.0,
             **options: Any) -> tuple[np.ndarray, float]:
  """Inverse frequencies `[head_dim // 2]` and attention scale of a method.

  Args:
    method: a registered scaling name (see `available()`).
    head_dim: rotary dimension d.
    base: RoPE base b (`rope_theta`).
    factor: context-extension factor S >= 1.
    original_max_position: pre-training context length L (needed by every
      method whose bands depend on L: dynamic_ntk, yarn, yarn_rotation,
      llama3, mrope_uni, mrope_pro).
    beta_fast, beta_slow: YaRN/MrRoPE boundaries in rotations.
    **options: method-specific options: yarn: attention_factor, mscale,
      mscale_all_dim, truncate; yarn_rotation: attention_factor, mscale,
      mscale_all_dim; llama3: low_freq_factor, high_freq_factor; mrope_*:
      attention_factor, boundary ("yarn_floor_ceil" | "turn_grid");
      dynamic_ntk: seq_len. Unknown options are an error.

  Returns:
    (inv_freq float32 numpy array, attention_scale float). The attention scale
    multiplies cos and sin (as transformers does), so q.k logits scale by its
    square.
  """
  inv, scale = _compute(method, head_dim=head_dim, base=base, factor=factor,
                        original_max_position=original_max_position,
                        beta_fast=beta_fast, beta_slow=beta_slow,
                        options=options)
  return inv.astype(np.float32), scale


# `rope_scaling` method names meaning plain RoPE.
_PLAIN = ("", "none", "default")


def normalize_scaling(scaling: Mapping[str, Any] | None
                      ) -> dict[str, Any] | None:
  """A `rope_scaling` mapping -> the canonical dict, or None for plain RoPE.

  Accepts what a config holds (`config.model.rope_scaling`, e.g.
  `{"method": "yarn", "factor": 4.0, "original_max_position": 64}`), an HF
  import, or None. None, an empty mapping and the methods "default" / "none"
  / "" mean plain RoPE (None). Entries set to None and an
  `original_max_position` <= 0 are "unset" and dropped, so a config can carry
  every key with a neutral value. A missing or unknown method is an error.
  """
  if scaling is None:
    return None
  if hasattr(scaling, "to_dict"):
    scaling = scaling.to_dict()
  out = {k: v for k, v in dict(scaling).items() if v is not None}
  if not out:
    return None
  if "method" not in out:
    raise ValueError(f"rope_scaling {out} needs a 'method' key; valid: "
                     f"{', '.join(available())}")
  method = out["method"]
  if method in _PLAIN:
    return None
  if method not in _SCALINGS:
    raise ValueError(f"unknown RoPE scaling method {method!r} "
                     f"(rope_scaling.method); valid choices: "
                     f"{', '.join(available())}")
  if out.get("original_max_position", 1) <= 0:
    del out["original_max_position"]
  return out


def scaling_tables(scaling: Mapping[str, Any] | None, *, head_dim: int,
                   base: float, seq_len: int | None = None
                   ) -> tuple[np.ndarray, float]:
  """(inv_freq `[head_dim // 2]`, attention scale) of a `rope_scaling`.

  `seq_len` (a static Python int, the current sequence length) reaches only
  length-dependent methods (dynamic NTK); the others ignore it.
  """
  options = normalize_scaling(scaling) or {"method": "default"}
  method = options.pop("method")
  if seq_len is not None and uses_seq_len(method):
    options["seq_len"] = int(seq_len)
  return inv_freq(method, head_dim=head_dim, base=base, **options)


def extension_scaling(method: str, *, train_len: int, eval_len: int,
                      options: Mapping[str, Any] | None = None
                      ) -> dict[str, Any] | None:
  """`rope_scaling` for training at `train_len` and running at `eval_len`.

  Static methods get `factor` S = eval_len / train_len (at least 1) and
  `original_max_position=train_len`; length-dependent ones (dynamic NTK)
  get factor 1, for which their base grows exactly with the current length
  (S_eff = L'/L). Plain RoPE is None. `options` adds or overrides keys
  (e.g. {"beta_fast": 16}).
  """
  if method in _PLAIN:
    return None
  factor = 1.0 if uses_seq_len(method) else max(1.0, eval_len / train_len)
  cfg: dict[str, Any] = {"method": method, "factor": factor,
                         "original_max_position": train_len}
  cfg.update(options or {})
  return cfg


def cumulative_scale(method: str, *, head_dim: int, base: float,
                     factor: float = 1.0,
                     original_max_position: int | None = None,
                     beta_fast: float = 32.0, beta_slow: float = 1.0,
                     **options: Any) -> np.ndarray:
  """s_i = theta_i / theta'_i `[head_dim // 2]` (float64; MrRoPE eq. 15).

  1 means the pair extrapolates unchanged, S that it is fully interpolated.
  """
  inv, _ = _compute(method, head_dim=head_dim, base=base, factor=factor,
                    original_max_position=original_max_position,
                    beta_fast=beta_fast, beta_slow=beta_slow, options=options)
  return default_inv_freq(head_dim, base) / inv


def step_ratio(method: str, **kwargs: Any) -> np.ndarray:
  """Per-step radix factor lambda_i = s_{i+1} / s_i `[head_dim // 2 - 1]`.

  Progressive methods (MrRoPE-Pro) have increasing lambda across the middle
  band, regressive ones (rotation-count YaRN) decreasing; takes the same
  arguments as `cumulative_scale`.
  """
  s = cumulative_scale(method, **kwargs)
  return s[1:] / s[:-1]


def rope_bound(m: np.ndarray, inv_freq_h: np.ndarray) -> np.ndarray:
  """B(m) = sum_j cos(m theta'_j) (Men et al. 2024; MrRoPE spec D.6).

  Args:
    m: relative distances, any shape.
    inv_freq_h: frequencies theta' `[head_dim // 2]`.

  Returns:
    B with the shape of `m` (float64).
  """
  m = np.asarray(m, np.float64)
  theta = np.asarray(inv_freq_h, np.float64)
  return np.cos(m[..., None] * theta).sum(-1)


def rope_bound_first_root(inv_freq_h: np.ndarray, max_distance: int = 1 << 20,
                          chunk: int = 1 << 15) -> int | None:
  """Smallest integer m >= 0 with B(m) < 0, or None up to `max_distance`.

  The naive root of spec D.6: a diagnostic only (the paper's exact definition
  is not known, see the warning there).
  """
  for start in range(0, max_distance + 1, chunk):
    m = np.arange(start, min(start + chunk, max_distance + 1))
    neg = np.nonzero(rope_bound(m, inv_freq_h) < 0)[0]
    if neg.size:
      return int(m[neg[0]])
  return None


def biased_position_estimate(m: np.ndarray, head_dim: int,
                             base: float) -> np.ndarray:
  """m_hat = sum_j b^(j/D_r) ((m theta_j) mod 2 pi), 0-based j (spec D.6).

  The mixed-radix reading of RoPE angles as digits; linear in m over a range
  that grows with the base (MrRoPE Fig. 2).
  """
  theta = default_inv_freq(head_dim, base)
  m = np.asarray(m, np.float64)
  return (np.mod(m[..., None] * theta, 2 * math.pi) / theta).sum(-1)


def rotate_half(x: jax.Array) -> jax.Array:
  x1, x2 = jnp.split(x, 2, axis=-1)
  return jnp.concatenate([-x2, x1], axis=-1)


def cos_sin(positions_bt: jax.Array, inv_freq_h: jax.Array,
            attention_scale: float = 1.0,
            pair_weights_h: jax.Array | None = None, *,
            dtype=jnp.float32) -> tuple[jax.Array, jax.Array]:
  """cos/sin tables `[B, T, head_dim]` in `dtype` for integer positions.

  `pair_weights_h` (optional, `[head_dim // 2]`) scales each rotary pair's
  rotation angle; it is the hook for attenuating selected frequencies.
  `dtype` is float32 for every float32/bf16 model (the decoder passes
  float64 only for a float64 model).
  """
  inv = jnp.asarray(inv_freq_h, dtype)
  if pair_weights_h is not None:
    inv = inv * jnp.asarray(pair_weights_h, dtype)
  angles_bth = positions_bt.astype(dtype)[..., None] * inv
  angles_btd = jnp.concatenate([angles_bth, angles_bth], axis=-1)
  return (jnp.cos(angles_btd) * attention_scale,
          jnp.sin(angles_btd) * attention_scale)


def apply_rope(x_btnh: jax.Array, cos_btd: jax.Array,
               sin_btd: jax.Array) -> jax.Array:
  """Rotates `x [B, T, N, H]` by precomputed cos/sin `[B, T, R]`.

  R = H rotates every dim. R < H is partial rotary (GPT-NeoX / Phi's
  `partial_rotary_factor`): the first R dims of each head are rotated
  (rotate-half within them), the remaining H - R pass through unchanged.
  """
  dtype = x_btnh.dtype
  rot = cos_btd.shape[-1]
  if rot < x_btnh.shape[-1]:
    x_rot, x_pass = x_btnh[..., :rot], x_btnh[..., rot:]
    return jnp.concatenate(
        [apply_rope(x_rot, cos_btd, sin_btd), x_pass], axis=-1)
  x = x_btnh.astype(dtypes.at_least_float32(x_btnh.dtype))
  cos = cos_btd[:, :, None, :]
  sin = sin_btd[:, :, None, :]
  return (x * cos + rotate_half(x) * sin).astype(dtype)
