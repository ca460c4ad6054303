r"""Sampling-based uncertainty of free-form answers and its evaluation.

Semantic entropy after Farquhar et al. (Nature 2024) as used by paper J
(spec `papers/H-N.md` section J, pipeline steps 2-4 and "Metrics"):

  * `semantic_ids`: greedy clustering of R sampled answers; sample j joins
    sample i's cluster if `are_equivalent(i, j)`, a bidirectional-entailment
    test through any `EntailmentModel` (labels 0 contradiction, 1 neutral,
    2 entailment). Non-strict rule: equivalent iff neither direction is a
    contradiction and not (neutral, neutral); strict: both entailment. On CPU
    `StringMatchEntailment` stands in for the NLI model (exact, normalised or
    numeric matching).
  * cluster probabilities p_c(j) = sum_{r in j} e^{l_r} / sum_r e^{l_r} from
    the length-normalised log-likelihoods l_r (`cluster_probs`).
  * `naive_entropy` = -(1/R) sum_r l_r, `semantic_entropy` (Rao)
    = -sum_j p_c(j) log p_c(j), `discrete_semantic_entropy` = entropy of the
    cluster frequencies, `renyi2_entropy` = -log sum_j p_c(j)^2 (paper J's
    base measure SE_R).

Evaluation (`uncertainty/utils/eval_utils.py` of the SE code):

  * `auroc(scores, incorrect)`: area under the ROC curve of "answer is
    incorrect" scored by the uncertainty (Mann-Whitney with tied ranks, equal
    to sklearn's `roc_auc_score`).
  * `aurac(uncertainty, correct)`: quantiles q in linspace(0.1, 1, 20),
    acc(q) = mean accuracy of the answers with uncertainty <=
    quantile(u, q), AURAC = sum_q acc(q) dq with dq = 0.9 / 19.
  * `accuracy_at_fractions`: acc(q) at answer fractions {0.8, 0.9, 0.95, 1}
    (the rejection-accuracy curve).
  * `bootstrap_interval`: percentile bootstrap, 1000 resamples, 90 %.

The entropy functions take batched `[..., R]` arrays and are jnp (jit- and
vmap-friendly); the metrics are host NumPy.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Any, Callable, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import plotting
from jaxlab.decoding import sampler

CONTRADICTION, NEUTRAL, ENTAILMENT = 0, 1, 2
QUANTILES = np.linspace(0.1, 1.0, 20)
ANSWER_FRACTIONS = (0.8, 0.9, 0.95, 1.0)


# -- semantic clustering -------------------------------------------------------


class EntailmentModel(Protocol):
  """What `semantic_ids` needs from an NLI model (e.g. DeBERTa-large-MNLI)."""

  def check_implication(self, premise: str, hypothesis: str) -> int:
    """0 contradiction, 1 neutral, 2 entailment."""


_ARTICLES = {"a", "an", "the"}
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")


def normalise_answer(text: str) -> str:
  """SQuAD-style: lower case, no punctuation or articles, single spaces."""
  text = text.lower()
  text = "".join(ch for ch in text if ch not in string.punctuation)
  return " ".join(w for w in text.split() if w not in _ARTICLES)


def _first_number(text: str) -> float | None:
  m = _NUMBER.search(text)
  return None if m is None else float(m.group().replace(",", ""))


class StringMatchEntailment:
  """A CPU stand-in for bidirectional NLI: equal keys entail, else contradict.

  mode "exact" compares the strings, "normalised" `normalise_answer` of
  both, "numeric" the first number in each (falling back to "normalised"
  when either has none). `key_fn` is applied to both texts first (e.g. to
  extract the answer span from a sentence).
  """

  MODES = ("exact", "normalised", "numeric")

  def __init__(self, mode: str = "normalised",
               key_fn: Callable[[str], str] | None = None):
    if mode not in self.MODES:
      raise ValueError(f"StringMatchEntailment mode must be one of "
                       f"{self.MODES}, got {mode!r}")
    self.mode = mode
    self.key_fn = key_fn

  def key(self, text: str):
    if self.key_fn is not None:
      text = self.key_fn(text)
    if self.mode == "exact":
      return text
    if self.mode == "numeric":
      num = _first_number(text)
      if num is not None:
        return num
    return normalise_answer(text)

  def check_implication(self, premise: str, hypothesis: str) -> int:
    return ENTAILMENT if self.key(premise) == self.key(hypothesis) else (
        CONTRADICTION)


def are_equivalent(a: str, b: str, model: EntailmentModel, *,
                   strict: bool = False) -> bool:
  """Bidirectional entailment (the SE code's `are_equivalent`)."""
  i1 = model.check_implication(a, b)
  i2 = model.check_implication(b, a)
  if i1 not in (0, 1, 2) or i2 not in (0, 1, 2):
    raise ValueError(f"check_implication must return 0, 1 or 2, got "
                     f"{i1!r} and {i2!r}")
  if strict:
    return i1 == ENTAILMENT and i2 == ENTAILMENT
  return CONTRADICTION not in (i1, i2) and (i1, i2) != (NEUTRAL, NEUTRAL)


def semantic_ids(answers: Sequence[str], model: EntailmentModel | None = None,
                 *, strict: bool = False, question: str | None = None
                 ) -> np.ndarray:
  """Greedy semantic clusters `[R]` int ids in [0, R) (SE's get_semantic_ids).

  Sample i that has no cluster yet opens cluster `next_id`, and every later
  sample j equivalent to it is (re)assigned to it, as in the SE code. With
  `question`, each answer is prefixed by it before the entailment test.
  """
  model = model or StringMatchEntailment("normalised")
  texts = [f"{question} {a}" if question else a for a in answers]
  ids = [-1] * len(texts)
  next_id = 0
  for i, t in enumerate(texts):
    if ids[i] == -1:
      ids[i] = next_id
      for j in range(i + 1, len(texts)):
        if are_equivalent(t, texts[j], model, strict=strict):
          ids[j] = next_id
      next_id += 1
  return np.asarray(ids, np.int32)


# -- an LM prompted for entailment (the SE code's EntailmentLlama) -----------


def entailment_prompt(premise: str, hypothesis: str, question: str) -> str:
  """`EntailmentLlama.equivalence_prompt` of the SE code
  (uncertainty/uncertainty_measures/semantic_entropy.py, commit b48e3c1)."""
  return (f"We are evaluating answers to the question \"{question}\"\n"
          "Here are two possible answers:\n"
          f"Possible Answer 1: {premise}\nPossible Answer 2: {hypothesis}\n"
          "Does Possible Answer 1 semantically entail Possible Answer 2? "
          "Respond only with entailment, contradiction, or neutral.\n"
          "Response:")


def parse_entailment(response: str) -> int:
  """`EntailmentLLM.check_implication`'s reading of a response: the first
  30 characters, lowercased; "entailment" -> 2, else "neutral" -> 1, else
  "contradiction" -> 0, else 1 (the code's "MANUAL NEUTRAL")."""
  head = response.lower()[:30]
  for word, label in (("entailment", ENTAILMENT), ("neutral", NEUTRAL),
                      ("contradiction", CONTRADICTION)):
    if word in head:
      return label
  return NEUTRAL


class LMEntailment:
  """Bidirectional entailment by a causal LM prompted as the SE code's
  EntailmentLlama does (`entailment_prompt`, `parse_entailment`; greedy
  decoding where the code samples at T = 0.02, <= 30 new tokens).

  Responses are cached by prompt; `prefetch` generates every missing
  prompt of a list in batches (the clustering then only reads the cache,
  and gives the same ids as asking one pair at a time). `for_question(q)`
  is the `EntailmentModel` of one question's answers.
  """

  def __init__(self, model, tokenizer, *, max_new_tokens: int = 30,
               batch_size: int = 64, pad_multiple: int | None = None):
    self.model, self.tokenizer = model, tokenizer
    self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
    self.pad_multiple = pad_multiple
    self.responses: dict[str, str] = {}

  def prefetch(self, triples: Sequence[tuple[str, str, str]]) -> int:
    """Generates the responses of (premise, hypothesis, question) triples
    not cached yet; returns how many prompts were generated."""
    todo = list(dict.fromkeys(
        p for p in (entailment_prompt(*t) for t in triples)
        if p not in self.responses))
    if todo:
      texts, _ = generate_answers(
          self.model, self.tokenizer, todo, key=jax.random.key(0),
          temperature=0.0, max_new_tokens=self.max_new_tokens,
          batch_size=self.batch_size, pad_multiple=self.pad_multiple)
      self.responses.update(zip(todo, texts))
    return len(todo)

  def check_implication(self, premise: str, hypothesis: str,
                        question: str = "") -> int:
    self.prefetch([(premise, hypothesis, question)])
    return parse_entailment(
        self.responses[entailment_prompt(premise, hypothesis, question)])

  def for_question(self, question: str) -> EntailmentModel:
    outer = self

    class _Bound:
      def check_implication(self, premise: str, hypothesis: str) -> int:
        return outer.check_implication(premise, hypothesis, question)
    return _Bound()


def lm_semantic_ids(answers: Sequence[Sequence[str]],
                    questions: Sequence[str], model: LMEntailment, *,
                    strict: bool = False) -> np.ndarray:
  """`semantic_ids` `[Q, R]` of each question's answers under the LM
  entailment, every ordered pair of a question's answers generated in
  one batched pass first."""
  model.prefetch([(a, b, q) for q, ans in zip(questions, answers)
                  for i, a in enumerate(ans) for j, b in enumerate(ans)
                  if i != j])
  return np.stack([semantic_ids(ans, model.for_question(q), strict=strict)
                   for q, ans in zip(questions, answers)])


# -- correctness of a short answer (the SE code's "squad" metric) -----------


_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def squad_normalize(text: str) -> str:
  """SQuAD's `normalize_answer`: lowercase, drop ASCII punctuation, drop
  the articles a / an / the (regex on word boundaries), single spaces."""
  text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
  return " ".join(_SQUAD_ARTICLES.sub(" ", text).split())


def squad_f1(prediction: str, reference: str) -> float:
  """SQuAD v2's token F1 in [0, 1] (`evaluate`'s squad_v2 `compute_f1`):
  SQuAD normalisation, bag-of-tokens overlap; when either side has no
  token, 1 if both have none else 0."""
  pred = squad_normalize(prediction).split()
  gold = squad_normalize(reference).split()
  if not pred or not gold:
    return float(pred == gold)
  same = sum((collections.Counter(pred) & collections.Counter(gold)).values())
  if same == 0:
    return 0.0
  p, r = same / len(pred), same / len(gold)
  return 2 * p * r / (p + r)


def squad_correct(prediction: str, references: Sequence[str], *,
                  threshold: float = 0.5) -> bool:
  """The SE code's accuracy of an answer (`utils.get_metric("squad")`):
  the best SQuAD v2 F1 over the references (those empty after
  normalisation dropped; none left: the empty answer) is >= 50 %."""
  refs = [r for r in references if squad_normalize(r)] or [""]
  return max(squad_f1(prediction, r) for r in refs) >= threshold


# -- entropies (batched over leading axes) -------------------------------------


@jax.jit
def cluster_log_probs(log_liks: jax.Array, ids: jax.Array) -> jax.Array:
  """log p_c(j) `[..., R]` (index j = cluster id; -inf for unused ids).

  The SE code's `logsumexp_by_id(..., agg="sum_normalized")`:
  log p_c(j) = logsumexp_{r in j} l_r - logsumexp_r l_r.
  """
  log_liks = jnp.asarray(log_liks)
  oh = jax.nn.one_hot(ids, log_liks.shape[-1], dtype=bool)   # [..., R, C]
  lse = jax.nn.logsumexp(jnp.where(oh, log_liks[..., None], -jnp.inf),
                         axis=-2)
  return lse - jax.nn.logsumexp(log_liks, axis=-1, keepdims=True)


@jax.jit
def cluster_probs(log_liks: jax.Array, ids: jax.Array) -> jax.Array:
  """p_c(j) `[..., R]` (0 for unused ids)."""
  return jnp.exp(cluster_log_probs(log_liks, ids))


def _plogp(p):
  return jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)


