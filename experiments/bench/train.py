"""Train-step benchmark: jaxlab decoder vs transformers Llama (torch, CPU).

    python -m experiments.bench train [--sizes=small,medium] [--steps=5]

Prints one JSON object: for each size, tokens/s and MFU of the jitted
jaxlab train step (AdamW, float32) and of the same architecture's train step
in PyTorch (`LlamaForCausalLM` + `torch.optim.AdamW`), and their ratio. MFU
= achieved model FLOP/s (6N + attention, `registry.decoder_train_flops_per_
token`) over a measured float32 matmul peak of this machine
(`metrics.measured_peak_flops`), so both frameworks share one denominator.
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.models import decoder
from jaxlab.models import registry
from jaxlab.train import losses
from jaxlab.train import metrics as metrics_lib

SIZES = {
    "small": dict(dim=128, num_layers=2, num_heads=4, num_kv_heads=2,
                  mlp_dim=384, batch=8, seq_len=128),
    "medium": dict(dim=256, num_layers=4, num_heads=8, num_kv_heads=4,
                   mlp_dim=768, batch=8, seq_len=256),
    "large": dict(dim=512, num_layers=4, num_heads=8, num_kv_heads=4,
                  mlp_dim=1536, batch=4, seq_len=256),
}
VOCAB = 1024


def _batch(b, t, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, VOCAB, size=(b, t + 1)).astype(np.int32)
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


def bench_jax(cfg: decoder.DecoderConfig, b: int, t: int, steps: int):
  model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
  opt = nnx.Optimizer(model, optax.adamw(1e-4), wrt=nnx.Param)
  graphdef, state = nnx.split((model, opt))
  inputs, targets = _batch(b, t)
  batch = {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets)}

  @jax.jit
  def step(state, batch):
    model, opt = nnx.merge(graphdef, state)
    def loss_fn(m):
      return losses.lm_loss(m, batch, rng=None)[0]
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    opt.update(model, grads)
    return nnx.state((model, opt)), loss

  holder = {"state": state}

  def run():
    holder["state"], loss = step(holder["state"], batch)
    loss.block_until_ready()
  return _time(run, steps)


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
  inputs, _ = _batch(b, t)
  ids = torch.from_numpy(inputs.astype(np.int64))

  def run():
    opt.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
  return _time(run, steps)


def main(argv=()):
  args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
  names = args.get("sizes", "small,medium,large").split(",")
  steps = int(args.get("steps", 5))
  peak = metrics_lib.measured_peak_flops()
  report = {"backend": jax.default_backend(),
            "devices": jax.device_count(),
            "measured_peak_flops": peak, "dtype": "float32", "results": []}
  try:
    import torch  # pylint: disable=g-import-not-at-top
    report["torch_threads"] = torch.get_num_threads()
  except ImportError:
    torch = None
  for name in names:
    s = dict(SIZES[name])
    b, t = s.pop("batch"), s.pop("seq_len")
    cfg = decoder.DecoderConfig(vocab_size=VOCAB, **s)
    flops_tok = registry.decoder_train_flops_per_token(cfg, t)
    row = {"size": name, "params": cfg.num_params(), "batch": b,
           "seq_len": t, "train_flops_per_token": flops_tok}
    for fw, fn in (("jax", bench_jax), ("torch", bench_torch)):
      if fw == "torch" and torch is None:
        continue
      sec = fn(cfg, b, t, steps)
      tok_s = b * t / sec
      row[fw] = {"step_ms": 1e3 * sec, "tokens_per_s": tok_s,
                 "mfu": tok_s * flops_tok / peak}
    if "torch" in row:
      row["jax_over_torch_tokens_per_s"] = (row["jax"]["tokens_per_s"] /
                                            row["torch"]["tokens_per_s"])
    report["results"].append(row)
  print(json.dumps(report, indent=2))
  return report


if __name__ == "__main__":
  main(sys.argv[1:])
