"""MathFimer: fill-in-the-middle step expansion of reasoning chains (spec H).

  * `split_steps`: newline split, drop empty lines, merge lines shorter than
    `min_chars` into the next step; the final line stays its own step (H.1,
    [inferred] defaults).
  * `FimFormat`: PSM order with configurable sentinels (default Qwen2.5's
    `<|fim_prefix|>`, `<|fim_suffix|>`, `<|fim_middle|>`), added to the
    tokenizer as single tokens (H.3):
        <|fim_prefix|>{Q}\n{P}<|fim_suffix|>{S}<|fim_middle|>{M}<eos>
    ([inferred] `order="spm"`: the suffix block first, the prefix block
    then ends right before `<|fim_middle|>`)
    with P, S the step lists joined by "\n"; loss on the tokens after
    `<|fim_middle|>` only, i.e. M and eos (H.4).
  * `sample_fim_examples`: r random masks per solution (H.2; r = 3).
  * `expand`: every gap between adjacent steps, y_hat_i = FIM(Q, y_<i, y_>=i),
    dropped when sim(y_hat_i, y_i) > eta = 0.8 (difflib ratio, [inferred])
    or empty, else inserted before y_i; all gaps of a round come from the
    same (pre-round) chain so they are generated in one batch; k rounds
    (H.6, H.7).

Bad input: a solution with fewer than 2 steps has no gap and no non-trivial
mask; it is skipped and counted (`skipped_short`), never an error.
"""

from __future__ import annotations

import dataclasses
import difflib
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

DEFAULT_SENTINELS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
FIM_ORDERS = ("psm", "spm")


# -- steps ------------------------------------------------------------------------------


def split_steps(solution: str, *, min_chars: int = 8) -> list[str]:
  """Ordered steps of a solution (spec H.1, [inferred] heuristic).

  Lines are stripped and empty ones dropped; a line shorter than `min_chars`
  is merged (joined with a space) into the following line, except that the
  final line (the answer) is always its own step, so a short line just
  before it joins the previous step instead (or stays alone).
  """
  lines = [ln.strip() for ln in solution.split("\n")]
  lines = [ln for ln in lines if ln]
  if len(lines) <= 1:
    return lines
  body, last = lines[:-1], lines[-1]
  steps: list[str] = []
  carry = ""
  for ln in body:
    ln = f"{carry} {ln}" if carry else ln
    carry = ""
    if len(ln) < min_chars:
      carry = ln
    else:
      steps.append(ln)
  if carry:
    if steps:
      steps[-1] = f"{steps[-1]} {carry}"
    else:
      steps.append(carry)
  return steps + [last]


def similarity(a: str, b: str) -> float:
  """`difflib.SequenceMatcher(None, a, b).ratio()` ([inferred], H.6)."""
  return difflib.SequenceMatcher(None, a, b).ratio()


# -- formatting ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FimExample:
  question: str
  prefix: tuple[str, ...]
  suffix: tuple[str, ...]
  middle: str


