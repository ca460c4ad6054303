"""Vulcan: class-specific ViT pruning (papers/O-S.md, paper O), and baselines.

Train-then-prune for a target class subset S of a trained
`jaxlab.models.vit_classifier.ViTClassifier`:

    plan = vulcan.make_plan(model, target_batches, vulcan.VulcanConfig(rate=0.6))
    trainee = vulcan.VulcanTrainee(model, plan)
    vulcan.train(trainee, batches_of_S, steps=..., optim=vulcan.optim(...))
    small = vulcan.prune(trainee.model, plan)     # a smaller ViTClassifier

1. Neuron scores (O.2.1): the summed GELU output of every FFN neuron on S,
   z-scored per layer; a global k-th-value threshold gives per-layer FFN
   widths K_l (floored to `width_multiple`, at least `min_width`).
2. Head budgets (O.3): the effective rank of the bias-augmented per-head
   products M_QK = Ŵ_Qᵀ Ŵ_K and M_VO = Ŵ_Vᵀ W_O sets per-layer rates
   (higher effective rank, less pruning; the mean rate is R).
3. Clustering (O.2.4): k-means++ on the rows of fc1 (K_l clusters), the
   anchor of a cluster is its most active neuron.
4. Post-training (O.4): CE + the collapse ("pull") regulariser pulling each
   member's fc1 row and bias to its anchor's, L1 and squared, + the
   truncated nuclear norm of Ŵ_Q and Ŵ_V beyond the kept rank, both weighted
   by two dual-ascent multipliers λ1, λ2 (a parameter group with a negative
   learning rate, `jaxlab.train.optim`).
5. Pruning (O.5): each cluster becomes one neuron (anchor's fc1 row, summed
   fc2 columns: exact once members equal the anchor); each head is cut by
   SVD of M_QK and M_VO with the sqrt(r / d_k) softmax rescale (exact when
   the kept rank covers the matrix's rank).

Budgets: `cost(cfg, "params" | "flops")` counts a (pruned) architecture;
`rate_for_budget` finds the smallest rate R whose widths fit a global
parameter or FLOP fraction.

Baselines beside it (same widths, then the same fine-tuning): structured
pruning by the `magnitude` (L2 norm of each neuron's / head dimension's
weights) or `taylor` (first-order Taylor, (Σ g·w)² over the group; Molchanov
et al., 2019) criteria from `CRITERIA`, and fine-tuning the unpruned model
on S (`train_classifier`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab import registry
from jaxlab.compression import linalg
from jaxlab.models import vit_classifier as vit_lib
from jaxlab.objectives import classification
from jaxlab.train import losses
from jaxlab.train import runner as runner_lib

NORM_TYPES = ("z_score", "l2", "min_max", "softmax")
ANCHORS = ("max_activation", "random")
COST_KINDS = ("params", "flops")


@dataclasses.dataclass(frozen=True)
class VulcanConfig:
  """Vulcan's knobs (defaults: the paper's code, papers/O-S.md O.2-O.4).

  Attributes:
    rate: R, the fraction of FFN neurons and of QK/VO head dims removed.
    norm_type: per-layer normalisation of neuron scores (O.2.2).
    width_multiple: widths are floored to a multiple of this (8 in the code).
    min_width: no layer goes below this width (8 in the code).
    uniform_widths: the ablation K_l = floor(e (1 - R)) in every layer.
    anchor: `max_activation` (the code) or `random` (the ablation).
    collapse: False drops the collapse loss (the "without CCNC" ablation).
    rank_loss: False drops the truncated-nuclear-norm loss ("without TNNR").
    rho: the multipliers' ascent rate (AdamW lr -rho, O.4).
    kmeans_iters: Lloyd iterations.
    seed: k-means++ and random-anchor seed.
  """
  rate: float = 0.6
  norm_type: str = "z_score"
  width_multiple: int = 8
  min_width: int = 8
  uniform_widths: bool = False
  anchor: str = "max_activation"
  collapse: bool = True
  rank_loss: bool = True
  rho: float = 1.0
  kmeans_iters: int = 100
  seed: int = 0

  def __post_init__(self):
    if not 0.0 <= self.rate < 1.0:
      raise ValueError(f"vulcan.rate={self.rate}: must be in [0, 1)")
    if self.norm_type not in NORM_TYPES:
      raise ValueError(f"vulcan.norm_type={self.norm_type!r}; valid: "
                       f"{', '.join(NORM_TYPES)}")
    if self.anchor not in ANCHORS:
      raise ValueError(f"vulcan.anchor={self.anchor!r}; valid: "
                       f"{', '.join(ANCHORS)}")
    if self.width_multiple < 1 or self.min_width < 1:
      raise ValueError("vulcan.width_multiple and vulcan.min_width must be "
                       ">= 1")


# --------------------------------------------------------------------------
# Accounting and budgets.
# --------------------------------------------------------------------------


def cost(cfg: vit_lib.ViTClassifierConfig, kind: str = "params") -> float:
  """Parameters or forward MACs (`ViTClassifierConfig.flops`) of `cfg`."""
  if kind == "params":
    return float(cfg.num_params())
  if kind == "flops":
    return cfg.flops()
  raise ValueError(f"budget kind {kind!r}; valid: {', '.join(COST_KINDS)}")


def _floor_width(x: float, full: int, multiple: int, minimum: int) -> int:
  w = int(x) // multiple * multiple
  return int(min(full, max(w, min(minimum, full))))


def normalise_scores(scores: Sequence[np.ndarray], kind: str = "z_score"
                     ) -> list[np.ndarray]:
  """Per-layer normalisation of neuron scores (O.2.2; population std)."""
  out = []
  for a in scores:
    a = np.asarray(a, np.float64)
    if kind == "z_score":
      out.append((a - a.mean()) / (a.std() + 1e-12))
    elif kind == "l2":
      out.append(a / (np.linalg.norm(a) + 1e-12))
    elif kind == "min_max":
      out.append((a - a.min()) / (a.max() - a.min() + 1e-12))
    elif kind == "softmax":
      e = np.exp(a - a.max())
      out.append(e / e.sum())
    else:
      raise ValueError(f"vulcan.norm_type={kind!r}; valid: "
                       f"{', '.join(NORM_TYPES)}")
  return out


def ffn_widths(norm_scores: Sequence[np.ndarray], rate: float, *,
               width_multiple: int = 8, min_width: int = 8,
               uniform: bool = False) -> list[int]:
  """Per-layer FFN widths K_l (O.2.3).

  θ = the k-th smallest of all L·e normalised scores, k = int(L·e·R);
  K_l = #{i : a[l, i] >= θ} floored to `width_multiple`, at least
  `min_width`. `uniform`: K_l = floor(e_l (1 - R)).
  """
  sizes = [len(a) for a in norm_scores]
  if uniform or rate <= 0:
    return [_floor_width(e * (1 - rate), e, width_multiple, min_width)
            if rate > 0 else e for e in sizes]
  flat = np.concatenate([np.asarray(a) for a in norm_scores])
  k = int(len(flat) * rate)
  if k < 1:
    return sizes
  theta = np.partition(flat, k - 1)[k - 1]
  return [_floor_width(int(np.sum(np.asarray(a) >= theta)), e,
                       width_multiple, min_width)
          for a, e in zip(norm_scores, sizes)]


def head_matrices(attn: vit_lib.Attention) -> dict[str, jax.Array]:
  """The spec's bias-augmented per-head matrices (O.3.1).

  `q`, `k`: Ŵ_Q, Ŵ_K `[H, d_k, d+1]`; `v`: Ŵ_V `[H, d_v, d+1]`; `o`: W_O,h
  `[H, d_v, d]`; `qk` = Ŵ_Qᵀ Ŵ_K `[H, d+1, d+1]`; `vo` = Ŵ_Vᵀ W_O `[H, d+1,
  d]`. Token x (augmented with a 1) scores token y as x̃ M_QK ỹᵀ / sqrt(d_k)
  and contributes x̃ M_VO to the output.
  """
  def aug(w_dhk, b_hk):
    return jnp.concatenate([jnp.transpose(w_dhk[...], (1, 2, 0)),
                            b_hk[...][..., None]], axis=-1)
  q = aug(attn.wq_dhk, attn.bq_hk)
  k = aug(attn.wk_dhk, attn.bk_hk)
  v = aug(attn.wv_dhv, attn.bv_hv)
  o = attn.wo_hvd[...]
  return {"q": q, "k": k, "v": v, "o": o,
          "qk": jnp.einsum("hki,hkj->hij", q, k),
          "vo": jnp.einsum("hvi,hvj->hij", v, o)}


@dataclasses.dataclass(frozen=True)
class ERankStats:
  """Σ_h erank(M_QK,h) and Σ_h erank(M_VO,h) per layer (O.3.2)."""
  qk: tuple[float, ...]
  vo: tuple[float, ...]


@nnx.jit
def _erank_sums(model):
  out = []
  for block in model.blocks:
    m = head_matrices(block.attn)
    out.append((jnp.sum(linalg.effective_rank(m["qk"])),
                jnp.sum(linalg.effective_rank(m["vo"]))))
  return out


def erank_stats(model: vit_lib.ViTClassifier) -> ERankStats:
  sums = jax.device_get(_erank_sums(model))
  return ERankStats(tuple(float(q) for q, _ in sums),
                    tuple(float(v) for _, v in sums))


def layer_rates(stats: ERankStats, rate: float) -> list[tuple[float, float]]:
  """(qk_rate, vo_rate) per layer from effective ranks (O.3.3).

  rate_l = R L / (Σ_l' 1/E_l') / E_l with E_l = qk_l + vo_l (mean rate_l is
  R when weighted harmonically; layers of higher rank are pruned less);
  qk_rate = rate_l 2 vo_l / (qk_l + vo_l), vo_rate = rate_l 2 qk_l /
  (qk_l + vo_l). Rates are clipped to [0, 1).
  """
  e = [q + v for q, v in zip(stats.qk, stats.vo)]
  inv_sum = sum(1.0 / x for x in e)
  out = []
  for q, v, el in zip(stats.qk, stats.vo, e):
    r = rate * len(e) / inv_sum / el
    qk_rate = min(max(r * 2 * v / (q + v), 0.0), 0.999)
    vo_rate = min(max(r * 2 * q / (q + v), 0.0), 0.999)
    out.append((qk_rate, vo_rate))
  return out


def head_dims(cfg: vit_lib.ViTClassifierConfig, stats: ERankStats,
              rate: float, *, width_multiple: int = 8, min_width: int = 8,
              uniform: bool = False) -> tuple[list[int], list[int]]:
  """Per-layer kept (qk, v) dims per head: floor(d (1 - rate)) (O.3.3)."""
  qk, v = [], []
  rates = ([(rate, rate)] * cfg.num_layers if uniform
           else layer_rates(stats, rate))
  for l, (qr, vr) in enumerate(rates):
    dq, dv = cfg.qk_dim(l), cfg.v_dim(l)
    qk.append(dq if rate <= 0 else _floor_width(dq * (1 - qr), dq,
                                                width_multiple, min_width))
    v.append(dv if rate <= 0 else _floor_width(dv * (1 - vr), dv,
                                               width_multiple, min_width))
  return qk, v


@dataclasses.dataclass(frozen=True)
class Widths:
  mlp: tuple[int, ...]
  qk: tuple[int, ...]
  v: tuple[int, ...]

  def apply(self, cfg: vit_lib.ViTClassifierConfig
            ) -> vit_lib.ViTClassifierConfig:
    return cfg.with_widths(qk_dims=self.qk, v_dims=self.v, mlp_dims=self.mlp)


def widths_for_rate(cfg: vit_lib.ViTClassifierConfig,
                    norm_scores: Sequence[np.ndarray], stats: ERankStats,
                    rate: float, vcfg: VulcanConfig) -> Widths:
  kw = dict(width_multiple=vcfg.width_multiple, min_width=vcfg.min_width,
            uniform=vcfg.uniform_widths)
  mlp = ffn_widths(norm_scores, rate, **kw)
  qk, v = head_dims(cfg, stats, rate, **kw)
  return Widths(tuple(mlp), tuple(qk), tuple(v))


def rate_for_budget(cfg: vit_lib.ViTClassifierConfig,
                    norm_scores: Sequence[np.ndarray], stats: ERankStats,
                    budget: float, vcfg: VulcanConfig, *,
                    kind: str = "params", step: float = 0.01
                    ) -> tuple[float, Widths]:
  """The smallest rate R (on a grid of `step`) whose model fits the budget.

  `budget` is the fraction of the dense model's `kind` (params or FLOPs)
  the pruned model may keep, counting everything (embeddings, norms, head).

  Raises:
    ValueError: budget outside (0, 1], or no rate reaches it (the message
      gives the smallest fraction reachable at minimum widths).
  """
  if not 0 < budget <= 1:
    raise ValueError(f"vulcan.budget={budget}: must be in (0, 1] (a fraction "
                     f"of the dense model's {kind})")
  dense = cost(cfg, kind)
  smallest = None
  for rate in np.arange(0.0, 1.0 - 1e-9, step):
    w = widths_for_rate(cfg, norm_scores, stats, float(rate), vcfg)
    frac = cost(w.apply(cfg), kind) / dense
    smallest = frac if smallest is None else min(smallest, frac)
    if frac <= budget + 1e-12:
      return float(rate), w
  raise ValueError(
      f"vulcan.budget={budget} of the {kind} cannot be met: the smallest "
      f"model (every width at min_width={vcfg.min_width}) keeps "
      f"{smallest:.4f} of them; raise the budget or lower vulcan.min_width")


# --------------------------------------------------------------------------
# Scores and the plan.
# --------------------------------------------------------------------------


@nnx.jit
def _acts(model, images):
  _, taps = model(images, taps=True)
  return [jnp.sum(a, axis=(0, 1)) for a in taps["mlp_act"]]


def neuron_scores(model: vit_lib.ViTClassifier,
                  image_batches: Iterable[np.ndarray]) -> list[np.ndarray]:
  """a[l, i] = mean over batches of Σ_{samples, tokens} GELU(x·w1_i + b1_i).

  O.2.1; every token counts, the CLS token included.
  """
  total, n = None, 0
  for images in image_batches:
    s = [np.asarray(x, np.float64) for x in _acts(model, jnp.asarray(images))]
    total = s if total is None else [a + b for a, b in zip(total, s)]
    n += 1
  if not n:
    raise ValueError("neuron_scores got no batches of target-class images")
  return [a / n for a in total]


# Compiled once per (shape, k): eager k-means dispatches op by op.
_kmeans = jax.jit(linalg.kmeans, static_argnames=("k", "iters", "tol"))


@dataclasses.dataclass(frozen=True)
class Plan:
  """What Vulcan keeps: widths, and per layer each neuron's cluster.

  `cluster[l][i]` is neuron i's cluster id in [0, K_l); `anchor[l][k]` is the
  neuron index of cluster k's anchor. K_l = len(anchor[l]) (k-means clusters
  left empty are dropped, so K_l may be below the budgeted width).
  """
  widths: Widths
  cluster: tuple[np.ndarray, ...]
  anchor: tuple[np.ndarray, ...]
  rate: float

  def anchor_of_neuron(self, layer: int) -> np.ndarray:
    """For every neuron, the index of its cluster's anchor."""
    return self.anchor[layer][self.cluster[layer]]


