"""rope_extension's real run: a pretrained checkpoint, training-free.

With `data.source="hf"` (the `paper` and `smollm2` presets) the experiment
loads `config.init_from` (weights, config and its own tokenizer) and, for
each scaling of `config.methods` applied to the checkpoint's config at
each evaluation length (`long_context.scaling_for`, S = length / L):
- with `data.path`: perplexity of the first `length` tokens of long rows
  (PG19 / Proof-pile text, `text_documents`), one window per document so
  the methods pair document by document;
- with `ruler.path`: RULER rows as its generator writes them, answered
  greedily from `input + answer_prefix` and scored with RULER's string
  match (`ruler_scores`), paired row by row.
Either or both. Each method's perplexities are a stage of their own
(`perplexity_<method>.json`, `jaxlab.io.stages`), and so is each RULER
row's answer under each method (`ruler_<method>/row_<digest>.json`, keyed
on the row's contents): a run stopped part-way resumes at the next method
or row, adding `ruler.path` to a finished perplexity run reuses its
perplexities, and rows appended to a RULER file are the only ones answered
by the rerun.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from typing import Any

import numpy as np

from jaxlab import progress
from jaxlab.data import pipeline
from jaxlab.decoding import sampler
from jaxlab.evals import long_context as lc
from jaxlab.experiments import results as results_lib
from jaxlab.io import pretrained
from jaxlab.io import stages
from jaxlab.parallel import preemption


METHOD_LABELS = {"default": "none", "pi": "PI", "ntk": "NTK",
                 "dynamic_ntk": "dynamic NTK", "yarn": "YaRN (HF ramp)",
                 "yarn_rotation": "YaRN (rotation ramp)", "llama3": "Llama-3",
                 "mrope_uni": "MrRoPE-Uni", "mrope_pro": "MrRoPE-Pro"}


def label(method: str) -> str:
  return METHOD_LABELS.get(method, method)


def original_length(config, cfg) -> int:
  """The checkpoint's pre-training context L: `task.original_len`, else the
  `original_max_position` of its own `rope_scaling`, else its
  `max_position_embeddings`."""
  if int(config.task.get("original_len", 0) or 0) > 0:
    return int(config.task.original_len)
  own = dict(cfg.rope_scaling or {})
  if int(own.get("original_max_position", 0) or 0) > 0:
    return int(own["original_max_position"])
  return int(cfg.max_position_embeddings)


def eval_lengths(config, original: int) -> list[int]:
  """`task.eval_lengths` when set, else `original` x `task.eval_factors`."""
  lengths = [int(n) for n in config.task.get("eval_lengths", ()) or ()]
  return lengths or [original * int(f) for f in config.task.eval_factors]


def text_documents(config, tok, lengths) -> tuple[dict[int, np.ndarray], int]:
  """({length: [docs, length] token ids}, rows read): the first `length`
  tokens (the checkpoint's own leading special tokens first, `add_bos`) of
  the first `task.eval_docs` rows of `data.eval_split` (else `data.split`)
  with at least `length` tokens; the text is column `data.text_key`."""
  split = config.data.get("eval_split", "") or config.data.get("split", "")
  rows = pipeline.read_split(config.data, split)
  key = config.data.get("text_key", "") or "text"
  if len(rows) and key not in rows[0]:
    raise ValueError(f"data.path={config.data.path!r} split {split!r} has no "
                     f"column {key!r} (data.text_key); columns: "
                     f"{sorted(rows[0])}")
  want = int(config.task.eval_docs)
  picked: dict[int, list[np.ndarray]] = {n: [] for n in lengths}
  for i in range(len(rows)):  # tokenized until every length has its docs
    if all(len(v) >= want for v in picked.values()):
      break
    ids = np.asarray(tok.encode(rows[i][key], add_bos=True), np.int32)
    for n, v in picked.items():
      if len(ids) >= n and len(v) < want:
        v.append(ids[:n])
  docs = {}
  for n, v in picked.items():
    if not v:
      logging.warning("rope_extension: no row of %s has %d tokens; no "
                      "perplexity at that length", config.data.path, n)
    docs[n] = np.stack(v) if v else None
  if all(d is None for d in docs.values()):
    raise ValueError(f"data.path={config.data.path!r} split {split!r}: no row "
                     f"has {min(lengths)} tokens (the shortest evaluation "
                     "length); give longer documents or shorter "
                     "task.eval_lengths")
  return docs, len(rows)


def ruler_files(config) -> list[tuple[str, str]]:
  """[(task, jsonl file)] that `ruler.path` names (see `ruler_rows`)."""
  path = config.ruler.path
  if os.path.isfile(path):
    files = [(os.path.basename(os.path.dirname(os.path.abspath(path))),
              path)]
  elif os.path.isdir(path):
    files = sorted(
        (task, os.path.join(path, task, f"{config.ruler.subset}.jsonl"))
        for task in os.listdir(path)
        if os.path.isfile(os.path.join(path, task,
                                       f"{config.ruler.subset}.jsonl")))
  else:
    files = []
  if not files:
    raise ValueError(f"ruler.path={path!r}: no jsonl file (a file, or a "
                     f"directory of <task>/{config.ruler.subset}.jsonl)")
  return files


def ruler_rows(config) -> list[dict[str, Any]]:
  """RULER rows as its generator writes them (`input`, `outputs`,
  `length`, optional `answer_prefix`), from `ruler.path`: one jsonl file
  (the task is its directory's name) or a directory laid out as RULER's
  prepare.py writes (`<task>/<subset>.jsonl`, every task found; subset
  `ruler.subset`). At most `ruler.max_rows` rows per task (0 = all); each
  row gets its `task`."""
  cap = int(config.ruler.max_rows)
  files = ruler_files(config)
  out = []
  for task, file in files:
    lc.ruler_base_task(task)  # a clear error for a directory of another kind
    with open(file, encoding="utf-8") as f:
      rows = [json.loads(line) for line in f if line.strip()]
    for r in rows[:cap] if cap > 0 else rows:
      for field in ("input", "outputs"):
        if field not in r:
          raise ValueError(f"{file}: a row has no {field!r} (RULER rows "
                           "have input, outputs, length)")
      out.append(dict(r, task=task))
  return out


def _impl(config) -> dict[str, Any]:
  """The loaded checkpoint's attention kernel (`task.attention_impl`)."""
  return {"attention_impl": config.task.get("attention_impl", "") or None}


def ruler_scores(model, tok, rows, *, method: str, original: int,
                 lengths, config, workdir: str | None = None
                 ) -> list[dict[str, Any]]:
  """Greedy answers of every RULER row under `method` and their scores.

  The prompt is `input + answer_prefix` as RULER's call_api.py sends it;
  the scaling's S comes from the smallest of `lengths` that holds the prompt
  and its answer (`ruler.max_new_tokens`, 0 = RULER's per task), else from
  that length itself. The prefill runs through `task.attention_impl`
  ("chunked": block by block into the cache, `jaxlab.nn.attention`), the
  prompts padded to a multiple of `ruler.pad_multiple` (0: a power of two).
  Score: `long_context.ruler_row_score`.

  With `workdir`, each row's answer is a stage (`ruler_row_path`, keyed by
  `ruler_row_key`): rows answered before under the same settings are
  reloaded, the others answered `task.eval_batch_size` at a time and each
  batch saved before the next starts (Ctrl-C / SIGTERM loses at most the
  batch in flight).
  """
  where = ([ruler_row_path(workdir, config, method, r) for r in rows]
           if workdir else [None] * len(rows))
  recs: dict[int, dict[str, Any]] = {}
  for i, w in enumerate(where):
    if w is not None and stages.is_current(*w):
      with open(w[0]) as f:
        recs[i] = json.load(f)
  groups: dict[int, list[int]] = {}
  prompts, budgets = {}, {}
  for i, r in enumerate(rows):
    if i in recs:
      continue
    ids = tok.encode(r["input"] + r.get("answer_prefix", ""), add_bos=True)
    new = int(config.ruler.max_new_tokens) or lc.RULER_TOKENS_TO_GENERATE[
        lc.ruler_base_task(r["task"])]
    need = len(ids) + new
    target = min([n for n in lengths if n >= need], default=need)
    prompts[i], budgets[i] = ids, new
    groups.setdefault(target, []).append(i)
  stops = tuple(getattr(tok, "eos_ids", ())) or (tok.eos_id,)
  bs = max(1, int(config.task.eval_batch_size))
  pad = int(config.ruler.get("pad_multiple", 0) or 0) or None
  asked, todo = 0, sum(len(idx) for idx in groups.values())
  for target, idx in sorted(groups.items()):
    variant = lc.with_rope_scaling(model, lc.scaling_for(
        method, train_len=original, eval_len=target), **_impl(config))
    for s in range(0, len(idx), bs):
      preemption.check()  # Ctrl-C / SIGTERM: stop between batches
      chunk = idx[s:s + bs]
      progress.stage(f"RULER {label(method)}: rows {asked + 1}-"
                     f"{asked + len(chunk)} of the {todo} to answer "
                     f"({len(rows) - todo} reloaded)")
      asked += len(chunk)
      out = sampler.generate(
          variant, [prompts[i] for i in chunk],
          max_new_tokens=max(budgets[i] for i in chunk), eos_id=tok.eos_id,
          stop_ids=stops, pad_id=tok.pad_id, pad_multiple=pad)
      for j, i in enumerate(chunk):
        toks = [t for t in out.tokens[j][:budgets[i]] if t not in stops]
        pred = tok.decode(toks)
        rec = {"task": rows[i]["task"], "length": rows[i].get("length"),
               "eval_len": target, "pred": pred,
               "score": lc.ruler_row_score(rows[i]["task"], pred,
                                           rows[i]["outputs"])}
        recs[i] = (rec if where[i] is None else stages.cached(
            *where[i], lambda rec=rec: rec))
  return [recs[i] for i in range(len(rows))]


def document_perplexities(model, docs, *, method: str, original: int,
                          lengths, config) -> tuple[list, list]:
  """([perplexity per length], [[per document] per length]) under
  `method`: one window per document (chunk_len = its length), so each
  document has its own perplexity and the methods pair on the same text."""
  ppl, per_doc = [], []
  for n in lengths:
    if docs[n] is None:
      ppl.append(math.nan)
      per_doc.append([])
      continue
    variant = lc.with_rope_scaling(model, lc.scaling_for(
        method, train_len=original, eval_len=n), **_impl(config))
    out = lc.chunked_perplexity(variant, docs[n], chunk_len=n,
                                batch_size=int(config.task.eval_batch_size),
                                per_window=True)
    ppl.append(out["perplexity"])
    per_doc.append([math.exp(nll / max(t, 1)) for nll, t in
                    zip(out["window_nll"], out["window_tokens"])])
  return ppl, per_doc


# What each stage reads: the checkpoint, its data (text or RULER rows) and
# the real run's task fields, not the miniature's (training, passkey grid).
_MINIATURE_ONLY = ("task.train_len", "task.digits", "task.answer_weight",
                   "task.train_examples", "task.depths", "task.samples",
                   "task.data_seed")


def perplexity_key(config, method: str) -> dict[str, Any]:
  return stages.key(config, ("init_from", "data", "task"),
                    exclude=_MINIATURE_ONLY, method=method)


def ruler_row_key(config, method: str, row) -> dict[str, Any]:
  """What one RULER row's answer under `method` depends on: the row's
  contents (not the file it came from: a row moved to another file or
  directory is the same row) and the checkpoint, RULER and task settings."""
  digest = hashlib.sha256(json.dumps(row, sort_keys=True).encode()
                          ).hexdigest()[:16]
  return stages.key(config, ("init_from", "ruler", "task"),
                    exclude=_MINIATURE_ONLY + (
                        "task.eval_docs", "ruler.path", "ruler.subset",
                        "ruler.max_rows"),
                    method=method, row=digest)


def ruler_row_path(workdir: str, config, method: str, row
                   ) -> tuple[str, dict[str, Any]]:
  """(`WORKDIR/ruler_<method>/row_<key digest>.json`, its key)."""
  key = ruler_row_key(config, method, row)
  return stages.keyed_path(os.path.join(workdir, f"ruler_{method}"), "row",
                           key, "json"), key


def perplexity_tables(config, original, lengths, ppl, per_doc):
  """Tables `perplexity` (one value per method and length) and
  `perplexity_docs` (documents as seeds), and MrRoPE-Pro's comparisons."""
  col = results_lib.Column
  head = [col(f"n{n}", f"{n} ({n / original:g}x)", 2) for n in lengths]
  t = results_lib.Table(
      "perplexity", f"perplexity of the first N tokens of "
      f"{config.data.path} rows ({config.init_from}, L = {original})",
      head, row_label="method")
  for m in config.methods:
    t.add_seed(label(m), 0, {f"n{n}": v for n, v in zip(lengths, ppl[m])})
  d = results_lib.Table(
      "perplexity_docs", f"perplexity of each document's first N tokens "
      f"({config.data.path} rows, {config.init_from}, L = {original}; "
      "seeds = documents)", head, row_label="method")
  for m in config.methods:
    for j, n in enumerate(lengths):
      for doc, v in enumerate(per_doc[m][j]):
        d.add(label(m), f"n{n}", doc, v)
  comparisons = [results_lib.Comparison("perplexity_docs", f"n{n}",
                                        label(pro), label(m))
                 for n in lengths for pro, m in _pro_pairs(config)]
  return [t, d], comparisons


def ruler_tables(config, ruler):
  """Tables `ruler` (mean score per task) and `ruler_rows` (rows as seeds),
  MrRoPE-Pro's comparisons, and the per-task summary."""
  col = results_lib.Column
  tasks = sorted({p["task"] for p in next(iter(ruler.values()))})
  summary = {m: {task: round(100 * float(np.mean(
      [p["score"] for p in ruler[m] if p["task"] == task])), 2)
                 for task in tasks} for m in config.methods}
  t = results_lib.Table(
      "ruler", "RULER score (RULER's string match, 0-100) per task",
      [col(task, task, 2) for task in tasks] + [col("mean", "mean", 2)],
      row_label="method")
  for m in config.methods:
    s = summary[m]
    t.add_seed(label(m), 0, dict(s, mean=float(np.mean(list(s.values())))))
  # Per row: each RULER row one "seed" (its 0/1 or part score x 100), so
  # the methods pair row by row.
  r = results_lib.Table(
      "ruler_rows", "RULER score (0-100) per task, seeds = rows",
      [col(task, task, 2) for task in tasks], row_label="method")
  for m in config.methods:
    for i, p in enumerate(ruler[m]):
      r.add(label(m), p["task"], i, 100 * float(p["score"]))
  comparisons = [results_lib.Comparison("ruler_rows", task, label(pro),
                                        label(m))
                 for task in tasks for pro, m in _pro_pairs(config)]
  return [t, r], comparisons, summary


def _pro_pairs(config) -> list[tuple[str, str]]:
  """(MrRoPE-Pro, each other method) when Pro is among the methods."""
  if "mrope_pro" not in config.methods:
    return []
  return [("mrope_pro", m) for m in config.methods if m != "mrope_pro"]


def run_pretrained(config, workdir: str, t0: float) -> dict[str, Any]:
  """The paper's protocol on `config.init_from` (module docstring)."""
  text, rpath = config.data.get("path", ""), config.ruler.get("path", "")
  if not text and not rpath:
    raise ValueError("rope_extension on a checkpoint needs data.path (long "
                     "documents: perplexity) or ruler.path (RULER rows), or "
                     "both")
  rrows = ruler_rows(config) if rpath else []  # checked before the load
  model, cfg = pretrained.load(config.init_from,
                               dtype=config.task.get("dtype", "float32"))
  tok = pretrained.tokenizer(config.init_from)
  original = original_length(config, cfg)
  lengths = eval_lengths(config, original)
  docs, n_text = text_documents(config, tok, lengths) if text else ({}, 0)
  ppl, per_doc, ruler = {}, {}, {}
  for m in config.methods:
    if text:
      ppl[m], per_doc[m] = stages.cached(
          os.path.join(workdir, f"perplexity_{m}.json"),
          perplexity_key(config, m),
          lambda m=m: document_perplexities(
              model, docs, method=m, original=original, lengths=lengths,
              config=config))
    if rrows:
      ruler[m] = ruler_scores(model, tok, rrows, method=m,
                              original=original, lengths=lengths,
                              config=config, workdir=workdir)
  tables, comparisons, rows_read, summary = [], [], {}, {}
  if text:
    tables, comparisons = perplexity_tables(config, original, lengths, ppl,
                                            per_doc)
    rows_read[config.data.get("eval_split", "") or
              config.data.get("split", "")] = n_text
  if rrows:
    more, more_cmp, summary = ruler_tables(config, ruler)
    tables += more
    comparisons += more_cmp
    rows_read["ruler"] = len(rrows)
  extra = {"methods": list(config.methods), "lengths": lengths,
           "original_len": original,
           "docs_per_length": {str(n): 0 if d is None else int(len(d))
                               for n, d in docs.items()},
           "perplexity": ppl, "perplexity_docs": per_doc,
           "ruler_scores": summary, "ruler_rows": ruler}
  try:  # the machine's load while the run shared it (timings are noisy)
    extra["load_average"] = list(os.getloadavg())
  except OSError:
    pass
  results_lib.write(workdir, config.get("results_name", "") or
                    "rope_extension", tables=tables,
                    comparisons=comparisons, extra=extra,
                    config=config, start_time=t0,
                    data=_provenance(config, rows_read))
  return extra


def _provenance(config, rows_read) -> dict[str, Any] | None:
  """results.json's `data`: the text's (`data.path`), else the RULER
  rows' (`ruler.path`, digest of the jsonl files read)."""
  if config.data.get("path", ""):
    return results_lib.data_provenance(config, rows=rows_read)
  from jaxlab.data import grain_source  # pylint: disable=g-import-not-at-top
  return {"source": "ruler", "path": config.ruler.path,
          "subset": config.ruler.subset, "rows": dict(rows_read),
          "digest": grain_source.digest([f for _, f in ruler_files(config)])}
