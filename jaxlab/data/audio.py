"""Audio front-end: WAV files, log-mel features in JAX, waveform perturbations.

    wave = audio.read_wav("utt.wav")                    # float32 mono, 16 kHz
    feats = audio.log_mel(wave[None])                   # [1, frames, n_mels]
    noisy = audio.perturb(wave, "pink", 22.0, rng)      # pink noise at 22 dB

Log-mel (`log_mel`): the power spectrogram of a centred STFT with a periodic
Hann window, Slaney-style mel filters (librosa's default `htk=False,
norm="slaney"`), then Whisper's log: log10(max(mel, 1e-10)), floored at
(max - 8) and mapped by (x + 4) / 4 (`whisper_norm`). Without the Whisper
step the features equal `log10(max(librosa.feature.melspectrogram(...),
1e-10))` (tests/data/audio_test.py checks 2e-3 absolute in log10 units,
float32). Frames are 1 + len // hop (25 ms windows, 10 ms hop by default:
100 frames per second at 16 kHz).

Perturbations (StableToken spec E.3, papers/A-G.md): white ("gaussian"),
pink (1/f power) and brown (1/f^2 power) noise mixed at a target SNR,
bit-crushing to a bit depth, and additive noise clips at an SNR. The
training ranges are `TRAIN_PERTURBATIONS` (one type drawn uniformly per
sample), the evaluation settings `EVAL_PERTURBATIONS`. Waveform noise is
host-side NumPy (a `np.random.Generator`), as the data pipelines are.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import _optional

SAMPLE_RATE = 16000

# Spec E.3 training ranges: type -> (low, high) of SNR in dB or bit depth.
TRAIN_PERTURBATIONS: dict[str, tuple[float, float]] = {
    "gaussian": (16.0, 30.0), "pink": (16.0, 24.0), "brown": (12.0, 24.0),
    "bitcrush": (8.0, 14.0), "clip": (12.0, 24.0)}
# Spec E.6 evaluation settings (the real-noise sets become `clip`).
EVAL_PERTURBATIONS: dict[str, float] = {
    "gaussian": 25.0, "pink": 22.0, "brown": 16.0, "bitcrush": 10.0,
    "clip": 16.0}
PERTURBATIONS = ("gaussian", "pink", "brown", "bitcrush", "clip")


# ---------------------------------------------------------------------------
# WAV files
# ---------------------------------------------------------------------------


def read_wav(path: str, *, sample_rate: int = SAMPLE_RATE,
             resample: bool = False) -> np.ndarray:
  """A sound file as float32 mono in [-1, 1] at `sample_rate`.

  Channels are averaged. A file at another rate is an error naming both
  rates, unless `resample=True` (polyphase resampling, scipy).
  """
  soundfile = _optional.require("soundfile", "audio")
  try:
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
  except RuntimeError as e:  # soundfile's LibsndfileError
    raise ValueError(f"read_wav: cannot read {path!r} as audio: {e}") from e
  wave = data.mean(axis=1)
  if rate != sample_rate:
    if not resample:
      raise ValueError(
          f"read_wav: {path!r} is sampled at {rate} Hz but {sample_rate} Hz "
          f"is expected; pass resample=True to resample it, or convert the "
          f"file (e.g. sox in.wav -r {sample_rate} out.wav)")
    wave = resample_wave(wave, rate, sample_rate)
  return wave.astype(np.float32)


def write_wav(path: str, wave: np.ndarray, *,
              sample_rate: int = SAMPLE_RATE) -> None:
  """Writes float mono `wave` as 16-bit PCM WAV."""
  soundfile = _optional.require("soundfile", "audio")
  soundfile.write(path, np.asarray(wave, np.float32), sample_rate,
                  subtype="PCM_16")


def resample_wave(wave: np.ndarray, rate_in: int, rate_out: int
                  ) -> np.ndarray:
  """Polyphase resampling (scipy.signal.resample_poly) between two rates."""
  from scipy import signal  # pylint: disable=g-import-not-at-top
  g = math.gcd(int(rate_in), int(rate_out))
  return signal.resample_poly(np.asarray(wave, np.float64),
                              rate_out // g, rate_in // g).astype(np.float32)


# ---------------------------------------------------------------------------
# Log-mel features (JAX)
# ---------------------------------------------------------------------------


def hz_to_mel(hz):
  """Slaney mel scale (librosa `htk=False`): linear < 1 kHz, log above."""
  hz = np.asarray(hz, np.float64)
  f_sp, min_log_hz = 200.0 / 3, 1000.0
  min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
  lin = hz / f_sp
  return np.where(hz >= min_log_hz,
                  min_log_mel + np.log(np.maximum(hz, 1e-10) / min_log_hz)
                  / logstep, lin)


def mel_to_hz(mel):
  """Inverse of `hz_to_mel`."""
  mel = np.asarray(mel, np.float64)
  f_sp, min_log_hz = 200.0 / 3, 1000.0
  min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
  return np.where(mel >= min_log_mel,
                  min_log_hz * np.exp(logstep * (mel - min_log_mel)),
                  f_sp * mel)


def mel_filterbank(*, sample_rate: int = SAMPLE_RATE, n_fft: int = 400,
                   n_mels: int = 80, fmin: float = 0.0,
                   fmax: float | None = None) -> np.ndarray:
  """`[n_mels, n_fft // 2 + 1]` triangular Slaney filters, area-normalised.

  Same construction as `librosa.filters.mel(htk=False, norm="slaney")`.
  """
  fmax = sample_rate / 2 if fmax is None else fmax
  fft_hz = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
  mel_hz = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax),
                                 n_mels + 2))
  fdiff = np.diff(mel_hz)
  ramps = mel_hz[:, None] - fft_hz[None, :]
  lower = -ramps[:-2] / fdiff[:-1, None]
  upper = ramps[2:] / fdiff[1:, None]
  weights = np.maximum(0.0, np.minimum(lower, upper))
  weights *= (2.0 / (mel_hz[2:] - mel_hz[:-2]))[:, None]
  return weights.astype(np.float32)


def num_frames(num_samples, hop: int = 160):
  """Frames of a centred STFT: 1 + num_samples // hop."""
  return 1 + np.asarray(num_samples) // hop


