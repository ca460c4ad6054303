"""Experiment "rope_extension": train short, evaluate long under every scaling.

For each seed: train a tiny byte-level decoder at `task.train_len` on the
copy-style passkey corpus (`jaxlab.evals.passkey_copy.PasskeySource`, loss
`jaxlab.objectives.passkey.passkey_loss`: the answer digits carry
`answer_weight` times a filler token's weight), then, training-free, rebind
its parameters to every `rope_scaling` in `config.methods` and measure
passkey exact match over a depth grid and chunked perplexity at each
`train_len * factor` (`passkey_copy.evaluate_extension`). Writes
`results.json` (per-seed values, learning curves and mean +- std tables)
and the figures of `jaxlab.analysis.rope_plots`.

Stages (`jaxlab.io.stages`): per seed, the trained model
(`seed{N}/model.npz`, trained by the trainer in `seed{N}/train_<digest>/`,
its checkpoints and metrics.jsonl, so a killed training resumes there) is
reused by a run whose `TRAIN_FIELDS` (less `TRAIN_EXCLUDE`) and seed are
the same; its evaluation (`seed{N}/eval.json`) by one whose `EVAL_FIELDS`
are the same too.
"""

import copy
import json
import logging
import math
import os
import time
from typing import Any

from flax import nnx
import numpy as np

from jaxlab.analysis.rope_plots import (plot_cumulative_scale,
                                        plot_learning_curves)
from jaxlab.analysis.rope_plots import plot_metric as _plot_metric
from jaxlab.data import pipeline
from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.decoding import sampler
from jaxlab.evals import long_context as lc
from jaxlab.evals.passkey_copy import (  # pylint: disable=unused-import
    MARKER, NEEDLE, QUESTION, SENTENCES, PasskeySource, document,
    bound_first_roots, learning_curve, passkey, summarize)
from jaxlab.evals.passkey_copy import evaluate_extension as evaluate_seed
from jaxlab.experiments import report
from jaxlab.io import pretrained
from jaxlab.io import stages
from jaxlab.models import registry as model_registry
from jaxlab.objectives.passkey import passkey_loss
from jaxlab.train import trainer
from jaxlab.experiments import results as results_lib


