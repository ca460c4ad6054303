r"""RULER's needle-in-a-haystack rows, written as its generator writes them.

RULER (Hsieh et al. 2024, github.com/NVIDIA/RULER) does not release data: its
`scripts/data/prepare.py` generates each task's rows for a tokenizer and a
`max_seq_length` into `<save_dir>/<task>/<subset>.jsonl`. This module
writes the `niah` tasks of its `synthetic.yaml` in that layout, so a
machine without RULER's dependencies (nemo, wonderwords, the essays) gets
rows that `jaxlab.experiments.rope_extension` (`config.ruler.path`) and
`jaxlab.evals.long_context.ruler_row_score` read like RULER's own:

    python -m jaxlab.experiments.ruler_rows /tmp/ruler \
        --tokenizer=smollm2-135m-instruct --max_seq_length 12288 --num_samples 8

What follows RULER (`scripts/data/synthetic/niah.py`, `constants.py`,
`synthetic.yaml`, prepare.py's `base` template):
  * `niah_single_1`: the "noise" haystack (RULER's repeated sentence block,
    one per line) with one needle "One of the special magic numbers for
    {key} is: {value}." at a uniformly drawn line; the value a random
    7-digit number; the task template and answer prefix in their singular
    form (RULER rewrites "Some ... are" to "A ... is" for one needle).
  * the number of haystack lines: the largest (binary search) whose prompt
    plus the task's `tokens_to_generate` (128) fits `max_seq_length`, the
    prompt counted with the tokenizer's own tokens (no special tokens);
  * each row's fields: `index`, `input` (the prompt up to the answer
    prefix), `outputs` (the value), `length` (tokens of prompt and prefix
    plus `tokens_to_generate`), `length_w_model_temp`, `answer_prefix`,
    `token_position_answer`; Python's `random` seeded with `random_seed`
    (RULER's default 42).

What does not: RULER draws a key as an adjective-noun pair from
wonderwords' word lists; here from `ADJECTIVES` x `NOUNS` below (the key
only names the needle; [inferred]). The rows are therefore RULER's layout
and protocol, not byte-for-byte RULER's rows.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

# RULER scripts/data/synthetic/constants.py (niah) and niah.py.
TEMPLATE = ("Some special magic {type_needle_v} are hidden within the "
            "following text. Make sure to memorize it. I will quiz you about "
            "the {type_needle_v} afterwards.\n{context}\nWhat are all the "
            "special magic {type_needle_v} for {query} mentioned in the "
            "provided text?")
ANSWER_PREFIX = (" The special magic {type_needle_v} for {query} mentioned "
                 "in the provided text are")
TOKENS_TO_GENERATE = 128
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NOISE = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
         "There and back again.")
# Haystack lines added per step of the first size estimate (RULER's
# `incremental` for the noise haystack; 5 below 4096 tokens).
INCREMENTAL = 25

# Key words [inferred]: RULER's are wonderwords adjective-noun pairs.
ADJECTIVES = ("ancient", "bright", "calm", "daring", "eager", "fancy",
              "gentle", "hollow", "icy", "jolly", "keen", "lively", "mellow",
              "nimble", "odd", "proud", "quiet", "rapid", "silent", "tidy",
              "upbeat", "vivid", "witty", "young", "zesty")
NOUNS = ("anchor", "badger", "candle", "dolphin", "engine", "falcon",
         "garden", "harbor", "island", "jacket", "kettle", "lantern",
         "meadow", "needle", "orchard", "pepper", "quarry", "river",
         "saddle", "tunnel", "violin", "walnut", "yacht", "zeppelin")

TASKS = ("niah_single_1",)


def _singular(text: str) -> str:
  """RULER's rewrite of the template for one needle and one value."""
  for a, b in (("Some", "A"), ("are all", "is"), ("are", "is"),
               ("answers", "answer")):
    text = text.replace(a, b)
  return text


