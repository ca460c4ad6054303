"""Benchmarks that print one JSON object: `python -m jaxlab.experiments.bench NAME`.

    python -m jaxlab.experiments.bench decode   # prefill/decode tokens/s vs torch
    python -m jaxlab.experiments.bench train    # train-step throughput
"""

import json


def emit(report, out: str | None = None, *, indent: int = 1) -> str:
  """Prints `report` as JSON and writes it to `out` (when given)."""
  text = json.dumps(report, indent=indent)
  print(text)
  if out:
    with open(out, "w") as f:
      f.write(text + "\n")
  return text
