"""Multiple-choice scoring by log-likelihood, as lm-evaluation-harness does.

EleutherAI lm-evaluation-harness at commit
4e7e0d47f33bc71070c1d38394bafbb52b117163 (`output_type: multiple_choice`):

* Requests (`lm_eval/api/task.py` `construct_requests`): one
  (context, target_delimiter + choice) pair per choice.
* Tokenisation (`lm_eval/api/model.py` `_encode_pair`, causal backend):
  trailing whitespace of the context moves to the front of the
  continuation; `whole = tok_encode(context + continuation)`, `ctx =
  tok_encode(context)`, continuation tokens = `whole[len(ctx):]`.
  `tok_encode` (`lm_eval/models/huggingface.py`) is the tokenizer's own
  `encode` with its default special tokens (the checkpoint's BOS where it
  adds one), without them when the text already starts with the BOS text.
* Log-likelihood (`HFLM._loglikelihood_tokens`): the model reads
  `(ctx + cont)[-(max_length + 1):][:-1]`; the score is the sum of the
  log-softmax at the continuation tokens, and `is_greedy` whether each is
  the argmax.
* Metrics (`ConfigurableTask.process_results`): acc = [argmax(ll) ==
  gold], acc_norm = [argmax(ll / len(choice)) == gold] with len the
  choice's characters (`completion_len`, without the delimiter); argmax
  takes the first maximum. TruthfulQA mc2 (`lm_eval/tasks/truthfulqa/
  utils.py` `process_results_mc2`): exp(ll) normalised over the choices,
  summed over the true ones (computed here as a softmax, equal where the
  harness's exp does not underflow).

Here each question's choices go through the model as one batch (one
forward per choice set, right-padded; causal attention keeps the padding
out of the real tokens' logits).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data import multiple_choice as mc_data

MCItem = mc_data.MCItem


def _bos_text(tok) -> str | None:
  bos = getattr(tok, "bos_id", None)
  if bos is None:
    return None
  try:
    return tok.decode([bos])
  except (TypeError, ValueError):
    return None


def tok_encode(tok, text: str) -> list[int]:
  """The harness's `tok_encode`: the tokenizer's default special tokens."""
  bos = _bos_text(tok)
  special = not (bos and text.startswith(bos))
  try:
    return list(tok.encode(text, add_special_tokens=special))
  except TypeError:  # a tokenizer without transformers' switch
    return list(tok.encode(text, add_bos=special))


def encode_pair(tok, context: str, continuation: str
                ) -> tuple[list[int], list[int]]:
  """(context ids, continuation ids) as the harness's `_encode_pair`."""
  if not context:
    raise ValueError("multiple-choice context is empty; the harness scores "
                     "an empty context against the prefix token, which is "
                     "not supported here")
  n = len(context) - len(context.rstrip())
  if n:
    continuation = context[-n:] + continuation
    context = context[:-n]
  whole = tok_encode(tok, context + continuation)
  ctx = tok_encode(tok, context)
  return ctx, whole[len(ctx):]


def _logits_fn(model) -> Callable[[jax.Array, jax.Array], jax.Array]:
  def fn(ids_bt, mask_bt):
    return model.forward(ids_bt, attention_mask=mask_bt).logits
  return fn


def choice_logliks(model, tok, item: MCItem, *, max_len: int | None = None,
                   pad_to: int = 16, logits_fn=None
                   ) -> tuple[np.ndarray, np.ndarray]:
  """(log-likelihood per choice `[C]` float64, is_greedy `[C]` bool).

  Args:
    model: a `Decoder` (anything with `.forward(ids, attention_mask=)`
      returning `.logits`), unless `logits_fn` is given.
    tok: the checkpoint's tokenizer (`jaxlab.io.pretrained.tokenizer`).
    item: the question.
    max_len: the model's context (`max_position_embeddings` by default):
      longer inputs keep their last `max_len` tokens, as the harness.
    pad_to: the batch's length is rounded up to a multiple of this.
    logits_fn: `(ids [B, T], mask [B, T]) -> logits [B, T, V]`.
  """
  if max_len is None:
    max_len = int(model.cfg.max_position_embeddings)
  fn = logits_fn or _logits_fn(model)
  rows, conts = [], []
  for cont in item.continuations:
    ctx_ids, cont_ids = encode_pair(tok, item.context, cont)
    if not cont_ids:
      raise ValueError(f"choice {cont!r} encodes to no token after its "
                       "context")
    rows.append((ctx_ids + cont_ids)[-(max_len + 1):][:-1])
    conts.append(cont_ids)
  width = max(len(r) for r in rows)
  width = min(-(-width // pad_to) * pad_to, max(max_len, width))
  ids = np.zeros((len(rows), width), np.int32)
  mask = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    ids[i, :len(r)] = r
    mask[i, :len(r)] = 1
  logp = jax.nn.log_softmax(
      jnp.asarray(fn(jnp.asarray(ids), jnp.asarray(mask)), jnp.float32), -1)
  logp = np.asarray(logp)
  ll, greedy = np.zeros(len(rows)), np.zeros(len(rows), bool)
  for i, (r, c) in enumerate(zip(rows, conts)):
    n = len(c)
    lp = logp[i, len(r) - n:len(r)]  # the continuation's predictions
    ll[i] = float(np.sum(lp[np.arange(n), c], dtype=np.float64))
    greedy[i] = bool(np.all(lp.argmax(-1) == np.asarray(c)))
  return ll, greedy


def acc(lls: Sequence[float], gold: int) -> float:
  """The harness's acc: 1.0 when the most likely choice is gold."""
  return float(int(np.argmax(np.asarray(lls))) == gold)


def acc_norm(lls: Sequence[float], choices: Sequence[str], gold: int
             ) -> float:
  """acc of ll / (characters of the choice), the harness's `acc_norm`."""
  lens = np.array([float(len(c)) for c in choices])
  return float(int(np.argmax(np.asarray(lls) / lens)) == gold)


def mc2(lls: Sequence[float], labels: Sequence[int]) -> float:
  """TruthfulQA mc2: probability mass of the true choices, normalised."""
  ll = np.asarray(lls, np.float64)
  p = np.exp(ll - ll.max())
  p /= p.sum()
  return float(p[np.asarray(labels) == 1].sum())


def evaluate(model, tok, items: Sequence[MCItem], *,
             max_len: int | None = None, logits_fn=None
             ) -> dict[str, Any]:
  """Per-question scores of `items`.

  Returns {"acc": [Q], "acc_norm": [Q], "mc2": [Q] (only when every item
  has labels), "loglik": list of `[C]` arrays}.
  """
  out = {"acc": [], "acc_norm": [], "loglik": []}
  with_labels = bool(items) and all(it.labels is not None for it in items)
  if with_labels:
    out["mc2"] = []
  for it in items:
    ll, _ = choice_logliks(model, tok, it, max_len=max_len,
                           logits_fn=logits_fn)
    out["loglik"].append(ll)
    out["acc"].append(acc(ll, it.gold))
    out["acc_norm"].append(acc_norm(ll, it.choices, it.gold))
    if with_labels:
      out["mc2"].append(mc2(ll, it.labels))
  for k in ("acc", "acc_norm", "mc2"):
    if k in out:
      out[k] = np.asarray(out[k], np.float64)
  return out
