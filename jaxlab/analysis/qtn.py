r"""Quantum-tensor-network (QTN) uncertainty of sampled answers (paper J).

Vipulanandan et al., "Semantic Uncertainty Quantification of Hallucinations
in LLMs: A Quantum Tensor Network Based Method" (ICLR 2026; spec
`papers/H-N.md` section J, pipeline steps 5-6). Per question, from the R
length-normalised log-likelihoods l_r of its sampled answers:

  a. z = standardise(l) (zero mean, unit std).
  b. Kernel-mean-embedding wave function on the grid x = linspace(-3, 3, N):
     p(x) = (1/R) sum_r exp(-(x - z_r)^2 / (2 sigma^2)), psi0 = sqrt(p) /
     ||sqrt(p)||, sigma = 5 x Silverman's bandwidth of z.
  c. Operator basis on q = log2 N qubits: the Pauli strings over {X, Y, Z}
     of length 1, 2, ... in lexicographic order (3 + 9 + 27 + 81 + 243 = 363
     for lengths <= 5), each summed over every translation on the open chain
     and normalised to Tr(h h^dagger) = 1.
  d. Quantum covariance matrix QCM_ij = 1/2 <{h_i, h_j}> - <h_i><h_j>; a null
     vector c gives H = sum_i c_i h_i with psi0 as an eigenstate (c^T QCM c
     is the energy variance of psi0 under H).
  e. Random perturbation w = lambda a N(0, 1), dH = sum_i w_i h_i normalised
     by its entry sum; first-order perturbation theory on every eigenpair of
     H: E_n^1 = <n|dH|n>, |n^1> = sum_{m != n} <m|dH|n> / (E_n - E_m) |m>.
  f. The M modes (in energy order) around the eigenvector closest to psi0
     (least mean absolute error of |n| against psi0).
  g. V_m(x) = (sigma^2 / 2) lap|psi_m(x)| / |psi_m(x)| (np.gradient twice),
     shifted by its minimum so V_m >= 0.
  h. u_r = mean_m |interp(V_m, z_r)|, min-max normalised over the R samples.

Step 6, the entropy-maximising reweighting of the cluster probabilities
p_c(j) given the per-cluster mean uncertainty u_j (`find_optimal_p_hats`):

  p_hat_j = argmax_{p in (1e-6, 1 - 1e-6)}
            -log(p^2 + (1 - p)^2) - lam / (u_j + 1) * p log(p / p_c(j)),
  p_hat <- p_hat / sum p_hat,   SE_R+ = -log sum_j p_hat_j^2,

solved by a vectorised golden-section search (the objective is concave in p,
so the search finds the maximiser), and the code's additive variant
`predictive_entropy_renyi_with_UQ`: -log sum_j (p_c(j)^2 + lam u_j).

Choices the spec leaves open ([inferred], options of `QTNConfig`):
  * null vector: the unit vector of the QCM null space (eigenvalues <=
    `null_tol` x the largest) with the lowest energy c . <h>, i.e. the
    normalised projection of -<h> onto the null space; it does not depend on
    how `eigh` picks a basis of a degenerate null space. Without a null
    space (or when the projection vanishes) the eigenvector of the smallest
    eigenvalue, signed so its energy is <= 0.
  * `perturb_norm="abs_sum"`: dH is divided by the sum of its absolute
    entries ("sum": by the real part of the plain entry sum).
  * `denominator="first_order"`: E_n - E_m uses the first-order energies
    E + E^1 (as the code does); "unperturbed" uses E.
  * `mode_state="corrected"`: psi_m = |m> + |m^1>; "correction": |m^1> only.
  Near-degenerate denominators (|.| < `degenerate_tol`) contribute nothing.

Everything is batched over questions under one `jax.jit` (`sample_uncertainty`
and `qtn_scores`) and runs in float64 / complex128 (under
`jax.enable_x64`), so the eigenstate residual of step d is ~1e-12.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

_PAULI = {
    "X": np.array([[0, 1], [1, 0]], np.complex128),
    "Y": np.array([[0, -1j], [1j, 0]], np.complex128),
    "Z": np.array([[1, 0], [0, -1]], np.complex128),
}
LAMBDAS = (5.0, 15.0, 25.0, 50.0, 75.0, 100.0)  # the spec's lambda grid


@dataclasses.dataclass(frozen=True)
class QTNConfig:
  """Settings of the per-sample QTN score (defaults: the paper's code).

  Attributes:
    grid_size: N, grid points of the wave function; a power of two (q = log2 N
      qubits). The CPU miniature uses 32.
    grid_range: the grid is linspace(-grid_range, grid_range, N).
    num_operators: how many of the ordered Pauli-string operators to use
      (363 = every string of length <= 5).
    bandwidth_factor: sigma = factor x Silverman's bandwidth.
    min_bandwidth: floor on sigma (all-equal log-likelihoods) [inferred].
    perturb_lambda, perturb_scale: w = lambda * a * N(0, 1).
    perturb_norm: "abs_sum" or "sum" (see module docstring) [inferred].
    denominator: "first_order" or "unperturbed" [inferred].
    mode_state: "corrected" or "correction" [inferred].
    num_modes: M modes kept around the mode closest to psi0.
    null_tol: relative eigenvalue threshold of the QCM null space.
    degenerate_tol: |E_n - E_m| below this is treated as degenerate.
    amplitude_eps: added to |psi| before dividing in step g.
  """
  grid_size: int = 128
  grid_range: float = 3.0
  num_operators: int = 363
  bandwidth_factor: float = 5.0
  min_bandwidth: float = 1e-2
  perturb_lambda: float = 1.0
  perturb_scale: float = 1e-3
  perturb_norm: str = "abs_sum"
  denominator: str = "first_order"
  mode_state: str = "corrected"
  num_modes: int = 8
  null_tol: float = 1e-10
  degenerate_tol: float = 1e-12
  amplitude_eps: float = 1e-12

  def validate(self) -> None:
    n = self.grid_size
    if n < 4 or n & (n - 1):
      raise ValueError(f"QTNConfig.grid_size must be a power of two >= 4, "
                       f"got {n}")
    q = int(math.log2(n))
    total = sum(3 ** k for k in range(1, q + 1))
    if not 1 <= self.num_operators <= total:
      raise ValueError(f"QTNConfig.num_operators must be in [1, {total}] for "
                       f"grid_size {n} ({q} qubits), got {self.num_operators}")
    if not 1 <= self.num_modes <= n:
      raise ValueError(f"QTNConfig.num_modes must be in [1, grid_size={n}], "
                       f"got {self.num_modes}")
    for field, valid in (("perturb_norm", ("abs_sum", "sum")),
                         ("denominator", ("first_order", "unperturbed")),
                         ("mode_state", ("corrected", "correction"))):
      if getattr(self, field) not in valid:
        raise ValueError(f"QTNConfig.{field} must be one of {valid}, got "
                         f"{getattr(self, field)!r}")


def pauli_strings(num_qubits: int, num_operators: int) -> list[str]:
  """The first `num_operators` strings over XYZ, by length then lexically."""
  out = []
  for k in range(1, num_qubits + 1):
    for s in itertools.product("XYZ", repeat=k):
      out.append("".join(s))
      if len(out) == num_operators:
        return out
  return out


@functools.lru_cache(maxsize=8)
def pauli_operators(num_qubits: int, num_operators: int) -> np.ndarray:
  """`[K, 2^q, 2^q]` complex128: translation-summed, Tr(h h^dag) = 1 (c)."""
  dim = 2 ** num_qubits
  ops = []
  for s in pauli_strings(num_qubits, num_operators):
    h = np.zeros((dim, dim), np.complex128)
    for i in range(num_qubits - len(s) + 1):
      m = np.eye(2 ** i, dtype=np.complex128)
      for c in s:
        m = np.kron(m, _PAULI[c])
      m = np.kron(m, np.eye(2 ** (num_qubits - len(s) - i)))
      h += m
    ops.append(h / np.sqrt(np.trace(h @ h.conj().T).real))
  return np.stack(ops)


def silverman_bandwidth(z: jax.Array) -> jax.Array:
  """statsmodels' `bw_silverman`: 0.9 min(std, IQR / 1.349) n^(-1/5)."""
  std = jnp.std(z, ddof=1)
  iqr = (jnp.percentile(z, 75.0) - jnp.percentile(z, 25.0)) / 1.349
  a = jnp.where(iqr > 0, jnp.minimum(std, iqr), std)
  return 0.9 * a * z.shape[0] ** (-0.2)


def standardise(loglik: jax.Array) -> jax.Array:
  """Step a: zero mean, unit (population) std; all-equal -> zeros."""
  std = jnp.std(loglik)
  return (loglik - jnp.mean(loglik)) / jnp.where(std > 0, std, 1.0)


def kme_state(z: jax.Array, sigma: jax.Array, grid: jax.Array) -> jax.Array:
  """Step b: psi0 = sqrt(p) / ||sqrt(p)|| of the Gaussian KME p on `grid`."""
  p = jnp.mean(jnp.exp(-(grid[:, None] - z[None, :]) ** 2 /
                       (2 * sigma ** 2)), axis=1)
  s = jnp.sqrt(p)
  return s / jnp.linalg.norm(s)


def quantum_covariance(ops: jax.Array, psi: jax.Array
                       ) -> tuple[jax.Array, jax.Array]:
  """Step d: (QCM [K, K], expectations <h_i> [K]) for a state psi [N].

  1/2 <{h_i, h_j}> = Re <h_i psi | h_j psi> for Hermitian h, so the QCM is a
  Gram matrix of the vectors h_i psi: no operator products are formed.
  """
  psi = psi.astype(ops.dtype)
  v = jnp.einsum("kab,b->ka", ops, psi)          # h_k psi
  expect = jnp.real(v @ jnp.conj(psi))           # <psi|h_k|psi>
  gram = jnp.real(jnp.conj(v) @ v.T)
  return gram - expect[:, None] * expect[None, :], expect


def null_coefficients(qcm: jax.Array, expect: jax.Array,
                      null_tol: float) -> jax.Array:
  """Step d: lowest-energy unit vector of the QCM null space (module doc)."""
  evals, evecs = jnp.linalg.eigh(qcm)
  null = evals <= null_tol * jnp.maximum(jnp.max(jnp.abs(evals)), 1e-300)
  proj = (evecs * null[None, :]) @ (evecs.T @ (-expect))
  norm = jnp.linalg.norm(proj)
  first = evecs[:, 0] * jnp.where(evecs[:, 0] @ expect > 0, -1.0, 1.0)
  ok = norm > 1e-8 * jnp.maximum(jnp.linalg.norm(expect), 1e-300)
  return jnp.where(ok, proj / jnp.where(ok, norm, 1.0), first)


def _question_uncertainty(ops: jax.Array, loglik: jax.Array, key: jax.Array,
                          cfg: QTNConfig) -> dict[str, jax.Array]:
  """Steps a-h for one question's `[R]` log-likelihoods."""
  n = cfg.grid_size
  grid = jnp.linspace(-cfg.grid_range, cfg.grid_range, n, dtype=loglik.dtype)
  dx = grid[1] - grid[0]
  z = standardise(loglik)
  sigma = jnp.maximum(cfg.bandwidth_factor * silverman_bandwidth(z),
                      cfg.min_bandwidth)
  psi0 = kme_state(z, sigma, grid)
  qcm, expect = quantum_covariance(ops, psi0)
  c = null_coefficients(qcm, expect, cfg.null_tol)
  h = jnp.einsum("k,kab->ab", c.astype(ops.dtype), ops)
  energies, u = jnp.linalg.eigh(h)
  w = cfg.perturb_lambda * cfg.perturb_scale * jax.random.normal(
      key, (ops.shape[0],), loglik.dtype)
  dh = jnp.einsum("k,kab->ab", w.astype(ops.dtype), ops)
  if cfg.perturb_norm == "abs_sum":
    dh = dh / jnp.sum(jnp.abs(dh))
  else:
    dh = dh / jnp.real(jnp.sum(dh))
  vmn = jnp.conj(u.T) @ dh @ u                    # <m|dH|n>
  e1 = jnp.real(jnp.diag(vmn))
  e = energies + e1 if cfg.denominator == "first_order" else energies
  denom = e[None, :] - e[:, None]                 # [m, n] = E_n - E_m
  ok = (jnp.abs(denom) > cfg.degenerate_tol) & ~jnp.eye(n, dtype=bool)
  coef = jnp.where(ok, vmn / jnp.where(ok, denom, 1.0), 0.0)
  corr = u @ coef                                  # column n: |n^1>
  states = u + corr if cfg.mode_state == "corrected" else corr
  # f. the eigenvector of H closest to psi0, and M modes around it.
  mae = jnp.mean(jnp.abs(jnp.abs(u) - psi0[:, None]), axis=0)
  centre = jnp.argmin(mae)
  start = jnp.clip(centre - cfg.num_modes // 2, 0, n - cfg.num_modes)
  modes = jax.lax.dynamic_slice_in_dim(jnp.abs(states), start, cfg.num_modes,
                                       axis=1).T  # [M, N]
  # g. quantum-potential-style uncertainty per mode.
  lap = jnp.gradient(jnp.gradient(modes, dx, axis=1), dx, axis=1)
  pot = 0.5 * sigma ** 2 * lap / (modes + cfg.amplitude_eps)
  pot = pot - jnp.min(pot, axis=1, keepdims=True)
  # h. back to the samples.
  per_mode = jax.vmap(lambda v: jnp.abs(jnp.interp(z, grid, v)))(pot)
  raw = jnp.mean(per_mode, axis=0)
  span = jnp.max(raw) - jnp.min(raw)
  unc = jnp.where(span > 0, (raw - jnp.min(raw)) / jnp.where(span > 0, span,
                                                             1.0), 0.0)
  residual = jnp.linalg.norm(h @ psi0.astype(h.dtype) -
                             (c @ expect) * psi0.astype(h.dtype))
  return {"u": unc, "raw": raw, "psi0": psi0, "coefficients": c,
          "eigenstate_residual": residual, "centre_mode": centre,
          "sigma": sigma, "z": z}


@functools.partial(jax.jit, static_argnames=("cfg",))
def _batched_uncertainty(ops, loglik_qr, keys, cfg):
  return jax.vmap(lambda l, k: _question_uncertainty(ops, l, k, cfg))(
      loglik_qr, keys)


def _check_loglik(loglik) -> np.ndarray:
  a = np.asarray(loglik, np.float64)
  if a.ndim != 2 or a.shape[1] < 2:
    raise ValueError(f"loglik must be [questions, samples] with >= 2 samples "
                     f"per question, got shape {a.shape}")
  if not np.all(np.isfinite(a)):
    raise ValueError("loglik must be finite")
  return a


def sample_uncertainty(loglik_qr, *, key: jax.Array,
                       config: QTNConfig = QTNConfig(),
                       details: bool = False):
  """Per-sample QTN uncertainty u `[Q, R]` in [0, 1] (steps a-h), batched.

  Args:
    loglik_qr: `[Q, R]` length-normalised log-likelihoods of R sampled
      answers to each of Q questions.
    key: PRNG key of the perturbation w (question q uses fold_in(key, q)).
    config: `QTNConfig`.
    details: also return the intermediate arrays (psi0, null coefficients,
      eigenstate residual ||H psi0 - <H> psi0||, ...).
  """
  config.validate()
  a = _check_loglik(loglik_qr)
  q = int(math.log2(config.grid_size))
  with jax.enable_x64(True):
    ops = jnp.asarray(pauli_operators(q, config.num_operators))
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(
        jnp.arange(a.shape[0]))
    out = _batched_uncertainty(ops, jnp.asarray(a), keys, config)
    out = jax.tree.map(np.asarray, out)
  return out if details else out["u"]


# -- step 6: entropy-maximising reweighting ------------------------------------


def cluster_mean(u_qr: jax.Array, ids_qr: jax.Array) -> jax.Array:
  """u_j = mean of u over the samples of cluster j: `[Q, R]` (0 if empty)."""
  oh = jax.nn.one_hot(ids_qr, u_qr.shape[-1], dtype=u_qr.dtype)  # [Q, R, C]
  cnt = oh.sum(-2)
  return jnp.einsum("...r,...rc->...c", u_qr, oh) / jnp.maximum(cnt, 1)


def _objective(p, p_c, weight):
  return (-jnp.log(p ** 2 + (1 - p) ** 2)
          - weight * p * jnp.log(p / jnp.maximum(p_c, 1e-300)))


def golden_section_max(fn, lo, hi, iters: int = 80):
  """Maximiser of a unimodal elementwise `fn` on [lo, hi] (vectorised)."""
  g = (math.sqrt(5) - 1) / 2
  a, b = lo, hi
  c, d = b - g * (b - a), a + g * (b - a)
  fc, fd = fn(c), fn(d)

  def body(_, s):
    a, b, c, d, fc, fd = s
    left = fc > fd  # the maximum is in [a, d]
    a2 = jnp.where(left, a, c)
    b2 = jnp.where(left, d, b)
    c2 = jnp.where(left, b2 - g * (b2 - a2), d)
    d2 = jnp.where(left, c, a2 + g * (b2 - a2))
    fnew = fn(jnp.where(left, c2, d2))
    fc2 = jnp.where(left, fnew, fd)
    fd2 = jnp.where(left, fc, fnew)
    return a2, b2, c2, d2, fc2, fd2

  a, b, *_ = jax.lax.fori_loop(0, iters, body, (a, b, c, d, fc, fd))
  return (a + b) / 2


@functools.partial(jax.jit, static_argnames=("eps", "iters"))
def entropy_max_reweight(p_c: jax.Array, u_bar: jax.Array, present: jax.Array,
                         lam: float | jax.Array, *, eps: float = 1e-6,
                         iters: int = 80) -> jax.Array:
  """Step 6: p_hat per cluster (each independently), renormalised.

  p_hat_j = argmax_p -log(p^2 + (1-p)^2) - lam / (u_j + 1) p log(p / p_c(j))
  on (eps, 1 - eps); clusters with `present` False get 0.
  """
  weight = lam / (u_bar + 1.0)
  lo = jnp.full_like(p_c, eps)
  hi = jnp.full_like(p_c, 1 - eps)
  p = golden_section_max(lambda x: _objective(x, p_c, weight), lo, hi, iters)
  p = jnp.where(present, p, 0.0)
  return p / jnp.sum(p, axis=-1, keepdims=True)


def renyi2(p: jax.Array) -> jax.Array:
  """-log sum p^2 over the last axis."""
  return -jnp.log(jnp.sum(p ** 2, axis=-1))


def additive_renyi(p_c: jax.Array, u_bar: jax.Array, present: jax.Array,
                   lam: float | jax.Array) -> jax.Array:
  """The code's additive variant: -log sum_j (p_c(j)^2 + lam u_j)."""
  return -jnp.log(jnp.sum(jnp.where(present, p_c ** 2 + lam * u_bar, 0.0),
                          axis=-1))


@functools.partial(jax.jit, static_argnames=("iters",))
def _calibrated(loglik, ids, u, lams, iters):
  r = loglik.shape[-1]
  oh = jax.nn.one_hot(ids, r, dtype=loglik.dtype)            # [Q, R, C]
  present = oh.sum(-2) > 0
  lse = jax.nn.logsumexp(jnp.where(oh > 0, loglik[..., None], -jnp.inf),
                         axis=-2)
  log_pc = lse - jax.nn.logsumexp(loglik, axis=-1, keepdims=True)
  p_c = jnp.where(present, jnp.exp(log_pc), 0.0)
  u_bar = cluster_mean(u, ids)
  p_hat = jax.vmap(lambda lam: entropy_max_reweight(
      p_c, u_bar, present, lam, iters=iters))(lams)
  plus = renyi2(p_hat)
  add = jax.vmap(lambda lam: additive_renyi(p_c, u_bar, present, lam))(lams)
  return {"p_c": p_c, "u_bar": u_bar, "renyi2": renyi2(p_c),
          "renyi2_plus": plus, "renyi2_additive": add, "p_hat": p_hat}


def qtn_scores(loglik_qr, ids_qr, *, key: jax.Array,
               lams: Sequence[float] = LAMBDAS,
               config: QTNConfig = QTNConfig(), iters: int = 80,
               u_qr=None) -> dict[str, np.ndarray]:
  """Hallucination scores of paper J for Q questions, R samples each.

  Args:
    loglik_qr: `[Q, R]` length-normalised sample log-likelihoods.
    ids_qr: `[Q, R]` semantic cluster ids in [0, R) (e.g.
      `jaxlab.evals.uncertainty.semantic_ids` per question).
    key: PRNG key of the perturbation (see `sample_uncertainty`).
    lams: the lambda grid of step 6.
    config: `QTNConfig` of the per-sample score.
    iters: golden-section iterations.
    u_qr: precomputed `sample_uncertainty` (skips steps a-h).

  Returns:
    dict of NumPy arrays: "u" `[Q, R]`, "u_bar" / "p_c" `[Q, R]` (per
    cluster id), "renyi2" `[Q]` (SE_R), "renyi2_plus" `[L, Q]` (SE_R+ per
    lambda), "renyi2_additive" `[L, Q]`, "p_hat" `[L, Q, R]`.
  """
  a = _check_loglik(loglik_qr)
  ids = np.asarray(ids_qr)
  if ids.shape != a.shape:
    raise ValueError(f"ids_qr shape {ids.shape} != loglik_qr shape {a.shape}")
  if ids.min() < 0 or ids.max() >= a.shape[1]:
    raise ValueError(f"ids_qr must be cluster ids in [0, {a.shape[1]})")
  u = (sample_uncertainty(a, key=key, config=config) if u_qr is None
       else np.asarray(u_qr, np.float64))
  with jax.enable_x64(True):
    out = _calibrated(jnp.asarray(a), jnp.asarray(ids, jnp.int32),
                      jnp.asarray(u), jnp.asarray(lams, jnp.float64), iters)
    out = jax.tree.map(np.asarray, out)
  out["u"] = u
  return out