def _key(rng: random.Random) -> str:
  return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def _number(rng: random.Random, digits: int = 7) -> str:
  return str(rng.randint(10 ** (digits - 1), 10 ** digits - 1))


def _prompt(rng: random.Random, num_haystack: int) -> tuple[str, list[str]]:
  """RULER's `generate_input_output` for niah_single_1: (text, answers)."""
  key, value = _key(rng), _number(rng)
  needle = NEEDLE.format(type_needle_v="numbers", key=key, value=value)
  sentences = [NOISE] * num_haystack
  sentences.insert(rng.sample(range(num_haystack), 1)[0], needle)
  text = _singular(TEMPLATE + ANSWER_PREFIX).format(
      type_needle_v="number", context="\n".join(sentences), query=key)
  return text, [value]


def niah_rows(count_tokens: Callable[[str], int], *, max_seq_length: int,
              num_samples: int, random_seed: int = 42,
              tokens_to_generate: int = TOKENS_TO_GENERATE,
              task: str = "niah_single_1") -> list[dict[str, Any]]:
  """`num_samples` rows of `task`, as RULER's niah.py `generate_samples`.

  Args:
    count_tokens: the tokenizer's token count of a text (no special tokens).
    max_seq_length: the row budget: prompt, answer prefix and
      `tokens_to_generate` together.
    num_samples: rows to write.
    random_seed: seeds Python's `random` (RULER's `--random_seed`).
    tokens_to_generate: the task's answer budget (RULER's 128 for niah).
    task: a RULER niah task of `TASKS`.
  """
  if task not in TASKS:
    raise ValueError(f"task {task!r}: this writer has {TASKS}")
  rng = random.Random(random_seed)
  incremental = INCREMENTAL if max_seq_length >= 4096 else 5
  sample, _ = _prompt(rng, incremental)
  per_line = count_tokens(sample) / incremental
  lo, hi = incremental, max(int(max_seq_length / per_line * 3),
                            incremental * 2)
  best = None
  while lo <= hi:  # the largest haystack that fits (RULER's binary search)
    mid = (lo + hi) // 2
    text, _ = _prompt(rng, mid)
    if count_tokens(text) + tokens_to_generate <= max_seq_length:
      best, lo = mid, mid + 1
    else:
      hi = mid - 1
  if best is None:
    raise ValueError(f"max_seq_length={max_seq_length} cannot hold a "
                     f"{task} prompt of {incremental} haystack lines and "
                     f"{tokens_to_generate} answer tokens")
  prefix_start = _singular(ANSWER_PREFIX)[:10]
  rows = []
  for _ in range(int(num_samples)):
    used = best
    while True:
      text, answers = _prompt(rng, used)
      length = count_tokens(text) + tokens_to_generate
      if length <= max_seq_length or used <= incremental:
        break
      used -= incremental
    cut = text.rfind(prefix_start)
    prompt, answer_prefix = text[:cut], text[cut:]
    index = prompt.find(answers[0])
    rows.append({"index": index, "input": prompt, "outputs": answers,
                 "length": length, "length_w_model_temp": length,
                 "answer_prefix": answer_prefix,
                 "token_position_answer": count_tokens(prompt[:index])})
  return rows


def write(dest: str, count_tokens: Callable[[str], int], *,
          max_seq_lengths: Sequence[int], num_samples: int,
          random_seed: int = 42, subset: str = "validation",
          task: str = "niah_single_1") -> str:
  """Writes `dest/<task>/<subset>.jsonl`: `num_samples` rows per length.

  Several `max_seq_lengths` go to one file (RULER writes one directory per
  length; `config.ruler.path` points at one file or one directory, and the
  experiment groups rows by their `length`). Returns the file's path.
  """
  path = os.path.join(dest, task, f"{subset}.jsonl")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for i, n in enumerate(max_seq_lengths):
      for row in niah_rows(count_tokens, max_seq_length=int(n),
                           num_samples=num_samples,
                           random_seed=random_seed + i, task=task):
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
  return path