@jax.jit
def naive_entropy(log_liks: jax.Array) -> jax.Array:
  """NE = -(1/R) sum_r l_r (the SE code's `predictive_entropy`)."""
  return -jnp.mean(jnp.asarray(log_liks), axis=-1)


@jax.jit
def semantic_entropy(log_liks: jax.Array, ids: jax.Array) -> jax.Array:
  """SE = -sum_j p_c(j) log p_c(j) (`predictive_entropy_rao`)."""
  return -jnp.sum(_plogp(cluster_probs(log_liks, ids)), axis=-1)


@jax.jit
def discrete_semantic_entropy(ids: jax.Array) -> jax.Array:
  """DSE: Shannon entropy of the cluster frequencies n_j / R."""
  ids = jnp.asarray(ids)
  freq = jax.nn.one_hot(ids, ids.shape[-1]).mean(-2)
  return -jnp.sum(_plogp(freq), axis=-1)


@jax.jit
def renyi2_entropy(log_liks: jax.Array, ids: jax.Array) -> jax.Array:
  """SE_R = -log sum_j p_c(j)^2 (paper J, step 4)."""
  return -jnp.log(jnp.sum(cluster_probs(log_liks, ids) ** 2, axis=-1))


# -- evaluation ------------------------------------------------------------------


