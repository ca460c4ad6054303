"""Markdown tables of the CPU benchmark JSON under docs/bench/.

    python -m jaxlab.experiments.bench._tables [--dir=docs/bench]

Reads decode_cpu.json, train_cpu.json, memory_cpu.json, data_cpu.json and
long_forward_cpu.json
(those present) and prints one table each, for docs/benchmarks.md, plus,
when rows were run with `--profile`, where jaxlab's time goes per model
part, and one table of every accelerator run `h200_run*.json` (written by
`python -m jaxlab.experiments.bench.gpu`).
"""

import glob

import json
import os
import sys


def _f(x, nd=2):
  return "-" if x is None else f"{x:.{nd}f}"


def decode_table(rep) -> str:
  lines = [f"Decode (greedy, prompt {rep['prompt_len']}, "
           f"{rep['new_tokens']} new tokens, fp32; load average "
           f"{_f(rep['machine']['loadavg'][0], 1)}):", "",
           "| size | batch | jaxlab tok/s (call) | transformers tok/s (call) "
           "| ratio | fraction of roofline | prefill share |",
           "|---|---|---|---|---|---|---|"]
  n = rep["new_tokens"]
  for r in rep["results"]:
    b = r["batch"]
    t = r["torch"]
    torch_call = b * n / (t["prefill_s"] + t["decode_s"])
    roof = r["roofline"]
    lines.append(
        f"| {r['size']} | {b} | {_f(roof['jaxlab_call_tokens_per_s'], 0)} | "
        f"{_f(torch_call, 0)} | "
        f"{_f(roof['jaxlab_call_tokens_per_s'] / torch_call)}x | "
        f"{_f(100 * roof['fraction_of_roofline'], 0)}% | "
        f"{_f(100 * roof['prefill_share_of_call'], 0)}% |")
  return "\n".join(lines)


# Model parts of `jaxlab/experiments/bench/profile.py`, grouped into table columns.
_PART_GROUPS = (
    ("LM head + CE", ("lm_head", "cross_entropy")),
    ("MLP", ("mlp",)),
    ("attn proj", ("attention_qkv_proj", "attention_out_proj")),
    ("attn core + cache", ("attention_core", "attention_mask", "rope",
                           "kv_cache_write")),
    ("optimizer", ("optimizer",)),
)


def _profile_cells(by_part) -> list[str]:
  cells, used = [], 0.0
  for _, parts in _PART_GROUPS:
    share = sum(by_part.get(p, 0.0) for p in parts)
    used += share
    cells.append(f"{_f(100 * share, 0)}%")
  cells.append(f"{_f(100 * max(1.0 - used, 0.0), 0)}%")
  return cells


