"""SpecKV end to end (paper M): draft lookahead, "speckv" eviction, decode.

The policy itself ("speckv", `jaxlab.decoding.kv_policies`) runs inside the
sampler's prefill; this module drives the sampler around it (its own module
because the sampler imports the policies: `kv_policies` imports no sampler).
"""

import time
from typing import Any

import jax

from jaxlab.decoding import kv_policies
from jaxlab.decoding import sampler


def speckv_generate(target: Any, draft: Any,
                    prompts: list[list[int]], *, budget: int,
                    max_new_tokens: int, lookahead: int | None = None,
                    draft_tokens: list[list[int]] | None = None,
                    window: int = 32, kernel: int = 7, reduce: str = "max",
                    layer_reduce: str = "mean", timings: dict | None = None,
                    prefill_pad_multiple: int | None = None,
                    **generate_kwargs: Any):
  """SpecKV end to end (paper M, SpecKV steps 1-3) on the one sampler.

    1. the draft generates `lookahead` tokens greedily (None = the full
       answer length, `max_new_tokens`; the reference default), unless
       `draft_tokens` are given (the cascade reuses SpecPC's);
    2. the target prefills [prompt ‖ lookahead] and the "speckv" policy
       crops its cache to `budget` slots;
    3. the last prompt token is re-fed on that cache (positions continue
       from the kept ones, so it gets its original position) and decoding
       goes on as usual.

  Returns the second `sampler.generate` result (tokens of the answer).
  `prefill_pad_multiple` pads [prompt ‖ lookahead] to a multiple of it
  (default: the next power of two).
  `timings`, when a dict, gets `prefill_s` (draft + scoring prefill) and
  `decode_s`.
  """
  kv_policies.check_draft(target, draft)
  kv_policies._check_scoring_options(  # pylint: disable=protected-access
      budget=budget, window=window, kernel=kernel, reduce=reduce)
  t0 = time.perf_counter()
  if draft_tokens is None:
    n_look = max_new_tokens if lookahead is None else lookahead
    if n_look > 0:
      draft_tokens = sampler.generate(draft, prompts,
                                      max_new_tokens=n_look).tokens
    else:
      draft_tokens = [[] for _ in prompts]
  n_look = min(len(t) for t in draft_tokens)
  draft_tokens = [list(t[:n_look]) for t in draft_tokens]
  for i, p in enumerate(prompts):
    if len(p) < 2:
      raise ValueError(f"prompt {i} has {len(p)} tokens; SpecKV needs >= 2 "
                       "(the last one is re-fed)")
  first = sampler.generate(
      target, [list(p) + t for p, t in zip(prompts, draft_tokens)],
      max_new_tokens=1, cache_policy="speckv",
      cache_policy_options=dict(budget=budget, lookahead=n_look,
                                window=window, kernel=kernel, reduce=reduce,
                                layer_reduce=layer_reduce),
      return_cache=True, pad_multiple=prefill_pad_multiple)
  if timings is not None:
    jax.block_until_ready(first.cache)
    timings["prefill_s"] = time.perf_counter() - t0
  t1 = time.perf_counter()
  out = sampler.generate(target, [[p[-1]] for p in prompts],
                         cache=first.cache, max_new_tokens=max_new_tokens,
                         pad_multiple=1, **generate_kwargs)
  if timings is not None:
    timings["decode_s"] = time.perf_counter() - t1
  return out
