"""B-calibration (paper N): see jaxlab/configs/calibration.py.

Toy (default), per seed: a tiny LM pre-trained with cross-entropy on
aleatoric QA; B-calibration (M samples at T = 1, B = the last number) and
the learnability probe of `base` (direct prompt " A:"), `rl` (GRPO copy,
reward 1[B(z) = mode]), `dpo` (DPO copy, mode ≻ other) and `cot` (the base
model prompted " T:"). `config.init_from` (preset `smollm2`), per seed: a
subset of `data.short_qa`, M answers sampled through the chat template,
B-calibration under each collapsing function of `config.collapse`.
Writes WORKDIR/results.json (table `calibration`) and reliability.png.
"""

from __future__ import annotations

import os
import time

from flax import nnx
import jax
import numpy as np

from jaxlab import parallel
from jaxlab.data import short_qa
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import aleatoric
from jaxlab.evals import calibration as cal
from jaxlab.evals import uncertainty as unc
from jaxlab.io import pretrained
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import self_generated as sg
from jaxlab.rl import mode_tuning
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib

VARIANTS = ("base", "rl", "dpo", "cot")
LABELS = {"base": "base (direct)", "rl": "RL (GRPO → mode)",
          "dpo": "DPO (mode ≻ other)", "cot": "base + CoT prompt",
          "semantic": "B = extracted answer", "normalized":
          "B = normalised reply", "exact": "B = exact reply string"}
STYLE = {"base": aleatoric.DIRECT, "rl": aleatoric.DIRECT,
         "dpo": aleatoric.DIRECT, "cot": aleatoric.COT}
# Collapsing functions of the pretrained preset: fn(question, reply).
COLLAPSE = {"semantic": short_qa.canonical,
            "normalized": lambda q, t: cal.collapse_normalized("", t),
            "exact": lambda q, t: cal.collapse_exact("", t)}


def evaluate(model, tok, task, style: str, cfg, seed: int) -> dict:
  """B-calibration of `model` in `style` (spec N.2-4) and its probe KL."""
  e, r = cfg.eval, cfg.eval.references_per_question
  rng = np.random.default_rng(50_000 + seed)
  prompts = [task.prompt(q, style, int(rng.integers(len(
      aleatoric.QUESTION_TEMPLATES)))) for q in task.questions]
  samples = cal.sample_answers(
      model, tok, prompts, num_samples=e.num_samples,
      temperature=e.temperature, max_new_tokens=e.max_new_tokens,
      batch_size=e.sample_batch_size, key=jax.random.key(20_000 + seed))
  refs = task.references(r, seed=30_000 + seed)
  data = cal.b_calibration_data(
      [p for p in prompts for _ in range(r)],
      [s for s in samples for _ in range(r)],
      [y for ys in refs for y in ys], collapse="numeric")
  f, y = data["confidence"], data["correct"]
  # p*(prediction | x): the accuracy the plurality has in expectation.
  preds = [cal.b_confidence(cal.collapse_all("", s, "numeric"))[1]
           for s in samples]
  expected = [dict(zip((str(v) for v in q.values), q.probs)).get(p, 0.0)
              for q, p in zip(task.questions, preds)]
  pool = [str(v) for v in task.value_pool]
  pi = np.array([[d.get(v, 0.0) for v in pool] + [1.0 - sum(
      d.get(v, 0.0) for v in pool)] for d in data["distributions"][::r]])
  p = cfg.probe
  probe_kl = cal.probe_heldout_kl(
      model, tok, prompts, pi, [ord("a") + i for i in range(len(pool) + 1)],
      steps=p.steps, batch_size=p.batch_size, lr=p.lr, rank=p.rank,
      alpha=p.alpha, train_frac=p.train_frac, seed=seed)
  return {**cal.calibration_metrics(f, y, num_bins=e.num_bins),
          "expected_accuracy": float(np.mean(expected)),
          "probe_kl": probe_kl, "_conf": f.tolist(), "_correct": y.tolist()}


def run_seed(cfg, seed: int, log) -> tuple[dict, dict]:
  tok = tokenizers.ByteTokenizer()
  task = aleatoric.make_task(**dict(cfg.task))
  base = decoder.Decoder(model_registry.decoder_config(
      cfg.model, vocab_size=tok.vocab_size), rngs=nnx.Rngs(seed))
  p = dict(cfg.pretrain)
  prompts, responses = task.training_pairs(
      (aleatoric.DIRECT, aleatoric.COT), p.pop("samples_per_question"),
      seed=seed)
  data = sg.encode_for_lm(tok, prompts, responses, max_len=p.pop("max_len"))
  loss = runner.train_lm(
      base, data, seed=seed, log_every=50, rules=cfg.sharding_rules,
      mesh=parallel.mesh_from_config(cfg, batch=int(p["batch_size"])),
      **p)[-1]["loss"]
  log(f"seed {seed}: pre-trained, final loss {loss:.3f}")
  out, extra = {}, {"pretrain_loss": loss}
  for v in [v for v in cfg.variants.split(",") if v]:
    model = base
    if v in ("rl", "dpo"):
      model, hist = (mode_tuning.grpo_toward_mode if v == "rl" else
                     mode_tuning.dpo_toward_mode)(base, tok, task, cfg, seed)
      extra.update({"rl_reward": hist} if v == "rl" else
                   {"dpo_last": hist[-1]})
    out[v] = evaluate(model, tok, task, STYLE[v], cfg, seed)
  return out, extra


