"""DPad miniature (paper L): LLaDA training + Fast-dLLM / DPad decoding.

Per seed: a bidirectional decoder is trained with the loss registry's
`llada_sft` through the generic step runner on templated arithmetic chains
(`jaxlab.data.synthetic.arith_chains`), saved as `seed{N}/params.npz`
(reused by a run whose `TRAIN_FIELDS` and seed are the same), and decoded
on held-out prompts by `jaxlab.decoding.diffusion.generate` under every
variant of `config.decode.variants` (see `jaxlab/configs/dpad.py`) at every
`config.decode.gen_lens`. Per (gen_len, variant): exact match, latency
(decode seconds per call, compilation excluded), NFE, real tokens processed,
model FLOPs, and agreement with vanilla's tokens.

`python -m jaxlab.experiments.bench dpad` measures the same on one trained model
(including gen_len 512) and prints JSON.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np
from flax import nnx

from jaxlab.configs import dpad as dpad_config
from jaxlab.experiments import results as results_lib
from jaxlab.data.synthetic import arith_chains as ac
from jaxlab.decoding import diffusion
from jaxlab.evals import diffusion_decode
from jaxlab.evals.diffusion_decode import decode_mesh
from jaxlab.io import params as params_io
from jaxlab.io import stages
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry
from jaxlab.objectives import llada  # pylint: disable=unused-import
from jaxlab.train import runner as runner_lib

HELD_OUT_SEED = 999_999


def build_model(config, seed: int) -> decoder_lib.Decoder:
  cfg = model_registry.decoder_config(config.model)
  if cfg.causal:
    raise ValueError("config.model.causal must be False: a masked-diffusion "
                     "LM is bidirectional")
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(int(seed)))


def train_model(config, seed: int) -> tuple[decoder_lib.Decoder, list]:
  """Trains one seed with the loss registry's `config.loss.name`."""
  t = config.task
  init_from = str(config.init_from)
  if init_from:  # continued training from a saved params.npz
    model = load_params(config, init_from.format(seed=int(seed)))
  else:
    model = build_model(config, seed)
  chains = train_chains(config, seed)
  data = ac.training_arrays(chains, prompt_len=int(t.prompt_len),
                            gen_len=int(t.train_gen_len),
                            pad=str(t.get("pad", "left")))
  steps = int(config.train.steps)
  runner = runner_lib.StepRunner(
      model, loss=config.loss.name, loss_config=config.loss,
      optim=config.optim, steps=steps, seed=int(seed),
      mesh=runner_lib.mesh_for(config, int(config.train.batch_size)),
      rules=config.sharding_rules)
  curve = runner_lib.train_on_arrays(
      runner, data, steps=steps, batch_size=int(config.train.batch_size),
      seed=int(seed), log_every=int(config.train.log_every))
  return runner.write_back(), curve


def save_params(model, path: str) -> None:
  params_io.save(model, path)


# What each stage depends on (`jaxlab.io.stages`). The trained model: the
# model, the task (the training chains), the loss, the optimizer, training
# (`init_from` included, with the digest of the model it names) and
# the seed. Its evaluation (`eval.json`) also: the decode settings, the
# seeds (held-out prompts exclude every seed's training prompts) and the
# mesh it decodes on. A run that changes only `decode` decodes the saved
# model again; one that changes e.g. `optim.b2` trains again.
TRAIN_FIELDS = ("model", "task", "loss", "optim", "train", "init_from")
EVAL_FIELDS = ("decode", "seeds", "mesh")


PLAN = stages.Plan(TRAIN_FIELDS, EVAL_FIELDS)


def _init_digest(config, seed: int) -> str | None:
  init_from = str(config.init_from)
  init = init_from.format(seed=int(seed)) if init_from else ""
  return stages.stored_digest(init) if init else None


def train_key(config, seed: int) -> dict[str, Any]:
  return PLAN.train_key(config, seed,
                        init_from_digest=_init_digest(config, seed))


def eval_key(config, seed: int) -> dict[str, Any]:
  return PLAN.eval_key(
      config, seed,
      train_extra={"init_from_digest": _init_digest(config, seed)})


def seed_model(config, seed: int, seed_dir: str
               ) -> tuple[decoder_lib.Decoder, list]:
  """The seed's trained model and learning curve: `seed_dir/params.npz`
  when it was trained with this `train_key`, else trained (and saved)."""
  return stages.cached(os.path.join(seed_dir, "params.npz"),
                       train_key(config, seed),
                       lambda: train_model(config, seed), kind="npz",
                       init=lambda: build_model(config, 0))