def train_model(config, workdir: str, seed: int, tok):
  """Trains one seed (resumable per seed); returns (model, final metrics)."""
  cfg = copy.deepcopy(config)
  t = config.task
  with cfg.unlocked():
    cfg.seed = int(seed)
    cfg.train.seq_len = int(t.train_len)
  kw = dict(length=int(t.train_len), digits=int(t.digits),
            answer_weight=float(t.answer_weight))
  source = PasskeySource(tok, num=int(t.train_examples),
                         seed=int(t.data_seed) + 1000 * int(seed), **kw)
  held_out = PasskeySource(tok, num=int(config.train.eval_batch_size) *
                           int(config.train.eval_batches),
                           seed=int(t.data_seed) + 999_999, **kw)
  res = trainer.train(cfg, workdir, train_source=source, eval_source=held_out,
                      loss_fn=passkey_loss)
  model, _ = nnx.merge(res["train_state"].graphdef, res["train_state"].state)
  final = {k: float(v) for k, v in res.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
  return model, final


# What each stage depends on. The trained model: the model, the task's
# training fields (not the evaluation grid), the loss, the optimizer,
# training (its held-out curve included), LoRA / init_from and the seed.
# Its evaluation also: the methods and the whole task. A run that changes
# only `methods` or the evaluation grid re-evaluates the saved model.
TRAIN_FIELDS = ("model", "task", "loss", "optim", "train", "lora",
                "init_from")
# Fields only the real run (`run_pretrained`) reads: out of the miniature's
# keys, so its saved models and evaluations stay valid.
REAL_RUN_ONLY = ("task.original_len", "task.eval_lengths", "task.dtype")
TRAIN_EXCLUDE = ("task.eval_factors", "task.eval_docs", "task.depths",
                 "task.samples", "task.eval_batch_size") + REAL_RUN_ONLY
EVAL_FIELDS = ("methods", "task")


PLAN = stages.Plan(TRAIN_FIELDS, EVAL_FIELDS, train_exclude=TRAIN_EXCLUDE,
                   eval_exclude=REAL_RUN_ONLY)
train_key, eval_key = PLAN.train_key, PLAN.eval_key


def seed_model(config, seed: int, seed_dir: str, tok):
  """(model, {"final": train metrics, "learning_curve": ...}) of one seed:
  `seed_dir/model.npz` when trained with this `train_key`, else trained
  (in `seed_dir/train_<digest>/`, resuming its checkpoint) and saved."""
  key = train_key(config, seed)

  def train():
    train_dir = stages.directory(seed_dir, "train", key)
    model, final = train_model(config, train_dir, seed, tok)
    return model, {"final": final,
                   "learning_curve": learning_curve(train_dir)}

  return stages.cached(
      os.path.join(seed_dir, "model.npz"), key, train, kind="npz",
      init=lambda: model_registry.get_spec(config.model,
                                           seed=int(seed)).factory())


METHOD_LABELS = {"default": "none", "pi": "PI", "ntk": "NTK",
                 "dynamic_ntk": "dynamic NTK", "yarn": "YaRN (HF ramp)",
                 "yarn_rotation": "YaRN (rotation ramp)", "llama3": "Llama-3",
                 "mrope_uni": "MrRoPE-Uni", "mrope_pro": "MrRoPE-Pro"}


def results_tables(per_seed: list[dict[str, Any]],
                   train_len: int) -> tuple[list, list]:
  """Per-seed tables of the docs (one value per seed per cell), comparisons.

  Tables: `passkey`, `digits`, `perplexity` (method x evaluation length),
  `depth` (exact match by needle depth at the largest factor), `summary`
  (the README's: exact match at 4x/8x/16x, perplexity at 8x/16x) and
  `learning_curve` (held-out exact match at 1x by training step).
  """
  col = results_lib.Column
  lengths = per_seed[0]["lengths"]
  factors = [n // train_len for n in lengths]
  label = lambda m: METHOD_LABELS.get(m, m)
  tables = []
  for tid, metric, title, dec in (
      ("passkey", "passkey", "passkey exact match", 2),
      ("digits", "passkey_token_acc",
       "passkey digit accuracy (fraction of the digits right)", 2),
      ("perplexity", "perplexity", "perplexity (byte level, whole window)",
       2)):
    t = results_lib.Table(
        tid, title, [col(f"x{f}", f"{n} ({f}x)", dec)
                     for n, f in zip(lengths, factors)], row_label="method")
    for rec in per_seed:
      for m in rec["methods"]:
        t.add_seed(label(m), rec["seed"],
                   {f"x{f}": v for f, v in zip(factors,
                                               rec["metrics"][metric][m])})
    tables.append(t)
  depth_keys = [k for k in per_seed[0]["metrics"] if k.startswith("passkey@")]
  if depth_keys:
    t = results_lib.Table(
        "depth", f"passkey exact match at {factors[-1]}x by needle depth",
        [col(k, "depth " + k.split("@")[1], 2) for k in depth_keys],
        row_label="method")
    for rec in per_seed:
      for m in rec["methods"]:
        t.add_seed(label(m), rec["seed"],
                   {k: rec["metrics"][k][m][-1] for k in depth_keys})
    tables.append(t)
  summary_cols = ([(f"pk{f}", "passkey", i, f"exact match {f}×")
                   for i, f in enumerate(factors) if f >= 4] +
                  [(f"ppl{f}", "perplexity", i, f"perplexity {f}×")
                   for i, f in enumerate(factors) if f >= 8])
  t = results_lib.Table(
      "summary", "passkey exact match and perplexity beyond the training "
      "length", [col(k, lab, 2 if k.startswith("pk") else 1)
                 for k, _, _, lab in summary_cols], row_label="method")
  for rec in per_seed:
    for m in rec["methods"]:
      t.add_seed(label(m), rec["seed"],
                 {k: rec["metrics"][metric][m][i]
                  for k, metric, i, _ in summary_cols})
  tables.append(t)
  summary_keys = {c.key for c in t.columns}
  steps = sorted({r["step"] for rec in per_seed
                  for r in rec.get("learning_curve") or []})
  if steps:
    t = results_lib.Table(
        "learning_curve", "held-out exact match at 1x by training step",
        [col(f"step{s}", str(s), 2) for s in steps], row_label="step")
    for rec in per_seed:
      t.add_seed("exact match", rec["seed"],
                 {f"step{r['step']}": r["answer_exact"]
                  for r in rec.get("learning_curve") or []})
    tables.append(t)
  methods = set(per_seed[0]["methods"])
  big, mid = factors[-1], (factors[-2] if len(factors) > 1 else factors[-1])
  wanted = [(f"pk{big}", "mrope_pro", "yarn"),
            (f"ppl{big}", "mrope_pro", "yarn"),
            (f"pk{big}", "mrope_pro", "mrope_uni"),
            (f"ppl{big}", "mrope_pro", "mrope_uni"),
            (f"pk{mid}", "mrope_uni", "llama3"),
            (f"pk{big}", "mrope_uni", "llama3"),
            (f"pk{big}", "yarn", "llama3"),
            (f"pk{big}", "mrope_pro", "llama3"),
            (f"ppl{mid}", "mrope_uni", "default"),
            (f"ppl{big}", "mrope_uni", "default")]
  comparisons = [results_lib.Comparison("summary", k, label(a), label(b))
                 for k, a, b in wanted
                 if a in methods and b in methods and k in summary_keys]
  return tables, comparisons


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  if config.get("data") and config.data.get("source", "") == "hf":
    return run_pretrained(config, workdir, t0)
  tok = ByteTokenizer()
  per_seed, final_losses = [], []
  for seed in config.seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    def evaluate(seed=seed, seed_dir=seed_dir):
      model, info = seed_model(config, seed, seed_dir, tok)
      final = info["final"]
      return {"seed": int(seed),
              "final_loss": final.get("loss", float("nan")),
              "final_train_metrics": final,
              "learning_curve": info["learning_curve"],
              **evaluate_seed(model, config, tok)}
    rec = stages.cached(os.path.join(seed_dir, "eval.json"),
                        eval_key(config, seed), evaluate)
    per_seed.append(rec)
    final_losses.append(rec["final_loss"])
  lengths = per_seed[0]["lengths"]
  train_len = int(config.task.train_len)
  summary = summarize(per_seed)
  roots = bound_first_roots(model_registry.decoder_config(config.model),
                            config.methods, train_len, lengths[-1])
  out = {
      "methods": list(config.methods), "lengths": lengths,
      "train_len": train_len, "seeds": [int(s) for s in config.seeds],
      "final_train_loss": final_losses, "summary": summary,
      "per_seed": per_seed, "rope_bound_first_root_at_max_factor": roots,
      "plots": [
          _plot_metric(summary, "passkey", lengths,
                       os.path.join(workdir, "passkey.png")),
          _plot_metric(summary, "perplexity", lengths,
                       os.path.join(workdir, "perplexity.png"), log_y=True),
          plot_cumulative_scale(os.path.join(workdir,
                                             "cumulative_scale.png")),
          plot_learning_curves(per_seed, os.path.join(
              workdir, "learning_curve.png"))],
  }
  tables, comparisons = results_tables(per_seed, train_len)
  # Mean ± std tables (exact match, digit accuracy, perplexity), rendered
  # from the results tables as the docs render them.
  res = {"tables": [t.to_json() for t in tables], "comparisons": []}
  out["table_markdown"] = "\n".join(
      report.render_table(res, tid, name="rope_extension")
      for tid in ("passkey", "digits", "perplexity"))
  results_lib.write(workdir, "rope_extension", tables=tables,
                    comparisons=comparisons, extra=out, config=config,
                    start_time=t0)
  return out


# -- the real run: a pretrained checkpoint, training-free ----------------------


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


def ruler_rows(config) -> list[dict[str, Any]]:
  """RULER rows as its generator writes them (`input`, `outputs`,
  `length`, optional `answer_prefix`), from `ruler.path`: one jsonl file
  (the task is its directory's name) or a directory laid out as RULER's
  prepare.py writes (`<task>/<subset>.jsonl`, every task found; subset
  `ruler.subset`). At most `ruler.max_rows` rows per task (0 = all); each
  row gets its `task`."""
  path, cap = config.ruler.path, int(config.ruler.max_rows)
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


def ruler_scores(model, tok, rows, *, method: str, original: int,
                 lengths, config) -> list[dict[str, Any]]:
  """Greedy answers of every RULER row under `method` and their scores.

  The prompt is `input + answer_prefix` as RULER's call_api.py sends it;
  the scaling's S comes from the smallest of `lengths` that holds the prompt
  and its answer (`ruler.max_new_tokens`, 0 = RULER's per task), else from
  that length itself. Score: `long_context.ruler_row_score`.
  """
  groups: dict[int, list[int]] = {}
  prompts, budgets = [], []
  for i, r in enumerate(rows):
    ids = tok.encode(r["input"] + r.get("answer_prefix", ""), add_bos=True)
    new = int(config.ruler.max_new_tokens) or lc.RULER_TOKENS_TO_GENERATE[
        lc.ruler_base_task(r["task"])]
    need = len(ids) + new
    target = min([n for n in lengths if n >= need], default=need)
    prompts.append(ids)
    budgets.append(new)
    groups.setdefault(target, []).append(i)
  stops = tuple(getattr(tok, "eos_ids", ())) or (tok.eos_id,)
  bs = max(1, int(config.task.eval_batch_size))
  recs: dict[int, dict[str, Any]] = {}
  for target, idx in sorted(groups.items()):
    variant = lc.with_rope_scaling(model, lc.scaling_for(
        method, train_len=original, eval_len=target))
    for s in range(0, len(idx), bs):
      chunk = idx[s:s + bs]
      out = sampler.generate(
          variant, [prompts[i] for i in chunk],
          max_new_tokens=max(budgets[i] for i in chunk), eos_id=tok.eos_id,
          stop_ids=stops, pad_id=tok.pad_id)
      for j, i in enumerate(chunk):
        toks = [t for t in out.tokens[j][:budgets[i]] if t not in stops]
        pred = tok.decode(toks)
        recs[i] = {"task": rows[i]["task"], "length": rows[i].get("length"),
                   "eval_len": target, "pred": pred,
                   "score": lc.ruler_row_score(rows[i]["task"], pred,
                                               rows[i]["outputs"])}
  return [recs[i] for i in range(len(rows))]


PRETRAINED_PLAN = stages.Plan(("init_from", "data", "ruler"),
                              ("methods", "task"))


def run_pretrained(config, workdir: str, t0: float) -> dict[str, Any]:
  """The paper's protocol on `config.init_from` (module docstring of the
  config): training-free, each `config.methods` scaling applied to the
  checkpoint's config at each evaluation length; perplexity of the first
  `length` tokens of long rows of `data.path` and, with `ruler.path`,
  RULER's string-match scores."""
  model, cfg = pretrained.load(config.init_from,
                               dtype=config.task.get("dtype", "float32"))
  tok = pretrained.tokenizer(config.init_from)
  original = original_length(config, cfg)
  lengths = eval_lengths(config, original)
  docs, n_text = text_documents(config, tok, lengths)
  rrows = ruler_rows(config) if config.ruler.get("path", "") else []
  bs = int(config.task.eval_batch_size)
  impl = {"attention_impl": config.task.get("attention_impl", "") or None}

  def evaluate():
    ppl, per_doc, ruler = {}, {}, {}
    for method in config.methods:
      ppl[method], per_doc[method] = [], []
      for n in lengths:
        if docs[n] is None:
          ppl[method].append(math.nan)
          per_doc[method].append([])
          continue
        variant = lc.with_rope_scaling(model, lc.scaling_for(
            method, train_len=original, eval_len=n), **impl)
        out = lc.chunked_perplexity(variant, docs[n], chunk_len=n,
                                    batch_size=bs, per_window=True)
        ppl[method].append(out["perplexity"])
        # One window per document (chunk_len = its length): its own
        # perplexity, so the methods pair document by document.
        per_doc[method].append([
            math.exp(nll / max(t, 1)) for nll, t in
            zip(out["window_nll"], out["window_tokens"])])
      if rrows:
        ruler[method] = ruler_scores(model, tok, rrows, method=method,
                                     original=original, lengths=lengths,
                                     config=config)
    return {"perplexity": ppl, "perplexity_docs": per_doc, "ruler": ruler}

  rec = stages.cached(os.path.join(workdir, "eval.json"),
                      PRETRAINED_PLAN.eval_key(config, 0), evaluate)
  label = lambda m: METHOD_LABELS.get(m, m)
  col = results_lib.Column
  tables = []
  t = results_lib.Table(
      "perplexity", f"perplexity of the first N tokens of "
      f"{config.data.path} rows ({config.init_from}, L = {original})",
      [col(f"n{n}", f"{n} ({n / original:g}x)", 2) for n in lengths],
      row_label="method")
  for m in config.methods:
    t.add_seed(label(m), 0, {f"n{n}": v for n, v in
                             zip(lengths, rec["perplexity"][m])})
  tables.append(t)
  # Per document: each document one "seed", so MrRoPE-Pro and each other
  # method are compared on the same text (paired differences).
  t = results_lib.Table(
      "perplexity_docs", f"perplexity of each document's first N tokens "
      f"({config.data.path} rows, {config.init_from}, L = {original}; "
      "seeds = documents)",
      [col(f"n{n}", f"{n} ({n / original:g}x)", 2) for n in lengths],
      row_label="method")
  for m in config.methods:
    for j, n in enumerate(lengths):
      for d, v in enumerate(rec["perplexity_docs"][m][j]):
        t.add(label(m), f"n{n}", d, v)
  tables.append(t)
  pro = "mrope_pro" if "mrope_pro" in config.methods else None
  others = [m for m in config.methods if m != pro] if pro else []
  comparisons = [results_lib.Comparison("perplexity_docs", f"n{n}",
                                        label(pro), label(m))
                 for n in lengths for m in others]
  ruler_summary = {}
  if rrows:
    tasks = sorted({r["task"] for r in rrows})
    for m in config.methods:
      per = rec["ruler"][m]
      ruler_summary[m] = {
          task: round(100 * float(np.mean(
              [p["score"] for p in per if p["task"] == task])), 2)
          for task in tasks}
    t = results_lib.Table(
        "ruler", "RULER score (RULER's string match, 0-100) per task",
        [col(task, task, 2) for task in tasks] + [col("mean", "mean", 2)],
        row_label="method")
    for m in config.methods:
      s = ruler_summary[m]
      t.add_seed(label(m), 0, dict(s, mean=float(np.mean(list(s.values())))))
    tables.append(t)
    # Per row: each RULER row one "seed" (its 0/1 or part score x 100),
    # so the methods pair row by row.
    t = results_lib.Table(
        "ruler_rows", "RULER score (0-100) per task, seeds = rows",
        [col(task, task, 2) for task in tasks], row_label="method")
    for m in config.methods:
      for i, p in enumerate(rec["ruler"][m]):
        t.add(label(m), p["task"], i, 100 * float(p["score"]))
    tables.append(t)
    comparisons += [results_lib.Comparison("ruler_rows", task, label(pro),
                                           label(m))
                    for task in tasks for m in others]
  rows_read = {config.data.get("eval_split", "") or
               config.data.get("split", ""): n_text}
  if rrows:
    rows_read["ruler"] = len(rrows)
  extra = {"methods": list(config.methods), "lengths": lengths,
           "original_len": original,
           "docs_per_length": {str(n): 0 if d is None else int(len(d))
                               for n, d in docs.items()},
           "perplexity": rec["perplexity"],
           "perplexity_docs": rec["perplexity_docs"],
           "ruler_scores": ruler_summary,
           "ruler_rows": rec["ruler"]}
  try:  # the machine's load while the run shared it (timings are noisy)
    extra["load_average"] = list(os.getloadavg())
  except OSError:
    pass
  results_lib.write(workdir, config.get("results_name", "") or
                    "rope_extension", tables=tables,
                    comparisons=comparisons, extra=extra,
                    config=config, start_time=t0,
                    data=results_lib.data_provenance(config, rows=rows_read))
  return extra
