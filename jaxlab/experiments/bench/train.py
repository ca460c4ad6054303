"""Train-step benchmark: the trainer's own step vs transformers (torch, CPU).

    python -m jaxlab.experiments.bench train [--sizes=small,56m,110m] [--steps=3]
        [--breakdown=56m] [--chunk_sizes=56m] [--chunk=1024] [--bare=56m]
        [--profile=56m] [--out=FILE]

Prints one JSON object: this machine's measured limits (`roofline.machine`:
fp32 matmul peak of a 2048^2 matmul, memory bandwidth of a sum over 1 GiB,
load average), then for each size the tokens/s of
`jaxlab.train.trainer.make_train_step` (what `trainer.train` runs: fp32,
AdamW with clipping, state donated; median of `steps`) and of the same
architecture's train step in PyTorch (`LlamaForCausalLM` +
`torch.optim.AdamW`), their ratio, and each one's fraction of the measured
matmul peak (model FLOPs 6N + 12 L T d per token,
`registry.decoder_train_flops_per_token`). For `--breakdown` sizes the step
is split into forward, backward and the rest (timed jitted forward loss and
loss + grad); for `--chunk_sizes` the step with chunked cross-entropy
(`config.loss.chunk_size`) is timed too; for `--bare` sizes the trainer's
step is timed in alternation with a hand-written value_and_grad + optax
step on the same model and batch (`ab_trainer_vs_bare`: the trainer's
overhead); for `--profile` sizes the row carries `profile`, the share of
the step's op time per model part, op kind and phase
(`jaxlab/experiments/bench/profile.py`, run in a child process). Timings on a
shared machine are noisy: the load average before and after each size is
recorded, and `machine.xla_flags` the XLA_FLAGS in force.
"""

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.experiments import bench
from jaxlab.experiments.bench import roofline
from jaxlab import parallel
from jaxlab.models import decoder
from jaxlab.models import registry
from jaxlab.train import losses
from jaxlab.train import trainer

SIZES = {
    "small": dict(vocab_size=8192, dim=256, num_layers=4, num_heads=4,
                  num_kv_heads=2, mlp_dim=704, batch=8, seq_len=256),
    # The 56M Llama shape of issue 18.
    "56m": dict(vocab_size=32000, dim=512, num_layers=8, num_heads=8,
                num_kv_heads=4, mlp_dim=1408, batch=8, seq_len=256),
    "110m": dict(vocab_size=32000, dim=768, num_layers=10, num_heads=12,
                 num_kv_heads=4, mlp_dim=2048, batch=8, seq_len=256),
}


def _batch(b, t, vocab, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, vocab, size=(b, t + 1)).astype(np.int32)
  return ids[:, :-1], ids[:, 1:]


def _time(fn, steps: int) -> float:
  fn()  # compile / warm up
  fn()
  best = []
  for _ in range(steps):
    t = time.perf_counter()
    fn()
    best.append(time.perf_counter() - t)
  return float(np.median(best))


def trainer_config(cfg: decoder.DecoderConfig, b: int, t: int,
                   chunk: int = 0):
  """`jaxlab/configs/common.base_config()` with this shape (fp32, AdamW, 1 device)."""
  from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
  c = common.base_config()
  c.model.update(vocab_size=cfg.vocab_size, dim=cfg.dim,
                 num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                 num_kv_heads=cfg.num_kv_heads, mlp_dim=cfg.mlp_dim)
  c.train.update(steps=100, batch_size=b, seq_len=t)
  c.optim.update(lr=1e-4, warmup_steps=0, schedule="constant")
  c.mesh.update(data=1, fsdp=1, tensor=1)
  c.loss.chunk_size = chunk
  return c


def _trainer_step(cfg: decoder.DecoderConfig, b: int, t: int, chunk: int = 0):
  """(step, holder {"state", "ts", "config"}, batch, mesh): the trainer's
  own jitted step (`trainer.make_train_step`, state donated) for this shape;
  call it inside `jax.set_mesh(mesh)` and `nnx.logical_axis_rules`."""
  config = trainer_config(cfg, b, t, chunk)
  mesh = parallel.make_mesh(config.mesh, devices=jax.devices()[:1])
  ts = trainer.build(config, mesh=mesh)
  inputs, targets = _batch(b, t, cfg.vocab_size)
  batch = {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets)}
  with jax.set_mesh(mesh), nnx.logical_axis_rules(ts.rules):
    step = trainer.make_train_step(
        ts, losses.get("lm"), config.loss, grad_accum=1,
        batch_sharding=parallel.batch_sharding(mesh, ts.rules))
  return step, {"state": ts.state, "ts": ts, "config": config}, batch, mesh


