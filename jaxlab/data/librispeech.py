"""Speech utterances with transcripts: LibriSpeech (TFDS, Hub, raw) and WAVs.

    utts = librispeech.read_utterances(config.data, split="test_clean")
    utts[0]  # {"id", "speaker_id", "chapter_id", "text", "wave" float32}

Sources (`config.data.source`):

  tfds    the TFDS `librispeech` builder's rows (catalog: features
          `speech` Audio int16 at 16 kHz, `text`, `speaker_id`,
          `chapter_id`, `id`; splits `train_clean100`, `test_clean`, ...),
          read through `pipeline.read_split` (`data.tfds_name`,
          `data.data_dir`).
  hf      a Hub copy (`openslr/librispeech_asr` layout: `audio` {array or
  grain   bytes, sampling_rate}, `text`, `speaker_id`, `chapter_id`, `id`),
          through `pipeline.read_split`.
  audio   a directory (`data.path`, its `data.split` subdirectory when there
          is one): LibriSpeech as released (`<speaker>/<chapter>/
          <speaker>-<chapter>-<utt>.flac` with `<speaker>-<chapter>.trans.txt`
          lines "<utt id> <TRANSCRIPT>"; the layout of the corpus'
          README.TXT), or any directory of .wav / .flac files, each with an
          optional `<stem>.txt` transcript.

Waves are float32 mono in [-1, 1] at 16 kHz (`jaxlab.data.audio.read_wav`
reads FLAC and WAV through soundfile; other rates are resampled).
`char_labels` turns transcripts into CTC label ids (`CHARS`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxlab.data import audio

SOURCES = ("tfds", "hf", "grain", "audio")
AUDIO_EXTS = (".flac", ".wav")
# CTC classes: 0 is the blank, then space, apostrophe and a-z (LibriSpeech
# transcripts are upper-case letters, spaces and apostrophes).
CHARS = " 'abcdefghijklmnopqrstuvwxyz"


def char_labels(texts: Sequence[str], max_len: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
  """(labels `[N, L]` int32 in 1..len(CHARS), mask `[N, L]`) of transcripts
  (lower-cased; characters outside `CHARS` dropped; cut at `max_len`)."""
  ids = [[CHARS.index(c) + 1 for c in t.lower() if c in CHARS]
         for t in texts]
  if max_len is not None:
    ids = [x[:max_len] for x in ids]
  width = max([len(x) for x in ids] + [1])
  labels = np.zeros((len(ids), width), np.int32)
  mask = np.zeros((len(ids), width), bool)
  for i, x in enumerate(ids):
    labels[i, :len(x)] = x
    mask[i, :len(x)] = True
  return labels, mask


def labels_to_text(ids: Sequence[int]) -> str:
  """Inverse of `char_labels` for one sequence (blank and unknown ids
  dropped)."""
  return "".join(CHARS[i - 1] for i in ids if 1 <= i <= len(CHARS))


def _wave_of(value: Any, rate: int | None = None) -> np.ndarray:
  """A row's audio (TFDS int16 array, an HF Audio dict) as float32 16 kHz."""
  if isinstance(value, dict):  # HF Audio: {"array", "sampling_rate"} or bytes
    if value.get("array") is not None:
      wave = np.asarray(value["array"], np.float32)
      rate = int(value.get("sampling_rate") or audio.SAMPLE_RATE)
    elif value.get("bytes"):
      soundfile = __import__("soundfile")
      data, rate = soundfile.read(io.BytesIO(value["bytes"]), dtype="float32",
                                  always_2d=True)
      wave = data.mean(axis=1)
    elif value.get("path"):
      return audio.read_wav(value["path"], resample=True)
    else:
      raise ValueError("librispeech: an audio value without array, bytes or "
                       "path")
  else:
    wave = np.asarray(value)
    if wave.dtype == np.int16:  # TFDS Audio(dtype=int16)
      wave = wave.astype(np.float32) / 32768.0
    wave = wave.astype(np.float32).reshape(-1) if wave.ndim < 2 else (
        wave.astype(np.float32).mean(axis=-1))
  rate = rate or audio.SAMPLE_RATE
  if rate != audio.SAMPLE_RATE:
    wave = audio.resample_wave(wave, rate, audio.SAMPLE_RATE)
  return np.asarray(wave, np.float32)


