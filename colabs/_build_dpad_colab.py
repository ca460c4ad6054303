"""Builds colabs/dpad.ipynb (run: python colabs/_build_dpad_colab.py)."""

import os
import sys

import nbformat

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", """# DPad: diffusion LMs decode faster when they drop the far suffix

Paper L (arXiv 2508.14148). A masked-diffusion LM (LLaDA) fills a canvas
`[prompt | MASK × gen_len]` block by block; every step attends to the whole
canvas, although the far suffix is only MASK tokens. **DPad** keeps, once per
block, a random subset of the suffix whose keep probability decays with the
distance (a Gaussian inside a sliding window W, nothing beyond) and runs the
model on the prompt, the decoded part, the block and the kept suffix with
their *original* RoPE positions. It composes with Fast-dLLM's confidence
threshold, early termination and prefix cache. This notebook trains a tiny
4-layer LLaDA model to copy digit strings (the answer followed by EOS
padding up to the generation length) and compares the decoding variants."""),
    ("code", """import json, os
import numpy as np
import jax
import matplotlib.pyplot as plt
from jaxlab import main as launcher
from jaxlab.configs import dpad as dpad_configs
from jaxlab.data.synthetic import arith_chains as ac
from jaxlab.decoding import diffusion
from jaxlab.evals import diffusion_decode"""),
    ("md", "## The keep probability (W = 64, k = 3, a = 1.6) and the schedule"),
    ("code", """p = diffusion.suffix_keep_prob(64, k=3.0, a=1.6)
print("P(keep d=0) =", round(float(p[0]), 4), "| E[#kept] =", round(float(p.sum()), 2))
print("num_transfer_tokens(10, 4) =", diffusion.num_transfer_tokens(10, 4))
plt.plot(p); plt.xlabel("distance d from the block end"); plt.ylabel("P(keep)");"""),
    ("md", "## A training example"),
    ("code", """c = ac.make_chains(0, 1, min_ops=6, max_ops=6, kind="copy")[0]
print("prompt:", ac.decode(ac.pad_prompt(c.prompt, 16, "right")),
      "| answer:", ac.decode(c.answer) + "$$$...")"""),
    ("md", "## Train (LLaDA SFT objective) and decode every variant"),
    ("code", """config = dpad_configs.get_config(PRESET)
summary = launcher.run_experiment(config, WORKDIR)
results = json.load(open(os.path.join(WORKDIR, "results.json")))
for g, variants in summary["per_seed"][0]["decode"].items():
  for name, m in variants.items():
    print(f"gen_len {g} {name:26s} EM {100 * m['exact_match']:5.1f}  NFE {m['nfe']:6.1f}"
          f"  tokens {m['tokens_processed']:9.0f}  speed-up {m['speedup']:5.2f}")"""),
    ("code", """prompts, chains = diffusion_decode.held_out(config, 2)
kw = diffusion_decode.variant_kwargs(config, "+all")
model = diffusion_decode.load_params(config, os.path.join(WORKDIR, "seed0", "params.npz"))
out = diffusion.generate(model, prompts, gen_len=config.decode.gen_lens[0], **kw)
for pr, g, c in zip(prompts, out.tokens, chains):
  print(ac.decode(pr), "->", ac.decode(diffusion.truncate_at_eos(g, ac.EOS)), "| want", ac.decode(c.answer))"""),
]


def build() -> nbformat.NotebookNode:
  # The test runs "smoke"; "tiny" is the README table's preset.
  return _setup_cell.notebook(CELLS, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "dpad.ipynb")
