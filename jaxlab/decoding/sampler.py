"""Batched autoregressive generation with a KV cache, compiled once per bucket.

    result = generate(model, [[1, 5, 9], [1, 7]], max_new_tokens=32,
                      temperature=0.8, top_p=0.95, eos_id=2,
                      key=jax.random.key(0))
    result.tokens          # [[...ids, 2], [...ids]]  one list per prompt
    result.logprobs        # log-prob of each token under the sampling dist.
    result.model_logprobs  # log-softmax of the raw model logits at each token

How it runs:
  1. Prompts are left-padded to a bucketed length P (next power of two >= 16
     by default) and the new-token budget is bucketed the same way (N), so
     one compilation serves every prompt length <= P and every
     `max_new_tokens` <= N.
  2. `prefill` (one `jax.jit`): the padded prompts go through
     `model.forward(ids, attention_mask=..., cache=...)`; the decoder counts
     positions over the mask and stores padding slots with position -1, so
     they are never attended. The first new token is sampled from the last
     prompt position (a real token for every row, thanks to left padding).
     An image/prefix `prefix_embeds [B, P0, D]` goes first (through
     `forward(inputs_embeds=...)`), then the prompts. A `cache_policy`
     (`jaxlab.decoding.kv_policies`) then rewrites the cache, still inside
     the compiled prefill.
  3. `decode` (one `jax.jit` around a `jax.lax.while_loop`): one token per
     step through the cache; the loop exits as soon as every row has emitted
     a stop token or `max_new_tokens` is reached. A row that is done feeds
     its tokens as padding (slot position -1), so the final cache holds
     exactly the tokens fed to the model: the prompt and every generated
     token but the last.

Continuing from a cache: `generate(model, new_prompts, cache=result.cache)`
writes the new prompts after what the cache holds (positions continue per
row from the cache's largest position) and goes on; the cache grows when it
lacks room. With `step_offset` = the tokens generated so far, the sampling
keys are those one longer call would use (`fold_in(key, step_offset + i)`
for the i-th new token), so continuing equals one call, greedy or sampled.

Both functions follow the functional NNX pattern (`nnx.split` outside,
`nnx.merge` inside the jitted function) with the graphdef and the sampling
settings as static arguments, so `jax.jit`'s own cache keeps one executable
per (graphdef, shape bucket, settings); the KV cache is donated from prefill
to decode. Tree-mode modules (the NNX default) skip the Python `nnx.split`
and go to `jax.jit` as pytrees, their treedef playing the graphdef's role.

Sampling distribution (the order of transformers' logits warpers):
  raw logits z -> `logits_processor` -> z / temperature -> top-k -> top-p
  -> softmax. Top-k keeps the tokens whose logit is >= the k-th largest; top-p
  (nucleus, Holtzman et al. 2020, sec. 3.1) keeps the smallest prefix of the
  sorted distribution whose mass is >= p (always the top token). Ties at a
  threshold keep all tied tokens. temperature == 0 is greedy (argmax of the
  processed logits; top-k/top-p are then irrelevant).

`token_logprobs` computes teacher-forced per-token log-probs of given
sequences (the policy / old-policy / reference log-probs of GRPO-style
objectives), and `pack_sequences` builds its inputs from prompts and
completions.
"""

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.decoding import kv_policies
from jaxlab.nn import attention as attn_lib

# logits_processor(logits_bv, generated_bn, step) -> logits_bv. `generated_bn`
# holds the tokens generated so far (pad after `step`), e.g. for repetition
# penalties. It must be hashable (a module-level function or a
# functools.partial of one): it is part of the compilation key.
LogitsProcessor = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]

# Incremented each time a generation function is traced (compiled); tests use
# it to check that repeated calls within a bucket do not recompile.
TRACE_COUNTS = {"prefill": 0, "decode": 0}


# ---------------------------------------------------------------------------
# Sampling from logits
# ---------------------------------------------------------------------------


