"""Thinking rewards of Trust-GRPO (SophiaVL-R1, spec `shared/papers/A-G.md` G).

Reward-side pieces; the GRPO loss and advantages stay in
`jaxlab.objectives.grpo`.

* `trust_weight` (G Eqs. 1-3) and `combine_trust_rewards` (G Eq. 5,
  R = R^o + gamma * alpha * exp(-t/T) * R^t, annealed by `anneal_factor`),
  every code-vs-paper difference (a)-(f) of G item 8 a `TrustConfig` switch.
* The `<think>/<answer>` format checker (`parse_think_answer`,
  `format_reward`).
* The thinking-reward-model (TRM) interface `ThinkingScorer`, a rule-based
  scorer and the TRM data balancer `balance_by_bins` (uniform over reward
  bins, G item 1).
* A trainable tiny TRM: (question, thinking) -> [0, 1]. Paper G item 1 trains
  a 3B VLM on TRM labels balanced uniformly over ten score bins. This is the
  CPU-sized stand-in: hashed word uni/bi-gram features of the question and of
  the thinking (separate hash spaces, so the model can tell them apart), an
  embedding bag, a 2-layer MLP and a sigmoid, fitted by binary cross-entropy
  to soft labels in [0, 1] on a bin-balanced subset (`balance_by_bins`). It
  implements the `ThinkingScorer` protocol, so it drops into
  `combine_trust_rewards`.

    scorer = TinyThinkingScorer(TinyScorerConfig())
    info = scorer.fit(questions, thinkings, labels, steps=300)
    r_t = scorer(questions, thinkings)          # [N] float32 in [0, 1]
"""

from __future__ import annotations

import dataclasses
import math
import re
import zlib
from collections.abc import Sequence
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.objectives import grpo
from jaxlab.train import losses

Array = jax.Array

# ----------------------------------------------------------------------------
# Trust-GRPO reward combination (SophiaVL-R1).
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrustConfig:
  """Trust-GRPO reward combination; defaults follow the official code.

  Each field marked (a)-(f) is a code-vs-paper difference of spec G item 8.
  `TrustConfig.paper()` gives the paper's reading.

  Attributes:
    alpha: thinking-reward weight alpha (0.3, paper and code).
    use_trust: apply the trust weight gamma (False = "without trust").
    anneal: multiply by exp(-step / T) (False = "without annealing").
    anneal_T: (a) T; the shipped yaml uses 12000 (`worker.reward.alpha`).
    anneal_T_is_total_steps: (a) paper: T = total training steps (then
      `total_steps` must be passed to `combine_trust_rewards`).
    skip_saturated_groups: (b) code: groups whose outcome rewards are all
      >= `saturated_hi` or all <= `saturated_lo` get no thinking reward.
    thinking_min_outcome: (c) code: R^t is queried only when R^o >= 0.2 and
      is 0 otherwise; None = paper (always queried).
    gamma_when_empty: (d) gamma when G_correct (or G_wrong) is empty (code: 1).
    gamma_scale: (e) applied gamma = exp(scale * (mu_c - mu_w)) (code and
      paper: 1); the code *logs* scale 2, reported as `gamma_logged`.
    clip_thinking: (f) clip R^t to [0, 1] and map NaN (parse failure) to 0.
    correct_threshold: R^o >= threshold counts as correct (0.5, Eq. 1).
  """
  alpha: float = 0.3
  use_trust: bool = True
  anneal: bool = True
  anneal_T: float = 12000.0
  anneal_T_is_total_steps: bool = False
  skip_saturated_groups: bool = True
  saturated_hi: float = 0.9
  saturated_lo: float = 0.1
  thinking_min_outcome: float | None = 0.2
  gamma_when_empty: float = 1.0
  gamma_scale: float = 1.0
  gamma_logged_scale: float = 2.0
  clip_thinking: bool = True
  correct_threshold: float = 0.5

  @classmethod
  def paper(cls, **overrides) -> "TrustConfig":
    kw = dict(anneal_T_is_total_steps=True, skip_saturated_groups=False,
              thinking_min_outcome=None)
    kw.update(overrides)
    return cls(**kw)

  def replace(self, **kw) -> "TrustConfig":
    return dataclasses.replace(self, **kw)