def make_plan(model: vit_lib.ViTClassifier, target_batches, vcfg: VulcanConfig,
              *, budget: float | None = None,
              budget_kind: str = "params") -> Plan:
  """Scores on the target classes -> widths (rate or budget) -> clusters.

  `target_batches`: image batches of the target classes only (the caller
  filters with `jaxlab.data.images.select_classes`, which rejects an empty
  class set). With `budget`, the rate is `rate_for_budget(...)` instead of
  `vcfg.rate`.
  """
  cfg = model.cfg
  raw = neuron_scores(model, target_batches)
  norm = normalise_scores(raw, vcfg.norm_type)
  stats = erank_stats(model)
  if budget is not None:
    rate, w = rate_for_budget(cfg, norm, stats, budget, vcfg,
                              kind=budget_kind)
  else:
    rate = vcfg.rate
    w = widths_for_rate(cfg, norm, stats, rate, vcfg)
  clusters, anchors, mlp = [], [], []
  rng = np.random.default_rng(vcfg.seed)
  for l, block in enumerate(model.blocks):
    e = cfg.mlp_width(l)
    if w.mlp[l] >= e:
      clusters.append(np.arange(e))
      anchors.append(np.arange(e))
      mlp.append(e)
      continue
    rows = jnp.asarray(block.mlp.w1_dm[...]).T          # [e, d]
    _, labels, _ = _kmeans(
        rows, k=w.mlp[l], key=jax.random.key(vcfg.seed * 1000 + l),
        iters=vcfg.kmeans_iters)
    labels = np.asarray(labels)
    used = np.unique(labels)                             # drop empty clusters
    labels = np.searchsorted(used, labels)
    anchor = np.zeros(len(used), np.int64)
    for k in range(len(used)):
      members = np.flatnonzero(labels == k)
      if vcfg.anchor == "random":
        anchor[k] = rng.choice(members)
      else:
        anchor[k] = members[np.argmax(norm[l][members])]
    clusters.append(labels)
    anchors.append(anchor)
    mlp.append(len(used))
  return Plan(Widths(tuple(mlp), w.qk, w.v), tuple(clusters), tuple(anchors),
              float(rate))


