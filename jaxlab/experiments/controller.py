"""Controller-module miniature (paper I, "CPU miniature"): jaxlab/configs/controller.py.

Per task and seed, trains vanilla / soft (τ = 1) / Gumbel-annealed models on
short instances with the trainer's step (`StepRunner`, loss "controller"),
then measures sequence-level exact accuracy at the training lengths and at
each test length (teacher-forced argmax = greedy exact match), the trace
alignment of the executed ops with the simulator's opcodes, the accuracy with
the controllers knocked out (NOOP everywhere), and the FLOP overhead:
counted (`controller_forward_flops`), measured (XLA cost analysis of the
compiled forward) and the spec's formula (1/(2p))(d_s/D)^2.
Writes WORKDIR/results.json (tables: accuracy, controller, flops),
accuracy_vs_length.png and table.md.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.experiments import results as results_lib
from jaxlab.data.synthetic import algorithmic as alg
from jaxlab.models import controller as ctl
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry
from jaxlab.objectives import controller as ctl_loss  # registers the loss
from jaxlab.train import runner

del ctl_loss
VARIANT_LABELS = {"vanilla": "vanilla (B1)", "soft": "soft τ=1 (B6)",
                  "gumbel": "Gumbel-annealed"}


def _resolve(value: int, steps: int, frac: float) -> int:
  return int(round(frac * steps)) if value == -1 else int(value)


def model_config(config, variant: str) -> ml_collections.ConfigDict:
  """`config.model` for a variant (vanilla: the plain decoder)."""
  m = ml_collections.ConfigDict(config.model.to_dict())
  steps = int(config.train.steps)
  if variant == "vanilla":
    del m["controller"]
    m.name = "decoder"
    return m
  cc = m.controller
  cc.anneal_steps = _resolve(cc.anneal_steps, steps, 0.6)
  if cc.hard_after_step == -2:
    cc.hard_after_step = int(round(0.8 * steps))
  if variant == "soft":
    cc.update(schedule="constant", tau0=1.0, eval_selection="soft",
              straight_through=False, hard_after_step=-1)
  elif variant != "gumbel":
    raise ValueError(f"config.variants has unknown {variant!r}; valid: "
                     "vanilla, soft, gumbel")
  return m


def loss_config(config) -> ml_collections.ConfigDict:
  lc = ml_collections.ConfigDict(config.loss.to_dict())
  lc.ent_steps = _resolve(lc.ent_steps, int(config.train.steps), 1.0)
  return lc


@nnx.jit
def _predict(model, ids, knockout):
  """argmax predictions, and for controllers the executed op per layer."""
  if isinstance(model, ctl.ControlledDecoder):
    out = model.forward(ids, knockout=knockout, output_trace=True)
    ops = jnp.stack([t["op"] for t in out.trace], 0)
    probs = jnp.stack([t["probs"] for t in out.trace], 0)
    ent = -jnp.sum(probs * jnp.log(jnp.clip(probs, 1e-9)), -1)
    return jnp.argmax(out.logits, -1), ops, ent
  logits = model(ids)
  return jnp.argmax(logits, -1), None, None


def evaluate(model, arrays: dict[str, np.ndarray], batch_size: int, *,
             knockout: bool = False) -> dict[str, float]:
  """Exact accuracy, trace alignment and selector entropy on `arrays`."""
  acc, hits, total, ents = [], 0.0, 0.0, []
  n = len(arrays["inputs"])
  for i in range(0, n, batch_size):
    sl = slice(i, i + batch_size)
    pred, ops, ent = _predict(model, jnp.asarray(arrays["inputs"][sl]),
                              jnp.asarray(knockout))
    acc.append(alg.exact_match(np.asarray(pred), arrays["targets"][sl],
                               arrays["loss_mask"][sl]))
    if ops is not None:
      tgt = arrays["op_targets"][sl]
      valid = tgt >= 0
      hits += float(((np.asarray(ops) == tgt[None]) & valid[None]).sum())
      total += float(valid.sum()) * ops.shape[0]
      ents.append(float((np.asarray(ent) * valid[None]).sum() /
                        max(valid.sum() * ent.shape[0], 1)))
  out = {"acc": float(np.concatenate(acc).mean())}
  if total:
    out["align"] = hits / total
    out["entropy"] = float(np.mean(ents))
  return out


def pad_lengths(config) -> tuple[int, int]:
  """(train T, eval T) shared by every task, so that every task and length
  reuses one compiled train step and one compiled forward per variant
  (compilation dominates the CPU miniature; right padding is harmless: each
  position sees only its prefix)."""
  tasks = [t for t in config.tasks.split(",") if t]

  def longest(n):
    return max(len(e.tokens) - 1 for t in tasks
               for e in alg.make_examples(t, [n], 64, seed=10 ** 6))
  train_t = longest(max(config.train_lengths)) + 4
  eval_t = max(train_t, longest(max(config.test_lengths)) + 4)
  return train_t, eval_t


def train_variant(config, task: str, variant: str, seed: int, log):
  steps, bs = int(config.train.steps), int(config.train.batch_size)
  spec = model_registry.get_spec(model_config(config, variant),
                                 vocab_size=alg.VOCAB_SIZE, seed=seed)
  model = spec.factory()
  lengths = list(config.train_lengths)
  train = alg.encode(alg.make_examples(task, lengths, steps * bs,
                                       seed=1000 + seed),
                     pad_to=pad_lengths(config)[0])
  run = runner.StepRunner(
      model, loss="controller", loss_config=loss_config(config),
      optim=config.optim,  # the whole section: b2, clip_norm, grad_accum...
      steps=steps, seed=seed)
  keys = ("inputs", "targets", "loss_mask", "op_targets")
  last = {}
  for step in range(steps):
    sl = slice(step * bs, (step + 1) * bs)
    last = run.step({k: train[k][sl] for k in keys}, step)
    if step % max(steps // 5, 1) == 0 or step == steps - 1:
      log(f"{task}/{variant}/seed{seed} step {step}: "
          + " ".join(f"{k}={v:.3f}" for k, v in sorted(last.items())
                     if k in ("loss", "task_loss", "op_acc", "tau")))
  return run.write_back(), last


def eval_sets(config, task: str) -> dict[str, dict[str, np.ndarray]]:
  t = pad_lengths(config)[1]
  out = {"train": alg.encode(alg.make_examples(
      task, list(config.train_lengths), config.num_eval, seed=77), pad_to=t)}
  for n in config.test_lengths:
    out[str(n)] = alg.encode(alg.make_examples(task, [n], config.num_eval,
                                               seed=78 + n), pad_to=t)
  return out


def flop_rows(config) -> list[dict]:
  """Counted / measured / formula overhead for each p of flops_every_p."""
  if not config.flops_every_p:
    return []
  base = model_registry.get_spec(model_config(config, "vanilla"),
                                 vocab_size=alg.VOCAB_SIZE).config
  ids = jnp.zeros((1, int(config.flops_seq_len)), jnp.int32)
  plain = decoder_lib.Decoder(base, rngs=nnx.Rngs(0))
  plain_flops = ctl.compiled_flops(lambda i: plain(i), ids)
  rows = []
  for p in config.flops_every_p:
    if p > base.num_layers:
      continue
    m = model_config(config, "gumbel")
    m.controller.every_p = int(p)
    spec = model_registry.get_spec(m, vocab_size=alg.VOCAB_SIZE)
    ccfg = ctl.controller_config(m.controller)
    model = spec.factory()
    measured = ctl.compiled_flops(
        lambda i, model=model: model(i, selection="hard"), ids) / plain_flops
    rows.append({
        "p": int(p), "measured": measured - 1.0,
        "counted": ctl.flop_overhead(base, ccfg, int(config.flops_seq_len)),
        "formula": ctl.paper_overhead(int(p), ccfg.state_dim, base.dim)})
  return rows


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  log = lambda msg: print(f"[controller {time.time() - t0:6.0f}s] {msg}",  # pylint: disable=g-long-lambda
                          flush=True)
  tasks = [t for t in config.tasks.split(",") if t]
  variants = [v for v in config.variants.split(",") if v]
  for t in tasks:
    alg.TASKS.get(t)
  lengths = ["train"] + [str(n) for n in config.test_lengths]
  records = []
  for task in tasks:
    sets = eval_sets(config, task)
    for seed in config.seeds:
      for variant in variants:
        model, last = train_variant(config, task, variant, int(seed), log)
        rec = {"task": task, "variant": variant, "seed": int(seed),
               "final_task_loss": last.get("task_loss")}
        for name in lengths:
          ev = evaluate(model, sets[name], int(config.eval_batch_size))
          rec[f"acc_{name}"] = ev["acc"]
          if "align" in ev:
            rec[f"align_{name}"] = ev["align"]
            rec[f"entropy_{name}"] = ev["entropy"]
        if variant != "vanilla":
          ko = evaluate(model, sets["train"], int(config.eval_batch_size),
                        knockout=True)
          rec["acc_knockout"] = ko["acc"]
          rec["knockout_drop"] = rec["acc_train"] - ko["acc"]
        rec["aul"] = float(np.mean([rec[f"acc_{n}"] for n in lengths]))
        records.append(rec)
        log(f"{task}/{variant}/seed{seed}: " + " ".join(
            f"{k}={v:.3f}" for k, v in rec.items() if isinstance(v, float)))
  flops = flop_rows(config)
  log(f"flops: {flops}")
  out = {"records": records, "flops": flops,
         "lengths": [int(np.mean(config.train_lengths))] +
                    [int(n) for n in config.test_lengths]}
  tables, comparisons = results_tables(out, config)
  results_lib.write(workdir, "controller", tables=tables,
                    comparisons=comparisons, extra=out, config=config,
                    start_time=t0)
  _plot(out, config, os.path.join(workdir, "accuracy_vs_length.png"))
  return out


def _row(rec) -> str:
  return f"{rec['task']} / {VARIANT_LABELS.get(rec['variant'], rec['variant'])}"


def results_tables(out: dict, config) -> tuple[list, list]:
  lo, hi = min(config.train_lengths), max(config.train_lengths)
  acc_cols = [results_lib.Column("acc_train", f"acc n={lo}-{hi} (train)", 1,
                                 100)]
  acc_cols += [results_lib.Column(f"acc_{n}", f"acc n={n}", 1, 100)
               for n in config.test_lengths]
  acc_cols.append(results_lib.Column("aul", "AUL", 1, 100))
  acc = results_lib.Table(
      "accuracy", "Sequence-level exact accuracy (%) vs length; AUL = mean "
      "over the evaluated lengths", acc_cols, row_label="task / model")
  last = str(config.test_lengths[-1])
  ctl_cols = [results_lib.Column("align_train", "trace alignment n=train",
                                 1, 100),
              results_lib.Column(f"align_{last}",
                                 f"trace alignment n={last}", 1, 100),
              results_lib.Column("acc_knockout", "acc knocked out (train n)",
                                 1, 100),
              results_lib.Column("knockout_drop", "knockout drop", 1, 100),
              results_lib.Column("entropy_train", "selector entropy (nats)",
                                 3)]
  ctrl = results_lib.Table(
      "controller", "Controllers: executed op vs simulator opcode, and the "
      "test-time knockout (NOOP everywhere)", ctl_cols,
      row_label="task / model")
  for rec in out["records"]:
    acc.add_seed(_row(rec), rec["seed"],
                 {c.key: rec[c.key] for c in acc_cols if c.key in rec})
    if rec["variant"] != "vanilla":
      ctrl.add_seed(_row(rec), rec["seed"],
                    {c.key: rec[c.key] for c in ctl_cols if c.key in rec})
  flops = results_lib.Table(
      "flops", "FLOP overhead of the controllers (forward, % of the "
      f"decoder's, T = {config.flops_seq_len})",
      [results_lib.Column("formula", "formula (1/(2p))(d_s/D)²", 1, 100,
                          spread=False),
       results_lib.Column("counted", "counted (matmuls)", 1, 100,
                          spread=False),
       results_lib.Column("measured", "measured (XLA cost analysis)", 1,
                          100, spread=False)], row_label="p")
  for r in out["flops"]:
    flops.add_seed(f"p={r['p']}", None,
                   {k: r[k] for k in ("formula", "counted", "measured")})
  comparisons = []
  tasks = sorted({r["task"] for r in out["records"]})
  variants = {r["variant"] for r in out["records"]}
  for task in tasks:
    lab = lambda v, task=task: f"{task} / {VARIANT_LABELS[v]}"  # pylint: disable=g-long-lambda
    for a, b in (("gumbel", "vanilla"), ("gumbel", "soft")):
      if a in variants and b in variants:
        for col in (f"acc_{last}", "aul"):
          comparisons.append(results_lib.Comparison("accuracy", col,
                                                    lab(a), lab(b)))
  return [acc, ctrl, flops], comparisons


def _plot(out: dict, config, path: str) -> None:
  tasks = sorted({r["task"] for r in out["records"]})
  names = ["train"] + [str(n) for n in config.test_lengths]
  xs = out["lengths"]
  fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6),
                           squeeze=False)
  for ax, task in zip(axes[0], tasks):
    for variant in [v for v in VARIANT_LABELS]:
      recs = [r for r in out["records"]
              if r["task"] == task and r["variant"] == variant]
      if not recs:
        continue
      vals = np.array([[r[f"acc_{n}"] for n in names] for r in recs]) * 100
      sd = vals.std(0, ddof=1) if len(recs) > 1 else np.zeros(len(names))
      ax.errorbar(xs, vals.mean(0), yerr=sd, marker="o", capsize=3,
                  label=VARIANT_LABELS[variant])
    ax.set(title=f"{task} (n seeds = {len(config.seeds)})",
           xlabel="instance length n (train: mean of the training range)",
           ylabel="exact accuracy (%)", xscale="log", ylim=(-3, 103))
    ax.minorticks_off()
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
