r"""Trust-GRPO miniature (paper G): does gamma catch a hackable thinking reward?

    python -m jaxlab.main --config=jaxlab/configs/trust_grpo.py --workdir=/tmp/tg
    python -m jaxlab.main --config=jaxlab/configs/trust_grpo.py:tiny \
        --workdir=/tmp/tg_tiny

Task (see jaxlab/configs/trust_grpo.py): a tiny decoder answers "(a + b) mod K" as
`<think> <answer> EOS`. The thinking token is either a value token v (the
"worked" thinking, "I get v") or the degenerate filler token HACK. Outcome
R^o = 1 iff the thinking is a value token and the answer is right (the
degenerate style never gives a right answer). A format warm start (SFT on
random questions with answer = thinking value, i.e. the answer restates the
thinking, no question's answer taught) makes the answer follow the thinking,
so learning the task means learning the right v per question.

The synthetic thinking reward model (TRM) is informative on most questions
(high for the right v, low for a wrong v, lowest for HACK) and hackable on a
fixed subset (there it rates HACK highest and every value token low).

Writes WORKDIR/results.json with, per variant, mean +- std over seeds of the
final greedy accuracy (all / hackable / informative questions), the sampled
(temperature 1) accuracy and degenerate-style rate on hackable / informative
questions, and how often gamma < 1 fired on hackable vs informative groups
among groups where gamma is defined (both correct and wrong responses); plus
accuracy curves in WORKDIR/accuracy.png.

`trust.trm` picks R^t: "synthetic" (the rule judge above, default) or
"learned" (`LearnedTRM`: a `TinyThinkingScorer` fitted per seed with the
library loop on noisy, bin-balanced judge labels, `fit_learned_trm`); the
learned run adds a "trm" table (its error against the judge). Variant
`trust_T12000` is Trust-GRPO at the shipped code's T = 12000.
"""

from __future__ import annotations

import json
import os
import time

import jax
import numpy as np
from flax import nnx

from jaxlab.experiments import results as results_lib
from jaxlab.decoding import sampler
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry
from jaxlab.rewards import thinking as thinking_rewards
from jaxlab.rl import learner as learner_lib
from jaxlab.train import runner as runner_lib

PAD, BOS, EOS, HACK = 0, 1, 2, 3
HACK_TEXT = "hmm hmm"  # the degenerate thinking, as the learned TRM reads it
CODE_ANNEAL_T = 12000.0  # spec G 8(a): `worker.reward.alpha` in the yaml
_A0 = 4  # question tokens a: _A0 .. _A0+K-1, b: next K, values v: next K,
         # answers: next K.

VARIANTS = ("outcome", "thinking", "anneal", "trust", "trust_T12000",
            "trust_code")
TRMS = ("synthetic", "learned")


class Task:
  """(a + b) mod K with value/degenerate thinking and a hackable subset."""

  def __init__(self, modulus: int, hackable_frac: float, task_seed: int,
               trm_right: float, trm_wrong: float, trm_hack: float,
               trm_hack_hackable: float, trm_value_hackable: float):
    k = self.k = modulus
    self.questions = [(a, b) for a in range(k) for b in range(k)]
    rng = np.random.default_rng(task_seed)
    n_hack = int(round(hackable_frac * len(self.questions)))
    self.hackable = set(rng.choice(len(self.questions), n_hack,
                                   replace=False).tolist())
    self.trm = dict(right=trm_right, wrong=trm_wrong, hack=trm_hack,
                    hack_h=trm_hack_hackable, value_h=trm_value_hackable)
    self.v0, self.ans0 = _A0 + 2 * k, _A0 + 3 * k
    self.vocab_size = _A0 + 4 * k

  def prompt(self, qi: int) -> list[int]:
    a, b = self.questions[qi]
    return [BOS, _A0 + a, _A0 + self.k + b]

  def answer(self, qi: int) -> int:
    a, b = self.questions[qi]
    return (a + b) % self.k

  def parse(self, completion) -> tuple[int | None, int] | None:
    """(thinking value or None for HACK, answer) of `<think> <ans> EOS`."""
    c = list(completion)
    if len(c) != 3 or c[2] != EOS:
      return None
    if not self.ans0 <= c[1] < self.ans0 + self.k:
      return None
    if c[0] == HACK:
      return None, c[1] - self.ans0
    if self.v0 <= c[0] < self.v0 + self.k:
      return c[0] - self.v0, c[1] - self.ans0
    return None

  def is_hack(self, completion) -> bool:
    return len(completion) > 0 and completion[0] == HACK

  def outcome(self, qi, completion) -> float:
    """R^o: 1 iff well formed, worked (non-degenerate) thinking, right answer."""
    p = self.parse(completion)
    return float(p is not None and p[0] is not None and
                 p[1] == self.answer(qi))

  def question_text(self, qi: int) -> str:
    """The question as the learned TRM reads it, e.g. "3 + 4 mod 5"."""
    a, b = self.questions[qi]
    return f"{a} + {b} mod {self.k}"

  def thinking_text(self, completion) -> str | None:
    """The thinking as text ("i get 2" / "hmm hmm"); None if malformed."""
    p = self.parse(completion)
    if p is None:
      return None
    return HACK_TEXT if p[0] is None else f"i get {p[0]}"

  def completion(self, value: int | None) -> list[int]:
    """A well-formed completion with thinking `value` (None = HACK)."""
    if value is None:
      return [HACK, self.ans0, EOS]
    return [self.v0 + value, self.ans0 + value, EOS]

  def thinking(self, qi, completion) -> float:
    """The synthetic TRM score of the thinking token."""
    p = self.parse(completion)
    if p is None:
      return 0.0
    if qi in self.hackable:
      return self.trm["hack_h"] if p[0] is None else self.trm["value_h"]
    if p[0] is None:
      return self.trm["hack"]
    return self.trm["right"] if p[0] == self.answer(qi) else self.trm["wrong"]


