"""Teacher-forced NLL of a prefix LM (the `prefix_lm_nll` loss).

batch: `images [B, ...]` (the prefix inputs, e.g. images `[B, 32, 32, 3]`
in [0, 1]), `ids [B, T]` ([BOS, tokens.., EOS, pad..]) and `mask [B, T]`
(1 on the tokens to predict; column 0 is 0). The model is a
`jaxlab.models.prefix_lm.PrefixLM` (its encoder trains with the decoder):
the SFT stage of the chart-to-code miniature (paper F).
"""

from typing import Any

import jax
import jax.numpy as jnp

from jaxlab.train import losses


@losses.register("prefix_lm_nll")
def prefix_lm_nll(model, batch: dict[str, jax.Array], *,
                  rng: jax.Array | None = None, config: Any = None):
  """Token-mean NLL of `ids[:, 1:]` over `mask[:, 1:]` given the prefix.

  `config.chunk_size` > 0 (the paper-scale presets' `config.loss`): the
  head and cross-entropy run over chunks of that many text tokens
  (`losses.chunked_token_nll` on the last hidden states of the T ids, the
  last T positions of [prefix; ids]), so the `[B, T, V]` float32 logits are
  never all live; needs a prefix LM with `unembed` whose `forward` takes
  `output_hidden_states` (`jaxlab.models.qwen2_vl_prefix`). Same value up
  to float summation order."""
  del rng
  chunk = (int(config.get("chunk_size", 0) or 0)
           if hasattr(config, "get") else 0)
  ids, mask = batch["ids"], batch["mask"]
  if chunk > 0:
    if not hasattr(model, "unembed"):
      raise ValueError(
          f"config.loss.chunk_size={chunk} needs a prefix LM with "
          f"`unembed`; {type(model).__name__} has not: set "
          "config.loss.chunk_size=0")
    # The logits `forward` also computes are unused: jit drops them.
    out = model.forward(ids, prefix_inputs=batch["images"],
                        output_hidden_states=True)
    h = out.hidden_states[-1][:, -ids.shape[1]:-1]
    total, count = losses.chunked_token_nll(model.unembed, h, ids[:, 1:],
                                            mask[:, 1:], chunk)
  else:
    logits = model.forward(ids, prefix_inputs=batch["images"]).logits[:, :-1]
    total, count = losses.masked_token_nll(logits, ids[:, 1:], mask[:, 1:])
  return total / jnp.maximum(count, 1.0), {"tokens": count}
