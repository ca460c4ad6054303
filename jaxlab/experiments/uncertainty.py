"""Paper J miniature: which uncertainty flags a tiny LM's confabulations?

See jaxlab/configs/uncertainty.py. Per seed:
  1. train a tiny decoder (`runner.train_lm`) on the facts of the known
     people (the fact set's retain split + world capitals);
  2. ask known, paraphrased-known and held-out questions; the greedy answer
     decides correctness (its fact value against the truth); R answers
     sampled at T = 1 (`jaxlab.decoding.sampler`) give the length-normalised
     log-likelihoods l_r and the semantic clusters;
  3. score every estimator per question and evaluate AUROC (positive =
     incorrect), AURAC, accuracy at answer fractions and bootstrap intervals.
Writes WORKDIR/results.json (tables "estimators", "setup") and
rejection_accuracy.png.
"""

from __future__ import annotations

import os
import time

from flax import nnx
import jax
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np

from jaxlab.analysis import qtn
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import facts as facts_lib
from jaxlab.decoding import sampler
from jaxlab.evals import uncertainty as unc
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import self_generated as sg
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib

GROUPS = ("known", "paraphrased", "heldout")


def last_word(text: str) -> str:
  """The fact value at the end of an answer sentence ("" if none)."""
  words = text.strip().rstrip(".!?").split()
  return words[-1] if words else ""


KEYS = {"last_word": last_word, "full": None}


def _questions(fs: facts_lib.FactSet, counts: dict, seed: int):
  rng = np.random.default_rng(seed)
  out = []
  for group, pool in (("known", fs.retain),
                      ("paraphrased", fs.retain_paraphrased),
                      ("heldout", fs.forget)):
    n = counts[group] or len(pool)
    idx = rng.choice(len(pool), min(n, len(pool)), replace=False)
    out += [(group, pool[i]) for i in sorted(idx)]
  return out


def _generate(model, tok, prompts, *, key, temperature, max_new_tokens,
              batch_size):
  """Texts and length-normalised log-likelihoods of one sample per prompt."""
  texts, lls = [], []
  for start in range(0, len(prompts), batch_size):
    ids = [tok.encode(p, add_bos=True) for p in prompts[start:start +
                                                        batch_size]]
    res = sampler.generate(model, ids, max_new_tokens=max_new_tokens,
                           temperature=temperature, eos_id=tok.eos_id,
                           pad_id=tok.pad_id,
                           key=jax.random.fold_in(key, start))
    texts += sg.decode_generations(tok, res.tokens)
    lls += [float(np.mean(lp)) if lp else 0.0 for lp in res.model_logprobs]
  return texts, np.asarray(lls)


def score_questions(loglik: np.ndarray, ids: np.ndarray, cfg, key
                    ) -> dict[str, np.ndarray]:
  """Every estimator's uncertainty per question: name -> `[Q]`."""
  out = {"NE": np.asarray(unc.naive_entropy(loglik)),
         "DSE": np.asarray(unc.discrete_semantic_entropy(ids)),
         "SE": np.asarray(unc.semantic_entropy(loglik, ids)),
         "SE_R (Rényi-2)": np.asarray(unc.renyi2_entropy(loglik, ids))}
  lams = tuple(cfg.lambdas) + tuple(cfg.additive_lambdas)
  qcfg = qtn.QTNConfig(**dict(cfg.qtn))
  d = qtn.sample_uncertainty(loglik, key=key, config=qcfg, details=True)
  q = qtn.qtn_scores(loglik, ids, key=key, lams=lams, config=qcfg,
                     u_qr=d["u"])
  # ||H psi0 - <H> psi0||: psi0 is an eigenstate of the null-vector H.
  out["_eigenstate_residual_max"] = float(np.max(d["eigenstate_residual"]))
  for i, lam in enumerate(cfg.lambdas):
    out[f"SE_R+ λ={lam:g}"] = q["renyi2_plus"][i]
  for j, lam in enumerate(cfg.additive_lambdas):
    out[f"additive λ={lam:g}"] = q["renyi2_additive"][len(cfg.lambdas) + j]
  return out


def _safe_auroc(scores, incorrect):
  try:
    return unc.auroc(scores, incorrect)
  except ValueError:  # a single-class seed: AUROC undefined
    return float("nan")


