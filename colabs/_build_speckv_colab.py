"""Builds colabs/speckv.ipynb (run: python colabs/_build_speckv_colab.py)."""

import os
import sys

import nbformat

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", """# Draft-based approximate inference: SpecKV, SpecPC, SpecKV-PC

Paper M (arXiv 2506.08373). A long prompt makes the KV cache and the
prefill expensive. **SnapKV** keeps, per KV head, the keys the last
`window` prompt queries attend to most. **SpecKV** first lets a small
*draft* model write its answer and appends it to the prompt, so the target
scores the keys with the queries of (an estimate of) its own future
answer. **SpecPC** drops prompt tokens instead, ranked by the draft's
attention, and **SpecKV-PC** chains the two, reusing the draft tokens. This
notebook trains a small target and draft on RULER-like retrieval and
compares every method at a few cache budgets C_max."""),
    ("code", """import json, os
import numpy as np
import jax, jax.numpy as jnp
from jaxlab import main as launcher
from jaxlab.configs import speckv as speckv_configs
from jaxlab.data.word_tokenizer import WordTokenizer
from jaxlab.decoding import kv_policies, prompt_compression as pc
from jaxlab.evals import ruler_task"""),
    ("md", "## Key selection on a toy example (window 2, kernel 1)"),
    ("code", """# One KV head, one query head, d = 1: the query "looks for" key value 3.
keys = jnp.asarray([[[[0.], [3.], [0.], [1.], [0.], [0.], [0.], [0.]]]])
q = jnp.full((1, 1, 2, 1), 4.0)
idx = kv_policies.select_indices(q, keys, budget=4, window=2, kernel=1)
print("kept keys:", np.asarray(idx)[0, 0].tolist())"""),
    ("md", "## A held-out prompt (question first)"),
    ("code", """config = speckv_configs.get_config(PRESET)
tok = WordTokenizer()
ex = ruler_task.held_out(tok, config)[-1]
print(tok.decode(ex.prompt_ids)[:300], "...")
print("answer:", ex.answer)"""),
    ("md", "## Train the target and the draft, then run every method"),
    ("code", """summary = launcher.run_experiment(config, WORKDIR)
rec = summary["per_seed"][0]
for name, per_budget in rec["methods"].items():
  for b, m in per_budget.items():
    print(f"C_max {b} {name:9s} exact {100 * m['exact']:5.1f}%  "
          f"peak cache {m['peak_cache']}  decode cache {m['decode_cache']}")
print("Spearman(draft, target importance) =", round(rec["spearman"], 3))"""),
    ("code", """results = json.load(open(os.path.join(WORKDIR, "results.json")))
print([t["id"] for t in results["tables"]])"""),
]


def build() -> nbformat.NotebookNode:
  # The test runs "smoke"; "tiny" is the README table's preset.
  return _setup_cell.notebook(CELLS, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "speckv.ipynb")