# --------------------------------------------------------------------------
# Post-training: the trainee, its regularisers and the `vulcan` loss.
# --------------------------------------------------------------------------


class PlanState(nnx.Variable):
  """Plan data the loss reads (anchors, cluster counts, kept ranks).

  Arrays rather than Python constants, so every plan of one base shape
  shares one compiled training step.
  """


class VulcanTrainee(nnx.Module):
  """The model, the two dual multipliers λ = (λ1, λ2) and the plan.

  `lagrange` is an `nnx.Param` so it is trained by its own optimizer group
  (`optim(...)`: AdamW with lr -rho, i.e. gradient ascent on λ, O.4).
  """

  def __init__(self, model: vit_lib.ViTClassifier, plan: Plan,
               vcfg: VulcanConfig = VulcanConfig()):
    self.model = model
    self.lagrange = nnx.Param(jnp.zeros((2,), jnp.float32))
    self.anchors = nnx.List([
        PlanState(jnp.asarray(plan.anchor_of_neuron(l), jnp.int32))
        for l in range(len(plan.cluster))])
    self.num_clusters = PlanState(jnp.asarray(
        [np.sum(np.bincount(c) > 1) for c in plan.cluster], jnp.float32))
    self.qk_keep = PlanState(jnp.asarray(plan.widths.qk, jnp.int32))
    self.v_keep = PlanState(jnp.asarray(plan.widths.v, jnp.int32))
    self.use_collapse = bool(vcfg.collapse)
    self.use_rank = bool(vcfg.rank_loss)


