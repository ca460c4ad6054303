"""LLM unlearning objectives: PMC and the baselines of its paper (spec B.6, B.9).

Every objective is a pure function of per-sequence answer NLLs, so it can be
checked against hand-written log-prob arithmetic:

  forget_nll_b, forget_len_b:  sum of token NLL over the answer tokens of each
                               forget sequence, and its answer length |y|;
  retain_nll_b, retain_len_b:  the same for the paired retain sequences;
  ref_forget_nll_b:            the frozen original model's forget NLL (NPO).

"NLL" of a batch (written NLL_f, NLL_r below) is the token mean over the batch,
sum_b nll_b / sum_b |y_b|, which is what the official (HF) code gets from
`model(..., labels=...).loss` with the prompt masked.

  pmc / idk:  NLL_f + lam * NLL_r          (PMC: targets = cached self-samples;
                                            IDK: targets = "I don't know.")
  ga:         -NLL_f
  gd:         -NLL_f + lam * NLL_r
  npo:        -(2/beta) mean_b log sigmoid(beta (nll_b - ref_nll_b))
              + lam * NLL_r
  simnpo:     -(2/beta) mean_b log sigmoid(beta (nll_b / |y_b| - gamma))
              + lam * NLL_r
  dpo:        DPO (Rafailov et al. 2023, eq. 7; `jaxlab.objectives.dpo`)
              with chosen = "I don't know." (the forget targets) and
              rejected = the original forget answer, + lam * NLL_r
              (the TOFU-style DPO baseline the PMC paper compares with):
              -mean_b log sigmoid(beta ((ref_nll_w - nll_w)
                                        - (ref_nll_l - nll_l))) + lam NLL_r

Each is also a trainer loss (`jaxlab.train.losses`) named `unlearn_<name>`,
reading batch keys `forget_inputs/forget_targets/forget_mask` `[B, T]`,
`retain_inputs/retain_targets/retain_mask` `[B, T]` and, for NPO,
`forget_ref_nll [B]`; DPO also reads the rejected answers
`rejected_inputs/rejected_targets/rejected_mask` `[B, T]` and both reference
NLLs `forget_ref_nll`, `rejected_ref_nll` `[B]`; `config` fields `lam`,
`beta`, `gamma`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxlab import registry
from jaxlab.objectives import dpo as dpo_lib
from jaxlab.train import losses as losses_lib

# Defaults. lam = 1.5 is the official Phi-1.5 config (spec B.8). beta and
# gamma are [inferred] (TOFU-style NPO beta = 0.1; SimNPO beta = 2.5,
# gamma = 0): the spec does not give them.
DEFAULT_LAM = 1.5
DEFAULT_BETA = {"npo": 0.1, "simnpo": 2.5, "dpo": dpo_lib.DEFAULT_BETA}
DEFAULT_GAMMA = 0.0

UnlearnFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]
_REGISTRY: registry.Registry[UnlearnFn] = registry.Registry(
    "unlearning objective")
register = _REGISTRY.register
get = _REGISTRY.get
available = _REGISTRY.names


# -- building blocks ---------------------------------------------------------


sequence_nll = losses_lib.sequence_nll


def batch_nll(nll_b: jax.Array, len_b: jax.Array) -> jax.Array:
  """Token-mean NLL of a batch: sum_b nll_b / sum_b |y_b|."""
  return jnp.sum(nll_b) / jnp.maximum(jnp.sum(len_b), 1.0)


def _retain_term(retain_nll_b, retain_len_b, lam):
  if retain_nll_b is None or lam == 0:
    return jnp.zeros((), jnp.float32)
  return lam * batch_nll(retain_nll_b, retain_len_b)


def _npo_term(margin_b: jax.Array, beta: float) -> jax.Array:
  """-(2/beta) mean_b log sigmoid(beta * margin_b)."""
  return -(2.0 / beta) * jnp.mean(jax.nn.log_sigmoid(beta * margin_b))


# -- objectives ----------------------------------------------------------------


@register("pmc")
def pmc(forget_nll_b, forget_len_b, retain_nll_b=None, retain_len_b=None, *,
        lam: float = DEFAULT_LAM, **unused):
  """PMC step objective (spec B.6): NLL(selected | q) + lam * NLL(a | q)."""
  del unused
  f = batch_nll(forget_nll_b, forget_len_b)
  r = _retain_term(retain_nll_b, retain_len_b, lam)
  return f + r, {"forget_nll": f, "retain_term": r}


@register("idk")
def idk(forget_nll_b, forget_len_b, retain_nll_b=None, retain_len_b=None, *,
        lam: float = DEFAULT_LAM, **unused):
  """IDK (spec B.9): PMC's form with forget targets "I don't know."."""
  return pmc(forget_nll_b, forget_len_b, retain_nll_b, retain_len_b, lam=lam,
             **unused)


@register("ga")
def gradient_ascent(forget_nll_b, forget_len_b, retain_nll_b=None,
                    retain_len_b=None, **unused):
  """Gradient ascent (spec B.9): -NLL_f; the retain set is unused."""
  del retain_nll_b, retain_len_b, unused
  f = batch_nll(forget_nll_b, forget_len_b)
  return -f, {"forget_nll": f}


@register("gd")
def gradient_difference(forget_nll_b, forget_len_b, retain_nll_b=None,
                        retain_len_b=None, *, lam: float = DEFAULT_LAM,
                        **unused):
  """Gradient difference (spec B.9): lam * NLL_r - NLL_f."""
  del unused
  f = batch_nll(forget_nll_b, forget_len_b)
  r = _retain_term(retain_nll_b, retain_len_b, lam)
  return r - f, {"forget_nll": f, "retain_term": r}


