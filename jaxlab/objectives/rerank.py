"""Reranking objectives: SFT vs contrastive learning as weight x direction.

Paper A (spec `papers/A-G.md` section A, "Supervised Fine-Tuning or
Contrastive Learning? Towards Better Multimodal LLM Reranking"). A pointwise
LLM reranker reads (instruction, query, document) and is scored at the answer
position from the "yes"/"no" logits z_y = M_y.h and z_n = M_n.h (spec 2):

  s_SFT = sigmoid(z_y - z_n)                                   (spec 3)
  s_CL  = z_y                                                  (spec 3)

One training example is a group of G = 1 + N documents, the positive at group
index 0 and N negatives after it; every array here is laid out `[B, G]`.

  L_CL  = -log softmax(z_y / temperature)[0]                   (spec 4)
  L_SFT = -log s(h0+) - sum_i log(1 - s(h_i-))                 (spec 4)

Both gradients factor as dL/dh = -W+ D (positive), +W_i- D (negatives)
(spec 5). The unified reranking loss (URL, spec 6) picks W and D
independently and is implemented as a stop-gradient surrogate

  L_URL = mean_b[ -sg(W+) g_D(h0+) + sum_i sg(W_i-) g_D(h_i-) ]

whose gradient is exactly W.D, where g_D is the scalar "direction score"
(dg_D/dh = D). Weights and directions are small registries (`WEIGHTS`,
`DIRECTIONS`) so a config picks a cell by name. The loss is registered with
the trainer as `"rerank"`; the embedding miniature's head pretraining as
`"rerank_head_pretrain"`.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab import registry
from jaxlab.models import reranker as reranker_lib
from jaxlab.train import losses


# The reranker's output type (the model's), re-exported here.
RerankHeads = reranker_lib.RerankHeads


# -- scores (spec 3) ---------------------------------------------------------


def sft_score(z_yes: jax.Array, z_no: jax.Array) -> jax.Array:
  """s_SFT = exp(z_y) / (exp(z_y) + exp(z_n)) = sigmoid(z_y - z_n)."""
  return jax.nn.sigmoid(z_yes - z_no)


def cl_score(z_yes: jax.Array) -> jax.Array:
  """s_CL = z_y, the raw "yes" logit."""
  return z_yes


# -- native losses (spec 4) --------------------------------------------------


def native_cl_loss(z_yes_bg: jax.Array, temperature: float = 1.0
                   ) -> jax.Array:
  """InfoNCE over each group (positive at index 0); mean over B."""
  logp_bg = jax.nn.log_softmax(z_yes_bg.astype(jnp.float32) / temperature,
                               axis=-1)
  return -jnp.mean(logp_bg[:, 0])


def native_sft_loss(z_yes_bg: jax.Array, z_no_bg: jax.Array) -> jax.Array:
  """Per-document yes/no cross-entropy, summed over a group, mean over B."""
  u_bg = (z_yes_bg - z_no_bg).astype(jnp.float32)
  # -log sigma(u) for the positive, -log sigma(-u) for each negative.
  nll_bg = jnp.concatenate([-jax.nn.log_sigmoid(u_bg[:, :1]),
                            -jax.nn.log_sigmoid(-u_bg[:, 1:])], axis=-1)
  return jnp.mean(jnp.sum(nll_bg, axis=-1))


# -- weights W (spec 5, 7) ---------------------------------------------------
# Each returns `[B, G]`: column 0 is W+ (the positive), columns 1.. are W_i-.

WeightFn = Callable[..., jax.Array]
WEIGHTS: registry.Registry[WeightFn] = registry.Registry("rerank weight")
register_weight = WEIGHTS.register


def _pos_neg(w_pos_b: jax.Array, w_neg_bn: jax.Array) -> jax.Array:
  return jnp.concatenate([w_pos_b[:, None], w_neg_bn], axis=-1)


@register_weight("cl")
def cl_weight(z_yes_bg, z_no_bg, *, temperature: float = 1.0,
              mask_tau: float = 0.1) -> jax.Array:
  """W+_CL = 1 - p_0, W-_CL,i = p_i, p = softmax(z_y / temperature).

  Spec 5; the 1/temperature factor (1 at the spec's temperature) keeps the
  surrogate's gradient equal to native CL at any temperature.
  """
  del z_no_bg, mask_tau
  p_bg = jax.nn.softmax(z_yes_bg.astype(jnp.float32) / temperature, axis=-1)
  return _pos_neg(1.0 - p_bg[:, 0], p_bg[:, 1:]) / temperature


@register_weight("sft")
def sft_weight(z_yes_bg, z_no_bg, *, temperature: float = 1.0,
               mask_tau: float = 0.1) -> jax.Array:
  """W+_SFT = 1 - s(h0+), W-_SFT,i = s(h_i-), s = sigmoid(z_y - z_n) (spec 5)."""
  del temperature, mask_tau
  s_bg = sft_score(z_yes_bg, z_no_bg).astype(jnp.float32)
  return _pos_neg(1.0 - s_bg[:, 0], s_bg[:, 1:])


@register_weight("constant")
def constant_weight(z_yes_bg, z_no_bg, *, temperature: float = 1.0,
                    mask_tau: float = 0.1) -> jax.Array:
  """W_base: every weight is 1 (spec 7)."""
  del z_no_bg, temperature, mask_tau
  return jnp.ones(z_yes_bg.shape, jnp.float32)


@register_weight("constant_tau_mask")
def constant_tau_mask_weight(z_yes_bg, z_no_bg, *, temperature: float = 1.0,
                             mask_tau: float = 0.1) -> jax.Array:
  """W_base + tau-mask (spec 7): 1, but 0 for already-learned documents.

  The positive's weight is 0 once s(h0+) > 1 - tau, a negative's once
  s(h_i-) < tau, with s the SFT probability sigmoid(z_y - z_n) [inferred:
  the spec's s is a probability; tau itself is not reported, default 0.1].
  """
  del temperature
  s_bg = sft_score(z_yes_bg, z_no_bg).astype(jnp.float32)
  w_pos = (s_bg[:, 0] <= 1.0 - mask_tau).astype(jnp.float32)
  w_neg = (s_bg[:, 1:] >= mask_tau).astype(jnp.float32)
  return _pos_neg(w_pos, w_neg)


# -- directions D (spec 5, 8) ------------------------------------------------
# Each returns the scalar g_D `[B, G]` whose gradient w.r.t. h is D.

DirectionFn = Callable[[RerankHeads], jax.Array]
DIRECTIONS: registry.Registry[DirectionFn] = registry.Registry(
    "rerank direction")
register_direction = DIRECTIONS.register


@register_direction("cl")
def cl_direction(heads: RerankHeads) -> jax.Array:
  """D_CL = M_y: g = z_y."""
  return heads.z_yes


@register_direction("sft")
def sft_direction(heads: RerankHeads) -> jax.Array:
  """D_SFT = M_y - M_n: g = z_y - z_n."""
  return heads.z_yes - heads.z_no


def swap_to_random_head(heads: RerankHeads) -> RerankHeads:
  """Heads whose yes/no logits come from the learnable random head R."""
  if heads.z_rand is None:
    raise ValueError("direction 'random' needs a model built with a random "
                     "head (reranker config `random_direction=True`)")
  return heads.replace(z_yes=heads.z_rand[..., 0], z_no=heads.z_rand[..., 1])


# D_Rand (spec 8: "replace the token unembeddings with a randomly
# initialised, learnable projection"): the yes/no rows M_y, M_n are replaced
# by a learnable R = (R_y, R_n), so both the weights and the direction read
# the new logits (`group_loss` swaps the heads). "random_cl": D = R_y,
# "random_sft": D = R_y - R_n, "random": the form matching the weight (CL
# for W_CL, SFT otherwise). Computing W from the frozen M while pushing along
# an unrelated r would leave the linear surrogate without any saturation.
RANDOM_DIRECTIONS = {"random_cl": "cl", "random_sft": "sft"}


def resolve_direction(weight: str, direction: str) -> str:
  """"random" -> "random_cl" under W_CL, else "random_sft"; others as is."""
  if direction == "random":
    return "random_cl" if weight == "cl" else "random_sft"
  return direction


@register_direction("random_cl")
def random_cl_direction(heads: RerankHeads) -> jax.Array:
  return swap_to_random_head(heads).z_yes


@register_direction("random_sft")
def random_sft_direction(heads: RerankHeads) -> jax.Array:
  h = swap_to_random_head(heads)
  return h.z_yes - h.z_no


@register_direction("random")
def random_direction(heads: RerankHeads) -> jax.Array:
  """SFT form when called directly; `group_loss` picks the weight's form."""
  return random_sft_direction(heads)


@register_direction("multi_token")
def multi_token_direction(heads: RerankHeads) -> jax.Array:
  """Label sets: D = mean_{t in Y} M_t - mean_{t in N} M_t.

  [inferred] The spec grows the label set from 2 to 16 tokens without saying
  how they combine; the mean of the positive-set minus the mean of the
  negative-set unembeddings reduces to D_SFT for one token each.
  """
  if heads.z_label_pos is None or heads.z_label_neg is None:
    raise ValueError("direction 'multi_token' needs label-set logits "
                     "(reranker config `num_label_tokens` >= 2)")
  return (jnp.mean(heads.z_label_pos, axis=-1) -
          jnp.mean(heads.z_label_neg, axis=-1))


def weights(name: str, z_yes_bg, z_no_bg, *, temperature: float = 1.0,
            mask_tau: float = 0.1) -> jax.Array:
  """W `[B, G]` of the named registry entry."""
  return WEIGHTS.get(name)(
      z_yes_bg, z_no_bg, temperature=temperature, mask_tau=mask_tau)


def direction_score(name: str, heads: RerankHeads) -> jax.Array:
  """g_D `[B, G]` of the named direction."""
  return DIRECTIONS.get(name)(heads)


# -- unified surrogate (spec 6) ----------------------------------------------


def unified_loss(w_bg: jax.Array, g_bg: jax.Array) -> jax.Array:
  """L_URL = mean_b[-sg(W+) g(h0+) + sum_i sg(W_i-) g(h_i-)] (spec 6).

  Its gradient with respect to any parameter is W.D: the positive's score is
  pushed up with weight W+, each negative's pushed down with weight W_i-.
  """
  w_bg = jax.lax.stop_gradient(w_bg.astype(jnp.float32))
  sign_g = jnp.concatenate([-jnp.ones_like(g_bg[:, :1]),
                            jnp.ones_like(g_bg[:, 1:])], axis=-1)
  return jnp.mean(jnp.sum(sign_g * w_bg * g_bg.astype(jnp.float32), axis=-1))


def rank_score(heads: RerankHeads, kind: str = "direction",
               direction: str = "sft") -> jax.Array:
  """Score used to rank documents at evaluation.

  kind: "sft" (sigmoid(z_y - z_n)), "cl" (z_y), or "direction" (g_D of the
  trained direction, the quantity the loss pushes apart).
  """
  if kind == "sft":
    return sft_score(heads.z_yes, heads.z_no)
  if kind == "cl":
    return cl_score(heads.z_yes)
  if kind == "direction":
    return direction_score(direction, heads)
  raise ValueError(f"unknown rank score {kind!r}; valid: cl, direction, sft")


OBJECTIVES = ("url", "cl", "sft")


def group_loss(heads: RerankHeads, *, objective: str = "url",
               weight: str = "sft", direction: str = "sft",
               temperature: float = 1.0, mask_tau: float = 0.1
               ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Loss and metrics for `[B, G]` heads (positive at index 0).

  objective: "url" (surrogate with `weight` x `direction`), "cl" (native
  InfoNCE) or "sft" (native per-document cross-entropy). Metrics: the mean
  W+ and W- of the weights in effect (for native objectives, their own
  implied weights) and, for comparison on the same states, of W_CL and W_SFT;
  `group_acc`: the positive has the top rank score.
  """
  z_yes, z_no = heads.z_yes, heads.z_no
  if z_yes.ndim != 2 or z_yes.shape[1] < 2:
    raise ValueError("rerank heads must be [B, G] with G >= 2 (one positive "
                     f"and >= 1 negative); got {z_yes.shape}")
  kw = dict(temperature=temperature, mask_tau=mask_tau)
  if objective == "url" and direction.startswith("random"):
    # D_Rand replaces the yes/no unembeddings: W and D both read R.
    direction = resolve_direction(weight, direction)
    heads = swap_to_random_head(heads)
    z_yes, z_no = heads.z_yes, heads.z_no
    direction = RANDOM_DIRECTIONS.get(direction, direction)
  if objective == "url":
    w_bg = weights(weight, z_yes, z_no, **kw)
    g_bg = direction_score(direction, heads)
    loss = unified_loss(w_bg, g_bg)
  elif objective == "cl":
    w_bg = weights("cl", z_yes, z_no, **kw)
    g_bg = z_yes
    loss = native_cl_loss(z_yes, temperature)
  elif objective == "sft":
    w_bg = weights("sft", z_yes, z_no, **kw)
    g_bg = z_yes - z_no
    loss = native_sft_loss(z_yes, z_no)
  else:
    raise ValueError(f"unknown rerank objective {objective!r}; valid: "
                     f"{', '.join(OBJECTIVES)}")
  w_bg = jax.lax.stop_gradient(w_bg)
  w_cl = jax.lax.stop_gradient(weights("cl", z_yes, z_no, **kw))
  w_sft = jax.lax.stop_gradient(weights("sft", z_yes, z_no, **kw))
  g_sg = jax.lax.stop_gradient(g_bg)
  metrics = {
      "w_pos": jnp.mean(w_bg[:, 0]),
      "w_neg": jnp.mean(w_bg[:, 1:]),
      "w_cl_pos": jnp.mean(w_cl[:, 0]),
      "w_cl_neg": jnp.mean(w_cl[:, 1:]),
      "w_sft_pos": jnp.mean(w_sft[:, 0]),
      "w_sft_neg": jnp.mean(w_sft[:, 1:]),
      "group_acc": jnp.mean(
          (g_sg[:, 0] > jnp.max(g_sg[:, 1:], axis=-1)).astype(jnp.float32)),
  }
  return loss, metrics


def _cfg_get(config: Any, key: str, default: Any) -> Any:
  if config is None:
    return default
  try:
    return config.get(key, default)
  except AttributeError:
    return getattr(config, key, default)


@losses.register("rerank")
def rerank_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                config: Any = None):
  """Trainer loss: `model.score_heads(batch)` -> `[B, G]` heads -> group_loss.

  `config` (the experiment's `config.loss`) fields: objective ("url" | "cl" |
  "sft"), weight, direction, temperature, mask_tau.
  """
  del rng
  heads = model.score_heads(batch)
  return group_loss(
      heads,
      objective=_cfg_get(config, "objective", "url"),
      weight=_cfg_get(config, "weight", "sft"),
      direction=_cfg_get(config, "direction", "sft"),
      temperature=float(_cfg_get(config, "temperature", 1.0)),
      mask_tau=float(_cfg_get(config, "mask_tau", 0.1)))


@losses.register("rerank_head_pretrain")
def head_pretrain_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                       config: Any = None):
  """Pretraining of a reranker's yes/no head on another binary task.

  The spec's CPU miniature (section A, "frozen, pretrained unembedding")
  needs M_y, M_n (and the multi-token label rows) to carry meaning before
  they are frozen. `batch`: `query [B, E]`, `docs [B, 1, E]`; the label is
  y = [<q, d> over the first half of the E dims > 0]. The loss is the
  binary cross-entropy of the single-token score u = z_y - z_n plus that of
  the multi-token score (mean yes-like minus mean no-like logits), so both
  directions are trained.
  """
  del rng, config
  q, d = batch["query"], batch["docs"]
  half = q.shape[-1] // 2
  y = (jnp.sum(q[:, :half] * d[:, 0, :half], -1) > 0).astype(jnp.float32)
  heads = model.score_heads(batch)
  u = (heads.z_yes - heads.z_no)[:, 0]
  u_multi = direction_score("multi_token", heads)[:, 0]
  bce = (optax.sigmoid_binary_cross_entropy(u, y) +
         optax.sigmoid_binary_cross_entropy(u_multi, y))
  return jnp.mean(bce), {"acc": jnp.mean(((u > 0) == (y > 0)).astype(
      jnp.float32))}