def collapse_penalty(model: vit_lib.ViTClassifier, anchors: Sequence[Any],
                     num_clusters: Any) -> tuple[jax.Array, jax.Array]:
  """(L1 part, squared part) of the collapse loss (O.4, mode "weight").

  Per layer: Σ over members i of non-singleton clusters of ‖w1_i − w1_a‖₁ +
  |b1_i − b1_a|  (and ‖·‖₂² + (·)²), divided by (#non-singleton clusters +
  1e-10); summed over layers. Anchors and singletons contribute 0.
  """
  l1 = l2 = jnp.zeros((), jnp.float32)
  for l, (block, anc) in enumerate(zip(model.blocks, anchors)):
    n = num_clusters[l]
    w = jnp.concatenate([block.mlp.w1_dm[...],
                         block.mlp.b1_m[...][None]], axis=0)   # [d+1, e]
    diff = w - w[:, anc[...]]
    denom = n + 1e-10
    l1 = l1 + jnp.sum(jnp.abs(diff)) / denom
    l2 = l2 + jnp.sum(jnp.square(diff)) / denom
  return l1, l2


def rank_penalty(model: vit_lib.ViTClassifier, qk_keep: Any,
                 v_keep: Any) -> tuple[jax.Array, jax.Array]:
  """(Σσ, Σσ²) of the singular values of Ŵ_Q, Ŵ_V beyond the kept rank.

  O.4 TNNR: Σ_l Σ_h [Σ_{i > q'_l} σ_i(Ŵ_Q,h) + Σ_{i > v'_l} σ_i(Ŵ_V,h)] /
  (H L), with per-head singular values from `svd(compute_uv=False)`.
  """
  l1 = l2 = jnp.zeros((), jnp.float32)
  n_layers = len(model.blocks)
  heads = model.cfg.num_heads
  for l, block in enumerate(model.blocks):
    m = head_matrices(block.attn)
    for mat, r in ((m["q"], qk_keep[l]), (m["v"], v_keep[l])):
      s = linalg.batched_svd(mat, compute_uv=False)
      s = jnp.where(jnp.arange(s.shape[-1]) >= r, s, 0.0)   # the tail only
      l1 = l1 + jnp.sum(s)
      l2 = l2 + jnp.sum(jnp.square(s))
  denom = heads * n_layers
  return l1 / denom, l2 / denom


