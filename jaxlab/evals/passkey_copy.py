"""The copy-style passkey task of the MrRoPE miniature (paper D).

A tiny byte-level decoder learns it in a few thousand CPU steps (an
induction / copy task): the needle is a marker token followed by `digits`
distinct digits, `#472. `, hidden at a random depth in filler sentences
(lower-case, digit-free, no `#`); the prompt ends with the same marker `#`,
so the answer is "the tokens that followed the previous `#`". `PasskeySource`
is the training corpus (one episode per document, the answer upweighted in
`loss_mask`); `evaluate_extension` measures a trained model under every RoPE
scaling training-free (`long_context.train_short_test_long`): passkey exact
match and digit accuracy over a depth grid, and chunked perplexity, at each
`train_len * factor`. It sits in `evals` beside `long_context`, whose prompt
builder and retrieval scoring it uses.
"""

from typing import Any

import numpy as np

from jaxlab.evals import long_context as lc
from jaxlab.nn import rope
from jaxlab.train import metrics as metrics_lib

# Lower-case, digit-free filler, so "#" and digits only occur in the needle
# and the question.
SENTENCES = (
    "the cat sat on the mat.", "a bird sang in the tree.",
    "rain fell on the old roof.", "we walked along the river.",
    "snow covered the quiet hill.", "a train left the station.",
    "the lamp glowed all night.", "the wind moved the grass.")
MARKER = "#"
NEEDLE = MARKER + "{value}. "
QUESTION = MARKER


def _filler(rng: np.random.Generator, n: int) -> str:
  return " ".join(SENTENCES[i] for i in rng.integers(0, len(SENTENCES), n))


def passkey(tok, *, length: int, depth: float, rng: np.random.Generator,
            digits: int = 3) -> lc.RetrievalExample:
  """A prompt of `length` tokens ending in the marker; answer: the key.

  The key has `digits` distinct digits, so copying it token by token (an
  induction head: "what followed the previous occurrence of this token")
  is unambiguous.
  """
  value = "".join(str(d) for d in rng.permutation(10)[:digits])
  prompt, start = lc.build_prompt(
      tok, length=length, depth=depth, needle=NEEDLE.format(value=value),
      question=QUESTION, filler=_filler(rng, length // 20 + 2))
  answer_ids = np.asarray(tok.encode(value), np.int32)
  return lc.RetrievalExample(prompt, answer_ids, value, length, depth, start)


def document(tok, length: int, rng: np.random.Generator, digits: int,
             min_prompt: int = 16) -> tuple[np.ndarray, int]:
  """`length + 1` tokens holding one passkey episode, and where its answer is.

  The episode (prompt + answer) has a random length, and filler sentences
  follow it up to `length + 1` tokens. Varying where the question sits
  matters: with the question always at the last position, a tiny model
  learns retrieval *at that absolute position* only (measured: exact match
  1.0 with the question at position 61, 0.0 at position 60 for a needle at
  depth 0), which would confound the length-extrapolation test.

  Returns:
    (ids `[length + 1]` int32, index of the first answer token in ids).
  """
  plen = int(rng.integers(min(min_prompt, length + 1 - digits),
                          length + 2 - digits))
  ex = passkey(tok, length=plen, depth=float(rng.uniform()), rng=rng,
               digits=digits)
  tail = np.asarray(tok.encode(". " + _filler(rng, length // 20 + 2)),
                    np.int32)
  ids = np.concatenate([ex.prompt_ids, ex.answer_ids, tail])[:length + 1]
  return ids.astype(np.int32), plen


class PasskeySource:
  """Random-access LM examples of passkey docs.

  Each example: `inputs`/`targets` `[length]`, `loss_mask` (1 on filler
  targets, `answer_weight` on the answer digits) and `answer_mask` (1 on
  the answer digits only, for the accuracy metrics).
  """

  def __init__(self, tok, *, num: int, length: int, digits: int, seed: int,
               answer_weight: float = 1.0):
    self.tok, self.num, self.length, self.digits = tok, num, length, digits
    self.seed, self.answer_weight = seed, answer_weight

  def __len__(self) -> int:
    return self.num

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    doc, start = document(self.tok, self.length, np.random.default_rng(
        [self.seed, int(i)]), self.digits)
    answer = np.zeros(self.length, np.float32)
    answer[start - 1:start - 1 + self.digits] = 1.0  # targets = ids[1:]
    # The answer is `digits` of `length` targets; upweighting it makes
    # retrieval the dominant signal (a choice of this miniature, not of the
    # paper) while the filler still trains the LM.
    mask = 1.0 + (self.answer_weight - 1.0) * answer
    return {"inputs": doc[:-1], "targets": doc[1:], "loss_mask": mask,
            "answer_mask": answer}


def evaluate_extension(model, config, tok) -> dict[str, Any]:
  """Every `config.methods` scaling at every `task.eval_factors` length:
  passkey exact match (overall and per depth), digit accuracy, perplexity
  (`{"lengths", "methods", "metrics": {metric: {method: [per length]}}}`)."""
  t = config.task
  train_len = int(t.train_len)
  lengths = [train_len * int(f) for f in t.eval_factors]
  rng = np.random.default_rng(int(t.data_seed) + 7)
  docs = {n: np.stack([document(tok, n - 1, rng, int(t.digits))[0]
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
  for d in t.depths:  # exact match per needle depth
    tasks[f"passkey@{float(d):g}"] = (
        lambda m, n, d=float(d): retrieval(m, n)["cells"][
            (n - int(t.digits), d)]["exact"])
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


def learning_curve(workdir: str) -> list[dict[str, float]]:
  """Held-out answer metrics per eval step from the trainer's metrics.jsonl."""
  return [{"step": int(r["step"]),
           **{k[5:]: float(v) for k, v in r.items() if k.startswith("eval/")}}
          for r in metrics_lib.read_metrics(workdir) if "eval/answer_exact" in r]


def bound_first_roots(mcfg, methods, train_len: int, eval_len: int
                      ) -> dict[str, int]:
  """First root of the RoPE bound B(m) of each method's frequencies, scaled
  from `train_len` to `eval_len` for the decoder config `mcfg`."""
  roots = {}
  for m in methods:
    inv, _ = rope.scaling_tables(
        rope.extension_scaling(m, train_len=train_len, eval_len=eval_len),
        head_dim=mcfg.resolved_head_dim, base=mcfg.rope_theta,
        seq_len=eval_len)
    roots[m] = rope.rope_bound_first_root(inv, max_distance=1 << 16)
  return roots
