"""A Llama/Qwen2-family decoder-only language model in Flax NNX.

    model = Decoder(DecoderConfig(...), rngs=nnx.Rngs(0))
    logits_btv = model(input_ids_bt)                       # [B, T, V]
    out = model.forward(input_ids_bt, cache=cache,          # full output:
                        output_hidden_states=True)          # logits, cache,
                                                            # hidden states

Pre-norm blocks: h = h + Attn(RMSNorm(h)); h = h + SwiGLU(RMSNorm(h)).
Causal by default; `causal=False` gives the bidirectional model used by
diffusion LMs (and `forward(causal=...)` overrides it per call). Per-layer
RoPE can be switched off (`nope_layers`) for NoPE/iRoPE-style controls.

Attention masks follow `jaxlab.nn.attention` (position ids, padding, cache
slots); `forward(allowed_mask=...)` replaces the causal/window rule by an
explicit boolean mask, and `forward(output_attentions=True)` returns each
layer's attention probabilities (explicit float32 softmax, the quantity of
transformers' eager `output_attentions`).
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from flax import struct
from flax.core import FrozenDict

from jaxlab.nn import attention as attn_lib
from jaxlab.nn import mlp as mlp_lib
from jaxlab.nn import dtypes
from jaxlab.nn import norm as norm_lib
from jaxlab.nn import partitioning as pt
from jaxlab.nn import rope as rope_lib

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16,
           "float16": jnp.float16,
           "float64": jnp.float64}  # needs jax_enable_x64 (reference runs)


def to_dtype(name) -> Any:
  if not isinstance(name, str):
    return name
  if name not in _DTYPES:
    raise ValueError(f"unknown dtype {name!r}; valid: {', '.join(_DTYPES)}")
  return _DTYPES[name]


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  """Architecture of a decoder LM (field names follow HF where they exist).

  `rope_scaling` is a mapping with a `method` key naming a registered
  `jaxlab.nn.rope` scaling plus that method's keyword options, e.g.
  `{"method": "yarn", "factor": 4.0, "original_max_position": 2048}` (the
  `config.model.rope_scaling` section); None, {} or method "default" is
  plain RoPE and is stored as None.
  """
  vocab_size: int = 512
  dim: int = 128
  num_layers: int = 2
  num_heads: int = 4
  num_kv_heads: int = 2
  head_dim: int | None = None
  mlp_dim: int = 256
  rope_theta: float = 10000.0
  rope_scaling: Mapping[str, Any] | None = None
  max_position_embeddings: int = 2048
  norm_eps: float = 1e-6
  tie_embeddings: bool = False
  qkv_bias: bool = False
  qk_norm: bool = False  # Qwen3: RMSNorm of each q/k head before RoPE
  causal: bool = True
  sliding_window: int | None = None
  nope_layers: tuple[int, ...] = ()
  param_dtype: str = "float32"
  dtype: str = "float32"
  remat: bool = False
  init_std: float = 0.02
  attention_impl: str | None = None

  def __post_init__(self):
    # One reading of `rope_scaling` (jaxlab.nn.rope.normalize_scaling): a
    # config's ConfigDict, an HF import or None; plain RoPE becomes None.
    scaling = rope_lib.normalize_scaling(self.rope_scaling)
    object.__setattr__(self, "rope_scaling",
                       None if scaling is None else FrozenDict(scaling))
    object.__setattr__(self, "nope_layers", tuple(self.nope_layers))
    hd = self.resolved_head_dim
    if hd % 2:
      raise ValueError(f"head_dim must be even for RoPE, got {hd}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} must be a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")
    for i in self.nope_layers:
      if not 0 <= i < self.num_layers:
        raise ValueError(f"nope_layers entry {i} outside [0, {self.num_layers})")
    to_dtype(self.param_dtype), to_dtype(self.dtype)

  @property
  def resolved_head_dim(self) -> int:
    return self.head_dim or self.dim // self.num_heads

  @property
  def rope_dtype(self) -> Any:
    """dtype of the RoPE tables: float32, float64 for a float64 model."""
    return dtypes.at_least_float32(to_dtype(self.dtype))

  def replace(self, **kw) -> "DecoderConfig":
    return dataclasses.replace(self, **kw)

  def rope_tables(self, seq_len: int | None = None) -> tuple[Any, float]:
    """(inv_freq `[head_dim // 2]`, attention_scale) for this config.

    `seq_len` (a static Python int) is the current sequence length; only
    length-dependent scalings (dynamic NTK) use it, the others ignore it.
    """
    return rope_lib.scaling_tables(self.rope_scaling,
                                   head_dim=self.resolved_head_dim,
                                   base=self.rope_theta, seq_len=seq_len)

  def num_params(self) -> int:
    hd = self.resolved_head_dim
    attn = self.dim * hd * (2 * self.num_heads + 2 * self.num_kv_heads)
    if self.qkv_bias:
      attn += hd * (self.num_heads + 2 * self.num_kv_heads)
    if self.qk_norm:
      attn += 2 * hd
    block = attn + 3 * self.dim * self.mlp_dim + 2 * self.dim
    emb = self.vocab_size * self.dim * (1 if self.tie_embeddings else 2)
    return self.num_layers * block + emb + self.dim


@struct.dataclass
class DecoderOutput:
  logits: jax.Array  # [B, T, V] float32
  cache: attn_lib.KVCache | None = None
  # (embeddings, after layer 1, ..., after layer L): the residual stream
  # before the final norm, each [B, T, D].
  hidden_states: tuple[jax.Array, ...] | None = None
  # Per layer (q `[B, T, N, H]`, k `[B, T, K, H]`) after RoPE (un-rotated in
  # NoPE layers), for probing (frequency entropy); only with output_qk=True.
  qk: tuple[tuple[jax.Array, jax.Array], ...] | None = None
  # Per layer, float32 attention probabilities [B, N, T, S] over the S keys
  # attended to (the cache slots when decoding with a cache; the T inputs
  # otherwise), after masking and softmax; only with output_attentions=True.
  attentions: tuple[jax.Array, ...] | None = None


class Block(nnx.Module):
  """Pre-norm transformer block."""

  def __init__(self, cfg: DecoderConfig, layer: int, *, rngs: nnx.Rngs):
    pdt, dt = to_dtype(cfg.param_dtype), to_dtype(cfg.dtype)
    self.attn_norm = norm_lib.RMSNorm(cfg.dim, eps=cfg.norm_eps,
                                      param_dtype=pdt)
    self.attn = attn_lib.Attention(
        cfg.dim, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim,
        rngs=rngs, qkv_bias=cfg.qkv_bias, param_dtype=pdt, dtype=dt,
        init_std=cfg.init_std, use_rope=layer not in cfg.nope_layers,
        attention_impl=cfg.attention_impl, qk_norm=cfg.qk_norm,
        norm_eps=cfg.norm_eps)
    self.mlp_norm = norm_lib.RMSNorm(cfg.dim, eps=cfg.norm_eps,
                                     param_dtype=pdt)
    self.mlp = mlp_lib.SwiGLU(cfg.dim, cfg.mlp_dim, rngs=rngs, param_dtype=pdt,
                              dtype=dt, init_std=cfg.init_std)

  def __call__(self, h_btd, cos_btd, sin_btd, mask, layer_cache, cache_index,
               is_causal=False, output_attentions=False):
    """(h `[B, T, D]`, new (k, v) cache or None, probs or None)."""
    res = self.attn(self.attn_norm(h_btd), cos_btd=cos_btd, sin_btd=sin_btd,
                    mask=mask, is_causal=is_causal, layer_cache=layer_cache,
                    cache_index=cache_index,
                    output_attentions=output_attentions)
    a, new_cache = res[0], res[1]
    probs = res[2] if output_attentions else None
    h_btd = h_btd + a.astype(h_btd.dtype)
    h_btd = h_btd + self.mlp(self.mlp_norm(h_btd)).astype(h_btd.dtype)
    return h_btd, new_cache, probs


class Decoder(nnx.Module):
  """Decoder-only LM (Llama / Qwen2 family)."""

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    pdt = to_dtype(cfg.param_dtype)
    self.embed_vd = pt.param(
        jax.nn.initializers.normal(cfg.init_std)(
            rngs.params(), (cfg.vocab_size, cfg.dim), pdt),
        (pt.VOCAB, pt.EMBED))
    self.layers = nnx.List([Block(cfg, i, rngs=rngs)
                            for i in range(cfg.num_layers)])
    self.final_norm = norm_lib.RMSNorm(cfg.dim, eps=cfg.norm_eps,
                                       param_dtype=pdt)
    if cfg.tie_embeddings:
      self.lm_head_dv = None
    else:
      self.lm_head_dv = pt.param(
          jax.nn.initializers.normal(cfg.init_std)(
              rngs.params(), (cfg.dim, cfg.vocab_size), pdt),
          (pt.EMBED, pt.VOCAB))

  # -- pieces usable on their own (multimodal inputs, probes) --------------

  def embed(self, input_ids_bt: jax.Array) -> jax.Array:
    """Token embeddings `[B, T, D]` in the compute dtype."""
    return jnp.take(self.embed_vd[...], input_ids_bt, axis=0).astype(
        to_dtype(self.cfg.dtype))

  def unembed(self, h_btd: jax.Array) -> jax.Array:
    """Final norm + LM head; float32 logits `[B, T, V]`."""
    dt = to_dtype(self.cfg.dtype)
    h = self.final_norm(h_btd).astype(dt)
    if self.lm_head_dv is None:
      logits = jnp.einsum("btd,vd->btv", h, self.embed_vd[...].astype(dt))
    else:
      logits = h @ self.lm_head_dv[...].astype(dt)
    return logits.astype(dtypes.at_least_float32(logits.dtype))

  def init_cache(self, batch: int, max_len: int,
                 dtype=None) -> attn_lib.KVCache:
    cfg = self.cfg
    return attn_lib.KVCache.init(
        num_layers=cfg.num_layers, batch=batch, max_len=max_len,
        num_kv_heads=cfg.num_kv_heads, head_dim=cfg.resolved_head_dim,
        dtype=dtype or to_dtype(cfg.dtype))

  @staticmethod
  def default_positions(valid_bt: jax.Array,
                        cache: attn_lib.KVCache | None = None) -> jax.Array:
    """Position ids `forward` uses when none are given: counted over the
    real tokens of `valid_bt` `[B, T]` (padding repeats its neighbour's id,
    clipped at 0), continuing per row after the largest position the cache
    holds."""
    offset = 0
    if cache is not None:
      offset = jnp.max(cache.positions, axis=(1, 2))[:, None] + 1
    positions = offset + jnp.cumsum(valid_bt.astype(jnp.int32), axis=1) - 1
    return jnp.maximum(positions, 0).astype(jnp.int32)

  def rotary(self, positions_bt: jax.Array, *, seq_len: int
             ) -> tuple[jax.Array, jax.Array]:
    """RoPE (cos, sin) tables `[B, T, head_dim]` at `positions_bt`, as
    `forward` builds them (`seq_len`: the static length that length-dependent
    scalings see: T, or the cache capacity when decoding with a cache)."""
    inv_freq, scale = self.cfg.rope_tables(seq_len=seq_len)
    return rope_lib.cos_sin(
        positions_bt.astype(jnp.int32), inv_freq, scale,
        dtype=self.cfg.rope_dtype)

  # -- forward ---------------------------------------------------------------

  def __call__(self, input_ids_bt: jax.Array, **kwargs) -> jax.Array:
    """Logits `[B, T, V]` (float32); see `forward` for the keyword options."""
    return self.forward(input_ids_bt, **kwargs).logits

  def forward(self, input_ids_bt: jax.Array | None = None, *,
              inputs_embeds: jax.Array | None = None,
              positions: jax.Array | None = None,
              attention_mask: jax.Array | None = None,
              segment_ids: jax.Array | None = None,
              extra_mask: jax.Array | None = None,
              cache: attn_lib.KVCache | None = None,
              output_hidden_states: bool = False,
              rope_pair_weights: jax.Array | None = None,
              output_qk: bool = False,
              output_attentions: bool = False,
              causal: bool | None = None,
              allowed_mask: jax.Array | None = None) -> DecoderOutput:
    """Runs the model.

    Mask rule (see `jaxlab.nn.attention`): query t of row b may attend key s
    iff the key is a real token (not padding, not an empty cache slot:
    position >= 0), in the same segment, allowed by `extra_mask` (if given),
    and either allowed by `allowed_mask` when one is given, or otherwise by
    the position rule: `k_pos <= q_pos` if causal, and
    `q_pos - k_pos < sliding_window` if the config sets a window. So an
    `allowed_mask` grants attention that position ids would forbid (ids that
    restart at 0, gathered non-contiguous ids) as well as denying it.

    Args:
      input_ids_bt: int tokens `[B, T]` (or give `inputs_embeds [B, T, D]`).
      positions: position ids `[B, T]`; default: counted over
        `attention_mask` (0, 1, ... for real tokens), continuing from the
        cache when one is given.
      attention_mask: `[B, T]` True/1 for real tokens, False/0 for padding.
      segment_ids: `[B, T]` ids of packed sequences (no cross-attention).
      extra_mask: arbitrary boolean mask broadcastable to `[B, N, T, S]`,
        AND-ed in (only denies).
      cache: a `KVCache`; the T new tokens are written at `cache.index`
        (S = cache capacity); raises ValueError when `cache.index + T` would
        pass the capacity (checked when the index is concrete; under jit the
        logits of an overflowing call are NaN and `cache.index` ends above
        `cache.max_len`, see `KVCache`).
      output_hidden_states: also return the residual stream of every layer.
      rope_pair_weights: optional `[head_dim // 2]` (or `[L, head_dim // 2]`)
        per-pair rotation weights (1 = plain RoPE).
      output_qk: also return each layer's post-RoPE queries and keys.
      output_attentions: also return each layer's attention probabilities
        `[B, N, T, S]` (float32); attention is then computed explicitly
        (einsum + masked float32 softmax) instead of by
        `jax.nn.dot_product_attention`.
      causal: overrides `cfg.causal` for this call (None = the config's).
      allowed_mask: boolean, broadcastable to `[B, N, T, S]` (S = cache
        slots with a cache, else T), True = may attend; replaces the causal
        and sliding-window rules (padding and empty slots stay denied).

    Returns:
      `DecoderOutput` with float32 logits, the updated cache, hidden states,
      and (on request) q/k and attention probabilities.
    """
    cfg = self.cfg
    if (input_ids_bt is None) == (inputs_embeds is None):
      raise ValueError("give exactly one of input_ids_bt and inputs_embeds")
    h = self.embed(input_ids_bt) if inputs_embeds is None else (
        inputs_embeds.astype(to_dtype(cfg.dtype)))
    b, t = h.shape[:2]
    is_causal_cfg = cfg.causal if causal is None else bool(causal)
    if cache is not None:
      cache.check_capacity(t)
    valid_bt = (jnp.ones((b, t), bool) if attention_mask is None
                else attention_mask.astype(bool))
    user_positions = positions
    if positions is None and (cache is not None or attention_mask is not None):
      positions = self.default_positions(valid_bt, cache)
    # The plain causal (or bidirectional) case passes no mask array, so the
    # fused attention kernels of GPU/TPU backends can be selected.
    plain = (cache is None and attention_mask is None and segment_ids is None
             and extra_mask is None and allowed_mask is None
             and cfg.sliding_window is None and user_positions is None)
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    positions = positions.astype(jnp.int32)

    if plain:
      cache_positions, mask = None, None
    elif cache is not None:
      new_pos = jnp.where(valid_bt, positions, -1)
      new_pos_bkt = jnp.broadcast_to(new_pos[:, None, :],
                                     (b, cache.num_kv_heads, t))
      cache_positions = jax.lax.dynamic_update_slice(
          cache.positions, new_pos_bkt, (0, 0, cache.index))
      # Slots are per KV head (a cache policy may keep different keys per
      # head), so the mask is [B, K, T, S] expanded to the query heads.
      mask = attn_lib.make_attention_mask(
          positions, cache_positions, causal=is_causal_cfg, sliding_window=cfg.sliding_window,
          extra_mask=extra_mask, allowed_mask=allowed_mask,
          num_heads=cfg.num_heads)
    else:
      cache_positions = None
      mask = attn_lib.make_attention_mask(
          positions, positions, causal=is_causal_cfg,
          sliding_window=cfg.sliding_window, key_valid_bs=valid_bt,
          q_segment_ids_bt=segment_ids, k_segment_ids_bs=segment_ids,
          extra_mask=extra_mask, allowed_mask=allowed_mask)

    # Length-dependent scalings (dynamic NTK) see a static length: the
    # sequence length T, or the cache capacity when decoding with a cache.
    inv_freq, scale = cfg.rope_tables(
        seq_len=t if cache is None else cache.max_len)
    weights = None if rope_pair_weights is None else jnp.asarray(
        rope_pair_weights)
    shared_tables = rope_lib.cos_sin(
        positions, inv_freq, scale,
        weights if weights is None or weights.ndim == 1 else None,
        dtype=cfg.rope_dtype)

    hidden = [h] if output_hidden_states else None
    qk = [] if output_qk else None
    attentions = [] if output_attentions else None
    causal_flag = plain and is_causal_cfg
    new_k, new_v = [], []
    for i, block in enumerate(self.layers):
      if weights is not None and weights.ndim == 2:
        cos, sin = rope_lib.cos_sin(positions, inv_freq, scale, weights[i],
                                    dtype=cfg.rope_dtype)
      else:
        cos, sin = shared_tables
      layer_cache = None if cache is None else (cache.k[i], cache.v[i])
      if qk is not None:
        # Recomputes the projections the block will make (probing only).
        q_i, k_i, _ = block.attn.project_qkv(block.attn_norm(h), cos, sin)
        qk.append((q_i, k_i))
      index = None if cache is None else cache.index
      if cfg.remat:
        # Python bools: close over them so remat keeps them static.
        def run_block(blk, *args):
          return blk(*args, is_causal=causal_flag,
                     output_attentions=output_attentions)

        h, kv, probs = nnx.remat(run_block)(block, h, cos, sin, mask,
                                            layer_cache, index)
      else:
        h, kv, probs = block(h, cos, sin, mask, layer_cache, index,
                             is_causal=causal_flag,
                             output_attentions=output_attentions)
      if attentions is not None:
        attentions.append(probs)
      if kv is not None:
        new_k.append(kv[0])
        new_v.append(kv[1])
      if hidden is not None:
        hidden.append(h)

    new_cache = None
    logits = self.unembed(h)
    if cache is not None:
      new_cache = attn_lib.KVCache(k=tuple(new_k), v=tuple(new_v),
                                   positions=cache_positions,
                                   index=cache.index + t)
      if isinstance(cache.index, jax.core.Tracer):
        # Under jit the capacity check cannot raise: an overflowing write
        # (clamped by dynamic_update_slice) poisons the logits instead.
        logits = jnp.where(new_cache.overflowed(), jnp.nan, logits)
    return DecoderOutput(logits=logits, cache=new_cache,
                         hidden_states=None if hidden is None else tuple(
                             hidden),
                         qk=None if qk is None else tuple(qk),
                         attentions=None if attentions is None else tuple(
                             attentions))
