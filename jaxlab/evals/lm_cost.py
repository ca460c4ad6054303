"""Held-out perplexity, forward latency and attention memory of a decoder.

The measurements of a compression sweep (paper P, `jaxlab.experiments.lestd`),
usable on any `jaxlab.models.decoder.Decoder`-like model (a callable from
token ids to logits whose blocks are `model.layers[i].attn`).
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


@nnx.jit
def _nll_sum(model, ids_bt):
  logits = model(ids_bt[:, :-1])
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, ids_bt[:, 1:]).sum()


def perplexity(model, held: np.ndarray, batch: int = 16) -> float:
  """exp(mean next-token NLL) over the held-out windows `[E, T+1]`."""
  total, count = 0.0, 0
  for s in range(0, len(held), batch):
    chunk = jnp.asarray(held[s:s + batch])
    total += float(_nll_sum(model, chunk))
    count += chunk.shape[0] * (chunk.shape[1] - 1)
  return float(np.exp(total / count))


def attention_bytes(model) -> int:
  """Bytes of the arrays held by the attention modules."""
  total = 0
  for block in model.layers:
    for leaf in jax.tree.leaves(nnx.state(block.attn, nnx.Param)):
      total += int(np.asarray(leaf).nbytes)
  return total


def forward_latency_ms(model, ids_bt, repeats: int) -> float:
  """Median wall time of one compiled forward pass (after a warm-up)."""
  graphdef, state = nnx.split(model)

  @jax.jit
  def fwd(state, ids):
    return nnx.merge(graphdef, state)(ids)

  fwd(state, ids_bt).block_until_ready()
  times = []
  for _ in range(int(repeats)):
    t0 = time.perf_counter()
    fwd(state, ids_bt).block_until_ready()
    times.append((time.perf_counter() - t0) * 1e3)
  return float(np.median(times))
