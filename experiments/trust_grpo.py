"""Trust-GRPO miniature (paper G): does gamma catch a hackable thinking reward?

See configs/trust_grpo.py for the task. Writes WORKDIR/results.json with, per
variant, mean +- std over seeds of the final greedy accuracy (all / hackable /
informative questions), the rate of the degenerate style on the hackable
questions, and how often gamma < 1 fired on hackable vs informative groups
(among groups with both correct and wrong responses, where gamma is defined).
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.decoding import sampler
from jaxlab.models import decoder as decoder_lib
from jaxlab.objectives import grpo
from jaxlab.rl import learner as learner_lib

PAD, BOS, EOS, GOOD, HACK = 0, 1, 2, 3, 4
_Q0 = 5


class Task:
  """(a + b) mod K with a fixed hackable subset of questions."""

  def __init__(self, modulus: int, hackable_frac: float, task_seed: int,
               trm_good: float, trm_bad: float):
    self.k = modulus
    self.questions = [(a, b) for a in range(modulus) for b in range(modulus)]
    rng = np.random.default_rng(task_seed)
    n_hack = int(round(hackable_frac * len(self.questions)))
    self.hackable = set(rng.choice(len(self.questions), n_hack,
                                   replace=False).tolist())
    self.trm_good, self.trm_bad = trm_good, trm_bad
    self.vocab_size = _Q0 + 2 * modulus

  def prompt(self, qi: int) -> list[int]:
    a, b = self.questions[qi]
    return [BOS, _Q0 + a, _Q0 + b]

  def answer_token(self, qi: int) -> int:
    a, b = self.questions[qi]
    return _Q0 + self.k + (a + b) % self.k

  def parse(self, completion) -> tuple[int, int] | None:
    """(style, answer token) of a well-formed `<style> <answer> EOS`."""
    c = list(completion)
    if len(c) != 3 or c[2] != EOS or c[0] not in (GOOD, HACK):
      return None
    if not _Q0 + self.k <= c[1] < _Q0 + 2 * self.k:
      return None
    return c[0], c[1]

  def outcome(self, qi, completion) -> float:
    """1 iff well formed, good style and the right answer."""
    p = self.parse(completion)
    return float(p is not None and p[0] == GOOD and
                 p[1] == self.answer_token(qi))

  def thinking(self, qi, completion) -> float:
    """The synthetic TRM: informative, except on the hackable subset."""
    p = self.parse(completion)
    if p is None:
      return 0.0
    good_style = p[0] == GOOD
    if qi in self.hackable:
      good_style = not good_style        # it prefers the degenerate style
    return self.trm_good if good_style else self.trm_bad


def _trust_config(variant: str, tc, total_steps: int) -> grpo.TrustConfig | None:
  if variant == "outcome":
    return None
  base = (grpo.TrustConfig.paper(alpha=tc.alpha) if tc.mode == "paper"
          else grpo.TrustConfig(alpha=tc.alpha))
  if tc.anneal_T:
    base = base.replace(anneal_T=tc.anneal_T, anneal_T_is_total_steps=False)
  if variant == "thinking":
    return base.replace(use_trust=False, anneal=False)
  if variant == "anneal":
    return base.replace(use_trust=False, anneal=True)
  if variant == "trust":
    return base.replace(use_trust=True, anneal=True)
  raise ValueError(f"unknown variant {variant!r}; valid: outcome, thinking, "
                   "anneal, trust")


def _sft_format(model, task: Task, cfg, seed: int) -> None:
  """Format-only warm start: random style and answer, so no answer is known."""
  opt = nnx.Optimizer(model, optax.adam(cfg.lr), wrt=nnx.Param)
  rng = np.random.default_rng(seed)

  @nnx.jit
  def step(model, opt, ids, mask):
    def loss_fn(m):
      logits = m(ids)[:, :-1]
      nll = optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:])
      return jnp.sum(nll * mask[:, 1:]) / jnp.sum(mask[:, 1:])
    loss, g = nnx.value_and_grad(loss_fn)(model)
    opt.update(model, g)
    return loss

  for _ in range(cfg.steps):
    qs = rng.integers(0, len(task.questions), cfg.batch_size)
    ids = np.array([task.prompt(q) + [int(rng.choice([GOOD, HACK])),
                                      _Q0 + task.k + int(rng.integers(task.k)),
                                      EOS] for q in qs], np.int32)
    mask = np.zeros_like(ids, np.float32)
    mask[:, 3:] = 1.0
    step(model, opt, jnp.asarray(ids), jnp.asarray(mask))


def _evaluate(model, task: Task) -> dict[str, float]:
  qis = list(range(len(task.questions)))
  out = sampler.generate(model, [task.prompt(q) for q in qis],
                         max_new_tokens=3, temperature=0.0, eos_id=EOS)
  acc = np.array([task.outcome(q, c) for q, c in zip(qis, out.tokens)])
  hack_style = np.array([(task.parse(c) or (0,))[0] == HACK
                         for c in out.tokens])
  h = np.array([q in task.hackable for q in qis])
  return {"acc": float(acc.mean()), "acc_hackable": float(acc[h].mean()),
          "acc_informative": float(acc[~h].mean()),
          "hack_style_hackable": float(hack_style[h].mean())}


def run_one(config, variant: str, seed: int) -> dict:
  tk = config.task
  task = Task(tk.modulus, tk.hackable_frac, tk.task_seed, tk.trm_good,
              tk.trm_bad)
  rl = config.rl
  mcfg = decoder_lib.DecoderConfig(vocab_size=task.vocab_size,
                                   max_position_embeddings=16,
                                   **dict(config.model))
  model = decoder_lib.Decoder(mcfg, rngs=nnx.Rngs(seed))
  _sft_format(model, task, config.sft, seed)
  gcfg = learner_lib.GRPOConfig(
      group_size=rl.group_size, num_iterations=rl.num_iterations,
      advantage=rl.advantage, clip_eps=rl.clip_eps, kl_beta=rl.kl_beta,
      entropy_coef=rl.entropy_coef, aggregation=rl.aggregation,
      max_new_tokens=3, temperature=rl.temperature, eos_id=EOS, pad_id=PAD)
  learner = learner_lib.GRPOLearner(model, gcfg, dict(config.optim),
                                    total_steps=rl.steps)
  trust = _trust_config(variant, config.trust, rl.steps)
  rng = np.random.default_rng(seed + 1000)
  fired = {"hackable": [0, 0], "informative": [0, 0]}  # [gamma<1, defined]
  curve = []

  def reward_fn(batch, step, qis):
    g = batch.group_size
    ro = np.array([task.outcome(qis[i // g], c)
                   for i, c in enumerate(batch.completions)], np.float32)
    rt = np.array([task.thinking(qis[i // g], c)
                   for i, c in enumerate(batch.completions)], np.float32)
    if trust is None:
      return ro, {"outcome": float(ro.mean())}
    r, m = grpo.combine_trust_rewards(ro, rt, g, step, trust,
                                      total_steps=rl.steps)
    correct = ro.reshape(-1, g) >= 0.5
    defined = correct.any(1) & (~correct).any(1)
    gamma = np.asarray(m["gamma"]) if trust.use_trust else np.asarray(
        grpo.trust_weight(rt.reshape(-1, g), correct))
    for p, qi in enumerate(qis):
      if defined[p]:
        key = "hackable" if qi in task.hackable else "informative"
        fired[key][0] += int(gamma[p] < 1.0)
        fired[key][1] += 1
    return np.asarray(r), {"outcome": float(ro.mean())}

  key = jax.random.key(seed)
  for step in range(rl.steps):
    qis = rng.integers(0, len(task.questions), rl.prompts_per_step).tolist()
    prompts = [task.prompt(q) for q in qis]
    metrics = learner.step(prompts, lambda b, s: reward_fn(b, s, qis),
                           key=jax.random.fold_in(key, step))
    if (step + 1) % rl.eval_every == 0 or step + 1 == rl.steps:
      ev = _evaluate(model, task)
      ev.update(step=step + 1, train_outcome=metrics["outcome"],
                kl=metrics.get("kl", 0.0))
      curve.append(ev)
  final = dict(curve[-1])
  for k, (n_fire, n_def) in fired.items():
    final[f"gamma_lt1_rate_{k}"] = n_fire / n_def if n_def else float("nan")
    final[f"gamma_defined_groups_{k}"] = n_def
  return {"final": final, "curve": curve}


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  variants = [v.strip() for v in config.variants.split(",") if v.strip()]
  runs: dict[str, list] = {}
  t0 = time.time()
  for v in variants:
    for seed in config.seeds:
      runs.setdefault(v, []).append(run_one(config, v, seed))
  table = {}
  for v, rs in runs.items():
    keys = rs[0]["final"].keys()
    table[v] = {k: (float(np.nanmean([r["final"][k] for r in rs])),
                    float(np.nanstd([r["final"][k] for r in rs])))
                for k in keys if k != "step"}
  result = {"table": table, "runs": runs, "seeds": list(config.seeds),
            "elapsed_s": time.time() - t0}
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(result, f, indent=1)
  _plot(runs, workdir)
  flat = {}
  for v, row in table.items():
    for k, (m, _) in row.items():
      flat[f"{v}/{k}"] = m
  return flat


def _plot(runs, workdir) -> None:
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
  for v, rs in runs.items():
    steps = [c["step"] for c in rs[0]["curve"]]
    for ax, key in zip(axes, ("acc", "acc_hackable")):
      ys = np.array([[c[key] for c in r["curve"]] for r in rs])
      ax.plot(steps, ys.mean(0), label=v)
      ax.set_title(key)
      ax.set_xlabel("RL step")
  axes[0].legend()
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "accuracy.png"), dpi=80)
  plt.close(fig)
