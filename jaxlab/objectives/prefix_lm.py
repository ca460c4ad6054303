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
  """Token-mean NLL of `ids[:, 1:]` over `mask[:, 1:]` given the prefix."""
  del rng, config
  logits = model.forward(batch["ids"],
                         prefix_inputs=batch["images"]).logits[:, :-1]
  total, count = losses.masked_token_nll(logits, batch["ids"][:, 1:],
                                         batch["mask"][:, 1:])
  return total / jnp.maximum(count, 1.0), {"tokens": count}