class LearnedTRM:
  """R^t from a `TinyThinkingScorer` trained on judge-labelled rollouts.

  Spec G item 1 in miniature: (question, response) pairs drawn like the
  format-warm-started policy's rollouts (random question, HACK with
  probability `hack_prob`, else a uniform value), labelled by the judge
  (the synthetic TRM of `Task.thinking`, hackable subset included) plus
  Gaussian noise and rounded to the paper's 0.1 steps, balanced over the
  ten score bins (`balance_by_bins`: at most `per_bin` rows per bin) and
  fitted by BCE with the library loop (`TinyThinkingScorer.fit`, the
  trainer's step on the registered `thinking_scorer_bce` loss). In the RL loop it scores
  the question and the thinking as text; a malformed completion gets NaN,
  which `TrustConfig.clip_thinking` (f) maps to 0, as the synthetic TRM's 0.
  """

  def __init__(self, task: Task, scorer: thinking_rewards.TinyThinkingScorer):
    self.task, self.scorer = task, scorer

  def __call__(self, qis, completions) -> np.ndarray:
    texts = [self.task.thinking_text(c) for c in completions]
    ok = [i for i, t in enumerate(texts) if t is not None]
    out = np.full(len(texts), np.nan, np.float32)
    if ok:
      out[ok] = self.scorer([self.task.question_text(qis[i]) for i in ok],
                            [texts[i] for i in ok])
    return out

  def table(self) -> np.ndarray:
    """`[questions, 1 + K]` scores of HACK, v = 0..K-1 per question."""
    k, n = self.task.k, len(self.task.questions)
    qis = [q for q in range(n) for _ in range(k + 1)]
    comps = [self.task.completion(v) for _ in range(n)
             for v in [None] + list(range(k))]
    return self(qis, comps).reshape(n, k + 1)


def judge_table(task: Task) -> np.ndarray:
  """The synthetic judge's `[questions, 1 + K]` scores (layout of `table`)."""
  return np.array([[task.thinking(q, task.completion(v))
                    for v in [None] + list(range(task.k))]
                   for q in range(len(task.questions))], np.float32)


def trm_training_data(task: Task, cfg, seed: int
                      ) -> tuple[list[str], list[str], np.ndarray]:
  """Judge-labelled (question, thinking, label) rows for the learned TRM.

  Labels are the judge's score plus N(0, `label_noise`^2), rounded to 0.1
  and clipped to [0, 1] (the 72B judge's 0.1-step scores, spec G item 1).
  """
  rng = np.random.default_rng(seed)
  qs, ts, ys = [], [], []
  for _ in range(cfg.samples):
    qi = int(rng.integers(len(task.questions)))
    v = None if rng.random() < cfg.hack_prob else int(rng.integers(task.k))
    comp = task.completion(v)
    y = task.thinking(qi, comp) + cfg.label_noise * rng.normal()
    qs.append(task.question_text(qi))
    ts.append(task.thinking_text(comp))
    ys.append(float(np.clip(np.round(y * 10.0) / 10.0, 0.0, 1.0)))
  return qs, ts, np.asarray(ys, np.float32)


