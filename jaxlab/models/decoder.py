"""A Llama/Qwen2/Gemma 3-family decoder-only language model in Flax NNX.

    model = Decoder(DecoderConfig(...), rngs=nnx.Rngs(0))
    logits_btv = model(input_ids_bt)                       # [B, T, V]
    out = model.forward(input_ids_bt, cache=cache,          # full output:
                        output_hidden_states=True)          # logits, cache,
                                                            # hidden states

Pre-norm blocks: h = h + Attn(RMSNorm(h)); h = h + SwiGLU(RMSNorm(h)).
Gemma 3 (text) is the same decoder with its switches on: per-layer
sliding-window / global attention with two RoPE bases (`layer_types`,
`sliding_rope_theta`), q/k RMSNorm, post-norms around attention and MLP
(`post_norms`), (1 + w) RMSNorm (`norm_plus_one`), GeGLU
(`mlp_activation="gelu_tanh"`), sqrt(dim) embedding scale (`embed_scale`),
tied embeddings, the `query_pre_attn_scalar` attention scale (`attn_scale`)
and attention / final logit soft-capping (`attn_logit_softcap`,
`final_logit_softcap`); `jaxlab.io.hf` maps `Gemma3ForCausalLM`.
Phi (Phi-1 / 1.5 / 2) is the decoder with its Phi switches on: LayerNorm
with biases (`norm="layernorm"`), one input norm feeding attention and MLP
in parallel (`parallel_block`), RoPE on part of each head
(`partial_rotary_factor`), a non-gated fc1 -> gelu_new -> fc2 MLP with
biases (`mlp_gated=False`, `mlp_bias`), attention-output and LM-head biases
(`attn_out_bias`, `lm_head_bias`); `jaxlab.io.hf` maps `PhiForCausalLM`.
Causal by default; `causal=False` gives the bidirectional model used by
diffusion LMs (and `forward(causal=...)` overrides it per call). Per-layer
RoPE can be switched off (`nope_layers`) for NoPE/iRoPE-style controls.

Attention masks follow `jaxlab.nn.attention` (position ids, padding, cache
slots); `forward(allowed_mask=...)` replaces the causal/window rule by an
explicit boolean mask, and `forward(output_attentions=True)` returns each
layer's attention probabilities (explicit float32 softmax, the quantity of
transformers' eager `output_attentions`).

TPU-scale training: `DecoderConfig.remat` picks a rematerialisation policy
("full", "minimal", "none") and `scan_layers=True` stacks the blocks'
parameters along a leading "layers" axis and runs the layers as one
`jax.lax.scan` (MaxText's scan_layers), so the compiled program holds one
block (one period of a per-layer pattern) whatever the depth. Every
`forward` option (KV cache, taps, per-layer RoPE weights) works scanned and
gives the unrolled result; `stack_layers` / `unstack_layers` convert a
model between the two layouts exactly.
"""

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any
import warnings

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

  `remat` (rematerialisation of each block in the backward pass) is one of
  False / "none" (keep all activations), True / "full" (save only each
  block's input, recompute everything inside it) or "minimal" (save the
  matmul outputs, recompute the rest). "minimal" is
  `jax.checkpoint_policies.dots_with_no_batch_dims_saveable`: it saves the
  outputs of the dot_generals without batch dimensions, i.e. the q/k/v/o
  and MLP projections (`[B, T, *]`, linear in T, and the expensive FLOPs),
  and recomputes the attention scores/probabilities (batched over B and
  heads, `[B, N, T, S]`, quadratic in T) and all elementwise work (norms,
  RoPE, SiLU), the usual compute/memory trade-off of MaxText's "minimal"
  policy. It is stored normalised: False, True or "minimal".

  Per-layer pattern: layer i has a `LayerSpec` (`layer_spec(i)`): whether it
  uses RoPE (`nope_layers`), its sliding window (`layer_types[i]` ==
  "sliding_attention" uses `sliding_window`; with no `layer_types` every
  layer uses `sliding_window`, as before) and its RoPE base
  (`sliding_rope_theta` for sliding layers, Gemma 3's local base). With
  `scan_layers` the blocks' parameters are stacked along a leading "layers"
  axis and `forward` runs a `jax.lax.scan` over them. A pattern of period P
  (`scan_period`, default the smallest period of the specs) scans as a
  repeated block of P layers: position j of the block holds layers
  j, j + P, ... stacked `[L / P, ...]` (Gemma 3: P = 6). A pattern with no
  period below L scans one step of L unrolled layers (correct, but compile
  time then grows with depth; `Decoder` warns).
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
  remat: bool | str = False  # False/"none" | True/"full" | "minimal"
  init_std: float = 0.02
  attention_impl: str | None = None
  # Per-layer "full_attention" / "sliding_attention" (HF `layer_types`);
  # () = every layer uses `sliding_window` (None: full attention).
  layer_types: tuple[str, ...] = ()
  # RoPE base of the sliding-window layers (Gemma 3's `rope_local_base_freq`),
  # which then use plain RoPE (no `rope_scaling`); None = like other layers.
  sliding_rope_theta: float | None = None
  scan_layers: bool = False
  scan_period: int | None = None  # None: smallest period of the layer specs
  # Gemma-style switches (Gemma 3: all on); the defaults are Llama / Qwen.
  # RMSNorm also of each block's attention and MLP outputs (before they are
  # added to the residual stream): Gemma's post-attention / post-feedforward
  # norms.
  post_norms: bool = False
  # Every RMSNorm (blocks, q/k norms, final) computes x_hat * (1 + w) in
  # float32, w initialised to 0 (`norm_lib.RMSNorm(plus_one=True)`).
  norm_plus_one: bool = False
  mlp_activation: str = "silu"  # "silu" (SwiGLU) | "gelu_tanh" (GeGLU)
  embed_scale: bool = False  # token embeddings * sqrt(dim), compute dtype
  # Multiplier of the attention logits; None: head_dim ** -0.5 (Gemma 3:
  # query_pre_attn_scalar ** -0.5).
  attn_scale: float | None = None
  # c * tanh(x / c) of the attention logits (after scaling) / of the output
  # logits; None: off.
  attn_logit_softcap: float | None = None
  final_logit_softcap: float | None = None
  # Phi-style switches (Phi-1 / 1.5 / 2: all set); the defaults are Llama.
  # "rmsnorm" | "layernorm" (with bias, `norm_lib.LayerNorm`) for every norm
  # (blocks, q/k norms, final).
  norm: str = "rmsnorm"
  # One input norm feeding attention and MLP in parallel:
  # h = h + Attn(norm(h)) + MLP(norm(h)) (GPT-J / Phi); no `mlp_norm`.
  parallel_block: bool = False
  # RoPE on the first int(head_dim * factor) dims of each head, the rest
  # passed through (Phi's / GPT-NeoX's `partial_rotary_factor`).
  partial_rotary_factor: float = 1.0
  # False: non-gated MLP down(act(up(x))) (`mlp_lib.MLP`, Phi's fc1 / fc2).
  mlp_gated: bool = True
  mlp_bias: bool = False  # biases of the non-gated MLP's two projections
  attn_out_bias: bool = False  # bias of the attention output projection
  lm_head_bias: bool = False  # bias `[V]` added to the logits

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
    if self.norm not in NORMS:
      raise ValueError(f"norm={self.norm!r} unknown; valid: "
                       f"{', '.join(NORMS)}")
    if not 0 < self.partial_rotary_factor <= 1:
      raise ValueError(f"partial_rotary_factor={self.partial_rotary_factor} "
                       "must be in (0, 1]")
    if self.rotary_dim < 2 or self.rotary_dim % 2:
      raise ValueError(
          f"partial_rotary_factor={self.partial_rotary_factor} gives "
          f"rotary_dim={self.rotary_dim} of head_dim={hd}; it must be even "
          "and >= 2")
    if self.mlp_bias and self.mlp_gated:
      raise ValueError("mlp_bias=True needs mlp_gated=False (the gated "
                       "SwiGLU MLP has no biases)")
    if self.norm_plus_one and self.norm != "rmsnorm":
      raise ValueError("norm_plus_one=True needs norm='rmsnorm'")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} must be a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")
    for i in self.nope_layers:
      if not 0 <= i < self.num_layers:
        raise ValueError(f"nope_layers entry {i} outside [0, {self.num_layers})")
    to_dtype(self.param_dtype), to_dtype(self.dtype)
    if self.mlp_activation not in mlp_lib.ACTIVATIONS:
      raise ValueError(f"mlp_activation={self.mlp_activation!r} unknown; "
                       f"valid: {', '.join(mlp_lib.ACTIVATIONS)}")
    for name in ("attn_logit_softcap", "final_logit_softcap"):
      cap = getattr(self, name)
      if cap is not None and not cap > 0:
        raise ValueError(f"{name}={cap} must be positive (or None: off)")
    object.__setattr__(self, "remat", _normalize_remat(self.remat))
    object.__setattr__(self, "layer_types", tuple(self.layer_types))
    if self.layer_types:
      if len(self.layer_types) != self.num_layers:
        raise ValueError(f"layer_types has {len(self.layer_types)} entries "
                         f"for num_layers={self.num_layers}")
      bad = set(self.layer_types) - set(LAYER_TYPES)
      if bad:
        raise ValueError(f"layer_types entries {sorted(bad)} unknown; valid: "
                         f"{', '.join(LAYER_TYPES)}")
      if "sliding_attention" in self.layer_types and (
          self.sliding_window is None):
        raise ValueError("layer_types has sliding_attention layers but "
                         "sliding_window is None")
    if self.scan_period is not None:
      p = int(self.scan_period)
      if p < 1 or self.num_layers % p:
        raise ValueError(f"scan_period={p} must divide num_layers="
                         f"{self.num_layers}")
      specs = self.layer_specs
      for i, spec in enumerate(specs):
        if spec != specs[i % p]:
          raise ValueError(
              f"scan_period={p}: layer {i} ({spec}) differs from layer "
              f"{i % p} ({specs[i % p]}); the layer pattern (nope_layers, "
              "layer_types) is not periodic with this period; use "
              "scan_period=None (the smallest period) or scan_layers=False")

  def layer_spec(self, i: int) -> "LayerSpec":
    """The static per-layer attributes of layer `i`."""
    sliding = (self.layer_types[i] == "sliding_attention" if self.layer_types
               else self.sliding_window is not None)
    return LayerSpec(
        use_rope=i not in self.nope_layers,
        sliding_window=self.sliding_window if sliding else None,
        rope_theta=self.sliding_rope_theta if sliding else None)

  @property
  def layer_specs(self) -> tuple["LayerSpec", ...]:
    return tuple(self.layer_spec(i) for i in range(self.num_layers))

  @property
  def resolved_scan_period(self) -> int:
    """`scan_period`, or the smallest P dividing L with spec i == i % P."""
    if self.scan_period is not None:
      return int(self.scan_period)
    specs, n = self.layer_specs, self.num_layers
    for p in range(1, n + 1):
      if n % p == 0 and all(s == specs[i % p] for i, s in enumerate(specs)):
        return p
    return n

  def scan_layer_ids(self, position: int) -> range:
    """The layers stacked at `position` of the scanned block: j, j + P, ..."""
    return range(position, self.num_layers, self.resolved_scan_period)

  @property
  def remat_policy(self) -> Any:
    """The `jax.checkpoint` policy of `remat` (None: save nothing)."""
    if self.remat == "minimal":
      return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    return None

  @property
  def resolved_head_dim(self) -> int:
    return self.head_dim or self.dim // self.num_heads

  @property
  def rotary_dim(self) -> int:
    """Dims of each head that RoPE rotates: int(head_dim *
    partial_rotary_factor), transformers' `rotary_ndims` (all by default)."""
    if self.partial_rotary_factor == 1:
      return self.resolved_head_dim
    return int(self.resolved_head_dim * self.partial_rotary_factor)

  @property
  def rope_dtype(self) -> Any:
    """dtype of the RoPE tables: float32, float64 for a float64 model."""
    return dtypes.at_least_float32(to_dtype(self.dtype))

  def replace(self, **kw) -> "DecoderConfig":
    return dataclasses.replace(self, **kw)

  def rope_tables(self, seq_len: int | None = None,
                  theta: float | None = None) -> tuple[Any, float]:
    """(inv_freq `[rotary_dim // 2]`, attention_scale) for this config
    (rotary_dim = head_dim unless `partial_rotary_factor` < 1).

    `seq_len` (a static Python int) is the current sequence length; only
    length-dependent scalings (dynamic NTK) use it, the others ignore it.
    `theta` (a `LayerSpec.rope_theta`): plain RoPE with this base instead.
    """
    if theta is not None:
      return rope_lib.scaling_tables(None, head_dim=self.rotary_dim,
                                     base=theta, seq_len=seq_len)
    return rope_lib.scaling_tables(self.rope_scaling,
                                   head_dim=self.rotary_dim,
                                   base=self.rope_theta, seq_len=seq_len)

  def num_params(self) -> int:
    hd = self.resolved_head_dim
    attn = self.dim * hd * (2 * self.num_heads + 2 * self.num_kv_heads)
    if self.qkv_bias:
      attn += hd * (self.num_heads + 2 * self.num_kv_heads)
    if self.qk_norm:
      attn += 2 * hd
    if self.qk_norm and self.norm == "layernorm":
      attn += 2 * hd
    if self.attn_out_bias:
      attn += self.dim
    mlp = (3 if self.mlp_gated else 2) * self.dim * self.mlp_dim
    if self.mlp_bias:
      mlp += self.mlp_dim + self.dim
    norm = 2 * self.dim if self.norm == "layernorm" else self.dim
    block = attn + mlp + norm * (1 if self.parallel_block else 2)
    if self.post_norms:
      block += 2 * norm
    emb = self.vocab_size * self.dim * (1 if self.tie_embeddings else 2)
    head_bias = self.vocab_size if self.lm_head_bias else 0
    return self.num_layers * block + emb + norm + head_bias


