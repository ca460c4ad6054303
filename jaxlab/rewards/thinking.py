"""A trainable tiny thinking reward model (TRM): (question, thinking) -> [0, 1].

Paper G item 1 trains a 3B VLM on TRM labels balanced uniformly over ten
score bins. This is the CPU-sized stand-in: hashed word uni/bi-gram features
of the question and of the thinking (separate hash spaces, so the model can
tell them apart), an embedding bag, a 2-layer MLP and a sigmoid, fitted by
binary cross-entropy to soft labels in [0, 1] on a bin-balanced subset
(`jaxlab.objectives.grpo.balance_by_bins`). It implements the
`grpo.ThinkingScorer` protocol, so it drops into `combine_trust_rewards`.

    scorer = TinyThinkingScorer(TinyScorerConfig())
    info = scorer.fit(questions, thinkings, labels, steps=300)
    r_t = scorer(questions, thinkings)          # [N] float32 in [0, 1]
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.objectives import grpo

_WORD = re.compile(r"\w+|[^\w\s]")


@dataclasses.dataclass(frozen=True)
class TinyScorerConfig:
  """Attributes: feature buckets, widths, max features per example."""
  num_buckets: int = 2048
  dim: int = 32
  hidden: int = 64
  max_features: int = 128
  seed: int = 0


def featurize(question: str, thinking: str, cfg: TinyScorerConfig
              ) -> list[int]:
  """Hashed uni/bi-gram ids; question ids in [0, B/2), thinking's in [B/2, B).

  Repeated lines add their n-grams again (the bag is a mean), so redundancy
  (a TRM criterion) is visible to the model.
  """
  half = cfg.num_buckets // 2
  out = []
  for offset, text, tag in ((0, question, "q"), (half, thinking, "t")):
    words = _WORD.findall(text.lower())
    grams = words + [a + " " + b for a, b in zip(words, words[1:])]
    out += [offset + zlib.crc32(f"{tag}:{g}".encode()) % half for g in grams]
  return out[:cfg.max_features]


class _Net(nnx.Module):

  def __init__(self, cfg: TinyScorerConfig, rngs: nnx.Rngs):
    self.emb = nnx.Embed(cfg.num_buckets + 1, cfg.dim, rngs=rngs)  # +1: pad
    self.h = nnx.Linear(cfg.dim, cfg.hidden, rngs=rngs)
    self.o = nnx.Linear(cfg.hidden, 1, rngs=rngs)

  def __call__(self, ids_bf: jax.Array, mask_bf: jax.Array) -> jax.Array:
    """Feature ids `[B, F]` + mask -> logits `[B]`."""
    e = self.emb(ids_bf) * mask_bf[..., None]
    bag = e.sum(1) / jnp.maximum(mask_bf.sum(1, keepdims=True), 1.0)
    return self.o(jax.nn.gelu(self.h(bag)))[:, 0]


class TinyThinkingScorer:
  """A trainable `grpo.ThinkingScorer`."""

  def __init__(self, cfg: TinyScorerConfig = TinyScorerConfig()):
    self.cfg = cfg
    self.net = _Net(cfg, nnx.Rngs(cfg.seed))

  def _encode(self, questions, thinkings) -> tuple[np.ndarray, np.ndarray]:
    if len(questions) != len(thinkings):
      raise ValueError(f"{len(questions)} questions but {len(thinkings)} "
                       "thinkings")
    pad = self.cfg.num_buckets
    ids = np.full((len(questions), self.cfg.max_features), pad, np.int32)
    mask = np.zeros(ids.shape, np.float32)
    for i, (q, t) in enumerate(zip(questions, thinkings)):
      f = featurize(q, t, self.cfg)
      ids[i, :len(f)] = f
      mask[i, :len(f)] = 1.0
    return ids, mask

  def __call__(self, questions: Sequence[str],
               thinkings: Sequence[str]) -> np.ndarray:
    """Scores `[N]` float32 in [0, 1]."""
    ids, mask = self._encode(questions, thinkings)
    return np.asarray(_predict(self.net, jnp.asarray(ids), jnp.asarray(mask)))

  def fit(self, questions: Sequence[str], thinkings: Sequence[str],
          labels: Sequence[float], *, steps: int = 300, batch_size: int = 64,
          lr: float = 3e-3, balance: bool = True, num_bins: int = 10,
          seed: int = 0) -> dict[str, float]:
    """Fits soft labels in [0, 1] by BCE, on a bin-balanced subset (G.1).

    Returns {"num_train": rows kept after balancing, "final_loss": ...}.
    """
    labels = np.asarray(labels, np.float32)
    if labels.ndim != 1 or len(labels) != len(questions):
      raise ValueError(f"labels must be [{len(questions)}], got "
                       f"{labels.shape}")
    if np.any((labels < 0) | (labels > 1)) or np.any(np.isnan(labels)):
      raise ValueError("labels must lie in [0, 1]")
    keep = (grpo.balance_by_bins(labels, num_bins=num_bins, seed=seed)
            if balance else np.arange(len(labels)))
    ids, mask = self._encode([questions[i] for i in keep],
                             [thinkings[i] for i in keep])
    y = labels[keep]
    opt = nnx.Optimizer(self.net, optax.adam(lr), wrt=nnx.Param)
    rng = np.random.default_rng(seed)
    loss = float("nan")
    for _ in range(steps):
      rows = rng.integers(0, len(y), min(batch_size, len(y)))
      loss = float(_train_step(self.net, opt, jnp.asarray(ids[rows]),
                               jnp.asarray(mask[rows]), jnp.asarray(y[rows])))
    return {"num_train": int(len(y)), "final_loss": loss}


@nnx.jit
def _predict(net, ids, mask):
  return jax.nn.sigmoid(net(ids, mask))


@nnx.jit
def _train_step(net, opt, ids, mask, y):
  def loss_fn(m):
    return jnp.mean(optax.sigmoid_binary_cross_entropy(m(ids, mask), y))
  loss, g = nnx.value_and_grad(loss_fn)(net)
  opt.update(net, g)
  return loss
