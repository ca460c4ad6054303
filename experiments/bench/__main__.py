"""Dispatches `python -m experiments.bench {decode,train,text_metrics} [flags]`."""

import importlib
import sys

_BENCHMARKS = ("decode", "train", "text_metrics")


def main(argv: list[str]) -> None:
  if len(argv) < 2 or argv[1] not in _BENCHMARKS:
    raise SystemExit(
        f"usage: python -m experiments.bench {{{','.join(_BENCHMARKS)}}} "
        f"[flags]; got {argv[1:2] or 'nothing'}")
  # Imported lazily: each benchmark pulls in its own heavy dependencies.
  module = importlib.import_module(f"experiments.bench.{argv[1]}")
  module.main(argv[2:])


if __name__ == "__main__":
  main(sys.argv)