def trust_weight(thinking_rewards: Array, correct: Array, *,
                 gamma_when_empty: float = 1.0, scale: float = 1.0,
                 atol: float = 1e-6) -> Array:
  """Trust weight gamma per group (G Eqs. 1-3).

  mu_c / mu_w = mean thinking reward over correct / wrong responses;
  gamma = 1 if mu_c >= mu_w else exp(scale * (mu_c - mu_w)).

  Args:
    thinking_rewards: `[..., G]` thinking rewards R^t of one or more groups.
    correct: `[..., G]` bool, R^o >= 0.5.
    gamma_when_empty: gamma for a group with no correct or no wrong response.
    scale: exponent scale (1 applied; the code logs 2, spec G 8(e)).
    atol: mu_c >= mu_w - atol counts as ">=", so float32 rounding of equal
      means (three 0.9s vs two) does not fire gamma < 1.

  Returns:
    `[...]` gamma in (exp(-scale), 1].
  """
  rt = jnp.asarray(thinking_rewards, jnp.float32)
  c = jnp.asarray(correct, bool)
  n_c = jnp.sum(c, -1)
  n_w = jnp.sum(~c, -1)
  mu_c = jnp.sum(jnp.where(c, rt, 0.0), -1) / jnp.maximum(n_c, 1)
  mu_w = jnp.sum(jnp.where(c, 0.0, rt), -1) / jnp.maximum(n_w, 1)
  gamma = jnp.where(mu_c >= mu_w - atol, 1.0, jnp.exp(scale * (mu_c - mu_w)))
  return jnp.where((n_c == 0) | (n_w == 0), gamma_when_empty, gamma)


def anneal_factor(step, cfg: TrustConfig, total_steps: int | None = None):
  """exp(-step / T) (Eq. 5), or 1 when annealing is off."""
  if not cfg.anneal:
    return 1.0
  if cfg.anneal_T_is_total_steps:
    if not total_steps:
      raise ValueError("TrustConfig.anneal_T_is_total_steps needs total_steps")
    t_const = float(total_steps)
  else:
    t_const = float(cfg.anneal_T)
  return jnp.exp(-jnp.asarray(step, jnp.float32) / t_const)


def anneal_schedule(steps: Sequence[int], T: float) -> np.ndarray:
  """exp(-t/T) at each step, for plotting the annealing curve."""
  return np.array([math.exp(-s / T) for s in steps])


def combine_trust_rewards(outcome: Array, thinking: Array, group_size: int,
                          step, cfg: TrustConfig = TrustConfig(), *,
                          total_steps: int | None = None
                          ) -> tuple[Array, dict[str, Array]]:
  """R_i = R^o_i + gamma * alpha * exp(-step / T) * R^t_i (G Eq. 5).

  Args:
    outcome: flat `[P * G]` outcome rewards R^o.
    thinking: flat `[P * G]` thinking rewards R^t (NaN = TRM parse failure).
    group_size: G.
    step: the global training step.
    cfg: `TrustConfig` (switches (a)-(f)).
    total_steps: needed when `cfg.anneal_T_is_total_steps`.

  Returns:
    (`[P * G]` combined rewards, metrics with per-group `gamma [P]`,
    `gamma_logged [P]`, `thinking_weight [P]` and the effective `thinking`).
  """
  ro = grpo.as_groups(outcome, group_size)
  rt = grpo.as_groups(thinking, group_size)
  if cfg.clip_thinking:                                     # (f)
    rt = jnp.clip(jnp.nan_to_num(rt, nan=0.0), 0.0, 1.0)
  if cfg.thinking_min_outcome is not None:                  # (c)
    rt = jnp.where(ro >= cfg.thinking_min_outcome, rt, 0.0)
  correct = ro >= cfg.correct_threshold
  if cfg.use_trust:
    gamma = trust_weight(rt, correct, gamma_when_empty=cfg.gamma_when_empty,
                         scale=cfg.gamma_scale)
  else:
    gamma = jnp.ones(ro.shape[:1], jnp.float32)
  gamma_logged = trust_weight(rt, correct,
                              gamma_when_empty=cfg.gamma_when_empty,
                              scale=cfg.gamma_logged_scale)
  weight = gamma * cfg.alpha * anneal_factor(step, cfg, total_steps)
  if cfg.skip_saturated_groups:                             # (b)
    saturated = (jnp.all(ro >= cfg.saturated_hi, -1)
                 | jnp.all(ro <= cfg.saturated_lo, -1))
    weight = jnp.where(saturated, 0.0, weight)
  rewards = ro + weight[:, None] * rt
  return rewards.reshape(-1), {"gamma": gamma, "gamma_logged": gamma_logged,
                               "thinking_weight": weight,
                               "thinking": rt.reshape(-1)}


# ----------------------------------------------------------------------------
# Format checking and the thinking-reward-model interface.
# ----------------------------------------------------------------------------

_FORMAT_RE = re.compile(
    r"^\s*<think>(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*$",
    re.DOTALL)


