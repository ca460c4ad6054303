"""StableToken-style speech tokenizer (spec: papers/A-G.md, section E.1-E.2).

    log-mel [B, F, M] -> conv (stride 2, 50 Hz) -> lower encoder (L blocks)
      -> average pooling (kernel 2, 25 Hz) -> h -> quantizer (Voting-LFQ /
      LFQ / VQ) -> project_out -> upper encoder -> CTC head [B, T, V]

The CPU-sized stand-in for Whisper-large-v3 with the quantizer at layer 16:
the lower blocks are the shared layers <= 16 that encode both the clean and
the perturbed waveform (h, h'), the upper blocks layers 17-32, and a CTC
head replaces the ASR decoder (trained with `optax.ctc_loss` by the
registered loss `stabletoken`, jaxlab/objectives/stabletoken.py).

`tokenize` returns the 25 Hz token indices (hard vote) and each branch's own
indices; `ctc_greedy` the greedy CTC transcript.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import registry as jregistry
from jaxlab.models import registry
from jaxlab.models import speech_common
from jaxlab.nn import quantizers

QUANTIZERS = ("voting_lfq", "vq")


@dataclasses.dataclass(frozen=True)
class SpeechTokenizerConfig(speech_common.TokenizerConfigMethods):
  """Sizes of the tokenizer (defaults: the spec's CPU miniature)."""
  n_mels: int = 40
  dim: int = 64
  num_heads: int = 4
  mlp_dim: int = 128
  lower_layers: int = 2
  upper_layers: int = 1
  vocab_size: int = 17          # CTC classes incl. the blank (id 0)
  quantizer: str = "voting_lfq"  # voting_lfq | vq
  n_voters: int = 5
  bits: int = 8
  num_clean: int = 3
  codebook_scale: float = 1.0
  vq_codebook_size: int = 256
  vq_beta: float = 0.25
  conv_stride: int = 2          # 100 Hz mel frames -> 50 Hz
  pool: int = 2                 # 50 Hz -> 25 Hz

  def __post_init__(self):
    if self.quantizer not in QUANTIZERS:
      raise ValueError(f"model.quantizer={self.quantizer!r}; valid: "
                       f"{', '.join(QUANTIZERS)}")
    if self.dim % self.num_heads:
      raise ValueError(f"model.dim={self.dim} must divide by model.num_heads"
                       f"={self.num_heads}")
    if self.quantizer == "voting_lfq" and (self.n_voters < 1
                                           or self.n_voters % 2 == 0):
      raise ValueError(
          f"model.n_voters must be a positive odd number so the bitwise "
          f"majority vote is strict (spec E.2), got n_voters={self.n_voters}")
    if self.vocab_size < 2:
      raise ValueError(f"model.vocab_size must be >= 2 (blank + a label), "
                       f"got {self.vocab_size}")


def sinusoid_positions(length: int, dim: int) -> jax.Array:
  """Whisper's fixed sinusoidal position embedding `[length, dim]`."""
  return jnp.asarray(speech_common.sinusoids(length, dim))


class EncoderBlock(nnx.Module):
  """Pre-LN bidirectional transformer block (padding-masked attention)."""

  def __init__(self, dim: int, num_heads: int, mlp_dim: int, *,
               rngs: nnx.Rngs):
    self.ln1 = nnx.LayerNorm(dim, rngs=rngs)
    self.attn = nnx.MultiHeadAttention(num_heads, dim, decode=False,
                                       rngs=rngs)
    self.ln2 = nnx.LayerNorm(dim, rngs=rngs)
    self.fc1 = nnx.Linear(dim, mlp_dim, rngs=rngs)
    self.fc2 = nnx.Linear(mlp_dim, dim, rngs=rngs)

  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    attn_mask = nnx.make_attention_mask(mask, mask)
    x = x + self.attn(self.ln1(x), mask=attn_mask)
    return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))


