"""B-calibration of LMs (paper N, Nakkiran et al. 2025: "Trained on Tokens,
Calibrated on Concepts"), SmoothECE, binned ECE, reliability diagrams, and
the learnability probe.

Definitions (spec N, "Definitions" 1-4):

* A collapsing function B_x maps a (question, response) pair to a semantic
  class; the model's class distribution is pi_x(k) = sum_{z: B_x(z)=k}
  p(z|x) (N.1). `COLLAPSERS` holds B's by name: `exact` (the string),
  `normalized` (SQuAD normalisation, `jaxlab.evals.text.normalize_answer`),
  `numeric` (the last number in the response); `judge_collapse` groups
  responses with any pluggable equivalence judge (an LLM judge, an
  entailment model, ...).
* B-confidence and plurality prediction (N.2-3): from M samples z_1..z_M at
  T = 1, pi_hat_x(k) = #{m: B(z_m) = k} / M, c(x) = max_k pi_hat_x(k), the
  prediction is the plurality class, correct = 1[prediction = B(y)].
  `b_confidence` / `b_calibration_data`; `sample_answers` draws the M
  samples with `jaxlab.decoding.sampler.generate`.
* SmoothECE (N.4, Blasiok & Nakkiran 2023, as Apple's `relplot` computes
  it): residuals r_i = f_i - y_i kernel-smoothed with a reflected Gaussian
  kernel of width sigma on a grid, evaluated on a mesh of max(200,
  round(10 / sigma)) points t in [0, 1]; smECE_sigma = sum_t |r_hat(t)|
  rho_hat(t) / sum_t rho_hat(t); sigma* is the fixed point sigma =
  smECE_sigma found by bisection on [0, 1] with 10 halvings. `smooth_ece`.
* Binned ECE: sum_b (|b| / n) |mean(f in b) - mean(y in b)| over equal-width
  bins. `binned_ece`.
* Reliability diagram: the kernel-smoothed accuracy E[y | f = t] at sigma*
  with a bootstrap band (percentiles over resampled data sets) and the
  density of f; `reliability_curve` (numbers) and `plot_reliability`
  (matplotlib).
* Learnability probe (N.6, Claim 10): a rank-8 LoRA on the model, trained
  with the `calibration_probe` loss to predict pi_x from x *before*
  generating (the logits of the last prompt position restricted to one token
  per class); its held-out KL(pi_hat_x || q_x) measures how learnable
  x -> B_x#p_x is. `train_probe` / `probe_kl`.
"""

from __future__ import annotations

import collections
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Hashable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab import plotting
from jaxlab import registry
from jaxlab.decoding import sampler as sampler_lib
from jaxlab.evals import text as text_lib
from jaxlab.train import losses as losses_lib

# relplot's constants (relplot/config.py, metrics.py).
SMECE_MESH_POINTS = 200
SMECE_BISECTION_STEPS = 10
SMECE_DENSITY_EPS = 1e-4


def _check_inputs(confidences, correct) -> tuple[np.ndarray, np.ndarray]:
  f = np.asarray(confidences, np.float64).reshape(-1)
  y = np.asarray(correct, np.float64).reshape(-1)
  if f.shape != y.shape:
    raise ValueError(f"confidences has {f.size} values but correct has "
                     f"{y.size}; give one (confidence, correct) per question")
  if f.size == 0:
    raise ValueError("confidences is empty; give at least one value")
  if not np.all(np.isfinite(f)) or f.min() < 0.0 or f.max() > 1.0:
    bad = f[~(np.isfinite(f) & (f >= 0) & (f <= 1))]
    raise ValueError(f"confidences must lie in [0, 1]; got {bad[:5].tolist()}"
                     f" ({bad.size} value(s) outside). Pass probabilities, "
                     "not logits or percentages")
  if not np.all((y == 0) | (y == 1)):
    raise ValueError("correct must be 0/1 (or bool) per question")
  return f, y


