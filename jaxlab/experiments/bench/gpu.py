"""GPU/TPU benchmark of jaxlab's own train step and sampler.

    python -m jaxlab.experiments.bench.gpu [--sizes=150m,1b] [--out=FILE]

Prints one JSON object: the measured matmul peak (bf16, 8192^2) and memory
bandwidth (a jitted sum over 4 GiB), then per model size the train step
tokens/s, MFU against the measured and the chip's spec peak (989 TFLOP/s
bf16 dense on H100/H200), compiled temp/argument bytes and the device's
peak bytes in use, with and without remat and with the cuDNN fused
attention; then greedy decode tokens/s at batch 1 and 64 against the
bandwidth roofline.

What is timed is the library's own code, not a copy: the train step is
`jaxlab.train.trainer.make_train_step` on a state from `trainer.build`
(bf16 compute, fp32 master weights, AdamW with clipping, state donated),
AOT-compiled with `.lower().compile()`; decode is
`jaxlab.decoding.sampler.generate` with its `timings` split.

On the lent H200 (bare image: jax, flax, optax, orbax, absl are there;
grain and ml_collections are not) carry their wheels, e.g. from the repo
root here: `python3 -m pip download --no-deps --only-binary=:all:
--python-version 3.12 --platform manylinux2014_x86_64 -d .whl grain
array-record ml-collections portpicker` (see the device README), then run
`python3 -m pip install -q --no-index --no-deps --target /tmp/site
.whl/*.whl && PYTHONPATH=/tmp/site:. python3 -m jaxlab.experiments.bench.gpu
--sizes=1b --decode_sizes=1b --out=$OUT/h200.json`.
"""

import argparse
import json
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.experiments.bench import roofline
from jaxlab import parallel
from jaxlab.decoding import sampler
from jaxlab.models import decoder as dec
from jaxlab.models import registry
from jaxlab.train import losses
from jaxlab.train import trainer

# Dense bf16 spec peaks (FLOP/s) for MFU against the data sheet.
SPEC_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12}

SIZES = {
    # ~150M: GPT-2-small-like widths with a Llama block.
    "150m": dict(vocab_size=32000, dim=768, num_layers=12, num_heads=12,
                 num_kv_heads=12, mlp_dim=2048),
    # ~1.1B: TinyLlama-like.
    "1b": dict(vocab_size=32000, dim=2048, num_layers=22, num_heads=32,
               num_kv_heads=4, mlp_dim=5632),
}


def train_config(arch: dict[str, Any], batch: int, seq_len: int, remat: bool,
                 attention_impl: str | None, dtype: str = "bfloat16"):
  """Trainer config (`jaxlab/configs/common.base_config()`) of one train plan row:
  `dtype` compute, float32 master weights, AdamW, one data-parallel mesh."""
  from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
  c = common.base_config()
  c.model.update(dtype=dtype, param_dtype="float32", remat=remat, **arch)
  if attention_impl is not None:
    c.model.attention_impl = attention_impl
  c.train.update(steps=100, batch_size=batch, seq_len=seq_len)
  c.optim.update(warmup_steps=0, schedule="constant")
  c.mesh.update(data=-1, fsdp=1, tensor=1)
  return c