def load_params(config, path: str) -> decoder_lib.Decoder:
  model = build_model(config, 0)
  params_io.load(model, path)
  return model


def train_chains(config, seed: int) -> list[ac.Chain]:
  t = config.task
  return ac.make_chains(int(t.data_seed) + int(seed), int(t.train_examples),
                        min_ops=int(t.min_ops), max_ops=int(t.max_ops),
                        kind=str(t.get("kind", "chain")))


def held_out(config, n: int) -> tuple[np.ndarray, list[ac.Chain]]:
  """`[n, prompt_len]` PAD-padded prompts (PAD is a real token, as in
  training; `task.pad` side) and their chains; prompts seen in training (any seed of
  `config.seeds`) are excluded."""
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


def variant_kwargs(config, name: str) -> dict[str, Any]:
  if name not in dpad_config.VARIANTS:
    raise ValueError(f"config.decode.variants: unknown variant {name!r}; "
                     f"valid: {', '.join(dpad_config.VARIANTS)}")
  spec = dict(dpad_config.VARIANTS[name])
  d = config.decode
  kw: dict[str, Any] = {"block_len": int(d.block_len),
                        "mask_id": ac.MASK, "eos_id": ac.EOS,
                        "early_stop": bool(spec.get("early_stop", False)),
                        "cache": spec.get("cache")}
  if spec.get("threshold"):
    kw["threshold"] = float(d.threshold)
  if spec.get("dpad"):
    kw["dpad"] = diffusion.DPadConfig(
        window=int(d.dpad.window), k=float(d.dpad.k), a=float(d.dpad.a),
        sampler=str(d.dpad.sampler), n=int(d.dpad.n) or None)
  return kw


def decode_all(model, config, gen_lens, variants, *, prompts, chains,
               batch: int, repeats: int = 1, seed: int = 0, mesh=None
               ) -> dict[str, dict[str, dict[str, float]]]:
  """`jaxlab.evals.diffusion_decode.decode_all` with `config`'s variants."""
  return diffusion_decode.decode_all(
      model, gen_lens, variants,
      variant_kwargs=lambda name: variant_kwargs(config, name),
      prompts=prompts, chains=chains, batch=batch, repeats=repeats,
      seed=seed, mesh=mesh)


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  d = config.decode
  prompts, chains = held_out(config, int(d.prompts))
  per_seed = []
  for seed in config.seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    os.makedirs(seed_dir, exist_ok=True)
    def evaluate(seed=seed, seed_dir=seed_dir):
      # Resume: a saved model of this train_key is decoded, not retrained.
      model, curve = seed_model(config, seed, seed_dir)
      metrics = decode_all(model, config, d.gen_lens, d.variants,
                           prompts=prompts, chains=chains,
                           batch=int(d.batch), repeats=int(d.repeats),
                           seed=int(seed),
                           mesh=decode_mesh(config, math.gcd(int(d.batch),
                                                             len(prompts))))
      return {"seed": int(seed), "learning_curve": curve, "decode": metrics}
    per_seed.append(stages.cached(os.path.join(seed_dir, "eval.json"),
                                  eval_key(config, seed), evaluate))

  cols = [results_lib.Column("exact_match", "exact match %", 1, 100),
          results_lib.Column("latency_s", "latency s/batch", 3),
          results_lib.Column("speedup", "speed-up vs vanilla", 1),
          results_lib.Column("nfe", "NFE", 0),
          results_lib.Column("tokens_processed", "tokens processed", 0,
                             spread=False),
          results_lib.Column("flops", "GFLOPs", 1, 1e-9, spread=False),
          results_lib.Column("agree_vanilla", "= vanilla %", 0, 100)]
  tables, comparisons = [], []
  for g in d.gen_lens:
    table = results_lib.Table(
        f"decode_{g}", f"Decoding gen_len {g} (block {d.block_len}, "
        f"{len(chains)} held-out prompts, batch {d.batch})", cols,
        row_label="variant")
    for rec in per_seed:
      for name, m in rec["decode"][str(g)].items():
        table.add_seed(name, rec["seed"], {k: m[k] for k in
                                           [c.key for c in cols]})
    tables.append(table)
    comparisons.append(results_lib.Comparison(
        table.id, "exact_match", "+all", "vanilla"))
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed}
  results_lib.write(workdir, "dpad", tables=tables, comparisons=comparisons,
                    extra=extra, config=config, start_time=t0)
  return extra