LAYER_TYPES = ("full_attention", "sliding_attention")
NORMS = ("rmsnorm", "layernorm")


def _normalize_remat(remat) -> bool | str:
  """False/None/"none" -> False, True/"full" -> True, "minimal" stays."""
  if not isinstance(remat, str):
    return bool(remat)
  if remat in ("none", "full", "minimal"):
    return {"none": False, "full": True}.get(remat, remat)
  raise ValueError(f"remat={remat!r} unknown; valid: False/'none', "
                   "True/'full', 'minimal'")


@dataclasses.dataclass(frozen=True)
class LayerSpec:
  """Static attributes of one layer (equal specs can share a scan)."""
  use_rope: bool = True
  sliding_window: int | None = None
  rope_theta: float | None = None  # None: the config's RoPE


@struct.dataclass
class DecoderOutput:
  logits: jax.Array  # [B, T, V] float32
  cache: attn_lib.KVCache | None = None
  # L + 1 entries, each [B, T, D]: (embeddings, after layer 1, ..., after
  # layer L). By default the last one is the residual stream BEFORE the final
  # norm (so `unembed(hidden_states[-1])` gives the logits); with
  # `forward(final_norm_hidden=True)` it is AFTER the final norm, the
  # convention of transformers' `output_hidden_states` (then
  # `lm_head(hidden_states[-1])` gives the logits). Entries 0..L-1 are the
  # same either way.
  hidden_states: tuple[jax.Array, ...] | None = None
  # Per layer (q `[B, T, N, H]`, k `[B, T, K, H]`) after RoPE (un-rotated in
  # NoPE layers), for probing (frequency entropy); only with output_qk=True.
  qk: tuple[tuple[jax.Array, jax.Array], ...] | None = None
  # Per layer, float32 attention probabilities [B, N, T, S] over the S keys
  # attended to (the cache slots when decoding with a cache; the T inputs
  # otherwise), after masking and softmax; only with output_attentions=True.
  attentions: tuple[jax.Array, ...] | None = None


