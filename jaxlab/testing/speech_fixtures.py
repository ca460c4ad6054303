"""Speech test fixtures: a tiny random Whisper checkpoint, LibriSpeech as
TFDS mock data and as released directories. Nothing downloads.

    speech_fixtures.make_whisper_checkpoint(dir)           # transformers, CPU
    with speech_fixtures.mock_librispeech(num_examples=6): # TFDS rows
      ...  # tfds.data_source("librispeech", ...) gives random rows
    speech_fixtures.write_librispeech_dir(root, utts)      # FLAC + trans.txt
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Sequence
from typing import Any

import numpy as np


def tiny_whisper_config(**kw):
  """A transformers `WhisperConfig` of a few thousand params (16 mel bins,
  width 32, 2 encoder layers, 100-frame windows)."""
  import transformers  # pylint: disable=g-import-not-at-top
  fields = dict(num_mel_bins=16, d_model=32, encoder_layers=2,
                encoder_attention_heads=4, encoder_ffn_dim=64,
                decoder_layers=1, decoder_attention_heads=4,
                decoder_ffn_dim=64, max_source_positions=50,
                max_target_positions=32, vocab_size=64, pad_token_id=0,
                bos_token_id=1, eos_token_id=2, decoder_start_token_id=3,
                begin_suppress_tokens=None, suppress_tokens=None)
  fields.update(kw)
  return transformers.WhisperConfig(**fields)


def make_whisper_checkpoint(path: str, *, conditional: bool = False,
                            seed: int = 0, **kw) -> str:
  """A tiny random `WhisperModel` (or `WhisperForConditionalGeneration`)
  saved by transformers (safetensors) in `path`; returns `path`."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  cls = (transformers.WhisperForConditionalGeneration if conditional
         else transformers.WhisperModel)
  model = cls(tiny_whisper_config(**kw)).eval()
  with torch.no_grad():  # non-trivial norms and biases
    for name, p in model.named_parameters():
      if "layer_norm" in name or name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
  model.save_pretrained(path, safe_serialization=True)
  return path


@contextlib.contextmanager
def mock_librispeech(num_examples: int = 6):
  """`tfds.testing.mock_data` for the `librispeech` builder.

  Its rows are random values of the builder's features (`speech` int16,
  `text`, `speaker_id`, `chapter_id`, `id`). TFDS's `Audio` feature imports
  TensorFlow only to name its dtype (TensorFlow is not a jaxlab
  dependency), so that one lookup is stubbed for the duration.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from tensorflow_datasets.core.features import audio_feature  # pylint: disable=g-import-not-at-top
  saved = audio_feature.tf
  try:
    try:
      saved.dtypes.as_dtype(np.int16)
      stub = None
    except ImportError:  # no TensorFlow: name dtypes by numpy
      stub = types.SimpleNamespace(dtypes=types.SimpleNamespace(
          as_dtype=lambda d: d))
      audio_feature.tf = stub
    with tfds.testing.mock_data(num_examples=num_examples,
                                policy=tfds.testing.MockPolicy.USE_CODE):
      yield
  finally:
    audio_feature.tf = saved


def write_librispeech_dir(root: str, utterances: Sequence[dict[str, Any]],
                          *, ext: str = ".flac") -> str:
  """Writes utterances ({"speaker_id", "chapter_id", "utt", "text",
  "wave"}) as a released LibriSpeech split: `<speaker>/<chapter>/
  <speaker>-<chapter>-<utt:04d>.flac` and `<speaker>-<chapter>.trans.txt`
  lines "<id> <TEXT>" (the layout of the corpus' README.TXT)."""
  import soundfile  # pylint: disable=g-import-not-at-top
  chapters: dict[tuple[int, int], list[str]] = {}
  for u in utterances:
    s, c = int(u["speaker_id"]), int(u["chapter_id"])
    d = os.path.join(root, str(s), str(c))
    os.makedirs(d, exist_ok=True)
    uid = f"{s}-{c}-{int(u['utt']):04d}"
    soundfile.write(os.path.join(d, uid + ext),
                    np.asarray(u["wave"], np.float32), 16000,
                    subtype="PCM_16")
    chapters.setdefault((s, c), []).append(f"{uid} {u['text'].upper()}")
  for (s, c), lines in chapters.items():
    with open(os.path.join(root, str(s), str(c), f"{s}-{c}.trans.txt"),
              "w", encoding="utf-8") as f:
      f.write("\n".join(lines) + "\n")
  return root
