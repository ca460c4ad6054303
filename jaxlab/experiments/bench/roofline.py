"""This machine's limits, measured in the same run as a benchmark.

    python -m jaxlab.experiments.bench roofline [--gib=1] [--n=2048]

Two numbers bound every step of the decoder:
  * memory bandwidth (bytes/s): a jitted float32 sum over `gib` GiB (each
    byte read once, nothing written): `measure_bandwidth`;
  * matmul peak (FLOP/s): a jitted `n x n` float32 (or bf16) matmul,
    `2 n^3` FLOPs: `measure_matmul_peak`.
From them, `decode_roofline` gives the fastest a whole greedy `generate`
call could be: the prefill at the matmul peak, then each decode step the
larger of (weights + the KV cache read so far) / bandwidth and its FLOPs /
peak; `train_mfu` is achieved model FLOP/s (`registry.decoder_train_flops_
per_token`: 6N + 12 L T d) over the measured peak.
"""

import json
import os
import sys
import time

import jax
import jax.numpy as jnp

from jaxlab.models import registry as model_registry


def _best(fn, *args, repeats: int = 5) -> float:
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t)
  return best


def measure_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
  """Bytes/s of a jitted float32 sum over `gib` GiB (best of `repeats`)."""
  n = int(gib * (1 << 30)) // 4
  x = jnp.ones((n,), jnp.float32)
  t = _best(jax.jit(jnp.sum), x, repeats=repeats)
  del x
  return n * 4 / t


def measure_matmul_peak(n: int = 2048, dtype=jnp.float32,
                        repeats: int = 5) -> float:
  """FLOP/s of a jitted `n x n` matmul in `dtype` (best of `repeats`)."""
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  t = _best(jax.jit(jnp.matmul), a, b, repeats=repeats)
  return 2.0 * n ** 3 / t


def machine(gib: float = 1.0, n: int = 2048) -> dict[str, float]:
  """Measured bandwidth and fp32 matmul peak plus the load average."""
  return {"memory_bandwidth_bytes_per_s": measure_bandwidth(gib),
          "matmul_peak_flops": measure_matmul_peak(n),
          "bandwidth_probe_gib": gib, "matmul_probe_n": n,
          "loadavg": list(os.getloadavg())}


def decoder_matmul_shapes(cfg) -> list[tuple[int, int]]:
  """(in, out) of every weight matmul of one decode step of a decoder
  config, in execution order: per layer q, k, v, o, gate, up, down, then
  the LM head (tied or not, it is read once)."""
  hd = cfg.resolved_head_dim
  q, kv = cfg.num_heads * hd, cfg.num_kv_heads * hd
  layer = [(cfg.dim, q), (cfg.dim, kv), (cfg.dim, kv), (q, cfg.dim),
           (cfg.dim, cfg.mlp_dim), (cfg.dim, cfg.mlp_dim),
           (cfg.mlp_dim, cfg.dim)]
  return layer * cfg.num_layers + [(cfg.dim, cfg.vocab_size)]


def measure_decode_matmul_floor(cfg, batch: int, repeats: int = 5
                                ) -> dict[str, float]:
  """Seconds per decode step of the step's weight matmuls alone.

  One jitted program runs every `decoder_matmul_shapes(cfg)` product, in
  float32 at `batch` rows, each fed from the previous one's output (so
  XLA cannot overlap or drop them): no norms, attention, KV cache,
  residuals or sampling. It is what this machine's XLA:CPU dot kernels
  take for a step's weights: a decode step cannot be faster than this
  without other kernels, and jaxlab's step over this floor is the time
  spent outside the weight matmuls. Returns the seconds (best of
  `repeats`), the weight bytes read and the bytes/s the kernels reached.
  """
  shapes = decoder_matmul_shapes(cfg)
  keys = jax.random.split(jax.random.key(0), len(shapes))
  ws = [jax.random.normal(k, s, jnp.float32) * 0.02
        for k, s in zip(keys, shapes)]
  x = jnp.ones((batch, cfg.dim), jnp.float32)

  def fit(y, n):  # [B, m] -> [B, n]: a slice or a tile of y
    if y.shape[1] < n:
      y = jnp.tile(y, (1, -(-n // y.shape[1])))
    return y[:, :n] * 1e-2

  def chain(x, ws):
    y = x
    for w in ws:
      y = fit(y, w.shape[0]) @ w
    return y

  seconds = _best(jax.jit(chain), x, ws, repeats=repeats)
  nbytes = 4 * sum(a * b for a, b in shapes)
  del ws
  return {"seconds": seconds, "weight_bytes": nbytes,
          "bytes_per_s": nbytes / seconds, "batch": batch}


# The model's FLOPs count lives with the model registry (the trainer's
# ahead-of-time compiler uses it too).
decoder_forward_flops = model_registry.decoder_forward_flops


def decode_roofline(cfg, *, batch: int, prompt_len: int, new_tokens: int,
                    bandwidth: float, peak: float, weight_bytes: int = 4,
                    kv_bytes: int = 4) -> dict[str, float]:
  """Lower bound on the seconds of one greedy `generate` call.

  Prefill: its FLOPs (B*P tokens, causal: P/2 average context) at `peak`.
  Decode step i (context P + i): max(bytes / bandwidth, FLOPs / peak) with
  bytes = every weight once (embedding rows excepted) + the K and V cache
  read for the context.

  Returns:
    `prefill_s`, `decode_s`, `total_s` and `tokens_per_s`
    (B * new_tokens / total_s), the roofline of the whole call.
  """
  n_read = cfg.num_params() - (0 if cfg.tie_embeddings
                               else cfg.vocab_size * cfg.dim)
  kv_per_pos = (2 * cfg.num_layers * cfg.num_kv_heads *
                cfg.resolved_head_dim * kv_bytes)
  prefill = decoder_forward_flops(cfg, batch * prompt_len,
                                  prompt_len // 2) / peak
  decode = 0.0
  for i in range(1, new_tokens):
    ctx = prompt_len + i
    mem = (n_read * weight_bytes + batch * ctx * kv_per_pos) / bandwidth
    comp = decoder_forward_flops(cfg, batch, ctx) / peak
    decode += max(mem, comp)
  total = prefill + decode
  return {"prefill_s": prefill, "decode_s": decode, "total_s": total,
          "tokens_per_s": batch * new_tokens / total}


def train_mfu(tokens_per_s: float, flops_per_token: float,
              peak: float) -> float:
  """Model FLOPs utilisation: tokens/s * FLOPs/token / peak FLOP/s."""
  return tokens_per_s * flops_per_token / peak


def main(argv=()):
  args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
  out = machine(float(args.get("gib", 1.0)), int(args.get("n", 2048)))
  out["backend"] = jax.default_backend()
  print(json.dumps(out, indent=2))
  return out


if __name__ == "__main__":
  main(sys.argv[1:])