def _rms_norm(cfg: DecoderConfig, dim: int
              ) -> norm_lib.RMSNorm | norm_lib.LayerNorm:
  """A norm of this config: RMSNorm (Gemma's (1 + w) one with
  `norm_plus_one`), or LayerNorm with a bias with `norm="layernorm"`."""
  if cfg.norm == "layernorm":
    return norm_lib.LayerNorm(dim, eps=cfg.norm_eps,
                              param_dtype=to_dtype(cfg.param_dtype))
  return norm_lib.RMSNorm(dim, eps=cfg.norm_eps,
                          param_dtype=to_dtype(cfg.param_dtype),
                          plus_one=cfg.norm_plus_one)


class Block(nnx.Module):
  """Pre-norm transformer block.

  h = h + Attn(attn_norm(h)); h = h + MLP(mlp_norm(h)); with
  `cfg.post_norms` (Gemma) the attention and MLP outputs are normalised
  too: h = h + post_attn_norm(Attn(attn_norm(h))), and likewise
  `post_mlp_norm` for the MLP. With `cfg.parallel_block` (Phi) one norm
  feeds both: h = h + Attn(attn_norm(h)) + MLP(attn_norm(h)) (`mlp_norm` is
  None).
  """

  def __init__(self, cfg: DecoderConfig, layer: int, *, rngs: nnx.Rngs):
    pdt, dt = to_dtype(cfg.param_dtype), to_dtype(cfg.dtype)
    self.attn_norm = _rms_norm(cfg, cfg.dim)
    self.attn = attn_lib.Attention(
        cfg.dim, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim,
        rngs=rngs, qkv_bias=cfg.qkv_bias, param_dtype=pdt, dtype=dt,
        init_std=cfg.init_std, use_rope=layer not in cfg.nope_layers,
        attention_impl=cfg.attention_impl, qk_norm=cfg.qk_norm,
        norm_eps=cfg.norm_eps, scale=cfg.attn_scale,
        logits_soft_cap=cfg.attn_logit_softcap,
        out_bias=cfg.attn_out_bias)
    if cfg.qk_norm and (cfg.norm_plus_one or cfg.norm != "rmsnorm"):
      # Gemma's q/k norms are (1 + w) norms too; Phi's are LayerNorms.
      self.attn.q_norm = _rms_norm(cfg, cfg.resolved_head_dim)
      self.attn.k_norm = _rms_norm(cfg, cfg.resolved_head_dim)
    self.mlp_norm = None if cfg.parallel_block else _rms_norm(cfg, cfg.dim)
    if cfg.mlp_gated:
      self.mlp = mlp_lib.SwiGLU(cfg.dim, cfg.mlp_dim, rngs=rngs,
                                param_dtype=pdt, dtype=dt,
                                init_std=cfg.init_std,
                                activation=cfg.mlp_activation)
    else:
      self.mlp = mlp_lib.MLP(cfg.dim, cfg.mlp_dim, rngs=rngs, param_dtype=pdt,
                             dtype=dt, init_std=cfg.init_std,
                             activation=cfg.mlp_activation,
                             bias=cfg.mlp_bias)
    if cfg.post_norms:
      self.post_attn_norm = _rms_norm(cfg, cfg.dim)
      self.post_mlp_norm = _rms_norm(cfg, cfg.dim)
    else:
      self.post_attn_norm = self.post_mlp_norm = None

  def __call__(self, h_btd, cos_btd, sin_btd, mask, layer_cache, cache_index,
               is_causal=False, output_attentions=False, segment_ids_bt=None,
               sliding_window=None):
    """(h `[B, T, D]`, new (k, v) cache or None, probs or None)."""
    normed = self.attn_norm(h_btd)
    res = self.attn(normed, cos_btd=cos_btd, sin_btd=sin_btd,
                    mask=mask, is_causal=is_causal, layer_cache=layer_cache,
                    cache_index=cache_index,
                    output_attentions=output_attentions,
                    segment_ids_bt=segment_ids_bt,
                    sliding_window=sliding_window)
    a, new_cache = res[0], res[1]
    probs = res[2] if output_attentions else None
    if self.post_attn_norm is not None:
      a = self.post_attn_norm(a)
    if self.mlp_norm is None:  # parallel block (Phi): attn + mlp + residual
      m = self.mlp(normed)
      if self.post_mlp_norm is not None:
        m = self.post_mlp_norm(m)
      h_btd = (a + m).astype(h_btd.dtype) + h_btd
      return pt.constrain_batch(h_btd), new_cache, probs
    h_btd = h_btd + a.astype(h_btd.dtype)
    m = self.mlp(self.mlp_norm(h_btd))
    if self.post_mlp_norm is not None:
      m = self.post_mlp_norm(m)
    h_btd = h_btd + m.astype(h_btd.dtype)
    return pt.constrain_batch(h_btd), new_cache, probs