@dataclasses.dataclass(frozen=True)
class FimFormat:
  """PSM fill-in-the-middle strings and token ids with a middle-only mask."""
  prefix_token: str = DEFAULT_SENTINELS[0]
  suffix_token: str = DEFAULT_SENTINELS[1]
  middle_token: str = DEFAULT_SENTINELS[2]
  step_sep: str = "\n"
  # [inferred] "psm" (spec H.3, default) or "spm": the suffix first, so the
  # prefix ends right before the middle (Bavarian et al. 2022's SPM mode):
  #   <|fim_suffix|>{S}<|fim_prefix|>{Q}\n{P}<|fim_middle|>{M}
  # The middle is then predicted right after the step before it, as a
  # left-to-right solver predicts its next step.
  order: str = "psm"

  def __post_init__(self):
    if self.order not in FIM_ORDERS:
      raise ValueError(f"FimFormat.order must be one of {FIM_ORDERS}, got "
                       f"{self.order!r}")

  @property
  def sentinels(self) -> tuple[str, str, str]:
    return (self.prefix_token, self.suffix_token, self.middle_token)

  def add_to_tokenizer(self, tokenizer) -> list[int]:
    """Registers the sentinels as single special tokens; returns their ids."""
    if hasattr(tokenizer, "add_special_tokens"):
      return tokenizer.add_special_tokens(list(self.sentinels))
    return [tokenizer.token_id(s) for s in self.sentinels]

  def _check(self, field: str, value: str, allow_sep: bool = True):
    for s in self.sentinels:
      if s in value:
        raise ValueError(f"FIM {field} contains the sentinel {s!r}: {value!r}")
    if not allow_sep and self.step_sep in value:
      raise ValueError(f"FIM {field} contains the step separator "
                       f"{self.step_sep!r}: {value!r}")

  def prompt(self, question: str, prefix: Sequence[str],
             suffix: Sequence[str]) -> str:
    """Everything up to and including the middle sentinel."""
    self._check("question", question, allow_sep=False)
    for s in (*prefix, *suffix):
      self._check("step", s, allow_sep=False)
    pre = (f"{self.prefix_token}{question}{self.step_sep}"
           f"{self.step_sep.join(prefix)}")
    suf = f"{self.suffix_token}{self.step_sep.join(suffix)}"
    if self.order == "spm":
      return f"{suf}{pre}{self.middle_token}"
    return f"{pre}{suf}{self.middle_token}"

  def format(self, ex: FimExample) -> str:
    """The full training string (without eos, which `encode` appends)."""
    self._check("middle", ex.middle, allow_sep=False)
    return self.prompt(ex.question, ex.prefix, ex.suffix) + ex.middle

  def parse(self, s: str) -> FimExample:
    """Inverse of `format`."""
    p, s_, m = self.sentinels
    first = s_ if self.order == "spm" else p
    if not (s.startswith(first) and s.count(p) == 1 and s.count(s_) == 1
            and s.count(m) == 1):
      raise ValueError(f"not a {self.order.upper()} FIM string: {s!r}")
    head, middle = s.split(m)
    if self.order == "spm":
      suf, pre = head[len(s_):].split(p)
    else:
      pre, suf = head[len(p):].split(s_)
    question, _, prefix = pre.partition(self.step_sep)
    split = lambda x: tuple(x.split(self.step_sep)) if x else ()
    return FimExample(question, split(prefix), split(suf), middle)

  def encode(self, tokenizer, ex: FimExample) -> tuple[list[int], list[int]]:
    """(ids, loss_mask): bos + format(ex) + eos; mask = 1 on M and eos only."""
    prompt_ids = tokenizer.encode(self.prompt(ex.question, ex.prefix,
                                              ex.suffix), add_bos=True)
    self._check("middle", ex.middle, allow_sep=False)
    middle_ids = tokenizer.encode(ex.middle, add_eos=True)
    return (prompt_ids + middle_ids,
            [0] * len(prompt_ids) + [1] * len(middle_ids))


def encode_batch(fmt: FimFormat, tokenizer, examples: Sequence[FimExample], *,
                 max_len: int, context_weight: float = 0.0) -> dict[str, Any]:
  """Shifted, right-padded training batch; `truncated` counts cut rows.

  `loss_mask` is 1 on the middle and eos (spec H.4) and `context_weight` on
  the other real tokens (the question, prefix, suffix and sentinels; 0 =
  the spec's middle-only loss). A positive weight ([inferred] switch) adds
  a plain LM loss on the FIM string: the paper fine-tunes a pretrained math
  model that already writes such steps, a from-scratch model has to learn
  them from somewhere.
  """
  if not 0 <= context_weight <= 1:
    raise ValueError(f"context_weight must be in [0, 1], got {context_weight}")
  b = len(examples)
  inputs = np.full((b, max_len), tokenizer.pad_id, np.int32)
  targets = np.full((b, max_len), tokenizer.pad_id, np.int32)
  mask = np.zeros((b, max_len), np.float32)
  truncated = 0
  for i, ex in enumerate(examples):
    ids, m = fmt.encode(tokenizer, ex)
    if len(ids) > max_len + 1:
      truncated += 1
      ids, m = ids[:max_len + 1], m[:max_len + 1]
    n = len(ids) - 1
    inputs[i, :n], targets[i, :n] = ids[:-1], ids[1:]
    mask[i, :n] = np.where(np.asarray(m[1:]) == 1, 1.0, context_weight)
  return {"inputs": inputs, "targets": targets, "loss_mask": mask,
          "truncated": truncated}


# -- FIM training data -----------------------------------------------------------------


