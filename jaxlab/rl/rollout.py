"""Group rollouts for GRPO-family RL: sample G responses per prompt, score.

    batch = rollout(policy, ref, prompts, group_size=8, max_new_tokens=16,
                    temperature=1.0, eos_id=2, key=key)
    batch.completions        # P * G token lists, a prompt's G contiguous
    batch.old_logp_bt        # teacher-forced log pi_old of each token
    batch.ref_logp_bt        # ... of the frozen reference (None if no ref)

Sampling uses the KV-cache sampler (`jaxlab.decoding.sampler.generate`).
The old-policy log-probs are recomputed teacher-forced with
`sampler.token_logprobs` rather than taken from the sampler, as veRL does:
the learner recomputes log pi_theta the same way, so the PPO ratio is
exactly 1 on the first optimisation step (no sampler-vs-trainer numerics gap).
Old and reference log-probs are those of the sampling distribution,
softmax(logits / temperature), the distribution the GRPO loss
(`jaxlab.objectives.grpo.grpo_policy_loss`) scores: at temperature != 1 a
temperature-1 old log-prob would make the first ratio exp(log pi_T -
log pi_1) != 1 and the KL compare two different temperatures.

The prefix hook: with `prefix_inputs` (one row per prompt, e.g. an image),
the policy is a prefix LM (`jaxlab.models.prefix_lm.PrefixLM`): each row is
repeated G times, the G samples are drawn by `policy.generate(inputs,
prompts, ...)` (the encoded inputs as the sampler's `prefix_embeds`), the
old / reference log-probs are those the `grpo` loss computes
(`jaxlab.objectives.grpo.policy_token_logprobs(..., prefix_inputs=)`), and
the batch carries the repeated inputs so the loss re-encodes them inside
the gradient.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.decoding import sampler


@dataclasses.dataclass
class RolloutBatch:
  """One rollout batch (host arrays), rows ordered prompt-major.

  Attributes:
    prompts: P prompts (token lists).
    completions: P * G generated token lists (response g of prompt p at row
      p * G + g).
    input_ids_bt / attention_mask_bt / completion_mask_bt: `[P*G, T]` packed
      prompt + completion (see `sampler.pack_sequences`).
    old_logp_bt: `[P*G, T]` log-probs of the rollout policy (0 off-mask).
    ref_logp_bt: `[P*G, T]` log-probs of the reference, or None.
    group_size: G.
    prefix_inputs: optional `[P*G, ...]` per-row inputs of a prefix-
      conditioned policy (e.g. images of an image-prefixed decoder); the
      `grpo` loss passes them as `model.forward(ids, attention_mask=attn,
      prefix_inputs=...)`, so the policy encodes them inside the gradient.
  """
  prompts: list[list[int]]
  completions: list[list[int]]
  input_ids_bt: np.ndarray
  attention_mask_bt: np.ndarray
  completion_mask_bt: np.ndarray
  old_logp_bt: np.ndarray
  ref_logp_bt: np.ndarray | None
  group_size: int
  prefix_inputs: np.ndarray | None = None

  @property
  def repeated_prompts(self) -> list[list[int]]:
    return [p for p in self.prompts for _ in range(self.group_size)]


@functools.partial(jax.jit, static_argnums=(0, 5))
def _logp_jit(graphdef, state, ids, attn, comp, temperature):
  model = nnx.merge(graphdef, state)
  return sampler.token_logprobs(model, ids, attn, loss_mask_bt=comp,
                                temperature=temperature)


@functools.partial(jax.jit, static_argnums=(0, 6))
def _prefix_logp_jit(graphdef, state, prefix_inputs, ids, attn, comp,
                     temperature):
  from jaxlab.objectives import grpo  # pylint: disable=g-import-not-at-top
  model = nnx.merge(graphdef, state)
  logp, _ = grpo.policy_token_logprobs(model, ids, attn, temperature,
                                       prefix_inputs=prefix_inputs)
  return logp * comp


def teacher_forced_logp(model, ids, attn, comp, *,
                        temperature: float = 1.0,
                        prefix_inputs=None) -> np.ndarray:
  """`[B, T]` log softmax(logits / temperature)[x_t], 0 off `comp`.

  With `prefix_inputs` (`[B, ...]`) the model is a prefix LM scored as the
  `grpo` loss scores it, so the first update's ratio is exactly 1.
  """
  graphdef, state = nnx.split(model)
  if prefix_inputs is not None:
    return np.asarray(_prefix_logp_jit(
        graphdef, state, jnp.asarray(prefix_inputs), jnp.asarray(ids),
        jnp.asarray(attn), jnp.asarray(comp, jnp.float32),
        float(temperature)))
  return np.asarray(_logp_jit(graphdef, state, jnp.asarray(ids),
                              jnp.asarray(attn), jnp.asarray(comp),
                              float(temperature)))


def rollout(policy, ref, prompts: Sequence[Sequence[int]], *,
            group_size: int, max_new_tokens: int, temperature: float = 1.0,
            top_p: float | None = None, eos_id: int | None = None,
            pad_id: int = 0, key: jax.Array,
            completion_length: int | None = None,
            stop_ids: Sequence[int] = (),
            prefix_inputs=None) -> RolloutBatch:
  """Samples `group_size` responses per prompt and their log-probs.

  Args:
    policy: the current policy (a `Decoder`).
    ref: the frozen reference model or None (no KL term).
    prompts: P prompts.
    group_size: G >= 2 (a group of one has no baseline).
    max_new_tokens / temperature / top_p / eos_id / pad_id: sampler settings
      (temperature 1.0 as in the SophiaVL-R1 yaml); the old and reference
      log-probs are at `temperature` too.
    key: PRNG key for sampling.
    stop_ids: further stop tokens besides `eos_id` (kept in the completion).
    completion_length: pad packed sequences to prompt + this many tokens so
      every batch has one shape (one compilation); default max_new_tokens.
      The prompt part is the longest prompt rounded up to a power of two
      (`sampler.bucket_length(n, minimum=1)`), so batches whose longest
      prompts differ (a real dataset's rows) share the log-prob and update
      compilations too; the extra columns are padding, masked out.
    prefix_inputs: optional `[P, ...]` per-prompt inputs of a prefix-LM
      policy (the prefix hook, see the module docstring); repeated G times
      into `RolloutBatch.prefix_inputs`.
  """
  if group_size < 2:
    raise ValueError(f"group_size={group_size} must be >= 2")
  if not prompts:
    raise ValueError("no prompts")
  rep = [list(p) for p in prompts for _ in range(group_size)]
  kw = dict(max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, eos_id=eos_id, pad_id=pad_id, key=key,
            stop_ids=tuple(stop_ids))
  if prefix_inputs is None:
    out = sampler.generate(policy, rep, **kw)
  else:
    prefix_inputs = np.asarray(prefix_inputs)
    if len(prefix_inputs) != len(prompts):
      raise ValueError(f"{len(prefix_inputs)} prefix_inputs rows for "
                       f"{len(prompts)} prompts; give one per prompt")
    prefix_inputs = np.repeat(prefix_inputs, group_size, axis=0)
    out = policy.generate(prefix_inputs, rep, **kw)
  length = (sampler.bucket_length(max(len(p) for p in rep), minimum=1)
            + (completion_length or max_new_tokens))
  ids, attn, comp = sampler.pack_sequences(rep, out.tokens, pad_id=pad_id,
                                           length=length)
  # At the sampling temperature: the loss scores softmax(logits / T).
  old = teacher_forced_logp(policy, ids, attn, comp, temperature=temperature,
                            prefix_inputs=prefix_inputs)
  ref_lp = (teacher_forced_logp(ref, ids, attn, comp, temperature=temperature,
                                prefix_inputs=prefix_inputs)
            if ref is not None else None)
  return RolloutBatch([list(p) for p in prompts], out.tokens, ids, attn, comp,
                      old, ref_lp, group_size, prefix_inputs=prefix_inputs)
