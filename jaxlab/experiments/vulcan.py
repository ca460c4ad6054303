"""Experiment "vulcan": class-specific ViT pruning vs generic baselines.

Per seed: pre-train a `vit_classifier` on every class (the generic trainer's
step, `StepRunner`), then for the target classes S (`config.target_classes`;
the C-way head is kept and accuracy is top-1 over all C logits on held-out
images of S, papers/O-S.md O.1):

* `dense`: the pre-trained model; `finetune`: it fine-tuned on S (unpruned);
* for each rate R: `Vulcan` (neuron scores on S, k-means collapse, rank
  regulariser, dual ascent, then the exact merge / SVD prune), and at
  Vulcan's exact per-layer widths (so at equal parameters and FLOPs):
  `Magnitude` (L2 norm, data-free), `Taylor` (scores on S, fine-tuned on S)
  and `Generic` (Taylor on all classes, fine-tuned on all classes: pruning
  that ignores the target subset), each fine-tuned for Vulcan's steps.

Also measured: the pruned-vs-unpruned accuracy gap of Vulcan (the
"lossless" claim), the forward latency and memory of the dense and pruned
models on this machine. Writes `results.json` (tables `accuracy`,
`efficiency`) and `accuracy_vs_params.png`.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from flax import nnx

from jaxlab import plotting
from jaxlab.experiments import results as results_lib
from jaxlab.compression import vulcan
from jaxlab.data import images
from jaxlab.experiments import log as log_lib
from jaxlab.models import vit_classifier as vc
from jaxlab.train import runner

BASELINES = {"magnitude": "Magnitude", "taylor": "Taylor",
             "generic": "Generic"}


def _label(method: str, rate: float) -> str:
  name = "Vulcan" if method == "vulcan" else BASELINES[method]
  return f"{name} R={rate:g}"


def _score_batches(x, y, n_batches: int, batch: int, seed: int):
  order = np.random.default_rng(seed).permutation(len(y))
  out = []
  for i in range(n_batches):
    idx = order[i * batch:(i + 1) * batch]
    if len(idx):
      out.append({"images": x[idx], "labels": y[idx]})
  return out


def _optim(pc, *, warmup: int = 0):
  return runner.optim_config(lr=float(pc.lr), warmup_steps=warmup,
                             weight_decay=float(pc.weight_decay),
                             schedule="cosine", clip_norm=0.0, b2=0.999)


def plot(table: results_lib.Table, path: str) -> str:
  """Target accuracy vs fraction of parameters kept (mean ± std)."""
  plt = plotting.pyplot()
  data = table.to_json()
  groups: dict[str, list] = {}
  for row in data["rows"]:
    name = row["label"].split(" R=")[0]
    acc = row["cells"]["acc"]["values"]
    frac = row["cells"]["params_frac"]["values"]
    groups.setdefault(name, []).append(
        (np.mean(frac), np.mean(acc), np.std(acc, ddof=1) if len(acc) > 1
         else 0.0))
  fig, ax = plt.subplots(figsize=(6, 4))
  for name, pts in groups.items():
    pts = sorted(pts)
    ax.errorbar([p[0] for p in pts], [100 * p[1] for p in pts],
                yerr=[100 * p[2] for p in pts], marker="o", capsize=3,
                label=name)
  ax.set(xlabel="fraction of parameters kept",
         ylabel="target-class top-1 (%)",
         title="Class-specific accuracy vs size")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  log = log_lib.logger("vulcan")
  os.makedirs(workdir, exist_ok=True)
  mcfg = vc.config_from_dict(config.model)
  n_cls = mcfg.num_classes
  x, y = images.load(config.images.name, **dict(config.images.options))
  (tx, ty), (ex, ey) = images.split(
      x, y, eval_fraction=float(config.images.eval_fraction), seed=0)
  target = images.check_classes(config.target_classes, n_cls)
  sx, sy = images.select_classes(tx, ty, target, num_classes=n_cls)
  sex, sey = images.select_classes(ex, ey, target, num_classes=n_cls)
  methods = [m for m in str(config.methods).split(",") if m]
  unknown = [m for m in methods if m != "vulcan" and m not in BASELINES]
  if unknown:
    raise ValueError(f"config.methods has unknown {unknown}; valid: vulcan, "
                     f"{', '.join(BASELINES)}")
  rates = [float(r) for r in config.rates]
  pre, post = config.pretrain, config.posttrain
  dense_params, dense_flops = vulcan.cost(mcfg), vulcan.cost(mcfg, "flops")
  vbase = dict(config.vulcan)

  acc_table = results_lib.Table(
      "accuracy", f"Top-1 on held-out images of classes {list(target)} "
      f"({len(sey)} images; over all {n_cls} logits)", row_label="method",
      columns=[results_lib.Column("acc", "target top-1 %", 1, 100),
               results_lib.Column("params_frac", "params kept", 3),
               results_lib.Column("flops_frac", "FLOPs kept", 3)])
  eff_table = results_lib.Table(
      "efficiency", "Measured forward cost of one batch "
      f"({int(config.measure.batch_size)} images) on this machine",
      row_label="model",
      columns=[results_lib.Column("params", "params", 0),
               results_lib.Column("mflops", "MFLOPs / image", 2),
               results_lib.Column("latency_ms", "latency ms", 2),
               results_lib.Column("param_kb", "weights KiB", 1),
               results_lib.Column("temp_kb", "XLA temp KiB", 1)])
  gap_table = results_lib.Table(
      "lossless", "Vulcan: accuracy of the post-trained model before and "
      "after pruning, and the largest logit change", row_label="rate",
      columns=[results_lib.Column("acc_unpruned", "unpruned %", 1, 100),
               results_lib.Column("acc_pruned", "pruned %", 1, 100),
               results_lib.Column("max_logit_diff", "max |Δ logit|", 4),
               results_lib.Column("lambda1", "λ1 at end", 1)])
  acc_table.add_row("dense")
  acc_table.add_row("finetune")
  extra: dict[str, Any] = {"target_classes": list(target), "per_seed": []}
  meas_x = ex[:int(config.measure.batch_size)]

  def add_eff(label, model, cfg, seed):
    m = vulcan.measure(model, meas_x, repeats=int(config.measure.repeats))
    eff_table.add_seed(label, seed, {
        "params": cfg.num_params(), "mflops": cfg.flops() / 1e6,
        "latency_ms": m["latency_ms"], "param_kb": m["param_bytes"] / 1024,
        "temp_kb": m["temp_bytes"] / 1024})

  comparisons = []
  for rate in rates:
    for method in methods:
      if method != "vulcan" and "vulcan" in methods:
        comparisons.append(results_lib.Comparison(
            "accuracy", "acc", _label("vulcan", rate), _label(method, rate)))
  res = None
  for seed in config.seeds:
    seed = int(seed)
    rec: dict[str, Any] = {"seed": seed}
    base = vc.ViTClassifier(mcfg, rngs=nnx.Rngs(seed))
    logs = vulcan.train_classifier(
        base, images.batches(tx, ty, batch_size=int(pre.batch_size),
                             seed=seed),
        steps=int(pre.steps), optim_cfg=_optim(pre,
                                               warmup=int(pre.warmup_steps)),
        seed=seed, log_every=max(int(pre.steps) // 4, 1))
    rec["pretrain_log"] = logs
    acc_all = vulcan.accuracy(base, ex, ey)
    acc_dense = vulcan.accuracy(base, sex, sey)
    rec["dense_acc_all_classes"] = acc_all
    log(f"seed {seed}: pre-trained, all-class acc {acc_all:.3f}, "
        f"target acc {acc_dense:.3f}")
    acc_table.add_seed("dense", seed, {"acc": acc_dense, "params_frac": 1.0,
                                       "flops_frac": 1.0})
    add_eff("dense", base, mcfg, seed)
    sub_batches = lambda s: images.batches(  # pylint: disable=g-long-lambda
        sx, sy, batch_size=int(post.batch_size), seed=s)
    all_batches = lambda s: images.batches(  # pylint: disable=g-long-lambda
        tx, ty, batch_size=int(post.batch_size), seed=s)
    ft = nnx.clone(base)
    vulcan.train_classifier(ft, sub_batches(seed), steps=int(post.steps),
                            optim_cfg=_optim(post), seed=seed)
    acc_table.add_seed("finetune", seed, {
        "acc": vulcan.accuracy(ft, sex, sey), "params_frac": 1.0,
        "flops_frac": 1.0})
    score_s = _score_batches(sx, sy, int(config.score_batches),
                             int(post.batch_size), seed)
    score_all = _score_batches(tx, ty, int(config.score_batches),
                               int(post.batch_size), seed)
    for rate in rates:
      vcfg = vulcan.VulcanConfig(rate=rate, seed=seed, **vbase)
      plan = vulcan.make_plan(base, [b["images"] for b in score_s], vcfg)
      widths = plan.widths
      small_cfg = widths.apply(mcfg)
      fracs = {"params_frac": vulcan.cost(small_cfg) / dense_params,
               "flops_frac": vulcan.cost(small_cfg, "flops") / dense_flops}
      rrec = {"rate": rate, "widths": {"mlp": list(widths.mlp),
                                       "qk": list(widths.qk),
                                       "v": list(widths.v)}, **fracs}
      for method in methods:
        label = _label(method, rate)
        if method == "vulcan":
          trainee = vulcan.VulcanTrainee(nnx.clone(base), plan, vcfg)
          vlogs = vulcan.train(
              trainee, sub_batches(seed), steps=int(post.steps),
              optim_cfg=vulcan.optim(lr=float(post.lr), rho=float(vcfg.rho),
                                     weight_decay=float(post.weight_decay)),
              seed=seed, log_every=max(int(post.steps) // 4, 1))
          acc_unpruned = vulcan.accuracy(trainee.model, sex, sey)
          small = vulcan.prune(trainee.model, plan)
          acc = vulcan.accuracy(small, sex, sey)
          diff = float(np.abs(vulcan.logits(small, sex)
                              - vulcan.logits(trainee.model, sex)).max())
          lam = np.asarray(trainee.lagrange[...])
          gap_table.add_seed(f"R={rate:g}", seed, {
              "acc_unpruned": acc_unpruned, "acc_pruned": acc,
              "max_logit_diff": diff, "lambda1": float(lam[0])})
          rrec["vulcan_log"] = vlogs
          add_eff(f"Vulcan R={rate:g}", small, small_cfg, seed)
        else:
          model = nnx.clone(base)
          generic = method == "generic"
          crit = "magnitude" if method == "magnitude" else "taylor"
          scores = vulcan.CRITERIA.get(crit)(
              model, score_all if generic else score_s)
          small = vulcan.select_prune(model, scores, widths)
          vulcan.train_classifier(
              small, all_batches(seed) if generic else sub_batches(seed),
              steps=int(post.steps), optim_cfg=_optim(post), seed=seed)
          acc = vulcan.accuracy(small, sex, sey)
        acc_table.add_seed(label, seed, {"acc": acc, **fracs})
        log(f"seed {seed} {label}: acc {acc:.3f} at {fracs['params_frac']:.3f}"
            f" params")
      rec[f"rate_{rate:g}"] = rrec
    extra["per_seed"].append(rec)
    # Written after every seed, so a run stopped early keeps its seeds.
    res = results_lib.write(
        workdir, "vulcan", tables=[acc_table, gap_table, eff_table],
        comparisons=comparisons, extra=extra, config=config, start_time=t0)

  plot_path = plot(acc_table, os.path.join(workdir,
                                            "accuracy_vs_params.png"))
  log(f"done: {workdir}/results.json")
  return {"results": res, "plot": plot_path,
          "accuracy": acc_table.to_json(), "efficiency": eff_table.to_json(),
          "lossless": gap_table.to_json()}
