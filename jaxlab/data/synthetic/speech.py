"""Synthetic speech rendered as 16 kHz waveforms (StableToken miniature).

An utterance is a phone sequence y (no phone repeated twice in a row), each
phone lasting a whole number of 40 ms token frames (the tokenizer's 25 Hz
rate). A phone class is a formant pattern (F1, F2, F3 with bandwidths) on a
harmonic source (voiced) or a band of noise (fricative-like); a speaker
changes the pitch f0, scales the formants (vocal-tract length), tilts the
spectrum and adds breathiness. Formant tracks are smoothed across phone
boundaries (coarticulation). So the whole pipeline runs from audio: render
-> perturb (jaxlab.data.audio) -> log-mel -> tokenizer.

The phone inventory depends on `SpeechConfig.inventory_seed` only, so every
split shares it; utterances and speakers come from the split's own seed.
Labels are 1..num_phones (0 is the CTC blank).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxlab.data import audio


@dataclasses.dataclass(frozen=True)
class SpeechConfig:
  """Synthetic speech settings (spec E miniature: 20 phones, 2-6 frames)."""
  num_phones: int = 16
  min_phones: int = 20
  max_phones: int = 20
  min_frames: int = 2          # per phone, in token frames
  max_frames: int = 6
  token_ms: float = 40.0       # one token frame (25 Hz)
  sample_rate: int = audio.SAMPLE_RATE
  inventory_seed: int = 1234
  fricative_fraction: float = 0.25
  f0_range: tuple[float, float] = (90.0, 240.0)
  formant_scale_range: tuple[float, float] = (0.85, 1.15)
  peak_range: tuple[float, float] = (0.3, 0.7)
  edge_frames: int = 1         # silence before and after, in token frames

  @property
  def token_samples(self) -> int:
    return int(round(self.sample_rate * self.token_ms / 1000.0))

  @property
  def max_samples(self) -> int:
    return (self.max_phones * self.max_frames + 2 * self.edge_frames
            ) * self.token_samples

  def validate(self) -> None:
    if self.num_phones < 2:
      raise ValueError(f"speech.num_phones must be >= 2, got "
                       f"{self.num_phones}")
    if not 1 <= self.min_phones <= self.max_phones:
      raise ValueError(f"speech: need 1 <= min_phones <= max_phones, got "
                       f"{self.min_phones}, {self.max_phones}")
    if not 1 <= self.min_frames <= self.max_frames:
      raise ValueError(f"speech: need 1 <= min_frames <= max_frames, got "
                       f"{self.min_frames}, {self.max_frames}")


@dataclasses.dataclass(frozen=True)
class PhoneInventory:
  formants: np.ndarray       # [K, 3] Hz
  bandwidths: np.ndarray     # [K, 3] Hz
  amplitudes: np.ndarray     # [K, 3]
  fricative: np.ndarray      # [K] bool
  noise_center: np.ndarray   # [K] Hz (fricatives)


def inventory(cfg: SpeechConfig) -> PhoneInventory:
  """Class-specific formant patterns, fixed by `cfg.inventory_seed`."""
  rng = np.random.default_rng(cfg.inventory_seed)
  k = cfg.num_phones
  f1 = rng.uniform(250, 900, k)
  f2 = rng.uniform(850, 2500, k)
  f3 = rng.uniform(2500, 3600, k)
  formants = np.stack([f1, np.maximum(f2, f1 + 250), f3], -1)
  bandwidths = np.stack([rng.uniform(60, 120, k), rng.uniform(80, 160, k),
                         rng.uniform(120, 240, k)], -1)
  amplitudes = np.stack([np.ones(k), rng.uniform(0.4, 0.9, k),
                         rng.uniform(0.15, 0.5, k)], -1)
  fricative = rng.uniform(size=k) < cfg.fricative_fraction
  noise_center = rng.uniform(2500, 6500, k)
  return PhoneInventory(formants, bandwidths, amplitudes, fricative,
                        noise_center)


def _smooth(x: np.ndarray, width: int) -> np.ndarray:
  """Moving average along axis 0 (edge-padded): coarticulation."""
  if width <= 1:
    return x
  pad = np.concatenate([np.repeat(x[:1], width // 2, 0), x,
                        np.repeat(x[-1:], width - 1 - width // 2, 0)])
  c = np.cumsum(pad, axis=0, dtype=np.float64)
  c = np.concatenate([np.zeros_like(c[:1]), c])
  return (c[width:] - c[:-width]) / width


def render(phones: np.ndarray, frames: np.ndarray, cfg: SpeechConfig,
           inv: PhoneInventory, rng: np.random.Generator) -> np.ndarray:
  """The waveform of one utterance (phone ids 1..K, durations in frames)."""
  sr, hop = cfg.sample_rate, cfg.token_samples
  ctrl = hop // 8                                  # 5 ms control rate
  f0 = rng.uniform(*cfg.f0_range)
  scale = rng.uniform(*cfg.formant_scale_range)
  tilt = rng.uniform(-0.6, 0.0)                    # dB per 100 Hz / 10
  breath = rng.uniform(0.0, 0.08)
  per_phone = frames * 8                           # control steps
  idx = np.repeat(phones - 1, per_phone)
  n_ctrl = idx.size
  fm = _smooth(inv.formants[idx] * scale, 5)       # [C, 3]
  bw = inv.bandwidths[idx] * scale
  amp = inv.amplitudes[idx]
  fric = _smooth(inv.fricative[idx].astype(np.float64)[:, None], 3)[:, 0]
  # Pitch: slow declination plus jitter, per control step.
  f0_track = f0 * (1.0 + 0.08 * np.linspace(0.5, -0.5, n_ctrl)
                   + 0.01 * rng.standard_normal(n_ctrl))
  n_harm = int(3800 // f0)
  h = np.arange(1, n_harm + 1)
  hz = f0_track[:, None] * h[None, :]              # [C, H]
  env = np.sum(amp[:, None, :] * np.exp(
      -0.5 * ((hz[:, :, None] - fm[:, None, :]) / bw[:, None, :]) ** 2), -1)
  env *= 10.0 ** (tilt * hz / 1000.0)
  env *= (1.0 - fric)[:, None]
  n = n_ctrl * ctrl
  t_ctrl = (np.arange(n_ctrl) + 0.5) * ctrl
  t = np.arange(n)
  f0_s = np.interp(t, t_ctrl, f0_track)
  phase = 2 * np.pi * np.cumsum(f0_s) / sr
  # Linear interpolation of the control-rate envelopes, then the harmonics
  # as powers of exp(i phase) (a running product: cheaper than H sines).
  pos = np.clip((t - t_ctrl[0]) / ctrl, 0, n_ctrl - 1)
  lo = np.minimum(pos.astype(np.int64), n_ctrl - 2 if n_ctrl > 1 else 0)
  frac = (pos - lo)[:, None].astype(np.float32)
  env = env.astype(np.float32)
  hi = np.minimum(lo + 1, n_ctrl - 1)
  env_s = env[lo] * (1 - frac) + env[hi] * frac
  base = np.exp(1j * phase).astype(np.complex64)
  harm = np.cumprod(np.broadcast_to(base[:, None], (n, n_harm)), axis=1)
  start = np.exp(1j * rng.uniform(0, 2 * np.pi, n_harm)).astype(np.complex64)
  voiced = np.sum(env_s * (harm * start).imag, -1).astype(np.float64)
  # Fricatives (and breathiness): noise shaped around each phone's centre.
  spec = np.fft.rfft(rng.standard_normal(n))
  freqs = np.fft.rfftfreq(n, 1.0 / sr)
  centre = float(np.mean(inv.noise_center[idx][fric > 0.5])) if np.any(
      fric > 0.5) else 4000.0
  noise = np.fft.irfft(spec * np.exp(-0.5 * ((freqs - centre) / 1200) ** 2),
                       n)
  noise /= np.sqrt(max(audio.power(noise), 1e-30))
  fric_s = np.interp(t, t_ctrl, fric)
  v_rms = np.sqrt(max(audio.power(voiced), 1e-30))
  wave = voiced + v_rms * (fric_s * 1.2 + breath) * noise
  edge = np.zeros(cfg.edge_frames * hop)
  wave = np.concatenate([edge, wave, edge])
  wave *= rng.uniform(*cfg.peak_range) / max(np.max(np.abs(wave)), 1e-9)
  return wave.astype(np.float32)


def sample_phones(cfg: SpeechConfig, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
  """A phone sequence (no immediate repeats) and per-phone frame counts."""
  length = int(rng.integers(cfg.min_phones, cfg.max_phones + 1))
  phones = [int(rng.integers(1, cfg.num_phones + 1))]
  while len(phones) < length:
    p = int(rng.integers(1, cfg.num_phones))
    phones.append(p if p < phones[-1] else p + 1)   # skip the previous one
  frames = rng.integers(cfg.min_frames, cfg.max_frames + 1, length)
  return np.asarray(phones, np.int32), frames.astype(np.int32)


def make_split(cfg: SpeechConfig, num: int, seed: int) -> dict[str, np.ndarray]:
  """`num` utterances, zero-padded to `cfg.max_samples`.

  Returns waves [N, S] float32, num_samples [N], labels [N, max_phones]
  int32 (0-padded), label_mask [N, max_phones] bool, frames [N, max_phones]
  (phone durations in token frames).
  """
  cfg.validate()
  inv = inventory(cfg)
  rng = np.random.default_rng(seed)
  waves = np.zeros((num, cfg.max_samples), np.float32)
  lengths = np.zeros(num, np.int32)
  labels = np.zeros((num, cfg.max_phones), np.int32)
  durs = np.zeros((num, cfg.max_phones), np.int32)
  for i in range(num):
    phones, frames = sample_phones(cfg, rng)
    w = render(phones, frames, cfg, inv, rng)
    waves[i, :w.size] = w
    lengths[i] = w.size
    labels[i, :phones.size] = phones
    durs[i, :phones.size] = frames
  return {"waves": waves, "num_samples": lengths, "labels": labels,
          "label_mask": labels > 0, "frames": durs}


def noise_clips(cfg: SpeechConfig, num: int, seed: int, *,
                seconds: float = 2.0) -> list[np.ndarray]:
  """Stand-ins for real noise recordings (the spec's ESC-50 clips).

  Kinds in turn: babble (three synthetic talkers), mains hum (50/60 Hz and
  harmonics), beeps (random tone bursts) and rain (noise bursts).
  """
  rng = np.random.default_rng(seed)
  inv = inventory(cfg)
  sr = cfg.sample_rate
  n = int(seconds * sr)
  t = np.arange(n) / sr
  out = []
  for i in range(num):
    kind = i % 4
    if kind == 0:
      x = np.zeros(n)
      for _ in range(3):
        p, f = sample_phones(dataclasses.replace(
            cfg, min_phones=24, max_phones=24), rng)
        w = render(p, f, cfg, inv, rng)
        w = np.resize(w, n)
        x += w / np.sqrt(max(audio.power(w), 1e-30))
    elif kind == 1:
      base = rng.choice([50.0, 60.0])
      x = sum(rng.uniform(0.2, 1.0) / k * np.sin(2 * np.pi * base * k * t
                                                 + rng.uniform(0, 6.3))
              for k in range(1, 8))
      x = x + 0.05 * rng.standard_normal(n)
    elif kind == 2:
      x = np.zeros(n)
      for _ in range(int(rng.integers(4, 10))):
        s = int(rng.integers(0, n - sr // 10))
        d = int(rng.integers(sr // 50, sr // 10))
        x[s:s + d] += np.sin(2 * np.pi * rng.uniform(400, 3000)
                             * t[:d]) * np.hanning(d)
      x += 0.01 * rng.standard_normal(n)
    else:
      env = np.repeat(rng.uniform(0.1, 1.0, n // 160 + 1) ** 3, 160)[:n]
      x = rng.standard_normal(n) * env
    x = np.asarray(x, np.float64)
    out.append((x / np.sqrt(max(audio.power(x), 1e-30))).astype(np.float32))
  return out
