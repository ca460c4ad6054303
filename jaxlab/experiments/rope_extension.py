"""Experiment "rope_extension": train short, evaluate long under every scaling.

For each seed: train a tiny byte-level decoder at `task.train_len` on a
copy-style passkey corpus (`PasskeySource`), then, training-free, rebind its
parameters to every `rope_scaling` in `config.methods`
(`long_context.with_rope_scaling`) and measure passkey exact-match accuracy
over a depth grid and chunked perplexity at each `train_len * factor`.
Writes `results.json` (per-seed values, learning curves and mean +- std
tables) and `passkey.png` / `perplexity.png` / `cumulative_scale.png`.

The task is chosen so that a 2-layer decoder learns it in a few thousand
CPU steps (an induction / copy task): the needle is a marker token followed
by `digits` distinct digits, `#472. `, hidden at a random depth in filler
sentences (lower-case, digit-free, no `#`); the prompt ends with the same
marker `#`, so the answer is "the tokens that followed the previous `#`".
The answer digits carry `answer_weight` times the loss weight of a filler
token, so retrieval is learned early while the filler still trains a
language model whose perplexity is measured at long lengths.

Stages (`jaxlab.io.stages`): per seed, the trained model
(`seed{N}/model.npz`, trained by the trainer in `seed{N}/train_<digest>/`,
its checkpoints and metrics.jsonl, so a killed training resumes there) is
reused by a run whose `TRAIN_FIELDS` (less `TRAIN_EXCLUDE`) and seed are
the same; its evaluation (`seed{N}/eval.json`) by one whose `EVAL_FIELDS`
are the same too.
"""

import copy
import json
import os
import time
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.evals import long_context as lc
from jaxlab.io import stages
from jaxlab.models import registry as model_registry
from jaxlab.nn import rope
from jaxlab.train import trainer
from jaxlab.experiments import results as results_lib

# Lower-case, digit-free filler, so "#" and digits only occur in the needle
# and the question.
SENTENCES = (
    "the cat sat on the mat.", "a bird sang in the tree.",
    "rain fell on the old roof.", "we walked along the river.",
    "snow covered the quiet hill.", "a train left the station.",
    "the lamp glowed all night.", "the wind moved the grass.")
MARKER = "#"
NEEDLE = MARKER + "{value}. "
QUESTION = MARKER


def _filler(rng: np.random.Generator, n: int) -> str:
  return " ".join(SENTENCES[i] for i in rng.integers(0, len(SENTENCES), n))


