"""StableToken losses (spec: papers/A-G.md, section E.4) and the training loss.

    L = L_ASR + l1 L_consensus + l2 L_commit + l3 L_codebook     (eq. E.4)

with l1 = l2 = 0.25, l3 = 1. Here L_ASR is a CTC loss on the phone sequence
(the CPU miniature's stand-in for the Whisper decoder, `optax.ctc_loss`).

  consensus   (1/n) sum_i ||p_i - p_bar||^2 on the continuous branch
              projections, per-dimension MSE, p_bar = sg(mean_j p_j) (the
              stop-gradient is the code's; `consensus_stop_gradient`).
  commitment  mean_i MSE(p_i, sg(s)), s the soft vote [code].
  entropy     LFQ codebook entropy per branch: logits_c = 2 p_i . c over all
              c in {-1, +1}^d, P = softmax(logits / 0.01); E_x[H(P)] -
              H(E_x[P]) (weights 1, 1), averaged over branches [code].

The registered loss `stabletoken` routes the branches (`routing`):
  noise_aware  a random minority of n - num_clean branches per sample reads
               the perturbed copy (the method, spec E.3).
  augment      every branch reads the same input: the perturbed copy with
               probability `augment_prob`, else the clean one (plain noise
               augmentation: the "without noise-aware routing" ablation and
               the single-branch baseline).
  clean        clean inputs only.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab.nn import quantizers
from jaxlab.train import losses

ROUTINGS = ("noise_aware", "augment", "clean")


def _masked_mean(x: jax.Array, mask: jax.Array | None) -> jax.Array:
  """Mean of `x [B, T]` over `mask [B, T]` (all when None)."""
  if mask is None:
    return jnp.mean(x)
  m = mask.astype(x.dtype)
  return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def consensus_loss(branch_pre: jax.Array, mask: jax.Array | None = None, *,
                   stop_gradient: bool = True) -> jax.Array:
  """L_consensus = (1/n) sum_i MSE(p_i, p_bar), `branch_pre [B, T, n, d]`.

  p_bar = (1/n) sum_j p_j (stop-gradient by default, as in the code); the
  per-dimension MSE is averaged over branches, then over valid frames.
  """
  p_bar = jnp.mean(branch_pre, axis=-2, keepdims=True)
  if stop_gradient:
    p_bar = jax.lax.stop_gradient(p_bar)
  per_frame = jnp.mean((branch_pre - p_bar) ** 2, axis=(-2, -1))
  return _masked_mean(per_frame, mask)


def commitment_loss(branch_pre: jax.Array, soft: jax.Array,
                    mask: jax.Array | None = None) -> jax.Array:
  """L_commit = mean_i MSE(p_i, sg(s)); `soft [B, T, d]` the soft vote."""
  target = jax.lax.stop_gradient(soft)[..., None, :]
  per_frame = jnp.mean((branch_pre - target) ** 2, axis=(-2, -1))
  return _masked_mean(per_frame, mask)


def lfq_entropy_loss(branch_pre: jax.Array, mask: jax.Array | None = None,
                     *, temperature: float = 0.01,
                     sample_weight: float = 1.0,
                     batch_weight: float = 1.0) -> tuple[jax.Array, dict]:
  """LFQ codebook entropy loss per branch, averaged over branches.

  logits_c = 2 p . c for every code c in {-1, +1}^d, P = softmax(logits /
  temperature); loss = sample_weight E_x[H(P)] - batch_weight H(E_x[P]),
  expectations over valid frames. Returns (loss, {"sample_entropy",
  "batch_entropy"}) (both averaged over branches, in nats).
  """
  bits = branch_pre.shape[-1]
  codes = quantizers.codebook(bits)                     # [K, d]
  logits = 2.0 * jnp.einsum("btnd,kd->btnk", branch_pre.astype(jnp.float32),
                            codes) / temperature
  logp = jax.nn.log_softmax(logits, axis=-1)
  prob = jnp.exp(logp)
  ent = -jnp.sum(prob * logp, axis=-1)                  # [B, T, n]
  if mask is None:
    mask = jnp.ones(ent.shape[:2], bool)
  m = mask.astype(jnp.float32)[..., None]               # [B, T, 1]
  denom = jnp.maximum(jnp.sum(m), 1.0)
  sample_h = jnp.sum(ent * m, axis=(0, 1)) / denom      # [n]
  avg = jnp.sum(prob * m[..., None], axis=(0, 1)) / denom   # [n, K]
  batch_h = -jnp.sum(avg * jnp.log(jnp.maximum(avg, 1e-30)), axis=-1)
  loss = jnp.mean(sample_weight * sample_h - batch_weight * batch_h)
  return loss, {"sample_entropy": jnp.mean(sample_h),
                "batch_entropy": jnp.mean(batch_h)}


def ctc_loss(logits: jax.Array, logit_mask: jax.Array, labels: jax.Array,
             label_mask: jax.Array, *, blank_id: int = 0) -> jax.Array:
  """Mean over the batch of CTC NLL / label length (`optax.ctc_loss`)."""
  per_seq = optax.ctc_loss(
      logits.astype(jnp.float32), 1.0 - logit_mask.astype(jnp.float32),
      labels, 1.0 - label_mask.astype(jnp.float32), blank_id=blank_id)
  n_labels = jnp.maximum(jnp.sum(label_mask.astype(jnp.float32), -1), 1.0)
  return jnp.mean(per_seq / n_labels)


def route_inputs(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                 config: Any) -> dict[str, Any]:
  """The model's keyword inputs for `config.routing` (see module doc)."""
  routing = config.get("routing", "noise_aware")
  feats, noisy = batch["features"], batch.get("features_noisy")
  if routing not in ROUTINGS:
    raise ValueError(f"loss.routing={routing!r}; valid: {', '.join(ROUTINGS)}")
  if routing != "clean" and noisy is None:
    raise ValueError(f"loss.routing={routing!r} needs batch['features_noisy']"
                     " (the perturbed copy); use routing='clean' without it")
  if routing == "clean":
    return {"features": feats}
  if routing == "augment":
    pick = jax.random.uniform(rng, (feats.shape[0],)) < config.get(
        "augment_prob", 0.4)
    return {"features": jnp.where(pick[:, None, None], noisy, feats)}
  q = model.quantizer
  if not isinstance(q, quantizers.VotingLFQ):
    raise ValueError("loss.routing='noise_aware' needs a VotingLFQ quantizer;"
                     " use routing='augment' for VQ")
  mask = quantizers.noisy_branch_mask(rng, feats.shape[0], q.n_voters,
                                      q.num_clean)
  return {"features": feats, "features_noisy": noisy, "route_mask": mask}


