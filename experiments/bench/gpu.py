"""GPU/TPU benchmark of the jaxlab decoder: matmul peak, train-step MFU, decode.

    python -m experiments.bench.gpu [--sizes=small,1b] [--out=FILE]

Prints one JSON object: the measured bf16 matmul peak, then per model size
the train step (bf16 compute, fp32 master params, AdamW, one jit with
donation) tokens/s, MFU against the measured peak and against the chip's
spec peak, peak device memory, the compiled memory analysis, with and
without remat; and KV-cached greedy decode tokens/s at batch 1 and 64.
Depends only on jax, flax, optax and numpy, so it runs on a bare
accelerator image.
"""

import argparse
import functools
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.models import decoder as dec

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


def _time(fn, *args, repeats=5):
  out = fn(*args)
  jax.block_until_ready(out)
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - t0)
  return float(np.median(times)), out


def matmul_peak(n=8192, dtype=jnp.bfloat16):
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  f = jax.jit(lambda x, y: x @ y)
  t, _ = _time(f, a, b, repeats=10)
  return 2 * n ** 3 / t


def train_flops_per_token(cfg: dec.DecoderConfig, seq_len: int) -> float:
  """6N (matmul params, excluding embeddings lookup) + attention 12*L*T*D."""
  n = cfg.num_params() - cfg.vocab_size * cfg.dim * (
      0 if cfg.tie_embeddings else 1)
  attn = 12 * cfg.num_layers * seq_len * cfg.num_heads * cfg.resolved_head_dim
  return 6 * n + attn * 0.5  # causal: half the score/value matmuls.