def bench_train(name, arch, batch, seq_len, remat, attention_impl, peak,
                repeats=5, dtype="bfloat16"):
  """Times the trainer's own step (`trainer.make_train_step`), AOT-compiled.

  The state comes from `trainer.build` (born sharded, fp32 master weights),
  the step from `trainer.make_train_step` with the registered `lm` loss, so
  what is timed is exactly what `trainer.train` runs per step (donation
  and shardings included). FLOPs per token: `registry.decoder_train_flops_
  per_token` (6N + 12 L T d, causal counted unmasked).
  """
  config = train_config(arch, batch, seq_len, remat, attention_impl, dtype)
  mesh = parallel.make_mesh(config.mesh)
  ts = trainer.build(config, mesh=mesh)
  cfg = ts.spec.config if ts.spec is not None and ts.spec.config else (
      registry.decoder_config(config.model))
  with jax.set_mesh(mesh), nnx.logical_axis_rules(ts.rules):
    batch_sh = parallel.batch_sharding(mesh, ts.rules)
    step = trainer.make_train_step(ts, losses.get("lm"), config.loss,
                                   grad_accum=1, batch_sharding=batch_sh)
    ids = jax.random.randint(jax.random.key(1), (batch, seq_len + 1), 0,
                             cfg.vocab_size)
    data = {"inputs": jax.device_put(ids[:, :-1], batch_sh),
            "targets": jax.device_put(ids[:, 1:], batch_sh)}
    key = jax.random.key(0)
    state = ts.state
    t0 = time.perf_counter()
    compiled = step.lower(state, data, key).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    t0 = time.perf_counter()
    state, out = compiled(state, data, key)
    jax.block_until_ready(out)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
      t0 = time.perf_counter()
      state, out = compiled(state, data, key)
      jax.block_until_ready(out)
      times.append(time.perf_counter() - t0)
  t = float(np.median(times))
  toks = batch * seq_len
  flops_tok = registry.decoder_train_flops_per_token(cfg, seq_len)
  stats = jax.devices()[0].memory_stats() or {}
  tok_s = toks / t
  return {
      "size": name, "params": cfg.num_params(), "batch": batch,
      "seq_len": seq_len, "remat": remat, "attention_impl": attention_impl,
      "dtype": dtype, "param_dtype": "float32",
      "step": "trainer.make_train_step",
      "compile_s": compile_s, "step_s": t, "first_step_s": first,
      "tokens_per_s": tok_s, "train_flops_per_token": flops_tok,
      "tflops_per_s": flops_tok * tok_s / 1e12,
      "mfu_vs_measured_peak": roofline.train_mfu(tok_s, flops_tok,
                                                 peak["measured"]),
      "mfu_vs_spec_peak": (roofline.train_mfu(tok_s, flops_tok, peak["spec"])
                           if peak["spec"] else None),
      "loss": float(out["loss"]),
      "temp_bytes": getattr(mem, "temp_size_in_bytes", None),
      "argument_bytes": getattr(mem, "argument_size_in_bytes", None),
      "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
  }


def bench_decode(name, arch, batch, prompt_len, new_tokens, bandwidth, peak,
                 repeats=3, dtype="bfloat16"):
  """Greedy `jaxlab.decoding.sampler.generate` (its own prefill + decode).

  `generate(..., timings=)` splits the wall time of a call into prefill
  (to the first token on device) and decode (the while loop, results on
  the host); decode tokens/s = B * (new_tokens - 1) / decode_s is set
  against the bandwidth roofline of those steps (`roofline.decode_
  roofline`: weights + KV cache read per step at the measured bandwidth).
  """
  cfg = dec.DecoderConfig(**arch, dtype=dtype, param_dtype=dtype)
  model = nnx.jit(lambda: dec.Decoder(cfg, rngs=nnx.Rngs(0)))()
  rng = np.random.default_rng(2)
  prompts = rng.integers(0, cfg.vocab_size, (batch, prompt_len)).tolist()
  sampler.generate(model, prompts, max_new_tokens=new_tokens)  # compile
  pre, dec_s = [], []
  for _ in range(repeats):
    timings = {}
    sampler.generate(model, prompts, max_new_tokens=new_tokens,
                     timings=timings)
    pre.append(timings["prefill_s"])
    dec_s.append(timings["decode_s"])
  t_pre, t_dec = float(np.median(pre)), float(np.median(dec_s))
  nbytes = jnp.dtype(dtype).itemsize
  roof = roofline.decode_roofline(
      cfg, batch=batch, prompt_len=prompt_len, new_tokens=new_tokens,
      bandwidth=bandwidth, peak=peak, weight_bytes=nbytes, kv_bytes=nbytes)
  dec_tok_s = batch * (new_tokens - 1) / t_dec
  roof_dec_tok_s = batch * (new_tokens - 1) / roof["decode_s"]
  return {"size": name, "batch": batch, "prompt_len": prompt_len,
          "new_tokens": new_tokens, "dtype": dtype,
          "decode": "sampler.generate",
          "prefill_s": t_pre, "decode_s": t_dec,
          "prefill_tokens_per_s": batch * prompt_len / t_pre,
          "decode_tokens_per_s": dec_tok_s,
          "roofline_decode_tokens_per_s": roof_dec_tok_s,
          "decode_fraction_of_roofline": dec_tok_s / roof_dec_tok_s}


