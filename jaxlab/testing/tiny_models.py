"""Tiny models and prompts shared by the decoding tests."""

from flax import nnx

from jaxlab.models import decoder as dec

# Rows of different prompt lengths (left padding, per-row positions).
PROMPTS = [[5, 17, 3, 22, 9, 1, 30], [11, 2], [40, 41, 42, 7]]


def tiny_decoder(seed: int = 0, **overrides) -> dec.Decoder:
  """A 2-layer GQA decoder over 64 tokens; `overrides` are DecoderConfig fields.

  init_std 0.5 spreads the logits so greedy choices are not near-ties.
  """
  cfg = dec.DecoderConfig(**{**dict(
      vocab_size=64, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
      mlp_dim=64, init_std=0.5), **overrides})
  return dec.Decoder(cfg, rngs=nnx.Rngs(seed))