# ---------------------------------------------------------------------------
# Collapsing functions B (spec N.1)
# ---------------------------------------------------------------------------

# fn(question, response) -> class key (hashable) or None when B cannot read
# an answer from the response (it then forms its own "no answer" class).
Collapser = Callable[[str, str], Hashable | None]
COLLAPSERS: registry.Registry[Collapser] = registry.Registry(
    "collapsing function")
get_collapser = COLLAPSERS.get

NO_ANSWER = "<no answer>"


@COLLAPSERS.register("exact")
def collapse_exact(question: str, response: str) -> str:
  """B = the response string itself (whitespace-stripped)."""
  del question
  return response.strip()


@COLLAPSERS.register("normalized")
def collapse_normalized(question: str, response: str) -> str:
  """B = SQuAD normalisation (lowercase, no punctuation/articles)."""
  del question
  return text_lib.normalize_answer(response)


_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@COLLAPSERS.register("numeric")
def collapse_numeric(question: str, response: str) -> str | None:
  """B = the last number in the response ("so 12." -> "12", "1,000" ->
  "1000", "3.50" -> "3.5"), None when there is none (math final answer)."""
  del question
  found = _NUMBER_RE.findall(response)
  if not found:
    return None
  value = float(found[-1].replace(",", ""))
  return str(int(value)) if value.is_integer() else repr(value)


# judge(question, response_a, response_b) -> True when they mean the same.
Judge = Callable[[str, str, str], bool]


def judge_collapse(question: str, responses: Sequence[str],
                   judge: Judge) -> list[int]:
  """Class ids of `responses` under a pairwise equivalence judge.

  Greedy clustering (as semantic-entropy code does with an entailment
  model): each response joins the first class whose representative (its
  first member) the judge calls equivalent, else opens a new class. The
  judge is any callable, e.g. an LLM asked "same answer?".
  """
  reps: list[str] = []
  ids = []
  for r in responses:
    for k, rep in enumerate(reps):
      if judge(question, rep, r):
        ids.append(k)
        break
    else:
      reps.append(r)
      ids.append(len(reps) - 1)
  return ids


def collapse_all(question: str, responses: Sequence[str],
                 collapse: str | Collapser) -> list[Hashable]:
  """B applied to each response (a registered name or a callable)."""
  fn = get_collapser(collapse) if isinstance(collapse, str) else collapse
  out = []
  for r in responses:
    k = fn(question, r)
    out.append(NO_ANSWER if k is None else k)
  return out


# ---------------------------------------------------------------------------
# B-confidence and plurality prediction (spec N.2-3)
# ---------------------------------------------------------------------------


def class_distribution(classes: Sequence[Hashable]) -> dict[Hashable, float]:
  """pi_hat(k) = #{m: class_m = k} / M, in order of first appearance."""
  if not classes:
    raise ValueError("class_distribution needs at least one sample")
  counts = collections.Counter(classes)
  m = len(classes)
  return {k: counts[k] / m for k in dict.fromkeys(classes)}


def b_confidence(classes: Sequence[Hashable]) -> tuple[float, Hashable]:
  """(c = max_k pi_hat(k), plurality class) of one question's samples.

  Ties go to the class sampled first (a deterministic rule; any rule gives
  the same confidence).
  """
  dist = class_distribution(classes)
  best = max(dist.values())
  pred = next(k for k, p in dist.items() if p == best)
  return best, pred