def _binary(name: str, labels) -> np.ndarray:
  a = np.asarray(labels)
  if a.ndim != 1:
    raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
  if a.dtype != bool and not np.all(np.isin(a, (0, 1))):
    raise ValueError(f"{name} must be booleans or 0/1")
  return a.astype(bool)


def _scores(name: str, scores, n: int) -> np.ndarray:
  s = np.asarray(scores, np.float64)
  if s.shape != (n,):
    raise ValueError(f"{name} must have shape ({n},) like the labels, got "
                     f"{s.shape}")
  if not np.all(np.isfinite(s)):
    raise ValueError(f"{name} must be finite")
  return s


def _average_ranks(x: np.ndarray) -> np.ndarray:
  order = np.argsort(x, kind="mergesort")
  xs = x[order]
  ranks = np.empty(len(x), np.float64)
  starts = np.r_[0, np.flatnonzero(np.diff(xs)) + 1]
  ends = np.r_[starts[1:], len(x)]
  for s, e in zip(starts, ends):
    ranks[order[s:e]] = (s + e + 1) / 2.0  # mean of ranks s+1 .. e
  return ranks


def auroc(scores, incorrect) -> float:
  """AUROC of `scores` (uncertainty) for the positive class `incorrect`.

  P(score of a random incorrect answer > score of a random correct one),
  ties counting 1/2: the Mann-Whitney U / (n_pos n_neg), which equals
  sklearn's `roc_auc_score(incorrect, scores)`.
  """
  y = _binary("incorrect", incorrect)
  s = _scores("scores", scores, len(y))
  n_pos, n_neg = int(y.sum()), int((~y).sum())
  if n_pos == 0 or n_neg == 0:
    raise ValueError(
        f"auroc needs both classes in `incorrect`, got {n_pos} incorrect and "
        f"{n_neg} correct answers: AUROC is undefined for a single class")
  ranks = _average_ranks(s)
  u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
  return float(u / (n_pos * n_neg))


