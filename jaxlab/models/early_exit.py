"""Early-exit copies of a decoder: its first k layers, then its own final
norm and LM head (a same-family draft model for paper M, SpecKV / SpecPC).

    draft = early_exit.first_layers(target, 10)

`draft(ids)` equals running the target's embedding and blocks 0..k-1, then
`target.unembed` (final RMSNorm + the tied or separate head) on the residual
stream after block k-1: the "logit lens" read-out of layer k. The draft shares
the target's tokenizer and vocabulary (what `kv_policies.check_draft` asks),
costs k / L of the target's layers, and needs no training; whether its answers
are any good is measured, not assumed (an early layer read through the final
norm is a weak LM).
"""

import numpy as np
from flax import nnx

from jaxlab.models import decoder as decoder_lib


def first_layers(model: decoder_lib.Decoder, num_layers: int, *,
                 share: bool = False) -> decoder_lib.Decoder:
  """`model` with only its first `num_layers` blocks.

  The embedding, blocks 0..num_layers-1, final norm and LM head are copies
  of `model`'s (`nnx.clone`; `model` is left unchanged), or with `share` the
  same arrays, no copy (SipIt inverts layer l's states with the first l
  blocks of a real checkpoint: `hidden_states[0..l]` are unchanged, a causal
  state never depends on later blocks). `num_layers` may be 0 (embedding
  output only). Per-layer config entries (`layer_types`, `nope_layers`) are
  cut to the kept layers.

  Raises:
    ValueError: a scanned model (`decoder.unstack_layers` it first) or
      `num_layers` outside [0, the model's layers].
  """
  cfg = model.cfg
  if cfg.scan_layers:
    raise ValueError("first_layers needs an unrolled Decoder "
                     "(cfg.scan_layers=False); use "
                     "jaxlab.models.decoder.unstack_layers(model) first")
  if (not isinstance(num_layers, (int, np.integer))
      or not 0 <= int(num_layers) <= cfg.num_layers):
    raise ValueError(f"num_layers must be in [0, {cfg.num_layers}] (the "
                     f"model's layers), got {num_layers!r}")
  k = int(num_layers)
  new = nnx.merge(*nnx.split(model)) if share else nnx.clone(model)
  new.layers = nnx.List(list(new.layers)[:k])
  new.cfg = cfg.replace(
      num_layers=k, layer_types=tuple(cfg.layer_types[:k]),
      nope_layers=tuple(i for i in cfg.nope_layers if i < k))
  return new