def b_calibration_data(questions: Sequence[str],
                       responses: Sequence[Sequence[str]],
                       references: Sequence[str],
                       collapse: str | Collapser = "normalized",
                       ) -> dict[str, Any]:
  """Per-question B-confidence, plurality prediction and correctness.

  Args:
    questions: N questions (passed to B).
    responses: N lists of M sampled responses.
    references: N reference answers y; the label is B(y).
    collapse: a registered collapser name or a callable B.

  Returns:
    dict with `confidence [N]`, `correct [N]` (float 0/1), `prediction`,
    `label` (lists of class keys) and `distributions` (list of dicts).
  """
  if not len(questions) == len(responses) == len(references):
    raise ValueError(f"{len(questions)} questions, {len(responses)} response "
                     f"lists, {len(references)} references: give one each")
  conf, correct, preds, labels, dists = [], [], [], [], []
  for q, rs, ref in zip(questions, responses, references):
    classes = collapse_all(q, rs, collapse)
    c, pred = b_confidence(classes)
    label = collapse_all(q, [ref], collapse)[0]
    conf.append(c)
    correct.append(float(pred == label))
    preds.append(pred)
    labels.append(label)
    dists.append(class_distribution(classes))
  return {"confidence": np.asarray(conf), "correct": np.asarray(correct),
          "prediction": preds, "label": labels, "distributions": dists}


def sample_answers(model, tokenizer, prompts: Sequence[str], *,
                   num_samples: int, key: jax.Array, temperature: float = 1.0,
                   max_new_tokens: int = 32, batch_size: int = 1024,
                   stop_ids: Sequence[int] = ()) -> list[list[str]]:
  """M = `num_samples` responses per prompt at `temperature` (N.3: M = 50,
  T = 1) with the KV-cache sampler; decoded, special tokens dropped.

  Prompts are tokenized with a leading bos; rows stop at the tokenizer's eos
  (or `stop_ids`). Batches of `batch_size` rows keep one compiled shape.
  """
  if num_samples < 1:
    raise ValueError(f"num_samples must be >= 1, got {num_samples}")
  ids = [tokenizer.encode(p, add_bos=True) for p in prompts]
  rows = [p for p in ids for _ in range(num_samples)]
  texts = []
  for start in range(0, len(rows), batch_size):
    chunk = rows[start:start + batch_size]
    # Pad the last chunk to the batch shape: one compilation for all.
    pad = batch_size - len(chunk) if len(rows) > batch_size else 0
    out = sampler_lib.generate(
        model, chunk + [chunk[-1]] * pad, max_new_tokens=max_new_tokens,
        temperature=temperature, eos_id=tokenizer.eos_id,
        stop_ids=tuple(stop_ids), pad_id=tokenizer.pad_id,
        key=jax.random.fold_in(key, start))
    drop = {tokenizer.eos_id, tokenizer.pad_id, tokenizer.bos_id, *stop_ids}
    for toks in out.tokens[:len(chunk)]:
      texts.append(tokenizer.decode([t for t in toks if t not in drop]))
  return [texts[i * num_samples:(i + 1) * num_samples]
          for i in range(len(prompts))]


# ---------------------------------------------------------------------------
# SmoothECE (spec N.4; relplot's algorithm)
# ---------------------------------------------------------------------------


def _round_to_grid(f: np.ndarray, values: np.ndarray,
                   points: int) -> np.ndarray:
  """Linear (two-neighbour) deposit of `values` at positions f on a grid of
  `points` nodes over [0, 1]."""
  grid = np.zeros(points)
  idx = np.clip((f * (points - 1)).astype(int), 0, points - 2)
  frac = f * (points - 1) - idx
  np.add.at(grid, idx, (1.0 - frac) * values)
  np.add.at(grid, idx + 1, frac * values)
  return grid


