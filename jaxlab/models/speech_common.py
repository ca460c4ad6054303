"""What the two speech tokenizers share (`speech_tokenizer` for the
miniature, `whisper` for the Whisper-initialised one): Whisper's sinusoidal
position table and the config methods that count tokens and parameters."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0
              ) -> np.ndarray:
  """Whisper's sinusoidal position table `[length, channels]` float32
  (sin | cos; openai/whisper `model.py` `sinusoids`; a 2-channel table
  takes timescale step log(max_timescale) instead of dividing by 0)."""
  inc = math.log(max_timescale) / max(channels // 2 - 1, 1)
  inv = np.exp(-inc * np.arange(channels // 2))
  t = np.arange(length)[:, None] * inv[None, :]
  return np.concatenate([np.sin(t), np.cos(t)], axis=1).astype(np.float32)


class TokenizerConfigMethods:
  """`token_lengths` and `num_params` of a speech tokenizer config with
  `conv_stride` and `pool` fields; `module_class` names the model."""

  module_class: type[nnx.Module]

  def token_lengths(self, frame_lengths):
    """Valid 25 Hz tokens of inputs with `frame_lengths` valid mel frames."""
    enc = -(-jnp.asarray(frame_lengths) // self.conv_stride)
    return enc // self.pool

  def num_params(self) -> int:
    """Parameters of the config's model (counted abstractly)."""
    model = nnx.eval_shape(lambda: self.module_class(self,
                                                     rngs=nnx.Rngs(0)))
    return sum(int(np.prod(x.shape)) for x in
               jax.tree.leaves(nnx.state(model, nnx.Param)))