def _str(x: Any) -> str:
  if isinstance(x, bytes):
    return x.decode("utf-8")
  if isinstance(x, np.ndarray) and x.dtype.kind in "SO":
    x = x.item()
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)
  return str(x)


def utterance_of_row(row: dict[str, Any]) -> dict[str, Any]:
  """One TFDS (`speech`) or Hub (`audio`) LibriSpeech row as an utterance."""
  key = "speech" if "speech" in row else "audio" if "audio" in row else None
  if key is None:
    raise ValueError(f"librispeech: a row has no 'speech' (TFDS) or 'audio' "
                     f"(Hub) column; its columns: {sorted(row)}")
  if "text" not in row:
    raise ValueError(f"librispeech: a row has no 'text' column; its columns:"
                     f" {sorted(row)}")
  return {"id": _str(row.get("id", "")),
          "speaker_id": int(np.asarray(row.get("speaker_id", -1))),
          "chapter_id": int(np.asarray(row.get("chapter_id", -1))),
          "text": _str(row["text"]), "wave": _wave_of(row[key])}


def _audio_files(root: str) -> list[str]:
  out = []
  for d, dirs, files in os.walk(root):
    dirs.sort()
    out += [os.path.join(d, f) for f in sorted(files)
            if f.lower().endswith(AUDIO_EXTS)]
  return out


def read_librispeech_dir(root: str, *, max_rows: int = 0
                         ) -> list[dict[str, Any]]:
  """Utterances of a LibriSpeech split directory as released (module doc),
  in (speaker, chapter, utterance) order; `max_rows` > 0 reads that many."""
  trans = []
  for d, dirs, files in os.walk(root):
    dirs.sort()
    trans += [os.path.join(d, f) for f in sorted(files)
              if f.endswith(".trans.txt")]
  if not trans:
    raise FileNotFoundError(f"{root}: no <speaker>-<chapter>.trans.txt "
                            f"transcripts (not a LibriSpeech split dir)")
  out = []
  for path in trans:
    d = os.path.dirname(path)
    with open(path, encoding="utf-8") as f:
      for line in f:
        line = line.strip()
        if not line:
          continue
        uid, _, text = line.partition(" ")
        audio_path = next((os.path.join(d, uid + e) for e in AUDIO_EXTS
                           if os.path.exists(os.path.join(d, uid + e))), None)
        if audio_path is None:
          raise FileNotFoundError(f"{path}: utterance {uid!r} has no "
                                  f"{uid}.flac (or .wav) beside it")
        parts = uid.split("-")
        if len(parts) != 3:
          raise ValueError(f"{path}: utterance id {uid!r} is not "
                           f"<speaker>-<chapter>-<utt>")
        out.append({"id": uid, "speaker_id": int(parts[0]),
                    "chapter_id": int(parts[1]), "text": text,
                    "wave": audio.read_wav(audio_path, resample=True)})
        if max_rows and len(out) >= max_rows:
          return out
  return out


def read_wav_dir(root: str, *, max_rows: int = 0) -> list[dict[str, Any]]:
  """Utterances of a directory of .wav / .flac files (sorted paths), each
  with the text of `<stem>.txt` beside it ('' without one)."""
  paths = _audio_files(root)
  if not paths:
    raise FileNotFoundError(f"{root}: no .wav or .flac files")
  out = []
  for p in paths[:max_rows or None]:
    stem = os.path.splitext(p)[0]
    text = ""
    if os.path.exists(stem + ".txt"):
      with open(stem + ".txt", encoding="utf-8") as f:
        text = f.read().strip()
    out.append({"id": os.path.relpath(stem, root), "speaker_id": -1,
                "chapter_id": -1, "text": text,
                "wave": audio.read_wav(p, resample=True)})
  return out


def read_audio_dir(root: str, *, max_rows: int = 0) -> list[dict[str, Any]]:
  """A LibriSpeech split dir when it holds `*.trans.txt`, else a WAV dir."""
  if not os.path.isdir(root):
    raise FileNotFoundError(f"data.path={root!r} is not a directory")
  for _, _, files in os.walk(root):
    if any(f.endswith(".trans.txt") for f in files):
      return read_librispeech_dir(root, max_rows=max_rows)
  return read_wav_dir(root, max_rows=max_rows)