def _top_p_keep_sorted(sorted_logits_bk: jax.Array,
                       top_p: jax.Array) -> jax.Array:
  """Keep-mask over logits sorted descending: smallest prefix with mass >= p.

  Token i is kept iff the mass of the tokens ranked before it is < p, so the
  top token is always kept and the kept set is the shortest prefix whose
  mass reaches p.
  """
  probs = jax.nn.softmax(sorted_logits_bk, axis=-1)
  mass_before = jnp.cumsum(probs, axis=-1) - probs
  return (mass_before < top_p) | (top_p >= 1.0)


def truncate_logits(logits_bv: jax.Array, *, temperature: float | jax.Array = 1.0,
                    top_k: int | None = None,
                    top_p: float | jax.Array | None = None) -> jax.Array:
  """Logits of the sampling distribution: temperature, then top-k, top-p.

  Args:
    logits_bv: float logits `[..., V]`.
    temperature: > 0 (use `sample_logits(temperature=0)` for greedy).
    top_k: keep the tokens whose logit is >= the k-th largest (None/0 = all).
    top_p: nucleus mass in (0, 1]; None = no nucleus truncation.

  Returns:
    float32 `[..., V]` logits `z / temperature` with excluded tokens at -inf;
    `jax.nn.log_softmax` of it is the sampling distribution's log-probs.
  """
  z = logits_bv.astype(jnp.float32) / jnp.asarray(temperature, jnp.float32)
  vocab = z.shape[-1]
  neg_inf = jnp.finfo(jnp.float32).min
  if top_k is not None and 0 < top_k < vocab:
    top_vals, _ = jax.lax.top_k(z, top_k)  # sorted descending
    if top_p is not None:
      # Nucleus over the renormalised top-k set (as transformers' TopK then
      # TopP warpers): only the k sorted values are needed, not a full sort.
      keep = _top_p_keep_sorted(top_vals, jnp.asarray(top_p, jnp.float32))
      n_keep = jnp.sum(keep, axis=-1, keepdims=True)
      threshold = jnp.take_along_axis(top_vals, n_keep - 1, axis=-1)
    else:
      threshold = top_vals[..., -1:]
    return jnp.where(z >= threshold, z, neg_inf)
  if top_p is not None:
    sorted_z = -jnp.sort(-z, axis=-1)
    keep = _top_p_keep_sorted(sorted_z, jnp.asarray(top_p, jnp.float32))
    n_keep = jnp.sum(keep, axis=-1, keepdims=True)
    threshold = jnp.take_along_axis(sorted_z, n_keep - 1, axis=-1)
    return jnp.where(z >= threshold, z, neg_inf)
  return z


def sampling_logprobs(logits_bv: jax.Array, *,
                      temperature: float | jax.Array = 1.0,
                      top_k: int | None = None,
                      top_p: float | jax.Array | None = None) -> jax.Array:
  """Log-probs `[..., V]` of the truncated, renormalised sampling distribution.

  p(v) = softmax(truncate(z / T))_v: zero (log-prob -inf-like, ~-3e38 before
  normalisation) outside the top-k / top-p set.
  """
  return jax.nn.log_softmax(
      truncate_logits(logits_bv, temperature=temperature, top_k=top_k,
                      top_p=top_p), axis=-1)


def sample_logits(logits_bv: jax.Array, key: jax.Array | None, *,
                  temperature: float | jax.Array = 1.0,
                  top_k: int | None = None,
                  top_p: float | jax.Array | None = None) -> jax.Array:
  """Samples token ids `[...]` from logits `[..., V]`.

  temperature == 0 (a Python number) gives argmax; otherwise a categorical
  draw from `softmax(truncate_logits(...))` with `key`.
  """
  if isinstance(temperature, (int, float)) and temperature == 0:
    return jnp.argmax(logits_bv, axis=-1).astype(jnp.int32)
  if key is None:
    raise ValueError("sampling with temperature > 0 needs a PRNG key")
  z = truncate_logits(logits_bv, temperature=temperature, top_k=top_k,
                      top_p=top_p)
  return jax.random.categorical(key, z, axis=-1).astype(jnp.int32)


