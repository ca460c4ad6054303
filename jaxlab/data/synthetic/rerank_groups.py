"""Paper A's training groups and held-out candidate lists, as model inputs.

The reranker experiment's data side: the tokenizer (`make_tokenizer`), the
multimodal training source (`GroupSource`: one `collate_groups`-ed group of
`jaxlab.data.synthetic.retrieval.SyntheticRetrieval` per index), the held-out
candidate prompts (`eval_inputs`) and the embedding miniature's sources
(`embedding_source`, `embedding_eval_inputs`). Sits with `data.synthetic`
(above `models`) because a group is collated with the reranker's prompt
format (`jaxlab.models.reranker.collate_groups`).
"""

from __future__ import annotations

import numpy as np

from jaxlab.data import rerank_tokens
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import retrieval as synth
from jaxlab.models import reranker as rr


def make_tokenizer(config) -> tokenizers.Tokenizer:
  """Byte tokenizer with specials, or an imported model's sentencepiece."""
  if config.data.tokenizer == "sentencepiece":
    return tokenizers.SentencePieceTokenizer(config.data.tokenizer_path)
  if config.data.tokenizer != "byte":
    raise ValueError(f"data.tokenizer={config.data.tokenizer!r}; valid: "
                     "byte, sentencepiece")
  words = synth.VOCAB_WORDS if config.task.word_tokens else ()
  return rerank_tokens.make_tokenizer(words=words)


def retrieval_source(task, size: int, seed: int, n_neg: int
                     ) -> synth.SyntheticRetrieval:
  """`SyntheticRetrieval` with the `config.task` section's fields."""
  return synth.SyntheticRetrieval(
      int(size), seed=int(seed), tasks=tuple(task.tasks.split(",")),
      num_negatives=int(n_neg), hard_fraction=float(task.hard_fraction),
      image_size=int(task.image_size), doc_style=int(task.doc_style))


class GroupSource:
  """Random-access training groups: dicts of `[G, ...]` numpy arrays."""

  def __init__(self, synth_source, tok, rcfg, template, max_len,
               image_token=rr.IMAGE_TOKEN):
    self.src, self.tok, self.rcfg = synth_source, tok, rcfg
    self.image_token = image_token
    self.template, self.max_len = template, max_len

  def __len__(self):
    return len(self.src)

  def __getitem__(self, i):
    ex = self.src[i]
    batch = rr.collate_groups(
        [(ex["instruction"], ex["query"], ex["positives"] + ex["negatives"])],
        self.tok, self.rcfg, self.template, max_len=self.max_len,
        image_token=self.image_token)
    return {k: v[0] for k, v in batch.items()}


def eval_inputs(config, tok, rcfg, template):
  """Flattened candidate prompts `[Q*C, 1, ...]` and labels `[Q, C]`."""
  t = config.task
  src = retrieval_source(t, t.eval_queries, t.eval_seed,
                         int(t.eval_candidates) - 1)
  groups, labels, tasks = [], [], []
  for i in range(len(src)):
    ex, cands, lab = synth.eval_candidates(src, i)
    groups.append((ex["instruction"], ex["query"], cands))
    labels.append(lab)
    tasks.append(ex["task"])
  batch = rr.collate_groups(groups, tok, rcfg, template,
                            max_len=int(config.prompt.max_len),
                            image_token=config.reranker.labels.image_token)
  flat = {k: v.reshape((-1, 1) + v.shape[2:]) for k, v in batch.items()}
  return flat, np.stack(labels), np.array(tasks)


def embedding_source(config, size, seed, n_neg):
  """The embedding miniature's groups (`config.embedding` section)."""
  e = config.embedding
  return synth.EmbeddingRetrieval(
      size, seed=seed, embed_dim=int(e.embed_dim), num_negatives=int(n_neg),
      hard_fraction=float(config.task.hard_fraction),
      pos_noise=float(e.pos_noise), hard_noise=float(e.hard_noise))


def embedding_eval_inputs(config):
  """Held-out embedding queries with shuffled candidates, and labels."""
  t = config.task
  src = embedding_source(config, int(t.eval_queries), int(t.eval_seed),
                         int(t.eval_candidates) - 1)
  qs, docs, labels = [], [], []
  for i in range(len(src)):
    ex = src[i]
    order = np.random.default_rng((int(t.eval_seed), i, 1)).permutation(
        len(ex["docs"]))
    qs.append(ex["query"])
    docs.append(ex["docs"][order])
    labels.append((order == 0).astype(np.int32))
  return {"query": np.stack(qs), "docs": np.stack(docs)}, np.stack(labels)
