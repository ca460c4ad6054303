"""VUDG multiple-choice harness: letters, per-domain metrics, DG protocols.

    result = score(questions, replies)         # replies: model text per MCQ
    result.d_avg, result.by_domain, result.num_malformed
    splits = protocol_splits("multi_source", ALL_DOMAINS)   # LODO
    table = run_protocol("multi_source", domains, train_fn, eval_fn)

papers/O-S.md S.4 and S.6:
  * letter extraction (`extract_letter`): the first A-F at the start of the
    reply ("B", "B.", "(B) red", "B) ..."), else the first "(X)" anywhere,
    else "Answer: X"; with `match_option_text` [inferred, default on] a
    reply equal to one option's text (case and trailing punctuation
    ignored) counts as that option's letter. Anything else is *malformed*:
    scored wrong and counted (`num_malformed`). The official script's rule
    (`pred.strip().upper() == answer`) is `extract_letter(...,
    strict=True)`.
  * metrics (`score`): accuracy per domain, D-Avg = the unweighted mean of
    the domain accuracies (over the domains present), the mean per shift
    type (of its domains' accuracies), accuracy per question type, and the
    QA-weighted overall accuracy.
  * protocols (`protocol_splits`, `run_protocol`): full-domain (upper bound:
    train on every domain), multi-source leave-one-domain-out (Avg_m =
    mean_i P_i, P_i the accuracy on held-out domain i), single-source
    (Avg_s = mean_i mean_{j != i} P_j^i), single-source by shift type
    (train on one shift type's domains, test on the other types), and
    zero-shot (no training); each with its gap to the full-domain result.
  * bias probes (reviewers' asks, S.6): `probe_frames` (text-only: blank
    frames; single-frame: the middle frame repeated), `longest_option`
    baseline replies, and chance (1 / number of options).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxlab.data import vudg as vd   # the released schema

PROTOCOLS = ("full", "multi_source", "single_source", "single_source_shift",
             "zero_shot")
PROBES = ("text_only", "single_frame")

_START_RE = re.compile(r"^\(?([A-F])(?:\)|\.|:|,|\s|$)")
_PAREN_RE = re.compile(r"\(([A-F])\)")
_ANSWER_RE = re.compile(r"answer(?:\s+is)?\s*[:\-]?\s*\(?([A-F])\b",
                        re.IGNORECASE)


def extract_letter(reply: str, options: Sequence[str] = (), *,
                   num_options: int | None = None,
                   match_option_text: bool = True,
                   strict: bool = False) -> str | None:
  """The answer letter of a model reply, or None when it is malformed.

  Args:
    reply: the model's text.
    options: the question's option texts (for `match_option_text` and the
      number of valid letters).
    num_options: valid letters are the first `num_options` of A-F (default:
      len(options), or 6 without options).
    match_option_text: a reply equal to an option's text is its letter.
    strict: the official script's rule only: `reply.strip().upper()` must
      be a valid letter.
  """
  if not isinstance(reply, str):
    raise TypeError(f"reply must be a string, got {type(reply).__name__}")
  n = num_options or len(options) or 6
  valid = vd.LETTERS[:n]
  text = reply.strip()
  if strict:
    up = text.upper()
    return up if len(up) == 1 and up in valid else None
  for regex, src in ((_START_RE, text), (_PAREN_RE, text),
                     (_ANSWER_RE, text)):
    m = regex.search(src) if regex is not _START_RE else regex.match(src)
    if m:
      letter = m.group(1).upper()
      return letter if letter in valid else None
  if match_option_text and options:
    norm = text.rstrip(".!").strip().lower()
    hits = [i for i, o in enumerate(options) if o.strip().lower() == norm]
    if len(hits) == 1:
      return vd.LETTERS[hits[0]]
  return None


@dataclasses.dataclass(frozen=True)
class MCQResult:
  """Scores of one set of replies (accuracies in [0, 1])."""
  overall: float                       # QA-weighted
  d_avg: float                         # unweighted mean over domains
  by_domain: dict[str, float]
  by_shift_type: dict[str, float]      # mean of the type's domain accuracies
  by_question_type: dict[int, float]
  num_questions: int
  num_malformed: int
  correct: tuple[bool, ...] = ()
  letters: tuple[str | None, ...] = ()

  def to_json(self) -> dict[str, Any]:
    return {"overall": self.overall, "d_avg": self.d_avg,
            "by_domain": dict(self.by_domain),
            "by_shift_type": dict(self.by_shift_type),
            "by_question_type": {str(k): v for k, v in
                                 self.by_question_type.items()},
            "num_questions": self.num_questions,
            "num_malformed": self.num_malformed}


def domain_average(by_domain: Mapping[str, float]) -> float:
  """D-Avg: the unweighted mean of the domain accuracies (S.4)."""
  if not by_domain:
    raise ValueError("domain_average of no domains")
  return float(np.mean(list(by_domain.values())))


def score(questions: Sequence[vd.MCQ], replies: Sequence[str], *,
          match_option_text: bool = True, strict: bool = False) -> MCQResult:
  """Scores replies (one per question, same order); malformed = wrong."""
  if len(questions) != len(replies):
    raise ValueError(f"{len(replies)} replies for {len(questions)} "
                     "questions; give one reply per question")
  if not questions:
    raise ValueError("score: no questions")
  letters = tuple(extract_letter(r, q.options,
                                 match_option_text=match_option_text,
                                 strict=strict)
                  for q, r in zip(questions, replies))
  correct = tuple(l is not None and l == q.answer
                  for q, l in zip(questions, letters))
  c = np.asarray(correct, float)

  def acc(pred) -> float:
    idx = [i for i, q in enumerate(questions) if pred(q)]
    return float(c[idx].mean())

  by_domain = {d: acc(lambda q, d=d: q.domain == d)
               for d in vd.ALL_DOMAINS if any(q.domain == d
                                              for q in questions)}
  by_shift = {}
  for s, ds in vd.DOMAINS.items():
    present = [by_domain[d] for d in ds if d in by_domain]
    if present:
      by_shift[s] = float(np.mean(present))
  by_qtype = {t: acc(lambda q, t=t: q.question_type == t)
              for t in sorted({q.question_type for q in questions})}
  return MCQResult(overall=float(c.mean()), d_avg=domain_average(by_domain),
                   by_domain=by_domain, by_shift_type=by_shift,
                   by_question_type=by_qtype, num_questions=len(questions),
                   num_malformed=sum(l is None for l in letters),
                   correct=correct, letters=letters)


# -- baselines and probes ---------------------------------------------------------


def longest_option(questions: Sequence[vd.MCQ]) -> list[str]:
  """Replies of the answer-length baseline: the longest option's letter
  (the first one on ties)."""
  return [vd.LETTERS[int(np.argmax([len(o) for o in q.options]))]
          for q in questions]


def chance(questions: Sequence[vd.MCQ]) -> float:
  """Expected accuracy of a uniform guess: mean of 1 / number of options."""
  return float(np.mean([1.0 / len(q.options) for q in questions]))


def probe_frames(frames_bfhwc: np.ndarray, probe: str) -> np.ndarray:
  """Frames for a bias probe: "text_only" (all frames blank, 0) or
  "single_frame" (the middle frame repeated F times)."""
  if probe == "text_only":
    return np.zeros_like(frames_bfhwc)
  if probe == "single_frame":
    mid = frames_bfhwc.shape[1] // 2
    return np.repeat(frames_bfhwc[:, mid:mid + 1], frames_bfhwc.shape[1],
                     axis=1)
  raise ValueError(f"probe={probe!r}; valid: {', '.join(PROBES)}")


# -- protocols ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Split:
  """One training run of a protocol: train on `train`, test on `test`."""
  name: str
  train: tuple[str, ...]
  test: tuple[str, ...]


def protocol_splits(protocol: str, domains: Sequence[str] = vd.ALL_DOMAINS,
                    *, only: Sequence[str] | None = None) -> list[Split]:
  """The train/test splits of a DG protocol (S.4) over `domains`.

  `only` restricts the held-out domain (multi_source), the source domain
  (single_source) or the source shift type (single_source_shift) to a
  subset, so a CPU run can sample the N runs of a protocol.
  """
  domains = vd.check_domains(domains)
  if protocol not in PROTOCOLS:
    raise ValueError(f"protocol={protocol!r}; valid: {', '.join(PROTOCOLS)}")
  if protocol == "full":
    return [Split("full", domains, domains)]
  if protocol == "zero_shot":
    return [Split("zero_shot", (), domains)]
  if protocol == "single_source_shift":
    types = [s for s in vd.DOMAINS if any(vd.SHIFT_TYPE[d] == s
                                          for d in domains)]
    if only is not None:
      for s in only:
        if s not in vd.DOMAINS:
          raise ValueError(f"unknown shift type {s!r}; valid: "
                           f"{', '.join(vd.DOMAINS)}")
      types = [s for s in types if s in only]
    return [Split(f"source={s}",
                  tuple(d for d in domains if vd.SHIFT_TYPE[d] == s),
                  tuple(d for d in domains if vd.SHIFT_TYPE[d] != s))
            for s in types]
  pick = domains if only is None else vd.check_domains(only, "only")
  if protocol == "multi_source":
    return [Split(f"held_out={d}", tuple(x for x in domains if x != d), (d,))
            for d in pick]
  return [Split(f"source={d}", (d,), tuple(x for x in domains if x != d))
          for d in pick]


@dataclasses.dataclass(frozen=True)
class ProtocolResult:
  """Per-split results and the protocol's average (S.4)."""
  protocol: str
  splits: tuple[Split, ...]
  results: tuple[MCQResult, ...]
  average: float            # Avg_m / Avg_s / D-Avg of full and zero-shot

  def gap_to(self, upper: float) -> float:
    """Degradation: the full-domain upper bound minus this average."""
    return upper - self.average


def protocol_average(protocol: str, splits: Sequence[Split],
                     results: Sequence[MCQResult]) -> float:
  """Avg_m = mean_i P_i (multi-source); Avg_s = mean_i mean_{j != i}
  P_j^i (single-source: each run's D-Avg over its test domains); D-Avg for
  full and zero-shot."""
  del splits
  if protocol == "multi_source":
    return float(np.mean([r.overall for r in results]))
  return float(np.mean([r.d_avg for r in results]))


def run_protocol(protocol: str, domains: Sequence[str],
                 train_fn: Callable[[tuple[str, ...]], Any],
                 eval_fn: Callable[[Any, tuple[str, ...]], MCQResult], *,
                 only: Sequence[str] | None = None) -> ProtocolResult:
  """Runs each split: `predictor = train_fn(train_domains)` (train_fn gets
  () for zero-shot), `eval_fn(predictor, test_domains) -> MCQResult`."""
  splits = protocol_splits(protocol, domains, only=only)
  results = tuple(eval_fn(train_fn(s.train), s.test) for s in splits)
  return ProtocolResult(protocol, tuple(splits), results,
                        protocol_average(protocol, splits, results))
