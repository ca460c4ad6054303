"""Whisper's audio encoder, and StableToken's tokenizer built on it.

    model, cfg = jaxlab.io.hf.load("/ckpt/whisper")    # a WhisperModel dir
    h_btd = model.encode(input_features=f_bmf)        # [B, T, D], T = F / 2

`WhisperEncoder` is the encoder of transformers' `WhisperModel` (Radford
et al. 2022, "Robust Speech Recognition via Large-Scale Weak
Supervision", sec. 2.3 and fig. 1): log-mel `[B, n_mels, F]` -> two 1-D
convolutions of width 3 (the second of stride 2: 100 Hz -> 50 Hz), each
followed by exact GELU -> + position embeddings (sinusoidal at init,
stored as a table `embed_positions` in the checkpoint) -> pre-LN blocks
(self-attention with q scaled by head_dim^-1/2 and no bias on k; a GELU
MLP) -> a final LayerNorm. As in transformers, no attention mask: the
input is padded to `2 * max_source_positions` frames (30 s at 16 kHz for
the released models) and the encoder attends over the padding.

`Whisper` holds the encoder alone (the decoder of a checkpoint is not
read); `jaxlab.io.hf.whisper` fills it from a checkpoint.

`WhisperTokenizer` is StableToken's tokenizer (spec E.1, papers/A-G.md) on
this encoder: blocks 1..`quantize_after` encode (shared by the clean and
perturbed waveforms), 2x average pooling gives 25 Hz frames, the
quantizer (Voting-LFQ) and its `project_out` replace them, the remaining
blocks and the final LayerNorm continue, and a CTC head stands in for the
ASR decoder (as in the miniature, `jaxlab.models.speech_tokenizer`). It
has the miniature's call signature and outputs, so the loss
`stabletoken`, `speech_tokenizer.tokenize` / `ctc_greedy` and
`jaxlab.evals.speech_tokens` run on it unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.models import registry as _registry
from jaxlab.nn import partitioning as pt
from jaxlab.models import speech_common
from jaxlab.nn import quantizers

ARCHITECTURES = ("WhisperModel", "WhisperForConditionalGeneration",
                 "WhisperForAudioClassification")


@dataclasses.dataclass(frozen=True)
class WhisperConfig:
  """The encoder's sizes (transformers' `WhisperConfig` names)."""
  num_mel_bins: int = 80
  d_model: int = 384
  encoder_layers: int = 4
  encoder_attention_heads: int = 6
  encoder_ffn_dim: int = 1536
  max_source_positions: int = 1500
  layer_norm_eps: float = 1e-5
  activation_function: str = "gelu"
  dtype: str = "float32"
  param_dtype: str = "float32"

  def __post_init__(self):
    if self.d_model % self.encoder_attention_heads:
      raise ValueError(
          f"Whisper d_model={self.d_model} must divide by "
          f"encoder_attention_heads={self.encoder_attention_heads}")
    if self.activation_function not in ACTIVATIONS:
      raise ValueError(
          f"Whisper activation_function={self.activation_function!r}; "
          f"supported: {', '.join(ACTIVATIONS)}")

  @property
  def num_frames(self) -> int:
    """Mel frames of one input window (conv2 halves them)."""
    return 2 * self.max_source_positions


def _kernel(*axes):
  """`kernel_metadata` of a Linear / Conv kernel: its logical axes (FSDP
  over `embed`, tensor parallel over `mlp`), placed by the caller's mesh
  and rules as the decoder's params are (`nn.partitioning.param`)."""
  return {"out_sharding": axes, "eager_sharding": False}


ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}


sinusoids = speech_common.sinusoids


