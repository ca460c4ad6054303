"""One long forward of a checkpoint: time and memory per attention kernel.

    python -m jaxlab.experiments.bench long_forward \
        [--init_from=smollm2-135m-instruct] [--length=12288] \
        [--impls=xla,chunked] [--out=FILE]

The perplexity of the first `length` tokens of real text (Python's own
documentation, `jaxlab.data.pydoc_text.books`, with the checkpoint's
tokenizer) is computed once per attention kernel (`DecoderConfig.
attention_impl`: "xla" is jax's dot_product_attention, whose XLA:CPU path
materialises every layer's [heads, T, T] scores; "chunked" is
`jaxlab.nn.attention.chunked_causal_attention`), each in a fresh process so
that its peak resident memory is its own. `seconds` includes compiling
(the run is one call, as a long-context evaluation makes it). The
perplexities must agree: both kernels compute the same function. Prints
one JSON object (also written to --out when given).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from jaxlab.experiments import bench
from jaxlab.experiments import results as results_lib


def measure(init_from: str, length: int, impl: str) -> dict:
  """Loads `init_from`, runs one forward of `length` tokens under `impl`;
  returns {"seconds", "perplexity", "peak_rss_gb"} (the process's peak)."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from jaxlab.data import pydoc_text
  from jaxlab.evals import long_context as lc
  from jaxlab.io import pretrained
  # pylint: enable=g-import-not-at-top
  model, _ = pretrained.load(init_from, dtype="float32")
  tok = pretrained.tokenizer(init_from)
  text = "\n\n".join(b["text"] for b in pydoc_text.books())
  ids = np.asarray(tok.encode(text, add_bos=True)[:length], np.int32)
  if len(ids) < length:
    raise ValueError(f"--length={length}: the text has {len(ids)} tokens")
  variant = lc.with_rope_scaling(
      model, model.cfg.rope_scaling,
      attention_impl=None if impl == "xla" else impl)
  t0 = time.perf_counter()
  out = lc.chunked_perplexity(variant, ids[None], chunk_len=length,
                              batch_size=1)
  seconds = time.perf_counter() - t0
  rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return {"seconds": round(seconds, 1), "perplexity": out["perplexity"],
          "peak_rss_gb": round(rss_kb / 2 ** 20, 2)}


def main(argv=None):
  p = argparse.ArgumentParser(prog="python -m jaxlab.experiments.bench "
                              "long_forward")
  p.add_argument("--init_from", default="smollm2-135m-instruct")
  p.add_argument("--length", type=int, default=12288)
  p.add_argument("--impls", default="xla,chunked")
  p.add_argument("--out", default="")
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  impls = [s for s in args.impls.split(",") if s]
  if args.child:
    print(json.dumps(measure(args.init_from, args.length, impls[0])))
    return
  rows = {}
  for impl in impls:
    proc = subprocess.run(
        [sys.executable, "-m", "jaxlab.experiments.bench", "long_forward",
         "--child", f"--init_from={args.init_from}",
         f"--length={args.length}", f"--impls={impl}"],
        capture_output=True, text=True, check=False, env=dict(os.environ))
    if proc.returncode:
      raise SystemExit(f"{impl}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    rows[impl] = json.loads(proc.stdout.strip().splitlines()[-1])
  report = {"benchmark": "long_forward", "init_from": args.init_from,
            "length": args.length, "impls": rows,
            "machine": results_lib.machine_info(),
            "load_average": list(os.getloadavg())}
  bench.emit(report, args.out or None)


if __name__ == "__main__":
  main()