@losses.register("stabletoken")
def stabletoken_loss(model, batch: dict[str, jax.Array], *, rng: jax.Array,
                     config: Any = None):
  """L_CTC + l1 L_consensus + l2 L_commit + l3 L_codebook (+ VQ aux loss).

  batch: `features [B, F, M]` clean log-mel, `features_noisy [B, F, M]` a
  perturbed copy of the same waveform, `frame_lengths [B]` valid mel
  frames, `labels [B, L]` phone ids (1..V-1; 0 is the CTC blank) with
  `label_mask [B, L]`. config (`config.loss`): consensus_weight,
  commit_weight, entropy_weight, entropy_temperature,
  sample_entropy_weight, batch_entropy_weight, consensus_stop_gradient,
  routing, augment_prob.
  """
  config = config or {}
  get = config.get
  inputs = route_inputs(model, batch, rng=rng, config=config)
  out = model(frame_lengths=batch["frame_lengths"], train=True, **inputs)
  mask = out["token_mask"]
  ctc = ctc_loss(out["logits"], mask, batch["labels"], batch["label_mask"])
  qo: quantizers.QuantizerOutput = out["quant"]
  soft = jnp.mean(qo.branch_codes, axis=-2)
  cons = consensus_loss(qo.branch_pre, mask,
                        stop_gradient=get("consensus_stop_gradient", True))
  commit = commitment_loss(qo.branch_pre, soft, mask)
  if isinstance(model.quantizer, quantizers.VotingLFQ):
    ent, ent_m = lfq_entropy_loss(
        qo.branch_pre, mask, temperature=get("entropy_temperature", 0.01),
        sample_weight=get("sample_entropy_weight", 1.0),
        batch_weight=get("batch_entropy_weight", 1.0))
  else:  # VQ: its own codebook/commitment terms are in aux_loss
    ent, ent_m = jnp.zeros(()), {}
    cons = commit = jnp.zeros(())
  loss = (ctc + get("consensus_weight", 0.25) * cons
          + get("commit_weight", 0.25) * commit
          + get("entropy_weight", 1.0) * ent + qo.aux_loss)
  metrics = {"ctc": ctc, "consensus": cons, "commit": commit,
             "entropy": ent, **ent_m}
  return loss, metrics
