"""Token stability of a speech tokenizer (StableToken, spec E).

`evaluate`: UED% between the 25 Hz tokens of each held-out clean utterance
and its noisy copy (`jaxlab.evals.text.unit_edit_distance`) per noise type,
the clean and noisy phone (character) error rate of greedy CTC, the
clean and noisy WER when the held-out set has transcripts (`texts`), and
the bit-vote recoveries (noisy frames where most branches' own tokens
differ from the clean token but the bitwise vote still gives it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxlab.data import librispeech
from jaxlab.evals import text
from jaxlab.models import speech_tokenizer as st


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


def word_error_rate(model, feats, lengths, texts) -> float:
  """WER (`text.word_error_rate`, jiwer's) of greedy CTC character
  transcripts (`librispeech.CHARS`) against the normalised `texts`."""
  hyps = []
  for i in range(0, len(feats), 64):
    hyps += [librispeech.labels_to_text(h) for h in
             st.ctc_greedy(model, feats[i:i + 64], lengths[i:i + 64])]
  refs = [librispeech.normalize_transcript(t) for t in texts]
  return text.word_error_rate(refs, hyps)


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
  if any(held.get("texts", ())):  # real transcripts: WER clean / noisy too
    out["wer_clean"] = word_error_rate(model, held["features"], lens,
                                       held["texts"])
    out["wer_noisy"] = float(np.mean([word_error_rate(
        model, feats, lens, held["texts"])
                                      for feats in held["noisy"].values()]))
  return out