def _undecoded(rows):
  """A `datasets.Dataset`'s Audio columns as stored ({bytes, path}): read
  here by soundfile, not by `datasets`' decoder (torchcodec)."""
  features = getattr(rows, "features", None)
  if not features:
    return rows
  import datasets  # pylint: disable=g-import-not-at-top
  for name, feature in features.items():
    if isinstance(feature, datasets.Audio) and feature.decode:
      rows = rows.cast_column(name, datasets.Audio(decode=False))
  return rows


def read_utterances(data_cfg, split: str | None = None, *,
                    max_rows: int | None = None) -> list[dict[str, Any]]:
  """The utterances of one split of `config.data` (module doc)."""
  get = data_cfg.get
  kind = get("source", "")
  split = get("split", "train") if split is None else split
  max_rows = int(get("max_rows", 0) or 0) if max_rows is None else max_rows
  if kind == "audio":
    root = get("path", "")
    if split and os.path.isdir(os.path.join(root, split)):
      root = os.path.join(root, split)
    return read_audio_dir(root, max_rows=max_rows)
  if kind in ("tfds", "hf", "grain"):
    from jaxlab.data import pipeline  # pylint: disable=g-import-not-at-top
    rows = _undecoded(pipeline.read_split(data_cfg, split, max_rows=max_rows))
    return [utterance_of_row(dict(rows[i])) for i in range(len(rows))]
  raise ValueError(f"data.source={kind!r} has no utterances; use one of "
                   f"{', '.join(SOURCES)}")


def read_noise_clips(root: str, *, max_rows: int = 0) -> list[np.ndarray]:
  """Noise clips (e.g. ESC-50's audio/ dir) for the `clip` perturbation."""
  return [u["wave"] for u in read_wav_dir(root, max_rows=max_rows)]


def normalize_transcript(text: str) -> str:
  """Lower-cased, only `CHARS`, single spaces: the text CTC labels spell."""
  return " ".join("".join(c for c in text.lower() if c in CHARS).split())


def tokenizer_data(train: Sequence[dict[str, Any]],
                   held: Sequence[dict[str, Any]], *, n_mels: int,
                   num_samples: int, hop: int = 160,
                   train_table: dict[str, tuple[float, float]] | None = None,
                   eval_settings: dict[str, float] | None = None,
                   noisy_copies: int = 1,
                   clips: Sequence[np.ndarray] | None = None,
                   seed: int = 0) -> dict[str, Any]:
  """StableToken's training and held-out arrays from real utterances.

  Whisper features (`audio.whisper_features`, `num_samples` per window) of
  each clean wave, of `noisy_copies` perturbed copies per training wave
  (one type drawn uniformly per copy from `train_table`: spec E.3) and of
  each held-out wave under each of `eval_settings` (spec E.6); character
  CTC labels of the transcripts, cut to the window's 25 Hz tokens; every
  utterance has at least one token's frames (4) valid. The
  layout is the miniature's (`data.synthetic.stabletoken_data.make_data`)
  plus the held-out `texts`.
  """
  rng = np.random.default_rng(seed)
  clips = list(clips or [])
  feats = lambda ws: audio.whisper_features(  # noqa: E731
      ws, n_mels=n_mels, num_samples=num_samples, hop=hop)
  max_tokens = num_samples // hop // 4

  def split(utts, noisy):
    waves = [u["wave"][:num_samples] for u in utts]
    clean, lengths = feats(waves)
    # A clip shorter than one 25 Hz token (4 frames, 40 ms) counts as one.
    lengths = np.maximum(lengths, min(4, num_samples // hop))
    labels, mask = char_labels([u["text"] for u in utts], max_tokens)
    return {"features": clean, "noisy": noisy(waves),
            "frame_lengths": lengths, "labels": labels, "label_mask": mask,
            "texts": [normalize_transcript(u["text"]) for u in utts]}

  def train_noisy(waves):
    table = dict(train_table or audio.TRAIN_PERTURBATIONS)
    return np.stack([feats([audio.random_perturbation(
        w, rng, table=table, clips=clips)[0] for w in waves])[0]
                     for _ in range(noisy_copies)], 1)

  def held_noisy(waves):
    settings = dict(eval_settings or audio.EVAL_PERTURBATIONS)
    if not clips:
      settings.pop("clip", None)
    return {k: feats([audio.perturb(w, k, v, rng, clips) for w in waves])[0]
            for k, v in settings.items()}

  return {"train": split(train, train_noisy), "held": split(held, held_noisy)}
