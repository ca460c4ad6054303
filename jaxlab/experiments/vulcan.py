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

The real run (`config.data.source` hf / tfds / grain, the `paper` preset):
the pretrained ViT / DeiT of `config.init_from` (`jaxlab.io.pretrained`:
an HF directory or Hub id) is the base model (no pre-training), its
`preprocessor_config.json` the preprocessing (`config.processor` when it
has none); ImageNet-1k rows (`jaxlab.data.image_rows`: TFDS
`imagenet2012`, the Hub's `ILSVRC/imagenet-1k`, or an image-folder /
Parquet / ArrayRecord copy through grain) of `data.split` post-train and
score, those of `data.eval_split` measure top-1 over all C logits, both
restricted to `target_classes` (O.1). `results.json`'s `data.rows` counts
the rows read of each split (`data.max_rows` caps them).
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
from jaxlab.data import image_rows
from jaxlab.data import images
from jaxlab.data import pipeline
from jaxlab.experiments import log as log_lib
from jaxlab.models import vit_classifier as vc
from jaxlab.train import runner

BASELINES = {"magnitude": "Magnitude", "taylor": "Taylor",
             "generic": "Generic"}


def _label(method: str, rate: float) -> str:
  name = "Vulcan" if method == "vulcan" else BASELINES[method]
  return f"{name} R={rate:g}"


def _plan(base, score_batches, mcfg, *, rate, seed, vbase, dense):
  """Vulcan's pruning plan at `rate` from the scoring batches, the pruned
  config, its cost fractions of `dense` (params, flops) and the rate's
  record: (vcfg, plan, small_cfg, fracs, record)."""
  vcfg = vulcan.VulcanConfig(rate=rate, seed=seed, **vbase)
  plan = vulcan.make_plan(base, [b["images"] for b in score_batches], vcfg)
  widths = plan.widths
  small_cfg = widths.apply(mcfg)
  fracs = {"params_frac": vulcan.cost(small_cfg) / dense[0],
           "flops_frac": vulcan.cost(small_cfg, "flops") / dense[1]}
  record = {"rate": rate, "widths": {"mlp": list(widths.mlp),
                                     "qk": list(widths.qk),
                                     "v": list(widths.v)}, **fracs}
  return vcfg, plan, small_cfg, fracs, record


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


REAL_SOURCES = ("hf", "tfds", "grain")


def _real_base(config):
  """(model, cfg, processor) of `config.init_from` (a ViT / DeiT)."""
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  spec = str(config.get("init_from", "") or "")
  if not spec:
    raise ValueError("the real Vulcan run (data.source="
                     f"{config.data.source!r}) needs config.init_from: a "
                     "ViT / DeiT classification checkpoint (HF dir or Hub "
                     "id, e.g. facebook/deit-base-patch16-224)")
  model, mcfg = pretrained.load(spec)
  if not isinstance(model, vc.ViTClassifier):
    raise ValueError(f"config.init_from={spec!r} loads a "
                     f"{type(model).__name__}; Vulcan prunes a ViT / DeiT "
                     "image classifier (ViTForImageClassification, "
                     "DeiTForImageClassification)")
  proc = pretrained.image_processor(
      spec, default=dict(config.get("processor") or {}))
  out = proc.output_size(mcfg.image_size, mcfg.image_size)
  side = (proc.crop_size["height"], proc.crop_size["width"]) if (
      proc.do_center_crop) else out
  if tuple(side) != (mcfg.image_size, mcfg.image_size):
    raise ValueError(f"the image processor of {spec!r} gives {side} images; "
                     f"the model reads {mcfg.image_size} x "
                     f"{mcfg.image_size} (fix preprocessor_config.json or "
                     "config.processor)")
  return model, mcfg, proc




