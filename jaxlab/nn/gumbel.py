"""Gumbel-softmax relaxation, straight-through estimator, temperature schedules.

    tau = gumbel.temperature(step, schedule="exponential", tau0=1.0,
                             tau_min=0.1, anneal_steps=600)
    y = gumbel.gumbel_softmax(logits, key, tau, hard=True)   # straight-through

Paper I (emergent discrete controller modules), spec item 3:
  y = softmax((pi + g) / tau),   g_k = -log(-log u_k),  u_k ~ U(0, 1)
  tau(t) = max(tau_min, tau0 * exp(-gamma t))
with gamma chosen so tau reaches tau_min at step `anneal_steps` [inferred:
"60 % of training"]. The straight-through variant returns the hard one-hot
in the forward pass and the soft sample's gradient in the backward pass
(Jang et al., 2017; Bengio et al., 2013).

Temperature schedules are a registry, so a config picks one by name; the
soft-modules ablation (B6) is `schedule="constant"` with `tau0=1`.
"""

from __future__ import annotations

from collections.abc import Callable
import math

import jax
import jax.numpy as jnp

from jaxlab import registry

ScheduleFn = Callable[..., jax.Array]
SCHEDULES: registry.Registry[ScheduleFn] = registry.Registry(
    "temperature schedule")
register_schedule = SCHEDULES.register


def sample_gumbel(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
  """Standard Gumbel noise g = -log(-log u), u ~ U(tiny, 1) (spec I.3)."""
  u = jax.random.uniform(key, shape, dtype, minval=jnp.finfo(dtype).tiny,
                         maxval=1.0)
  return -jnp.log(-jnp.log(u))


def one_hot_argmax(logits: jax.Array) -> jax.Array:
  """The hard one-hot of the largest entry along the last axis."""
  return jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1],
                        dtype=logits.dtype)


def straight_through(soft: jax.Array) -> jax.Array:
  """Forward: one-hot(argmax soft); backward: identity into `soft`."""
  hard = one_hot_argmax(soft)
  return hard + soft - jax.lax.stop_gradient(soft)


def perturbed_logits(logits: jax.Array, key: jax.Array | None,
                     tau) -> jax.Array:
  """(logits + g) / tau in float32, the logits of the relaxed sample y.

  `gumbel_softmax` is softmax of this; its log_softmax is log y computed
  stably (a cross-entropy of y at small tau). `key=None` adds no noise.
  """
  z = logits.astype(jnp.float32)
  if key is not None:
    z = z + sample_gumbel(key, z.shape, z.dtype)
  return z / jnp.asarray(tau, jnp.float32)


def gumbel_softmax(logits: jax.Array, key: jax.Array | None, tau,
                   *, hard: bool = False) -> jax.Array:
  """y = softmax((logits + g) / tau) over the last axis (spec I.3).

  Args:
    logits: unnormalised log-probabilities pi `[..., K]`.
    key: PRNG key for the Gumbel noise; None draws no noise (the
      deterministic relaxation softmax(pi / tau)).
    tau: temperature (> 0), a float or a scalar array (e.g. a schedule's
      value at a traced step).
    hard: straight-through: the forward value is the one-hot argmax of the
      sample, the gradient that of the soft sample.

  Returns:
    `[..., K]` float, rows summing to 1.
  """
  y = jax.nn.softmax(perturbed_logits(logits, key, tau), axis=-1)
  return straight_through(y) if hard else y


def exponential_rate(tau0: float, tau_min: float, anneal_steps: int) -> float:
  """gamma with tau0 * exp(-gamma * anneal_steps) = tau_min."""
  if tau0 <= 0 or tau_min <= 0:
    raise ValueError(f"temperatures must be > 0, got tau0={tau0}, "
                     f"tau_min={tau_min}")
  if anneal_steps <= 0 or tau_min >= tau0:
    return 0.0
  return math.log(tau0 / tau_min) / float(anneal_steps)


@register_schedule("exponential")
def exponential_schedule(step, *, tau0: float = 1.0, tau_min: float = 0.1,
                         anneal_steps: int = 1000) -> jax.Array:
  """tau(t) = max(tau_min, tau0 exp(-gamma t)), tau(anneal_steps) = tau_min."""
  gamma = exponential_rate(tau0, tau_min, anneal_steps)
  t = jnp.asarray(step, jnp.float32)
  return jnp.maximum(tau_min, tau0 * jnp.exp(-gamma * t))


@register_schedule("constant")
def constant_schedule(step, *, tau0: float = 1.0, tau_min: float = 0.1,
                      anneal_steps: int = 1000) -> jax.Array:
  """tau(t) = tau0 (the soft-modules ablation B6 uses tau0 = 1)."""
  del tau_min, anneal_steps
  return jnp.full(jnp.shape(step), tau0, jnp.float32)


@register_schedule("linear")
def linear_schedule(step, *, tau0: float = 1.0, tau_min: float = 0.1,
                    anneal_steps: int = 1000) -> jax.Array:
  """tau falls linearly from tau0 to tau_min over anneal_steps, then stays."""
  frac = jnp.clip(jnp.asarray(step, jnp.float32) / max(anneal_steps, 1),
                  0.0, 1.0)
  return tau0 + (tau_min - tau0) * frac


def temperature(step, *, schedule: str = "exponential", tau0: float = 1.0,
                tau_min: float = 0.1, anneal_steps: int = 1000) -> jax.Array:
  """The named schedule's temperature at `step` (int or traced int array)."""
  return SCHEDULES.get(schedule)(step, tau0=tau0, tau_min=tau_min,
                                 anneal_steps=anneal_steps)
