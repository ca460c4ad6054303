"""QTN per-sample uncertainty and entropy-max reweighting (paper J)."""

import itertools
import math

from absl.testing import absltest
import jax
import numpy as np
import scipy.optimize
import scipy.stats

from jaxlab.analysis import qtn

PAULI = {"X": np.array([[0, 1], [1, 0]], complex),
         "Y": np.array([[0, -1j], [1j, 0]]),
         "Z": np.array([[1, 0], [0, -1]], complex)}


def np_operators(q, k):
  """Reference of step c, written independently with explicit identities."""
  strings = [s for n in range(1, q + 1)
             for s in itertools.product("XYZ", repeat=n)][:k]
  ops = []
  for s in strings:
    h = 0
    for start in range(q - len(s) + 1):
      factors = [np.eye(2)] * start + [PAULI[c] for c in s] + (
          [np.eye(2)] * (q - len(s) - start))
      m = factors[0]
      for f in factors[1:]:
        m = np.kron(m, f)
      h = h + m
    ops.append(h / np.sqrt(np.trace(h @ h.conj().T).real))
  return np.array(ops)


def np_reference(ll, w, cfg):
  """Steps a-h of the spec in plain NumPy (anticommutators formed)."""
  n, m_modes = cfg.grid_size, cfg.num_modes
  q = int(math.log2(n))
  x = np.linspace(-cfg.grid_range, cfg.grid_range, n)
  z = (ll - ll.mean()) / ll.std()
  iqr = scipy.stats.iqr(z) / 1.349
  bw = 0.9 * min(z.std(ddof=1), iqr) * len(z) ** -0.2
  sigma = cfg.bandwidth_factor * bw
  p = np.exp(-(x[:, None] - z[None]) ** 2 / (2 * sigma ** 2)).mean(1)
  psi = np.sqrt(p) / np.linalg.norm(np.sqrt(p))
  ops = np_operators(q, cfg.num_operators)
  ex = np.array([(psi @ h @ psi).real for h in ops])
  k = len(ops)
  qcm = np.zeros((k, k))
  for i in range(k):
    for j in range(k):
      anti = ops[i] @ ops[j] + ops[j] @ ops[i]
      qcm[i, j] = 0.5 * (psi @ anti @ psi).real - ex[i] * ex[j]
  ev, vec = np.linalg.eigh(qcm)
  null = vec[:, ev <= cfg.null_tol * np.abs(ev).max()]
  c = null @ (null.T @ -ex)
  c /= np.linalg.norm(c)
  h = np.tensordot(c, ops, 1)
  e, u = np.linalg.eigh(h)
  dh = np.tensordot(w, ops, 1)
  dh /= np.abs(dh).sum()
  e1 = np.array([(u[:, i].conj() @ dh @ u[:, i]).real for i in range(n)])
  ef = e + e1
  states = []
  for i in range(n):
    corr = np.zeros(n, complex)
    for j in range(n):
      if j != i and abs(ef[i] - ef[j]) > cfg.degenerate_tol:
        corr += (u[:, j].conj() @ dh @ u[:, i]) / (ef[i] - ef[j]) * u[:, j]
    states.append(u[:, i] + corr)
  centre = np.argmin([np.abs(np.abs(u[:, i]) - psi).mean() for i in range(n)])
  start = min(max(centre - m_modes // 2, 0), n - m_modes)
  dx = x[1] - x[0]
  us = []
  for i in range(start, start + m_modes):
    a = np.abs(states[i])
    v = 0.5 * sigma ** 2 * np.gradient(np.gradient(a, dx), dx) / (
        a + cfg.amplitude_eps)
    v -= v.min()
    us.append(np.abs(np.interp(z, x, v)))
  raw = np.mean(us, 0)
  return (raw - raw.min()) / (raw.max() - raw.min()), psi, h, c @ ex


class QTNTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cfg = qtn.QTNConfig(grid_size=8, num_operators=39, num_modes=4)
    cls.ll = np.array([[-0.3, -1.2, -0.8, -2.0, -0.5, -0.9],
                       [-1.0, -1.1, -0.2, -0.25, -3.0, -0.6]])
    cls.key = jax.random.key(3)
    cls.out = qtn.sample_uncertainty(cls.ll, key=cls.key, config=cls.cfg,
                                     details=True)

  def test_operator_basis(self):
    ops = qtn.pauli_operators(5, 363)
    self.assertEqual(ops.shape, (363, 32, 32))
    self.assertEqual(len(qtn.pauli_strings(7, 363)), 363)
    self.assertEqual(qtn.pauli_strings(7, 363)[-1], "ZZZZZ")
    np.testing.assert_allclose(qtn.pauli_operators(3, 39), np_operators(3, 39),
                               atol=1e-14)
    np.testing.assert_allclose(np.einsum("kab,kab->k", ops, ops.conj()).real,
                               1.0, atol=1e-12)
    np.testing.assert_allclose(ops, np.conj(np.swapaxes(ops, 1, 2)),
                               atol=1e-14)

  def test_matches_numpy_reference(self):
    for i in range(len(self.ll)):
      with jax.enable_x64(True):
        w = np.asarray(self.cfg.perturb_lambda * self.cfg.perturb_scale *
                       jax.random.normal(jax.random.fold_in(self.key, i),
                                         (39,), np.float64))
      u, psi, _, _ = np_reference(self.ll[i], w, self.cfg)
      np.testing.assert_allclose(self.out["psi0"][i], psi, atol=1e-12)
      np.testing.assert_allclose(self.out["u"][i], u, atol=1e-6)

  def test_null_vector_makes_psi0_an_eigenstate(self):
    self.assertLess(float(self.out["eigenstate_residual"].max()), 1e-8)
    _, psi, h, energy = np_reference(self.ll[0], np.zeros(39) + 1e-3,
                                     self.cfg)
    self.assertLess(np.linalg.norm(h @ psi - energy * psi), 1e-8)
    self.assertTrue(np.all((self.out["u"] >= 0) & (self.out["u"] <= 1)))

  def test_entropy_max_matches_scipy_bounded_solver(self):
    p_c = np.array([[0.7, 0.2, 0.1, 0.0]])
    u_bar = np.array([[0.1, 0.9, 0.5, 0.0]])
    present = p_c > 0
    lam = 15.0
    with jax.enable_x64(True):
      got = np.asarray(qtn.entropy_max_reweight(p_c, u_bar, present, lam))
    want = []
    for pc, ub in zip(p_c[0, :3], u_bar[0, :3]):
      f = lambda p, pc=pc, ub=ub: -(-np.log(p ** 2 + (1 - p) ** 2)
                                    - lam / (ub + 1) * p * np.log(p / pc))
      want.append(scipy.optimize.minimize_scalar(
          f, bounds=(1e-6, 1 - 1e-6), method="bounded",
          options={"xatol": 1e-10}).x)
    want = np.array(want + [0.0]) / np.sum(want)
    np.testing.assert_allclose(got[0], want, atol=1e-6)

  def test_scores_hand_example(self):
    ll = np.log(np.array([[0.5, 0.25, 0.125, 0.125]]))
    ids = np.array([[0, 0, 1, 2]])
    u = np.array([[0.0, 1.0, 0.5, 0.25]])
    out = qtn.qtn_scores(ll, ids, key=self.key, lams=(5.0, 50.0), u_qr=u)
    p_c = np.array([0.75, 0.125, 0.125])
    np.testing.assert_allclose(out["p_c"][0, :3], p_c)
    np.testing.assert_allclose(out["u_bar"][0, :3], [0.5, 0.5, 0.25])
    np.testing.assert_allclose(out["renyi2"][0], -np.log(np.sum(p_c ** 2)))
    np.testing.assert_allclose(
        out["renyi2_additive"][:, 0],
        [-np.log(np.sum(p_c ** 2) + lam * 1.25) for lam in (5.0, 50.0)])
    np.testing.assert_allclose(
        out["renyi2_plus"][:, 0],
        -np.log(np.sum(out["p_hat"][:, 0] ** 2, -1)))
    # A larger lambda anchors p_hat closer to p_c.
    gap = np.abs(out["p_hat"][:, 0, :3] - p_c).sum(-1)
    self.assertLess(gap[1], gap[0])

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, "grid_size must be a power"):
      qtn.sample_uncertainty(self.ll, key=self.key,
                             config=qtn.QTNConfig(grid_size=12))
    with self.assertRaisesRegex(ValueError, "num_operators must be in"):
      qtn.sample_uncertainty(self.ll, key=self.key,
                             config=qtn.QTNConfig(grid_size=8,
                                                  num_operators=40))
    with self.assertRaisesRegex(ValueError, "ids_qr must be cluster ids"):
      qtn.qtn_scores(self.ll, np.full(self.ll.shape, 7), key=self.key,
                     u_qr=np.zeros(self.ll.shape))


if __name__ == "__main__":
  absltest.main()