def _restack(state: nnx.State, fn, axes_fn) -> nnx.State:
  """`state` with every variable's value `fn(value)` and logical axes
  `axes_fn(axes)` (axes None stays None)."""
  flat = []
  for path, var in nnx.to_flat_state(state):
    axes = var.get_metadata().get("out_sharding")
    kw = {} if axes is None else {"out_sharding": axes_fn(tuple(axes))}
    flat.append((path, var.replace(fn(var.get_value()), **kw)))
  return nnx.from_flat_state(flat)


def _stack_blocks(blocks, period: int) -> nnx.List:
  """Per-layer blocks -> `period` blocks whose variables are stacked
  `[L / period, ...]` along a leading "layers" axis (position j holds the
  layers j, j + period, ...). LoRA factors and any other variables are
  stacked with the params."""
  out = []
  for j in range(period):
    group = list(blocks[j::period])
    graphdef, _ = nnx.split(group[0])
    states = [nnx.state(b) for b in group]
    flats = [nnx.to_flat_state(st) for st in states]
    stacked = []
    for items in zip(*flats):
      path, var = items[0]
      value = jnp.stack([v.get_value() for _, v in items])
      axes = var.get_metadata().get("out_sharding")
      kw = {} if axes is None else {"out_sharding": (pt.LAYERS, *axes)}
      stacked.append((path, var.replace(value, **kw)))
    out.append(nnx.merge(graphdef, nnx.from_flat_state(stacked)))
  return nnx.List(out)


