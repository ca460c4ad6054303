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

With `data.source="hf"` (the `paper` and `smollm2` presets) the run is
training-free on a pretrained checkpoint instead:
`jaxlab.experiments.rope_extension.real_run`.

Stages (`jaxlab.io.stages`): per seed, the trained model
(`seed{N}/model.npz`, trained by the trainer in `seed{N}/train_<digest>/`,
its checkpoints and metrics.jsonl, so a killed training resumes there) is
reused by a run whose `TRAIN_FIELDS` (less `TRAIN_EXCLUDE`) and seed are
the same; its evaluation (`seed{N}/eval.json`) by one whose `EVAL_FIELDS`
are the same too.
"""

import copy
import os
import time
from typing import Any

from flax import nnx

from jaxlab.analysis.rope_plots import (plot_cumulative_scale,
                                        plot_learning_curves)
from jaxlab.analysis.rope_plots import plot_metric as _plot_metric
from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.evals.passkey_copy import (  # pylint: disable=unused-import
    MARKER, NEEDLE, QUESTION, SENTENCES, PasskeySource, document,
    bound_first_roots, learning_curve, passkey, summarize)
from jaxlab.evals.passkey_copy import evaluate_extension as evaluate_seed
from jaxlab.experiments import report
from jaxlab.experiments.rope_extension import real_run
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
  label = real_run.label
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
    return real_run.run_pretrained(config, workdir, t0)
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