def fit_learned_trm(task: Task, cfg, seed: int
                    ) -> tuple[LearnedTRM, dict[str, float]]:
  """Trains the TRM (`config.trm`) and measures it against the judge.

  Returns the scorer and {"trm_mae": mean |learned - judge| over every
  (question, thinking) pair, "trm_argmax_agree": fraction of questions whose
  top-scored thinking is the judge's, "trm_num_train", "trm_final_loss"}.
  """
  qs, ts, ys = trm_training_data(task, cfg, seed)
  scorer = thinking_rewards.TinyThinkingScorer(
      thinking_rewards.TinyScorerConfig(
          num_buckets=cfg.num_buckets, dim=cfg.dim, hidden=cfg.hidden,
          seed=seed))
  info = scorer.fit(qs, ts, ys, steps=cfg.steps, batch_size=cfg.batch_size,
                    lr=cfg.lr, balance=cfg.balance,
                    per_bin=cfg.per_bin or None, seed=seed)
  trm = LearnedTRM(task, scorer)
  learned, judge = trm.table(), judge_table(task)
  return trm, {"trm_mae": float(np.abs(learned - judge).mean()),
               "trm_argmax_agree": float(np.mean(
                   learned.argmax(1) == judge.argmax(1))),
               "trm_num_train": float(info["num_train"]),
               "trm_final_loss": float(info["final_loss"])}


def make_task(tk) -> Task:
  return Task(tk.modulus, tk.hackable_frac, tk.task_seed, tk.trm_right,
              tk.trm_wrong, tk.trm_hack, tk.trm_hack_hackable,
              tk.trm_value_hackable)


def trust_config(variant: str, tc) -> thinking_rewards.TrustConfig | None:
  """TrustConfig of a variant; None = outcome-only."""
  if variant == "outcome":
    return None
  paper = thinking_rewards.TrustConfig.paper(alpha=tc.alpha)
  if tc.anneal_T:
    paper = paper.replace(anneal_T=tc.anneal_T, anneal_T_is_total_steps=False)
  if variant == "thinking":
    return paper.replace(use_trust=False, anneal=False)
  if variant == "anneal":
    return paper.replace(use_trust=False, anneal=True)
  if variant == "trust":
    return paper.replace(use_trust=True, anneal=True)
  if variant == "trust_T12000":
    # The shipped code's T (spec G 8(a)) with the paper's other readings.
    return paper.replace(use_trust=True, anneal=True, anneal_T=CODE_ANNEAL_T,
                         anneal_T_is_total_steps=False)
  if variant == "trust_code":
    # The shipped code's switches (b), (c) on top of the paper's schedule.
    return paper.replace(use_trust=True, anneal=True,
                         skip_saturated_groups=True, thinking_min_outcome=0.2)
  raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}")


def sft_format(model, task: Task, cfg, seed: int) -> None:
  """Format warm start: random thinking (HACK w.p. `hack_prob`), answer = v.

  No question's answer is taught (v is random), so greedy accuracy after it
  is at chance; it teaches `<think> <answer> EOS` and "the answer restates
  the thinking value". The update is the trainer's (`runner.StepRunner`,
  `lm` loss on the thinking, answer and EOS tokens) with plain Adam (b2
  0.999, constant lr, no clipping or decay). Trains `model` in place.
  """
  runner = runner_lib.StepRunner(
      model, loss="lm", loss_config=None,
      optim=runner_lib.optim_config(lr=cfg.lr, clip_norm=0.0, b1=0.9,
                                    b2=0.999, eps=1e-8),
      steps=cfg.steps, seed=seed)
  rng = np.random.default_rng(seed)
  k = task.k
  for step in range(cfg.steps):
    rows = []
    for q in rng.integers(0, len(task.questions), cfg.batch_size):
      v = int(rng.integers(k))
      think = HACK if rng.random() < cfg.hack_prob else task.v0 + v
      ans = int(rng.integers(k)) if think == HACK else v
      rows.append(task.prompt(int(q)) + [think, task.ans0 + ans, EOS])
    ids = np.array(rows, np.int32)
    mask = np.zeros((len(rows), ids.shape[1] - 1), np.float32)
    mask[:, 2:] = 1.0  # targets ids[3:]: thinking, answer, EOS
    runner.step({"inputs": ids[:, :-1], "targets": ids[:, 1:],
                 "loss_mask": mask}, step)
  runner.write_back()