@losses.register("vulcan")
def vulcan_loss(trainee: VulcanTrainee, batch: dict[str, jax.Array], *,
                rng: jax.Array, config: Any = None):
  """L = CE + λ1 (L1 collapse + Σσ tail) + λ2 (L2 collapse + Σσ² tail).

  O.4: λ1, λ2 are shared by both constraints; their gradient is the
  (non-negative) constraint value, so the negative learning rate of their
  group makes them grow while a constraint is violated.
  """
  del rng, config
  model = trainee.model
  ce, acc = classification.cross_entropy(model(batch["images"]),
                                         batch["labels"])
  zero = jnp.zeros((), jnp.float32)
  c1, c2 = (collapse_penalty(model, trainee.anchors,
                             trainee.num_clusters[...])
            if trainee.use_collapse else (zero, zero))
  r1, r2 = (rank_penalty(model, trainee.qk_keep[...], trainee.v_keep[...])
            if trainee.use_rank else (zero, zero))
  lam = trainee.lagrange[...]
  loss = ce + lam[0] * (c1 + r1) + lam[1] * (c2 + r2)
  return loss, {"ce": ce, "accuracy": acc, "collapse_l1": c1,
                "rank_l1": r1, "lambda1": lam[0], "lambda2": lam[1]}


def optim(*, lr: float, rho: float = 1.0, weight_decay: float = 0.05,
          warmup_steps: int = 0, schedule: str = "cosine",
          clip_norm: float = 0.0) -> ml_collections.ConfigDict:
  """`config.optim` for post-training: AdamW on the weights (O.4: wd 0.05)
  and the `multipliers` group, AdamW with lr -rho, no decay (ascent on λ).

  Clipping is off by default: global clipping would count λ's gradient
  (the constraint values) and shrink the weights' updates.
  """
  return runner_lib.optim_config(
      lr=lr, warmup_steps=warmup_steps, weight_decay=weight_decay,
      schedule=schedule, clip_norm=clip_norm, b2=0.999,
      groups={"multipliers": {"pattern": "lagrange", "optimizer": "adamw",
                              "lr": -float(rho), "weight_decay": 0.0,
                              "schedule": "constant", "warmup_steps": 0}})