def _reflected_gaussian_smooth(f: np.ndarray, values: np.ndarray,
                               sigma: float, t: np.ndarray) -> np.ndarray:
  """sum_i values_i K_sigma(t, f_i) with the reflected Gaussian kernel.

  The data are deposited on a grid of G = max(2000, round(20 / sigma)) // 2
  + 1 nodes, the grid is mirrored at 0 and 1 (reflection: mass near a
  boundary is not lost), convolved with a Gaussian sampled on G nodes of
  [0, 1] (centred at 0.5), and linearly interpolated at `t`.
  """
  points = max(2000, round(20 / sigma)) // 2 + 1
  grid = _round_to_grid(f, values, points)
  u = np.linspace(0.0, 1.0, points)
  kernel = np.exp(-(u - 0.5) ** 2 / (2 * sigma ** 2)) / (
      math.sqrt(2 * math.pi) * sigma)
  mirrored = np.concatenate([grid[::-1][:-1], grid, grid[::-1][1:]])
  smooth = np.convolve(mirrored, kernel, "valid")[
      points // 2:points // 2 + points]
  idx = np.clip((t * (points - 1)).astype(int), 0, points - 2)
  w = (t - idx / (points - 1)) * (points - 1)
  return smooth[idx] * (1 - w) + smooth[idx + 1] * w


def _smooth_ece_np(f: np.ndarray, y: np.ndarray, sigma: float) -> float:
  mesh = max(round(10 / sigma), SMECE_MESH_POINTS)
  t = np.linspace(0.0, 1.0, mesh)
  density = _reflected_gaussian_smooth(f, np.ones_like(f), sigma, t) + (
      SMECE_DENSITY_EPS)
  residual = _reflected_gaussian_smooth(f, f - y, sigma, t) / density
  return float(np.sum(np.abs(residual) * density) / np.sum(density))


def smooth_ece_at(confidences, correct, sigma: float) -> float:
  """smECE_sigma at a fixed kernel width `sigma` (N.4)."""
  if not sigma > 0:
    raise ValueError(f"sigma must be > 0, got {sigma}")
  f, y = _check_inputs(confidences, correct)
  return _smooth_ece_np(f, y, float(sigma))


def smooth_ece(confidences, correct, *, return_sigma: bool = False,
               eps: float = 1e-3) -> float | tuple[float, float]:
  """SmoothECE with the fixed-point bandwidth sigma* = smECE(sigma*) (N.4).

  Bisection as relplot's `search_param`: if sigma = 1 already satisfies
  sigma < smECE_sigma (or sigma < eps) it is used; otherwise 10 halvings of
  [0, 1] keep the upper end where sigma >= smECE_sigma.

  Args:
    confidences: `[N]` in [0, 1] (a value outside is an error).
    correct: `[N]` 0/1.
    return_sigma: also return sigma*.
    eps: the smallest bandwidth the search accepts.
  """
  f, y = _check_inputs(confidences, correct)
  below = lambda s: s < eps or s < _smooth_ece_np(f, y, s)  # pylint: disable=g-long-lambda
  if below(1.0):
    sigma = 1.0
  else:
    hi, lo = 1.0, 0.0
    for _ in range(SMECE_BISECTION_STEPS):
      mid = (hi + lo) / 2
      if below(mid):
        lo = mid
      else:
        hi = mid
    sigma = hi
  value = _smooth_ece_np(f, y, sigma)
  return (value, sigma) if return_sigma else value


def binned_ece(confidences, correct, *, num_bins: int = 10) -> float:
  """sum_b (|b| / n) |mean conf in b - accuracy in b|, equal-width bins
  [0, 1/B), ..., [(B-1)/B, 1] (a confidence of 1 falls in the last bin)."""
  if num_bins < 1:
    raise ValueError(f"num_bins must be >= 1, got {num_bins}")
  f, y = _check_inputs(confidences, correct)
  idx = np.minimum((f * num_bins).astype(int), num_bins - 1)
  total = 0.0
  for b in range(num_bins):
    sel = idx == b
    if sel.any():
      total += abs(np.sum(f[sel] - y[sel]))
  return float(total / f.size)


# ---------------------------------------------------------------------------
# Reliability diagrams with bootstrap bands
# ---------------------------------------------------------------------------


def _smoothed_accuracy(f, y, sigma, t):
  dens = _reflected_gaussian_smooth(f, np.ones_like(f), sigma, t) + (
      SMECE_DENSITY_EPS)
  return _reflected_gaussian_smooth(f, y, sigma, t) / dens, dens


def reliability_curve(confidences, correct, *, num_points: int = 200,
                      num_bootstrap: int = 100, level: float = 0.95,
                      seed: int = 0) -> dict[str, np.ndarray | float]:
  """The smoothed reliability diagram E[correct | conf = t] at sigma*.

  Returns dict `t`, `accuracy` (the curve), `lower`/`upper` (percentile
  bootstrap band at `level` over `num_bootstrap` resampled data sets, each
  smoothed at its own sigma*), `density` (of the confidences on `t`,
  normalised to mean 1), `smece`, `sigma`, `smece_lower`/`smece_upper`.
  """
  f, y = _check_inputs(confidences, correct)
  smece, sigma = smooth_ece(f, y, return_sigma=True)
  t = np.linspace(0.0, 1.0, num_points)
  acc, dens = _smoothed_accuracy(f, y, sigma, t)
  rng = np.random.default_rng(seed)
  curves, eces = [], []
  for _ in range(num_bootstrap):
    i = rng.integers(0, f.size, f.size)
    e, s = smooth_ece(f[i], y[i], return_sigma=True)
    curves.append(_smoothed_accuracy(f[i], y[i], s, t)[0])
    eces.append(e)
  alpha = (1 - level) / 2 * 100
  out = {"t": t, "accuracy": acc, "density": dens / dens.mean(),
         "smece": smece, "sigma": sigma}
  if num_bootstrap:
    out["lower"], out["upper"] = np.percentile(curves, [alpha, 100 - alpha],
                                               axis=0)
    out["smece_lower"], out["smece_upper"] = (
        float(v) for v in np.percentile(eces, [alpha, 100 - alpha]))
  return out


def plot_reliability(confidences, correct, *, ax=None, title: str = "",
                     num_bootstrap: int = 100, seed: int = 0,
                     color: str = "C0"):
  """Draws the smoothed reliability diagram with its bootstrap band, the
  diagonal, and the confidence density (as a shaded strip at the bottom).
  Returns the axis and `reliability_curve`'s dict."""
  plt = plotting.pyplot()
  curve = reliability_curve(confidences, correct, num_bootstrap=num_bootstrap,
                            seed=seed)
  if ax is None:
    _, ax = plt.subplots(figsize=(4, 4))
  t = curve["t"]
  ax.plot([0, 1], [0, 1], "k--", lw=0.8)
  if "lower" in curve:
    ax.fill_between(t, curve["lower"], curve["upper"], color=color, alpha=0.2,
                    lw=0)
  ax.plot(t, curve["accuracy"], color=color, lw=2)
  dens = curve["density"] / curve["density"].max()
  ax.fill_between(t, 0, 0.1 * dens, color="gray", alpha=0.4, lw=0)
  ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="B-confidence",
         ylabel="accuracy")
  ax.set_title(f"{title}\nsmECE {curve['smece']:.3f}" if title else
               f"smECE {curve['smece']:.3f}", fontsize=9)
  return ax, curve


