"""B-calibration miniature (paper N, spec "CPU miniature"): see
jaxlab/configs/calibration.py.

Per seed: pre-train a tiny LM with cross-entropy on aleatoric QA (direct and
chain-of-thought styles), then evaluate B-calibration (M samples at T = 1,
B = the last number, smECE, binned ECE, accuracy, mean confidence) of

  base   the pre-trained model answering directly (" A:"),
  rl     a GRPO-tuned copy, reward 1[B(z) = mode of p*(.|x)],
  dpo    a DPO-tuned copy, chosen = mode answer, rejected = another answer,
  cot    the pre-trained model prompted for chain of thought (" T:"),

and fit the learnability probe (rank-8 LoRA predicting pi_x before
generation) for each. Writes WORKDIR/results.json (tables `calibration` and
`probe`) and WORKDIR/reliability.png (smoothed reliability diagrams with
bootstrap bands, all seeds' questions pooled).
"""

from __future__ import annotations

import os
import time

from flax import nnx
import jax
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import ml_collections
import numpy as np

from jaxlab.data import tokenizers
from jaxlab.data.synthetic import aleatoric
from jaxlab.evals import calibration as cal
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import dpo as dpo_lib
from jaxlab.objectives import self_generated as sg
from jaxlab.rl import learner as learner_lib
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib

VARIANTS = ("base", "rl", "dpo", "cot")
LABELS = {"base": "base (direct)", "rl": "RL (GRPO → mode)",
          "dpo": "DPO (mode ≻ other)", "cot": "base + CoT prompt"}
STYLE = {"base": aleatoric.DIRECT, "rl": aleatoric.DIRECT,
         "dpo": aleatoric.DIRECT, "cot": aleatoric.COT}
OTHER = "other"  # probe class for responses outside the value pool


def _log(t0, msg):
  print(f"[calibration {time.time() - t0:6.0f}s] {msg}", flush=True)


def eval_prompts(task, style: str, seed: int) -> list[str]:
  """One prompt per question, question template drawn per question."""
  rng = np.random.default_rng(50_000 + seed)
  return [task.prompt(q, style, int(rng.integers(
      len(aleatoric.QUESTION_TEMPLATES)))) for q in task.questions]


def evaluate(model, tok, task, style: str, cfg, seed: int) -> dict:
  """B-calibration of `model` in `style` (spec N.2-4)."""
  e = cfg.eval
  prompts = eval_prompts(task, style, seed)
  samples = cal.sample_answers(
      model, tok, prompts, num_samples=e.num_samples,
      temperature=e.temperature, max_new_tokens=e.max_new_tokens,
      batch_size=e.sample_batch_size, key=jax.random.key(20_000 + seed))
  refs = task.references(e.references_per_question, seed=30_000 + seed)
  r = e.references_per_question
  data = cal.b_calibration_data(
      [p for p in prompts for _ in range(r)],
      [s for s in samples for _ in range(r)],
      [y for ys in refs for y in ys], collapse="numeric")
  f, y = data["confidence"], data["correct"]
  # p*(prediction | x): the accuracy the plurality has in expectation.
  expected = []
  for q, (_, pred) in zip(task.questions,
                          (cal.b_confidence(cal.collapse_all(
                              "", s, "numeric")) for s in samples)):
    expected.append(dict(zip((str(v) for v in q.values), q.probs)).get(
        pred, 0.0))
  pool = [str(v) for v in task.value_pool]
  dists = data["distributions"][::r]
  pi = np.array([[d.get(v, 0.0) for v in pool]
                 + [1.0 - sum(d.get(v, 0.0) for v in pool)] for d in dists])
  return {"smece": cal.smooth_ece(f, y),
          "binned_ece": cal.binned_ece(f, y, num_bins=e.num_bins),
          "accuracy": float(y.mean()), "confidence": float(f.mean()),
          "overconfidence": float(f.mean() - y.mean()),
          "expected_accuracy": float(np.mean(expected)),
          "mode_rate": float(np.mean([
              dict(zip(pool, p)).get(str(q.mode), 0.0)
              for q, p in zip(task.questions, pi)])),
          "_conf": f.tolist(), "_correct": y.tolist(), "_pi": pi,
          "_prompts": prompts}


def pretrain(tok, task, cfg, seed: int):
  mcfg = model_registry.decoder_config(cfg.model, vocab_size=tok.vocab_size)
  model = decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))
  p = dict(cfg.pretrain)
  prompts, responses = task.training_pairs(
      (aleatoric.DIRECT, aleatoric.COT), p.pop("samples_per_question"),
      seed=seed)
  data = sg.encode_for_lm(tok, prompts, responses, max_len=p.pop("max_len"))
  logs = runner.train_lm(model, data, seed=seed, log_every=50, **p)
  return model, logs[-1]["loss"]


