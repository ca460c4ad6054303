"""Masked-diffusion decoding sweep: accuracy, latency, NFE, FLOPs per variant.

Decodes held-out arithmetic-chain prompts with `jaxlab.decoding.diffusion
.generate` under several decoding variants (paper L, DPad; used by
`jaxlab.experiments.dpad` and its benchmark) and measures, per (gen_len,
variant), exact match, latency (compilation excluded), NFE, tokens
processed, model FLOPs and agreement with vanilla decoding.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from jaxlab import parallel
from jaxlab.data.synthetic import arith_chains as ac
from jaxlab.decoding import diffusion


def decode_mesh(config, batch: int):
  """The data mesh decoding runs on: `config.mesh` (as the trainer) when
  its batch shards divide `batch`, else a data axis over the largest number
  of devices that does."""
  shape = parallel.mesh_shape(config.mesh)
  if shape[2] == 1 and batch % (shape[0] * shape[1]) == 0:
    return parallel.make_mesh(config.mesh)
  n = math.gcd(jax.device_count(), int(batch))
  return parallel.make_mesh({"data": n, "fsdp": 1, "tensor": 1},
                            devices=jax.devices()[:n])


def decode_all(model, gen_lens, variants, *, variant_kwargs, prompts, chains,
               batch: int, repeats: int = 1, seed: int = 0, mesh=None
               ) -> dict[str, dict[str, dict[str, float]]]:
  """{gen_len: {variant: metrics}} over the prompts (batches of `batch`,
  sharded over `mesh`'s batch axes when given); `variant_kwargs(name)` is
  the `diffusion.generate` keywords of a variant. Exact match is against the
  chains' answers (`arith_chains.exact_match`); "agree_vanilla" compares
  with the "vanilla" variant's tokens, "speedup" its latency.

  Latency is decode seconds per prompt batch (compilation excluded, the
  median over `repeats` timed passes); the other metrics are sums / means
  over all prompts.
  """
  out: dict[str, dict[str, dict[str, float]]] = {}
  for g in gen_lens:
    out[str(g)] = {}
    vanilla_tokens = None
    for name in variants:
      kw = variant_kwargs(name)
      walls, toks = [], []
      nfe = tokens = flops = compile_s = 0.0
      for r in range(max(int(repeats), 1)):
        wall, parts = 0.0, []
        for i in range(0, len(prompts), batch):
          res = diffusion.generate(model, prompts[i:i + batch], gen_len=g,
                                   key=jax.random.key(seed), mesh=mesh,
                                   **kw)
          wall += res.wall_s
          parts.append(res.tokens)
          compile_s += res.compile_s
          if r == 0:
            nfe += res.nfe
            tokens += res.tokens_processed
            flops += res.flops
        walls.append(wall)
        toks = np.concatenate(parts)
      n_batches = -(-len(prompts) // batch)
      em = ac.exact_match(toks, chains)
      if name == "vanilla":
        vanilla_tokens = toks
      agree = (float(np.mean(np.all(toks == vanilla_tokens, axis=1)))
               if vanilla_tokens is not None else float("nan"))
      out[str(g)][name] = {
          "exact_match": float(em.mean()),
          "latency_s": float(np.median(walls)) / n_batches,
          "nfe": nfe / n_batches, "tokens_processed": tokens / n_batches,
          "flops": flops / n_batches, "agree_vanilla": agree,
          "compile_s": compile_s}
    base = out[str(g)].get("vanilla")
    if base:
      for m in out[str(g)].values():
        m["speedup"] = base["latency_s"] / max(m["latency_s"], 1e-12)
  return out


def decode_prompts(model, prompts, *, gen_len: int, kwargs: dict,
                   batch: int, seed: int = 0, mesh=None, repeats: int = 1
                   ) -> tuple[np.ndarray, dict[str, float]]:
  """Decodes id-list `prompts` (any lengths; `diffusion.generate` left-pads
  each batch) in batches of `batch` with `generate(**kwargs)`; returns
  (`[N, gen_len]` tokens, per-sample metrics).

  Per sample, as the paper reports them (spec L: latency in s per sample,
  batch 1): `latency_s` is decode seconds per prompt (the batches' wall
  time, compilation excluded, median over `repeats` passes, over N);
  `nfe` the model forward calls each prompt went through (its batch's NFE,
  averaged over prompts: the NFE per sample at batch 1); `tokens_processed`
  and `flops` the batches' totals over N.
  """
  n = len(prompts)
  walls, toks = [], None
  nfe = tokens = flops = compile_s = 0.0
  for r in range(max(int(repeats), 1)):
    wall, parts = 0.0, []
    for i in range(0, n, batch):
      chunk = prompts[i:i + batch]
      res = diffusion.generate(model, chunk, gen_len=gen_len,
                               key=jax.random.key(seed), mesh=mesh, **kwargs)
      wall += res.wall_s
      compile_s += res.compile_s
      parts.append(res.tokens)
      if r == 0:
        nfe += res.nfe * len(chunk)
        tokens += res.tokens_processed
        flops += res.flops
    walls.append(wall)
    toks = np.concatenate(parts)
  return toks, {"latency_s": float(np.median(walls)) / n, "nfe": nfe / n,
                "tokens_processed": tokens / n, "flops": flops / n,
                "compile_s": compile_s}