def bench_train(name, arch, batch, seq_len, remat, attention_impl, peak):
  cfg = dec.DecoderConfig(**arch, dtype="bfloat16", param_dtype="float32",
                          remat=remat, attention_impl=attention_impl)
  tx = optax.adamw(1e-4, weight_decay=0.1)

  @jax.jit
  def init():
    model = dec.Decoder(cfg, rngs=nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    return params, tx.init(params)

  graphdef = nnx.graphdef(nnx.eval_shape(
      lambda: dec.Decoder(cfg, rngs=nnx.Rngs(0))))
  params, opt_state = init()

  def loss_fn(params, tokens):
    model = nnx.merge(graphdef, params)
    logits = model(tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, tokens[:, 1:]).mean()

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def step(params, opt_state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  tokens = jax.random.randint(jax.random.key(1), (batch, seq_len + 1), 0,
                              cfg.vocab_size)
  compiled = step.lower(params, opt_state, tokens).compile()
  mem = compiled.memory_analysis()
  t0 = time.perf_counter()
  params, opt_state, loss = compiled(params, opt_state, tokens)
  jax.block_until_ready(loss)
  first = time.perf_counter() - t0
  times = []
  for _ in range(5):
    t0 = time.perf_counter()
    params, opt_state, loss = compiled(params, opt_state, tokens)
    jax.block_until_ready(loss)
    times.append(time.perf_counter() - t0)
  t = float(np.median(times))
  toks = batch * seq_len
  flops = train_flops_per_token(cfg, seq_len) * toks
  stats = jax.devices()[0].memory_stats() or {}
  return {
      "size": name, "params": cfg.num_params(), "batch": batch,
      "seq_len": seq_len, "remat": remat, "attention_impl": attention_impl,
      "step_s": t, "first_step_s": first, "tokens_per_s": toks / t,
      "tflops_per_s": flops / t / 1e12,
      "mfu_vs_measured_peak": flops / t / peak["measured"],
      "mfu_vs_spec_peak": (flops / t / peak["spec"]) if peak["spec"] else None,
      "loss": float(loss),
      "temp_bytes": getattr(mem, "temp_size_in_bytes", None),
      "argument_bytes": getattr(mem, "argument_size_in_bytes", None),
      "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
  }


def bench_decode(name, arch, batch, prompt_len, new_tokens):
  cfg = dec.DecoderConfig(**arch, dtype="bfloat16", param_dtype="bfloat16")
  model = nnx.jit(lambda: dec.Decoder(cfg, rngs=nnx.Rngs(0)))()
  graphdef, state = nnx.split(model)
  max_len = prompt_len + new_tokens

  @jax.jit
  def run(state, prompt):
    m = nnx.merge(graphdef, state)
    cache = m.init_cache(batch, max_len)
    out = m.forward(prompt, cache=cache)
    tok = jnp.argmax(out.logits[:, -1], -1)

    def body(i, carry):
      cache, tok, toks = carry
      o = m.forward(tok[:, None], cache=cache)
      nxt = jnp.argmax(o.logits[:, -1], -1)
      return o.cache, nxt, toks.at[:, i].set(nxt)

    toks = jnp.zeros((batch, new_tokens), jnp.int32)
    _, _, toks = jax.lax.fori_loop(0, new_tokens, body, (out.cache, tok, toks))
    return toks

  @jax.jit
  def prefill(state, prompt):
    m = nnx.merge(graphdef, state)
    return m.forward(prompt, cache=m.init_cache(batch, max_len)).logits[:, -1]

  prompt = jax.random.randint(jax.random.key(2), (batch, prompt_len), 0,
                              cfg.vocab_size)
  t_pre, _ = _time(prefill, state, prompt, repeats=3)
  t_all, _ = _time(run, state, prompt, repeats=3)
  t_dec = max(t_all - t_pre, 1e-9)
  return {"size": name, "batch": batch, "prompt_len": prompt_len,
          "new_tokens": new_tokens,
          "prefill_tokens_per_s": batch * prompt_len / t_pre,
          "decode_tokens_per_s": batch * new_tokens / t_dec}


def main(argv=None):
  p = argparse.ArgumentParser()
  p.add_argument("--sizes", default="150m,1b")
  p.add_argument("--out", default=None)
  p.add_argument("--train_plan", default=None,
                 help="';'-separated size,batch,remat(0/1),impl(auto/xla/cudnn)")
  p.add_argument("--decode_sizes", default=None)
  args = p.parse_args(argv)
  import flax  # pylint: disable=g-import-not-at-top
  dev = jax.devices()[0]
  kind = getattr(dev, "device_kind", str(dev))
  spec = next((v for k, v in SPEC_PEAK.items() if k in kind), None)
  result = {"jax": jax.__version__, "flax": flax.__version__,
            "device": kind, "spec_peak_tflops": spec and spec / 1e12}
  measured = matmul_peak()
  result["measured_matmul_peak_tflops"] = measured / 1e12
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
      plan.append((name, SIZES[name], int(batch), 2048, remat == "1",
                   None if impl == "auto" else impl))
  for name in (args.sizes.split(",") if args.train_plan is None else []):
    arch = SIZES[name]
    batch = 16 if name == "150m" else 4
    plan += [(name, arch, batch, 2048, False, None),
             (name, arch, batch, 2048, True, None),
             (name, arch, batch, 2048, False, "cudnn")]
  for item in plan:
    try:
      runs.append(bench_train(*item, peak))
    except Exception as e:  # pylint: disable=broad-except
      runs.append({"size": item[0], "remat": item[4],
                   "attention_impl": item[5], "error": repr(e)[:300]})
    result["train"] = runs
    emit()
  dec_runs = []
  for name in (args.decode_sizes or args.sizes).split(","):
    for batch in (1, 64):
      try:
        dec_runs.append(bench_decode(name, SIZES[name], batch, 512, 128))
      except Exception as e:  # pylint: disable=broad-except
        dec_runs.append({"size": name, "batch": batch, "error": repr(e)[:300]})
      result["decode"] = dec_runs
      emit()
  emit(final=True)
  return result


if __name__ == "__main__":
  main(sys.argv[1:])