class SpeechTokenizer(nnx.Module):
  """Encoder, pooling, quantizer, upper encoder and CTC head (spec E.1)."""

  def __init__(self, cfg: SpeechTokenizerConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.dim
    self.conv1 = nnx.Conv(cfg.n_mels, d, (3,), rngs=rngs)
    self.conv2 = nnx.Conv(d, d, (3,), strides=(cfg.conv_stride,), rngs=rngs)
    self.lower = nnx.List([EncoderBlock(d, cfg.num_heads, cfg.mlp_dim,
                                        rngs=rngs)
                           for _ in range(cfg.lower_layers)])
    if cfg.quantizer == "voting_lfq":
      self.quantizer = quantizers.VotingLFQ(
          d, cfg.n_voters, cfg.bits, cfg.num_clean,
          codebook_scale=cfg.codebook_scale, rngs=rngs)
    else:
      self.quantizer = quantizers.VectorQuantizer(
          d, cfg.vq_codebook_size, cfg.bits, beta=cfg.vq_beta, rngs=rngs)
    self.upper = nnx.List([EncoderBlock(d, cfg.num_heads, cfg.mlp_dim,
                                        rngs=rngs)
                           for _ in range(cfg.upper_layers)])
    self.ln_out = nnx.LayerNorm(d, rngs=rngs)
    self.head = nnx.Linear(d, cfg.vocab_size, rngs=rngs)

  def encode(self, features: jax.Array, frame_lengths: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
    """Lower encoder + pooling: `[B, F, M]` -> h `[B, T, D]`, mask `[B, T]`."""
    cfg = self.cfg
    x = jax.nn.gelu(self.conv1(features))
    x = jax.nn.gelu(self.conv2(x))
    t_enc = x.shape[1]
    enc_len = -(-frame_lengths // cfg.conv_stride)
    mask = jnp.arange(t_enc)[None, :] < enc_len[:, None]
    x = x + sinusoid_positions(t_enc, cfg.dim)[None]
    for block in self.lower:
      x = block(x, mask)
    t_tok = t_enc // cfg.pool
    b = x.shape[0]
    h = x[:, :t_tok * cfg.pool].reshape(b, t_tok, cfg.pool, cfg.dim).mean(2)
    tok_mask = jnp.arange(t_tok)[None, :] < cfg.token_lengths(
        frame_lengths)[:, None]
    return h, tok_mask

  def __call__(self, features: jax.Array, frame_lengths: jax.Array, *,
               train: bool = False, features_noisy: jax.Array | None = None,
               route_mask: jax.Array | None = None) -> dict[str, Any]:
    """Returns {"logits" [B,T,V], "token_mask" [B,T], "quant", "h"}.

    With `features_noisy` (the perturbed copy of the same waveforms, so the
    same lengths) and `route_mask [B, n]`, the branches marked True read
    the perturbed encoding h' (noise-aware consensus training, spec E.3).
    """
    h, mask = self.encode(features, frame_lengths)
    h_noisy = None
    if features_noisy is not None:
      h_noisy, _ = self.encode(features_noisy, frame_lengths)
    qo = self.quantizer(h, train=train, h_noisy=h_noisy,
                        route_mask=route_mask)
    x = qo.out
    for block in self.upper:
      x = block(x, mask)
    logits = self.head(self.ln_out(x))
    return {"logits": logits, "token_mask": mask, "quant": qo, "h": h}


@nnx.jit
def _tokenize(model: SpeechTokenizer, features, frame_lengths):
  h, mask = model.encode(features, frame_lengths)
  qo = model.quantizer(h, train=False)
  return qo.indices, qo.branch_indices, mask


def tokenize(model: SpeechTokenizer, features: jax.Array,
             frame_lengths: jax.Array) -> tuple[np.ndarray, np.ndarray,
                                                np.ndarray]:
  """Inference tokens: (indices [B,T], branch indices [B,T,n], mask [B,T])."""
  idx, branch, mask = _tokenize(model, jnp.asarray(features),
                                jnp.asarray(frame_lengths))
  return np.asarray(idx), np.asarray(branch), np.asarray(mask)


@nnx.jit
def _greedy(model: SpeechTokenizer, features, frame_lengths):
  out = model(features, frame_lengths, train=False)
  return jnp.argmax(out["logits"], -1), out["token_mask"]


def ctc_collapse(path: np.ndarray, blank_id: int = 0) -> list[int]:
  """Greedy CTC rule: merge repeats, then drop blanks."""
  out, prev = [], None
  for p in path:
    p = int(p)
    if p != prev and p != blank_id:
      out.append(p)
    prev = p
  return out


def ctc_greedy(model: SpeechTokenizer, features: jax.Array,
               frame_lengths: jax.Array) -> list[list[int]]:
  """Greedy CTC transcripts (label ids) of a batch, at inference (hard vote)."""
  best, mask = _greedy(model, jnp.asarray(features),
                       jnp.asarray(frame_lengths))
  best, mask = np.asarray(best), np.asarray(mask)
  return [ctc_collapse(best[i][mask[i]]) for i in range(best.shape[0])]


def config_from_dict(model_cfg, *, vocab_size: int | None = None
                     ) -> SpeechTokenizerConfig:
  """`config.model` fields (minus `name`) -> config; an unknown key is an
  error naming the valid fields (`jaxlab.registry.dataclass_from_config`)."""
  over = {}
  if vocab_size is not None and dict(model_cfg).get("vocab_size") in (
      None, 0, -1):
    over["vocab_size"] = vocab_size
  return jregistry.dataclass_from_config(SpeechTokenizerConfig, model_cfg,
                                         **over)


# -- model.name="speech_tokenizer" (the registry finds it by package walk) ----


@registry.register("speech_tokenizer")
def _build_speech_tokenizer(model_cfg, *, vocab_size: int | None = None,
                            seed: int = 0) -> registry.ModelSpec:
  """StableToken tokenizer (paper E); vocab_size = CTC classes incl. blank."""
  cfg = config_from_dict(model_cfg, vocab_size=vocab_size)
  return registry.ModelSpec(
      factory=lambda: SpeechTokenizer(cfg, rngs=nnx.Rngs(seed)),
      config=cfg)


SpeechTokenizerConfig.module_class = SpeechTokenizer
