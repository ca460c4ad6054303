"""Experiment "rope_extension": train short, evaluate long under every scaling.

For each seed: train a tiny byte-level decoder at `task.train_len` on a
passkey corpus (`PasskeySource`), then, training-free, rebind its parameters
to every `rope_scaling` in `config.methods` (`long_context.with_rope_scaling`)
and measure passkey exact-match accuracy over a depth grid and chunked
perplexity at each `train_len * factor`. Writes `results.json` (per-seed
values and mean +- std tables) and `passkey.png` / `perplexity.png` /
`cumulative_scale.png`.
"""

import copy
import json
import os
from typing import Any

import numpy as np
from flax import nnx

from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.evals import long_context as lc
from jaxlab.nn import rope
from jaxlab.train import trainer

# Lower-case filler so "KEY" only appears in the needle and the question.
SENTENCES = (
    "the cat sat on the mat.", "a bird sang in the tree.",
    "rain fell on the old roof.", "we walked along the river.",
    "the shop opens at nine.", "snow covered the quiet hill.",
    "a train left the station.", "the lamp glowed all night.",
    "she read a long letter.", "the wind moved the grass.",
    "two boats sailed north.", "bread was baked at dawn.",
    "the clock struck twelve.", "he painted the door blue.",
    "a fox ran past the fence.", "the soup was warm and thick.")
NEEDLE = "KEY {value}. "
QUESTION = "Q: KEY? "


def _filler(rng: np.random.Generator, n: int = 40) -> str:
  return " ".join(SENTENCES[i] for i in rng.integers(0, len(SENTENCES), n))


def passkey(tok, *, length: int, depth: float, rng: np.random.Generator,
            digits: int = 5) -> lc.RetrievalExample:
  """A passkey prompt with random filler (the experiment's task)."""
  return lc.passkey_example(tok, length=length, depth=depth, rng=rng,
                            digits=digits, prefix="", filler=_filler(rng),
                            needle=NEEDLE, question=QUESTION)


def document(tok, length: int, rng: np.random.Generator,
             digits: int) -> np.ndarray:
  """`length + 1` tokens: a passkey prompt at a random depth + its answer."""
  ex = passkey(tok, length=length + 1 - digits, depth=float(rng.uniform()),
               rng=rng, digits=digits)
  return np.concatenate([ex.prompt_ids, ex.answer_ids]).astype(np.int32)


class PasskeySource:
  """Random-access LM examples (inputs/targets/loss_mask) of passkey docs."""

  def __init__(self, tok, *, num: int, length: int, digits: int, seed: int,
               answer_weight: float = 1.0):
    self.tok, self.num, self.length, self.digits = tok, num, length, digits
    self.seed, self.answer_weight = seed, answer_weight

  def __len__(self) -> int:
    return self.num

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    doc = document(self.tok, self.length, np.random.default_rng(
        [self.seed, int(i)]), self.digits)
    # The answer digits weigh `answer_weight` times a filler token: the
    # retrieval signal is 5 of ~100 targets, and upweighting it shortens
    # the CPU training run (a choice of this miniature, not of the paper).
    mask = np.ones(self.length, np.float32)
    mask[-self.digits:] = self.answer_weight
    return {"inputs": doc[:-1], "targets": doc[1:], "loss_mask": mask}


def train_model(config, workdir: str, seed: int, tok):
  """Trains one seed (resumable per seed) and returns the model."""
  cfg = copy.deepcopy(config)
  t = config.task
  with cfg.unlocked():
    cfg.seed = int(seed)
    cfg.train.seq_len = int(t.train_len)
  source = PasskeySource(tok, num=int(t.train_examples),
                         length=int(t.train_len), digits=int(t.digits),
                         seed=int(t.data_seed) + 1000 * int(seed),
                         answer_weight=float(t.answer_weight))
  res = trainer.train(cfg, workdir, train_source=source)
  model, _ = nnx.merge(res["train_state"].graphdef, res["train_state"].state)
  return model, float(res.get("loss", float("nan")))


def evaluate_seed(model, config, tok) -> dict[str, Any]:
  t = config.task
  train_len = int(t.train_len)
  lengths = [train_len * int(f) for f in t.eval_factors]
  rng = np.random.default_rng(int(t.data_seed) + 7)
  docs = {n: np.stack([document(tok, n - 1, rng, int(t.digits))
                       for _ in range(int(t.eval_docs))]) for n in lengths}
  grids = {n: lc.retrieval_grid(passkey, tok, lengths=[n - int(t.digits)],
                                depths=list(t.depths),
                                samples=int(t.samples),
                                seed=int(t.data_seed) + 11,
                                digits=int(t.digits)) for n in lengths}
  bs = int(t.eval_batch_size)
  memo = {}

  def retrieval(m, n):  # one pass gives both passkey metrics
    key = (id(m), n)
    if key not in memo:
      memo.clear()
      memo[key] = lc.evaluate_retrieval(m, grids[n], batch_size=bs)
    return memo[key]

  tasks = {
      "passkey": lambda m, n: retrieval(m, n)["exact"],
      "passkey_token_acc": lambda m, n: retrieval(m, n)["token_accuracy"],
      "perplexity": lambda m, n: lc.chunked_perplexity(
          m, docs[n], chunk_len=n, batch_size=bs)["perplexity"],
  }
  return lc.train_short_test_long(model, train_len=train_len,
                                  eval_lengths=lengths, tasks=tasks,
                                  methods=tuple(config.methods))