def _unstack_blocks(stacked, num_layers: int) -> nnx.List:
  """Inverse of `_stack_blocks`: the `num_layers` per-layer blocks."""
  period = len(stacked)
  blocks = [None] * num_layers
  for j, block in enumerate(stacked):
    graphdef, state = nnx.split(block)
    for r, i in enumerate(range(j, num_layers, period)):
      blocks[i] = nnx.merge(graphdef, _restack(
          state, lambda v, r=r: v[r], lambda axes: axes[1:]))
  return nnx.List(blocks)


def stack_layers(model: "Decoder") -> "Decoder":
  """An unrolled `Decoder` -> the same model with `scan_layers=True`.

  Parameters (and LoRA factors) are the same arrays stacked, so the scanned
  model computes the same function; `unstack_layers` inverts it exactly.
  `model` is left unchanged.
  """
  if model.cfg.scan_layers:
    raise ValueError("stack_layers: the model is already scanned")
  new = nnx.clone(model)
  cfg = model.cfg.replace(scan_layers=True)
  new.scan_blocks = _stack_blocks(list(new.layers), cfg.resolved_scan_period)
  del new.layers
  new.cfg = cfg
  return new


def unstack_layers(model: "Decoder") -> "Decoder":
  """A scanned `Decoder` -> the same model with per-layer blocks
  (`model.layers[i]`, `scan_layers=False`); `model` is left unchanged."""
  if not model.cfg.scan_layers:
    raise ValueError("unstack_layers: the model is not scanned")
  new = nnx.clone(model)
  new.layers = _unstack_blocks(list(new.scan_blocks), model.cfg.num_layers)
  del new.scan_blocks
  new.cfg = model.cfg.replace(scan_layers=False)
  return new


