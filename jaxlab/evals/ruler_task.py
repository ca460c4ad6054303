"""Paper M's word-level RULER-like task: templates, examples, training rows.

Over the closed vocabulary of `jaxlab.data.word_tokenizer.WordTokenizer`:
multi-key NIAH with multi-token values, multi-value NIAH and variable
tracking (`long_context.ruler_example`), question first or last, filler
sentences of random words w0..w31. `config` is the experiment config (its
`task` section: tasks, question sides, lengths, keys, values, hops, counts,
seeds).
"""

import dataclasses

import numpy as np

from jaxlab.data.word_tokenizer import FILLER_WORDS, KEYS, VAR_NAMES
from jaxlab.evals import long_context as lc

HELD_OUT_SEED = 999_999
TEMPLATES = lc.RulerTemplates(
    filler="", keys=KEYS, value_alphabet="0123456789", value_len=4,
    value_sep=" , ", needle="{key} : {value} . ", question="? {key} . ",
    answer_lead="? {key} : ", multivalue_question="?? {key} . ",
    multivalue_lead="?? {key} : ", var_names=VAR_NAMES,
    vt_first="{name} = {value} . ", vt_next="{name} = {prev} . ",
    vt_question="?= {value} . ", vt_lead="?= {value} : ", name_sep=" ",
    question_first_lead="answer : ")


def word_templates(rng: np.random.Generator,
                   length: int) -> lc.RulerTemplates:
  """`TEMPLATES` with a filler of length // 4 + 4 random 3-6-word sentences."""
  sentences = [" ".join(FILLER_WORDS[j] for j in
                        rng.integers(0, len(FILLER_WORDS),
                                     rng.integers(3, 7))) + " . "
               for _ in range(length // 4 + 4)]
  return dataclasses.replace(TEMPLATES, filler="".join(sentences))


def make_example(tok, rng: np.random.Generator, *, task: str,
                 question_first: bool, length: int, config
                 ) -> lc.RulerExample:
  t = config.task
  return lc.ruler_example(
      task, tok, length=length, depth=float(rng.uniform()), rng=rng,
      question_first=question_first, num_keys=int(t.num_keys),
      num_values=int(t.num_values), num_hops=int(t.num_hops),
      templates=dataclasses.replace(word_templates(rng, length),
                                    value_len=int(t.value_len)))


def training_arrays(tok, config, seed: int) -> dict[str, np.ndarray]:
  """Prompt + answer + EOS rows (random lengths), loss on answer and EOS."""
  t = config.task
  rng = np.random.default_rng([int(t.data_seed), int(seed)])
  rows = []
  for _ in range(int(t.train_examples)):
    task = t.tasks[rng.integers(len(t.tasks))]
    qf = bool(t.question_first[rng.integers(len(t.question_first))])
    length = int(rng.integers(int(t.min_train_length), int(t.length) + 1))
    while True:
      try:
        ex = make_example(tok, rng, task=task, question_first=qf,
                          length=length, config=config)
        break
      except ValueError:
        length += 16
    rows.append((ex.prompt_ids, np.append(ex.answer_ids, tok.EOS)))
  width = max(len(p) + len(a) for p, a in rows)
  seq = np.full((len(rows), width), tok.PAD, np.int32)
  mask = np.zeros((len(rows), width), bool)
  for i, (p, a) in enumerate(rows):
    seq[i, :len(p)] = p
    seq[i, len(p):len(p) + len(a)] = a
    mask[i, len(p):len(p) + len(a)] = True
  return {"inputs": seq[:, :-1], "targets": seq[:, 1:],
          "loss_mask": mask[:, 1:]}


def held_out(tok, config) -> list[lc.RulerExample]:
  """`task.samples` prompts of `task.length` per task and question side."""
  t = config.task
  out = []
  for ti, task in enumerate(t.tasks):
    for qi, qf in enumerate(t.question_first):
      rng = np.random.default_rng([HELD_OUT_SEED, ti, qi])
      out += [make_example(tok, rng, task=task, question_first=bool(qf),
                           length=int(t.length), config=config)
              for _ in range(int(t.samples))]
  return out