def parse_think_answer(text: str) -> tuple[str, str] | None:
  """(thinking, answer) if `text` is exactly <think>..</think><answer>..</answer>.

  Nested or repeated tags are rejected so a policy cannot hide a second
  answer in its thinking.
  """
  m = _FORMAT_RE.match(text)
  if m is None:
    return None
  think, answer = m.group("think"), m.group("answer")
  for tag in ("<think>", "</think>", "<answer>", "</answer>"):
    if tag in think or tag in answer:
      return None
  return think.strip(), answer.strip()


def format_reward(completions: Sequence[str]) -> np.ndarray:
  """1 for each well-formed completion, else 0 (a group reward fn)."""
  return np.array([float(parse_think_answer(c) is not None)
                   for c in completions], np.float32)


class ThinkingScorer(Protocol):
  """A thinking reward model: (question, thinking) -> score in [0, 1].

  Scorers receive the whole group, so a batched model scores it in one call.
  Return NaN for a response the model cannot score (mapped to 0 by (f)).
  """

  def __call__(self, questions: Sequence[str],
               thinkings: Sequence[str]) -> np.ndarray: ...


@dataclasses.dataclass
class RuleBasedThinkingScorer:
  """Scores thinking by keyword rules: a stand-in TRM for tests and toys.

  score = clip(base + sum of bonuses of the `good` phrases present - sum of
  penalties of the `bad` phrases present, 0, 1), optionally minus
  `repeat_penalty` per repeated line (the TRM's "redundancy" criterion).
  """
  good: dict[str, float] = dataclasses.field(default_factory=dict)
  bad: dict[str, float] = dataclasses.field(default_factory=dict)
  base: float = 0.5
  repeat_penalty: float = 0.1

  def __call__(self, questions, thinkings):
    del questions
    out = []
    for t in thinkings:
      s = self.base + sum(v for k, v in self.good.items() if k in t)
      s -= sum(v for k, v in self.bad.items() if k in t)
      lines = [ln.strip() for ln in t.splitlines() if ln.strip()]
      s -= self.repeat_penalty * (len(lines) - len(set(lines)))
      out.append(min(max(s, 0.0), 1.0))
    return np.asarray(out, np.float32)


def balance_by_bins(scores: np.ndarray, *, num_bins: int = 10,
                    per_bin: int | None = None, seed: int = 0) -> np.ndarray:
  """Indices of a subset uniform over `num_bins` score bins on [0, 1].

  The TRM data balancing of G item 1 (scores in steps of 0.1, ten bins). Each
  bin keeps `per_bin` random items (default: the size of the smallest
  non-empty bin), so no score value dominates the TRM's SFT data.
  """
  scores = np.asarray(scores, np.float64)
  bins = np.clip(np.floor(scores * num_bins + 1e-9), 0, num_bins - 1)
  rng = np.random.default_rng(seed)
  groups = [np.flatnonzero(bins == b) for b in range(num_bins)]
  sizes = [len(g) for g in groups if len(g)]
  if not sizes:
    return np.zeros((0,), np.int64)
  k = min(sizes) if per_bin is None else per_bin
  keep = [rng.permutation(g)[:k] for g in groups if len(g)]
  return np.sort(np.concatenate(keep))


# ----------------------------------------------------------------------------
# The trainable tiny thinking reward model.
# ----------------------------------------------------------------------------

_WORD = re.compile(r"\w+|[^\w\s]")


@dataclasses.dataclass(frozen=True)
class TinyScorerConfig:
  """Attributes: feature buckets, widths, max features per example."""
  num_buckets: int = 2048
  dim: int = 32
  hidden: int = 64
  max_features: int = 128
  seed: int = 0


def featurize(question: str, thinking: str, cfg: TinyScorerConfig
              ) -> list[int]:
  """Hashed uni/bi-gram ids; question ids in [0, B/2), thinking's in [B/2, B).

  Repeated lines add their n-grams again (the bag is a mean), so redundancy
  (a TRM criterion) is visible to the model.
  """
  half = cfg.num_buckets // 2
  out = []
  for offset, text, tag in ((0, question, "q"), (half, thinking, "t")):
    words = _WORD.findall(text.lower())
    grams = words + [a + " " + b for a, b in zip(words, words[1:])]
    out += [offset + zlib.crc32(f"{tag}:{g}".encode()) % half for g in grams]
  return out[:cfg.max_features]