# ---------------------------------------------------------------------------
# Learnability probe (spec N.6): rank-8 LoRA predicting pi_x
# ---------------------------------------------------------------------------


def probe_logprobs(model, inputs_bt: jax.Array, last_index_b: jax.Array,
                   class_token_ids: jax.Array) -> jax.Array:
  """`[B, K]` log q_x(k): the last prompt position's logits restricted to
  one token per class, renormalised."""
  logits = model(inputs_bt)
  last = jnp.take_along_axis(logits, last_index_b[:, None, None], axis=1)[:, 0]
  return jax.nn.log_softmax(last[:, class_token_ids].astype(jnp.float32), -1)


@losses_lib.register("calibration_probe")
def probe_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
               config: Any = None):
  """Soft-label cross-entropy -sum_k pi_hat_x(k) log q_x(k) (= KL + const).

  batch: `inputs [B, T]` (right-padded prompts), `last_index [B]`,
  `class_token_ids [B, K]` (the same row repeated: arrays must share the
  batch axis), `target [B, K]` (pi_hat_x, rows summing to 1).
  """
  del rng, config
  logq = probe_logprobs(model, batch["inputs"], batch["last_index"],
                        batch["class_token_ids"][0])
  target = batch["target"].astype(jnp.float32)
  ce = -jnp.sum(target * logq, axis=-1)
  ent = -jnp.sum(jnp.where(target > 0, target * jnp.log(target), 0.0), -1)
  return jnp.mean(ce), {"kl": jnp.mean(ce - ent)}