def accuracy_at_quantile(uncertainty, correct, quantile: float) -> float:
  """Mean accuracy of the answers with uncertainty <= quantile(u, q)."""
  c = _binary("correct", correct)
  u = _scores("uncertainty", uncertainty, len(c))
  if not 0 < quantile <= 1:
    raise ValueError(f"quantile must be in (0, 1], got {quantile}")
  return float(c[u <= np.quantile(u, quantile)].mean())


def aurac(uncertainty, correct) -> float:
  """Area under the rejection-accuracy curve (SE code, max 0.9)."""
  c = _binary("correct", correct)
  if len(c) == 0:
    raise ValueError("aurac needs at least one answer")
  dq = QUANTILES[1] - QUANTILES[0]  # 0.9 / 19
  return float(sum(accuracy_at_quantile(uncertainty, c, q)
                   for q in QUANTILES) * dq)


def accuracy_at_fractions(uncertainty, correct,
                          fractions: Sequence[float] = ANSWER_FRACTIONS
                          ) -> dict[float, float]:
  """Accuracy when answering only the `fraction` most certain questions."""
  return {float(f): accuracy_at_quantile(uncertainty, correct, f)
          for f in fractions}


def rejection_curve(uncertainty, correct,
                    quantiles: Sequence[float] = tuple(QUANTILES)
                    ) -> np.ndarray:
  """acc(q) at `quantiles` (the curve whose area is `aurac`)."""
  return np.array([accuracy_at_quantile(uncertainty, correct, q)
                   for q in quantiles])