def trainer_step_for(name: str):
  """(step, holder, batch) of the trainer's step for size `name` (one device,
  no mesh context needed: the step's shardings are explicit)."""
  s = dict(SIZES[name])
  b, t = s.pop("batch"), s.pop("seq_len")
  step, holder, batch, _ = _trainer_step(decoder.DecoderConfig(**s), b, t)
  return step, holder, batch


def _bare_step(ts, state, batch):
  """A hand-written step on the same model and batch: `jax.value_and_grad`
  of the token-mean cross-entropy + the same optax chain (`ts.tx`: global
  clipping, AdamW), params and optimizer state donated. The A/B reference
  for the trainer's own step (no metrics, no aux, no mutable-state plumbing).
  """
  import optax  # pylint: disable=g-import-not-at-top
  model, _ = nnx.merge(ts.graphdef, state)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  # Copies: the trainer's step donates (deletes) `state`'s buffers.
  params, rest = jax.tree.map(jnp.copy, (params, rest))
  opt_state = ts.tx.init(params)

  def loss_of(p):
    logits = nnx.merge(graphdef, p, rest)(batch["inputs"])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["targets"]).mean()

  def step(p, o):
    loss, g = jax.value_and_grad(loss_of)(p)
    updates, o = ts.tx.update(g, o, p)
    return optax.apply_updates(p, updates), o, loss

  jitted = jax.jit(step, donate_argnums=(0, 1))
  holder = {"p": params, "o": opt_state}

  def run():
    holder["p"], holder["o"], loss = jitted(holder["p"], holder["o"])
    loss.block_until_ready()
  return run


def bench_jax(cfg: decoder.DecoderConfig, b: int, t: int, steps: int,
              breakdown: bool = False, chunk: int = 0, bare: bool = False):
  """The trainer's own step (`trainer.make_train_step`, state donated).

  With `breakdown`, also times the jitted forward loss and loss + gradient
  of the same model and batch, so the step splits into forward, backward
  and the rest (clipping, AdamW update, metrics). With `bare`, the
  trainer's step and a hand-written one (`_bare_step`) are timed in
  alternation (`steps` each; min and median of both, wall and process CPU
  seconds), so load changes hit both alike.
  """
  step, holder, batch, mesh = _trainer_step(cfg, b, t, chunk)
  ts, config = holder["ts"], holder["config"]
  loss_fn = losses.get("lm")
  out = {}
  with jax.set_mesh(mesh), nnx.logical_axis_rules(ts.rules):
    key = jax.random.key(0)

    def run():
      holder["state"], m = step(holder["state"], batch, key)
      m["loss"].block_until_ready()
    out["step_s"] = _time(run, steps)
    if bare:
      out["ab_trainer_vs_bare"] = _interleaved(
          {"trainer": run, "bare": _bare_step(ts, holder["state"], batch)},
          steps)
    if breakdown:
      graphdef = ts.graphdef

      def loss_of(params, rest):
        model = nnx.merge(graphdef_m, params, rest)
        return loss_fn(model, batch, rng=None, config=config.loss)[0]
      model, _ = nnx.merge(graphdef, holder["state"])
      graphdef_m, params, rest = nnx.split(model, nnx.Param, ...)
      fwd = jax.jit(loss_of)
      grad = jax.jit(jax.value_and_grad(loss_of))
      out["forward_s"] = _time(
          lambda: fwd(params, rest).block_until_ready(), steps)
      out["forward_backward_s"] = _time(
          lambda: jax.block_until_ready(grad(params, rest)), steps)
  return out


def _interleaved(fns, steps: int) -> dict:
  """Alternating timed calls of each fn (after two warm-ups each):
  {name: {wall_min_s, wall_median_s, cpu_min_s, cpu_median_s}} and the
  trainer/bare ratios of the minima."""
  for fn in fns.values():
    fn()
    fn()
  wall = {k: [] for k in fns}
  cpu = {k: [] for k in fns}
  for _ in range(steps):
    for k, fn in fns.items():
      t, c = time.perf_counter(), time.process_time()
      fn()
      wall[k].append(time.perf_counter() - t)
      cpu[k].append(time.process_time() - c)
  out = {k: {"wall_min_s": min(wall[k]),
             "wall_median_s": float(np.median(wall[k])),
             "cpu_min_s": min(cpu[k]),
             "cpu_median_s": float(np.median(cpu[k]))} for k in fns}
  if {"trainer", "bare"} <= set(fns):
    out["trainer_over_bare_wall_min"] = (out["trainer"]["wall_min_s"] /
                                         out["bare"]["wall_min_s"])
    out["trainer_over_bare_cpu_min"] = (out["trainer"]["cpu_min_s"] /
                                        out["bare"]["cpu_min_s"])
  return out