def probe_batch(tokenizer, prompts: Sequence[str], targets: np.ndarray,
                class_token_ids: Sequence[int], *, max_len: int
                ) -> dict[str, np.ndarray]:
  """Arrays of the `calibration_probe` loss (prompts with a leading bos)."""
  targets = np.asarray(targets, np.float32)
  if targets.shape != (len(prompts), len(class_token_ids)):
    raise ValueError(f"targets shape {targets.shape} != (prompts, classes) "
                     f"({len(prompts)}, {len(class_token_ids)})")
  inputs = np.full((len(prompts), max_len), tokenizer.pad_id, np.int32)
  last = np.zeros(len(prompts), np.int32)
  for i, p in enumerate(prompts):
    ids = tokenizer.encode(p, add_bos=True)[:max_len]
    inputs[i, :len(ids)] = ids
    last[i] = len(ids) - 1
  return {"inputs": inputs, "last_index": last,
          "class_token_ids": np.tile(np.asarray(class_token_ids, np.int32),
                                     (len(prompts), 1)),
          "target": targets}


@jax.jit
def _probe_metrics(model, batch):
  return probe_loss(model, batch, rng=None)[1]


def probe_kl(model, batch: dict[str, np.ndarray]) -> float:
  """Mean KL(pi_hat_x || q_x) of a (LoRA-merged) probe model on a batch."""
  return float(_probe_metrics(model, jax.tree.map(jnp.asarray, batch))["kl"])


def train_probe(model: nnx.Module, train: dict[str, np.ndarray], *,
                steps: int, batch_size: int, lr: float, rank: int = 8,
                alpha: float = 16.0,
                targets: Sequence[str] = ("q_dnh", "v_dkh", "o_nhd"),
                seed: int = 0) -> nnx.Module:
  """Trains a rank-`rank` LoRA on a copy of `model` to predict pi_x (N.6).

  The update is the trainer's (`jaxlab.train.runner.StepRunner` with a
  `lora` section: only the LoRA factors move, AdamW, constant lr). Returns
  the probe model with the LoRA merged into its weights.
  """
  from jaxlab.train import lora as lora_lib  # pylint: disable=g-import-not-at-top
  from jaxlab.train import runner as runner_lib  # pylint: disable=g-import-not-at-top
  runner = runner_lib.StepRunner(
      nnx.clone(model), loss="calibration_probe", loss_config=None,
      optim=runner_lib.optim_config(lr=lr), steps=steps, seed=seed,
      lora=ml_collections.ConfigDict(
          {"rank": int(rank), "alpha": float(alpha),
           "targets": tuple(targets)}))
  n = len(train["inputs"])
  rng = np.random.default_rng(seed)
  for step in range(steps):
    idx = rng.choice(n, size=min(batch_size, n), replace=n < batch_size)
    runner.step({k: v[idx] for k, v in train.items()}, step)
  probe = nnx.clone(runner.model())
  lora_lib.merge_lora(probe)
  return probe


# ---------------------------------------------------------------------------
# Evaluation summaries (what the experiments report)
# ---------------------------------------------------------------------------


