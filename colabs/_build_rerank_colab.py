"""Builds colabs/rerank_cl_vs_sft.ipynb (run: python colabs/_build_rerank_colab.py)."""

import os
import sys

import nbformat

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position

CELLS = [
    ("md", """# SFT or contrastive learning for (multimodal) LLM reranking?

Paper A (arXiv 2510.14824) decomposes the gradient of both reranking losses
into a **weight** W (how hard to push a document) times a **direction** D
(which logit combination to push). `jaxlab.objectives.rerank` implements the
scores, native CL / SFT losses and the unified surrogate whose gradient is
exactly W·D, with W ∈ {CL, SFT, constant, constant+τ-mask} and
D ∈ {CL, SFT, random, multi-token}. This notebook trains the W×D cells and
reranks held-out queries: by default (`probe,tiny`) on the spec's embedding
miniature (an MLP with a frozen, pretrained yes/no head); with the `mm`
preset on the multimodal reranker, ViT patch tokens inside a decoder that is
a tiny Hugging Face Qwen2 checkpoint, imported with `jaxlab.io.hf.load` and
fine-tuned with LoRA (the LM head, i.e. the directions M_y and M_n, frozen)."""),
    ("code", """import os, json, tempfile
import numpy as np
import jax, jax.numpy as jnp
import matplotlib.pyplot as plt
from jaxlab import main as launcher
from jaxlab.configs import rerank as rerank_configs
from jaxlab.data.synthetic import retrieval as synth
from jaxlab.objectives import rerank"""),
    ("md", "## The weights: CL normalises over the group, SFT per document"),
    ("code", """z_yes = jnp.array([[1.0, 0.5, 0.0, -0.5, -1.0]])  # positive first
z_no = jnp.zeros_like(z_yes)
for name in ("cl", "sft", "constant", "constant_tau_mask"):
  print(f"{name:18s}", np.round(np.asarray(rerank.weights(name, z_yes, z_no)), 3))"""),
    ("md", "## Synthetic universal retrieval: one example per task"),
    ("code", """src = synth.SyntheticRetrieval(4, seed=0, num_negatives=3)
fig, axes = plt.subplots(1, 4, figsize=(12, 3))
for ax, i in zip(axes, range(4)):
  ex = src[i]
  img = ex["query"]["image"] if ex["query"]["image"] is not None else ex["positives"][0]["image"]
  if img is not None:
    ax.imshow(img)
  ax.set_title(f'{ex["task"]}: {ex["query"]["text"] or "<image>"}', fontsize=8)
  ax.axis("off")
  print(ex["task"], "| query:", ex["query"]["text"], "| positive:", ex["positives"][0]["text"],
        "| negatives:", [n["text"] for n in ex["negatives"]])"""),
    ("md", "## Train the W×D cells and rerank held-out queries"),
    ("code", """config = rerank_configs.get_config(PRESET)
workdir = tempfile.mkdtemp(prefix="rerank_colab_")
summary = launcher.run_experiment(config, workdir)
results = json.load(open(os.path.join(workdir, "results.json")))
print(open(os.path.join(workdir, "table.md")).read())"""),
    ("code", """backbone = os.path.join(workdir, "backbone")  # mm preset only
if os.path.isdir(backbone):
  from jaxlab.io import hf
  _, dcfg = hf.load(backbone)
  print(f"imported decoder: {dcfg.num_layers} layer(s), dim {dcfg.dim}, "
        f"vocab {dcfg.vocab_size}; LoRA rank {config.lora.rank} on "
        + ", ".join(config.lora.targets))"""),
    ("code", """table = results["extra"]["table"]  # jaxlab.experiments.results schema
assert all(np.isfinite(r["ndcg@10_mean"]) for r in table)
for r in table:
  print(f'{r["cell"]:24s} nDCG@10 {100 * r["ndcg@10_mean"]:.1f} ± {100 * r["ndcg@10_std"]:.1f}'
        f'  mean W_CL-={r["w_cl_neg_mean"]:.3f}  W_SFT-={r["w_sft_neg_mean"]:.3f}')"""),
]


def build() -> nbformat.NotebookNode:
  # The test runs the `tiny` preset; "probe,tiny" is the README table.
  return _setup_cell.notebook(CELLS, default_preset="probe,tiny")


# Notebook file -> its builder (the tests discover builders by this).
NOTEBOOKS = {"rerank_cl_vs_sft.ipynb": build}


if __name__ == "__main__":
  _setup_cell.write(build(), "rerank_cl_vs_sft.ipynb")
