"""Logical-axis annotated parameters.

Every parameter carries logical axis names (`embed`, `heads`, `mlp`, ...); one
rules table (in the config, see `jaxlab.parallel`) maps them to mesh axes.
Eager sharding is off: models are created under `jax.jit` with out_shardings
derived from these names, so weights are born sharded and no model has to fit
on one device first.
"""

from collections.abc import Sequence

import jax
from flax import nnx

# Logical axis names used by jaxlab's models.
BATCH = "batch"
VOCAB = "vocab"
EMBED = "embed"
MLP = "mlp"
HEADS = "heads"
KV_HEADS = "kv_heads"
HEAD_DIM = "head_dim"
NORM = "norm"
# Leading axis of the stacked block parameters of a scanned decoder
# (`DecoderConfig.scan_layers`); replicated by the default rules.
LAYERS = "layers"


def param(value: jax.Array, axes: Sequence[str | None]) -> nnx.Param:
  """A trainable `nnx.Param` annotated with logical axis names."""
  if len(axes) != value.ndim:
    raise ValueError(
        f"logical axes {tuple(axes)} do not match a parameter of shape "
        f"{value.shape}")
  return nnx.Param(value, out_sharding=tuple(axes), eager_sharding=False)
