"""TOFU as released (locuslab/TOFU) for unlearning runs: splits and prompts.

The dataset card (huggingface.co/datasets/locuslab/TOFU, README `configs:`)
declares one config per JSON-lines file, each with a `train` split:
`full`, `forget01/05/10`, `retain99/95/90`, `world_facts`, `real_authors`,
`forget01/05/10_perturbed`, `retain_perturbed`, `world_facts_perturbed`,
`real_authors_perturbed`, ...; every row has `question` and `answer`, the
`*_perturbed` rows also `perturbed_answer` (a list) and, for the forget and
retain sets, `paraphrased_question` and `paraphrased_answer`. `read` loads
what PMC's official code loads (github.com/yascho/partial-model-collapse-
unlearning, unlearning/dataloader.py `load_datasets`): the forget split
named by `data.subset`, its retain split (`RETAIN_OF`: forget10 ->
retain90), the paraphrased forget set (`<forget>_perturbed` with
`paraphrased_question` / `paraphrased_answer` as question / answer),
`world_facts`, `real_authors`, and the retain set's evaluation subsample
(400 rows drawn with `np.random.default_rng(12345).integers`, with
replacement, when it has more than 400 rows). Any `data.path` layout
`jaxlab.data.hf_source` reads works (a Hub id, a local copy with the card's
configs, or files named after the subsets).

`prompt_fn` formats a question as PMC's code does (unlearning/encoding.py):
the checkpoint's chat template with a system prompt (the Llama-3.2-Instruct
setting) when its tokenizer has one, else the question / answer tags of its
Phi-1.5 config ("Question: {q}\\nAnswer: ").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

RETAIN_OF = {"forget01": "retain99", "forget05": "retain95",
             "forget10": "retain90"}
# The retain subsample of PMC's evaluation (dataloader.py, full_eval=False).
RETAIN_EVAL_SIZE = 400
RETAIN_EVAL_SEED = 12345


@dataclasses.dataclass(frozen=True)
class QA:
  question: str
  answer: str


@dataclasses.dataclass
class Splits:
  """The rows an unlearning run reads (QA lists) and how many per subset."""
  forget: list[QA]
  forget_paraphrased: list[QA]
  retain: list[QA]
  retain_eval: list[QA]
  world: list[QA]
  real_authors: list[QA]
  rows: dict[str, int]  # subset as released -> rows read
  perturbed: dict[str, Any] = dataclasses.field(default_factory=dict)


def retain_split(forget: str) -> str:
  """The retain split released with forget split `forget`."""
  if forget not in RETAIN_OF:
    raise ValueError(f"data.subset={forget!r} is not a TOFU forget split; "
                     f"valid: {', '.join(RETAIN_OF)}")
  return RETAIN_OF[forget]


def retain_eval_indices(n: int, size: int = RETAIN_EVAL_SIZE,
                        seed: int = RETAIN_EVAL_SEED) -> list[int]:
  """Rows of the retain set PMC evaluates on: all when n <= size, else
  `size` draws of `default_rng(seed).integers(0, n)` (with replacement)."""
  if n <= size:
    return list(range(n))
  return [int(i) for i in np.random.default_rng(seed).integers(0, n, size)]


def _qa(rows, q="question", a="answer") -> list[QA]:
  missing = [k for k in (q, a) if rows and k not in rows[0]]
  if missing:
    raise ValueError(f"TOFU rows lack {missing}; their columns are "
                     f"{sorted(rows[0])}")
  return [QA(str(r[q]), str(r[a])) for r in rows]


def read(data_cfg, *, perturbed_tasks: dict[str, str] | None = None,
         max_rows: int | None = None, retain_eval_size: int = RETAIN_EVAL_SIZE,
         retain_eval_seed: int = RETAIN_EVAL_SEED) -> Splits:
  """The TOFU splits of `config.data` (`data.subset` = the forget split).

  Args:
    data_cfg: `config.data` (`source` "hf", `path`, `subset`, `split`,
      `max_rows`, `cache_dir`), read with `pipeline.read_split`.
    perturbed_tasks: task -> released subset of TOFU's own evaluation
      (`jaxlab.evals.tofu.TASKS`, "{forget}" filled in); their rows are
      kept whole in `Splits.perturbed` (capped by `max_rows`).
    max_rows: cap of the perturbed tasks' rows (None: `data.max_rows`).
  """
  from jaxlab.data import pipeline  # pylint: disable=g-import-not-at-top
  forget = data_cfg.get("subset", "") or ""
  retain = retain_split(forget)
  split = data_cfg.get("split", "train") or "train"
  read_rows = lambda s, **kw: pipeline.read_split(data_cfg, split,  # pylint: disable=g-long-lambda
                                                  subset=s, **kw)
  rows, counts = {}, {}
  for s in (forget, retain, f"{forget}_perturbed", "world_facts",
            "real_authors"):
    rows[s] = read_rows(s)
    counts[s] = len(rows[s])
  r_all = _qa(rows[retain])
  out = Splits(
      forget=_qa(rows[forget]),
      forget_paraphrased=_qa(rows[f"{forget}_perturbed"],
                             "paraphrased_question", "paraphrased_answer"),
      retain=r_all,
      retain_eval=[r_all[i] for i in retain_eval_indices(
          len(r_all), retain_eval_size, retain_eval_seed)],
      world=_qa(rows["world_facts"]), real_authors=_qa(rows["real_authors"]),
      rows=counts)
  for task, subset in (perturbed_tasks or {}).items():
    subset = subset.format(forget=forget)
    got = rows.get(subset)
    if got is None or (max_rows is not None and len(got) > max_rows):
      got = read_rows(subset, **({} if max_rows is None
                                 else {"max_rows": max_rows}))
    out.perturbed[task] = [dict(r) for r in got]
    counts[subset] = max(counts.get(subset, 0), len(got))
  return out


def prompt_fn(tokenizer, *, system_prompt: str = "",
              chat_kwargs: dict[str, Any] | None = None,
              question_start_tag: str = "Question: ",
              question_end_tag: str = "\n", answer_tag: str = "Answer: ",
              use_chat_template: bool = True) -> Callable[[str], str]:
  """question -> the prompt text the model continues with the answer.

  With a chat template (and `use_chat_template`): the rendering of
  [system (when `system_prompt`), user question] with the generation
  prompt, `chat_kwargs` as template variables (Llama 3's `date_string`),
  without the leading special tokens the tokenizer adds itself
  (`encode(..., add_bos=True)` puts them back once). Otherwise
  `question_start_tag + q + question_end_tag + answer_tag` (PMC's Phi-1.5
  tags; the answer tag is part of the prompt here [inferred: PMC trains on
  it as part of the answer]).
  """
  template = getattr(tokenizer, "chat_template", None)
  if use_chat_template and template:
    kw = dict(chat_kwargs or {})
    prefix = tokenizer.decode(tokenizer.bos_prefix) if getattr(
        tokenizer, "bos_prefix", None) else ""

    def chat(question: str) -> str:
      msgs = ([{"role": "system", "content": system_prompt}]
              if system_prompt else [])
      msgs.append({"role": "user", "content": question})
      text = tokenizer.render_chat(msgs, add_generation_prompt=True, **kw)
      return text[len(prefix):] if prefix and text.startswith(prefix) else text
    return chat
  return lambda q: f"{question_start_tag}{q}{question_end_tag}{answer_tag}"
