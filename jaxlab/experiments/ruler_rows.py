r"""Writes RULER niah rows for a checkpoint's tokenizer (`jaxlab.data.ruler_niah`).

    python -m jaxlab.experiments.ruler_rows /tmp/ruler \
        --tokenizer=smollm2-135m-instruct --max_seq_length 12288 --num_samples 8

`--tokenizer` is an `init_from` spec (a Hub name, a checkpoint directory, a
GGUF file, or a shipped name such as smollm2-135m-instruct), read by
`jaxlab.io.pretrained.tokenizer`; lengths are counted in its tokens without
special tokens, as RULER's own `hf` tokenizer counts them. Writes
`DEST/niah_single_1/<subset>.jsonl` (`config.ruler.path=DEST`).
"""

import argparse
import sys
from collections.abc import Sequence

from jaxlab.data import ruler_niah


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(
      prog="python -m jaxlab.experiments.ruler_rows",
      description="RULER niah rows (<dest>/<task>/<subset>.jsonl) for a "
                  "checkpoint's tokenizer.")
  p.add_argument("dest")
  p.add_argument("--tokenizer", required=True, help="an init_from spec")
  p.add_argument("--max_seq_length", type=int, nargs="+", required=True)
  p.add_argument("--num_samples", type=int, default=8)
  p.add_argument("--random_seed", type=int, default=42)
  p.add_argument("--subset", default="validation")
  args = p.parse_args(sys.argv[1:] if argv is None else argv)
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  tok = pretrained.tokenizer(args.tokenizer)
  path = ruler_niah.write(args.dest, lambda s: len(tok.encode(s)),
                          max_seq_lengths=args.max_seq_length,
                          num_samples=args.num_samples,
                          random_seed=args.random_seed, subset=args.subset)
  print(f"{path}: {args.num_samples} rows per length "
        f"{args.max_seq_length}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
