"""Builds colabs/streaming_thinker.ipynb (run: python colabs/_build_streaming_thinker_colab.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", """# StreamingThinker: LLMs can think while reading

Paper K (arXiv 2510.17238). Instead of waiting for the whole input, the
model writes one reasoning unit per input sentence as the sentences arrive,
then a final (deeper) segment and the answer. Training uses one sequence
`[source][target]` with a **streaming attention mask** (target segment i
sees source segments 0..i, shifted one row so that the token closing a
segment already sees the next sentence) and **streaming positions** (targets
restart at 0). Inference keeps **two KV caches** (source and target): READ
encodes a new sentence into the source cache, WRITE merges the caches and
decodes one token. This notebook trains tiny decoders on running-sum
stories and compares streaming with the batch and interleaved baselines on
accuracy, TTFT and Delay under a simulated input clock."""),
    ("code", """import json, os
import numpy as np
from jaxlab import main as launcher
from jaxlab.configs import streaming_thinker as st_configs
from jaxlab.data.synthetic import running_sum as rs
from jaxlab.decoding import streaming as sd
from jaxlab.objectives import streaming as st"""),
    ("md", """## The streaming mask and positions
Source segments of 2, 1, 2 tokens, target segments of 2, 2, 1 tokens, one
padding slot (1 = may attend)."""),
    ("code", """m = np.asarray(st.streaming_mask([2, 1, 2], [2, 2, 1], 11)).astype(int)
for row in m:
  print(" ".join(map(str, row)))
print("SPE positions:", np.asarray(st.streaming_positions([2, 1, 2], [2, 2, 1], 11)).tolist())
print("contiguous:   ", np.asarray(st.streaming_positions([2, 1, 2], [2, 2, 1], 11, contiguous=True)).tolist())"""),
    ("md", "## A running-sum story in the StreamingThinker format (depth D2)"),
    ("code", """story = rs.Story(values=[3, 4, -2], totals=[3, 7, 5])
ex = rs.to_example(story, "D2")
print("source:", " | ".join(" ".join(s) for s in ex.source))
print("target:", " | ".join(" ".join(t) for t in ex.target))"""),
    ("md", """## The arrival clock
Input arrives at k tokens per tick; one decode step is one tick. A
streaming READ runs beside the writer, the baselines' READs share the one
worker."""),
    ("code", """trace = [("read", 0), ("seed", 1), ("seed", 2), ("read", 1), ("seed", 3),
         ("write", 10), ("write", 11), ("read", 2), ("write", 12), ("write", 13)]
for concurrent in (True, False):
  c = sd.arrival_clock(trace, [2, 3, 3], tokens_per_tick=1.0, concurrent_reads=concurrent,
                       read_ticks_per_token=1.0)
  print(f"concurrent={concurrent}: TTFT {c.ttft_tokens} tokens, Delay {c.delay_ticks} ticks")"""),
    ("md", "## Train streaming / batch / interleaved models and decode held-out stories"),
    ("code", """config = st_configs.get_config(PRESET)
summary = launcher.run_experiment(config, WORKDIR)
results = json.load(open(os.path.join(WORKDIR, "results.json")))
for rec in summary["per_seed"]:
  for method, out in rec["methods"].items():
    m = out["metrics"]
    print(f"seed {rec['seed']} {method:11s} acc {100 * m['accuracy']:5.1f}%  "
          f"TTFT {m['ttft_tokens']:5.1f}  "
          + "  ".join(f"Delay@{k:g} {m[sd.delay_key(k)]:5.1f}" for k in config.clock.tokens_per_tick))"""),
    ("code", """for method, out in summary["per_seed"][0]["methods"].items():
  s = out["samples"][0]
  print(method, "|", s["story"])
  print("   ->", s["reasoning"], "| want", s["answer"])"""),
]


def build():
  # The test runs "smoke"; "tiny" is the README table's preset.
  return _setup_cell.notebook(CELLS, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "streaming_thinker.ipynb")