def run_seed_pretrained(cfg, seed: int, log) -> tuple[dict, dict]:
  model, _ = pretrained.load(cfg.init_from, cache=True)
  tok = pretrained.tokenizer(cfg.init_from)
  qs = short_qa.question_set(tuple(cfg.qa.categories.split(",")),
                             num_questions=cfg.qa.num_questions, seed=seed)
  e, m = cfg.eval, cfg.eval.num_samples
  texts, _ = unc.generate_answers(
      model, tok, [x for x in short_qa.encode_chat(tok, qs, cfg.qa.system)
                   for _ in range(m)], key=jax.random.key(20_000 + seed),
      temperature=e.temperature, max_new_tokens=e.max_new_tokens,
      batch_size=e.sample_batch_size, pad_multiple=e.get("pad_multiple"))
  texts = [texts[i * m:(i + 1) * m] for i in range(len(qs))]
  acc = float(np.mean([short_qa.grade(q, t) for q, ts in zip(qs, texts)
                       for t in ts]))  # of single samples: does the task
  out = {}
  for b in cfg.collapse.split(","):
    d = cal.b_calibration_graded(
        texts, [[COLLAPSE[b](q, t) for t in ts] for q, ts in zip(qs, texts)],
        lambda i, t: short_qa.grade(qs[i], t))
    out[b] = {**cal.calibration_metrics(d["confidence"], d["correct"],
                                        num_bins=e.num_bins),
              "sample_accuracy": acc, "_conf": d["confidence"].tolist(),
              "_correct": d["correct"].tolist()}
  return out, {"examples": texts[:4]}


COLUMNS = (
    results_lib.Column("smece", "smECE ↓", 3),
    results_lib.Column("binned_ece", "binned ECE (10 bins)", 3),
    results_lib.Column("accuracy", "accuracy", 3),
    results_lib.Column("confidence", "mean B-confidence", 3),
    results_lib.Column("overconfidence", "confidence − accuracy", 3),
    results_lib.Column("expected_accuracy", "p*(plurality)", 3),
    results_lib.Column("probe_kl", "probe KL (held-out)", 3),
    results_lib.Column("sample_accuracy", "accuracy of single samples", 3),
)


def results_tables(per_seed: dict, seeds, cfg=None) -> tuple[list, list]:
  real = cfg is not None and cfg.get("init_from")
  cols = [c for c in COLUMNS if c.key not in (
      ("expected_accuracy", "probe_kl") if real else ("sample_accuracy",))]
  title = (f"B-calibration of {cfg.init_from}'s sampled answers (M samples "
           "at T = 1, graded against the reference answers)" if real else
           "B-calibration of the tiny LM (B = last number, M samples at T = 1)")
  t = results_lib.Table("calibration", title, cols, row_label=(
      "collapsing function B" if real else "model / style"))
  for v, rows in per_seed.items():
    for seed, r in zip(seeds, rows):
      t.add_seed(LABELS[v], seed, {c.key: r[c.key] for c in cols})
  ref = "semantic" if real else "base"
  comps = [results_lib.Comparison("calibration", col, LABELS[a], LABELS[ref])
           for a in per_seed if a != ref and ref in per_seed
           for col in ("smece", "overconfidence")]
  return [t], comps


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  real = config.get("init_from")
  field, valid = ("collapse", COLLAPSE) if real else ("variants", VARIANTS)
  names = [v for v in config[field].split(",") if v]
  if set(names) - set(valid):
    raise ValueError(f"config.{field} has unknown "
                     f"{sorted(set(names) - set(valid))}; valid: "
                     f"{', '.join(valid)}")
  t0 = time.time()
  log = lambda msg: print(f"[calibration {time.time() - t0:6.0f}s] {msg}",  # pylint: disable=g-long-lambda
                          flush=True)
  per_seed, extra = {v: [] for v in names}, {}
  for seed in config.seeds:
    out, extra[f"seed{seed}"] = (run_seed_pretrained if real else run_seed)(
        config, int(seed), log)
    for v, r in out.items():
      per_seed[v].append(r)
      log(f"seed {seed}: {v}: " + ", ".join(
          f"{k} {x:.3f}" for k, x in r.items() if not k.startswith("_")))
  plot = cal.plot_reliability_grid(
      {LABELS[v]: (np.concatenate([r["_conf"] for r in rows]),
                   np.concatenate([r["_correct"] for r in rows]))
       for v, rows in per_seed.items()},
      os.path.join(workdir, "reliability.png"),
      num_bootstrap=config.eval.num_bootstrap)
  tables, comparisons = results_tables(per_seed, list(config.seeds), config)
  summary = {f"{v}/{k}_{w}": x for v, rows in per_seed.items()
             for k in rows[0] if not k.startswith("_") for w, x in zip(
                 ("mean", "std"), results_lib.mean_std([r[k] for r in rows]))}
  results = {"summary": summary, "plot": plot, "extra": extra,
             "seeds": [int(s) for s in config.seeds], "per_seed": {
                 v: [{k: x for k, x in r.items() if not k.startswith("_")}
                     for r in rows] for v, rows in per_seed.items()}}
  results_lib.write(workdir, "calibration", tables=tables,
                    comparisons=comparisons, extra=results, config=config,
                    start_time=t0)
  return results