def evaluate(model, task: Task, *, samples: int, key) -> dict[str, float]:
  """Greedy accuracy, and sampled (T = 1) accuracy / degenerate-style rate."""
  qis = list(range(len(task.questions)))
  h = np.array([q in task.hackable for q in qis])
  greedy = sampler.generate(model, [task.prompt(q) for q in qis],
                            max_new_tokens=3, temperature=0.0, eos_id=EOS)
  acc = np.array([task.outcome(q, c) for q, c in zip(qis, greedy.tokens)])
  rep = [q for q in qis for _ in range(samples)]
  samp = sampler.generate(model, [task.prompt(q) for q in rep],
                          max_new_tokens=3, temperature=1.0, eos_id=EOS,
                          key=key)
  s_acc = np.array([task.outcome(q, c)
                    for q, c in zip(rep, samp.tokens)]).reshape(-1, samples)
  s_hack = np.array([task.is_hack(c) for c in samp.tokens],
                    float).reshape(-1, samples)
  return {"acc": float(acc.mean()), "acc_hackable": float(acc[h].mean()),
          "acc_informative": float(acc[~h].mean()),
          "sampled_acc_hackable": float(s_acc[h].mean()),
          "sampled_acc_informative": float(s_acc[~h].mean()),
          "sampled_hack_rate_hackable": float(s_hack[h].mean()),
          "sampled_hack_rate_informative": float(s_hack[~h].mean())}


def thinking_reward_fn(config, task: Task, seed: int,
                       cache: dict | None = None):
  """(R^t fn of (question ids, completions), TRM metrics) of `trust.trm`.

  "synthetic": the rule judge `Task.thinking` itself; "learned": a
  `LearnedTRM` fitted on judge labels (`fit_learned_trm`, seeded by the run's
  seed; `cache` keeps one per seed across variants).
  """
  kind = config.trust.get("trm", "synthetic")
  if kind == "synthetic":
    return (lambda qis, comps: np.array(
        [task.thinking(q, c) for q, c in zip(qis, comps)], np.float32)), {}
  if kind == "learned":
    if cache is not None and seed in cache:
      return cache[seed]
    out = fit_learned_trm(task, config.trm, seed)
    if cache is not None:
      cache[seed] = out
    return out
  raise ValueError(f"config.trust.trm={kind!r}; valid: {', '.join(TRMS)}")


