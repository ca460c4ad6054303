"""Masked-diffusion decoding sweep: accuracy, latency, NFE, FLOPs per variant.

Decodes held-out arithmetic-chain prompts with `jaxlab.decoding.diffusion
.generate` under several decoding variants (paper L, DPad; used by
`jaxlab.experiments.dpad` and its benchmark) and measures, per (gen_len,
variant), exact match, latency (compilation excluded), NFE, tokens
processed, model FLOPs and agreement with vanilla decoding.

The miniature's pieces a notebook or benchmark reuses live here too: the
decoding variants (`VARIANTS`, `variant_kwargs`), the held-out prompts
(`held_out`, excluding every seed's training prompts) and the model of a
config (`build_model`, `load_params`).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.data.synthetic import arith_chains as ac
from jaxlab.decoding import diffusion
from jaxlab.io import params as params_io
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry

# name -> generate() keywords (DPad settings come from config.decode.dpad).
VARIANTS = {
    "vanilla": {},
    "+early stop": {"early_stop": True},
    "+DPad": {"early_stop": True, "dpad": True},
    "+threshold": {"threshold": True},
    "+threshold+prefix cache": {"threshold": True, "cache": "prefix"},
    # DPad's main table: parallel (threshold) decoding with DPad and early
    # termination (main_instruct.sh "+Parallel+DPad": -th=0.9 -e -d=...).
    "+threshold+DPad": {"threshold": True, "early_stop": True, "dpad": True},
    # +all without DPad, and threshold + early stop alone: what DPad adds on
    # top of the Fast-dLLM accelerations (issue 29: the +all speed-up is
    # mostly threshold decoding and early stop).
    "+threshold+early stop": {"threshold": True, "early_stop": True},
    "+threshold+prefix cache+early stop": {"early_stop": True,
                                           "threshold": True,
                                           "cache": "prefix"},
    "+all": {"early_stop": True, "threshold": True, "cache": "prefix",
             "dpad": True},
}

# The held-out prompts' generator seed (offset by `task.data_seed`).
HELD_OUT_SEED = 999_999


def build_model(config, seed: int) -> decoder_lib.Decoder:
  """The bidirectional decoder of `config.model`, initialised from `seed`."""
  cfg = model_registry.decoder_config(config.model)
  if cfg.causal:
    raise ValueError("config.model.causal must be False: a masked-diffusion "
                     "LM is bidirectional")
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(int(seed)))


def load_params(config, path: str) -> decoder_lib.Decoder:
  """`build_model(config, 0)` with the weights of a saved `params.npz`."""
  model = build_model(config, 0)
  params_io.load(model, path)
  return model


def train_chains(config, seed: int) -> list[ac.Chain]:
  """Seed `seed`'s training chains of `config.task`."""
  t = config.task
  return ac.make_chains(int(t.data_seed) + int(seed), int(t.train_examples),
                        min_ops=int(t.min_ops), max_ops=int(t.max_ops),
                        kind=str(t.get("kind", "chain")))


def held_out(config, n: int) -> tuple[np.ndarray, list[ac.Chain]]:
  """`[n, prompt_len]` PAD-padded prompts (PAD is a real token, as in
  training; `task.pad` side) and their chains; prompts seen in training
  (any seed of `config.seeds`) are excluded."""
  t = config.task
  seen = {tuple(c.prompt) for s in config.seeds
          for c in train_chains(config, s)}
  pool = ac.make_chains(int(t.data_seed) + HELD_OUT_SEED, 4 * n + 64,
                        min_ops=int(t.min_ops), max_ops=int(t.max_ops),
                        kind=str(t.get("kind", "chain")))
  chains = [c for c in pool if tuple(c.prompt) not in seen][:n]
  if len(chains) < n:
    raise ValueError(f"only {len(chains)} held-out prompts unseen in "
                     f"training; lower decode.prompts or raise task.max_ops")
  prompts = np.array([ac.pad_prompt(c.prompt, int(t.prompt_len),
                                    str(t.get("pad", "left")))
                      for c in chains], np.int32)
  return prompts, chains


def variant_kwargs(config, name: str, *, mask_id: int = ac.MASK,
                   eos_id: int | None = ac.EOS,
                   shift_logits: bool = False) -> dict[str, Any]:
  """`diffusion.generate` keywords of variant `name` (`VARIANTS`) with the
  block, threshold, confidence and DPad settings of `config.decode`
  (`decode.threshold_confidence` for the threshold variants,
  `decode.confidence` for the others; "prob" when absent) and, for the
  fixed-schedule variants, `decode.schedule` / `decode.eps`."""
  if name not in VARIANTS:
    raise ValueError(f"config.decode.variants: unknown variant {name!r}; "
                     f"valid: {', '.join(VARIANTS)}")
  spec = dict(VARIANTS[name])
  d = config.decode
  kw: dict[str, Any] = {"block_len": int(d.block_len),
                        "mask_id": int(mask_id), "eos_id": eos_id,
                        "early_stop": bool(spec.get("early_stop", False)),
                        "cache": spec.get("cache")}
  if spec.get("threshold"):
    kw["threshold"] = float(d.threshold)
    confidence = str(d.get("threshold_confidence", "prob"))
  else:
    confidence = str(d.get("confidence", "prob"))
    if str(d.get("schedule", "llada")) != "llada":
      kw["schedule"] = str(d.schedule)
      kw["eps"] = float(d.get("eps", diffusion.DREAM_EPS))
  if confidence != "prob":
    kw["confidence"] = confidence
  if spec.get("dpad"):
    kw["dpad"] = diffusion.DPadConfig(
        window=int(d.dpad.window), k=float(d.dpad.k), a=float(d.dpad.a),
        sampler=str(d.dpad.sampler), n=int(d.dpad.n) or None)
  if shift_logits:
    kw["shift_logits"] = True
  return kw


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