class _Net(nnx.Module):

  def __init__(self, cfg: TinyScorerConfig, rngs: nnx.Rngs):
    self.emb = nnx.Embed(cfg.num_buckets + 1, cfg.dim, rngs=rngs)  # +1: pad
    self.h = nnx.Linear(cfg.dim, cfg.hidden, rngs=rngs)
    self.o = nnx.Linear(cfg.hidden, 1, rngs=rngs)

  def __call__(self, ids_bf: jax.Array, mask_bf: jax.Array) -> jax.Array:
    """Feature ids `[B, F]` + mask -> logits `[B]`."""
    e = self.emb(ids_bf) * mask_bf[..., None]
    bag = e.sum(1) / jnp.maximum(mask_bf.sum(1, keepdims=True), 1.0)
    return self.o(jax.nn.gelu(self.h(bag)))[:, 0]


class TinyThinkingScorer:
  """A trainable `ThinkingScorer`."""

  def __init__(self, cfg: TinyScorerConfig = TinyScorerConfig()):
    self.cfg = cfg
    self.net = _Net(cfg, nnx.Rngs(cfg.seed))

  def _encode(self, questions, thinkings) -> tuple[np.ndarray, np.ndarray]:
    if len(questions) != len(thinkings):
      raise ValueError(f"{len(questions)} questions but {len(thinkings)} "
                       "thinkings")
    pad = self.cfg.num_buckets
    ids = np.full((len(questions), self.cfg.max_features), pad, np.int32)
    mask = np.zeros(ids.shape, np.float32)
    for i, (q, t) in enumerate(zip(questions, thinkings)):
      f = featurize(q, t, self.cfg)
      ids[i, :len(f)] = f
      mask[i, :len(f)] = 1.0
    return ids, mask

  def __call__(self, questions: Sequence[str],
               thinkings: Sequence[str]) -> np.ndarray:
    """Scores `[N]` float32 in [0, 1]."""
    ids, mask = self._encode(questions, thinkings)
    return np.asarray(_predict(self.net, jnp.asarray(ids), jnp.asarray(mask)))

  def fit(self, questions: Sequence[str], thinkings: Sequence[str],
          labels: Sequence[float], *, steps: int = 300, batch_size: int = 64,
          lr: float = 3e-3, balance: bool = True, num_bins: int = 10,
          per_bin: int | None = None, seed: int = 0) -> dict[str, float]:
    """Fits soft labels in [0, 1] by BCE, on a bin-balanced subset (G.1).

    `per_bin` caps every score bin at that many rows (the paper keeps
    5k-15k per bin); None keeps the smallest non-empty bin's size in each.
    The update is the trainer's (`runner.StepRunner` on the registered
    `thinking_scorer_bce` loss).

    Returns {"num_train": rows kept after balancing, "final_loss": ...}.
    """
    labels = np.asarray(labels, np.float32)
    if labels.ndim != 1 or len(labels) != len(questions):
      raise ValueError(f"labels must be [{len(questions)}], got "
                       f"{labels.shape}")
    if np.any((labels < 0) | (labels > 1)) or np.any(np.isnan(labels)):
      raise ValueError("labels must lie in [0, 1]")
    keep = (balance_by_bins(labels, num_bins=num_bins, per_bin=per_bin,
                            seed=seed)
            if balance else np.arange(len(labels)))
    ids, mask = self._encode([questions[i] for i in keep],
                             [thinkings[i] for i in keep])
    y = labels[keep]
    # The trainer's update (jaxlab.train.runner) with plain Adam: optax's
    # defaults (b2 0.999), constant lr, no clipping or weight decay.
    from jaxlab.train import runner as runner_lib  # pylint: disable=g-import-not-at-top
    runner = runner_lib.StepRunner(
        self.net, loss="thinking_scorer_bce", loss_config=None,
        optim=runner_lib.optim_config(lr=lr, clip_norm=0.0, b1=0.9,
                                      b2=0.999, eps=1e-8),
        steps=steps, seed=seed)
    rng = np.random.default_rng(seed)
    loss = float("nan")
    for step in range(steps):
      rows = rng.integers(0, len(y), min(batch_size, len(y)))
      loss = runner.step({"ids": ids[rows], "mask": mask[rows],
                          "labels": y[rows]}, step)["loss"]
    runner.write_back()
    return {"num_train": int(len(y)), "final_loss": loss}


@nnx.jit
def _predict(net, ids, mask):
  return jax.nn.sigmoid(net(ids, mask))


@losses.register("thinking_scorer_bce")
def scorer_bce_loss(net, batch, *, rng, config):
  """Mean binary cross-entropy of the scorer's logits to soft labels."""
  del rng, config
  logits = net(batch["ids"], batch["mask"])
  return jnp.mean(optax.sigmoid_binary_cross_entropy(
      logits, batch["labels"])), {}