def profile_table(decode_rep, train_rep) -> str:
  """Share of jaxlab's op time per model part, for rows run with --profile
  (decode: the decode loop's module; train: the whole step). Empty when no
  row carries a profile."""
  rows = []
  for r in (decode_rep or {}).get("results", []):
    prof = r["jaxlab"].get("profile")
    if prof and "by_module" in prof:
      loop = prof["by_module"].get("jit__decode", {}).get("by_part", {})
      kinds = prof.get("by_op_kind", {})
      rows.append([f"decode loop {r['size']} B={r['batch']}",
                   *_profile_cells(loop),
                   f"{_f(100 * kinds.get('dot', 0.0), 0)}%"])
  for r in (train_rep or {}).get("results", []):
    prof = r["jax"].get("profile")
    if prof and "by_part" in prof:
      kinds = prof.get("by_op_kind", {})
      rows.append([f"train step {r['size']} {r['batch']}x{r['seq_len']}",
                   *_profile_cells(prof["by_part"]),
                   f"{_f(100 * kinds.get('dot', 0.0), 0)}%"])
  if not rows:
    return ""
  head = ["what", *[g for g, _ in _PART_GROUPS], "rest", "in matmuls"]
  lines = ["Where jaxlab's time goes (share of XLA op time per model part, "
           "`--profile`, jaxlab/experiments/bench/profile.py):", "",
           "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  return "\n".join(lines)


def train_table(rep) -> str:
  lines = [f"Training step (fp32, AdamW; load average "
           f"{_f(rep['machine']['loadavg'][0], 1)}):", "",
           "| size | B x T | jaxlab tok/s | transformers tok/s | ratio | "
           "fraction of matmul peak | chunked CE tok/s |",
           "|---|---|---|---|---|---|---|"]
  for r in rep["results"]:
    chunked = next((v for k, v in r.items()
                    if k.startswith("jax_chunked_ce")), None)
    lines.append(
        f"| {r['size']} | {r['batch']}x{r['seq_len']} | "
        f"{_f(r['jax']['tokens_per_s'], 0)} | "
        f"{_f(r.get('torch', {}).get('tokens_per_s'), 0)} | "
        f"{_f(r.get('jax_over_torch_tokens_per_s'))}x | "
        f"{_f(100 * r['jax']['fraction_of_matmul_peak'], 0)}% | "
        f"{_f(chunked and chunked['tokens_per_s'], 0)} |")
  return "\n".join(lines)


def memory_table(rep) -> str:
  lines = ["Training memory per device (compiled memory analysis of "
           "`trainer.make_train_step`, MiB):", "",
           "| size | fsdp | remat | chunked CE | params + optimizer | temp "
           "| peak | state vs fsdp=1 |", "|---|---|---|---|---|---|---|---|"]
  mib = 1 << 20
  for r in rep["results"]:
    ratio = r.get("param_plus_optimizer_ratio_to_fsdp1")
    lines.append(
        f"| {r['size']} | {r['fsdp']} | {r['remat']} | {r['chunk'] or '-'} | "
        f"{_f(r['param_plus_optimizer_bytes_per_device'] / mib, 1)} | "
        f"{_f(r['temp_bytes'] / mib, 1)} | {_f(r['peak_bytes'] / mib, 1)} | "
        f"{'-' if ratio is None else f'1/{1 / ratio:.2f}'} |")
  timing = rep.get("step_time_noisy")
  if timing:
    lines += ["", "Step time (noisy, shared machine): " + "; ".join(
        f"{t['size']} remat={t['remat']} chunk={t['chunk']}: "
        f"{_f(t['step_s'], 2)} s (load {_f(t['loadavg_1m'], 1)})"
        for t in timing)]
  return "\n".join(lines)


def gpu_table(reports) -> str:
  """Training rows of accelerator runs ([(file name, report)]), in order."""
  if not reports:
    return ""
  first = reports[0][1]
  lines = [f"Accelerator training step ({first['device']}, jax {first['jax']}, "
           "bf16 compute, fp32 master weights, AdamW; measured bf16 matmul "
           "peak " + ", ".join(f"{_f(r['measured_matmul_peak_tflops'], 0)}"
                               for _, r in reports) +
           f" TFLOP/s, spec {_f(first['spec_peak_tflops'], 0)}):", "",
           "| run | model | params | batch x T | attention | remat | tokens/s "
           "| MFU vs spec peak | MFU vs measured peak | temp GB | "
           "process peak GB |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, rep in reports:
    run = name.rsplit("_", 1)[-1].removesuffix(".json")
    for r in rep.get("train", []):
      attn = r.get("attention_impl") or "default"
      if "error" in r:
        err = r["error"].split("(", 1)[0]
        lines.append(f"| {run} | {r['size']} | - | - | {attn} | {r['remat']} "
                     f"| failed: {err} | - | - | - | - |")
        continue
      lines.append(
          f"| {run} | {r['size']} | {r['params'] / 1e6:.0f}M | "
          f"{r['batch']}x{r['seq_len']} | {attn} | {r['remat']} | "
          f"{r['tokens_per_s'] / 1e3:.0f}k | "
          f"{_f(100 * r['mfu_vs_spec_peak'], 1)}% | "
          f"{_f(100 * r['mfu_vs_measured_peak'], 1)}% | "
          f"{_f(r['temp_bytes'] / 1e9, 1)} | "
          f"{_f(r['peak_bytes_in_use'] / 1e9, 1)} |")
  lines += ["", "\"default\" attention is the decoder's default of that run "
            "(run1: XLA masked attention; run2: the cuDNN fused path it "
            "selects for bf16 on GPU). Temp is the compiled step's temporary "
            "memory; the process peak carries over from earlier rows of the "
            "same run."]
  return "\n".join(lines)


_GIB = float(1 << 30)


def _program_cells(rep) -> list[str]:
  mem, roof = rep["memory"], rep["roofline"]
  used = (mem["argument_bytes"] + mem["temp_bytes"]) / _GIB
  kernels = ", ".join(sorted({k.split("_")[0] for k in rep.get("kernels")
                              or {}})) or "none"
  return [f"{used:.2f} of {mem['hbm_bytes'] / _GIB:.0f}",
          "-" if rep.get("flops_per_step") is None
          else f"{rep['flops_per_step']:.2e}",
          f"{1e3 * roof['step_lower_bound_s']:.0f} ({roof['bound_by']})",
          f"{rep['compile_s']:.0f}", kernels]


def tpu_aot_table(doc) -> str:
  """Issue 30's two shapes and every variant tried (docs/bench/tpu_aot.json),
  against MaxText's `train_compile` of the same model, topology and batch:
  the issue's figures and this stop's rerun."""
  refs = [(label, doc.get(key) or {}) for label, key in
          (("issue", "maxtext_reference"), ("rerun", "maxtext_rerun"))]

  def total(r):
    return r["argument_gib"] + r["temp_gib"]

  head = "; ".join(
      f"{label}: " + ", ".join(f"{k} {total(v):.2f} GiB ({v['compile_s']:.0f} s)"
                               for k, v in sorted(ref.items())
                               if k in ("l1b", "l8b"))
      for label, ref in refs if ref)
  lines = ["Llama-3.2-1B (v5e:2x2, 2 x 4096 tokens per chip) and Llama-3.1-8B "
           "(v5p:2x2x4, 2 x 8192) train steps, bf16 compute over fp32 "
           f"weights, remat, per chip; MaxText `train_compile` {head}:", "",
           "| case | fits | arguments + temporaries, GiB | vs MaxText (issue) "
           "| vs MaxText (rerun) | compile, s | kernels |",
           "|---|---|---|---|---|---|---|"]
  for name, rec in doc["cases"].items():
    rep = rec.get("report") or {}
    tr = rep.get("train_step")
    if tr is None:
      lines.append(f"| {name} | {rec['status']} | - | - | - | - | - |")
      continue
    mem = tr["memory"]
    used = (mem["argument_bytes"] + mem["temp_bytes"]) / _GIB
    vs = []
    for _, ref in refs:
      base = ref.get(name[:3])
      vs.append("-" if not base else f"{100 * (used / total(base) - 1):+.0f}%")
    kernels = ", ".join(sorted({k.split("_")[0] for k in tr.get("kernels")
                                or {}})) or "none"
    lines.append(f"| {name} | {'yes' if mem['fits'] else '**no**'} | "
                 f"{mem['argument_bytes'] / _GIB:.2f} + "
                 f"{mem['temp_bytes'] / _GIB:.2f} = {used:.2f} | {vs[0]} | "
                 f"{vs[1]} | {tr['compile_s']:.0f} | {kernels} |")
  return "\n".join(lines)


def tpu_presets_table(doc) -> str:
  """The paper-scale presets compiled for TPU (docs/bench/tpu_presets.json,
  `python -m jaxlab.experiments.bench.tpu_presets`)."""
  lines = ["Paper-scale presets compiled for TPU from this CPU host "
           "(`--config=NAME:paper`; per chip; step time is a roofline lower "
           "bound, not a measurement; FLOPs analytic):", "",
           "| config | paper's setting | model | topology | program | "
           "tokens / step | fits | GiB used of HBM | FLOPs / step | "
           "bound, ms | compile, s | kernels |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, rec in sorted(doc["cases"].items()):
    rep = rec.get("report") or {}
    scale = rep.get("scale") or {}
    prog = "train_step" if "train_step" in rep else "eval_step"
    first = rep.get(prog)
    head = [name, scale.get("paper", "-"), scale.get("shape", "-"),
            f"{rep.get('topology', '-')} ({rep.get('chips', '-')})"]
    if first is None:
      lines.append("| " + " | ".join(head + [
          "-", "-", rec["status"], "-", "-", "-", "-", "-"]) + " |")
      continue
    fits = rep.get("fits", first["memory"]["fits"])
    lines.append("| " + " | ".join(head + [
        prog.replace("_step", ""), f"{first['tokens_per_step']}",
        "yes" if fits else "**no**"] + _program_cells(first)) + " |")
    for k, v in sorted((rep.get("sampler") or {}).items()):
      lines.append("| " + " | ".join(
          ["", f"sampler {k}: batch {v['batch']}, prompt {v['prompt_len']}, "
               f"new {v['max_new_tokens']}", "", "", k, "-",
           "yes" if v["memory"]["fits"] else "**no**"] + _program_cells(v))
          + " |")
  notes = sorted({((rec.get("report") or {}).get("scale") or {}).get(
      "note", "") for rec in doc["cases"].values()} - {""})
  if notes:
    lines += [""] + [f"Note: {n}." for n in notes]
  return "\n".join(lines)


def data_table(rep) -> str:
  """`bench data`: the hf pipeline's packed tokens/s per worker count
  against the raw `tokenizers` encode rate, and the v5p hosts it feeds."""
  raw, step, m = rep["raw"], rep["step"], rep["machine"]
  lines = [f"Data pipeline (`hf` source, parquet, packed to {rep['seq_len']}"
           f", batch {rep['batch']}; {rep['raw']['texts']} documents, "
           f"{raw['tokens']} tokens; {m['cpu']}, {m['cpu_count']} cores, "
           f"load average {_f(m['loadavg_before'][0], 1)}):", "",
           "| workers | non-pad tok/s | slot tok/s | packing | "
           "of raw encode_batch | v5p hosts fed (8B) |",
           "|---|---|---|---|---|---|"]
  for r in rep["pipeline"]:
    lines.append(
        f"| {r['workers']} | {_f(r['non_pad_tokens_per_s'], 0)} | "
        f"{_f(r['slot_tokens_per_s'], 0)} | "
        f"{_f(100 * r['packing_efficiency'], 0)}% | "
        f"{_f(r['ratio_to_raw'])} | "
        f"{_f(r['non_pad_tokens_per_s'] / step['host_tokens_per_s'], 1)} |")
  lines += ["", f"Raw `tokenizers` encode_batch (all cores): "
            f"{_f(raw['tokens_per_s'], 0)} tok/s; one text at a time: "
            f"{_f(raw['encode_loop']['tokens_per_s'], 0)} tok/s. One v5p "
            f"host ({step['chips_per_host']} chips x "
            f"{_f(step['peak_bf16_flops_per_chip'] / 1e12, 0)} TFLOP/s) "
            f"trains {step['shape']} (T = {step['step_seq_len']}, "
            f"{_f(step['flops_per_token'] / 1e9, 1)} GFLOP/token) at the "
            f"roofline bound on {_f(step['host_tokens_per_s'], 0)} tok/s."]
  return "\n".join(lines)


def long_forward_table(rep) -> str:
  """`bench long_forward`: one long forward per attention kernel."""
  m = rep["machine"]
  labels = {"xla": "XLA (`jax.nn.dot_product_attention`: the [heads, T, T] "
                   "scores materialised)",
            "chunked": "chunked (`attention_impl=\"chunked\"`: "
                       "FlashAttention's online softmax, key blocks up to "
                       "the diagonal; forward only)"}
  lines = [f"One long forward ({rep['init_from']}, fp32, {rep['length']} "
           "tokens of real text, perplexity; each kernel in its own "
           f"process; {m['cpu']}, {m['cpu_count']} cores, load average "
           f"{_f(rep['load_average'][0], 1)} at the end):", "",
           "| attention | seconds (with compile) | peak RSS | perplexity |",
           "|---|---|---|---|"]
  for impl, r in rep["impls"].items():
    lines.append(f"| {labels.get(impl, impl)} | {_f(r['seconds'], 1)} | "
                 f"{_f(r['peak_rss_gb'], 1)} GB | {r['perplexity']!r} |")
  return "\n".join(lines)


def main(argv=()):
  args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
  root = args.get("dir", "docs/bench")
  out, reps = [], {}
  for name, fn in (("decode_cpu.json", decode_table),
                   ("train_cpu.json", train_table),
                   ("memory_cpu.json", memory_table),
                   ("data_cpu.json", data_table),
                   ("long_forward_cpu.json", long_forward_table)):
    path = os.path.join(root, name)
    if os.path.exists(path):
      with open(path) as f:
        reps[name] = json.load(f)
      out.append(fn(reps[name]))
  prof = profile_table(reps.get("decode_cpu.json"), reps.get("train_cpu.json"))
  if prof:
    out.insert(min(2, len(out)), prof)
  gpu = []
  for path in sorted(glob.glob(os.path.join(root, "h200_run*.json"))):
    with open(path) as f:
      gpu.append((os.path.basename(path), json.load(f)))
  if gpu:
    out.append(gpu_table(gpu))
  aot = os.path.join(root, "tpu_aot.json")
  if os.path.exists(aot):
    with open(aot) as f:
      out.append(tpu_aot_table(json.load(f)))
  presets = os.path.join(root, "tpu_presets.json")
  if os.path.exists(presets):
    with open(presets) as f:
      out.append(tpu_presets_table(json.load(f)))
  text = "\n\n".join(out)
  print(text)
  return text


if __name__ == "__main__":
  main(sys.argv[1:])