def _run(module: nnx.Module, batches, *, loss: str, steps: int,
         optim_cfg, seed: int, log_every: int = 0) -> list[dict[str, float]]:
  runner = runner_lib.StepRunner(module, loss=loss, loss_config=None,
                                 optim=optim_cfg, steps=steps, seed=seed)
  it = iter(batches)
  logs = []
  for step in range(steps):
    m = runner.step(next(it), step)
    if log_every and (step % log_every == 0 or step == steps - 1):
      logs.append({"step": step, **m})
  runner.write_back()
  return logs


def train(trainee: VulcanTrainee, batches, *, steps: int, optim_cfg,
          seed: int = 0, log_every: int = 0) -> list[dict[str, float]]:
  """Post-trains `trainee` in place (loss `vulcan`, through `StepRunner`)."""
  return _run(trainee, batches, loss="vulcan", steps=steps,
              optim_cfg=optim_cfg, seed=seed, log_every=log_every)


def train_classifier(model: nnx.Module, batches, *, steps: int, optim_cfg,
                     seed: int = 0, log_every: int = 0
                     ) -> list[dict[str, float]]:
  """Trains `model` in place with the `classification` loss (StepRunner).

  Pre-training, fine-tuning the unpruned model on S (the baseline), and the
  prune-then-train baselines' fine-tuning.
  """
  return _run(model, batches, loss="classification", steps=steps,
              optim_cfg=optim_cfg, seed=seed, log_every=log_every)


# --------------------------------------------------------------------------
# Pruning into a smaller module.
# --------------------------------------------------------------------------


def merge_ffn(mlp: vit_lib.MLP, cluster: np.ndarray, anchor: np.ndarray
              ) -> dict[str, jax.Array]:
  """O.5 FFN: neuron k = anchor's fc1 row and bias; fc2 row = Σ members'.

  Exact when every member's fc1 row and bias equal its anchor's (GELU of
  equal pre-activations is equal, so Σ_i act_i w2_i = act_a Σ_i w2_i).
  """
  k = len(anchor)
  onehot = jax.nn.one_hot(jnp.asarray(cluster), k, dtype=jnp.float32)
  return {"w1_dm": mlp.w1_dm[...][:, anchor], "b1_m": mlp.b1_m[...][anchor],
          "w2_md": onehot.T @ mlp.w2_md[...], "b2_d": mlp.b2_d[...]}


def svd_prune_heads(attn: vit_lib.Attention, qk_rank: int, v_rank: int
                    ) -> dict[str, jax.Array]:
  """O.5 MHA: per head, rank-r factors of M_QK and M_VO (biases folded in).

  M_QK = U Σ Vᵀ: Ŵ_Q' = sqrt(r / d_k) (U_r Σ_r^½)ᵀ, Ŵ_K' = Σ_r^½ V_rᵀ (the
  factor keeps the logits when the softmax scale becomes r^-½); M_VO = U Σ
  Vᵀ: Ŵ_V' = (U_r Σ_r^½)ᵀ, W_O' = Σ_r^½ V_rᵀ. The last column of an
  augmented matrix is the new bias; b_O is unchanged.
  """
  m = head_matrices(attn)
  d_k = attn.qk
  u, s, vh = linalg.truncated_svd(m["qk"], qk_rank)      # [H, d+1, r] ...
  root = jnp.sqrt(s)[..., None]
  q_new = math.sqrt(qk_rank / d_k) * root * jnp.swapaxes(u, -1, -2)
  k_new = root * vh                                        # [H, r, d+1]
  u, s, vh = linalg.truncated_svd(m["vo"], v_rank)
  root = jnp.sqrt(s)[..., None]
  v_new = root * jnp.swapaxes(u, -1, -2)                   # [H, r, d+1]
  o_new = root * vh                                        # [H, r, d]

  def split(w_hkx):
    return jnp.transpose(w_hkx[..., :-1], (2, 0, 1)), w_hkx[..., -1]
  wq, bq = split(q_new)
  wk, bk = split(k_new)
  wv, bv = split(v_new)
  return {"wq_dhk": wq, "bq_hk": bq, "wk_dhk": wk, "bk_hk": bk,
          "wv_dhv": wv, "bv_hv": bv, "wo_hvd": o_new, "bo_d": attn.bo_d[...]}


