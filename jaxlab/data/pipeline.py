"""grain pipelines: LM examples (packed or padded) and sharded batches.

    examples = lm_examples(texts, tokenizer, seq_len=128, mode="pack")
    ds = batched_dataset(examples, global_batch=32, seed=0)   # MapDataset
    it = iter(ds); it.get_state() / it.set_state(...)         # checkpointable

An LM example is a dict of `[T]` numpy arrays: `inputs`, `targets` (next
token), `loss_mask` (1 on real targets), `segment_ids` (1.. per packed
document, 0 = padding) and `positions` (restart at 0 in each document).
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grain
import jax
import numpy as np

from jaxlab import registry

# `config.data.source` names beyond the built-in synthetic / jsonl /
# chat_jsonl / tfds: `fn(data_cfg, *, seq_len, tokenizer) -> (train examples,
# eval examples or None)`, registered from the source's own module of
# `jaxlab.data` (found by package walk, plugin directories included):
#
#     @pipeline.register_source("counting")
#     def counting(data_cfg, *, seq_len, tokenizer): ...
SOURCES: registry.Registry[Callable[..., tuple[Any, Any]]] = registry.Registry(
    "data source")
register_source = SOURCES.register
BUILTIN_SOURCES = ("synthetic", "jsonl", "chat_jsonl", "tfds")


def get_source(name: str) -> Callable[..., tuple[Any, Any]]:
  """A registered data source (discovering `jaxlab.data`'s modules first
  when `name` is not registered yet); unknown: one error listing all."""
  if name not in SOURCES:
    registry.import_package_modules("jaxlab.data")
  if name not in SOURCES:
    raise ValueError(f"data.source={name!r}; valid: "
                     f"{', '.join(BUILTIN_SOURCES + SOURCES.names())}")
  return SOURCES.get(name)

MODES = ("pack", "pad")


def _empty(seq_len: int, pad_id: int) -> dict[str, np.ndarray]:
  return {"inputs": np.full(seq_len, pad_id, np.int32),
          "targets": np.full(seq_len, pad_id, np.int32),
          "loss_mask": np.zeros(seq_len, np.float32),
          "segment_ids": np.zeros(seq_len, np.int32),
          "positions": np.zeros(seq_len, np.int32)}


def _pieces(ids: Sequence[int], seq_len: int) -> Iterable[slice]:
  """Chunks of <= seq_len + 1 tokens (overlapping by one) of one document."""
  for start in range(0, max(len(ids) - 1, 1), seq_len):
    if len(ids[start:start + seq_len + 1]) >= 2:
      yield slice(start, start + seq_len + 1)


def lm_examples(token_lists: Iterable[Sequence[int]], *, seq_len: int,
                pad_id: int, mode: str = "pack",
                token_masks: Iterable[Sequence[int]] | None = None
                ) -> list[dict[str, np.ndarray]]:
  """Token lists -> fixed-length LM examples (greedy in-order packing).

  `pack` fills each row with consecutive documents (segment ids keep them
  from attending to each other); `pad` puts one document chunk per row.
  `token_masks` (one 0/1 list per document, aligned with its tokens) limits
  the loss to targets whose mask is 1 (e.g. the assistant turns of a chat);
  None trains on every target.
  """
  if mode not in MODES:
    raise ValueError(f"data.packing={mode!r}; valid: {', '.join(MODES)}")
  token_lists = list(token_lists)
  masks = (list(token_masks) if token_masks is not None
           else [None] * len(token_lists))
  if len(masks) != len(token_lists):
    raise ValueError(f"{len(masks)} token masks for {len(token_lists)} "
                     "documents")
  rows, row, fill, seg = [], None, 0, 0
  for ids, doc_mask in zip(token_lists, masks):
    if doc_mask is not None and len(doc_mask) != len(ids):
      raise ValueError(f"a token mask of length {len(doc_mask)} for a "
                       f"document of {len(ids)} tokens")
    for chunk in _pieces(ids, seq_len):
      piece = list(ids[chunk])
      n = len(piece) - 1
      if row is None or mode == "pad" or fill + n > seq_len:
        if row is not None:
          rows.append(row)
        row, fill, seg = _empty(seq_len, pad_id), 0, 0
      seg += 1
      sl = slice(fill, fill + n)
      row["inputs"][sl] = piece[:-1]
      row["targets"][sl] = piece[1:]
      row["loss_mask"][sl] = 1.0 if doc_mask is None else np.asarray(
          doc_mask[chunk][1:], np.float32)
      row["segment_ids"][sl] = seg
      row["positions"][sl] = np.arange(n)
      fill += n
  if row is not None:
    rows.append(row)
  return rows


def tokenize(texts: Iterable[str], tokenizer) -> list[list[int]]:
  return [tokenizer.encode(t, add_bos=True, add_eos=True) for t in texts]


def lazy_padded_examples(texts: Sequence[str], tokenizer, *, seq_len: int
                         ) -> grain.MapDataset:
  """Padded LM examples tokenized on the fly (for large TFDS sources)."""
  def one(text):
    ids = tokenizer.encode(text, add_bos=True, add_eos=True)[:seq_len + 1]
    return lm_examples([ids], seq_len=seq_len, pad_id=tokenizer.pad_id,
                       mode="pad")[0]
  return grain.MapDataset.source(texts).map(one)


class _ProcessRows(grain.MapDataset):
  """This process's rows of each global batch of a (shuffled) stream.

  Element `j` is stream element `(j // n) * global_batch + rows[j % n]` with
  `n = len(rows)`: batches of `n` consecutive elements are this process's
  rows of consecutive global batches. Random access, so a process reads only
  its own examples and the iterator state is a plain index.
  """

  def __init__(self, parent: grain.MapDataset, global_batch: int,
               rows: Sequence[int]):
    super().__init__(parent)
    self._global_batch = global_batch
    self._rows = np.asarray(rows, np.int64)
    self._length = (len(parent) // global_batch) * len(self._rows)

  def __len__(self) -> int:
    return self._length

  def _index(self, index: int) -> int:
    step, k = divmod(int(index), len(self._rows))
    return step * self._global_batch + int(self._rows[k])

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    return self._parent[self._index(index)]

  def _getitems(self, indices: Sequence[int]):
    return self._parent._getitems([self._index(i) for i in indices])  # pylint: disable=protected-access

  def __str__(self) -> str:
    return f"ProcessRows(global_batch={self._global_batch}, n={len(self._rows)})"


def batched_dataset(examples: Sequence[Any] | grain.MapDataset, *,
                    global_batch: int, seed: int, shuffle: bool = True,
                    repeat: bool = True, process_index: int | None = None,
                    process_count: int | None = None,
                    local_rows: Sequence[int] | None = None,
                    transform: Callable[[Any], Any] | None = None
                    ) -> grain.MapDataset:
  """This process's batches: its rows of each global batch.

  One global stream for every process count: the examples are shuffled with
  a fixed seed (a new permutation each epoch) and repeated; global batch `s`
  is stream elements `[s * global_batch, (s + 1) * global_batch)`. A process
  reads only its rows of it: `local_rows` (indices within a global batch, in
  the order `jax.make_array_from_process_local_data` expects, see
  `parallel.mesh.process_batch_rows`), by default rows `process_index::
  process_count`. So the assembled global batch, and the training run, are
  identical whatever the number of processes. Batches keep a static shape
  (`drop_remainder`). The result is a `MapDataset`, so `iter(ds)` is a
  checkpointable `DatasetIterator` whose state is the number of batches read.
  """
  if int(global_batch) < 1:
    raise ValueError(f"batch size {global_batch} must be at least 1 "
                     "(train.batch_size, train.eval_batch_size)")
  pi = jax.process_index() if process_index is None else process_index
  pc = jax.process_count() if process_count is None else process_count
  if local_rows is None:
    if global_batch % pc:
      raise ValueError(f"train.batch_size={global_batch} must be divisible "
                       f"by the number of processes ({pc})")
    local_rows = range(pi, global_batch, pc)
  local_rows = list(local_rows)
  if not local_rows or min(local_rows) < 0 or max(local_rows) >= global_batch:
    raise ValueError(f"local_rows must be non-empty indices in [0, "
                     f"{global_batch}), got {local_rows}")
  ds = examples if isinstance(examples, grain.MapDataset) else (
      grain.MapDataset.source(examples))
  if transform is not None:
    ds = ds.map(transform)
  if len(ds) < global_batch:
    raise ValueError(f"dataset has {len(ds)} examples, fewer than one batch "
                     f"({global_batch}); lower train.batch_size")
  if shuffle:
    ds = ds.seed(seed).shuffle()
  if repeat:
    ds = ds.repeat()
  if local_rows != list(range(global_batch)):
    ds = _ProcessRows(ds, global_batch, local_rows)
  return ds.batch(len(local_rows), drop_remainder=True)


def lm_sources(data_cfg, *, seq_len: int, tokenizer) -> tuple[Any, Any]:
  """(train examples, eval examples) for `config.data` of an LM run.

  `data.source`: `synthetic` (generated, `num_docs`), `jsonl` (`path`,
  optional `eval_path`, `text_key`), `chat_jsonl`, `tfds` (`tfds_name`,
  `data_dir`, `split`, `eval_split`) or a registered source
  (`register_source`). Without an explicit eval set, the last
  `eval_fraction` of documents is held out.
  """
  from jaxlab.data import sources  # pylint: disable=g-import-not-at-top
  kind = data_cfg.get("source", "synthetic")
  mode = data_cfg.get("packing", "pack")
  text_key = data_cfg.get("text_key", "text")
  eval_texts = None
  if kind == "synthetic":
    texts = sources.synthetic_corpus(int(data_cfg.get("num_docs", 2000)),
                                     seed=int(data_cfg.get("data_seed", 0)))
  elif kind == "chat_jsonl":
    return _chat_sources(data_cfg, seq_len=seq_len, tokenizer=tokenizer,
                         mode=mode)
  elif kind == "jsonl":
    if not data_cfg.get("path"):
      raise ValueError("data.source='jsonl' needs data.path")
    texts = sources.read_jsonl(data_cfg.path, text_key=text_key)
    if data_cfg.get("eval_path"):
      eval_texts = sources.read_jsonl(data_cfg.eval_path, text_key=text_key)
  elif kind == "tfds":
    name, data_dir = data_cfg.get("tfds_name"), data_cfg.get("data_dir")
    if not name:
      raise ValueError("data.source='tfds' needs data.tfds_name")
    train = sources.tfds_source(name, split=data_cfg.get("split", "train"),
                                data_dir=data_dir, text_key=text_key)
    ev = None
    if data_cfg.get("eval_split"):
      ev = lazy_padded_examples(
          sources.tfds_source(name, split=data_cfg.eval_split,
                              data_dir=data_dir, text_key=text_key),
          tokenizer, seq_len=seq_len)
    return lazy_padded_examples(train, tokenizer, seq_len=seq_len), ev
  else:
    return get_source(kind)(data_cfg, seq_len=seq_len, tokenizer=tokenizer)
  if eval_texts is None:
    frac = float(data_cfg.get("eval_fraction", 0.05))
    n_eval = int(len(texts) * frac)
    if n_eval:
      texts, eval_texts = texts[:-n_eval], texts[-n_eval:]
  make = lambda t: lm_examples(tokenize(t, tokenizer), seq_len=seq_len,
                               pad_id=tokenizer.pad_id, mode=mode)
  return make(texts), (make(eval_texts) if eval_texts else None)


def chat_examples(conversations: Iterable[Any], tokenizer, *, seq_len: int,
                  mode: str = "pad",
                  template_kwargs: dict[str, Any] | None = None
                  ) -> list[dict[str, np.ndarray]]:
  """Chat conversations -> LM examples with the loss on assistant tokens.

  Each conversation (a message list, or a `sources.read_chat_rows` row whose
  `tools`/`documents` join `template_kwargs`) is rendered with the
  tokenizer's chat template (`HFTokenizer.chat_loss_mask`): system/user
  turns and the template's role headers are context, the assistant turns
  (end-of-turn tokens included) are targets.
  """
  if not hasattr(tokenizer, "chat_loss_mask"):
    raise ValueError(
        "data.source='chat_jsonl' needs a checkpoint tokenizer with a chat "
        f"template (data.tokenizer='auto' or 'hf'), got "
        f"{type(tokenizer).__name__}")
  ids, masks = [], []
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  for conv in conversations:
    messages = conv["messages"] if isinstance(conv, dict) else conv
    doc_ids, doc_mask = tokenizer.chat_loss_mask(
        messages, **tokenizers.row_template_kwargs(conv, template_kwargs))
    ids.append(doc_ids)
    masks.append(doc_mask)
  return lm_examples(ids, seq_len=seq_len, pad_id=tokenizer.pad_id,
                     mode=mode, token_masks=masks)


def _chat_sources(data_cfg, *, seq_len: int, tokenizer, mode: str):
  from jaxlab.data import sources  # pylint: disable=g-import-not-at-top
  if not data_cfg.get("path"):
    raise ValueError("data.source='chat_jsonl' needs data.path (JSONL, one "
                     "conversation per line under data.chat_key)")
  key = data_cfg.get("chat_key", "messages")
  convs = sources.read_chat_rows(data_cfg.path, key=key)
  eval_convs = None
  if data_cfg.get("eval_path"):
    eval_convs = sources.read_chat_rows(data_cfg.eval_path, key=key)
  else:
    n_eval = int(len(convs) * float(data_cfg.get("eval_fraction", 0.05)))
    if n_eval:
      convs, eval_convs = convs[:-n_eval], convs[-n_eval:]
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  kwargs = tokenizers.template_kwargs(data_cfg.get("chat_template_kwargs"),
                                      field="data.chat_template_kwargs")
  make = lambda c: chat_examples(c, tokenizer, seq_len=seq_len, mode=mode,
                                 template_kwargs=kwargs)
  return make(convs), (make(eval_convs) if eval_convs else None)
