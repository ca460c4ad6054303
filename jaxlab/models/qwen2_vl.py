"""Qwen2.5-VL and Qwen2-VL in Flax NNX: vision tower + jaxlab Decoder.

    model, cfg = jaxlab.io.hf.load("/ckpt/Qwen2.5-VL-dir")   # safetensors
    out = model.forward(input_ids_bt,
                        pixel_values=pv, image_grid_thw=[(1, 8, 12)],
                        pixel_values_videos=pvv, video_grid_thw=[(2, 8, 8)],
                        second_per_grid_ts=[1.0])
    out.logits                                              # [B, T, V]

Vision tower (`VisionTower`, transformers'
`Qwen2_5_VisionTransformerPretrainedModel`):

* Inputs are the processor's flattened patches `pixel_values [N, C*T*P*P]`
  (channel, temporal patch, row, column; N = sum of t * h * w over the
  `grid_thw` rows, each image/video's patches in 2x2-merge-block order) and
  `grid_thw` (one (t, h, w) row per image or video; an image has t = 1).
* 3-D patch embedding: the Conv3d with stride = kernel over one
  (T, P, P) patch is a matmul with the flattened kernel `[C*T*P*P, D]`.
* 2-D rotary embedding: head_dim / 4 frequencies; the first half of the
  rotary angles uses the patch's row, the second half its column.
* Window attention: tokens are permuted (in units of 2x2 merge blocks) so
  each window of `window_size // (spatial_merge_size * patch_size)` merged
  units square is contiguous (`window_index`); the layers named by
  `fullatt_block_indexes` attend within a whole frame (`cu_seqlens`), the
  others within a window (`cu_window_seqlens`).
  Attention restricted to the segments of a `cu_seqlens` takes each
  token's segment id (number of boundaries <= index): token i may attend
  token j iff both lie in the same segment `[cu[s], cu[s+1])`, which equals
  transformers' per-chunk (or flash varlen) attention. On TPU (or with
  `VisionConfig.attention_impl="splash"`) it is the splash kernel's
  bidirectional attention with these segment ids (`jaxlab.nn.splash`, no
  N x N array); elsewhere dense attention with the block-diagonal mask
  built in the program from the ids (O(N^2) memory for N patches).
* Blocks: RMSNorm -> attention (fused qkv with bias, output proj with bias)
  -> residual; RMSNorm -> SwiGLU MLP with biases -> residual.
* Scanned and rematerialised (`VisionConfig.scan_layers`, `remat`, as the
  decoder's): the blocks' variables stacked `[depth, ...]` in
  `scan_blocks[0]` and run under one `jax.lax.scan`, a per-layer flag
  scanned alongside picking the frame or window segment ids.
* Patch merger: RMSNorm (ln_q) of each patch, the 4 patches of a 2x2 block
  concatenated, Linear -> GELU (exact) -> Linear to the LM width; the
  result is put back in the original (un-windowed) order.

Qwen2-VL (`VisionConfig.variant="qwen2_vl"`) differs only in the tower:
LayerNorm instead of RMSNorm (blocks and merger), an fc1 -> quick_gelu ->
fc2 MLP, no window attention (every block attends within a frame); and its
video positions count frames (no `second_per_grid_ts` spacing).

Language model: `jaxlab.models.decoder.Decoder` (Qwen2 architecture) fed
`inputs_embeds` (text embeddings with the image / video features scattered,
in order, into the `image_token_id` / `video_token_id` placeholders) and
explicit multimodal RoPE tables (`mrope_cos_sin`): `rope_index` gives each
token a (temporal, height, width) position -- text tokens the same running
index on all three axes; a vision item of merged grid (t, h, w) starting at
position p gets (p + floor(i_t * interval), p + i_h, p + i_w) with
interval = tokens_per_second * second_per_grid_ts for videos (1 for images),
and the text after it resumes at p + max(h, w). The rotary pairs of
head_dim / 2 are split by `mrope_section` into temporal / height / width
chunks that rotate by the corresponding axis. The causal mask follows the
token order.

Elsewhere: checkpoints load and save through `jaxlab.io.hf.load` / `save`
(`load_qwen2_vl`, `save_qwen2_vl`: transformers' `from_pretrained` reads
what `save` writes); images and videos become `pixel_values` and grids
through `jaxlab.data.vision_processor` (transformers' Qwen2-VL processors);
`jaxlab.decoding.sampler.generate(model, prompts, multimodal={...})`
generates from image / video prompts (`multimodal_inputs`: the prefix
once, then KV-cached decoding at text positions + `rope_deltas`).
"""

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import registry as jregistry
from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import attention as attention_lib
from jaxlab.nn import norm as norm_lib
from jaxlab.nn import partitioning as pt
from jaxlab.nn import patches
from jaxlab.nn import rope as rope_lib
from jaxlab.nn import splash