def _validate_sampling(temperature, top_k, top_p):
  if temperature is None or temperature < 0:
    raise ValueError(f"temperature must be >= 0, got {temperature}")
  if top_k is not None and (not isinstance(top_k, (int, np.integer))
                            or top_k < 0):
    raise ValueError(f"top_k must be a non-negative int or None, got {top_k}")
  if top_p is not None and not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


# ---------------------------------------------------------------------------
# Teacher-forced log-probs (policy / reference log-probs for RL objectives)
# ---------------------------------------------------------------------------


def token_logprobs(model, input_ids_bt: jax.Array,
                   attention_mask_bt: jax.Array | None = None,
                   *, loss_mask_bt: jax.Array | None = None,
                   temperature: float = 1.0) -> jax.Array:
  """log p(x_t | x_<t) for every position of given sequences, `[B, T]`.

  logprobs[b, t] = log_softmax(z[b, t-1] / temperature)[x[b, t]] for t >= 1
  and 0 at t = 0 and wherever `loss_mask_bt` (default: `attention_mask_bt`)
  is False. Pure JAX: call it inside `jax.jit` / `jax.grad`. With left-padded
  prompts the decoder counts positions over `attention_mask_bt`, so padding
  shifts nothing. `temperature` should match the sampler's when the result
  is compared with `GenerateResult.logprobs` of untruncated sampling.

  Args:
    model: a `Decoder` (anything with `forward(ids, attention_mask=)` whose
      output has `.logits [B, T, V]`).
    input_ids_bt: int `[B, T]` prompt + completion ids (see `pack_sequences`).
    attention_mask_bt: `[B, T]` True for real tokens.
    loss_mask_bt: `[B, T]` True where a log-prob is wanted (completions).
    temperature: divides the logits before the softmax.
  """
  logits = model.forward(input_ids_bt, attention_mask=attention_mask_bt).logits
  logp_btv = jax.nn.log_softmax(
      logits[:, :-1].astype(jnp.float32) / temperature, axis=-1)
  target = input_ids_bt[:, 1:]
  lp = jnp.take_along_axis(logp_btv, target[..., None], axis=-1)[..., 0]
  lp = jnp.pad(lp, ((0, 0), (1, 0)))
  mask = loss_mask_bt if loss_mask_bt is not None else attention_mask_bt
  if mask is not None:
    lp = jnp.where(mask.astype(bool), lp, 0.0)
  return lp