def sample_fim_examples(question: str, steps: Sequence[str], *, rounds: int = 3,
                        rng: random.Random, distinct: bool = True,
                        min_steps: int = 2, empty_masks: int = 0
                        ) -> list[FimExample]:
  """`rounds` random masks of one solution (spec H.2).

  Each draws i in [0, n): P = steps[:i], M = steps[i], S = steps[i+1:].
  `distinct` ([inferred]) draws without replacement while possible, so a
  short solution does not give duplicate examples. Solutions with fewer
  than `min_steps` steps give no example.

  `empty_masks` ([inferred], 0 = the spec): that many more examples at an
  intact gap, i in [0, n) drawn the same way: P = steps[:i], S = steps[i:],
  M = "" (the target is eos alone). They teach the model that a gap with
  no missing step has nothing to fill; expansion (H.6) meets such gaps
  wherever the coarse chain kept adjacent steps, and counts an empty fill
  as rejected (`rejected_empty`).
  """
  n = len(steps)
  if n < max(min_steps, 1):
    return []
  draw = lambda k: (rng.sample(range(n), min(k, n)) if distinct  # pylint: disable=g-long-lambda
                    else [rng.randrange(n) for _ in range(k)])
  out = [FimExample(question, tuple(steps[:i]), tuple(steps[i + 1:]),
                    steps[i]) for i in draw(rounds)]
  if empty_masks:
    out += [FimExample(question, tuple(steps[:i]), tuple(steps[i:]), "")
            for i in draw(empty_masks)]
  return out


def sample_coarse_gap_examples(question: str, steps: Sequence[str], *,
                               rounds: int, drop_frac: float,
                               rng: random.Random) -> list[FimExample]:
  """`rounds` FIM examples at gaps of randomly coarsened copies ([inferred]).

  Spec H.2's masks come from complete chains, so every prefix and suffix
  is gap-free and exactly one step is missing; the chains that expansion
  fills are coarse (gaps elsewhere, 0, 1 or more steps missing at a gap).
  Each example here deletes round(drop_frac * (n - 1)) of the steps but the
  last (the answer line stays), picks one gap g of the kept chain
  uniformly (the first gap, before the first kept step, included), and
  sets P = kept[:g], S = kept[g:], M = the first deleted step between
  kept[g - 1] and kept[g] (the next step after P), or "" when none was
  deleted there (nothing to fill).
  """
  if not 0 <= drop_frac < 1:
    raise ValueError(f"drop_frac must be in [0, 1), got {drop_frac}")
  n = len(steps)
  if n < 2:
    return []
  out = []
  for _ in range(rounds):
    drop = set(rng.sample(range(n - 1), round(drop_frac * (n - 1))))
    kept = [i for i in range(n) if i not in drop]
    g = rng.randrange(len(kept))
    lo = kept[g - 1] + 1 if g else 0
    missing = [i for i in range(lo, kept[g]) if i in drop]
    out.append(FimExample(question, tuple(steps[i] for i in kept[:g]),
                          tuple(steps[i] for i in kept[g:]),
                          steps[missing[0]] if missing else ""))
  return out


def build_fim_dataset(items: Sequence[tuple[str, Sequence[str]]], *,
                      rounds: int = 3, seed: int = 0, min_steps: int = 2,
                      empty_masks: int = 0, coarse_gaps: int = 0,
                      coarse_drop_frac: float = 0.4
                      ) -> tuple[list[FimExample], dict[str, int]]:
  """FIM examples of (question, steps) items plus counts (skipped_short).

  `empty_masks`: intact-gap examples per solution (`sample_fim_examples`);
  `coarse_gaps`: examples per solution at gaps of coarsened copies
  (`sample_coarse_gap_examples`, `coarse_drop_frac` of the steps deleted).
  """
  rng = random.Random(seed)
  out, skipped = [], 0
  for q, steps in items:
    ex = sample_fim_examples(q, steps, rounds=rounds, rng=rng,
                             min_steps=min_steps, empty_masks=empty_masks)
    if ex and coarse_gaps:
      ex += sample_coarse_gap_examples(q, steps, rounds=coarse_gaps,
                                       drop_frac=coarse_drop_frac, rng=rng)
    skipped += not ex
    out.extend(ex)
  return out, {"examples": len(out), "solutions": len(items),
               "skipped_short": skipped}


# -- expansion ---------------------------------------------------------------------------


@dataclasses.dataclass
class ExpansionStats:
  solutions: int = 0
  gaps: int = 0
  inserted: int = 0
  rejected_similar: int = 0
  rejected_empty: int = 0
  skipped_short: int = 0
  steps_before: float = 0.0
  steps_after: float = 0.0

  @property
  def insertion_rate(self) -> float:
    return self.inserted / self.gaps if self.gaps else 0.0

  @property
  def rejection_rate(self) -> float:
    return (self.rejected_similar + self.rejected_empty) / self.gaps if (
        self.gaps) else 0.0

  def as_dict(self) -> dict[str, float]:
    d = dataclasses.asdict(self)
    d.update(insertion_rate=self.insertion_rate,
             rejection_rate=self.rejection_rate)
    return d