def bootstrap_interval(metric: Callable[..., float], *arrays,
                       num_resamples: int = 1000, confidence: float = 0.9,
                       seed: int = 0) -> tuple[float, float]:
  """Percentile bootstrap interval of `metric(*arrays)` over examples.

  Resamples whose metric raises ValueError (e.g. a single-class resample for
  `auroc`) are skipped.
  """
  if not 0 < confidence < 1:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  arrays = [np.asarray(a) for a in arrays]
  n = len(arrays[0])
  if any(len(a) != n for a in arrays):
    raise ValueError("bootstrap_interval arrays must have the same length")
  rng = np.random.default_rng(seed)
  vals = []
  for _ in range(num_resamples):
    idx = rng.integers(0, n, n)
    try:
      vals.append(metric(*(a[idx] for a in arrays)))
    except ValueError:
      continue
  if not vals:
    return float("nan"), float("nan")
  alpha = (1 - confidence) / 2
  lo, hi = np.quantile(vals, [alpha, 1 - alpha])
  return float(lo), float(hi)


def safe_auroc(scores, incorrect) -> float:
  """`auroc`, NaN when the labels have one class (AUROC undefined)."""
  try:
    return auroc(scores, incorrect)
  except ValueError:
    return float("nan")


def evaluate_scores(scores: dict, correct: np.ndarray, *, seed: int,
                    num_resamples: int = 1000, confidence: float = 0.9
                    ) -> dict[str, dict[str, Any]]:
  """Per estimator: AUROC (positive = incorrect), AURAC, accuracy at 80 / 90 %
  answered, the AUROC bootstrap interval and the rejection curve."""
  correct = np.asarray(correct, bool)
  out = {}
  for name, s in scores.items():
    acc = accuracy_at_fractions(s, correct)
    lo, hi = bootstrap_interval(auroc, s, ~correct, seed=seed,
                                num_resamples=num_resamples,
                                confidence=confidence)
    out[name] = {"auroc": safe_auroc(s, ~correct),
                 "aurac": aurac(s, correct),
                 "acc80": acc[0.8], "acc90": acc[0.9],
                 "auroc_lo": lo, "auroc_hi": hi,
                 "curve": rejection_curve(s, correct).tolist()}
  return out


# -- sampling answers --------------------------------------------------------


def generate_answers(model, tokenizer, prompts: Sequence[str | Sequence[int]],
                     *, key: jax.Array, temperature: float,
                     max_new_tokens: int, batch_size: int,
                     pad_multiple: int | None = None,
                     stop: Sequence[str] = ()
                     ) -> tuple[list[str], np.ndarray]:
  """One answer per prompt and its length-normalised log-likelihood
  l = mean_t log p(token_t) (raw model log-probs; 0 for an empty answer).

  Prompts are strings (encoded with bos) or token ids (e.g. a chat
  template's). Batches of `batch_size` rows, the i-th batch sampled with
  `fold_in(key, start)`; answers are cut at the first eos and decoded.
  `pad_multiple` is the sampler's prompt bucket (None: powers of two).
  `stop`: stop strings (the SE code's stop sequences); an answer keeps
  the tokens before the first token whose decoded prefix contains one, its
  text is cut at the stop string, and l is the mean over the kept tokens.
  """
  texts, lls = [], []
  for start in range(0, len(prompts), batch_size):
    ids = [tokenizer.encode(p, add_bos=True) if isinstance(p, str)
           else list(p) for p in prompts[start:start + batch_size]]
    res = sampler.generate(model, ids, max_new_tokens=max_new_tokens,
                           temperature=temperature, eos_id=tokenizer.eos_id,
                           pad_id=tokenizer.pad_id, pad_multiple=pad_multiple,
                           key=jax.random.fold_in(key, start))
    for row, lp in zip(res.tokens, res.model_logprobs):
      row, lp = list(row), list(lp)
      if tokenizer.eos_id in row:
        row = row[:row.index(tokenizer.eos_id)]
      text, keep = tokenizer.decode(row), len(lp)  # unstopped: every lp
      if stop and any(x in text for x in stop):
        keep = next(k for k in range(1, len(row) + 1) if any(
            x in tokenizer.decode(row[:k]) for x in stop)) - 1
        text = _cut(text, stop)
      texts.append(text)
      lp = lp[:keep]
      lls.append(float(np.mean(lp)) if lp else 0.0)
  return texts, np.asarray(lls)