ARCHITECTURES = {"Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
                 "Qwen2VLForConditionalGeneration": "qwen2_vl"}
MODEL_TYPES = {v: k for k, v in ARCHITECTURES.items()}
VARIANTS = ("qwen2_5_vl", "qwen2_vl")
VISION_ATTENTION_IMPLS = (None, "xla", "splash")  # VisionConfig.attention_impl
_ACTIVATIONS = {"silu": jax.nn.silu, "swish": jax.nn.silu,
                "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
                "gelu": lambda x: jax.nn.gelu(x, approximate=False)}
ACTIVATIONS = tuple(_ACTIVATIONS)  # vision hidden_act values


@dataclasses.dataclass(frozen=True)
class VisionConfig:
  """Qwen2.5-VL / Qwen2-VL vision tower (field names follow Qwen2.5-VL's HF
  `vision_config`; Qwen2-VL's `embed_dim` is `hidden_size` here, its
  `hidden_size` is `out_hidden_size` and its MLP width is
  `embed_dim * mlp_ratio`).

  `variant` "qwen2_5_vl": RMSNorm, SwiGLU MLP (`hidden_act` silu), window
  attention except in `fullatt_block_indexes`. "qwen2_vl": LayerNorm,
  fc1 -> `hidden_act` (quick_gelu) -> fc2 MLP, full (per-frame) attention
  in every block, LayerNorm in the merger.
  """
  depth: int = 4
  hidden_size: int = 32
  intermediate_size: int = 64
  num_heads: int = 2
  in_channels: int = 3
  patch_size: int = 14
  temporal_patch_size: int = 2
  spatial_merge_size: int = 2
  window_size: int = 112
  out_hidden_size: int = 64
  fullatt_block_indexes: tuple[int, ...] = ()
  tokens_per_second: float = 4
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6
  param_dtype: str = "float32"
  dtype: str = "float32"
  variant: str = "qwen2_5_vl"
  hidden_act: str = "silu"
  # None: splash on TPU for N >= attention.SPLASH_MIN_AUTO_LEN patches, else
  # dense ("xla"); "splash" / "xla" force one (not a HF config field).
  attention_impl: str | None = None
  # TPU-scale training, as `DecoderConfig`'s (not HF config fields):
  # `scan_layers` stacks the blocks' params `[depth, ...]` (`scan_blocks[0]`)
  # and runs them under one `jax.lax.scan`; `remat` ("none" / "full" /
  # "minimal", or a bool) rematerialises each block in the backward pass.
  scan_layers: bool = False
  remat: bool | str = False

  def __post_init__(self):
    object.__setattr__(self, "scan_layers", bool(self.scan_layers))
    object.__setattr__(self, "remat",
                       decoder_lib._normalize_remat(self.remat))  # pylint: disable=protected-access
    if self.attention_impl not in VISION_ATTENTION_IMPLS:
      raise ValueError(f"vision attention_impl={self.attention_impl!r}; "
                       f"valid: {VISION_ATTENTION_IMPLS}")
    if self.variant not in VARIANTS:
      raise ValueError(f"variant={self.variant!r}; valid: {VARIANTS}")
    if self.hidden_act not in _ACTIVATIONS:
      raise ValueError(f"hidden_act={self.hidden_act!r}; valid: "
                       f"{', '.join(_ACTIVATIONS)}")
    object.__setattr__(self, "fullatt_block_indexes",
                       tuple(int(i) for i in self.fullatt_block_indexes))
    if self.hidden_size % self.num_heads:
      raise ValueError(f"hidden_size={self.hidden_size} not a multiple of "
                       f"num_heads={self.num_heads}")
    if self.head_dim % 4:
      raise ValueError(f"vision head_dim={self.head_dim} must be a multiple "
                       "of 4 (2-D rotary embedding)")

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @property
  def remat_policy(self) -> Any:
    """The `jax.checkpoint` policy of `remat` (the decoder's)."""
    if self.remat == "minimal":
      return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    return None

  def full_attention_layers(self) -> np.ndarray:
    """`[depth]` bool: block i attends within a frame (Qwen2-VL: every
    block; Qwen2.5-VL: `fullatt_block_indexes`), else within a window."""
    return np.array([self.variant == "qwen2_vl"
                     or i in self.fullatt_block_indexes
                     for i in range(self.depth)])

  @property
  def patch_dim(self) -> int:
    return (self.in_channels * self.temporal_patch_size * self.patch_size
            * self.patch_size)


@dataclasses.dataclass(frozen=True)
class Qwen2VLConfig:
  """The whole model: text decoder, vision tower, special tokens, M-RoPE."""
  text: decoder_lib.DecoderConfig
  vision: VisionConfig
  image_token_id: int = 151655
  video_token_id: int = 151656
  vision_start_token_id: int = 151652
  mrope_section: tuple[int, ...] = (16, 24, 24)

  def __post_init__(self):
    object.__setattr__(self, "mrope_section",
                       tuple(int(s) for s in self.mrope_section))
    half = self.text.resolved_head_dim // 2
    if sum(self.mrope_section) != half:
      raise ValueError(f"mrope_section={self.mrope_section} must sum to "
                       f"head_dim // 2 = {half}")
    if self.vision.out_hidden_size != self.text.dim:
      raise ValueError(f"vision out_hidden_size={self.vision.out_hidden_size}"
                       f" != text hidden size {self.text.dim}")