def evaluate(scores: dict, correct: np.ndarray, boot: dict, seed: int
             ) -> dict[str, dict[str, float]]:
  out = {}
  for name, s in scores.items():
    acc = unc.accuracy_at_fractions(s, correct)
    lo, hi = unc.bootstrap_interval(unc.auroc, s, ~correct, seed=seed,
                                    **boot)
    out[name] = {"auroc": _safe_auroc(s, ~correct),
                 "aurac": unc.aurac(s, correct),
                 "acc80": acc[0.8], "acc90": acc[0.9],
                 "auroc_lo": lo, "auroc_hi": hi,
                 "curve": unc.rejection_curve(s, correct).tolist()}
  return out


def run_seed(cfg, seed: int, log) -> dict:
  tok = tokenizers.ByteTokenizer()
  fs = facts_lib.make_fact_set(**dict(cfg.facts), seed=seed)
  mcfg = model_registry.decoder_config(cfg.model, vocab_size=tok.vocab_size)
  model = decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))
  train = fs.retain + fs.world  # the held-out people are never seen
  p = dict(cfg.pretrain)
  data = sg.encode_for_lm(tok, [facts_lib.qa_prompt(x.question)
                                for x in train],
                          [x.answer for x in train], max_len=p.pop("max_len"))
  # steps = 0 (the colab smoke test) skips training: an untrained model.
  logs = (runner.train_lm(model, data, seed=seed, log_every=50, **p)
          if p["steps"] > 0 else [{"loss": float("nan")}])
  log(f"seed {seed}: trained, final loss {logs[-1]['loss']:.4f}")
  qs = _questions(fs, dict(cfg.questions), seed)
  prompts = [facts_lib.qa_prompt(x.question) for _, x in qs]
  s = dict(cfg.sampling)
  r = s["num_samples"]
  key = jax.random.key(10_000 + seed)
  greedy, _ = _generate(model, tok, prompts, key=key, temperature=0.0,
                        max_new_tokens=s["max_new_tokens"],
                        batch_size=s["batch_size"])
  texts, ll = _generate(model, tok, [pr for pr in prompts for _ in range(r)],
                        key=jax.random.fold_in(key, 1),
                        temperature=s["temperature"],
                        max_new_tokens=s["max_new_tokens"],
                        batch_size=s["batch_size"])
  ll = ll.reshape(len(qs), r)
  ent = unc.StringMatchEntailment(cfg.cluster.mode, KEYS[cfg.cluster.key])
  ids = np.stack([unc.semantic_ids(texts[i * r:(i + 1) * r], ent,
                                   strict=cfg.cluster.strict)
                  for i in range(len(qs))])
  correct = np.array([ent.key(g) == ent.key(x.value)
                      for g, (_, x) in zip(greedy, qs)])
  groups = np.array([g for g, _ in qs])
  scores = score_questions(ll, ids, cfg, jax.random.fold_in(key, 2))
  residual = scores.pop("_eigenstate_residual_max")
  metrics = evaluate(scores, correct, dict(cfg.bootstrap), seed)
  setup = {f"acc_{g}": float(correct[groups == g].mean()) for g in GROUPS
           if np.any(groups == g)}
  setup.update(questions=len(qs), incorrect_frac=float(1 - correct.mean()),
               clusters_mean=float(np.mean([len(set(row)) for row in ids])),
               final_loss=logs[-1]["loss"], qtn_eigenstate_residual=residual)
  for g in GROUPS:
    if np.any(groups == g):
      setup[f"clusters_{g}"] = float(np.mean(
          [len(set(row)) for row in ids[groups == g]]))
  log(f"seed {seed}: {setup}")
  log("  " + ", ".join(f"{k}: AUROC {v['auroc']:.3f} AURAC {v['aurac']:.3f}"
                       for k, v in metrics.items()))
  examples = [{"group": g, "question": x.question, "truth": x.value,
               "greedy": greedy[i], "samples": texts[i * r:(i + 1) * r],
               "ids": ids[i].tolist()}
              for i, (g, x) in enumerate(qs[:: max(1, len(qs) // 6)])]
  return {"seed": seed, "setup": setup, "metrics": metrics,
          "examples": examples}


COLUMNS = (("auroc", "AUROC ↑"), ("aurac", "AURAC ↑"),
           ("acc80", "accuracy @ 80 % answered ↑"),
           ("acc90", "accuracy @ 90 % answered ↑"))
SETUP_COLUMNS = (("acc_known", "greedy accuracy: known"),
                 ("acc_paraphrased", "known, new paraphrase"),
                 ("acc_heldout", "held-out (confabulated)"),
                 ("incorrect_frac", "incorrect fraction"),
                 ("clusters_known", "clusters / question: known"),
                 ("clusters_heldout", "clusters / question: held-out"))


def results_tables(per_seed: list, cfg) -> tuple[list, list]:
  est = results_lib.Table(
      "estimators", "Hallucination detection on the tiny facts LM "
      "(positive = greedy answer incorrect)",
      [results_lib.Column(k, lab, 3) for k, lab in COLUMNS] +
      [results_lib.Column("auroc_lo", "AUROC 90 % bootstrap low", 3,
                          spread=False),
       results_lib.Column("auroc_hi", "AUROC 90 % bootstrap high", 3,
                          spread=False)], row_label="estimator")
  setup = results_lib.Table(
      "setup", "What the tiny LM knows", [
          results_lib.Column(k, lab, 2) for k, lab in SETUP_COLUMNS],
      row_label="model")
  for rec in per_seed:
    for name, m in rec["metrics"].items():
      est.add_seed(name, rec["seed"], {k: m[k] for k in (
          "auroc", "aurac", "acc80", "acc90", "auroc_lo", "auroc_hi")})
    setup.add_seed("tiny LM", rec["seed"],
                   {k: rec["setup"][k] for k, _ in SETUP_COLUMNS
                    if k in rec["setup"]})
  plus = f"SE_R+ λ={cfg.compare_lambda:g}"
  comps = []
  for col in ("auroc", "aurac"):
    comps += [results_lib.Comparison("estimators", col, plus, "SE"),
              results_lib.Comparison("estimators", col, plus,
                                     "SE_R (Rényi-2)"),
              results_lib.Comparison("estimators", col, "SE_R (Rényi-2)",
                                     "SE"),
              results_lib.Comparison("estimators", col, "SE", "NE")]
  return [setup, est], comps


PLOT_ROWS = ("NE", "DSE", "SE", "SE_R (Rényi-2)")


def plot_rejection(per_seed: list, cfg, path: str) -> str:
  rows = PLOT_ROWS + (f"SE_R+ λ={cfg.compare_lambda:g}",)
  fig, ax = plt.subplots(figsize=(5.5, 3.8))
  for name in rows:
    curves = np.array([rec["metrics"][name]["curve"] for rec in per_seed])
    ax.plot(unc.QUANTILES, curves.mean(0), marker="o", ms=3, label=name)
  ax.set(xlabel="fraction of questions answered (most certain first)",
         ylabel="accuracy", title=f"Rejection accuracy (mean of "
         f"{len(per_seed)} seed(s))")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  log = lambda msg: print(f"[uncertainty {time.time() - t0:6.0f}s] {msg}",  # pylint: disable=g-long-lambda
                          flush=True)
  if config.cluster.key not in KEYS:
    raise ValueError(f"config.cluster.key must be one of {sorted(KEYS)}, got "
                     f"{config.cluster.key!r}")
  if config.compare_lambda not in tuple(config.lambdas):
    raise ValueError(f"config.compare_lambda={config.compare_lambda} must be "
                     f"one of config.lambdas {tuple(config.lambdas)}")
  per_seed = [run_seed(config, int(s), log) for s in config.seeds]
  tables, comps = results_tables(per_seed, config)
  plot = plot_rejection(per_seed, config,
                        os.path.join(workdir, "rejection_accuracy.png"))
  summary = {}
  for name in per_seed[0]["metrics"]:
    for k in ("auroc", "aurac"):
      summary[f"{name}/{k}_mean"], summary[f"{name}/{k}_std"], _ = (
          results_lib.mean_std([r["metrics"][name][k] for r in per_seed]))
  extra = {"summary": summary, "per_seed": per_seed, "plot": plot,
           "quantiles": unc.QUANTILES.tolist()}
  results_lib.write(workdir, "uncertainty", tables=tables, comparisons=comps,
                    extra=extra, config=config, start_time=t0)
  return extra


def plot_from_results(results_json: str, path: str) -> str:
  """The rejection-accuracy plot of a committed (possibly merged) results file.

      python -m jaxlab.experiments.uncertainty docs/results/uncertainty.json \\
          docs/papers/uncertainty_rejection.png
  """
  import json  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  with open(results_json) as f:
    res = json.load(f)
  extras = res["extra"].get("per_run", [res["extra"]])
  per_seed = [rec for e in extras for rec in e["per_seed"]]
  cfg = ml_collections.ConfigDict(res["config"])
  return plot_rejection(per_seed, cfg, path)


if __name__ == "__main__":
  import sys  # pylint: disable=g-import-not-at-top
  print(plot_from_results(sys.argv[1], sys.argv[2]))