def passkey(tok, *, length: int, depth: float, rng: np.random.Generator,
            digits: int = 3) -> lc.RetrievalExample:
  """A prompt of `length` tokens ending in the marker; answer: the key.

  The key has `digits` distinct digits, so copying it token by token (an
  induction head: "what followed the previous occurrence of this token")
  is unambiguous.
  """
  value = "".join(str(d) for d in rng.permutation(10)[:digits])
  prompt, start = lc.build_prompt(
      tok, length=length, depth=depth, needle=NEEDLE.format(value=value),
      question=QUESTION, filler=_filler(rng, length // 20 + 2))
  answer_ids = np.asarray(tok.encode(value), np.int32)
  return lc.RetrievalExample(prompt, answer_ids, value, length, depth, start)


def document(tok, length: int, rng: np.random.Generator, digits: int,
             min_prompt: int = 16) -> tuple[np.ndarray, int]:
  """`length + 1` tokens holding one passkey episode, and where its answer is.

  The episode (prompt + answer) has a random length, and filler sentences
  follow it up to `length + 1` tokens. Varying where the question sits
  matters: with the question always at the last position, a tiny model
  learns retrieval *at that absolute position* only (measured: exact match
  1.0 with the question at position 61, 0.0 at position 60 for a needle at
  depth 0), which would confound the length-extrapolation test.

  Returns:
    (ids `[length + 1]` int32, index of the first answer token in ids).
  """
  plen = int(rng.integers(min(min_prompt, length + 1 - digits),
                          length + 2 - digits))
  ex = passkey(tok, length=plen, depth=float(rng.uniform()), rng=rng,
               digits=digits)
  tail = np.asarray(tok.encode(". " + _filler(rng, length // 20 + 2)),
                    np.int32)
  ids = np.concatenate([ex.prompt_ids, ex.answer_ids, tail])[:length + 1]
  return ids.astype(np.int32), plen


class PasskeySource:
  """Random-access LM examples of passkey docs.

  Each example: `inputs`/`targets` `[length]`, `loss_mask` (1 on filler
  targets, `answer_weight` on the answer digits) and `answer_mask` (1 on
  the answer digits only, for the accuracy metrics).
  """

  def __init__(self, tok, *, num: int, length: int, digits: int, seed: int,
               answer_weight: float = 1.0):
    self.tok, self.num, self.length, self.digits = tok, num, length, digits
    self.seed, self.answer_weight = seed, answer_weight

  def __len__(self) -> int:
    return self.num

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    doc, start = document(self.tok, self.length, np.random.default_rng(
        [self.seed, int(i)]), self.digits)
    answer = np.zeros(self.length, np.float32)
    answer[start - 1:start - 1 + self.digits] = 1.0  # targets = ids[1:]
    # The answer is `digits` of `length` targets; upweighting it makes
    # retrieval the dominant signal (a choice of this miniature, not of the
    # paper) while the filler still trains the LM.
    mask = 1.0 + (self.answer_weight - 1.0) * answer
    return {"inputs": doc[:-1], "targets": doc[1:], "loss_mask": mask,
            "answer_mask": answer}


def passkey_loss(model, batch, *, rng, config=None):
  """Weighted next-token NLL, plus answer accuracy metrics (learning curve).

  loss = sum_t w_t nll_t / sum_t w_t with w = `loss_mask`; metrics
  `answer_nll`, `answer_acc` (fraction of answer digits whose argmax is
  right) and `answer_exact` (all digits right, teacher-forced = greedy).
  """
  del rng, config
  logits = model(batch["inputs"]).astype(jnp.float32)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits,
                                                        batch["targets"])
  w = batch["loss_mask"].astype(jnp.float32)
  ans = batch["answer_mask"].astype(jnp.float32)
  correct = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32)
  n_ans = jnp.maximum(ans.sum(), 1.0)
  row_ok = jnp.all((correct > 0) | (ans == 0), axis=-1).astype(jnp.float32)
  metrics = {
      "answer_nll": jnp.sum(nll * ans) / n_ans,
      "answer_acc": jnp.sum(correct * ans) / n_ans,
      "answer_exact": jnp.mean(row_ok),
      "filler_nll": jnp.sum(nll * (1 - ans)) / jnp.maximum(
          (1 - ans).sum(), 1.0),
  }
  return jnp.sum(nll * w) / jnp.maximum(w.sum(), 1.0), metrics


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
TRAIN_EXCLUDE = ("task.eval_factors", "task.eval_docs", "task.depths",
                 "task.samples", "task.eval_batch_size")
EVAL_FIELDS = ("methods", "task")


PLAN = stages.Plan(TRAIN_FIELDS, EVAL_FIELDS, train_exclude=TRAIN_EXCLUDE)
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


def learning_curve(workdir: str) -> list[dict[str, float]]:
  """Held-out answer metrics per eval step from the trainer's metrics.jsonl."""
  path = os.path.join(workdir, "metrics.jsonl")
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        r = json.loads(line)
        if "eval/answer_exact" in r:
          rows.append({"step": int(r["step"]),
                       **{k[5:]: float(v) for k, v in r.items()
                          if k.startswith("eval/")}})
  return rows


def evaluate_seed(model, config, tok) -> dict[str, Any]:
  t = config.task
  train_len = int(t.train_len)
  lengths = [train_len * int(f) for f in t.eval_factors]
  rng = np.random.default_rng(int(t.data_seed) + 7)
  docs = {n: np.stack([document(tok, n - 1, rng, int(t.digits))[0]
                       for _ in range(int(t.eval_docs))]) for n in lengths}
  grids = {n: lc.retrieval_grid(passkey, tok, lengths=[n - int(t.digits)],
                                depths=list(t.depths),
                                samples=int(t.samples),
                                seed=int(t.data_seed) + 11,
                                digits=int(t.digits)) for n in lengths}
  bs = int(t.eval_batch_size)
  memo = {}

  def retrieval(m, n):  # one pass gives both passkey metrics
    key = (id(m), n)
    if key not in memo:
      memo.clear()
      memo[key] = lc.evaluate_retrieval(m, grids[n], batch_size=bs)
    return memo[key]

  tasks = {
      "passkey": lambda m, n: retrieval(m, n)["exact"],
      "passkey_token_acc": lambda m, n: retrieval(m, n)["token_accuracy"],
      "perplexity": lambda m, n: lc.chunked_perplexity(
          m, docs[n], chunk_len=n, batch_size=bs)["perplexity"],
  }
  for d in t.depths:  # exact match per needle depth
    tasks[f"passkey@{float(d):g}"] = (
        lambda m, n, d=float(d): retrieval(m, n)["cells"][
            (n - int(t.digits), d)]["exact"])
  return lc.train_short_test_long(model, train_len=train_len,
                                  eval_lengths=lengths, tasks=tasks,
                                  methods=tuple(config.methods))


def summarize(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
  """{metric: {method: {"mean": [per length], "std": [...]}}}."""
  out: dict[str, Any] = {}
  for metric in per_seed[0]["metrics"]:
    out[metric] = {}
    for method in per_seed[0]["methods"]:
      vals = np.array([r["metrics"][metric][method] for r in per_seed])
      out[metric][method] = {
          "mean": vals.mean(0).tolist(),
          "std": (vals.std(0, ddof=1) if len(vals) > 1
                  else np.zeros(vals.shape[1])).tolist()}
  return out


def markdown_table(summary: dict[str, Any], lengths: list[int],
                   train_len: int) -> str:
  """Mean ± std tables (passkey exact match, digit accuracy, perplexity)."""
  head = "| method | " + " | ".join(
      f"{n} ({n // train_len}x)" for n in lengths) + " |"
  lines = []
  for metric, title, fmt in (
      ("passkey", "passkey exact match", "{:.2f} ± {:.2f}"),
      ("passkey_token_acc", "passkey digit accuracy", "{:.2f} ± {:.2f}"),
      ("perplexity", "perplexity", "{:.2f} ± {:.2f}")):
    if metric not in summary:
      continue
    lines += [f"**{title}**", "", head,
              "|---" * (len(lengths) + 1) + "|"]
    for method, v in summary[metric].items():
      cells = [fmt.format(m, s) for m, s in zip(v["mean"], v["std"])]
      lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines.append("")
  return "\n".join(lines)


def _plot_metric(summary, metric, lengths, path, log_y=False):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 3.6))
  for method, v in summary[metric].items():
    ax.errorbar(lengths, v["mean"], yerr=v["std"], marker="o", capsize=2,
                label=method)
  ax.set_xscale("log", base=2)
  if log_y:
    ax.set_yscale("log")
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel(metric)
  ax.legend(fontsize=7, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def plot_learning_curves(per_seed, path: str) -> str:
  """Held-out answer exact match / digit accuracy vs step, one line per seed."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(5, 3.2))
  for rec in per_seed:
    curve = rec.get("learning_curve") or []
    if curve:
      steps = [r["step"] for r in curve]
      ax.plot(steps, [r["answer_exact"] for r in curve], marker="o",
              label=f"seed {rec['seed']} exact")
      ax.plot(steps, [r["answer_acc"] for r in curve], ls="--",
              label=f"seed {rec['seed']} digit acc.")
  ax.set_xlabel("training step")
  ax.set_ylabel("held-out answer accuracy (1x)")
  ax.set_ylim(0, 1.02)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def plot_cumulative_scale(path: str, *, head_dim: int = 128,
                          base: float = 1e4, original: int = 4096,
                          factor: float = 16.0) -> str:
  """MrRoPE Fig. 3 (qualitative): s_i and lambda_i for every method."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  kw = dict(head_dim=head_dim, base=base, factor=factor,
            original_max_position=original)
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
  for m in ("pi", "ntk", "yarn", "yarn_rotation", "llama3", "mrope_uni",
            "mrope_pro"):
    a1.plot(rope.cumulative_scale(m, **kw), label=m)
    a2.plot(np.log(rope.step_ratio(m, **kw)), label=m)
  a1.set_yscale("log")
  a1.set_xlabel("pair i")
  a1.set_ylabel("cumulative scale s_i")
  a2.set_xlabel("pair i")
  a2.set_ylabel("log lambda_i = log s_{i+1}/s_i")
  a1.legend(fontsize=7)
  fig.suptitle(f"D={head_dim}, b={base:g}, L={original}, S={factor:g}")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


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
  mcfg = model_registry.decoder_config(config.model)
  roots = {}
  for m in config.methods:
    inv, _ = rope.scaling_tables(
        rope.extension_scaling(m, train_len=train_len, eval_len=lengths[-1]),
        head_dim=mcfg.resolved_head_dim, base=mcfg.rope_theta,
        seq_len=lengths[-1])
    roots[m] = rope.rope_bound_first_root(inv, max_distance=1 << 16)
  out = {
      "methods": list(config.methods), "lengths": lengths,
      "train_len": train_len, "seeds": [int(s) for s in config.seeds],
      "final_train_loss": final_losses, "summary": summary,
      "per_seed": per_seed, "rope_bound_first_root_at_max_factor": roots,
      "table_markdown": markdown_table(summary, lengths, train_len),
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
  results_lib.write(workdir, "rope_extension", tables=tables,
                    comparisons=comparisons, extra=out, config=config,
                    start_time=t0)
  return out
