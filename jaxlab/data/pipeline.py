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
from jaxlab.data import sources

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


class _BoundedPrefetch(grain.MapDataset):
  """A batch `MapDataset` whose `iter()` reads at most `buffer` batches ahead.

  `MapDataset.__iter__` prefetches with grain's default `ReadOptions`
  (16 threads, 500 elements ahead). For a dataset of whole batches that is
  500 batches computed before step 1 needs them, and, for a repeated stream,
  500 more still computed by an abandoned iterator after a short run ends:
  on a small host (2 cores) that work took a third of the CPU of runs with a
  few steps. Iterating this dataset instead keeps `buffer` batches in flight
  on `threads` threads; its iterator is the same checkpointable
  `PrefetchDatasetIterator` (state `{"next_index": ...}`).
  """

  def __init__(self, parent: grain.MapDataset, *, threads: int, buffer: int):
    super().__init__(parent)
    self._options = grain.ReadOptions(num_threads=int(threads),
                                      prefetch_buffer_size=int(buffer))

  def __len__(self) -> int:
    return len(self._parent)

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    return self._parent[index]

  def _getitems(self, indices: Sequence[int]):
    return self._parent._getitems(indices)  # pylint: disable=protected-access

  def __iter__(self):
    return self._parent.to_iter_dataset(self._options).__iter__()

  def __str__(self) -> str:
    return (f"BoundedPrefetch(threads={self._options.num_threads}, "
            f"buffer={self._options.prefetch_buffer_size})")