def _cut(text: str, stop: Sequence[str]) -> str:
  return text[:min(i for i in (text.find(x) for x in stop) if i >= 0)]


def sample_and_cluster(model, tokenizer, prompts, keys: Sequence[Callable],
                       *, num_samples: int, key: jax.Array,
                       temperature: float, max_new_tokens: int,
                       batch_size: int, strict: bool = False,
                       pad_multiple: int | None = None):
  """Greedy answers, R = `num_samples` sampled answers per prompt, their
  log-likelihoods `[Q, R]` and semantic ids `[Q, R]` (`keys[i]` is prompt
  i's answer key: equal keys = one meaning, `StringMatchEntailment`).

  Greedy answers use `key`, the samples `fold_in(key, 1)`.
  """
  r = num_samples
  greedy, _ = generate_answers(model, tokenizer, prompts, key=key,
                               temperature=0.0, max_new_tokens=max_new_tokens,
                               batch_size=batch_size, pad_multiple=pad_multiple)
  texts, ll = generate_answers(
      model, tokenizer, [p for p in prompts for _ in range(r)],
      key=jax.random.fold_in(key, 1), temperature=temperature,
      max_new_tokens=max_new_tokens, batch_size=batch_size,
      pad_multiple=pad_multiple)
  ids = np.stack([semantic_ids(texts[i * r:(i + 1) * r],
                               StringMatchEntailment("exact", keys[i]),
                               strict=strict) for i in range(len(prompts))])
  return {"greedy": greedy, "texts": [texts[i * r:(i + 1) * r]
                                      for i in range(len(prompts))],
          "loglik": ll.reshape(len(prompts), r), "ids": ids}


def group_summary(correct, groups, ids) -> dict[str, float]:
  """Greedy accuracy and clusters per question, overall and per group."""
  correct, groups = np.asarray(correct, bool), np.asarray(groups)
  nclus = np.array([len(set(np.asarray(r).tolist())) for r in ids])
  out = {}
  for g in dict.fromkeys(groups.tolist()):
    out[f"acc_{g}"] = float(correct[groups == g].mean())
    out[f"clusters_{g}"] = float(nclus[groups == g].mean())
  out.update(questions=len(correct), accuracy=float(correct.mean()),
             incorrect_frac=float(1 - correct.mean()),
             clusters_mean=float(nclus.mean()))
  return out


def plot_rejection(curves: dict[str, np.ndarray], path: str, title: str
                   ) -> str:
  """Rejection-accuracy curves (name -> `[seeds, len(QUANTILES)]`, plotted
  as their mean over seeds) saved to `path`."""
  plt = plotting.pyplot()
  fig, ax = plt.subplots(figsize=(5.5, 3.8))
  for name, c in curves.items():
    ax.plot(QUANTILES, np.asarray(c).mean(0), marker="o", ms=3, label=name)
  ax.set(xlabel="fraction of questions answered (most certain first)",
         ylabel="accuracy", title=title)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def last_word(text: str) -> str:
  """The last word of an answer sentence ("" if none), e.g. the fact value
  of "Kalo was born in Lisbon." (an answer-span `key_fn`)."""
  words = text.strip().rstrip(".!?").split()
  return words[-1] if words else ""