def calibration_metrics(confidences, correct, *, num_bins: int = 10
                        ) -> dict[str, float]:
  """smECE, binned ECE, accuracy, mean confidence and confidence - accuracy
  of per-question (confidence, correct) pairs."""
  f, y = _check_inputs(confidences, correct)
  return {"smece": smooth_ece(f, y),
          "binned_ece": binned_ece(f, y, num_bins=num_bins),
          "accuracy": float(y.mean()), "confidence": float(f.mean()),
          "overconfidence": float(f.mean() - y.mean())}


def b_calibration_graded(responses: Sequence[Sequence[str]],
                         classes: Sequence[Sequence[Hashable]],
                         grade: Callable[[int, str], bool]
                         ) -> dict[str, np.ndarray]:
  """B-confidence and correctness when a grader, not B(y), decides.

  Question i's samples `responses[i]` have classes `classes[i]` under some
  B; the confidence is the plurality class's share (`b_confidence`) and the
  prediction is correct iff `grade(i, r)` for the plurality class's first
  response r. With a semantic B this equals pred == B(y); with a surface B
  (the exact reply string) it scores string-level confidence against the
  same notion of correctness.
  """
  if len(responses) != len(classes):
    raise ValueError(f"{len(responses)} response lists but {len(classes)} "
                     "class lists: give one each")
  conf, correct = [], []
  for i, (rs, cs) in enumerate(zip(responses, classes)):
    cs = [NO_ANSWER if k is None else k for k in cs]
    c, pred = b_confidence(cs)
    conf.append(c)
    correct.append(float(bool(grade(i, rs[cs.index(pred)]))))
  return {"confidence": np.asarray(conf), "correct": np.asarray(correct)}


def probe_heldout_kl(model, tokenizer, prompts: Sequence[str],
                     targets: np.ndarray, class_token_ids: Sequence[int], *,
                     steps: int, batch_size: int, lr: float, rank: int = 8,
                     alpha: float = 16.0, train_frac: float = 0.5,
                     seed: int = 0) -> float:
  """The learnability probe's held-out KL (N.6, Claim 10): `train_probe` on
  `train_frac` of the questions (a permutation drawn with 70_000 + seed),
  `probe_kl` on the rest (on the training ones when none is left)."""
  n = len(prompts)
  order = np.random.default_rng(70_000 + seed).permutation(n)
  n_train = max(1, int(round(train_frac * n)))
  tr, te = order[:n_train], order[n_train:]
  max_len = max(len(x) for x in prompts) + 1
  batch = probe_batch(tokenizer, list(prompts), targets, class_token_ids,
                      max_len=max_len)
  pick = lambda ix: {k: v[ix] for k, v in batch.items()}  # pylint: disable=g-long-lambda
  probe = train_probe(model, pick(tr), steps=steps, batch_size=batch_size,
                      lr=lr, rank=rank, alpha=alpha, seed=seed)
  return probe_kl(probe, pick(te if len(te) else tr))


def plot_reliability_grid(groups: dict[str, tuple[np.ndarray, np.ndarray]],
                          path: str, *, num_bootstrap: int = 100) -> str:
  """One `plot_reliability` panel per label -> (confidences, correct)."""
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.4))
  axes = np.atleast_1d(axes)
  for i, (ax, (label, (f, y))) in enumerate(zip(axes, groups.items())):
    plot_reliability(f, y, ax=ax, title=label, color=f"C{i}",
                     num_bootstrap=num_bootstrap)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


__all__ = [
    "COLLAPSERS", "Collapser", "Judge", "NO_ANSWER", "b_calibration_data",
    "b_confidence", "binned_ece", "class_distribution", "collapse_all",
    "collapse_exact", "collapse_normalized", "collapse_numeric",
    "get_collapser", "judge_collapse", "plot_reliability", "probe_batch",
    "probe_kl", "probe_logprobs", "probe_loss", "reliability_curve",
    "sample_answers", "smooth_ece", "smooth_ece_at", "train_probe",
    "calibration_metrics", "b_calibration_graded", "probe_heldout_kl",
    "plot_reliability_grid",
]