def _build_like(model: vit_lib.ViTClassifier, widths: Widths,
                layer_params: Callable[[int, vit_lib.Block], dict[str, dict]]
                ) -> vit_lib.ViTClassifier:
  """A new ViTClassifier of `widths`, sharing every non-layer weight."""
  cfg = widths.apply(model.cfg)
  out = vit_lib.ViTClassifier(cfg, rngs=nnx.Rngs(0))

  def put(dst, src_value, where):
    arr = jnp.asarray(src_value, jnp.float32)
    if arr.shape != dst.shape:
      raise AssertionError(f"pruned {where}: shape {arr.shape}, expected "
                           f"{dst.shape}")
    dst[...] = arr

  for name in ("patch_embed_kd", "patch_bias_d", "cls_d", "pos_embed_nd",
               "head_dc", "head_bias_c", "dist_d", "dist_head_dc",
               "dist_head_bias_c"):
    if not hasattr(out, name):  # DeiT's distillation token / head only
      continue
    put(getattr(out, name), getattr(model, name)[...], name)
  for name in ("scale", "bias"):
    put(getattr(out.final_norm, name), getattr(model.final_norm, name)[...],
        f"final_norm.{name}")
  for l, block in enumerate(model.blocks):
    for norm in ("ln1", "ln2"):
      for name in ("scale", "bias"):
        put(getattr(getattr(out.blocks[l], norm), name),
            getattr(getattr(block, norm), name)[...], f"{l}.{norm}.{name}")
    for sub, arrays in layer_params(l, block).items():
      for name, arr in arrays.items():
        put(getattr(getattr(out.blocks[l], sub), name), arr,
            f"blocks.{l}.{sub}.{name}")
  return out


def prune(model: vit_lib.ViTClassifier, plan: Plan) -> vit_lib.ViTClassifier:
  """Vulcan's pruned model: clusters merged, heads cut by SVD (O.5)."""
  def layer(l, block):
    return {"mlp": merge_ffn(block.mlp, plan.cluster[l], plan.anchor[l]),
            "attn": svd_prune_heads(block.attn, plan.widths.qk[l],
                                    plan.widths.v[l])}
  return _build_like(model, plan.widths, layer)


# --------------------------------------------------------------------------
# Baselines: structured pruning by a criterion.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GroupScores:
  """Importance per FFN neuron `[e]`, per QK dim `[H, d_k]`, per V dim
  `[H, d_v]`, for every layer."""
  mlp: tuple[np.ndarray, ...]
  qk: tuple[np.ndarray, ...]
  v: tuple[np.ndarray, ...]


def _group_sums(tree: Any, fn: Callable[[jax.Array], jax.Array]
                ) -> GroupScores:
  """Σ fn(leaf) over each structural group, per layer (`tree` = Params)."""
  mlp, qk, v = [], [], []
  for blk in tree["blocks"].values() if isinstance(
      tree["blocks"], dict) else tree["blocks"]:
    m, a = blk["mlp"], blk["attn"]
    mlp.append(np.asarray(jnp.sum(fn(m["w1_dm"]), 0) + fn(m["b1_m"])
                          + jnp.sum(fn(m["w2_md"]), 1)))
    qk.append(np.asarray(jnp.sum(fn(a["wq_dhk"]), 0) + fn(a["bq_hk"])
                         + jnp.sum(fn(a["wk_dhk"]), 0) + fn(a["bk_hk"])))
    v.append(np.asarray(jnp.sum(fn(a["wv_dhv"]), 0) + fn(a["bv_hv"])
                        + jnp.sum(fn(a["wo_hvd"]), 2)))
  return GroupScores(tuple(mlp), tuple(qk), tuple(v))


def _param_dict(model) -> dict:
  return nnx.to_pure_dict(nnx.state(model, nnx.Param))


CRITERIA: registry.Registry[Callable[..., GroupScores]] = registry.Registry(
    "pruning criterion")


@CRITERIA.register("magnitude")
def magnitude_scores(model: vit_lib.ViTClassifier, batches=None
                     ) -> GroupScores:
  """L2 norm of each group's weights (data-free, class-agnostic)."""
  del batches
  s = _group_sums(_param_dict(model), jnp.square)
  return GroupScores(*(tuple(np.sqrt(x) for x in part) for part in
                       (s.mlp, s.qk, s.v)))


@nnx.jit
def _ce_grads(model, images, labels):
  def f(m):
    return classification.cross_entropy(m(images), labels)[0]
  return nnx.grad(f)(model)