def batched_dataset(examples: Sequence[Any] | grain.MapDataset, *,
                    global_batch: int, seed: int, shuffle: bool = True,
                    repeat: bool = True, process_index: int | None = None,
                    process_count: int | None = None,
                    local_rows: Sequence[int] | None = None,
                    transform: Callable[[Any], Any] | None = None,
                    prefetch: int = 4, read_threads: int = 0
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
  checkpointable `DatasetIterator` whose state is the number of batches read;
  it computes at most `prefetch` batches ahead on `read_threads` threads
  (0: as many as `prefetch`, at most 4), `data.prefetch` and
  `data.read_threads` in the trainer's config.
  """
  if int(prefetch) < 1:
    raise ValueError(f"data.prefetch={prefetch} must be at least 1 (batches "
                     "read ahead of the step)")
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
  if isinstance(examples, Documents):
    if examples.mode == "pack":
      # Packed rows have no index: each process packs its own share of the
      # rows into its rows of every global batch.
      if transform is not None:
        raise ValueError("transform is not supported on packed Documents")
      return examples.packed_batches(
          local_batch=len(local_rows), seed=seed, shuffle=shuffle,
          repeat=repeat, process_index=pi, process_count=pc)
    examples = examples.padded()
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
  ds = ds.batch(len(local_rows), drop_remainder=True)
  threads = int(read_threads) or min(int(prefetch), 4)
  return _BoundedPrefetch(ds, threads=threads, buffer=int(prefetch))


ROW_SOURCES = ("hf", "grain", "tfds")


def _split_rows(rows, frac: float):
  """(first rows, last `frac` of the rows) of a random-access source."""
  n = len(rows)
  k = int(n * frac)
  if not k:
    return rows, None
  if hasattr(rows, "select"):  # a datasets.Dataset: no copy
    return rows.select(range(n - k)), rows.select(range(n - k, n))
  return (grain.MapDataset.source(rows)[:n - k],
          grain.MapDataset.source(rows)[n - k:])


def read_split(data_cfg, split: str | None = None, *,
               subset: str | None = None, max_rows: int | None = None):
  """The rows of one split of `config.data` (hf / grain / tfds), untokenised.

  For experiments that read a released dataset row by row (a benchmark's
  questions, a forget set): a random-access sequence of dict rows in the
  dataset's own schema. `split` / `subset` / `max_rows` default to the
  config's `data.split` / `data.subset` / `data.max_rows` (`subset` lets an
  experiment read a companion subset, e.g. TOFU's retain set beside its
  forget set). For `grain`, `split` is ignored unless it is `eval_split`,
  which reads `data.eval_path`. Record what was read with
  `results.data_provenance(config, rows={split: len(rows)})`.
  """
  get = data_cfg.get
  kind = get("source", "")
  split = get("split", "train") if split is None else split
  subset = (get("subset", "") or "") if subset is None else subset
  max_rows = int(get("max_rows", 0) or 0) if max_rows is None else max_rows
  cache = get("cache_dir", "") or None
  if kind == "hf":
    from jaxlab.data import hf_source  # pylint: disable=g-import-not-at-top
    return hf_source.load_rows(get("path", ""), subset=subset, split=split,
                               max_rows=max_rows, cache_dir=cache)
  if kind == "grain":
    from jaxlab.data import grain_source  # pylint: disable=g-import-not-at-top
    path = (get("eval_path", "") if split and split == get("eval_split")
            else get("path", ""))
    return grain_source.load_rows(path, text_key=get("text_key", "text"),
                                  max_rows=max_rows, cache_dir=cache)
  if kind == "tfds":
    rows = sources.tfds_source(get("tfds_name", "") or get("path", ""),
                               split=split, data_dir=get("data_dir", ""),
                               text_key=None)
    return grain.MapDataset.source(rows)[:max_rows] if max_rows else rows
  raise ValueError(f"data.source={kind!r} has no released rows to read; "
                   f"use one of {', '.join(ROW_SOURCES)} with data.path")


def _row_sources(data_cfg, kind: str) -> tuple[Any, Any, dict[str, Any]]:
  """(train rows, eval rows or None, provenance) of an hf / grain / tfds
  source: rows are random-access sequences of dicts, nothing tokenised."""
  get = data_cfg.get
  max_rows = int(get("max_rows", 0) or 0)
  cache = get("cache_dir", "") or None
  path, subset = get("path", ""), get("subset", "") or ""
  split, eval_split = get("split", "train"), get("eval_split", "") or ""
  if kind == "hf":
    from jaxlab.data import hf_source  # pylint: disable=g-import-not-at-top
    load = lambda sp: hf_source.load_rows(path, subset=subset, split=sp,
                                          max_rows=max_rows, cache_dir=cache)
    train = load(split)
    ev = load(eval_split) if eval_split else None
    digest = hf_source.digest(path, subset, (split, eval_split) if eval_split
                              else (split,))
  elif kind == "grain":
    from jaxlab.data import grain_source  # pylint: disable=g-import-not-at-top
    if not path:
      raise ValueError("data.source='grain' needs data.path (globs of "
                       "ArrayRecord or Parquet files)")
    text_key = get("text_key", "text")
    train = grain_source.load_rows(path, text_key=text_key,
                                   max_rows=max_rows, cache_dir=cache)
    ev = None
    eval_path = get("eval_path", "")
    if eval_path:
      ev = grain_source.load_rows(eval_path, text_key=text_key,
                                  max_rows=max_rows, cache_dir=cache)
      eval_split = eval_split or "eval"
    digest = grain_source.digest([path] + ([eval_path] if eval_path else []))
  else:
    name, data_dir = get("tfds_name", "") or path, get("data_dir", "")
    if not name:
      raise ValueError("data.source='tfds' needs data.tfds_name")
    load = lambda sp: sources.tfds_source(name, split=sp, data_dir=data_dir,
                                          text_key=None)
    train, ev = load(split), (load(eval_split) if eval_split else None)
    if max_rows:
      train = grain.MapDataset.source(train)[:max_rows]
      ev = None if ev is None else grain.MapDataset.source(ev)[:max_rows]
    path, digest = name, None
  if ev is None:
    train, ev = _split_rows(train, float(get("eval_fraction", 0.05)))
    eval_split = f"{split}[held-out]" if ev is not None else ""
  rows = {split: len(train)}
  if ev is not None:
    rows[eval_split] = len(ev)
  prov = {"source": kind, "path": path, "subset": subset, "rows": rows,
          "digest": digest}
  return train, ev, prov


def lm_data(data_cfg, *, seq_len: int, tokenizer
            ) -> tuple[Any, Any, dict[str, Any]]:
  """(train examples, eval examples or None, provenance) for `config.data`.

  `data.source`: `synthetic` (generated, `num_docs`), `jsonl` (`path`,
  optional `eval_path`, `text_key`), `chat_jsonl`, `hf` (a Hub id or local
  copy: `path`, `subset`, `split`, `eval_split`; `hf_source`), `grain`
  (ArrayRecord / Parquet globs: `path`, `eval_path`; `grain_source`),
  `tfds` (`tfds_name`, `data_dir`, `split`, `eval_split`) or a registered
  source (`register_source`). `hf` / `grain` / `tfds` rows stay on disk and
  are tokenised lazily (`Documents`) in the layout `data.format` names
  (`row_formats`); the others are read and tokenised here. Without an
  explicit eval set, the last `eval_fraction` of rows is held out.
  `data.max_rows` (0: all) caps the rows read from each split.

  The provenance is what `results.json` records as `data`: `{"source",
  "path", "subset", "rows": {split: rows read}, "digest"}`.
  """
  kind = data_cfg.get("source", "synthetic")
  mode = data_cfg.get("packing", "pack")
  text_key = data_cfg.get("text_key", "text")
  max_rows = int(data_cfg.get("max_rows", 0) or 0)
  cap = lambda xs: xs[:max_rows] if max_rows else xs
  if kind in ROW_SOURCES:
    from jaxlab.data import row_formats  # pylint: disable=g-import-not-at-top
    train, ev, prov = _row_sources(data_cfg, kind)
    fmt = row_formats.RowFormat.from_config(data_cfg)
    make = lambda rows: Documents(
        rows, tokenizer, fmt, seq_len=seq_len, mode=mode,
        workers=int(data_cfg.get("workers", 0) or 0),
        pack_bins=int(data_cfg.get("pack_bins", 0) or 0),
        read_threads=int(data_cfg.get("read_threads", 0) or 0))
    return make(train), (make(ev) if ev is not None else None), prov
  prov = {"source": kind, "path": data_cfg.get("path", ""),
          "subset": data_cfg.get("subset", "") or "", "rows": {},
          "digest": None}
  eval_texts = None
  if kind == "synthetic":
    texts = sources.synthetic_corpus(int(data_cfg.get("num_docs", 2000)),
                                     seed=int(data_cfg.get("data_seed", 0)))
  elif kind == "chat_jsonl":
    tr, ev, rows = _chat_sources(data_cfg, seq_len=seq_len,
                                 tokenizer=tokenizer, mode=mode, cap=cap)
    prov["rows"] = rows
    return tr, ev, prov
  elif kind == "jsonl":
    if not data_cfg.get("path"):
      raise ValueError("data.source='jsonl' needs data.path")
    texts = cap(sources.read_jsonl(data_cfg.path, text_key=text_key))
    if data_cfg.get("eval_path"):
      eval_texts = cap(sources.read_jsonl(data_cfg.eval_path,
                                          text_key=text_key))
  else:
    tr, ev = get_source(kind)(data_cfg, seq_len=seq_len, tokenizer=tokenizer)
    prov["rows"] = {"train": len(tr)} | ({"eval": len(ev)} if ev is not None
                                        else {})
    return tr, ev, prov
  if eval_texts is None:
    frac = float(data_cfg.get("eval_fraction", 0.05))
    n_eval = int(len(texts) * frac)
    if n_eval:
      texts, eval_texts = texts[:-n_eval], texts[-n_eval:]
  prov["rows"] = {"train": len(texts)} | (
      {"eval": len(eval_texts)} if eval_texts else {})
  make = lambda t: lm_examples(tokenize(t, tokenizer), seq_len=seq_len,
                               pad_id=tokenizer.pad_id, mode=mode)
  return make(texts), (make(eval_texts) if eval_texts else None), prov


def lm_sources(data_cfg, *, seq_len: int, tokenizer) -> tuple[Any, Any]:
  """(train examples, eval examples or None) for `config.data` (`lm_data`
  without the provenance)."""
  train, ev, _ = lm_data(data_cfg, seq_len=seq_len, tokenizer=tokenizer)
  return train, ev


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
  for i, conv in enumerate(conversations):
    messages = conv["messages"] if isinstance(conv, dict) else conv
    if not any(isinstance(m, dict) and m.get("role") == "assistant"
               for m in messages):
      raise ValueError(
          f"conversation {i + 1} has no assistant message: nothing to train "
          f"on (roles: {[m.get('role') for m in messages]})")
    doc_ids, doc_mask = tokenizer.chat_loss_mask(
        messages, **tokenizers.row_template_kwargs(conv, template_kwargs))
    ids.append(doc_ids)
    masks.append(doc_mask)
  return lm_examples(ids, seq_len=seq_len, pad_id=tokenizer.pad_id,
                     mode=mode, token_masks=masks)


def _chat_sources(data_cfg, *, seq_len: int, tokenizer, mode: str,
                  cap=lambda xs: xs):
  if not data_cfg.get("path"):
    raise ValueError("data.source='chat_jsonl' needs data.path (JSONL, one "
                     "conversation per line under data.chat_key)")
  key = data_cfg.get("chat_key", "messages")
  convs = cap(sources.read_chat_rows(data_cfg.path, key=key))
  eval_convs = None
  if data_cfg.get("eval_path"):
    eval_convs = cap(sources.read_chat_rows(data_cfg.eval_path, key=key))
  else:
    n_eval = int(len(convs) * float(data_cfg.get("eval_fraction", 0.05)))
    if n_eval:
      convs, eval_convs = convs[:-n_eval], convs[-n_eval:]
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  kwargs = tokenizers.template_kwargs(data_cfg.get("chat_template_kwargs"),
                                      field="data.chat_template_kwargs")
  make = lambda c: chat_examples(c, tokenizer, seq_len=seq_len, mode=mode,
                                 template_kwargs=kwargs)
  rows = {"train": len(convs)} | ({"eval": len(eval_convs)} if eval_convs
                                  else {})
  return make(convs), (make(eval_convs) if eval_convs else None), rows


# --------------------------------------------------------------------------
# Row sources read lazily: `hf`, `grain` and `tfds`.
# --------------------------------------------------------------------------
#
# The rows stay where they are (a memory-mapped Arrow table, ArrayRecord
# files, a prepared TFDS split); grain reads them by index, tokenises each in
# a transform (in `data.workers` processes when > 0), and either pads it to
# `seq_len` (`data.packing="pad"`: random access, so the global batch is the
# same for any number of processes) or first-fit packs documents into rows
# with segment ids and positions (`"pack"`, grain's FirstFitPackIterDataset,
# MaxText's packing). Each process reads its own share of the rows
# (`rows[process_index::process_count]`, every row once per epoch) and packs
# its rows of the global batch from them. The iterator is a grain
# `DatasetIterator`, so its position goes into the trainer's checkpoint.


class _Encode:
  """row -> {"ids", "mask"} (int32 arrays); picklable for grain workers."""

  def __init__(self, tokenizer, fmt, kind: str):
    self.tokenizer, self.fmt, self.kind = tokenizer, fmt, kind

  def __call__(self, row):
    from jaxlab.data import row_formats  # pylint: disable=g-import-not-at-top
    ids, mask = row_formats.encode_row(row, self.tokenizer, self.fmt,
                                       self.kind)
    return {"ids": np.asarray(ids, np.int32),
            "mask": np.asarray(mask, np.int32)}


def _doc_piece(doc, chunk: slice) -> dict[str, np.ndarray]:
  ids, mask = doc["ids"][chunk], doc["mask"][chunk]
  return {"inputs": ids[:-1], "targets": ids[1:],
          "loss_mask": mask[1:].astype(np.float32)}


class _Chunks(grain.experimental.FlatMapTransform):
  """A document -> its pieces of <= seq_len + 1 tokens (`_pieces`)."""

  def __init__(self, seq_len: int, max_fan_out: int):
    self.seq_len = seq_len
    self.max_fan_out = max_fan_out

  def flat_map(self, doc):
    pieces = (_doc_piece(doc, c) for c in
              list(_pieces(doc["ids"], self.seq_len))[:self.max_fan_out])
    return [p for p in pieces if p["loss_mask"].any()]


class _Pad:
  """A document -> one padded LM example (its first seq_len + 1 tokens)."""

  def __init__(self, seq_len: int, pad_id: int):
    self.seq_len, self.pad_id = seq_len, pad_id

  def __call__(self, doc):
    row = _empty(self.seq_len, self.pad_id)
    piece = _doc_piece(doc, slice(0, self.seq_len + 1))
    n = len(piece["inputs"])
    for k in ("inputs", "targets", "loss_mask"):
      row[k][:n] = piece[k]
    row["segment_ids"][:n] = 1
    row["positions"][:n] = np.arange(n)
    return row


class _FromPacked:
  """grain's packed features -> jaxlab's LM example keys."""

  def __call__(self, x):
    return {"inputs": x["inputs"], "targets": x["targets"],
            "loss_mask": x["loss_mask"].astype(np.float32),
            "segment_ids": x["inputs_segment_ids"].astype(np.int32),
            "positions": x["inputs_positions"].astype(np.int32)}


class _FillBatch:
  """A short last batch -> `batch` rows (the added rows: padding, no loss)."""

  def __init__(self, batch: int, seq_len: int, pad_id: int):
    self.batch, self.seq_len, self.pad_id = batch, seq_len, pad_id

  def __call__(self, b):
    n = len(b["inputs"])
    if n == self.batch:
      return b
    empty = _empty(self.seq_len, self.pad_id)
    return {k: np.concatenate([v, np.repeat(empty[k][None], self.batch - n,
                                            0).astype(v.dtype)])
            for k, v in b.items()}


class Documents:
  """Rows of a dataset, tokenised lazily into LM examples (a source).

  `rows` is any random-access sequence of dict rows (a `datasets.Dataset`,
  a grain / TFDS data source, a list). `batched_dataset` turns it into this
  process's batches; `len()` is the number of rows, `rows_read` what the
  provenance records.
  """

  def __init__(self, rows, tokenizer, fmt, *, seq_len: int,
               mode: str = "pack", workers: int = 0, pack_bins: int = 0,
               read_threads: int = 0, max_fan_out: int = 1024):
    from jaxlab.data import row_formats  # pylint: disable=g-import-not-at-top
    if mode not in MODES:
      raise ValueError(f"data.packing={mode!r}; valid: {', '.join(MODES)}")
    if len(rows) == 0:  # pylint: disable=g-explicit-length-test
      raise ValueError("the data split has no rows")
    first = rows[0]
    if not isinstance(first, dict):
      raise ValueError(f"rows must be dicts of columns, got "
                       f"{type(first).__name__}")
    self.rows = rows
    self.kind = fmt.resolve(first.keys())
    self.encode = _Encode(tokenizer, fmt, self.kind)
    self.encode(first)  # a tokenizer / template problem shows now
    self.seq_len, self.pad_id = int(seq_len), int(tokenizer.pad_id)
    self.mode, self.workers = mode, int(workers)
    self.pack_bins, self.read_threads = int(pack_bins), int(read_threads)
    self.max_fan_out = int(max_fan_out)
    del row_formats

  def __len__(self) -> int:
    return len(self.rows)

  @property
  def rows_read(self) -> int:
    return len(self.rows)

  def padded(self) -> grain.MapDataset:
    """One padded example per row, random access (`data.packing="pad"`)."""
    return (grain.MapDataset.source(self.rows).map(self.encode)
            .map(_Pad(self.seq_len, self.pad_id)))

  def packed_batches(self, *, local_batch: int, seed: int, shuffle: bool,
                     repeat: bool, process_index: int, process_count: int
                     ) -> grain.IterDataset:
    """This process's packed batches of `local_batch` rows.

    The process reads rows `process_index::process_count` (shuffled per
    epoch with `seed` when `shuffle`), tokenises them in the read threads
    (or `workers` processes), cuts documents longer than `seq_len` into
    pieces, and first-fit packs them into `pack_bins` bins at a time
    (default `local_batch`).
    """
    ds = grain.MapDataset.source(self.rows)
    if process_count > 1:
      ds = ds[process_index::process_count]
    if len(ds) == 0:  # pylint: disable=g-explicit-length-test
      raise ValueError(f"process {process_index} of {process_count} has no "
                       f"rows ({len(self.rows)} in all)")
    if shuffle:
      ds = ds.seed(seed).shuffle()
    if repeat:
      ds = ds.repeat()
    ds = ds.map(self.encode)
    opts = grain.ReadOptions(num_threads=self.read_threads or 1,
                             prefetch_buffer_size=max(4 * local_batch, 16))
    it = ds.to_iter_dataset(opts)
    it = grain.experimental.FlatMapIterDataset(
        it, _Chunks(self.seq_len, self.max_fan_out))
    length = {"inputs": self.seq_len, "targets": self.seq_len,
              "loss_mask": self.seq_len}
    it = grain.experimental.FirstFitPackIterDataset(
        it, length_struct=length,
        num_packing_bins=self.pack_bins or local_batch, seed=seed,
        shuffle_bins=shuffle,
        padding_struct={"inputs": self.pad_id, "targets": self.pad_id,
                        "loss_mask": 0.0})
    it = it.map(_FromPacked())
    if repeat:
      it = it.batch(local_batch, drop_remainder=True)
    else:  # a finite (eval) pass: the last batch filled with empty rows
      it = it.batch(local_batch, drop_remainder=False).map(
          _FillBatch(local_batch, self.seq_len, self.pad_id))
    if self.workers > 0:
      _absl_flags_parsed()
      it = it.mp_prefetch(grain.MultiprocessingOptions(
          num_workers=self.workers))
    return it


def _absl_flags_parsed() -> None:
  """Marks absl's flags parsed when no absl app parsed them.

  grain's `mp_prefetch` reads its absl flag `grain_enable_multiprocess_
  worker_profiling` when the iterator starts (grain 0.2.x, once JAX's
  profiler is loaded): outside an absl app (a script, plain pytest, a
  benchmark with argparse) that raises `UnparsedFlagAccessError`. Every
  flag keeps its default; a later `absl.app.run` parses argv as usual.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