def bench_torch(cfg: decoder.DecoderConfig, b: int, t: int, steps: int):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  hf_cfg = transformers.LlamaConfig(
      vocab_size=cfg.vocab_size, hidden_size=cfg.dim,
      intermediate_size=cfg.mlp_dim, num_hidden_layers=cfg.num_layers,
      num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
      head_dim=cfg.resolved_head_dim, rms_norm_eps=cfg.norm_eps,
      rope_theta=cfg.rope_theta, max_position_embeddings=max(t, 512),
      tie_word_embeddings=False, attention_bias=False)
  torch.manual_seed(0)
  model = transformers.LlamaForCausalLM(hf_cfg)
  model.train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
  inputs, _ = _batch(b, t, cfg.vocab_size)
  ids = torch.from_numpy(inputs.astype(np.int64))

  def run():
    opt.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
  return _time(run, steps)


def main(argv=()):
  args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
  names = args.get("sizes", "small,56m,110m").split(",")
  steps = int(args.get("steps", 3))
  breakdown = set(args.get("breakdown", "56m").split(","))
  chunk_sizes = set(filter(None, args.get("chunk_sizes", "56m").split(",")))
  chunk = int(args.get("chunk", 1024))
  bare_sizes = set(filter(None, args.get("bare", "").split(",")))
  profile_sizes = set(filter(None, args.get("profile", "").split(",")))
  mach = roofline.machine()
  mach["xla_flags"] = os.environ.get("XLA_FLAGS", "")
  peak = mach["matmul_peak_flops"]
  report = {"benchmark": "train", "backend": jax.default_backend(),
            "devices": jax.device_count(), "machine": mach,
            "measured_peak_flops": peak, "dtype": "float32",
            "optimizer": "AdamW (clip 1.0), trainer.make_train_step",
            "results": []}
  try:
    import torch  # pylint: disable=g-import-not-at-top
    report["torch_threads"] = torch.get_num_threads()
    report["torch"] = torch.__version__
  except ImportError:
    torch = None
  for name in names:
    s = dict(SIZES[name])
    b, t = s.pop("batch"), s.pop("seq_len")
    cfg = decoder.DecoderConfig(**s)
    flops_tok = registry.decoder_train_flops_per_token(cfg, t)
    row = {"size": name, "params": cfg.num_params(), "batch": b,
           "seq_len": t, "train_flops_per_token": flops_tok,
           "loadavg_1m_before": os.getloadavg()[0]}
    timings = bench_jax(cfg, b, t, steps, breakdown=name in breakdown,
                        bare=name in bare_sizes)
    runs = [("jax", timings)]
    if name in chunk_sizes:
      runs.append((f"jax_chunked_ce_{chunk}",
                   bench_jax(cfg, b, t, steps, chunk=chunk)))
    if torch is not None:
      runs.append(("torch", {"step_s": bench_torch(cfg, b, t, steps)}))
    for fw, timing in runs:
      sec = timing["step_s"]
      tok_s = b * t / sec
      row[fw] = {**timing, "step_ms": 1e3 * sec, "tokens_per_s": tok_s,
                 "fraction_of_matmul_peak": roofline.train_mfu(
                     tok_s, flops_tok, peak)}
    jax_row = row["jax"]
    if "forward_s" in jax_row:
      fwd, fb, st = (jax_row["forward_s"], jax_row["forward_backward_s"],
                     jax_row["step_s"])
      jax_row["time_split"] = {"forward": fwd / st,
                               "backward": max(fb - fwd, 0.0) / st,
                               "optimizer_and_rest": max(st - fb, 0.0) / st}
    if name in profile_sizes:
      # Where the step's time goes, per model part (a child process: the
      # per-op trace needs XLA flags set before jax starts).
      from jaxlab.experiments.bench import _child as profile  # pylint: disable=g-import-not-at-top
      jax_row["profile"] = profile.summary(profile.in_child(
          ["--what=train", f"--size={name}"]))
    # LM head + cross-entropy share of the model FLOPs (6 V d per token).
    row["lm_head_flops_fraction"] = 6 * cfg.vocab_size * cfg.dim / flops_tok
    if "torch" in row:
      row["jax_over_torch_tokens_per_s"] = (row["jax"]["tokens_per_s"] /
                                            row["torch"]["tokens_per_s"])
    row["loadavg_1m_after"] = os.getloadavg()[0]
    report["results"].append(row)
    print(json.dumps(row), file=sys.stderr, flush=True)
  report["machine"]["loadavg_end"] = list(os.getloadavg())
  bench.emit(report, args.get("out"), indent=2)
  return report


if __name__ == "__main__":
  main(sys.argv[1:])