def rl_tune(base, tok, task, cfg, seed: int):
  """GRPO toward the mode answer (spec N miniature (a))."""
  g = dict(cfg.grpo)
  gcfg = learner_lib.GRPOConfig(**g, eos_id=tok.eos_id, pad_id=tok.pad_id)
  rl = cfg.rl
  learner = learner_lib.GRPOLearner(nnx.clone(base), gcfg, {"lr": rl.lr},
                                    total_steps=rl.steps, seed=seed)
  rng = np.random.default_rng(40_000 + seed)
  n_q = len(task.questions)
  history = []
  for step in range(rl.steps):
    qis = rng.choice(n_q, min(rl.prompts_per_step, n_q), replace=False)
    texts = [task.prompt(task.questions[i], aleatoric.DIRECT,
                         int(rng.integers(len(aleatoric.QUESTION_TEMPLATES))))
             for i in qis]
    prompts = [tok.encode(t, add_bos=True) for t in texts]

    def reward_fn(batch, step, qis=qis):
      del step
      gs = batch.group_size
      r = np.array([float(cal.collapse_numeric("", tok.decode(
          [t for t in c if t < 256])) == str(task.questions[qis[i // gs]].mode))
                    for i, c in enumerate(batch.completions)], np.float32)
      return r, {}
    m = learner.step(prompts, reward_fn, key=jax.random.key(
        41_000 + seed * 1000 + step))
    history.append(m["reward_mean"])
  return learner.policy, history


def dpo_pairs(task, cfg, seed: int):
  rng = np.random.default_rng(60_000 + seed)
  prompts, chosen, rejected = [], [], []
  for q in task.questions:
    others = np.array(q.probs[1:])
    for _ in range(cfg.dpo.pairs_per_question):
      t = int(rng.integers(len(aleatoric.QUESTION_TEMPLATES)))
      prompts.append(task.prompt(q, aleatoric.DIRECT, t))
      tmpl = aleatoric.ANSWER_TEMPLATES
      chosen.append(" " + tmpl[rng.integers(len(tmpl))].format(v=q.mode))
      if len(others) and others.sum() > 0:
        v = q.values[1 + rng.choice(len(others), p=others / others.sum())]
      else:  # a one-answer question: any other pool value
        v = int(rng.choice([x for x in task.value_pool if x != q.mode]))
      rejected.append(" " + tmpl[rng.integers(len(tmpl))].format(v=v))
  return prompts, chosen, rejected


def dpo_tune(base, tok, task, cfg, seed: int):
  """DPO toward the mode answer, reference = the base model."""
  prompts, chosen, rejected = dpo_pairs(task, cfg, seed)
  max_len = cfg.pretrain.max_len
  batch = {}
  for side, answers in (("chosen", chosen), ("rejected", rejected)):
    enc = sg.encode_pairs(tok, prompts, answers, max_len=max_len)
    batch.update({f"{side}_inputs": enc["inputs"],
                  f"{side}_targets": enc["targets"],
                  f"{side}_mask": enc["mask"]})
  batch.update(dpo_lib.reference_logps(base, batch))
  d = cfg.dpo
  run = runner.StepRunner(nnx.clone(base), loss="dpo",
                          loss_config=ml_collections.ConfigDict(
                              {"beta": float(d.beta)}),
                          optim=runner.optim_config(lr=d.lr), steps=d.steps,
                          seed=seed)
  rng = np.random.default_rng(61_000 + seed)
  n = len(prompts)
  history = []
  for step in range(d.steps):
    idx = rng.choice(n, min(d.batch_size, n), replace=False)
    history.append(run.step({k: v[idx] for k, v in batch.items()}, step))
  return run.model(), history


def probe_variant(model, tok, task, ev: dict, cfg, seed: int) -> float:
  """Held-out KL of the rank-8 LoRA probe of pi_x (spec N.6)."""
  p = cfg.probe
  k = len(task.value_pool) + 1
  class_ids = [ord("a") + i for i in range(k)]  # one byte token per class
  n = len(task.questions)
  order = np.random.default_rng(70_000 + seed).permutation(n)
  n_train = max(1, int(round(p.train_frac * n)))
  tr, te = order[:n_train], order[n_train:]
  prompts = np.array(ev["_prompts"], dtype=object)
  max_len = max(len(x) for x in ev["_prompts"]) + 1
  batch = cal.probe_batch(tok, list(prompts), ev["_pi"], class_ids,
                          max_len=max_len)
  pick = lambda ix: {kk: v[ix] for kk, v in batch.items()}  # pylint: disable=g-long-lambda
  probe = cal.train_probe(model, pick(tr), steps=p.steps,
                          batch_size=p.batch_size, lr=p.lr, rank=p.rank,
                          alpha=p.alpha, seed=seed)
  return cal.probe_kl(probe, pick(te if len(te) else tr))


def run_seed(cfg, tok, task, seed: int, t0: float) -> tuple[dict, dict]:
  base, loss = pretrain(tok, task, cfg, seed)
  _log(t0, f"seed {seed}: pre-trained, final loss {loss:.3f}")
  variants = [v for v in cfg.variants.split(",") if v]
  models, extra = {}, {"pretrain_loss": loss}
  for v in variants:
    if v in ("base", "cot"):
      models[v] = base
    elif v == "rl":
      models[v], hist = rl_tune(base, tok, task, cfg, seed)
      extra["rl_reward"] = hist
    elif v == "dpo":
      models[v], hist = dpo_tune(base, tok, task, cfg, seed)
      extra["dpo_last"] = hist[-1]
  out = {}
  for v in variants:
    ev = evaluate(models[v], tok, task, STYLE[v], cfg, seed)
    ev["probe_kl"] = probe_variant(models[v], tok, task, ev, cfg, seed)
    out[v] = ev
    _log(t0, f"seed {seed}: {v}: " + ", ".join(
        f"{k} {x:.3f}" for k, x in ev.items() if not k.startswith("_")))
  return out, extra


COLUMNS = (
    results_lib.Column("smece", "smECE ↓", 3),
    results_lib.Column("binned_ece", "binned ECE (10 bins)", 3),
    results_lib.Column("accuracy", "accuracy", 3),
    results_lib.Column("confidence", "mean B-confidence", 3),
    results_lib.Column("overconfidence", "confidence − accuracy", 3),
    results_lib.Column("expected_accuracy", "p*(plurality)", 3),
    results_lib.Column("probe_kl", "probe KL (held-out)", 3),
)


def results_tables(per_seed: dict, seeds) -> tuple[list, list]:
  t = results_lib.Table(
      "calibration", "B-calibration of the tiny LM (B = last number, "
      "M samples at T = 1)", list(COLUMNS), row_label="model / style")
  for v, rows in per_seed.items():
    for seed, r in zip(seeds, rows):
      t.add_seed(LABELS[v], seed, {c.key: r[c.key] for c in COLUMNS})
  comps = [results_lib.Comparison("calibration", col, LABELS[a],
                                  LABELS["base"])
           for a in ("rl", "dpo", "cot") if a in per_seed and
           "base" in per_seed for col in ("smece", "overconfidence")]
  return [t], comps


def plot_diagrams(per_seed: dict, cfg, path: str) -> str:
  vs = list(per_seed)
  fig, axes = plt.subplots(1, len(vs), figsize=(3.2 * len(vs), 3.4))
  axes = np.atleast_1d(axes)
  for i, (ax, v) in enumerate(zip(axes, vs)):
    f = np.concatenate([r["_conf"] for r in per_seed[v]])
    y = np.concatenate([r["_correct"] for r in per_seed[v]])
    cal.plot_reliability(f, y, ax=ax, title=LABELS[v], color=f"C{i}",
                         num_bootstrap=cfg.eval.num_bootstrap)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  bad = set(v for v in config.variants.split(",") if v) - set(VARIANTS)
  if bad:
    raise ValueError(f"config.variants has unknown {sorted(bad)}; valid: "
                     f"{', '.join(VARIANTS)}")
  t0 = time.time()
  tok = tokenizers.ByteTokenizer()
  task = aleatoric.make_task(**dict(config.task))
  per_seed = {v: [] for v in config.variants.split(",") if v}
  extra = {}
  for seed in config.seeds:
    out, ex = run_seed(config, tok, task, int(seed), t0)
    for v, r in out.items():
      per_seed[v].append(r)
    extra[f"seed{seed}"] = ex
  plot = plot_diagrams(per_seed, config,
                       os.path.join(workdir, "reliability.png"))
  tables, comparisons = results_tables(per_seed, list(config.seeds))
  summary = {}
  for v, rows in per_seed.items():
    for c in COLUMNS:
      summary[f"{v}/{c.key}_mean"], summary[f"{v}/{c.key}_std"], _ = (
          results_lib.mean_std([r[c.key] for r in rows]))
  results = {"summary": summary, "plot": plot, "extra": extra,
             "seeds": [int(s) for s in config.seeds],
             "per_seed": {v: [{k: x for k, x in r.items()
                               if not k.startswith("_")} for r in rows]
                          for v, rows in per_seed.items()}}
  results_lib.write(workdir, "calibration", tables=tables,
                    comparisons=comparisons, extra=results, config=config,
                    start_time=t0)
  return results
