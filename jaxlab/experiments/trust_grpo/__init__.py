r"""Trust-GRPO miniature (paper G): does gamma catch a hackable thinking reward?

    python -m jaxlab.main --config=trust_grpo:tiny --workdir=/tmp/tg_tiny

A composition: the task `jaxlab.data.synthetic.thinking_task` ((a + b) mod
K answered as `<think> <answer> EOS`, a synthetic judge hackable on a fixed
subset), a tiny decoder warm-started on the format by the trainer's step
(`lm` loss; the answer restates the thinking, no question's answer taught),
then `jaxlab.rl.learner.GRPOLearner` with R = R^o (+ gamma alpha exp(-t/T)
R^t) from `jaxlab.rewards.trust_variants.TaskReward`. `config.variants` is
a tuple of names registered in `trust_variants.VARIANTS`; `trust.trm`
names R^t in `jaxlab.rewards.learned_trm.THINKING_REWARDS` ("synthetic":
the judge; "learned": a `TinyThinkingScorer` fitted per seed on noisy
judge labels, which adds a "trm" table). Evaluation:
`jaxlab.evals.thinking_task.evaluate`.

The `vl` preset (`config.task.visual`): the policy is Qwen2.5-VL
(`config.model.name` "qwen2_5_vl_prefix", `jaxlab.models.qwen2_vl_prefix`)
reading the operands from an image (`thinking_task.render_operands`); the
warm start is then the `prefix_lm_nll` loss on the images, and GRPO and
evaluation pass them as the prefix inputs.

With `data.source="hf"` (the `paper` preset) the run is the real one,
`jaxlab.experiments.trust_grpo.real`: SophiaVL-R1's data, a Qwen2.5-VL
policy and thinking reward model from checkpoints, MathVista accuracy.

Writes WORKDIR/results.json (per variant and seed: final greedy accuracy
on all / hackable / informative questions, sampled hack rates, how often
gamma < 1 fired on hackable vs informative groups; rewritten after every
seed), curves.json and accuracy.png. Each (variant, seed) result is kept
in WORKDIR/seeds/ (`jaxlab.io.stages.run_seeds`) and reused by a rerun of
the same config, so a killed run resumes at the next seed.
"""

from __future__ import annotations

import json
import os
import time

import jax
import numpy as np

from jaxlab import parallel
from jaxlab.data.synthetic import thinking_task
from jaxlab.evals import thinking_task as task_eval
from jaxlab.experiments import results as results_lib
from jaxlab.io import stages
from jaxlab.models import registry as model_registry
from jaxlab.objectives import prefix_lm as prefix_lm_loss
from jaxlab.rewards import learned_trm
from jaxlab.rewards import trust_variants
from jaxlab.rl import learner as learner_lib
from jaxlab.train import runner as runner_lib


def sft_format(model, task, cfg, seed: int, *, mesh=None,
               rules=None) -> None:
  """Format warm start (`thinking_task.format_batch`) with the trainer's
  update (`lm` loss; `prefix_lm_nll` on a visual task's images) and plain
  Adam (b2 0.999, constant lr, no clipping or decay); greedy accuracy after
  it is at chance. Trains `model` in place (on `mesh` with `rules` when
  given)."""
  runner = runner_lib.StepRunner(
      model, loss=prefix_lm_loss.prefix_lm_nll if task.visual else "lm",
      loss_config=None,
      optim=runner_lib.optim_config(lr=cfg.lr, clip_norm=0.0, b1=0.9,
                                    b2=0.999, eps=1e-8),
      steps=cfg.steps, seed=seed, mesh=mesh, rules=rules)
  rng = np.random.default_rng(seed)
  runner_lib.train_on_batches(
      runner, lambda _: thinking_task.format_batch(
          task, rng, batch_size=cfg.batch_size, hack_prob=cfg.hack_prob),
      steps=cfg.steps)
  runner.write_back()


