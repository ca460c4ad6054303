"""Dispatches `python -m jaxlab.experiments.bench NAME [flags]`.

NAME is any module of this package with a `main(argv)` (decode, train,
text_metrics, ...): a new benchmark is a new file, nothing to register.
"""

import importlib
import os
import pkgutil
import sys

# `gpu` runs as `python -m jaxlab.experiments.bench.gpu` on the accelerator host.
_BENCHMARKS = tuple(sorted(
    info.name for info in pkgutil.iter_modules([os.path.dirname(__file__)])
    if not info.name.startswith("_") and info.name != "gpu"))


def main(argv: list[str]) -> None:
  if len(argv) < 2 or argv[1] not in _BENCHMARKS:
    raise SystemExit(
        f"usage: python -m jaxlab.experiments.bench {{{','.join(_BENCHMARKS)}}} "
        f"[flags]; got {argv[1:2] or 'nothing'}")
  # Imported lazily: each benchmark pulls in its own heavy dependencies.
  module = importlib.import_module(f"jaxlab.experiments.bench.{argv[1]}")
  module.main(argv[2:])


if __name__ == "__main__":
  main(sys.argv)
