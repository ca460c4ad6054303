"""Writes colabs/stabletoken.ipynb (paper E, StableToken miniature).

    python colabs/_build_stabletoken_colab.py

The notebook runs the experiment with the config arg in the environment
variable JAXLAB_COLAB_PRESET (default "tiny"; the test uses "tiny,smoke").
"""

import os
import sys

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position


def build() -> nbformat.NotebookNode:
  cells = [
      ("md", 
          "# StableToken: noise-robust speech tokens (paper E), miniature\n\n"
          "Voting-LFQ projects each 25 Hz frame with $n$ parallel linear "
          "branches $p_i = W_i h + b_i$, takes each branch's sign code "
          "(straight-through), averages them (soft vote, training) and "
          "takes the sign of the average at inference (bitwise majority). "
          "During training a random minority of branches reads the encoding "
          "of a perturbed copy of the waveform, and a consensus loss pulls "
          "the branches together. Spec: `papers/A-G.md` section E."),
      ("code", """\
import jax.numpy as jnp
from jaxlab.nn import quantizers as q
# 5 voters x 3 bits (little-endian: token = sum_j [bit_j > 0] 2^j).
codes = jnp.array([[1, -1, 1], [1, 1, -1], [-1, -1, 1], [1, -1, -1], [1, 1, 1]], float)
branch_tokens = [int(k) for k in q.bits_to_index(codes)]
voted = int(q.bits_to_index(q.majority_bits(codes, axis=0)))
print("branch tokens:", branch_tokens, "| voted token:", voted)
print("branches agreeing with the vote:", sum(k == voted for k in branch_tokens), "of 5")"""),
      ("md", 
          "Four of five branches chose another token, yet every bit's "
          "majority gives the same token: this is the bit-level error "
          "correction the experiment counts.\n\n"
          "## From audio\n\nSynthetic speech (phones as formant patterns, "
          "speaker variation), a perturbation at a target SNR, and log-mel "
          "features computed in JAX."),
      ("code", """\
import numpy as np
from jaxlab.data import audio
from jaxlab.data.synthetic import speech
scfg = speech.SpeechConfig(min_phones=5, max_phones=5, max_frames=3)
utt = speech.make_split(scfg, 1, seed=0)
wave = utt["waves"][0, :utt["num_samples"][0]]
rng = np.random.default_rng(0)
for kind, value in audio.EVAL_PERTURBATIONS.items():
  if kind in ("gaussian", "pink", "brown"):
    noisy = audio.perturb(wave, kind, value, rng)
    print(f"{kind:8s} target SNR {value:.0f} dB, measured {audio.snr_db(wave, noisy):.2f} dB")
print("log-mel features:", audio.log_mel(wave[None], n_mels=40).shape)"""),
      ("md", 
          "## Full model vs ablations\n\nUED% between the tokens of "
          "held-out clean utterances and their noisy copies (lower = more "
          "stable), with the CTC phone error rate (PER) that shows whether "
          "the variants are at matched accuracy."),
      ("code", """\
from jaxlab import main as launcher
from jaxlab.configs import stabletoken as cfg_mod
from IPython.display import Image, display
config = cfg_mod.get_config(PRESET)
result = launcher.run_experiment(config, WORKDIR)
print(result["table_markdown"])
display(Image(result["plot"]))"""),
      ("md",
          "Checks a reader can redo from `result`: the table's average UED "
          "is the mean of its per-perturbation columns, and each table row "
          "shows its variant's mean over seeds."),
      ("code", """\
import numpy as np
summary = result["summary"]
kinds = [k[4:] for k in next(iter(summary.values())) if k.startswith("ued_") and k != "ued_avg"]
avg_ok = all(np.isclose(np.mean(s["ued_avg"]), np.mean([np.mean(s["ued_" + k]) for k in kinds]))
             for s in summary.values())
from jaxlab.objectives.stabletoken_train import LABELS  # row labels of the results table
rows_ok = all(f"| {LABELS.get(v, v)} | {np.mean(s['ued_avg']):.1f}" in result["table_markdown"] for v, s in summary.items())
print("variants:", ", ".join(summary), "| perturbations:", len(kinds))
print("average UED = mean over perturbations:", avg_ok, "| rows = per-variant means:", rows_ok)"""),
  ]
  return _setup_cell.notebook(cells, default_preset="tiny")


if __name__ == "__main__":
  _setup_cell.write(build(), "stabletoken.ipynb")