def summarize(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
  """{metric: {method: {"mean": [per length], "std": [...]}}}."""
  out: dict[str, Any] = {}
  for metric in per_seed[0]["metrics"]:
    out[metric] = {}
    for method in per_seed[0]["methods"]:
      vals = np.array([r["metrics"][metric][method] for r in per_seed])
      out[metric][method] = {
          "mean": vals.mean(0).tolist(),
          "std": (vals.std(0, ddof=1) if len(vals) > 1
                  else np.zeros(vals.shape[1])).tolist()}
  return out


def markdown_table(summary: dict[str, Any], lengths: list[int],
                   train_len: int) -> str:
  head = "| method | " + " | ".join(
      f"{n} ({n // train_len}x)" for n in lengths) + " |"
  lines = []
  for metric, fmt in (("passkey", "{:.2f} ± {:.2f}"),
                      ("perplexity", "{:.2f} ± {:.2f}")):
    lines += [f"**{metric}**", "", head,
              "|---" * (len(lengths) + 1) + "|"]
    for method, v in summary[metric].items():
      cells = [fmt.format(m, s) for m, s in zip(v["mean"], v["std"])]
      lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines.append("")
  return "\n".join(lines)


def _plot_metric(summary, metric, lengths, path, log_y=False):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 3.6))
  for method, v in summary[metric].items():
    ax.errorbar(lengths, v["mean"], yerr=v["std"], marker="o", capsize=2,
                label=method)
  ax.set_xscale("log", base=2)
  if log_y:
    ax.set_yscale("log")
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel(metric)
  ax.legend(fontsize=7, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def plot_cumulative_scale(path: str, *, head_dim: int = 128,
                          base: float = 1e4, original: int = 4096,
                          factor: float = 16.0) -> str:
  """MrRoPE Fig. 3 (qualitative): s_i and lambda_i for every method."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  kw = dict(head_dim=head_dim, base=base, factor=factor,
            original_max_position=original)
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
  for m in ("pi", "ntk", "yarn", "yarn_rotation", "llama3", "mrope_uni",
            "mrope_pro"):
    a1.plot(rope.cumulative_scale(m, **kw), label=m)
    a2.plot(np.log(rope.step_ratio(m, **kw)), label=m)
  a1.set_yscale("log")
  a1.set_xlabel("pair i")
  a1.set_ylabel("cumulative scale s_i")
  a2.set_xlabel("pair i")
  a2.set_ylabel("log lambda_i = log s_{i+1}/s_i")
  a1.legend(fontsize=7)
  fig.suptitle(f"D={head_dim}, b={base:g}, L={original}, S={factor:g}")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def run(config, workdir: str) -> dict[str, Any]:
  tok = ByteTokenizer()
  per_seed, final_losses = [], []
  for seed in config.seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    done = os.path.join(seed_dir, "eval.json")
    if os.path.exists(done):
      with open(done) as f:
        rec = json.load(f)
    else:
      model, loss = train_model(config, seed_dir, seed, tok)
      rec = {"seed": int(seed), "final_loss": loss,
             **evaluate_seed(model, config, tok)}
      with open(done, "w") as f:
        json.dump(rec, f, indent=1)
    per_seed.append(rec)
    final_losses.append(rec["final_loss"])
  lengths = per_seed[0]["lengths"]
  train_len = int(config.task.train_len)
  summary = summarize(per_seed)
  kw = dict(head_dim=int(config.model.dim) // int(config.model.num_heads),
            base=float(config.model.rope_theta))
  roots = {}
  for m in config.methods:
    opts = lc.scaling_for(m, train_len=train_len, eval_len=lengths[-1]) or {}
    opts = {k: v for k, v in opts.items() if k != "method"}
    if m == "dynamic_ntk":
      opts["seq_len"] = lengths[-1]
    inv, _ = rope.inv_freq(m, **kw, **opts)
    roots[m] = rope.rope_bound_first_root(inv, max_distance=1 << 16)
  out = {
      "methods": list(config.methods), "lengths": lengths,
      "train_len": train_len, "seeds": [int(s) for s in config.seeds],
      "final_train_loss": final_losses, "summary": summary,
      "per_seed": per_seed, "rope_bound_first_root_at_max_factor": roots,
      "table_markdown": markdown_table(summary, lengths, train_len),
      "plots": [
          _plot_metric(summary, "passkey", lengths,
                       os.path.join(workdir, "passkey.png")),
          _plot_metric(summary, "perplexity", lengths,
                       os.path.join(workdir, "perplexity.png"), log_y=True),
          plot_cumulative_scale(os.path.join(workdir,
                                             "cumulative_scale.png"))],
  }
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(out, f, indent=1)
  return out