@register("npo")
def npo(forget_nll_b, forget_len_b, retain_nll_b=None, retain_len_b=None, *,
        ref_forget_nll_b=None, lam: float = DEFAULT_LAM,
        beta: float = DEFAULT_BETA["npo"], **unused):
  """NPO (spec B.9): -(2/b) mean log s(b (nll - nll_ref)) + lam * NLL_r.

  nll - nll_ref = -log(pi_theta(y|x) / pi_ref(y|x)) per sequence (summed
  over answer tokens).
  """
  del unused
  if ref_forget_nll_b is None:
    raise ValueError("npo needs ref_forget_nll_b (batch key "
                     "'forget_ref_nll'): the frozen model's forget NLL")
  f = _npo_term(forget_nll_b - ref_forget_nll_b, beta)
  r = _retain_term(retain_nll_b, retain_len_b, lam)
  return f + r, {"forget_term": f, "retain_term": r,
                 "forget_nll": batch_nll(forget_nll_b, forget_len_b)}


@register("simnpo")
def simnpo(forget_nll_b, forget_len_b, retain_nll_b=None, retain_len_b=None,
           *, lam: float = DEFAULT_LAM, beta: float = DEFAULT_BETA["simnpo"],
           gamma: float = DEFAULT_GAMMA, **unused):
  """SimNPO (spec B.9): -(2/b) mean log s(b (nll/|y| - gamma)) + lam NLL_r."""
  del unused
  per_token_b = forget_nll_b / jnp.maximum(forget_len_b, 1.0)
  f = _npo_term(per_token_b - gamma, beta)
  r = _retain_term(retain_nll_b, retain_len_b, lam)
  return f + r, {"forget_term": f, "retain_term": r,
                 "forget_nll": batch_nll(forget_nll_b, forget_len_b)}


@register("dpo")
def dpo(forget_nll_b, forget_len_b, retain_nll_b=None, retain_len_b=None, *,
        ref_forget_nll_b=None, rejected_nll_b=None, ref_rejected_nll_b=None,
        lam: float = DEFAULT_LAM, beta: float = DEFAULT_BETA["dpo"],
        **unused):
  """DPO unlearning baseline (spec B.9, "DPO appears in the paper").

  `dpo_lib.dpo_loss` (DPO eq. 7) with the forget targets (IDK answers) as
  the chosen responses and the original answers as the rejected ones;
  log-probs are minus the summed sequence NLLs. Plus lam * NLL_r.
  """
  del unused
  if (ref_forget_nll_b is None or rejected_nll_b is None
      or ref_rejected_nll_b is None):
    raise ValueError("dpo needs rejected_nll_b, ref_forget_nll_b and "
                     "ref_rejected_nll_b (batch keys 'rejected_*', "
                     "'forget_ref_nll', 'rejected_ref_nll')")
  f, m = dpo_lib.dpo_loss(-forget_nll_b, -rejected_nll_b, -ref_forget_nll_b,
                          -ref_rejected_nll_b, beta=beta)
  r = _retain_term(retain_nll_b, retain_len_b, lam)
  return f + r, {"forget_term": f, "retain_term": r,
                 "forget_nll": batch_nll(forget_nll_b, forget_len_b),
                 "reward_margin": m["reward_margin"]}


# -- trainer losses -------------------------------------------------------------


def _cfg(config: Any, name: str, default):
  if config is None:
    return default
  try:
    value = config.get(name, default) if hasattr(config, "get") else getattr(
        config, name, default)
  except AttributeError:
    value = default
  return default if value is None else value


def model_sequence_nll(model, inputs_bt, targets_bt, mask_bt):
  """Runs `model` and returns per-sequence answer NLL and lengths `[B]`."""
  return sequence_nll(model(inputs_bt), targets_bt, mask_bt)


def make_trainer_loss(name: str):
  """A `fn(model, batch, *, rng, config)` trainer loss for objective `name`."""
  objective = get(name)

  def loss_fn(model, batch, *, rng=None, config=None):
    del rng
    f_nll, f_len = model_sequence_nll(model, batch["forget_inputs"],
                                      batch["forget_targets"],
                                      batch["forget_mask"])
    kwargs = {"lam": _cfg(config, "lam", DEFAULT_LAM)}
    if name in DEFAULT_BETA:
      kwargs["beta"] = _cfg(config, "beta", DEFAULT_BETA[name])
    if name == "simnpo":
      kwargs["gamma"] = _cfg(config, "gamma", DEFAULT_GAMMA)
    if name in ("npo", "dpo"):
      kwargs["ref_forget_nll_b"] = batch.get("forget_ref_nll")
    if name == "dpo":
      kwargs["rejected_nll_b"] = model_sequence_nll(
          model, batch["rejected_inputs"], batch["rejected_targets"],
          batch["rejected_mask"])[0]
      kwargs["ref_rejected_nll_b"] = batch.get("rejected_ref_nll")
    r_nll = r_len = None
    if name != "ga" and "retain_inputs" in batch:
      r_nll, r_len = model_sequence_nll(model, batch["retain_inputs"],
                                        batch["retain_targets"],
                                        batch["retain_mask"])
    return objective(f_nll, f_len, r_nll, r_len, **kwargs)

  loss_fn.__name__ = f"unlearn_{name}"
  return loss_fn


for _name in tuple(_REGISTRY):
  losses_lib.register(f"unlearn_{_name}")(make_trainer_loss(_name))