@CRITERIA.register("taylor")
def taylor_scores(model: vit_lib.ViTClassifier, batches) -> GroupScores:
  """First-order Taylor importance (Σ_group g·w)², averaged over batches.

  Molchanov et al. (2019): the loss change from removing a group is about
  Σ g·w over its weights; the square of the per-batch sum is averaged.
  The batches decide what it is specific to (target classes or all).
  """
  params = _param_dict(model)
  total, n = None, 0
  for batch in batches:
    grads = nnx.to_pure_dict(_ce_grads(model, jnp.asarray(batch["images"]),
                                       jnp.asarray(batch["labels"])))
    gw = jax.tree.map(jnp.multiply, grads, params)
    s = _group_sums(gw, lambda x: x)
    sq = [tuple(np.square(x) for x in part) for part in (s.mlp, s.qk, s.v)]
    total = sq if total is None else [
        tuple(a + b for a, b in zip(t, u)) for t, u in zip(total, sq)]
    n += 1
  if not n:
    raise ValueError("taylor_scores got no batches")
  return GroupScores(*(tuple(x / n for x in part) for part in total))


def select_prune(model: vit_lib.ViTClassifier, scores: GroupScores,
                 widths: Widths) -> vit_lib.ViTClassifier:
  """Keeps the highest-scoring neurons / head dims to `widths`.

  Per layer: the top `widths.mlp[l]` FFN neurons; per head, the top
  `widths.qk[l]` Q/K dims (Q scaled by sqrt(r / d_k) so the logits keep
  their scale under the new softmax scale r^-½) and the top `widths.v[l]`
  V dims (with their W_O rows).
  """
  def layer(l, block):
    m, a = block.mlp, block.attn
    keep = np.sort(np.argsort(-scores.mlp[l], kind="stable")[:widths.mlp[l]])
    qk = np.sort(np.argsort(-scores.qk[l], axis=1,
                            kind="stable")[:, :widths.qk[l]], axis=1)
    vv = np.sort(np.argsort(-scores.v[l], axis=1,
                            kind="stable")[:, :widths.v[l]], axis=1)
    h = np.arange(model.cfg.num_heads)[:, None]
    scale = math.sqrt(widths.qk[l] / a.qk)

    def cols(w_dhk, idx):
      return jnp.transpose(jnp.transpose(w_dhk[...], (1, 2, 0))[h, idx],
                           (2, 0, 1))
    return {
        "mlp": {"w1_dm": m.w1_dm[...][:, keep], "b1_m": m.b1_m[...][keep],
                "w2_md": m.w2_md[...][keep], "b2_d": m.b2_d[...]},
        "attn": {"wq_dhk": scale * cols(a.wq_dhk, qk),
                 "bq_hk": scale * a.bq_hk[...][h, qk],
                 "wk_dhk": cols(a.wk_dhk, qk), "bk_hk": a.bk_hk[...][h, qk],
                 "wv_dhv": cols(a.wv_dhv, vv), "bv_hv": a.bv_hv[...][h, vv],
                 "wo_hvd": a.wo_hvd[...][h, vv], "bo_d": a.bo_d[...]}}
  return _build_like(model, widths, layer)


# --------------------------------------------------------------------------
# Evaluation and measurement.
# --------------------------------------------------------------------------


@nnx.jit
def _logits(model, images):
  return model(images)


def logits(model: nnx.Module, images: np.ndarray, *, batch_size: int = 256
           ) -> np.ndarray:
  out = [np.asarray(_logits(model, jnp.asarray(images[i:i + batch_size])))
         for i in range(0, len(images), batch_size)]
  return np.concatenate(out)


def accuracy(model: nnx.Module, images: np.ndarray, labels: np.ndarray, *,
             batch_size: int = 256) -> float:
  """Top-1 over all C logits (O.1: the head is not reduced to S)."""
  pred = np.argmax(logits(model, images, batch_size=batch_size), -1)
  return float(np.mean(pred == labels))


def measure(model: nnx.Module, images: np.ndarray, *, repeats: int = 20
            ) -> dict[str, float]:
  """Measured forward cost of one batch of `images` on this backend.

  `latency_ms`: median wall time of a compiled forward (after warm-up);
  `param_bytes`: bytes of the parameters; `temp_bytes`: XLA's temporary
  buffer size of the compiled forward (`memory_analysis`, when available).
  """
  graphdef, state = nnx.split(model)
  x = jnp.asarray(images)

  def fwd(state, x):
    return nnx.merge(graphdef, state)(x)
  compiled = jax.jit(fwd).lower(state, x).compile()
  compiled(state, x).block_until_ready()
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    compiled(state, x).block_until_ready()
    times.append(time.perf_counter() - t0)
  temp = float("nan")
  try:
    mem = compiled.memory_analysis()
    if mem is not None:
      temp = float(mem.temp_size_in_bytes)
  except (AttributeError, NotImplementedError, RuntimeError):
    pass
  params = jax.tree.leaves(nnx.state(model, nnx.Param))
  return {"latency_ms": 1e3 * float(np.median(times)),
          "param_bytes": float(sum(p.size * p.dtype.itemsize
                                   for p in params)),
          "temp_bytes": temp}
