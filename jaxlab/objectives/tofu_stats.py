"""TOFU's per-item statistics of a model (`evaluate_util.get_all_evals`):
the answer losses behind the truth ratio and forget quality, and ROUGE-L
recall of its generations; the statistics themselves are
`jaxlab.evals.tofu`'s, on these arrays."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxlab.evals import text
from jaxlab.objectives import self_generated as sg


def answer_losses(model, tokenizer, prompts: Sequence[str],
                  answers: Sequence[str], *, max_len: int,
                  batch_size: int = 64) -> np.ndarray:
  """Per-token answer NLL `[N]` of (prompt, answer) pairs under `model`.

  The rows are `bos prompt answer eos` with the loss on the answer and eos
  (`self_generated.encode_pairs`), as TOFU's labels are the answer tokens
  and the eos after them.
  """
  summed = sg.sequence_nll_dataset(model, tokenizer, list(prompts),
                                   list(answers), max_len=max_len,
                                   batch_size=batch_size)
  n = np.zeros(len(prompts))
  for s in range(0, len(prompts), batch_size):
    enc = sg.encode_pairs(tokenizer, prompts[s:s + batch_size],
                          answers[s:s + batch_size], max_len=max_len)
    n[s:s + len(enc["mask"])] = enc["mask"].sum(-1)
  if not n.all():
    raise ValueError(
        f"{int((n == 0).sum())} of {len(n)} (prompt, answer) rows keep no "
        f"answer token within max_len={max_len} (the prompt fills it); raise "
        "the max_len (config.unlearn.max_len)")
  return np.asarray(summed, np.float64) / n


def task_stats(model, tokenizer, rows, prompt_fn: Callable[[str], str], *,
               base_answer_key: str, perturbed_answer_key: str,
               generations: Sequence[str] | None, max_len: int,
               batch_size: int = 64) -> dict[str, Any]:
  """The per-item arrays of one TOFU task (`evaluate_util.get_all_evals`).

  `rows` are the task's released rows (`question`, `answer`,
  `base_answer_key`, `perturbed_answer_key` a list); `generations` the
  model's greedy answers to them (scored by ROUGE-L recall against
  `answer`, rouge_score with the stemmer as TOFU's `eval_rouge_recall`;
  None: no `rouge_l_recall`, e.g. for the retain model of forget quality).
  """
  qs = [r["question"] for r in rows]
  prompts = [prompt_fn(q) for q in qs]
  loss = lambda ps, ans: answer_losses(  # pylint: disable=g-long-lambda
      model, tokenizer, ps, ans, max_len=max_len, batch_size=batch_size)
  perturbed = [list(r[perturbed_answer_key]) for r in rows]
  k = {len(p) for p in perturbed}
  if len(k) != 1:
    raise ValueError(f"rows have {sorted(k)} {perturbed_answer_key!r} "
                     "entries; TOFU's truth ratio needs the same number per "
                     "row")
  k = k.pop()
  flat = loss([p for p in prompts for _ in range(k)],
              [a for ps in perturbed for a in ps])
  out = {
      "avg_gt_loss": loss(prompts, [r["answer"] for r in rows]),
      "avg_paraphrased_loss": loss(prompts,
                                   [r[base_answer_key] for r in rows]),
      "average_perturb_loss": flat.reshape(len(rows), k),
  }
  if generations is not None:
    out["rouge_l_recall"] = np.array([text.rouge_l(g, r["answer"])[1]
                                      for g, r in zip(generations, rows)])
  return out