class WhisperEncoderLayer(nnx.Module):
  """One pre-LN block: x + attn(LN(x)); x + fc2(act(fc1(LN(x))))."""

  def __init__(self, cfg: WhisperConfig, *, rngs: nnx.Rngs):
    d, f = cfg.d_model, cfg.encoder_ffn_dim
    kw = dict(dtype=jnp.dtype(cfg.dtype), param_dtype=jnp.dtype(
        cfg.param_dtype), rngs=rngs)
    self.num_heads = cfg.encoder_attention_heads
    self.act = cfg.activation_function
    self.self_attn_layer_norm = nnx.LayerNorm(d, epsilon=cfg.layer_norm_eps,
                                              **kw)
    col, row = _kernel(pt.EMBED, pt.MLP), _kernel(pt.MLP, pt.EMBED)
    self.q_proj = nnx.Linear(d, d, kernel_metadata=col, **kw)
    self.k_proj = nnx.Linear(d, d, use_bias=False, kernel_metadata=col, **kw)
    self.v_proj = nnx.Linear(d, d, kernel_metadata=col, **kw)
    self.out_proj = nnx.Linear(d, d, kernel_metadata=row, **kw)
    self.final_layer_norm = nnx.LayerNorm(d, epsilon=cfg.layer_norm_eps,
                                          **kw)
    self.fc1 = nnx.Linear(d, f, kernel_metadata=col, **kw)
    self.fc2 = nnx.Linear(f, d, kernel_metadata=row, **kw)

  def attention(self, x: jax.Array, mask: jax.Array | None) -> jax.Array:
    b, t, d = x.shape
    n = self.num_heads
    split = lambda y: y.reshape(b, t, n, d // n)  # noqa: E731
    q = split(self.q_proj(x)) * (d // n) ** -0.5
    k, v = split(self.k_proj(x)), split(self.v_proj(x))
    logits = jnp.einsum("bqnh,bknh->bnqk", q, k).astype(jnp.float32)
    if mask is not None:
      logits = jnp.where(mask[:, None, None, :], logits,
                         jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    out = jnp.einsum("bnqk,bknh->bqnh", probs, v).reshape(b, t, d)
    return self.out_proj(out)

  def __call__(self, x: jax.Array, mask: jax.Array | None = None
               ) -> jax.Array:
    x = x + self.attention(self.self_attn_layer_norm(x), mask)
    h = ACTIVATIONS[self.act](self.fc1(self.final_layer_norm(x)))
    return x + self.fc2(h)


class WhisperEncoder(nnx.Module):
  """transformers' `WhisperEncoder` (module docstring); names as its
  state dict's (`conv1`, `conv2`, `embed_positions`, `layers.i.*`,
  `layer_norm`)."""

  def __init__(self, cfg: WhisperConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.d_model
    kw = dict(dtype=jnp.dtype(cfg.dtype), param_dtype=jnp.dtype(
        cfg.param_dtype), rngs=rngs)
    # torch Conv1d(padding=1): one zero frame on each side.
    self.conv1 = nnx.Conv(cfg.num_mel_bins, d, (3,), padding=((1, 1),),
                          kernel_metadata=_kernel(None, None, pt.EMBED), **kw)
    self.conv2 = nnx.Conv(d, d, (3,), strides=(2,), padding=((1, 1),),
                          kernel_metadata=_kernel(None, None, pt.EMBED), **kw)
    self.embed_positions = pt.param(jnp.asarray(
        sinusoids(cfg.max_source_positions, d), jnp.dtype(cfg.param_dtype)),
                                    (None, pt.EMBED))
    self.layers = nnx.List([WhisperEncoderLayer(cfg, rngs=rngs)
                            for _ in range(cfg.encoder_layers)])
    self.layer_norm = nnx.LayerNorm(d, epsilon=cfg.layer_norm_eps, **kw)

  def stem(self, features_bfm: jax.Array) -> jax.Array:
    """Convolutions + positions: `[B, F, M]` -> `[B, F / 2, D]`."""
    act = ACTIVATIONS[self.cfg.activation_function]
    x = act(self.conv1(features_bfm))
    x = act(self.conv2(x))
    return x + self.embed_positions[...][:x.shape[1]].astype(x.dtype)

  def blocks(self, x: jax.Array, start: int, stop: int,
             mask: jax.Array | None = None) -> jax.Array:
    """Blocks `start..stop-1` (0-based) over `x [B, T, D]`."""
    for layer in list(self.layers)[start:stop]:
      x = layer(x, mask)
    return x

  def __call__(self, features_bfm: jax.Array) -> jax.Array:
    """Last hidden state `[B, F / 2, D]` of log-mel `[B, F, M]`."""
    x = self.blocks(self.stem(features_bfm), 0, self.cfg.encoder_layers)
    return self.layer_norm(x)


class Whisper(nnx.Module):
  """A Whisper checkpoint's encoder (`jaxlab.io.hf.load` of a Whisper dir)."""

  def __init__(self, cfg: WhisperConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.encoder = WhisperEncoder(cfg, rngs=rngs)

  def encode(self, input_features: jax.Array) -> jax.Array:
    """`input_features [B, n_mels, F]` (the feature extractor's layout,
    F = 2 * max_source_positions) -> last hidden state `[B, F / 2, D]`."""
    f = jnp.asarray(input_features)
    cfg = self.cfg
    if f.ndim != 3 or f.shape[1] != cfg.num_mel_bins:
      raise ValueError(
          f"Whisper.encode: input_features must be [batch, "
          f"{cfg.num_mel_bins} mel bins, frames], got shape {f.shape}")
    if f.shape[2] != cfg.num_frames:
      raise ValueError(
          f"Whisper.encode: {f.shape[2]} frames; this checkpoint takes "
          f"{cfg.num_frames} (2 * max_source_positions): pad or cut the "
          f"features as WhisperFeatureExtractor does "
          f"(jaxlab.data.audio.whisper_features)")
    return self.encoder(jnp.swapaxes(f, 1, 2))

  def __call__(self, input_features: jax.Array) -> jax.Array:
    return self.encode(input_features)


# ---------------------------------------------------------------------------
# StableToken on Whisper's encoder
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WhisperTokenizerConfig(speech_common.TokenizerConfigMethods):
  """StableToken on a Whisper encoder (spec E.1-E.2)."""
  whisper: WhisperConfig = WhisperConfig()
  quantize_after: int = 2      # blocks below the quantizer (16 of 32)
  vocab_size: int = 30         # CTC classes incl. the blank (id 0)
  n_voters: int = 5
  bits: int = 13
  num_clean: int = 3
  codebook_scale: float = 1.0
  pool: int = 2                # 50 Hz -> 25 Hz
  conv_stride: int = 2

  def __post_init__(self):
    if not 0 < self.quantize_after <= self.whisper.encoder_layers:
      raise ValueError(
          f"tokenizer.quantize_after={self.quantize_after} must be in [1, "
          f"encoder_layers={self.whisper.encoder_layers}]")
    if self.vocab_size < 2:
      raise ValueError(f"tokenizer vocab_size must be >= 2, got "
                       f"{self.vocab_size}")

  # The miniature's config field the experiment reads.
  @property
  def quantizer(self) -> str:
    return "voting_lfq"


class WhisperTokenizer(nnx.Module):
  """Whisper encoder split by Voting-LFQ at `quantize_after`, CTC head."""

  def __init__(self, cfg: WhisperTokenizerConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.whisper.d_model
    self.encoder = WhisperEncoder(cfg.whisper, rngs=rngs)
    self.quantizer = quantizers.VotingLFQ(
        d, cfg.n_voters, cfg.bits, cfg.num_clean,
        codebook_scale=cfg.codebook_scale, rngs=rngs)
    self.head = nnx.Linear(d, cfg.vocab_size, rngs=rngs)

  def encode(self, features: jax.Array, frame_lengths: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
    """Stem + blocks below the quantizer + pooling: `[B, F, M]` -> h
    `[B, T, D]` (25 Hz), token mask `[B, T]`."""
    cfg = self.cfg
    x = self.encoder.stem(features)
    x = self.encoder.blocks(x, 0, cfg.quantize_after)
    b, t_enc, d = x.shape
    t_tok = t_enc // cfg.pool
    h = x[:, :t_tok * cfg.pool].reshape(b, t_tok, cfg.pool, d).mean(2)
    mask = jnp.arange(t_tok)[None, :] < cfg.token_lengths(
        frame_lengths)[:, None]
    return h, mask

  def __call__(self, features: jax.Array, frame_lengths: jax.Array, *,
               train: bool = False, features_noisy: jax.Array | None = None,
               route_mask: jax.Array | None = None) -> dict[str, Any]:
    """As `speech_tokenizer.SpeechTokenizer.__call__`: {"logits" [B,T,V],
    "token_mask", "quant", "h"}; the upper blocks run at 25 Hz."""
    h, mask = self.encode(features, frame_lengths)
    h_noisy = None
    if features_noisy is not None:
      h_noisy, _ = self.encode(features_noisy, frame_lengths)
    qo = self.quantizer(h, train=train, h_noisy=h_noisy,
                        route_mask=route_mask)
    x = self.encoder.blocks(qo.out, self.cfg.quantize_after,
                            self.cfg.whisper.encoder_layers)
    logits = self.head(self.encoder.layer_norm(x))
    return {"logits": logits, "token_mask": mask, "quant": qo, "h": h}


def tokenizer_from_whisper(whisper: Whisper, cfg: WhisperTokenizerConfig, *,
                           seed: int = 0) -> WhisperTokenizer:
  """A `WhisperTokenizer` whose encoder is `whisper`'s (quantizer and CTC
  head freshly initialised)."""
  if cfg.whisper != whisper.cfg:
    raise ValueError(f"tokenizer config's Whisper sizes {cfg.whisper} differ "
                     f"from the checkpoint's {whisper.cfg}")
  tok = WhisperTokenizer(cfg, rngs=nnx.Rngs(seed))
  nnx.update(tok.encoder, nnx.state(whisper.encoder))
  return tok


def tokenizer_config_from_dict(model_cfg) -> WhisperTokenizerConfig:
  """`config.model` of name "whisper_tokenizer" -> config: the Whisper
  fields (`WhisperConfig` names) and the tokenizer's (`quantize_after`,
  `vocab_size`, `n_voters`, `bits`, `num_clean`, `codebook_scale`,
  `pool`); an unknown key is an error naming the valid ones."""
  d = {k: v for k, v in dict(model_cfg).items() if k != "name"}
  wnames = {f.name for f in dataclasses.fields(WhisperConfig)}
  tnames = {f.name for f in dataclasses.fields(WhisperTokenizerConfig)} - {
      "whisper"}
  unknown = sorted(set(d) - wnames - tnames)
  if unknown:
    raise ValueError(f"config.model (whisper_tokenizer): unknown fields "
                     f"{unknown}; valid: {', '.join(sorted(wnames | tnames))}")
  wcfg = WhisperConfig(**{k: v for k, v in d.items() if k in wnames})
  return WhisperTokenizerConfig(
      whisper=wcfg, **{k: v for k, v in d.items() if k in tnames})


def _flops_per_frame(cfg: WhisperTokenizerConfig):
  """Training FLOPs per mel frame: 6 per multiply-accumulate (2 FLOPs,
  forward + backward = 3x) of the conv stem, the blocks below the
  quantizer at 50 Hz and above it at 25 Hz (attention scores included)
  and the CTC head."""
  w = cfg.whisper
  d, f, m = w.d_model, w.encoder_ffn_dim, w.num_mel_bins

  def block(t):  # per position, sequence length t
    return 4 * d * d + 2 * d * f + 2 * t * d

  def per_frame(frames: int) -> float:
    t50 = frames // 2
    t25 = t50 // cfg.pool
    macs = frames * 3 * m * d + t50 * 3 * d * d
    macs += t50 * cfg.quantize_after * block(t50)
    macs += t25 * (w.encoder_layers - cfg.quantize_after) * block(t25)
    macs += t25 * d * cfg.vocab_size
    return 6.0 * macs / frames
  return per_frame


@_registry.register("whisper_tokenizer")
def _build_whisper_tokenizer(model_cfg, *, vocab_size: int | None = None,
                             seed: int = 0) -> _registry.ModelSpec:
  """StableToken on a Whisper encoder built from `config.model` (the AOT
  compile of the paper preset; the run itself reads `init_from`)."""
  del vocab_size
  cfg = tokenizer_config_from_dict(model_cfg)
  return _registry.ModelSpec(
      factory=lambda: WhisperTokenizer(cfg, rngs=nnx.Rngs(seed)),
      config=cfg, flops_per_token=_flops_per_frame(cfg))


WhisperTokenizerConfig.module_class = WhisperTokenizer
