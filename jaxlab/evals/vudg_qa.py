"""Mini-VUDG question answering as token ids (paper S): the tokenizer, the
prompts, the teacher-forcing arrays and greedy answering of a video LM.

Used by `jaxlab.experiments.vudg`; replies are scored by `jaxlab.evals.vudg`.
"""

from __future__ import annotations

import numpy as np

from jaxlab.data import tokenizers
from jaxlab.data.synthetic import video_domains as vd
from jaxlab.evals import vudg


ANSWER_CUE = "\nAnswer:"
STEMS = ("What does the person do first?", "What colour is the ",
         "Which object is in the scene?", "What does the person do after "
         "they ")


def make_tokenizer() -> tokenizers.ByteTokenizer:
  """Bytes + one token per answer word, question stem, option marker."""
  markers = tuple(f"\n({l}) " for l in vd.LETTERS)
  return tokenizers.ByteTokenizer(
      special_tokens=vd.vocabulary() + STEMS + markers + (ANSWER_CUE,))


def prompt_ids(tok, q: vd.MCQ) -> list[int]:
  return tok.encode(q.question + ANSWER_CUE, add_bos=True)


def target_text(q: vd.MCQ, answer_format: str) -> str:
  if answer_format == "letter":
    return q.answer
  if answer_format == "text":
    return q.answer_text
  raise ValueError(f"vudg.answer_format={answer_format!r}; valid: letter, "
                   "text")


def encode(data: vd.VideoQASet, tok, answer_format: str, max_len: int
           ) -> dict[str, np.ndarray]:
  """Teacher-forcing arrays: frames, inputs, targets, loss_mask,
  attention_mask (right padding); the loss is on the answer + EOS."""
  n = len(data.questions)
  inputs = np.full((n, max_len), tok.pad_id, np.int32)
  targets = np.full((n, max_len), tok.pad_id, np.int32)
  loss_mask = np.zeros((n, max_len), np.float32)
  attn = np.zeros((n, max_len), bool)
  for i, q in enumerate(data.questions):
    p = prompt_ids(tok, q)
    a = tok.encode(target_text(q, answer_format), add_eos=True)
    seq = p + a
    if len(seq) - 1 > max_len:
      raise ValueError(f"question {q.qa_num}: {len(seq)} tokens > max_len")
    inputs[i, :len(seq) - 1] = seq[:-1]
    targets[i, :len(seq) - 1] = seq[1:]
    loss_mask[i, len(p) - 1:len(seq) - 1] = 1.0
    attn[i, :len(seq) - 1] = True
  frames = np.stack([data.frames(q.video) for q in data.questions])
  return {"frames": frames, "inputs": inputs, "targets": targets,
          "loss_mask": loss_mask, "attention_mask": attn}


def answer(model, data: vd.VideoQASet, tok, *, batch: int,
           probe: str | None = None) -> list[str]:
  """Greedy replies (text) to every question; fixed batch size (the last
  batch padded by repetition) so one compilation serves all."""
  qs = data.questions
  replies = []
  for start in range(0, len(qs), batch):
    chunk = qs[start:start + batch]
    pad = chunk + [chunk[-1]] * (batch - len(chunk))
    frames = np.stack([data.frames(q.video) for q in pad])
    if probe is not None:
      frames = vudg.probe_frames(frames, probe)
    res = model.generate(frames, [prompt_ids(tok, q) for q in pad],
                         max_new_tokens=3, eos_id=tok.eos_id,
                         pad_id=tok.pad_id, pad_multiple=8,
                         new_tokens_multiple=4)
    replies += [tok.decode(t) for t in res.tokens[:len(chunk)]]
  return replies