# -- host-side index computations (numpy; grids are static) ---------------


def _grids(grid_thw) -> list[tuple[int, int, int]]:
  return [tuple(int(x) for x in row) for row in np.asarray(grid_thw)
          .reshape(-1, 3)]


def vision_rotary_positions(grid_thw, merge: int) -> np.ndarray:
  """(row, col) of every patch `[N, 2]`, in the processor's order (2x2
  merge blocks contiguous, frames repeated)."""
  out = []
  for t, h, w in _grids(grid_thw):
    hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    shape = (h // merge, merge, w // merge, merge)
    hh = hh.reshape(shape).transpose(0, 2, 1, 3).reshape(-1)
    ww = ww.reshape(shape).transpose(0, 2, 1, 3).reshape(-1)
    out.append(np.tile(np.stack([hh, ww], -1), (t, 1)))
  return np.concatenate(out, 0)


def patchify(frames_tchw, cfg: VisionConfig) -> tuple[np.ndarray,
                                                     tuple[int, int, int]]:
  """(pixel_values `[t * h * w, C*T*P*P]`, grid (t, h, w)) of one image
  (`[1, C, H, W]`, repeated over the temporal patch) or video (`[F, C, H,
  W]`, the last frame repeated up to a multiple of the temporal patch), in
  the processor's order (2x2 merge blocks contiguous): `jaxlab.nn.patches.
  qwen_vl_patchify` with the tower's sizes (numpy in and out, or jax under
  `jit`). The frames must be resized (H, W multiples of patch_size *
  spatial_merge_size) and normalised already, as the HF image / video
  processors do before this step."""
  if frames_tchw.shape[1] != cfg.in_channels:
    raise ValueError(f"frames of shape {tuple(frames_tchw.shape)}: need "
                     f"{cfg.in_channels} channels")
  return patches.qwen_vl_patchify(
      frames_tchw, patch_size=cfg.patch_size,
      temporal_patch_size=cfg.temporal_patch_size,
      merge_size=cfg.spatial_merge_size)


def frame_cu_seqlens(grid_thw) -> np.ndarray:
  """Boundaries of the full-attention segments: one per frame."""
  lens = [h * w for t, h, w in _grids(grid_thw) for _ in range(t)]
  return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def window_index(grid_thw, cfg: VisionConfig) -> tuple[np.ndarray,
                                                        np.ndarray]:
  """(window_index `[N / merge^2]`, cu_window_seqlens) of transformers'
  `get_vision_window_index`: the merged units of each frame listed window by
  window (row-major windows of `window_size // merge // patch` units square,
  partial windows at the bottom/right edges), and the window boundaries in
  patches (empty windows dropped)."""
  merge = cfg.spatial_merge_size
  win = cfg.window_size // merge // cfg.patch_size
  if win < 1:
    raise ValueError(f"window_size={cfg.window_size} is smaller than one "
                     f"merged unit ({merge} x {cfg.patch_size} pixels)")
  unit = merge * merge
  index, cu, offset = [], [0], 0
  for t, h, w in _grids(grid_thw):
    gh, gw = h // merge, w // merge
    ids = np.arange(t * gh * gw).reshape(t, gh, gw)
    nh, nw = -(-gh // win), -(-gw // win)
    for f in range(t):
      for i in range(nh):
        for j in range(nw):
          block = ids[f, i * win:(i + 1) * win, j * win:(j + 1) * win]
          if block.size:
            index.append(block.reshape(-1) + offset)
            cu.append(cu[-1] + block.size * unit)
    offset += t * gh * gw
  return np.concatenate(index), np.asarray(cu, np.int64)


def segment_ids(cu_seqlens: np.ndarray, n: int) -> np.ndarray:
  """Segment of each of the n tokens for boundaries `cu_seqlens`."""
  return (np.searchsorted(np.asarray(cu_seqlens), np.arange(n), side="right")
          - 1).astype(np.int32)


# -- vision tower ------------------------------------------------------------


def _linear(din, dout, rngs, pdt, axes, bias=True):
  """`nnx.Linear` whose kernel `[din, dout]` (and bias `[dout]`) carry the
  logical `axes` (`jaxlab.nn.partitioning`: under FSDP "embed" shards over
  fsdp, as the decoder's weights do; "mlp" / "heads" over tensor)."""
  lin = nnx.Linear(din, dout, use_bias=bias, param_dtype=pdt, rngs=rngs,
                   kernel_init=nnx.initializers.normal(0.02))
  lin.kernel = pt.param(lin.kernel[...], axes)
  if bias:
    lin.bias = pt.param(lin.bias[...], axes[1:])
  return lin


def _norm(cfg: VisionConfig, d: int, pdt):
  """RMSNorm (Qwen2.5-VL) or LayerNorm with bias (Qwen2-VL)."""
  if cfg.variant == "qwen2_vl":
    return nnx.LayerNorm(d, epsilon=cfg.norm_eps, param_dtype=pdt,
                         rngs=nnx.Rngs(0))
  return norm_lib.RMSNorm(d, eps=cfg.norm_eps, param_dtype=pdt)


class VisionBlock(nnx.Module):
  """Norm + attention, norm + MLP (all projections with bias): RMSNorm and
  SwiGLU for Qwen2.5-VL, LayerNorm and fc1 -> act -> fc2 for Qwen2-VL."""

  def __init__(self, cfg: VisionConfig, *, rngs: nnx.Rngs):
    pdt = decoder_lib.to_dtype(cfg.param_dtype)
    d, f = cfg.hidden_size, cfg.intermediate_size
    self.cfg = cfg
    self.norm1 = _norm(cfg, d, pdt)
    self.norm2 = _norm(cfg, d, pdt)
    self.qkv = _linear(d, 3 * d, rngs, pdt, (pt.EMBED, pt.HEADS))
    self.proj = _linear(d, d, rngs, pdt, (pt.HEADS, pt.EMBED))
    if cfg.variant == "qwen2_vl":
      self.fc1 = _linear(d, f, rngs, pdt, (pt.EMBED, pt.MLP))
      self.fc2 = _linear(f, d, rngs, pdt, (pt.MLP, pt.EMBED))
    else:
      self.gate_proj = _linear(d, f, rngs, pdt, (pt.EMBED, pt.MLP))
      self.up_proj = _linear(d, f, rngs, pdt, (pt.EMBED, pt.MLP))
      self.down_proj = _linear(f, d, rngs, pdt, (pt.MLP, pt.EMBED))

  def mlp(self, y):
    act = _ACTIVATIONS[self.cfg.hidden_act]
    if self.cfg.variant == "qwen2_vl":
      return self.fc2(act(self.fc1(y)))
    return self.down_proj(act(self.gate_proj(y)) * self.up_proj(y))

  def __call__(self, x_nd, cos_nh, sin_nh, segments_n):
    cfg = self.cfg
    n, nh, hd = x_nd.shape[0], cfg.num_heads, cfg.head_dim
    qkv = self.qkv(self.norm1(x_nd)).reshape(n, 3, nh, hd)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    f32 = jnp.promote_types(q.dtype, jnp.float32)
    cos, sin = cos_nh[:, None, :], sin_nh[:, None, :]

    def rot(x):
      x = x.astype(f32)
      return (x * cos + rope_lib.rotate_half(x) * sin).astype(v.dtype)

    q, k = rot(q), rot(k)
    impl = attention_lib.select_attention_impl(
        cfg.attention_impl, dtype=q.dtype, q_len=n, kv_len=n,
        dense_mask=False)
    if impl == "splash":  # bidirectional, within each segment
      a = splash.splash_attention(q[None], k[None], v[None], causal=False,
                                  segment_ids_bt=segments_n[None])[0]
    else:
      scores = jnp.einsum("qnh,knh->nqk", q, k) * (hd ** -0.5)
      allowed = segments_n[:, None] == segments_n[None, :]
      scores = jnp.where(allowed[None], scores.astype(f32), -jnp.inf)
      probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
      a = jnp.einsum("nqk,knh->qnh", probs, v)
    a = a.reshape(n, nh * hd)
    x_nd = x_nd + self.proj(a)
    return x_nd + self.mlp(self.norm2(x_nd))


class PatchMerger(nnx.Module):
  """ln_q (RMSNorm; LayerNorm for Qwen2-VL) -> concat 2x2 -> Linear ->
  GELU -> Linear."""

  def __init__(self, cfg: VisionConfig, *, rngs: nnx.Rngs):
    pdt = decoder_lib.to_dtype(cfg.param_dtype)
    d = cfg.hidden_size * cfg.spatial_merge_size ** 2
    self.cfg = cfg
    self.ln_q = _norm(cfg, cfg.hidden_size, pdt)
    self.fc1 = _linear(d, d, rngs, pdt, (pt.EMBED, pt.MLP))
    self.fc2 = _linear(d, cfg.out_hidden_size, rngs, pdt,
                       (pt.MLP, pt.EMBED))

  def __call__(self, x_nd):
    unit = self.cfg.spatial_merge_size ** 2
    x = self.ln_q(x_nd).reshape(-1, unit * x_nd.shape[-1])
    return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class VisionTower(nnx.Module):
  """`pixel_values [N, C*T*P*P]`, `grid_thw` -> features `[N / 4, out]`."""

  def __init__(self, cfg: VisionConfig, *, rngs: nnx.Rngs):
    pdt = decoder_lib.to_dtype(cfg.param_dtype)
    self.cfg = cfg
    # The input dim (C*T*P*P, 1176 for Qwen's) is left unsharded.
    self.patch_embed = _linear(cfg.patch_dim, cfg.hidden_size, rngs, pdt,
                               (None, pt.EMBED), bias=False)
    blocks = [VisionBlock(cfg, rngs=rngs) for _ in range(cfg.depth)]
    if cfg.scan_layers:  # one block, its variables stacked [depth, ...]
      self.scan_blocks = decoder_lib._stack_blocks(blocks, 1)  # pylint: disable=protected-access
    else:
      self.blocks = nnx.List(blocks)
    self.merger = PatchMerger(cfg, rngs=rngs)

  def plan(self, grid_thw) -> dict[str, np.ndarray]:
    """Static host-side indices for `grid_thw`: the window permutation of
    the patches, its inverse over merged units, rotary positions and the
    segment ids of full (per-frame) and window attention (permuted order)."""
    cfg = self.cfg
    unit, merge = cfg.spatial_merge_size ** 2, cfg.spatial_merge_size
    for t, h, w in _grids(grid_thw):
      if t < 1 or h % merge or w % merge:
        raise ValueError(f"grid (t, h, w)={(t, h, w)}: h and w must be "
                         f"multiples of spatial_merge_size={merge}, t >= 1")
    cu_full = frame_cu_seqlens(grid_thw)
    if cfg.variant == "qwen2_vl":  # no windows: identity permutation
      win_idx, cu_win = np.arange(int(cu_full[-1]) // unit), cu_full
    else:
      win_idx, cu_win = window_index(grid_thw, cfg)
    n = len(win_idx) * unit
    perm = (win_idx[:, None] * unit + np.arange(unit)).reshape(-1)
    pos = vision_rotary_positions(grid_thw, cfg.spatial_merge_size)
    return {"perm": perm, "inverse": np.argsort(win_idx),
            "positions": pos[perm],
            "full_segments": segment_ids(cu_full, n),
            "window_segments": segment_ids(cu_win, n)}

  def rotary(self, positions_n2) -> tuple[jax.Array, jax.Array]:
    """2-D RoPE cos/sin `[N, head_dim]` for (row, col) positions."""
    cfg = self.cfg
    quarter = cfg.head_dim // 4
    half = cfg.head_dim // 2
    inv = 1.0 / (cfg.rope_theta ** (
        np.arange(0, half, 2, dtype=np.float32) / half))
    inv = jnp.asarray(inv[:quarter], jnp.float32)
    pos = jnp.asarray(positions_n2, jnp.float32)
    ang = jnp.concatenate([pos[:, :1] * inv, pos[:, 1:] * inv], -1)
    ang = jnp.concatenate([ang, ang], -1)
    return jnp.cos(ang), jnp.sin(ang)

  def __call__(self, pixel_values, grid_thw) -> jax.Array:
    cfg = self.cfg
    plan = self.plan(grid_thw)
    dt = decoder_lib.to_dtype(cfg.dtype)
    pv = jnp.asarray(pixel_values, dt)
    if pv.shape != (len(plan["perm"]), cfg.patch_dim):
      raise ValueError(f"pixel_values of shape {pv.shape}; grid_thw "
                       f"{_grids(grid_thw)} needs ({len(plan['perm'])}, "
                       f"{cfg.patch_dim})")
    x = self.patch_embed(pv)[plan["perm"]]
    cos, sin = self.rotary(plan["positions"])
    full = jnp.asarray(plan["full_segments"], jnp.int32)
    window = jnp.asarray(plan["window_segments"], jnp.int32)
    full_layers = cfg.full_attention_layers()
    if cfg.scan_layers:
      x = self._scan(x, cos, sin, full, window, full_layers)
    else:
      for i, blk in enumerate(self.blocks):
        segments = full if full_layers[i] else window
        if cfg.remat:
          x = nnx.remat(lambda b, *a: b(*a), policy=cfg.remat_policy)(
              blk, x, cos, sin, segments)
        else:
          x = blk(x, cos, sin, segments)
    return self.merger(x)[plan["inverse"]]

  def _scan(self, x, cos, sin, full, window, full_layers):
    """The blocks under one `jax.lax.scan` over the stacked variables; the
    window and full-attention blocks differ only by their segment ids, so
    each step picks them by the layer's flag (scanned with the variables)
    rather than unrolling (as `Decoder._scan`, remat per step)."""
    cfg = self.cfg
    graphdef, state = nnx.split(self.scan_blocks[0])

    def run(state, x, segments):
      return nnx.merge(graphdef, state)(x, cos, sin, segments)

    if cfg.remat:
      # Inside a scan, CSE cannot merge the recomputation with the forward
      # pass across iterations, so prevent_cse is not needed.
      run = jax.checkpoint(run, policy=cfg.remat_policy, prevent_cse=False)

    def body(x, xs):
      state, is_full = xs
      return run(state, x, jnp.where(is_full, full, window)), None

    x, _ = jax.lax.scan(body, x, (state, jnp.asarray(full_layers)))
    return x


# -- multimodal RoPE ---------------------------------------------------------


def rope_index(input_ids, cfg: Qwen2VLConfig, image_grid_thw=None,
               video_grid_thw=None, second_per_grid_ts=None,
               attention_mask=None) -> tuple[np.ndarray, np.ndarray]:
  """3-D position ids `[3, B, T]` and deltas `[B]` (transformers'
  `get_rope_index`; host numpy, padding positions 0).

  Items are taken in order over the batch: each run of image (video)
  placeholders consumes the next image (video) grids until the run's tokens
  are covered. `second_per_grid_ts` (one per video; default 1) times
  `vision.tokens_per_second` spaces the temporal positions of a video
  (Qwen2.5-VL; Qwen2-VL counts frames 0, 1, ...).
  The delta of a row is max position + 1 - its length (decoding continues
  at text position index + delta)."""
  ids = np.asarray(input_ids)
  b, t = ids.shape
  merge = cfg.vision.spatial_merge_size
  grids = {1: iter(_grids(image_grid_thw)) if image_grid_thw is not None
           else iter(()),
           2: iter(_grids(video_grid_thw)) if video_grid_thw is not None
           else iter(())}
  secs = iter(np.asarray(second_per_grid_ts, np.float32).reshape(-1)
              if second_per_grid_ts is not None else ())
  mask = (np.ones((b, t), bool) if attention_mask is None
          else np.asarray(attention_mask).astype(bool))
  out = np.zeros((3, b, t), np.int64)
  deltas = np.zeros((b,), np.int64)
  for r in range(b):
    row = ids[r][mask[r]]
    kind = np.where(row == cfg.image_token_id, 1,
                    np.where(row == cfg.video_token_id, 2, 0))
    pieces, pos, i = [], 0, 0
    while i < len(row):
      if kind[i] == 0:
        j = i
        while j < len(row) and kind[j] == 0:
          j += 1
        pieces.append(np.broadcast_to(np.arange(j - i) + pos, (3, j - i)))
        pos += j - i
        i = j
        continue
      k = int(kind[i])
      try:
        gt, gh, gw = next(grids[k])
      except StopIteration:
        raise ValueError(f"row {r}: more {('image', 'video')[k - 1]} "
                         "placeholder runs than grids") from None
      interval = np.float32(1.0)
      if k == 2 and cfg.vision.variant == "qwen2_5_vl":
        interval = np.float32(cfg.vision.tokens_per_second) * np.float32(
            next(secs, 1.0))
      lt, lh, lw = gt, gh // merge, gw // merge
      tt = (np.arange(lt, dtype=np.float32) * interval).astype(np.int64)
      tt, hh, ww = np.meshgrid(tt, np.arange(lh), np.arange(lw),
                               indexing="ij")
      pieces.append(np.stack([tt, hh, ww]).reshape(3, -1) + pos)
      n = lt * lh * lw
      if i + n > len(row) or not np.all(kind[i:i + n] == k):
        raise ValueError(f"row {r}: a grid of {n} tokens does not match its "
                         "run of placeholder tokens")
      pos += max(lh, lw)
      i += n
    llm = np.concatenate(pieces, 1) if pieces else np.zeros((3, 0), np.int64)
    out[:, r, mask[r]] = llm
    deltas[r] = (llm.max() + 1 if llm.size else 0) - len(row)
  return out, deltas


def decode_positions(deltas_b, start: int, length: int = 1) -> np.ndarray:
  """M-RoPE positions `[3, B, length]` of text tokens `start, ...` (their
  index in the sequence) after a prompt whose `rope_index` deltas are
  `deltas_b`: all three axes at index + delta (transformers' decoding)."""
  d = np.asarray(deltas_b, np.int64).reshape(-1, 1)
  pos = np.arange(start, start + length, dtype=np.int64)[None, :] + d
  return np.broadcast_to(pos[None], (3,) + pos.shape).copy()


def mrope_cos_sin(positions_3bt, cfg: Qwen2VLConfig
                  ) -> tuple[jax.Array, jax.Array]:
  """M-RoPE tables `[B, T, head_dim]`: rotary pair j turns with the axis
  (temporal, height, width) of the `mrope_section` chunk it falls in."""
  text = cfg.text
  inv_freq, scale = text.rope_tables()
  axis = np.concatenate([np.full(s, i % 3) for i, s in
                         enumerate(cfg.mrope_section)])
  pos = jnp.asarray(positions_3bt).astype(text.rope_dtype)[axis]  # [H/2,B,T]
  ang = jnp.moveaxis(pos, 0, -1) * jnp.asarray(inv_freq, text.rope_dtype)
  ang = jnp.concatenate([ang, ang], -1)
  return jnp.cos(ang) * scale, jnp.sin(ang) * scale


# -- the model ---------------------------------------------------------------


def _scatter(embeds_btd, ids_bt, token_id, feats_nd):
  """Replaces, in row-major order, the embeddings of `token_id` tokens by
  the rows of `feats_nd` (transformers' masked_scatter)."""
  mask = ids_bt == token_id
  idx = jnp.cumsum(mask.reshape(-1)).reshape(mask.shape) - 1
  feats = jnp.asarray(feats_nd, embeds_btd.dtype)
  picked = feats[jnp.clip(idx, 0, feats.shape[0] - 1)]
  return jnp.where(mask[..., None], picked, embeds_btd)


class Qwen2VL(nnx.Module):
  """Qwen2.5-VL: `visual` (VisionTower) + `language_model` (Decoder)."""

  def __init__(self, cfg: Qwen2VLConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.visual = VisionTower(cfg.vision, rngs=rngs)
    self.language_model = decoder_lib.Decoder(cfg.text, rngs=rngs)

  def __call__(self, input_ids_bt, **kwargs) -> jax.Array:
    return self.forward(input_ids_bt, **kwargs).logits

  def embed(self, input_ids_bt, pixel_values=None, image_grid_thw=None,
            pixel_values_videos=None, video_grid_thw=None) -> jax.Array:
    """Token embeddings with image / video features in the placeholders."""
    ids = jnp.asarray(input_ids_bt)
    h = self.language_model.embed(ids)
    cfg = self.cfg
    for pv, grid, tok in ((pixel_values, image_grid_thw, cfg.image_token_id),
                          (pixel_values_videos, video_grid_thw,
                           cfg.video_token_id)):
      if pv is None:
        continue
      feats = self.visual(pv, grid)
      if isinstance(ids, jax.core.Tracer):  # under jit: counts unchecked
        h = _scatter(h, ids, tok, feats)
        continue
      n = int(np.sum(np.asarray(ids) == tok))
      if n != feats.shape[0]:
        raise ValueError(f"{n} placeholder tokens {tok} for "
                         f"{feats.shape[0]} vision features")
      h = _scatter(h, ids, tok, feats)
    return h

  def forward(self, input_ids_bt=None, *, pixel_values=None,
              image_grid_thw=None, pixel_values_videos=None,
              video_grid_thw=None, second_per_grid_ts=None,
              attention_mask=None, positions_3bt=None, rope_deltas=None,
              inputs_embeds=None, **kwargs) -> decoder_lib.DecoderOutput:
    """Logits (a `DecoderOutput`) of the multimodal prompt.

    `positions_3bt` (default `rope_index` of the prompt) are the M-RoPE
    positions; further keywords go to `Decoder.forward` (e.g.
    `output_hidden_states`, `cache`: prefill the prompt with its images,
    then decode text tokens with `positions_3bt=decode_positions(deltas,
    index)`, or with `rope_deltas=deltas` (`[B]`, from `rope_index` of the
    prompt): the text positions the decoder counts (over `attention_mask`,
    continuing from the cache, or `positions`) plus the row's delta on all
    three axes, as transformers decodes). Grids are static: under `jit`
    close over them (or mark them static) and pass `positions_3bt` computed
    outside (the placeholder count is then not checked). `inputs_embeds`
    (from `embed` / `multimodal_inputs`) replaces the token embedding."""
    if inputs_embeds is None:
      if input_ids_bt is None:
        raise ValueError("give input_ids_bt or inputs_embeds")
      h = self.embed(input_ids_bt, pixel_values, image_grid_thw,
                     pixel_values_videos, video_grid_thw)
    else:
      if input_ids_bt is not None or pixel_values is not None or (
          pixel_values_videos is not None):
        raise ValueError("inputs_embeds already holds the vision features: "
                         "give no input_ids_bt / pixel_values with it")
      h = inputs_embeds
    if positions_3bt is None and rope_deltas is not None:
      b, t = h.shape[:2]
      valid = (jnp.ones((b, t), bool) if attention_mask is None
               else jnp.asarray(attention_mask).astype(bool))
      pos = kwargs.get("positions")
      if pos is None:
        pos = self.language_model.default_positions(valid,
                                                    kwargs.get("cache"))
      pos = jnp.asarray(pos) + jnp.asarray(rope_deltas).reshape(-1, 1)
      positions_3bt = jnp.broadcast_to(pos[None], (3, b, t))
    elif positions_3bt is None:
      if input_ids_bt is None or isinstance(input_ids_bt, jax.core.Tracer):
        raise ValueError("under jit or with inputs_embeds, pass "
                         "positions_3bt (rope_index of the prompt, computed "
                         "outside) or rope_deltas")
      positions_3bt, _ = rope_index(
          input_ids_bt, self.cfg, image_grid_thw, video_grid_thw,
          second_per_grid_ts, attention_mask)
    cos, sin = mrope_cos_sin(positions_3bt, self.cfg)
    return self.language_model.forward(
        inputs_embeds=h, attention_mask=attention_mask,
        rope_tables=(cos, sin), **kwargs)

  # -- the sampler's model protocol (jaxlab.decoding.sampler.generate) ------

  def init_cache(self, batch: int, max_len: int, dtype=None):
    return self.language_model.init_cache(batch, max_len, dtype)

  @staticmethod
  def default_positions(valid_bt, cache=None):
    return decoder_lib.Decoder.default_positions(valid_bt, cache)

  def unembed(self, h_btd):
    return self.language_model.unembed(h_btd)

  def multimodal_inputs(self, input_ids_bt, attention_mask=None, *,
                        pixel_values=None, image_grid_thw=None,
                        pixel_values_videos=None, video_grid_thw=None,
                        second_per_grid_ts=None
                        ) -> tuple[jax.Array, dict[str, Any],
                                   dict[str, Any]]:
    """The prefix of a (left-padded) multimodal batch, computed once:
    (inputs_embeds `[B, T, D]` with the vision features in the
    placeholders, prefill keywords {"positions_3bt": `[3, B, T]`}, decode
    keywords {"rope_deltas": `[B]`}) for `forward`. The vision tower and
    the scatter run under one `jit` per (grids, shapes); the placeholder
    runs are checked against the grids (`rope_index`) on the host."""
    ids = np.asarray(input_ids_bt)
    positions, deltas = rope_index(ids, self.cfg, image_grid_thw,
                                   video_grid_thw, second_per_grid_ts,
                                   attention_mask)
    for grid, tok, what in ((image_grid_thw, self.cfg.image_token_id,
                             "image"),
                            (video_grid_thw, self.cfg.video_token_id,
                             "video")):
      n = int(np.sum(ids == tok))
      want = 0 if grid is None else sum(
          t * h * w for t, h, w in _grids(grid)) // (
              self.cfg.vision.spatial_merge_size ** 2)
      if n != want:
        raise ValueError(f"{n} {what} placeholder tokens {tok} for {want} "
                         f"{what} features (grids {grid})")
    img = None if image_grid_thw is None else tuple(_grids(image_grid_thw))
    vid = None if video_grid_thw is None else tuple(_grids(video_grid_thw))
    h = _embed_jit(self, jnp.asarray(ids), pixel_values,
                   pixel_values_videos, image_grid=img, video_grid=vid)
    return (h, {"positions_3bt": jnp.asarray(positions, jnp.int32)},
            {"rope_deltas": jnp.asarray(deltas, jnp.int32)})


@functools.partial(nnx.jit, static_argnames=("image_grid", "video_grid"))
def _embed_jit(model, ids, pixel_values, pixel_values_videos, *, image_grid,
               video_grid):
  return model.embed(ids, pixel_values, image_grid, pixel_values_videos,
                     video_grid)


def config_from_dict(model_cfg: Mapping[str, Any], *,
                     vocab_size: int | None = None,
                     variant: str = "qwen2_5_vl") -> Qwen2VLConfig:
  """`config.model` (name "qwen2_5_vl" / "qwen2_vl"): decoder fields plus
  `vision` (VisionConfig fields; `variant` its default variant, and
  `scan_layers` / `remat` the decoder's unless given) and
  image_token_id / video_token_id / vision_start_token_id / mrope_section
  (default: Qwen's 1 : 1.5 : 1.5 split of the rotary pairs)."""
  from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
  d = {k: (v.to_dict() if hasattr(v, "to_dict") else v)
       for k, v in dict(model_cfg).items()}
  top = {k: d.pop(k) for k in ("image_token_id", "video_token_id",
                               "vision_start_token_id", "mrope_section")
         if k in d}
  vision = dict(d.pop("vision", None) or {})
  text = registry.decoder_config(d, vocab_size=vocab_size)
  act = {"hidden_act": "quick_gelu"} if vision.get(
      "variant", variant) == "qwen2_vl" else {}
  vision_cfg = jregistry.dataclass_from_config(
      VisionConfig, vision, exclude=(), where="model.vision",
      defaults={"variant": variant, **act, "out_hidden_size": text.dim,
                "dtype": text.dtype, "param_dtype": text.param_dtype,
                "scan_layers": text.scan_layers, "remat": text.remat})
  if "mrope_section" not in top:  # Qwen's 16 / 24 / 24 split of 64 pairs
    half = text.resolved_head_dim // 2
    hw = (half - half // 4) // 2
    top["mrope_section"] = (half - 2 * hw, hw, hw)
  return Qwen2VLConfig(text=text, vision=vision_cfg, **top)
