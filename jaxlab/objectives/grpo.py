"""GRPO-family policy losses, advantage estimators and Trust-GRPO rewards.

Spec: `shared/papers/A-G.md`, section G (SophiaVL-R1 / Trust-GRPO), its
"Shared building blocks" item 1 (GRPO core), and section F item 3 (MSRL uses
the same GRPO form).

Pieces (all pure functions of arrays, usable inside `jax.jit`):

* Advantage estimators, a name -> fn registry (`ADVANTAGE_ESTIMATORS`):
  "grpo"    A_i = (R_i - mean_G R) / (std_G R + eps)          (G Eq. 6)
  "dr_grpo" A_i =  R_i - mean_G R               (Dr.GRPO, arXiv 2503.20783)
  "rloo"    A_i =  R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean_G R)
* `grpo_loss`: token-level PPO-clip with a k3 KL to a frozen reference and an
  optional entropy bonus (G Eq. 7, with veRL's token-level ratios and
  `low_var_kl`), under a choice of loss aggregations.
* Trust-GRPO (G items 3-4, 8): `trust_weight` (Eqs. 1-3) and
  `combine_trust_rewards` (Eq. 5) with every code-vs-paper difference (a)-(f)
  as a `TrustConfig` switch, plus the `<think>/<answer>` format checker, a
  thinking-reward-model (TRM) interface with a rule-based scorer, and the TRM
  data balancer (uniform over reward bins, G item 1).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import registry

Array = jax.Array

# ----------------------------------------------------------------------------
# Advantage estimators.
# ----------------------------------------------------------------------------

AdvantageFn = Callable[..., Array]
ADVANTAGE_ESTIMATORS: registry.Registry[AdvantageFn] = registry.Registry(
    "advantage estimator")
register_advantage = ADVANTAGE_ESTIMATORS.register
get_advantage_estimator = ADVANTAGE_ESTIMATORS.get


def _grouped(rewards: Array, group_size: int) -> Array:
  rewards = jnp.asarray(rewards, jnp.float32)
  if rewards.ndim != 1:
    raise ValueError(f"rewards must be a flat [num_prompts * group_size] "
                     f"array, got shape {rewards.shape}")
  if group_size < 1 or rewards.shape[0] % group_size:
    raise ValueError(f"group_size={group_size} must divide the number of "
                     f"rewards ({rewards.shape[0]})")
  return rewards.reshape(-1, group_size)


def group_advantages(rewards: Array, group_size: int, *,
                     normalize_std: bool = True, eps: float = 1e-6,
                     std_ddof: int = 0) -> Array:
  """Group-relative advantages (G Eq. 6; Dr.GRPO when `normalize_std=False`).

  Args:
    rewards: flat `[P * G]` rewards, the G responses of a prompt contiguous.
    group_size: G.
    normalize_std: divide by the group std (GRPO) or not (Dr.GRPO).
    eps: added to the std, so a group whose rewards are all equal gets zero
      advantages (0 / eps) rather than NaN.
    std_ddof: 0 = population std (Tunix, the paper's formula read literally);
      1 = the unbiased `torch.std` used by veRL/EasyR1 [code].

  Returns:
    `[P * G]` float32 advantages, one per response (broadcast over its tokens
    by `grpo_loss`).
  """
  r_pg = _grouped(rewards, group_size)
  centred_pg = r_pg - jnp.mean(r_pg, axis=-1, keepdims=True)
  if normalize_std:
    if std_ddof and group_size <= std_ddof:
      raise ValueError(f"std_ddof={std_ddof} needs group_size > {std_ddof}")
    std_p1 = jnp.std(r_pg, axis=-1, keepdims=True, ddof=std_ddof)
    centred_pg = centred_pg / (std_p1 + eps)
  return centred_pg.reshape(-1)


@register_advantage("grpo")
def grpo_advantages(rewards, group_size, *, eps=1e-6, std_ddof=0):
  return group_advantages(rewards, group_size, normalize_std=True, eps=eps,
                          std_ddof=std_ddof)


@register_advantage("dr_grpo")
def dr_grpo_advantages(rewards, group_size, **unused):
  del unused
  return group_advantages(rewards, group_size, normalize_std=False)


@register_advantage("rloo")
def rloo_advantages(rewards, group_size, **unused):
  """Leave-one-out baseline: R_i - mean_{j != i} R_j."""
  del unused
  if group_size < 2:
    raise ValueError("rloo needs group_size >= 2")
  centred = group_advantages(rewards, group_size, normalize_std=False)
  return centred * (group_size / (group_size - 1))


# ----------------------------------------------------------------------------
# Loss.
# ----------------------------------------------------------------------------


def kl_k3(logp: Array, ref_logp: Array, clamp: float | None = 10.0) -> Array:
  """Per-token k3 estimator of KL(pi_theta || pi_ref) (veRL `low_var_kl`).

  k3 = exp(ref - logp) - (ref - logp) - 1 >= 0, unbiased under samples from
  pi_theta. d k3 / d logp = 1 - exp(ref - logp). veRL clamps the result to
  [-10, 10]; `clamp=None` disables it.
  """
  log_ratio = ref_logp - logp
  kl = jnp.exp(log_ratio) - log_ratio - 1.0
  if clamp is not None:
    kl = jnp.clip(kl, -clamp, clamp)
  return kl


def kl_k1(logp, ref_logp, clamp=None):
  del clamp
  return logp - ref_logp


def kl_k2(logp, ref_logp, clamp=None):
  del clamp
  return 0.5 * jnp.square(logp - ref_logp)


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def _agg_token_mean(x_bt, mask_bt, max_len):
  del max_len
  return jnp.sum(x_bt * mask_bt) / jnp.maximum(jnp.sum(mask_bt), 1.0)


def _agg_sequence_mean(x_bt, mask_bt, max_len):
  del max_len
  per_seq = jnp.sum(x_bt * mask_bt, -1) / jnp.maximum(jnp.sum(mask_bt, -1), 1.0)
  return jnp.mean(per_seq)


def _agg_fixed_length(x_bt, mask_bt, max_len):
  """Dr.GRPO: token sums divided by a constant B * L_max (no length bias)."""
  length = x_bt.shape[-1] if max_len is None else max_len
  return jnp.sum(x_bt * mask_bt) / (x_bt.shape[0] * length)


AGGREGATIONS = {
    "token_mean": _agg_token_mean,
    "sequence_mean": _agg_sequence_mean,
    "fixed_length": _agg_fixed_length,
}


def grpo_loss(logp: Array, old_logp: Array, ref_logp: Array | None,
              advantages: Array, mask: Array, *, clip_eps: float = 0.2,
              clip_eps_high: float | None = None, kl_beta: float = 0.04,
              kl_estimator: str = "k3", kl_clamp: float | None = 10.0,
              entropy: Array | None = None, entropy_coef: float = 0.0,
              aggregation: str = "token_mean", max_len: int | None = None
              ) -> tuple[Array, dict[str, Array]]:
  """Token-level clipped GRPO loss (G Eq. 7, negated to a loss).

  Per token t of response b, with rho = exp(logp - old_logp):

    l_bt = -min(rho A_b, clip(rho, 1 - eps, 1 + eps_high) A_b)
           + beta * KL_k3(pi_theta || pi_ref)_bt  - c_ent * H_bt

  aggregated over `mask` by `aggregation`: "token_mean" (sum / #tokens, veRL
  `token-mean`), "sequence_mean" (mean over responses of the per-response
  token mean, the paper's 1/N sum_i (1/|o_i|) sum_t), "fixed_length" (sum /
  (B * max_len), Dr.GRPO).

  Args:
    logp: `[B, T]` log pi_theta of the sampled tokens (differentiated).
    old_logp: `[B, T]` log-probs under the rollout policy (constants).
    ref_logp: `[B, T]` log-probs under the frozen reference, or None (no KL).
    advantages: `[B]` per-response or `[B, T]` per-token advantages.
    mask: `[B, T]` 1 on response tokens.
    clip_eps / clip_eps_high: lower / upper clip range (upper defaults to
      lower; DAPO-style asymmetric clipping when set).
    kl_beta: KL coefficient (0.04 in the paper and code).
    kl_estimator: "k3" (default, veRL low_var_kl), "k1" or "k2".
    kl_clamp: clamp of the k3 value (veRL uses 10).
    entropy: optional `[B, T]` per-token policy entropy for the bonus.
    entropy_coef: bonus weight (1e-3 in the SophiaVL-R1 yaml).
    aggregation: one of `AGGREGATIONS`.
    max_len: the constant length for "fixed_length" (default T).

  Returns:
    (scalar loss, metrics dict of scalars).
  """
  if aggregation not in AGGREGATIONS:
    raise ValueError(f"unknown aggregation {aggregation!r}; valid choices: "
                     f"{', '.join(AGGREGATIONS)}")
  if kl_estimator not in KL_ESTIMATORS:
    raise ValueError(f"unknown kl_estimator {kl_estimator!r}; valid choices: "
                     f"{', '.join(KL_ESTIMATORS)}")
  agg = lambda x: AGGREGATIONS[aggregation](x, mask, max_len)  # noqa: E731
  mask = mask.astype(jnp.float32)
  logp = logp.astype(jnp.float32)
  old_logp = jax.lax.stop_gradient(old_logp.astype(jnp.float32))
  adv = jnp.asarray(advantages, jnp.float32)
  if adv.ndim == 1:
    adv = adv[:, None]
  adv = jax.lax.stop_gradient(adv)
  hi = clip_eps if clip_eps_high is None else clip_eps_high

  ratio = jnp.exp(logp - old_logp)
  unclipped = ratio * adv
  clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + hi) * adv
  pg_bt = -jnp.minimum(unclipped, clipped)
  loss_bt = pg_bt
  metrics = {"pg_loss": agg(pg_bt),
             "clip_frac": agg((clipped < unclipped).astype(jnp.float32)),
             "ratio_mean": agg(ratio)}
  if ref_logp is not None:
    kl_bt = KL_ESTIMATORS[kl_estimator](
        logp, jax.lax.stop_gradient(ref_logp.astype(jnp.float32)), kl_clamp)
    loss_bt = loss_bt + kl_beta * kl_bt
    metrics["kl"] = agg(kl_bt)
  if entropy is not None:
    loss_bt = loss_bt - entropy_coef * entropy
    metrics["entropy"] = agg(entropy)
  loss = agg(loss_bt)
  metrics["loss"] = loss
  return loss, metrics


def token_logprobs_and_entropy(logits_btv: Array, tokens_bt: Array,
                               temperature: float = 1.0
                               ) -> tuple[Array, Array]:
  """log softmax(logits / temperature)[token] and the entropy, each [B, T]."""
  logp_btv = jax.nn.log_softmax(logits_btv.astype(jnp.float32) / temperature)
  logp_bt = jnp.take_along_axis(logp_btv, tokens_bt[..., None], -1)[..., 0]
  ent_bt = -jnp.sum(jnp.exp(logp_btv) * logp_btv, -1)
  return logp_bt, ent_bt


# ----------------------------------------------------------------------------
# Trust-GRPO (SophiaVL-R1).
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
  ro = _grouped(outcome, group_size)
  rt = _grouped(thinking, group_size)
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
# A config-driven wrapper used by the RL learner.
# ----------------------------------------------------------------------------


def compute_advantages(rewards: Array, group_size: int, estimator: str = "grpo",
                       **kw: Any) -> Array:
  return get_advantage_estimator(estimator)(rewards, group_size, **kw)


def anneal_schedule(steps: Sequence[int], T: float) -> np.ndarray:
  """exp(-t/T) at each step, for plotting the annealing curve."""
  return np.array([math.exp(-s / T) for s in steps])