def prompt_batches(task, prompts_per_step: int, seed: int):
  """Endless GRPO batches: `prompts_per_step` questions (all of them, each
  repeated, when that many or more; else drawn without replacement by
  `default_rng(seed + 1000)`), their `question` indices and, on a visual
  task, their images as `prefix_inputs`."""
  rng = np.random.default_rng(seed + 1000)
  n_q = len(task.questions)
  while True:
    if prompts_per_step >= n_q:
      qis = list(range(n_q)) * (prompts_per_step // n_q)
    else:
      qis = rng.choice(n_q, prompts_per_step, replace=False).tolist()
    batch = {"prompts": [task.prompt(q) for q in qis], "question": qis}
    if task.visual:
      batch["prefix_inputs"] = task.images(qis)
    yield batch


def learner_mesh(config, rows: int):
  """`config.mesh` fitted to a sub-training of `rows` rows (the largest
  divisor of `rows` <= the devices, `parallel.mesh_from_config`)."""
  return parallel.mesh_from_config(config, batch=rows)


def run_one(config, variant: str, seed: int,
            trm_cache: dict | None = None) -> dict:
  task = thinking_task.make_task(config.task)
  rl = config.rl
  trust = trust_variants.trust_config(variant, config.trust)
  # Outcome-only never reads R^t (no TRM to fit).
  thinking_fn, trm_info = (learned_trm.thinking_reward_fn(
      config.trust.get("trm", "synthetic"), task, config.trm, seed,
      trm_cache) if trust is not None else (None, {}))
  model = model_registry.get_spec(config.model, vocab_size=task.vocab_size,
                                  seed=seed).factory()
  rules = config.sharding_rules
  sft_format(model, task, config.sft, seed, rules=rules,
             mesh=learner_mesh(config, int(config.sft.batch_size)))
  gcfg = learner_lib.GRPOConfig(**config.grpo, max_new_tokens=3,
                                eos_id=thinking_task.EOS,
                                pad_id=thinking_task.PAD)
  grad_accum = int(config.optim.get("grad_accum", 1))
  learner = learner_lib.GRPOLearner(
      model, gcfg, config.optim, total_steps=rl.steps, seed=seed,
      mesh=learner_mesh(config, int(rl.prompts_per_step) * gcfg.group_size
                        // gcfg.num_minibatches // grad_accum), rules=rules)
  reward = trust_variants.TaskReward(task, trust, thinking_fn,
                                     total_steps=rl.steps)
  eval_key = jax.random.key(10_000 + seed)
  evaluate = lambda k: task_eval.evaluate(  # noqa: E731
      learner.policy, task, samples=rl.eval_samples, key=k)
  curve = [dict(evaluate(eval_key), step=0)]
  history = learner.train(
      prompt_batches(task, int(rl.prompts_per_step), seed),
      reward.from_fields, steps=int(rl.steps), key=jax.random.key(seed),
      eval_every=int(rl.eval_every), eval_fn=lambda _, s: evaluate(
          jax.random.fold_in(eval_key, s)))
  metrics = {}
  for row in history:
    if "eval" not in row:
      metrics = row
      continue
    ev = dict(row["eval"])
    ev.update(step=row["step"], train_outcome=metrics["outcome"],
              train_hack_rate_hackable=metrics["train_hack_rate_hackable"],
              kl=metrics.get("kl", 0.0))
    curve.append(ev)
  final = {k: v for k, v in curve[-1].items() if k != "step"}
  final.update(reward.gamma_rates())
  final.update(trm_info)
  return {"final": final, "curve": curve}


def summarize(runs: dict[str, list]) -> dict[str, dict[str, tuple]]:
  table = {}
  for v, rs in runs.items():
    keys = rs[0]["final"].keys()
    table[v] = {}
    for k in keys:
      vals = [x for x in (float(r["final"][k]) for r in rs)
              if not np.isnan(x)]     # NaN: gamma undefined for that seed
      table[v][k] = results_lib.mean_std(vals)[:2]
  return table


VARIANT_LABELS = trust_variants.LABELS
TABLE_COLUMNS = (
    ("acc", "accuracy", 3),
    ("acc_hackable", "acc. on hackable questions", 3),
    ("acc_informative", "acc. on informative questions", 3),
    ("sampled_hack_rate_hackable", "sampled hack rate (hackable)", 3),
    ("sampled_hack_rate_informative", "sampled hack rate (informative)", 3),
    ("gamma_lt1_rate_hackable", "γ<1 on hackable groups", 2),
    ("gamma_lt1_rate_informative", "γ<1 on informative groups", 2),
)
# The comparisons the docs claim, (column, a, b): a − b paired by seed.
CLAIMED = (
    ("acc", "thinking", "outcome"),
    ("acc", "trust", "thinking"),
    ("acc", "trust", "outcome"),
    ("acc", "trust_code", "outcome"),
    ("acc_hackable", "trust", "thinking"),
    ("acc_informative", "trust", "outcome"),
    ("sampled_hack_rate_hackable", "trust", "thinking"),
    ("acc", "trust_T12000", "trust"),
    ("acc", "trust_T12000", "outcome"),
    ("sampled_hack_rate_hackable", "trust_T12000", "thinking"),
)


TRM_COLUMNS = (
    ("trm_mae", "mean abs. error vs judge", 3),
    ("trm_argmax_agree", "top thinking = judge's", 2),
    ("trm_num_train", "rows after bin balancing", 0),
)


def results_tables(runs: dict[str, list], seeds: list[int],
                   trm: str = "synthetic") -> tuple[list, list]:
  """The docs' table (per-seed finals) and its claimed comparisons.

  With the learned TRM a second table, "trm", holds its fit to the judge
  (one row: the TRM is fitted once per seed, shared by the variants).
  """
  title = "Trust-GRPO miniature: final greedy accuracy and hacking"
  if trm != "synthetic":
    title += f" ({trm} TRM)"
  t = results_lib.Table(
      "variants", title,
      [results_lib.Column(k, label, decimals=d) for k, label, d in
       TABLE_COLUMNS], row_label="variant")
  for v, rs in runs.items():
    for seed, r in zip(seeds, rs):
      # NaN (γ undefined: no group with both outcomes) is stored as None.
      t.add_seed(VARIANT_LABELS.get(v, v), seed,
                 {k: r["final"].get(k) for k, _, _ in TABLE_COLUMNS})
  tables = [t]
  if trm == "learned":
    tt = results_lib.Table(
        "trm", "Learned TRM against the judge over all 25 × 6 (question, "
        "thinking) pairs", [results_lib.Column(k, label, decimals=d)
                            for k, label, d in TRM_COLUMNS],
        row_label="TRM")
    first = next((rs for v, rs in runs.items() if v != "outcome"), None)
    for seed, r in zip(seeds, first or []):
      tt.add_seed("learned TRM", seed,
                  {k: r["final"].get(k) for k, _, _ in TRM_COLUMNS})
    if first:
      tables.append(tt)
  comparisons = [
      results_lib.Comparison("variants", col, VARIANT_LABELS[a],
                             VARIANT_LABELS[b], label=f"{a} − {b}")
      for col, a, b in CLAIMED if a in runs and b in runs]
  return tables, comparisons


def run(config, workdir: str) -> dict:
  if config.data.get("source", "") == "hf":  # the paper's data: real.py
    from jaxlab.experiments.trust_grpo import real  # pylint: disable=g-import-not-at-top
    return real.run(config, workdir)
  os.makedirs(workdir, exist_ok=True)
  variants = trust_variants.variant_names(config.variants)  # fail fast
  runs: dict[str, list] = {}
  trm_cache: dict = {}   # one learned TRM per seed, shared by the variants
  t0 = time.time()

  def write(v, done, rs):
    """results.json of what has run so far (rewritten after every seed)."""
    runs[v] = rs
    part = {k: r for k, r in runs.items() if r}
    tables, comparisons = results_tables(
        part, list(config.seeds), config.trust.get("trm", "synthetic"))
    results_lib.write(workdir, "trust_grpo", tables=tables,
                      comparisons=comparisons,
                      # Per-seed finals only (small enough to commit); the
                      # accuracy curves go to WORKDIR/curves.json.
                      extra={"summary": summarize(part),
                             "seeds": list(config.seeds),
                             "runs": {k: [{"final": r["final"]} for r in rs]
                                      for k, rs in part.items()}},
                      config=config, start_time=t0)
    del done

  # Per (variant, seed): WORKDIR/seeds/<variant>_<seed>.json, keyed by the
  # config (`io.stages.run_seeds`); a rerun resumes at the next seed.
  for v in variants:
    stages.run_seeds(
        config.seeds, lambda seed, v=v: run_one(config, v, seed, trm_cache),
        workdir=workdir, config=config, exclude=("seeds", "variants"),
        name=v, write=lambda done, rs, v=v: write(v, done, rs))
  table = summarize(runs)
  with open(os.path.join(workdir, "curves.json"), "w") as f:
    json.dump({v: [r["curve"] for r in rs] for v, rs in runs.items()}, f)
  task_eval.plot_curves(runs, os.path.join(workdir, "accuracy.png"))
  flat = {}
  for v, row in table.items():
    for k, (m, _) in row.items():
      flat[f"{v}/{k}"] = m
  return flat