def clean_middle(text: str, step_sep: str = "\n") -> str:
  """A generated middle as one step: first non-empty line, stripped."""
  for ln in text.split(step_sep):
    if ln.strip():
      return ln.strip()
  return ""


def expand_round(items: Sequence[tuple[str, Sequence[str]]],
                 fill_fn: Callable[[list[str]], list[str]], *,
                 fmt: FimFormat = FimFormat(), eta: float = 0.8,
                 protect_last: bool = False, first_gap: bool = False
                 ) -> tuple[list[list[str]], ExpansionStats]:
  """One expansion round over every gap of every solution (spec H.6).

  Args:
    items: (question, steps) pairs.
    fill_fn: batch of FIM prompt strings -> generated middles (raw text).
    eta: candidates with similarity(candidate, y_i) > eta are redundant.
    protect_last: also skip the gap before the final (answer) step.
    first_gap: also try the gap between the question and y_1, i.e.
      y_hat_1 = FIM(Q, (), y_1..y_n) (the spec's i = 1 with an empty prefix,
      as in the masks of H.2; [inferred], off by default: "between adjacent
      steps" read literally has no gap before y_1).

  Returns:
    (expanded step lists, stats).
  """
  if not 0 <= eta <= 1:
    raise ValueError(f"eta must be in [0, 1], got {eta}")
  stats = ExpansionStats(solutions=len(items))
  prompts, where = [], []
  for j, (q, steps) in enumerate(items):
    if len(steps) < 2:
      stats.skipped_short += 1
      continue
    last = len(steps) - 1 if protect_last else len(steps)
    for i in range(0 if first_gap else 1, last):
      prompts.append(fmt.prompt(q, steps[:i], steps[i:]))
      where.append((j, i))
  cands = fill_fn(prompts) if prompts else []
  if len(cands) != len(prompts):
    raise ValueError(f"fill_fn returned {len(cands)} middles for "
                     f"{len(prompts)} prompts")
  inserts: dict[int, dict[int, str]] = {}
  for (j, i), raw in zip(where, cands):
    stats.gaps += 1
    cand = clean_middle(raw, fmt.step_sep)
    if not cand or any(s in cand for s in fmt.sentinels):
      stats.rejected_empty += 1
    elif similarity(cand, items[j][1][i]) > eta:
      stats.rejected_similar += 1
    else:
      stats.inserted += 1
      inserts.setdefault(j, {})[i] = cand
  out = []
  for j, (_, steps) in enumerate(items):
    new = []
    for i, s in enumerate(steps):
      if i in inserts.get(j, {}):
        new.append(inserts[j][i])
      new.append(s)
    out.append(new)
  n = max(len(items), 1)
  stats.steps_before = sum(len(s) for _, s in items) / n
  stats.steps_after = sum(len(s) for s in out) / n
  return out, stats


def expand(items: Sequence[tuple[str, Sequence[str]]],
           fill_fn: Callable[[list[str]], list[str]], *, rounds: int = 1,
           fmt: FimFormat = FimFormat(), eta: float = 0.8,
           protect_last: bool = False, first_gap: bool = False
           ) -> tuple[list[list[str]], list[dict[str, float]]]:
  """`rounds` expansion rounds (spec H.7); stats per round."""
  if rounds < 0:
    raise ValueError(f"rounds must be >= 0, got {rounds}")
  current = [list(s) for _, s in items]
  questions = [q for q, _ in items]
  history = []
  for _ in range(rounds):
    current, st = expand_round(list(zip(questions, current)), fill_fn,
                               fmt=fmt, eta=eta, protect_last=protect_last,
                               first_gap=first_gap)
    history.append(st.as_dict())
  return current, history


def make_fill_fn(model, tokenizer, *, max_new_tokens: int = 32,
                 batch_size: int = 64, generate_fn=None):
  """Greedy FIM generation with the KV-cache sampler ([inferred] H.6)."""
  from jaxlab.objectives import self_generated as sg  # pylint: disable=g-import-not-at-top

  def fill(prompts: list[str]) -> list[str]:
    return sg.generate_text(model, tokenizer, prompts,
                            max_new_tokens=max_new_tokens, temperature=0.0,
                            batch_size=batch_size, generate_fn=generate_fn)
  return fill
