"""Emergent discrete controller modules inside a decoder LM (paper I).

    model = ControlledDecoder(DecoderConfig(num_layers=4, ...),
                              ControllerConfig(every_p=2), rngs=nnx.Rngs(0))
    out = model.forward(ids_bt, step=step, rng=key, output_trace=True)
    out.logits            # [B, T, V]
    out.trace[k]["op"]    # [B, T] argmax opcode of the k-th controller

A `ControllerBlock` sits at every p-th decoder block (blocks p-1, 2p-1, ...;
the blocks themselves are `jaxlab.models.decoder.Block`s of a plain
`Decoder`, reused, not copied). At an instrumented block l (spec I.2):

  (i)   Ĥ = H + token_in(ψ(S^l))                 state -> token, all positions
  (ii)  Z = Block(Ĥ)                             the decoder block
  (iii) s_t = W_φ RMSNorm(mean_{τ<=t} Z_τ)        token -> state, causal pooling
  (iv)  S^{l+1} = Σ_o y_o Sem_o(S^l, r, v)        the five ops, mixed by y
  (v)   H^{l+1} = Z + ρ(S^{l+1} - S^l) W_s        write-back, W_s = 0 at init

token_in is zero at init too [inferred], so an untrained ControlledDecoder
computes exactly its plain decoder's logits (training starts as vanilla).

Program state S = (registers R [N_r, d_r], flags f [N_f] in [0, 1], optional
memory M [N_m, d_m]); S^(0) is learned and shared across examples. Because
pooling is causal, the state is carried per position: position t's state
depends on tokens <= t only [inferred; spec I.2(iii)].

Selector (spec I.3): y = softmax((π + g)/τ), π = W_o s + b_o, τ from a
`jaxlab.nn.gumbel` schedule of the training step, optional straight-through;
at inference `selection="hard"` executes the argmax op discretely (no noise);
`knockout=True` forces NOOP everywhere (the state never leaves S^(0)).

Ops (spec I.5; `op_*` below are the vectorised semantics, usable alone):
  ASSIGN  R'_j = R_j + λ β_j (v - R_j),  λ = σ(w_λ·s)
  ADD     R'_j = R_j + β_j v
  COMPARE f'_i = σ(κ w_i·(r_a - r_b)),  r_a = α_aᵀR, r_b = α_bᵀR
  BRANCH  S' = γ Ψ(S, then) + (1-γ) Ψ(S, else),  γ = σ(w_γ·f + b_γ); Ψ is one
          residual micro-MLP on the flat state with a branch-id input; the
          only op that touches M
  NOOP    S' = S
with addresses α_a, α_b, β = softmax(W s) over registers and value
v = W_v s + W_r r_a [inferred: the read value feeds the written value].

`controller_forward_flops` counts the added matmul FLOPs; `paper_overhead` is
the spec's estimate (1/(2p))(d_s/D)^2 (spec I.8).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from flax import struct

from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry
from jaxlab.nn import gumbel
from jaxlab.nn import norm as norm_lib
from jaxlab.nn import partitioning as pt

OPS = ("ASSIGN", "ADD", "COMPARE", "BRANCH", "NOOP")
ASSIGN, ADD, COMPARE, BRANCH, NOOP = range(len(OPS))
SELECTIONS = ("gumbel", "hard", "soft")


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
  """Controller hyper-parameters (spec I; defaults from the spec).

  Attributes:
    every_p: a controller at every p-th decoder block (spec: p = 2).
    num_registers, register_dim: N_r = 8, d_r = 64.
    num_flags: N_f [inferred: 8].
    state_dim: d_s = 128 (ψ and ρ map the flat state to d_s).
    control_dim: d_c, the size of the pooled token summary s [inferred].
    use_memory, memory_slots, memory_dim: optional M in R^{64x64}.
    kappa: COMPARE sharpness κ (spec: 10-50).
    branch_hidden: hidden width of the BRANCH micro-MLP Ψ.
    schedule, tau0, tau_min, anneal_steps: the temperature schedule
      (`jaxlab.nn.gumbel.SCHEDULES`); the spec anneals exponentially from 1
      to 0.1 by 60 % of training (`anneal_steps`). Soft-modules ablation:
      schedule "constant", tau0 1, eval_selection "soft".
    gumbel_noise: add Gumbel noise to π in training (False: softmax(π/τ)).
    straight_through: hard one-hot forward / soft gradient in training.
    hard_after_step: straight-through from this training step on ("late
      training" [inferred]); -1 never.
    eval_selection: selection without an rng: "hard" (discrete execution)
      or "soft" (softmax(π/τ_final)).
    init_std: normal init std of the controller's linear maps.
  """
  every_p: int = 2
  num_registers: int = 8
  register_dim: int = 64
  num_flags: int = 8
  state_dim: int = 128
  control_dim: int = 128
  use_memory: bool = False
  memory_slots: int = 64
  memory_dim: int = 64
  kappa: float = 20.0
  branch_hidden: int = 64
  schedule: str = "exponential"
  tau0: float = 1.0
  tau_min: float = 0.1
  anneal_steps: int = 1000
  gumbel_noise: bool = True
  straight_through: bool = False
  hard_after_step: int = -1
  eval_selection: str = "hard"
  init_std: float = 0.02

  def __post_init__(self):
    if self.every_p < 1:
      raise ValueError(f"model.controller.every_p must be >= 1, got "
                       f"{self.every_p}")
    for name in ("num_registers", "register_dim", "num_flags", "state_dim",
                 "control_dim", "branch_hidden", "memory_slots",
                 "memory_dim"):
      if getattr(self, name) < 1:
        raise ValueError(f"model.controller.{name} must be >= 1, got "
                         f"{getattr(self, name)}")
    gumbel.SCHEDULES.get(self.schedule)
    if self.eval_selection not in ("hard", "soft"):
      raise ValueError(f"model.controller.eval_selection must be 'hard' or "
                       f"'soft', got {self.eval_selection!r}")
    if self.tau0 <= 0 or self.tau_min <= 0:
      raise ValueError("model.controller.tau0 and tau_min must be > 0")

  @property
  def flat_dim(self) -> int:
    """Size of flatten(S) = N_r d_r + N_f (+ N_m d_m)."""
    mem = self.memory_slots * self.memory_dim if self.use_memory else 0
    return self.num_registers * self.register_dim + self.num_flags + mem

  def temperature(self, step) -> jax.Array:
    return gumbel.temperature(step, schedule=self.schedule, tau0=self.tau0,
                              tau_min=self.tau_min,
                              anneal_steps=self.anneal_steps)

  @property
  def final_temperature(self) -> float:
    """τ at the end of the schedule (the soft evaluation's temperature)."""
    with jax.ensure_compile_time_eval():
      return float(self.temperature(10 ** 9))

  def replace(self, **kw) -> "ControllerConfig":
    return dataclasses.replace(self, **kw)


def controller_layers(num_layers: int, every_p: int) -> tuple[int, ...]:
  """Indices of the instrumented decoder blocks: p-1, 2p-1, ... (< L)."""
  if every_p > num_layers:
    raise ValueError(
        f"model.controller.every_p={every_p} is larger than model.num_layers"
        f"={num_layers}: no decoder block would get a controller; use "
        f"every_p <= {num_layers}")
  return tuple(i for i in range(num_layers) if (i + 1) % every_p == 0)


# -----------------------------------------------------------------------------
# Program state and its encode / decode maps.
# -----------------------------------------------------------------------------


@struct.dataclass
class ProgramState:
  """S = (R, f, M) per position: `[B, T, N_r, d_r]`, `[B, T, N_f]`,
  `[B, T, N_m, d_m]` or None."""
  registers: jax.Array
  flags: jax.Array
  memory: jax.Array | None = None


def flatten_state(state: ProgramState) -> jax.Array:
  """flatten(S) `[..., flat_dim]`: registers row-major, flags, memory."""
  lead = state.flags.shape[:-1]
  parts = [state.registers.reshape(*lead, -1), state.flags]
  if state.memory is not None:
    parts.append(state.memory.reshape(*lead, -1))
  return jnp.concatenate(parts, axis=-1)


def unflatten_state(flat: jax.Array, cfg: ControllerConfig) -> ProgramState:
  """Inverse of `flatten_state` (the state decode map)."""
  lead = flat.shape[:-1]
  nr = cfg.num_registers * cfg.register_dim
  regs = flat[..., :nr].reshape(*lead, cfg.num_registers, cfg.register_dim)
  flags = flat[..., nr:nr + cfg.num_flags]
  mem = None
  if cfg.use_memory:
    mem = flat[..., nr + cfg.num_flags:].reshape(*lead, cfg.memory_slots,
                                                 cfg.memory_dim)
  return ProgramState(regs, flags, mem)


# -----------------------------------------------------------------------------
# The five operations (spec I.5), vectorised over any leading axes.
# -----------------------------------------------------------------------------


def read(registers: jax.Array, address: jax.Array) -> jax.Array:
  """r = αᵀR: `[..., N_r, d_r]`, `[..., N_r]` -> `[..., d_r]`."""
  return jnp.einsum("...n,...nd->...d", address, registers)


def op_assign(registers, write_address, value, gate):
  """ASSIGN: R'_j = R_j + λ β_j (v - R_j) (λ = `gate` `[...]`)."""
  w = gate[..., None, None] * write_address[..., :, None]
  return registers + w * (value[..., None, :] - registers)


def op_add(registers, write_address, value):
  """ADD: R'_j = R_j + β_j v."""
  return registers + write_address[..., :, None] * value[..., None, :]


def op_compare(read_a, read_b, compare_w, kappa):
  """COMPARE: f'_i = σ(κ w_iᵀ (r_a - r_b)); `compare_w` `[N_f, d_r]`."""
  return jax.nn.sigmoid(kappa * jnp.einsum("...d,fd->...f", read_a - read_b,
                                           compare_w))


def branch_gate(flags, gate_w, gate_b):
  """γ = σ(w_γᵀ f + b_γ) `[...]`."""
  return jax.nn.sigmoid(jnp.einsum("...f,f->...", flags, gate_w) + gate_b)


def op_branch(flat_state, gamma, psi):
  """BRANCH: S' = γ Ψ(S, then) + (1 - γ) Ψ(S, else) on flat states.

  `psi(flat, branch_id)` is the micro-MLP (branch 0 = then, 1 = else).
  """
  g = gamma[..., None]
  return g * psi(flat_state, 0) + (1.0 - g) * psi(flat_state, 1)


def mix_states(y, candidates: list[ProgramState]) -> ProgramState:
  """S' = Σ_o y_o S'_o; `y` `[..., 5]`, one candidate per op."""
  def mix(*leaves):
    stacked = jnp.stack(leaves, axis=-1)  # [..., *leaf, O]
    yy = y.reshape(y.shape[:-1] + (1,) * (stacked.ndim - y.ndim) +
                   y.shape[-1:])
    return jnp.sum(stacked * yy, axis=-1)
  return jax.tree.map(mix, *candidates)


# -----------------------------------------------------------------------------
# Modules.
# -----------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(1,))
def _normal_draws(key: jax.Array, shapes_stds: tuple) -> list[jax.Array]:
  """One normal draw sliced into parameters of the given (shape, std)s.

  One jitted draw (one compilation per controller shape) instead of one
  eager `normal` per parameter shape: eager initialisation compiles every
  new shape, which dominated a tiny model's construction time on CPU.
  """
  sizes = [math.prod(shape) for shape, _ in shapes_stds]
  flat = jax.random.normal(key, (sum(sizes),), jnp.float32)
  out, off = [], 0
  for (shape, std), n in zip(shapes_stds, sizes):
    out.append(std * flat[off:off + n].reshape(shape))
    off += n
  return out


def _zeros(shape, axes):
  return pt.param(jnp.zeros(shape, jnp.float32), axes)


class ControllerBlock(nnx.Module):
  """The controller around one decoder block (spec I.2-I.5)."""

  def __init__(self, dim: int, cfg: ControllerConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    c, std = cfg, cfg.init_std
    flat, ds, dc = c.flat_dim, c.state_dim, c.control_dim
    nr, dr, nf = c.num_registers, c.register_dim, c.num_flags
    # name: (shape, logical axes, init std); None std = zeros.
    specs = {
        # State -> token: b = token_in(ψ(flatten S)); token_in zero at init
        # like W_s [inferred], so that at init the model IS the decoder.
        "psi_fs": ((flat, ds), (None, None), std),
        "token_in_sd": ((ds, dim), (None, pt.EMBED), None),
        # Token -> state: s = W_φ RMSNorm(cumulative mean of Z).
        "phi_dc": ((dim, dc), (pt.EMBED, None), std),
        # Selector and addressing.
        "op_co": ((dc, len(OPS)), (None, None), std),
        "op_bias_o": ((len(OPS),), (None,), None),
        "read_a_cn": ((dc, nr), (None, None), std),
        "read_b_cn": ((dc, nr), (None, None), std),
        "write_cn": ((dc, nr), (None, None), std),
        "value_cr": ((dc, dr), (None, None), std),
        "value_read_rr": ((dr, dr), (None, None), std),
        "gate_c": ((dc,), (None,), std),
        "gate_bias": ((), (), None),
        "compare_fr": ((nf, dr), (None, None), 1.0 / dr ** 0.5),
        "branch_f": ((nf,), (None,), 1.0),
        "branch_bias": ((), (), None),
        # Ψ: residual micro-MLP on [flatten S, one-hot branch id].
        "psi_in_fh": ((flat + 2, c.branch_hidden), (None, None), std),
        "psi_out_hf": ((c.branch_hidden, flat), (None, None), std),
        # Write-back ρ(ΔS) W_s with W_s = 0: training starts as the decoder.
        "rho_fs": ((flat, ds), (None, None), std),
        "write_sd": ((ds, dim), (None, pt.EMBED), None),
    }
    drawn = [k for k, v in specs.items() if v[2] is not None]
    values = dict(zip(drawn, _normal_draws(
        rngs.params(), tuple((specs[k][0], specs[k][2]) for k in drawn))))
    for name, (shape, axes, _) in specs.items():
      value = values.get(name)
      if value is None:
        value = jnp.zeros(shape, jnp.float32)
      setattr(self, name, pt.param(value, axes))
    self.pool_norm = norm_lib.RMSNorm(dim)

  # -- state <-> token ---------------------------------------------------------

  def encode(self, state: ProgramState) -> jax.Array:
    """ψ(S) `[..., d_s]` (flatten + linear map)."""
    return flatten_state(state) @ self.psi_fs[...]

  def state_to_token(self, state: ProgramState) -> jax.Array:
    """b `[..., D]`, added to every token's residual (spec I.2(i))."""
    return self.encode(state) @ self.token_in_sd[...]

  def summarize(self, z_btd: jax.Array) -> jax.Array:
    """s `[B, T, d_c]`: causal (prefix) mean of Z, normed, projected."""
    t = z_btd.shape[1]
    csum = jnp.cumsum(z_btd.astype(jnp.float32), axis=1)
    mean = csum / jnp.arange(1, t + 1, dtype=jnp.float32)[None, :, None]
    return self.pool_norm(mean) @ self.phi_dc[...]

  def psi(self, flat: jax.Array, branch_id: int) -> jax.Array:
    bid = jnp.broadcast_to(jax.nn.one_hot(branch_id, 2, dtype=flat.dtype),
                           flat.shape[:-1] + (2,))
    hid = jax.nn.gelu(jnp.concatenate([flat, bid], -1) @ self.psi_in_fh[...])
    return flat + hid @ self.psi_out_hf[...]

  # -- one controller step -----------------------------------------------------

  def step(self, z_btd: jax.Array, state: ProgramState, *, tau,
           key: jax.Array | None, selection: str, hard_now=None,
           knockout=False) -> tuple[jax.Array, ProgramState, dict]:
    """Selector + ops + write-back: (H^{l+1}, S^{l+1}, trace)."""
    cfg = self.cfg
    s = self.summarize(z_btd)
    logits = s @ self.op_co[...] + self.op_bias_o[...]
    soft = jax.nn.softmax(logits / tau, axis=-1)
    if selection == "gumbel":
      # softmax(y_logits) is the relaxed sample before any straight-through
      # rounding (what L_op's cross-entropy of y is taken on).
      y_logits = gumbel.perturbed_logits(
          logits, key if cfg.gumbel_noise else None, tau)
      y = jax.nn.softmax(y_logits, axis=-1)
      if cfg.straight_through:
        y = gumbel.straight_through(y)
      elif hard_now is not None:
        y = jnp.where(hard_now, gumbel.straight_through(y), y)
    else:
      y_logits = gumbel.perturbed_logits(logits, None, tau)
      y = gumbel.one_hot_argmax(logits) if selection == "hard" else soft
    if knockout is not False:  # True or a (traced) boolean scalar
      noop = jax.nn.one_hot(jnp.full(logits.shape[:-1], NOOP), len(OPS))
      y = jnp.where(jnp.asarray(knockout), noop, y)

    regs, flags = state.registers, state.flags
    alpha_a = jax.nn.softmax(s @ self.read_a_cn[...], axis=-1)
    alpha_b = jax.nn.softmax(s @ self.read_b_cn[...], axis=-1)
    beta = jax.nn.softmax(s @ self.write_cn[...], axis=-1)
    r_a, r_b = read(regs, alpha_a), read(regs, alpha_b)
    value = s @ self.value_cr[...] + r_a @ self.value_read_rr[...]
    lam = jax.nn.sigmoid(s @ self.gate_c[...] + self.gate_bias[...])
    gamma = branch_gate(flags, self.branch_f[...], self.branch_bias[...])

    assign = dataclasses.replace(state, registers=op_assign(regs, beta, value,
                                                            lam))
    add = dataclasses.replace(state, registers=op_add(regs, beta, value))
    compare = dataclasses.replace(
        state, flags=op_compare(r_a, r_b, self.compare_fr[...], cfg.kappa))
    branched = unflatten_state(
        op_branch(flatten_state(state), gamma, self.psi), cfg)
    branched = dataclasses.replace(branched,
                                   flags=jnp.clip(branched.flags, 0.0, 1.0))
    new_state = mix_states(y, [assign, add, compare, branched, state])

    delta = flatten_state(new_state) - flatten_state(state)
    h_out = z_btd + ((delta @ self.rho_fs[...]) @ self.write_sd[...]).astype(
        z_btd.dtype)
    trace = {"op": jnp.argmax(y, -1), "y": y, "y_logits": y_logits,
             "logits": logits, "probs": soft, "alpha_a": alpha_a,
             "alpha_b": alpha_b, "beta": beta, "gamma": gamma, "lam": lam,
             "tau": jnp.asarray(tau, jnp.float32),
             "delta_sq": jnp.sum(jnp.square(delta), -1),
             "register_change_sq": jnp.sum(
                 jnp.square(new_state.registers - regs), axis=(-2, -1))}
    return h_out, new_state, trace


@struct.dataclass
class ControllerOutput:
  logits: jax.Array  # [B, T, V] float32
  # One dict per controller (op [B, T], y/y_logits/logits/probs [B, T, 5],
  # alpha_a, alpha_b, beta [B, T, N_r], gamma, lam [B, T], tau, delta_sq,
  # register_change_sq [B, T]). logits = π; y_logits = (π + g)/τ (π/τ
  # without noise), whose softmax is y before straight-through rounding.
  trace: tuple[dict[str, jax.Array], ...] | None = None
  states: tuple[ProgramState, ...] | None = None


class ControlledDecoder(nnx.Module):
  """A `Decoder` with a `ControllerBlock` at every p-th block (spec I)."""

  def __init__(self, cfg: decoder_lib.DecoderConfig,
               controller: ControllerConfig, *, rngs: nnx.Rngs):
    if not cfg.causal:
      raise ValueError("model.causal must be True for the controller (its "
                       "pooling is the causal prefix mean)")
    self.cfg = cfg
    self.controller_cfg = controller
    self.layer_ids = controller_layers(cfg.num_layers, controller.every_p)
    self.decoder = decoder_lib.Decoder(cfg, rngs=rngs)
    self.controllers = nnx.List([ControllerBlock(cfg.dim, controller,
                                                 rngs=rngs)
                                 for _ in self.layer_ids])
    c = controller
    self.init_registers = pt.param(_normal_draws(
        rngs.params(), (((c.num_registers, c.register_dim),
                         1.0 / c.register_dim ** 0.5),))[0], (None, None))
    self.init_flag_logits = _zeros((c.num_flags,), (None,))
    self.init_memory = (_zeros((c.memory_slots, c.memory_dim), (None, None))
                        if c.use_memory else None)

  def initial_state(self, b: int, t: int) -> ProgramState:
    """S^(0), learned and shared, broadcast to `[B, T, ...]`."""
    def bc(x):
      return jnp.broadcast_to(x, (b, t) + x.shape)
    mem = None if self.init_memory is None else bc(self.init_memory[...])
    return ProgramState(bc(self.init_registers[...]),
                        bc(jax.nn.sigmoid(self.init_flag_logits[...])), mem)

  def __call__(self, input_ids_bt: jax.Array, **kwargs) -> jax.Array:
    return self.forward(input_ids_bt, **kwargs).logits

  def forward(self, input_ids_bt: jax.Array, *, step=None,
              rng: jax.Array | None = None, selection: str | None = None,
              tau=None, knockout=False, output_trace: bool = False,
              output_states: bool = False,
              positions: jax.Array | None = None,
              segment_ids: jax.Array | None = None) -> ControllerOutput:
    """Runs the decoder with its controllers (causal, no KV cache).

    Args:
      input_ids_bt: int tokens `[B, T]` (right padding is harmless: every
        position sees only its prefix).
      step: training step; sets τ from the schedule (None: final τ).
      rng: key for the Gumbel noise; with one, selection defaults to
        "gumbel" (training), without to `eval_selection`.
      selection: "gumbel" | "hard" (discrete argmax execution) | "soft"
        (softmax(π/τ), no noise).
      tau: explicit temperature (overrides the schedule).
      knockout: force NOOP in every controller (test-time knockout); a
        bool or a boolean scalar array (one compilation for both).
      output_trace: return the per-controller trace.
      output_states: return the program state after each controller.
      positions: optional RoPE position ids `[B, T]`.
      segment_ids: not supported (packed rows would share the pooled state).
    """
    if segment_ids is not None:
      raise ValueError("ControlledDecoder does not support packed sequences "
                       "(segment_ids): use data.packing='pad'")
    ccfg = self.controller_cfg
    if selection is None:
      selection = "gumbel" if rng is not None else ccfg.eval_selection
    if selection not in SELECTIONS:
      raise ValueError(f"selection must be one of {SELECTIONS}, got "
                       f"{selection!r}")
    if selection == "gumbel" and rng is None and ccfg.gumbel_noise:
      raise ValueError("selection='gumbel' needs an rng for the noise")
    if tau is None:
      tau = (ccfg.final_temperature if step is None
             else ccfg.temperature(step))
    hard_now = None
    if step is not None and ccfg.hard_after_step >= 0:
      hard_now = jnp.asarray(step) >= ccfg.hard_after_step

    dec = self.decoder
    h = dec.embed(input_ids_bt)
    b, t = h.shape[:2]
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    cos, sin = dec.rotary(positions, seq_len=t)
    state = self.initial_state(b, t)
    traces, states = [], []
    k = 0
    for i, block in enumerate(dec.layers):
      if i in self.layer_ids:
        ctrl = self.controllers[k]
        h = h + ctrl.state_to_token(state).astype(h.dtype)
      h, _, _ = block(h, cos, sin, None, None, None, is_causal=True)
      if i in self.layer_ids:
        key = None if rng is None else jax.random.fold_in(rng, k)
        h, state, tr = ctrl.step(h, state, tau=tau, key=key,
                                 selection=selection, hard_now=hard_now,
                                 knockout=knockout)
        traces.append(tr)
        states.append(state)
        k += 1
    return ControllerOutput(
        logits=dec.unembed(h),
        trace=tuple(traces) if output_trace else None,
        states=tuple(states) if output_states else None)


# -----------------------------------------------------------------------------
# FLOP counting (spec I.8).
# -----------------------------------------------------------------------------


def controller_forward_flops(dim: int, cfg: ControllerConfig) -> int:
  """Forward matmul FLOPs (2 per multiply-add) per token of ONE controller.

  Counts: ψ, token_in, φ, the selector, three addresses, the value (from s
  and r_a), λ, two reads, COMPARE, γ, Ψ on both branches, ρ and W_s.
  Element-wise work (op updates, the mixture, norms, softmaxes) is not
  counted, as in the usual 2N-per-token convention.
  """
  c = cfg
  flat, ds, dc = c.flat_dim, c.state_dim, c.control_dim
  nr, dr, nf, hb, o = (c.num_registers, c.register_dim, c.num_flags,
                       c.branch_hidden, len(OPS))
  macs = (flat * ds + ds * dim            # ψ, token_in
          + dim * dc                      # φ
          + dc * o                        # selector
          + 3 * dc * nr                   # α_a, α_b, β
          + dc * dr + dr * dr             # value
          + dc                            # λ
          + 2 * nr * dr                   # reads r_a, r_b
          + nf * dr                       # COMPARE
          + nf                            # γ
          + 2 * ((flat + 2) * hb + hb * flat)  # Ψ(then), Ψ(else)
          + flat * ds + ds * dim)         # ρ, W_s
  return 2 * macs


def decoder_forward_flops(cfg: decoder_lib.DecoderConfig, seq_len: int) -> int:
  """Forward FLOPs per token of the plain decoder: 2 N_matmul + attention
  (a third of `registry.decoder_train_flops_per_token`)."""
  hd = cfg.resolved_head_dim
  n_matmul = cfg.num_params() - (0 if cfg.tie_embeddings
                                 else cfg.vocab_size * cfg.dim)
  return 2 * n_matmul + 4 * cfg.num_layers * seq_len * cfg.num_heads * hd


def flop_overhead(cfg: decoder_lib.DecoderConfig, controller: ControllerConfig,
                  seq_len: int) -> float:
  """Counted relative overhead: controllers' FLOPs / the decoder's."""
  n = len(controller_layers(cfg.num_layers, controller.every_p))
  return (n * controller_forward_flops(cfg.dim, controller)
          / decoder_forward_flops(cfg, seq_len))


def paper_overhead(every_p: int, state_dim: int, dim: int) -> float:
  """The spec's estimate (1/(2p)) (d_s/D)^2 (spec I.8)."""
  return (state_dim / dim) ** 2 / (2.0 * every_p)


def compiled_flops(fn, *args) -> float:
  """FLOPs XLA's cost analysis reports for `jax.jit(fn)(*args)`."""
  cost = jax.jit(fn).lower(*args).compile().cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0]
  return float(cost["flops"])


def model_config_fields() -> tuple[str, ...]:
  return tuple(f.name for f in dataclasses.fields(ControllerConfig))


def controller_config(section: Any) -> ControllerConfig:
  """`config.model.controller` -> ControllerConfig; unknown key = error."""
  fields = set(model_config_fields())
  kw = {}
  for key, value in dict(section or {}).items():
    if key not in fields:
      raise ValueError(f"model.controller.{key} is not a ControllerConfig "
                       f"field; valid: {', '.join(sorted(fields))}")
    kw[key] = value
  return ControllerConfig(**kw)


# -- model.name="controller" (the registry finds it by package walk) ----------


@registry.register("controller")
def _build_controller(model_cfg, *, vocab_size: int | None = None,
                      seed: int = 0) -> registry.ModelSpec:
  """Decoder fields plus a `controller` section (paper I, ControllerConfig)."""
  dcfg = registry.decoder_config({k: v for k, v in dict(model_cfg).items()
                                  if k != "controller"},
                                 vocab_size=vocab_size)
  ccfg = controller_config(model_cfg.get("controller"))
  n_ctrl = len(controller_layers(dcfg.num_layers, ccfg.every_p))
  return registry.ModelSpec(
      factory=lambda: ControlledDecoder(dcfg, ccfg, rngs=nnx.Rngs(seed)),
      config=dcfg,
      flops_per_token=lambda t: (
          registry.decoder_train_flops_per_token(dcfg, t) + 3.0 * n_ctrl *
          controller_forward_flops(dcfg.dim, ccfg)))