class Decoder(nnx.Module):
  """Decoder-only LM (Llama / Qwen2 / Qwen3 / Mistral / Gemma 3 text).

  Unrolled (default): `self.layers[i]` is block i. Scanned
  (`cfg.scan_layers`): `self.scan_blocks[j]` is position j of the repeated
  block of P = `cfg.resolved_scan_period` layers, its variables stacked
  `[L / P, ...]` (see `DecoderConfig`); `unstack_layers` gives the
  per-layer view. The same seed gives the same parameters in both layouts.
  """

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    pdt = to_dtype(cfg.param_dtype)
    self.embed_vd = pt.param(
        jax.nn.initializers.normal(cfg.init_std)(
            rngs.params(), (cfg.vocab_size, cfg.dim), pdt),
        (pt.VOCAB, pt.EMBED))
    # Built per layer in both layouts (same random draws), then stacked.
    blocks = [Block(cfg, i, rngs=rngs) for i in range(cfg.num_layers)]
    if cfg.scan_layers:
      period = cfg.resolved_scan_period
      if period == cfg.num_layers and period > 1:
        warnings.warn(
            f"scan_layers: the layer pattern {cfg.layer_specs} has no "
            f"period below num_layers={cfg.num_layers}; the scan runs one "
            "step of all layers unrolled (compile time grows with depth)",
            stacklevel=2)
      self.scan_blocks = _stack_blocks(blocks, period)
    else:
      self.layers = nnx.List(blocks)
    self.final_norm = _rms_norm(cfg, cfg.dim)
    if cfg.tie_embeddings:
      self.lm_head_dv = None
    else:
      self.lm_head_dv = pt.param(
          jax.nn.initializers.normal(cfg.init_std)(
              rngs.params(), (cfg.dim, cfg.vocab_size), pdt),
          (pt.EMBED, pt.VOCAB))
    # Phi's lm_head.bias (also with tied embeddings).
    self.lm_head_bias_v = (pt.param(jnp.zeros((cfg.vocab_size,), pdt),
                                    (pt.VOCAB,))
                           if cfg.lm_head_bias else None)

  # -- pieces usable on their own (multimodal inputs, probes) --------------

  def __getattr__(self, name):
    # Only reached when normal lookup fails: explain `layers` of a scanned
    # model instead of a bare AttributeError.
    if name == "layers" and "scan_blocks" in vars(self):
      raise AttributeError(
          "a scanned Decoder (cfg.scan_layers=True) has no per-layer "
          "`layers`; its blocks are stacked in `scan_blocks`: use "
          "jaxlab.models.decoder.unstack_layers(model) for model.layers[i]")
    raise AttributeError(
        f"{type(self).__name__!r} object has no attribute {name!r}")

  def embed(self, input_ids_bt: jax.Array) -> jax.Array:
    """Token embeddings `[B, T, D]` in the compute dtype (times sqrt(dim),
    in that dtype, with `cfg.embed_scale`; `forward(inputs_embeds=...)`
    takes the embeddings as given, like transformers' Gemma)."""
    dt = to_dtype(self.cfg.dtype)
    h = jnp.take(self.embed_vd[...], input_ids_bt, axis=0).astype(dt)
    if self.cfg.embed_scale:
      h = h * jnp.asarray(self.cfg.dim ** 0.5, dt)
    return h

  def unembed(self, h_btd: jax.Array) -> jax.Array:
    """Final norm + LM head: float32 logits `[..., V]` for `h [..., D]`
    (`[B, T, D]`, or the `[C, D]` token chunks of the chunked loss).

    `h` is the residual stream BEFORE the final norm (`hidden_states[-1]` of
    `forward(output_hidden_states=True)`); `lm_head` takes normed states."""
    return self.lm_head(self.final_norm(h_btd))

  def lm_head(self, normed_btd: jax.Array) -> jax.Array:
    """LM head alone: float32 logits `[..., V]` for final-normed `[..., D]`
    states (transformers' `hidden_states[-1]`, i.e. `forward(...,
    output_hidden_states=True, final_norm_hidden=True).hidden_states[-1]`).

    The matmul reads the compute-dtype states and weights (bf16 in a bf16
    model) but accumulates and returns float32
    (`preferred_element_type`), so the logits are never rounded to bf16:
    rounded logits tie (SmolLM2-135M in bf16: the top two at 25.25) and
    greedy choices then flip with left padding. Softcapping
    (`final_logit_softcap`) is applied in float32."""
    dt = to_dtype(self.cfg.dtype)
    out_dt = dtypes.at_least_float32(dt)
    h = normed_btd.astype(dt)
    if self.lm_head_dv is None:
      logits = jnp.einsum("...d,vd->...v", h, self.embed_vd[...].astype(dt),
                          preferred_element_type=out_dt)
    else:
      logits = jnp.einsum("...d,dv->...v", h, self.lm_head_dv[...].astype(dt),
                          preferred_element_type=out_dt)
    logits = logits.astype(out_dt)
    if self.lm_head_bias_v is not None:
      logits = logits + self.lm_head_bias_v[...].astype(out_dt)
    cap = self.cfg.final_logit_softcap
    if cap is not None:
      logits = cap * jnp.tanh(logits / cap)
    return logits

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

  def _scan(self, h, *, apply_block, tables, shared, weights, cache,
            output_qk, output_hidden_states):
    """The layers of a scanned model: one `lax.scan` step per repeat of the
    P-layer block, so the traced (and compiled) program holds P blocks
    whatever the depth. Returns (h, ys) with ys["kv" | "probs" | "h" |
    "qk"][j] stacked `[L / P, ...]` over the layers at block position j.

    Per-layer inputs ride as scanned `xs`: the stacked variables, the KV
    cache (the per-layer tuple of `KVCache` stacked per position, one copy
    per call), per-layer RoPE tables (`weights [L, head_dim // 2]`, computed
    here for all layers with a vmap, outside the scan). Masks and shared
    cos/sin tables are computed once by `forward` and closed over.
    """
    cfg = self.cfg
    specs = cfg.layer_specs
    period = cfg.resolved_scan_period
    graphdefs, states = zip(*(nnx.split(blk) for blk in self.scan_blocks))
    xs = {"state": list(states)}
    if cache is not None:
      xs["k"] = [jnp.stack(cache.k[j::period]) for j in range(period)]
      xs["v"] = [jnp.stack(cache.v[j::period]) for j in range(period)]
    if weights is not None:
      xs["rope"] = [
          jax.vmap(functools.partial(tables, specs[j].rope_theta))(
              weights[j::period]) for j in range(period)]

    def body(h, x):
      ys = {"kv": [], "probs": [], "h": [], "qk": []}
      for j in range(period):
        cos, sin = (x["rope"][j] if weights is not None
                    else shared[specs[j].rope_theta])
        layer_cache = None if cache is None else (x["k"][j], x["v"][j])
        if output_qk:
          blk = nnx.merge(graphdefs[j], x["state"][j])
          q_j, k_j, _ = blk.attn.project_qkv(blk.attn_norm(h), cos, sin)
          ys["qk"].append((q_j, k_j))

        def run(state, *args, j=j):
          return apply_block(specs[j], nnx.merge(graphdefs[j], state), *args)

        if cfg.remat:
          # Inside a scan, CSE cannot merge the recomputation with the
          # forward pass across iterations, so prevent_cse is not needed.
          run = jax.checkpoint(run, policy=cfg.remat_policy,
                               prevent_cse=False)
        h, kv, probs = run(x["state"][j], h, cos, sin, layer_cache)
        ys["kv"].append(kv)
        ys["probs"].append(probs)
        if output_hidden_states:
          ys["h"].append(h)
      return h, ys

    return jax.lax.scan(body, h, xs)

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
              final_norm_hidden: bool = False,
              rope_pair_weights: jax.Array | None = None,
              output_qk: bool = False,
              output_attentions: bool = False,
              causal: bool | None = None,
              allowed_mask: jax.Array | None = None,
              rope_tables: tuple[jax.Array, jax.Array] | None = None
              ) -> DecoderOutput:
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
        Without a cache or a padding / extra / allowed mask, attention
        within a segment is causal by index (packing's positions, which
        increase by one within a segment) and no dense mask is built (the
        splash kernel takes the segment ids on TPU).
      extra_mask: arbitrary boolean mask broadcastable to `[B, N, T, S]`,
        AND-ed in (only denies).
      cache: a `KVCache`; the T new tokens are written at `cache.index`
        (S = cache capacity); raises ValueError when `cache.index + T` would
        pass the capacity (checked when the index is concrete; under jit the
        logits of an overflowing call are NaN and `cache.index` ends above
        `cache.max_len`, see `KVCache`).
      output_hidden_states: also return the residual stream of every layer:
        L + 1 entries (embedding output, then each layer's output).
      final_norm_hidden: where the LAST hidden state is taken. False
        (default, jaxlab's convention): before the final norm, the raw
        residual stream of layer L (`unembed(hidden_states[-1])` == logits).
        True: after the final norm, as transformers' `hidden_states[-1]`
        (`lm_head(hidden_states[-1])` == logits); use it when comparing
        with, or porting code written against, transformers. Only the last
        entry differs.
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
      rope_tables: precomputed RoPE (cos, sin) `[B, T, head_dim]` used by
        every RoPE layer instead of the tables built from `positions` (which
        then only drive the mask), e.g. Qwen2-VL's multimodal RoPE; not
        combinable with `rope_pair_weights`.

    Returns:
      `DecoderOutput` with float32 logits, the updated cache, hidden states,
      and (on request) q/k and attention probabilities.
    """
    cfg = self.cfg
    if (input_ids_bt is None) == (inputs_embeds is None):
      raise ValueError("give exactly one of input_ids_bt and inputs_embeds")
    h = self.embed(input_ids_bt) if inputs_embeds is None else (
        inputs_embeds.astype(to_dtype(cfg.dtype)))
    h = pt.constrain_batch(h)
    b, t = h.shape[:2]
    is_causal_cfg = cfg.causal if causal is None else bool(causal)
    if cache is not None:
      cache.check_capacity(t)
    valid_bt = (jnp.ones((b, t), bool) if attention_mask is None
                else attention_mask.astype(bool))
    user_positions = positions
    if positions is None and (cache is not None or attention_mask is not None):
      positions = self.default_positions(valid_bt, cache)
    specs = cfg.layer_specs
    # The plain causal (or bidirectional) case passes no mask array, so the
    # fused attention kernels of GPU/TPU backends can be selected (in the
    # layers without a sliding window).
    plain = (cache is None and attention_mask is None and segment_ids is None
             and extra_mask is None and allowed_mask is None
             and user_positions is None)
    # Self-attention whose mask is causal (or bidirectional) by index within
    # packed segments, with each layer's sliding window: no dense mask is
    # built; each layer's attention gets the segment ids and its window
    # (the splash kernel's segment ids on TPU, a mask built per call on the
    # XLA path). Packed positions increase by one within a segment, so the
    # rule by index is the rule by position. Positions without segment ids
    # may be anything and keep the dense mask.
    structured = (cache is None and attention_mask is None
                  and extra_mask is None and allowed_mask is None
                  and (user_positions is None or segment_ids is not None))
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    positions = positions.astype(jnp.int32)

    cache_positions = None
    if cache is not None:
      new_pos = jnp.where(valid_bt, positions, -1)
      new_pos_bkt = jnp.broadcast_to(new_pos[:, None, :],
                                     (b, cache.num_kv_heads, t))
      cache_positions = jax.lax.dynamic_update_slice(
          cache.positions, new_pos_bkt, (0, 0, cache.index))
    # One mask per distinct sliding window of the layers (None: no window),
    # built once outside the layer loop.
    masks = {}
    for window in dict.fromkeys(spec.sliding_window for spec in specs):
      if structured or (plain and window is None):
        masks[window] = None
      elif (cache is not None and extra_mask is None and allowed_mask is None
            and not output_attentions
            and attn_lib.chunked_cached_call(cfg.attention_impl, q_len=t)):
        # A long cached call (a prefill) with the chunked kernel (or on TPU):
        # the mask stays positions (`chunked_cached_attention`), never
        # [B, N, T, S].
        masks[window] = attn_lib.PositionMask(
            q_pos_bt=positions, k_pos_bks=cache_positions,
            slot0=cache.index if user_positions is None else None,
            causal=is_causal_cfg, sliding_window=window)
      elif cache is not None:
        # Slots are per KV head (a cache policy may keep different keys per
        # head), so the mask is [B, K, T, S] expanded to the query heads.
        masks[window] = attn_lib.make_attention_mask(
            positions, cache_positions, causal=is_causal_cfg,
            sliding_window=window, extra_mask=extra_mask,
            allowed_mask=allowed_mask, num_heads=cfg.num_heads)
      else:
        masks[window] = attn_lib.make_attention_mask(
            positions, positions, causal=is_causal_cfg,
            sliding_window=window, key_valid_bs=valid_bt,
            q_segment_ids_bt=segment_ids, k_segment_ids_bs=segment_ids,
            extra_mask=extra_mask, allowed_mask=allowed_mask)

    # Length-dependent scalings (dynamic NTK) see a static length: the
    # sequence length T, or the cache capacity when decoding with a cache.
    # The cos/sin tables are computed here, once, outside the layer loop
    # (one per distinct RoPE of the layers, or per layer with per-layer
    # pair weights).
    seq_len = t if cache is None else cache.max_len
    rope = {theta: cfg.rope_tables(seq_len=seq_len, theta=theta)
            for theta in dict.fromkeys(spec.rope_theta for spec in specs)}
    weights = None if rope_pair_weights is None else jnp.asarray(
        rope_pair_weights)
    per_layer_weights = weights is not None and weights.ndim == 2
    if per_layer_weights and weights.shape[0] != cfg.num_layers:
      raise ValueError(f"rope_pair_weights of shape {weights.shape}: the "
                       f"first dim must be num_layers={cfg.num_layers}")

    def tables(theta, w):
      return rope_lib.cos_sin(positions, *rope[theta], w,
                              dtype=cfg.rope_dtype)

    if rope_tables is not None:
      if weights is not None:
        raise ValueError("rope_tables and rope_pair_weights are exclusive")
      shared = {theta: tuple(rope_tables) for theta in rope}
    else:
      shared = {} if per_layer_weights else {
          theta: tables(theta, weights) for theta in rope}
    index = None if cache is None else cache.index

    def apply_block(spec, blk, h, cos, sin, layer_cache):
      mask = masks[spec.sliding_window]
      return blk(h, cos, sin, mask, layer_cache, index,
                 is_causal=mask is None and is_causal_cfg,
                 output_attentions=output_attentions,
                 segment_ids_bt=segment_ids if structured else None,
                 sliding_window=spec.sliding_window if structured else None)

    hidden = [h] if output_hidden_states else None
    qk = [] if output_qk else None
    attentions = [] if output_attentions else None
    new_k, new_v = [], []
    if not cfg.scan_layers:
      for i, block in enumerate(self.layers):
        spec = specs[i]
        cos, sin = (tables(spec.rope_theta, weights[i]) if per_layer_weights
                    else shared[spec.rope_theta])
        layer_cache = None if cache is None else (cache.k[i], cache.v[i])
        if qk is not None:
          # Recomputes the projections the block will make (probing only).
          q_i, k_i, _ = block.attn.project_qkv(block.attn_norm(h), cos, sin)
          qk.append((q_i, k_i))
        if cfg.remat:
          # Static Python values (spec, flags) are bound, not traced.
          run_block = functools.partial(apply_block, spec)
          h, kv, probs = nnx.remat(run_block, policy=cfg.remat_policy)(
              block, h, cos, sin, layer_cache)
        else:
          h, kv, probs = apply_block(spec, block, h, cos, sin, layer_cache)
        if attentions is not None:
          attentions.append(probs)
        if kv is not None:
          new_k.append(kv[0])
          new_v.append(kv[1])
        if hidden is not None:
          hidden.append(h)
    else:
      h, ys = self._scan(h, apply_block=apply_block, tables=tables,
                         shared=shared, weights=weights if per_layer_weights
                         else None, cache=cache, output_qk=output_qk,
                         output_hidden_states=output_hidden_states)
      period, n = cfg.resolved_scan_period, cfg.num_layers

      def per_layer(stacked):  # [P] of [L / P, ...] -> L per-layer arrays
        return [stacked[i % period][i // period] for i in range(n)]

      if cache is not None:
        new_k = per_layer([kv[0] for kv in ys["kv"]])
        new_v = per_layer([kv[1] for kv in ys["kv"]])
      if attentions is not None:
        attentions = per_layer(ys["probs"])
      if hidden is not None:
        # The last one is the carry (the same value): a caller that reads
        # only hidden_states[-1] (the chunked loss) lets jit drop the
        # stacked per-layer outputs.
        hidden += per_layer(ys["h"])[:-1] + [h]
      if qk is not None:
        qk = list(zip(per_layer([a for a, _ in ys["qk"]]),
                      per_layer([c for _, c in ys["qk"]])))

    new_cache = None
    if final_norm_hidden:
      h = self.final_norm(h)
      logits = self.lm_head(h)
      if hidden is not None:
        hidden[-1] = h
    else:
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