def pack_sequences(prompts: Sequence[Sequence[int]],
                   completions: Sequence[Sequence[int]], *, pad_id: int = 0,
                   length: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Left-padded prompts + right-padded completions, for `token_logprobs`.

  Returns:
    (input_ids `[B, T]` int32, attention_mask `[B, T]` bool,
    completion_mask `[B, T]` bool), where row b is
    `[pad.. prompt_b completion_b pad..]` with all prompts ending at the same
    column, T = max prompt length + max completion length (or `length`).
  """
  if len(prompts) != len(completions):
    raise ValueError(f"{len(prompts)} prompts but {len(completions)} "
                     "completions")
  p_len = max(len(p) for p in prompts)
  c_len = max((len(c) for c in completions), default=0)
  total = p_len + c_len if length is None else length
  if total < p_len + c_len:
    raise ValueError(f"length={length} < longest prompt + completion "
                     f"({p_len + c_len})")
  b = len(prompts)
  ids = np.full((b, total), pad_id, np.int32)
  attn = np.zeros((b, total), bool)
  comp = np.zeros((b, total), bool)
  for i, (p, c) in enumerate(zip(prompts, completions)):
    ids[i, p_len - len(p):p_len] = p
    ids[i, p_len:p_len + len(c)] = c
    attn[i, p_len - len(p):p_len + len(c)] = True
    comp[i, p_len:p_len + len(c)] = True
  return ids, attn, comp


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Settings:
  """Static (compile-time) part of the sampling configuration."""
  greedy: bool
  top_k: int | None
  use_top_p: bool
  logits_processor: LogitsProcessor | None


@dataclasses.dataclass
class GenerateResult:
  """Output of `generate` (host NumPy / Python lists).

  Attributes:
    tokens: one list of generated ids per prompt; a row ends right after its
      first stop token (`eos_id` or any of `stop_ids`), which is included, or
      after `max_new_tokens` tokens.
    logprobs: per generated token, its log-prob under the distribution it
      was actually drawn from: log_softmax(truncate(processor(z) / T)) with
      top-k/top-p truncation and renormalisation; 0.0 for greedy decoding
      (a point mass).
    model_logprobs: per generated token, log_softmax(z) of the raw model
      logits z (no processor, temperature or truncation), i.e. log p_theta.
    done: `[B]` bool, True where the row stopped on a stop token.
    lengths: `[B]` number of generated tokens per row.
    prompt_lengths: `[B]` prompt lengths.
    cache: the final `KVCache` when `return_cache=True`: every input fed to
      the model (prefix, prompt, all generated tokens but the last; padding
      and done rows' feeds are empty slots, position -1); pass it back as
      `generate(..., cache=)` to continue.
  """
  tokens: list[list[int]]
  logprobs: list[list[float]]
  model_logprobs: list[list[float]]
  done: np.ndarray
  lengths: np.ndarray
  prompt_lengths: np.ndarray
  cache: Any = None


def bucket_length(n: int, multiple: int | None = None,
                  minimum: int = 16) -> int:
  """Padded length for `n`: next power of two >= minimum, or a multiple."""
  if multiple:
    return max(multiple, -(-n // multiple) * multiple)
  size = minimum
  while size < n:
    size *= 2
  return size


def _sample_step(settings: _Settings, logits_bv, generated_bn, step, key,
                 temperature, top_p, step_offset=0):
  """(token `[B]`, sampling log-prob `[B]`, model log-prob `[B]`).

  The draw uses `fold_in(key, step_offset + step)`.
  """
  model_lp_bv = jax.nn.log_softmax(logits_bv.astype(jnp.float32), axis=-1)
  z = logits_bv
  if settings.logits_processor is not None:
    z = settings.logits_processor(z, generated_bn, step)
  if settings.greedy:
    token = jnp.argmax(z, axis=-1).astype(jnp.int32)
    lp = jnp.zeros(token.shape, jnp.float32)
  else:
    z = truncate_logits(z, temperature=temperature, top_k=settings.top_k,
                        top_p=top_p if settings.use_top_p else None)
    token = jax.random.categorical(
        jax.random.fold_in(key, step + step_offset), z,
        axis=-1).astype(jnp.int32)
    lp = jnp.take_along_axis(jax.nn.log_softmax(z, axis=-1), token[:, None],
                             axis=-1)[:, 0]
  model_lp = jnp.take_along_axis(model_lp_bv, token[:, None], axis=-1)[:, 0]
  return token, lp, model_lp


def _model_tree(model) -> tuple[Any, Any]:
  """(static graphdef or None, pytree) to pass a model through `jax.jit`.

  NNX modules are pytrees by default (tree mode), and handing the module
  itself to `jax.jit` costs one C++ flatten per call; `nnx.split` walks the
  Python object graph instead (measured ~12 ms per call for an 8-layer
  decoder, more than a whole 1M-parameter prefill). Modules built with
  `pytree=False` fall back to the functional `nnx.split`/`nnx.merge` form.
  Either way the compiled executables are keyed by the model's structure
  (treedef or graphdef), the shapes and the static sampling settings.
  """
  if getattr(model, "_pytree__is_pytree", False):
    return None, model
  return nnx.split(model)


def _merge(graphdef, tree):
  return tree if graphdef is None else nnx.merge(graphdef, tree)


@dataclasses.dataclass(frozen=True)
class _Policy:
  """Static cache policy: a registered name or a hashable callable."""
  policy: Any
  options: tuple[tuple[str, Any], ...] = ()

  def __call__(self, cache, *, model, prefill):
    fn = (kv_policies.get(self.policy) if isinstance(self.policy, str)
          else self.policy)
    return fn(cache, model=model, prefill=prefill, **dict(self.options))


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _prefill(graphdef, settings: _Settings, n: int, policy: _Policy | None,
             model_tree, ids_bp, mask_bp, key, temperature, top_p, stop_ids,
             step_offset, cache=None, prefix_bpd=None, prefix_mask_bp=None,
             embeds_bpd=None, forward_kwargs=None):
  """Runs the prefix and prompts through the model, applies the cache
  policy and samples the first new token.

  `embeds_bpd` (a multimodal prompt's embeddings) replaces
  `model.embed(ids_bp)`; `forward_kwargs` go to `model.forward`.

  Without a `cache`, one of `P0 + P + n` slots is created here, inside the
  compiled function, so no per-layer buffers are allocated eagerly.

  Returns the decode carry: (cache, tokens_bn, logprobs_bn, model_lp_bn,
  done_b, lengths_b) with column 0 filled; N = n is the bucketed budget.
  """
  TRACE_COUNTS["prefill"] += 1
  model = _merge(graphdef, model_tree)
  b, p = ids_bp.shape
  h = model.embed(ids_bp) if embeds_bpd is None else embeds_bpd
  if prefix_bpd is not None:
    h = jnp.concatenate([prefix_bpd.astype(h.dtype), h], axis=1)
    mask_bp = jnp.concatenate([prefix_mask_bp, mask_bp], axis=1)
  if cache is None:
    cache = model.init_cache(b, h.shape[1] + n)
  positions = model.default_positions(mask_bp, cache)
  # The model counts these same default positions itself when given none,
  # and then knows they are the defaults: a long prefill through the
  # chunked kernel skips each query block's later key blocks
  # (`attention.PositionMask.slot0`, half the attention FLOPs).
  out = model.forward(inputs_embeds=h, attention_mask=mask_bp, cache=cache,
                      output_hidden_states=True, **(forward_kwargs or {}))
  new_cache = out.cache
  if policy is not None:
    new_cache = policy(new_cache, model=model, prefill=kv_policies.PrefillInfo(
        hidden_states=out.hidden_states, positions=positions,
        attention_mask=mask_bp, start=cache.index))
  # Only the last position's logits are needed; XLA drops the unused
  # [B, P, V] logits of `out.logits` (dead code), which dominate prefill
  # cost for large vocabularies.
  last_logits_bv = model.unembed(out.hidden_states[-1][:, -1:])[:, 0]
  tokens = jnp.zeros((b, n), jnp.int32)
  token, lp, model_lp = _sample_step(settings, last_logits_bv, tokens,
                                     jnp.int32(0), key, temperature, top_p,
                                     step_offset)
  tokens = tokens.at[:, 0].set(token)
  logprobs = jnp.zeros((b, n), jnp.float32).at[:, 0].set(lp)
  model_lps = jnp.zeros((b, n), jnp.float32).at[:, 0].set(model_lp)
  done = jnp.any(token[:, None] == stop_ids[None, :], axis=-1)
  lengths = jnp.ones((b,), jnp.int32)
  return new_cache, tokens, logprobs, model_lps, done, lengths


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(3,))
def _decode(graphdef, settings: _Settings, model_tree, carry, key, temperature,
            top_p, stop_ids, max_new_tokens, pad_id, step_offset,
            forward_kwargs=None):
  """Decodes tokens 1..max_new_tokens-1 in one `while_loop`
  (`forward_kwargs` go to every `model.forward`).

  Rows that are done keep being fed (as padding: their cache slots stay
  empty, their `pad_id` outputs are masked out) so the batch stays
  rectangular; the loop stops once all rows are done.
  """
  TRACE_COUNTS["decode"] += 1
  model = _merge(graphdef, model_tree)

  def cond(loop):
    step, (_, _, _, _, done, _) = loop
    return (step < max_new_tokens) & ~jnp.all(done)

  def body(loop):
    step, (cache, tokens, logprobs, model_lps, done, lengths) = loop
    prev = jax.lax.dynamic_slice_in_dim(tokens, step - 1, 1, axis=1)
    out = model.forward(prev, cache=cache, attention_mask=~done[:, None],
                        **(forward_kwargs or {}))
    token, lp, model_lp = _sample_step(settings, out.logits[:, -1], tokens,
                                       step, key, temperature, top_p,
                                       step_offset)
    token = jnp.where(done, pad_id, token)
    lp = jnp.where(done, 0.0, lp)
    model_lp = jnp.where(done, 0.0, model_lp)
    tokens = jax.lax.dynamic_update_slice_in_dim(tokens, token[:, None], step,
                                                 axis=1)
    logprobs = jax.lax.dynamic_update_slice_in_dim(logprobs, lp[:, None],
                                                   step, axis=1)
    model_lps = jax.lax.dynamic_update_slice_in_dim(
        model_lps, model_lp[:, None], step, axis=1)
    lengths = lengths + (~done).astype(jnp.int32)
    done = done | jnp.any(token[:, None] == stop_ids[None, :], axis=-1)
    return step + 1, (out.cache, tokens, logprobs, model_lps, done, lengths)

  _, carry = jax.lax.while_loop(cond, body, (jnp.int32(1), carry))
  return carry


@functools.cache
def _default_key() -> jax.Array:
  # Unused by greedy decoding, but the compiled functions take a key.
  return jax.random.key(0)


def left_pad(prompts: Sequence[Sequence[int]], length: int, pad_id: int = 0
             ) -> tuple[np.ndarray, np.ndarray]:
  """(ids `[B, length]` int32, mask `[B, length]` bool), prompts right-aligned."""
  ids = np.full((len(prompts), length), pad_id, np.int32)
  mask = np.zeros((len(prompts), length), bool)
  for i, p in enumerate(prompts):
    if len(p):
      ids[i, length - len(p):] = p
      mask[i, length - len(p):] = True
  return ids, mask


def generate(model, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
             temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, eos_id: int | None = None,
             key: jax.Array | None = None,
             stop_ids: Sequence[int] = (),
             pad_id: int = 0,
             pad_multiple: int | None = None,
             new_tokens_multiple: int | None = None,
             logits_processor: LogitsProcessor | None = None,
             return_cache: bool = False,
             timings: dict[str, float] | None = None,
             cache_policy: str | kv_policies.CachePolicy | None = None,
             cache_policy_options: dict[str, Any] | None = None,
             cache: attn_lib.KVCache | None = None,
             prefix_embeds: jax.Array | np.ndarray | None = None,
             prefix_mask: jax.Array | np.ndarray | None = None,
             step_offset: int = 0,
             multimodal: dict[str, Any] | None = None) -> GenerateResult:
  """Generates continuations of a batch of token-id prompts.

  Args:
    model: a `jaxlab.models.decoder.Decoder` (needs `forward(...,
      attention_mask=, cache=)` and `init_cache(batch, max_len)`).
    prompts: B non-empty lists of token ids (different lengths allowed).
    max_new_tokens: tokens to generate per row at most (>= 1).
    temperature: 0 = greedy; > 0 divides the logits before sampling.
    top_k: keep only the k most likely tokens (None/0 = off).
    top_p: nucleus mass in (0, 1] (None = off).
    eos_id: a stop token (kept in the output); rows stop independently.
    key: PRNG key, required when temperature > 0; the draw of the i-th new
      token (i = 0, 1, ...) uses `fold_in(key, step_offset + i)` for the whole
      batch, so the same key and the same batch give the same tokens (a
      row's draws depend on its batch).
    stop_ids: more stop tokens.
    pad_id: id fed for padding and for rows that are done.
    pad_multiple: pad prompt length to a multiple of this instead of the next
      power of two >= 16.
    new_tokens_multiple: likewise for the new-token buffer.
    logits_processor: optional hashable `fn(logits_bv, generated_bn, step)`
      applied to the raw logits before temperature/top-k/top-p (and argmax).
    return_cache: also return the final KV cache.
    timings: if a dict, filled with wall seconds `prefill_s` (call start to
      the first token on device, compile included on a first call) and
      `decode_s` (the rest, results on the host); adds one device sync.
    cache_policy: a name registered in `jaxlab.decoding.kv_policies` (or a
      hashable callable with the policy signature documented there), applied
      to the cache after prefill, before the first decode step; None = keep
      the cache as is (same tokens as "full").
    cache_policy_options: keyword options of the policy (hashable values).
    cache: continue from this cache (`GenerateResult.cache` of an earlier
      call with the same batch): the prompts are written after the tokens it
      holds, with positions continuing per row; it is grown (new empty
      slots) when it lacks room for the prompts and `max_new_tokens`.
    prefix_embeds: float `[B, P0, D]` inputs fed before the prompt tokens
      (e.g. image features projected to the model width), through
      `forward(inputs_embeds=...)`.
    prefix_mask: optional `[B, P0]` validity of `prefix_embeds` (default:
      all real).
    step_offset: added to the step in the sampling key schedule (see `key`);
      to continue a sampled generation with the draws of one longer call,
      pass the number of tokens generated before.
    multimodal: vision inputs of the prompts for a model with
      `multimodal_inputs` (e.g. `jaxlab.models.qwen2_vl.Qwen2VL`:
      `pixel_values`, `image_grid_thw`, `pixel_values_videos`,
      `video_grid_thw`, `second_per_grid_ts`, in transformers' layouts,
      the items in prompt order over the batch; the prompts hold the
      expanded placeholder tokens). The prefix (vision tower, placeholder
      scatter, M-RoPE positions of the left-padded prompts) is computed once
      by `model.multimodal_inputs(ids, mask, **multimodal)`, which returns
      (inputs_embeds, prefill forward keywords, decode forward keywords);
      decoding continues through the KV cache with the decode keywords
      (Qwen2-VL: the rope deltas). Not combinable with `prefix_embeds` or
      `cache`.

  Returns:
    `GenerateResult`; see its docstring for what each field holds.
  """
  start = time.perf_counter()
  _validate_sampling(temperature, top_k, top_p)
  if not prompts:
    raise ValueError("prompts is empty; give at least one token-id list")
  for i, p in enumerate(prompts):
    if len(p) == 0:
      raise ValueError(f"prompt {i} is empty; every prompt needs >= 1 token")
  if max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
  greedy = temperature == 0
  if not greedy and key is None:
    raise ValueError("temperature > 0 needs a PRNG key (key=...)")
  if key is None:
    key = _default_key()

  prompt_lengths = np.array([len(p) for p in prompts], np.int32)
  p_len = bucket_length(int(prompt_lengths.max()), pad_multiple)
  n_new = bucket_length(max_new_tokens, new_tokens_multiple)
  ids, mask = left_pad(prompts, p_len, pad_id)
  batch = len(prompts)

  prefix_len = 0
  if prefix_embeds is not None:
    dim = model.cfg.dim
    if (prefix_embeds.ndim != 3 or prefix_embeds.shape[0] != batch
        or prefix_embeds.shape[2] != dim):
      raise ValueError(f"prefix_embeds must be [B={batch}, P0, D={dim}], "
                       f"got shape {tuple(prefix_embeds.shape)}")
    prefix_len = prefix_embeds.shape[1]
    if prefix_mask is None:
      prefix_mask = np.ones((batch, prefix_len), bool)
    elif tuple(prefix_mask.shape) != (batch, prefix_len):
      raise ValueError(f"prefix_mask must be [{batch}, {prefix_len}], got "
                       f"shape {tuple(prefix_mask.shape)}")
    prefix_mask = np.asarray(prefix_mask, bool)
  elif prefix_mask is not None:
    raise ValueError("prefix_mask given without prefix_embeds")
  if cache is not None:
    if cache.batch_size != batch:
      raise ValueError(f"cache holds {cache.batch_size} rows but "
                       f"{batch} prompts were given")
    # Room for the prefix, the prompts and every decode write.
    needed = int(cache.index) + prefix_len + p_len + n_new
    if needed > cache.max_len:
      cache = cache.grow(bucket_length(needed))
  policy = None
  if cache_policy is not None:
    if isinstance(cache_policy, str):
      kv_policies.get(cache_policy)  # unknown name: the registry's error
    policy = _Policy(cache_policy,
                     tuple(sorted((cache_policy_options or {}).items())))
  elif cache_policy_options:
    raise ValueError("cache_policy_options given without a cache_policy")

  stops = sorted({*stop_ids, *(() if eos_id is None else (eos_id,))})
  # A fixed-size stop array (-1 never matches) keeps the shape static.
  stop_arr = np.full((max(4, len(stops)),), -1, np.int32)
  stop_arr[:len(stops)] = stops

  settings = _Settings(
      greedy=greedy, top_k=int(top_k) if top_k and not greedy else None,
      use_top_p=top_p is not None and top_p < 1.0 and not greedy,
      logits_processor=logits_processor)
  graphdef, model_tree = _model_tree(model)
  # NumPy scalars/arrays go through jit's fast argument path (no eager ops).
  temp = np.float32(temperature if not greedy else 1.0)
  top_p_arr = np.float32(1.0 if top_p is None else top_p)
  offset_arr = np.int32(step_offset)
  embeds, prefill_kw, decode_kw = None, None, None
  if multimodal is not None:
    if not hasattr(model, "multimodal_inputs"):
      raise ValueError(f"multimodal inputs given, but {type(model).__name__}"
                       " has no multimodal_inputs method")
    if prefix_embeds is not None or cache is not None:
      raise ValueError("multimodal is not combinable with prefix_embeds or "
                       "cache")
    embeds, prefill_kw, decode_kw = model.multimodal_inputs(
        ids, mask, **multimodal)
  carry = _prefill(graphdef, settings, n_new, policy, model_tree, ids, mask,
                   key, temp, top_p_arr, stop_arr, offset_arr, cache,
                   prefix_embeds, prefix_mask, embeds, prefill_kw)
  if timings is not None:
    jax.block_until_ready(carry)
    timings["prefill_s"] = time.perf_counter() - start
  if max_new_tokens > 1:
    carry = _decode(graphdef, settings, model_tree, carry, key, temp,
                    top_p_arr, stop_arr, np.int32(max_new_tokens),
                    np.int32(pad_id), offset_arr, decode_kw)
  cache, tokens, logprobs, model_lps, done, lengths = carry
  tokens, logprobs, model_lps, done, lengths, index = jax.device_get(
      (tokens, logprobs, model_lps, done, lengths, cache.index))
  if index > cache.max_len:
    raise ValueError(
        f"KV cache overflow during generation: {int(index)} slots were "
        f"written but the capacity is {cache.max_len}"
        + ("; the cache policy must leave room for max_new_tokens"
           if cache_policy is not None else ""))
  if timings is not None:
    timings["decode_s"] = time.perf_counter() - start - timings["prefill_s"]
  return GenerateResult(
      tokens=[tokens[i, :lengths[i]].tolist() for i in range(batch)],
      logprobs=[logprobs[i, :lengths[i]].tolist() for i in range(batch)],
      model_logprobs=[model_lps[i, :lengths[i]].tolist()
                      for i in range(batch)],
      done=np.asarray(done), lengths=np.asarray(lengths),
      prompt_lengths=prompt_lengths,
      cache=cache if return_cache else None)