def mel_power(wave: jax.Array, *, sample_rate: int = SAMPLE_RATE,
              n_fft: int = 400, hop: int = 160, n_mels: int = 80,
              fmin: float = 0.0, fmax: float | None = None,
              pad_mode: str = "constant") -> jax.Array:
  """Mel power spectrogram `[..., frames, n_mels]` of `wave [..., samples]`.

  Centred frames (n_fft // 2 padding each side, zeros as librosa's default
  or "reflect" as Whisper), periodic Hann window, |rfft|^2, mel filters.
  """
  if pad_mode not in ("constant", "reflect"):
    raise ValueError(f"pad_mode must be 'constant' or 'reflect', got "
                     f"{pad_mode!r}")
  wave = jnp.asarray(wave, jnp.float32)
  n = wave.shape[-1]
  pad = [(0, 0)] * (wave.ndim - 1) + [(n_fft // 2, n_fft // 2)]
  padded = jnp.pad(wave, pad, mode=pad_mode)
  frames = 1 + n // hop
  idx = (np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :])
  window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
  spec = jnp.fft.rfft(padded[..., idx] * window.astype(np.float32), axis=-1)
  power = jnp.real(spec) ** 2 + jnp.imag(spec) ** 2
  fb = mel_filterbank(sample_rate=sample_rate, n_fft=n_fft, n_mels=n_mels,
                      fmin=fmin, fmax=fmax)
  return jnp.einsum("...fk,mk->...fm", power, fb,
                    precision=jax.lax.Precision.HIGHEST)


@functools.partial(jax.jit, static_argnames=(
    "sample_rate", "n_fft", "hop", "n_mels", "fmin", "fmax", "pad_mode",
    "whisper_norm", "floor"))
def log_mel(wave: jax.Array, *, sample_rate: int = SAMPLE_RATE,
            n_fft: int = 400, hop: int = 160, n_mels: int = 80,
            fmin: float = 0.0, fmax: float | None = None,
            pad_mode: str = "constant", whisper_norm: bool = True,
            floor: float = 1e-10) -> jax.Array:
  """log10 mel features `[..., frames, n_mels]` (Whisper-normalised).

  `whisper_norm`: clamp at (per-utterance max - 8) and map (x + 4) / 4, as
  Whisper's `log_mel_spectrogram`. Without it: log10(max(mel, floor)).
  """
  mel = mel_power(wave, sample_rate=sample_rate, n_fft=n_fft, hop=hop,
                  n_mels=n_mels, fmin=fmin, fmax=fmax, pad_mode=pad_mode)
  logm = jnp.log10(jnp.maximum(mel, floor))
  if whisper_norm:
    top = jnp.max(logm, axis=(-2, -1), keepdims=True)
    logm = (jnp.maximum(logm, top - 8.0) + 4.0) / 4.0
  return logm


def whisper_normalize(logm: jax.Array) -> jax.Array:
  """Whisper's log-mel normalisation: clamp at (per-utterance max - 8),
  then (x + 4) / 4 (`logm [..., frames, n_mels]` in log10 units)."""
  top = jnp.max(logm, axis=(-2, -1), keepdims=True)
  return (jnp.maximum(logm, top - 8.0) + 4.0) / 4.0


@functools.partial(jax.jit, static_argnames=("n_mels", "n_fft", "hop"))
def _whisper_log_mel(waves, *, n_mels: int, n_fft: int, hop: int):
  logm = log_mel(waves, n_fft=n_fft, hop=hop, n_mels=n_mels,
                 pad_mode="reflect", whisper_norm=False)
  return whisper_normalize(logm[..., :-1, :])


def whisper_features(waves: Sequence[np.ndarray], *, n_mels: int = 80,
                     num_samples: int = 30 * SAMPLE_RATE, n_fft: int = 400,
                     hop: int = 160) -> tuple[np.ndarray, np.ndarray]:
  """Log-mel features as `WhisperFeatureExtractor` computes them.

  Each 16 kHz wave is cut or zero-padded to `num_samples` (the extractor's
  `n_samples = chunk_length * sampling_rate`, 30 s), framed centred with
  reflect padding, periodic Hann, |rfft|^2, Slaney mel filters to 8 kHz,
  log10(max(mel, 1e-10)); the last frame is dropped (num_samples / hop
  frames remain) and `whisper_normalize` applied per utterance.

  Returns:
    (features `[B, num_samples / hop, n_mels]` float32 (transpose the last
    two axes for transformers' `input_features` layout), valid frames
    `[B]`: ceil(min(len, num_samples) / hop), at least 1).
  """
  if num_samples % hop:
    raise ValueError(f"whisper_features: num_samples={num_samples} must be "
                     f"a multiple of hop={hop}")
  batch = np.zeros((len(waves), num_samples), np.float32)
  lengths = np.zeros((len(waves),), np.int32)
  for i, w in enumerate(waves):
    w = np.asarray(w, np.float32).reshape(-1)[:num_samples]
    batch[i, :w.size] = w
    lengths[i] = min(max(1, -(-w.size // hop)), num_samples // hop)
  feats = _whisper_log_mel(jnp.asarray(batch), n_mels=n_mels, n_fft=n_fft,
                           hop=hop)
  return np.asarray(feats), lengths


# ---------------------------------------------------------------------------
# Perturbations (NumPy, host side)
# ---------------------------------------------------------------------------


def power(x: np.ndarray) -> float:
  return float(np.mean(np.square(np.asarray(x, np.float64))))


def snr_db(clean: np.ndarray, noisy: np.ndarray) -> float:
  """10 log10(P_clean / P_(noisy - clean)): the SNR a mixture achieved."""
  return 10.0 * math.log10(power(clean) / max(power(
      np.asarray(noisy, np.float64) - clean), 1e-30))


def colored_noise(rng: np.random.Generator, n: int, exponent: float
                  ) -> np.ndarray:
  """Unit-RMS noise with power spectrum ~ 1/f^exponent (0 white, 1 pink,
  2 brown); the DC bin is removed."""
  white = rng.standard_normal(n)
  if exponent == 0:
    return (white / np.sqrt(power(white))).astype(np.float32)
  spec = np.fft.rfft(white)
  f = np.fft.rfftfreq(n)
  scale = np.zeros_like(f)
  scale[1:] = f[1:] ** (-exponent / 2.0)
  x = np.fft.irfft(spec * scale, n)
  return (x / np.sqrt(max(power(x), 1e-30))).astype(np.float32)


def white_noise(rng: np.random.Generator, n: int) -> np.ndarray:
  return colored_noise(rng, n, 0.0)


def pink_noise(rng: np.random.Generator, n: int) -> np.ndarray:
  return colored_noise(rng, n, 1.0)


def brown_noise(rng: np.random.Generator, n: int) -> np.ndarray:
  return colored_noise(rng, n, 2.0)


def mix_at_snr(clean: np.ndarray, noise: np.ndarray, snr: float
               ) -> np.ndarray:
  """clean + g * noise with g such that 10 log10(P_clean / P_gnoise) = snr."""
  clean = np.asarray(clean, np.float64)
  noise = np.asarray(noise, np.float64)[:clean.shape[-1]]
  if noise.shape != clean.shape:
    raise ValueError(f"mix_at_snr: noise has {noise.shape[-1]} samples, the "
                     f"clean wave {clean.shape[-1]}")
  pn = power(noise)
  if pn == 0:
    raise ValueError("mix_at_snr: the noise is silent (zero power)")
  gain = math.sqrt(power(clean) / (10.0 ** (snr / 10.0)) / pn)
  return (clean + gain * noise).astype(np.float32)


def bit_crush(wave: np.ndarray, depth: int) -> np.ndarray:
  """Quantize [-1, 1] audio to signed `depth`-bit PCM levels and back."""
  depth = int(round(depth))
  if not 1 <= depth <= 32:
    raise ValueError(f"bit_crush: depth must be in [1, 32], got {depth}")
  levels = 2.0 ** (depth - 1)
  q = np.clip(np.round(np.asarray(wave, np.float64) * levels), -levels,
              levels - 1)
  return (q / levels).astype(np.float32)


def add_clip(wave: np.ndarray, clip: np.ndarray, snr: float,
             rng: np.random.Generator) -> np.ndarray:
  """Mixes a noise clip (random start, tiled to the length) at `snr` dB."""
  clip = np.asarray(clip, np.float32)
  if clip.size == 0:
    raise ValueError("add_clip: empty noise clip")
  n = wave.shape[-1]
  start = int(rng.integers(clip.size))
  reps = -(-(start + n) // clip.size)
  return mix_at_snr(wave, np.tile(clip, reps)[start:start + n], snr)


def perturb(wave: np.ndarray, kind: str, value: float,
            rng: np.random.Generator,
            clips: Sequence[np.ndarray] | None = None) -> np.ndarray:
  """One perturbation: `kind` in PERTURBATIONS at SNR (dB) / depth `value`."""
  n = wave.shape[-1]
  if kind == "gaussian":
    return mix_at_snr(wave, white_noise(rng, n), value)
  if kind == "pink":
    return mix_at_snr(wave, pink_noise(rng, n), value)
  if kind == "brown":
    return mix_at_snr(wave, brown_noise(rng, n), value)
  if kind == "bitcrush":
    return bit_crush(wave, int(value))
  if kind == "clip":
    if not clips:
      raise ValueError("perturb: kind='clip' needs a list of noise clips")
    return add_clip(wave, clips[int(rng.integers(len(clips)))], value, rng)
  raise ValueError(f"perturb: unknown kind {kind!r}; valid: "
                   f"{', '.join(PERTURBATIONS)}")


def random_perturbation(
    wave: np.ndarray, rng: np.random.Generator, *,
    table: Mapping[str, tuple[float, float]] | None = None,
    clips: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, str,
                                                        float]:
  """A(w) of spec E.3: one type drawn uniformly, its value uniform in range.

  Bit depths are drawn as integers. `clip` is skipped when no clips are
  given. Returns (perturbed wave, kind, value).
  """
  table = dict(TRAIN_PERTURBATIONS if table is None else table)
  if not clips:
    table.pop("clip", None)
  kinds = sorted(table)
  kind = kinds[int(rng.integers(len(kinds)))]
  lo, hi = table[kind]
  if kind == "bitcrush":
    value = float(rng.integers(int(lo), int(hi) + 1))
  else:
    value = float(rng.uniform(lo, hi))
  return perturb(wave, kind, value, rng, clips), kind, value