def main(argv=None):
  p = argparse.ArgumentParser()
  p.add_argument("--sizes", default="150m,1b")
  p.add_argument("--out", default=None)
  p.add_argument("--train_plan", default=None,
                 help="';'-separated size,batch,remat(0/1),impl(auto/xla/cudnn)")
  p.add_argument("--decode_sizes", default=None)
  p.add_argument("--decode_batches", default="1,64")
  p.add_argument("--seq_len", type=int, default=2048)
  p.add_argument("--prompt_len", type=int, default=512)
  p.add_argument("--new_tokens", type=int, default=128)
  p.add_argument("--dtype", default="bfloat16")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--matmul_n", type=int, default=8192)
  p.add_argument("--bandwidth_gib", type=float, default=4.0)
  args = p.parse_args(argv)
  import flax  # pylint: disable=g-import-not-at-top
  dev = jax.devices()[0]
  kind = getattr(dev, "device_kind", str(dev))
  spec = next((v for k, v in SPEC_PEAK.items() if k in kind), None)
  result = {"jax": jax.__version__, "flax": flax.__version__,
            "device": kind, "spec_peak_tflops": spec and spec / 1e12,
            "dtype": args.dtype}
  measured = roofline.measure_matmul_peak(args.matmul_n,
                                          jnp.dtype(args.dtype))
  result["measured_matmul_peak_tflops"] = measured / 1e12
  bandwidth = roofline.measure_bandwidth(args.bandwidth_gib)
  result["measured_bandwidth_gb_s"] = bandwidth / 1e9
  peak = {"measured": measured, "spec": spec}

  def emit(final=False):
    text = json.dumps(result)
    if args.out:
      with open(args.out, "w") as f:
        f.write(text)
    if final:
      print(text, flush=True)
    else:
      print("progress:", len(result.get("train", [])),
            len(result.get("decode", [])), flush=True)

  runs = []
  plan = []
  if args.train_plan is not None:
    for item in filter(None, args.train_plan.split(";")):
      name, batch, remat, impl = item.split(",")
      plan.append((name, SIZES[name], int(batch), args.seq_len, remat == "1",
                   None if impl == "auto" else impl))
  for name in (args.sizes.split(",") if args.train_plan is None else []):
    arch = SIZES[name]
    batch = 16 if name == "150m" else 4
    plan += [(name, arch, batch, args.seq_len, False, None),
             (name, arch, batch, args.seq_len, True, None),
             (name, arch, batch, args.seq_len, False, "cudnn")]
  for item in plan:
    try:
      runs.append(bench_train(*item, peak, repeats=args.repeats,
                              dtype=args.dtype))
    except Exception as e:  # pylint: disable=broad-except
      runs.append({"size": item[0], "remat": item[4],
                   "attention_impl": item[5], "error": repr(e)[:300]})
    result["train"] = runs
    emit()
  dec_runs = []
  for name in (args.decode_sizes or args.sizes).split(","):
    for batch in map(int, args.decode_batches.split(",")):
      try:
        dec_runs.append(bench_decode(
            name, SIZES[name], batch, args.prompt_len, args.new_tokens,
            bandwidth, measured, repeats=max(1, args.repeats // 2),
            dtype=args.dtype))
      except Exception as e:  # pylint: disable=broad-except
        dec_runs.append({"size": name, "batch": batch, "error": repr(e)[:300]})
      result["decode"] = dec_runs
      emit()
  emit(final=True)
  return result


if __name__ == "__main__":
  main(sys.argv[1:])