def _vulcan_run(base, plan, vcfg, batches, post, ex, ey, seed: int):
  """Vulcan's post-training of a copy of `base` under `plan` on `batches`,
  then its pruning: (the pruned model, its `lossless` table row on the
  evaluation images `ex`, `ey`, the training log)."""
  trainee = vulcan.VulcanTrainee(nnx.clone(base), plan, vcfg)
  log = vulcan.train(
      trainee, batches, steps=int(post.steps),
      optim_cfg=vulcan.optim(lr=float(post.lr), rho=float(vcfg.rho),
                             weight_decay=float(post.weight_decay)),
      seed=seed, log_every=max(int(post.steps) // 4, 1))
  small = vulcan.prune(trainee.model, plan)
  row = {"acc_unpruned": vulcan.accuracy(trainee.model, ex, ey),
         "acc_pruned": vulcan.accuracy(small, ex, ey),
         "max_logit_diff": float(np.abs(vulcan.logits(small, ex)
                                        - vulcan.logits(trainee.model,
                                                        ex)).max()),
         "lambda1": float(np.asarray(trainee.lagrange[...])[0])}
  return small, row, log

def _lossless_table() -> results_lib.Table:
  """Accuracy of the post-trained model before and after pruning, the
  largest logit change and λ1, one row per rate."""
  return results_lib.Table(
      "lossless", "Vulcan: accuracy of the post-trained model before and "
      "after pruning, and the largest logit change", row_label="rate",
      columns=[results_lib.Column("acc_unpruned", "unpruned %", 1, 100),
               results_lib.Column("acc_pruned", "pruned %", 1, 100),
               results_lib.Column("max_logit_diff", "max |Δ logit|", 4),
               results_lib.Column("lambda1", "λ1 at end", 1)])

def run_real(config, workdir: str) -> dict[str, Any]:
  """Vulcan on a pretrained ViT / DeiT and released ImageNet rows."""
  t0 = time.time()
  log = log_lib.logger("vulcan")
  os.makedirs(workdir, exist_ok=True)
  base, mcfg, proc = _real_base(config)
  n_cls = mcfg.num_classes
  target = images.check_classes(config.target_classes, n_cls)
  split = str(config.data.get("split", "train"))
  eval_split = str(config.data.get("eval_split", "") or "")
  if not eval_split:
    raise ValueError("data.eval_split is empty: name the split top-1 is "
                     "measured on (ImageNet: validation)")
  train_rows = image_rows.read(config.data, split)
  eval_rows = image_rows.read(config.data, eval_split)
  rows_read = {split: len(train_rows), eval_split: len(eval_rows)}
  tr_idx = image_rows.class_indices(train_rows, target)
  ev_idx = image_rows.class_indices(eval_rows, target)
  for name, idx in ((split, tr_idx), (eval_split, ev_idx)):
    if not len(idx):
      raise ValueError(f"none of the {rows_read[name]} rows read of split "
                       f"{name!r} has a label in target_classes="
                       f"{list(target)}; raise data.max_rows (0: all)")
  sex, sey = image_rows.arrays(eval_rows, ev_idx, proc)
  log(f"read {rows_read}: {len(tr_idx)} / {len(ev_idx)} rows of the "
      f"{len(target)} target classes")
  methods = [m for m in str(config.methods).split(",") if m]
  unknown = [m for m in methods if m != "vulcan" and m not in BASELINES]
  if unknown:
    raise ValueError(f"config.methods has unknown {unknown}; valid: vulcan, "
                     f"{', '.join(BASELINES)}")
  rates = [float(r) for r in config.rates]
  post = config.posttrain
  dense_params, dense_flops = vulcan.cost(mcfg), vulcan.cost(mcfg, "flops")
  vbase = dict(config.vulcan)

  def batches(indices, seed):
    ds = image_rows.examples(train_rows, indices, proc)
    return pipeline.batched_dataset(
        ds, global_batch=min(int(post.batch_size), len(indices)), seed=seed,
        shuffle=True, repeat=True, process_index=0, process_count=1)

  all_idx = np.arange(len(train_rows))
  acc_table = results_lib.Table(
      "accuracy", f"Top-1 on {eval_split} images of classes {list(target)} "
      f"({len(sey)} images; over all {n_cls} logits)", row_label="method",
      columns=[results_lib.Column("acc", "target top-1 %", 1, 100),
               results_lib.Column("params_frac", "params kept", 3),
               results_lib.Column("flops_frac", "FLOPs kept", 3)])
  gap_table = _lossless_table()
  extra: dict[str, Any] = {"target_classes": list(target), "per_seed": [],
                           "target_rows": {split: int(len(tr_idx)),
                                           eval_split: int(len(ev_idx))}}
  data = results_lib.data_provenance(config, rows=rows_read)
  comparisons = [
      results_lib.Comparison("accuracy", "acc", _label("vulcan", rate),
                             _label(method, rate))
      for rate in rates for method in methods
      if method != "vulcan" and "vulcan" in methods]
  res = None
  for seed in config.seeds:
    seed = int(seed)
    rec: dict[str, Any] = {"seed": seed}
    acc_table.add_seed("dense", seed, {
        "acc": vulcan.accuracy(base, sex, sey), "params_frac": 1.0,
        "flops_frac": 1.0})
    ft = nnx.clone(base)
    vulcan.train_classifier(ft, batches(tr_idx, seed), steps=int(post.steps),
                            optim_cfg=_optim(post), seed=seed)
    acc_table.add_seed("finetune", seed, {
        "acc": vulcan.accuracy(ft, sex, sey), "params_frac": 1.0,
        "flops_frac": 1.0})
    n_score = int(config.score_batches) * int(post.batch_size)
    order = np.random.default_rng(seed).permutation(tr_idx)[:n_score]
    sx, sy = image_rows.arrays(train_rows, order, proc)
    score_s = _score_batches(sx, sy, int(config.score_batches),
                             int(post.batch_size), seed)
    for rate in rates:
      vcfg, plan, small_cfg, fracs, rrec = _plan(
          base, score_s, mcfg, rate=rate, seed=seed, vbase=vbase,
          dense=(dense_params, dense_flops))
      for method in methods:
        if method == "vulcan":
          small, gap, rrec["vulcan_log"] = _vulcan_run(
              base, plan, vcfg, batches(tr_idx, seed), post, sex, sey, seed)
          acc = gap["acc_pruned"]
          gap_table.add_seed(f"R={rate:g}", seed, gap)
        else:
          generic = method == "generic"
          crit = "magnitude" if method == "magnitude" else "taylor"
          score_all = score_s
          if generic:
            pick = np.random.default_rng(seed).permutation(all_idx)[:n_score]
            ax, ay = image_rows.arrays(train_rows, pick, proc)
            score_all = _score_batches(ax, ay, int(config.score_batches),
                                       int(post.batch_size), seed)
          model = nnx.clone(base)
          small = vulcan.select_prune(
              model, vulcan.CRITERIA.get(crit)(model, score_all), plan.widths)
          vulcan.train_classifier(
              small, batches(all_idx if generic else tr_idx, seed),
              steps=int(post.steps), optim_cfg=_optim(post), seed=seed)
          acc = vulcan.accuracy(small, sex, sey)
        acc_table.add_seed(_label(method, rate), seed, {"acc": acc, **fracs})
        log(f"seed {seed} {_label(method, rate)}: acc {acc:.3f} at "
            f"{fracs['params_frac']:.3f} params")
      rec[f"rate_{rate:g}"] = rrec
    extra["per_seed"].append(rec)
    res = results_lib.write(
        workdir, "vulcan", tables=[acc_table, gap_table],
        comparisons=comparisons, extra=extra, config=config, start_time=t0,
        data=data)
  log(f"done: {workdir}/results.json")
  return {"results": res, "accuracy": acc_table.to_json(),
          "lossless": gap_table.to_json()}


def run(config, workdir: str) -> dict[str, Any]:
  if config.get("data") is not None and (
      config.data.get("source", "") in REAL_SOURCES):
    return run_real(config, workdir)
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
  gap_table = _lossless_table()
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
      vcfg, plan, small_cfg, fracs, rrec = _plan(
          base, score_s, mcfg, rate=rate, seed=seed, vbase=vbase,
          dense=(dense_params, dense_flops))
      for method in methods:
        label = _label(method, rate)
        if method == "vulcan":
          small, gap, rrec["vulcan_log"] = _vulcan_run(
              base, plan, vcfg, sub_batches(seed), post, sex, sey, seed)
          acc = gap["acc_pruned"]
          gap_table.add_seed(f"R={rate:g}", seed, gap)
          add_eff(f"Vulcan R={rate:g}", small, small_cfg, seed)
        else:
          model = nnx.clone(base)
          generic = method == "generic"
          crit = "magnitude" if method == "magnitude" else "taylor"
          scores = vulcan.CRITERIA.get(crit)(
              model, score_all if generic else score_s)
          small = vulcan.select_prune(model, scores, plan.widths)
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