def run_one(config, variant: str, seed: int,
            trm_cache: dict | None = None) -> dict:
  task = make_task(config.task)
  rl = config.rl
  trust = trust_config(variant, config.trust)
  # Outcome-only never reads R^t (no TRM to fit).
  thinking_fn, trm_info = (thinking_reward_fn(config, task, seed, trm_cache)
                           if trust is not None else (None, {}))
  mcfg = model_registry.decoder_config(config.model,
                                       vocab_size=task.vocab_size)
  model = decoder_lib.Decoder(mcfg, rngs=nnx.Rngs(seed))
  sft_format(model, task, config.sft, seed)
  gcfg = learner_lib.GRPOConfig(**config.grpo, max_new_tokens=3, eos_id=EOS,
                                pad_id=PAD)
  learner = learner_lib.GRPOLearner(model, gcfg, config.optim,
                                    total_steps=rl.steps, seed=seed)
  rng = np.random.default_rng(seed + 1000)
  # [groups with gamma < 1, groups where gamma is defined] per subset; for
  # variants without trust this is the gamma that *would* have fired.
  fired = {"hackable": [0, 0], "informative": [0, 0]}
  n_q = len(task.questions)
  eval_key = jax.random.key(10_000 + seed)

  def reward_fn(batch, step, qis):
    g = batch.group_size
    ro = np.array([task.outcome(qis[i // g], c)
                   for i, c in enumerate(batch.completions)], np.float32)
    hack = np.array([task.is_hack(c) for c in batch.completions], np.float32)
    hmask = np.repeat([q in task.hackable for q in qis], g)
    metrics = {"outcome": float(ro.mean()),
               "train_hack_rate_hackable": float(hack[hmask].mean()),
               "train_hack_rate_informative": float(hack[~hmask].mean())}
    if trust is None:
      return ro, metrics
    rt = thinking_fn([qis[i // g] for i in range(len(batch.completions))],
                     batch.completions)
    r, m = thinking_rewards.combine_trust_rewards(ro, rt, g, step, trust,
                                                  total_steps=rl.steps)
    correct = ro.reshape(-1, g) >= 0.5
    defined = correct.any(1) & (~correct).any(1)
    gamma = np.asarray(m["gamma"]) if trust.use_trust else np.asarray(
        thinking_rewards.trust_weight(
            np.asarray(m["thinking"]).reshape(-1, g), correct))
    for p, qi in enumerate(qis):
      if defined[p]:
        sub = "hackable" if qi in task.hackable else "informative"
        fired[sub][0] += int(gamma[p] < 1.0)
        fired[sub][1] += 1
    return np.asarray(r), metrics

  key = jax.random.key(seed)
  curve = []
  ev = evaluate(learner.policy, task, samples=rl.eval_samples, key=eval_key)
  curve.append(dict(ev, step=0))
  for step in range(rl.steps):
    if rl.prompts_per_step >= n_q:
      qis = list(range(n_q)) * (rl.prompts_per_step // n_q)
    else:
      qis = rng.choice(n_q, rl.prompts_per_step, replace=False).tolist()
    prompts = [task.prompt(q) for q in qis]
    metrics = learner.step(prompts, lambda b, s: reward_fn(b, s, qis),
                           key=jax.random.fold_in(key, step))
    if (step + 1) % rl.eval_every == 0 or step + 1 == rl.steps:
      ev = evaluate(learner.policy, task, samples=rl.eval_samples,
                    key=jax.random.fold_in(eval_key, step + 1))
      ev.update(step=step + 1, train_outcome=metrics["outcome"],
                train_hack_rate_hackable=metrics["train_hack_rate_hackable"],
                kl=metrics.get("kl", 0.0))
      curve.append(ev)
  final = {k: v for k, v in curve[-1].items() if k != "step"}
  for k, (n_fire, n_def) in fired.items():
    final[f"gamma_lt1_rate_{k}"] = n_fire / n_def if n_def else float("nan")
    final[f"gamma_defined_groups_{k}"] = n_def
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


VARIANT_LABELS = {
    "outcome": "outcome only",
    "thinking": "+ thinking reward",
    "anneal": "+ anneal",
    "trust": "Trust-GRPO (paper)",
    "trust_T12000": "Trust-GRPO (paper, code's T = 12000)",
    "trust_code": "Trust-GRPO (code switches)",
}
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
  os.makedirs(workdir, exist_ok=True)
  variants = [v.strip() for v in config.variants.split(",") if v.strip()]
  for v in variants:
    trust_config(v, config.trust)   # fail fast on a bad variant name
  runs: dict[str, list] = {}
  trm_cache: dict = {}   # one learned TRM per seed, shared by the variants
  t0 = time.time()
  for v in variants:
    for seed in config.seeds:
      runs.setdefault(v, []).append(run_one(config, v, seed, trm_cache))
  table = summarize(runs)
  tables, comparisons = results_tables(
      runs, list(config.seeds), config.trust.get("trm", "synthetic"))
  results_lib.write(workdir, "trust_grpo", tables=tables,
                    comparisons=comparisons,
                    # Per-seed finals only (small enough to commit); the
                    # accuracy curves go to WORKDIR/curves.json.
                    extra={"summary": table, "seeds": list(config.seeds),
                           "runs": {v: [{"final": r["final"]} for r in rs]
                                    for v, rs in runs.items()}},
                    config=config, start_time=t0)
  with open(os.path.join(workdir, "curves.json"), "w") as f:
    json.dump({v: [r["curve"] for r in rs] for v, rs in runs.items()}, f)
  plot(runs, workdir)
  flat = {}
  for v, row in table.items():
    for k, (m, _) in row.items():
      flat[f"{v}/{k}"] = m
  return flat


def plot(runs, workdir) -> str | None:
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  keys = ("acc", "acc_hackable", "acc_informative",
          "sampled_hack_rate_hackable")
  fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.3))
  for v, rs in runs.items():
    steps = [c["step"] for c in rs[0]["curve"]]
    for ax, key in zip(axes, keys):
      ys = np.array([[c[key] for c in r["curve"]] for r in rs])
      ax.plot(steps, ys.mean(0), label=v)
      ax.fill_between(steps, ys.min(0), ys.max(0), alpha=0.15)
      ax.set_title(key + (" (greedy)" if key.startswith("acc") else ""))
      ax.set_xlabel("RL step")
  axes[0].legend()
  fig.tight_layout()
  path = os.path.join(workdir, "accuracy.png")
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path
