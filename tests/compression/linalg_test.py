"""Tests of jaxlab.compression.linalg: hand values and numpy/tensorly parity."""

import math

import chex
import jax
import numpy as np
import tensorly as tl
from absl.testing import absltest
from tensorly import tenalg

from jaxlab.compression import linalg


class EffectiveRankTest(absltest.TestCase):

  def test_hand_values(self):
    # identity: equal singular values -> full size; rank one -> 1;
    # diag(3, 1): p = (3/4, 1/4) -> exp(H(p)).
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    mats = np.stack([np.eye(3), np.outer([1., 2., 3.], [1., 0., 1.]),
                     np.diag([3., 1., 0.])]).astype(np.float32)
    np.testing.assert_allclose(linalg.effective_rank(mats),
                               [3.0, 1.0, math.exp(h)], rtol=1e-5)

  def test_vector_is_an_error(self):
    with self.assertRaisesRegex(ValueError, r"\[\.\.\., M, N\]"):
      linalg.effective_rank(np.ones(3))


class SvdTest(absltest.TestCase):

  def test_batched_svd_reconstructs_and_matches_numpy(self):
    x = np.random.default_rng(0).normal(size=(3, 5, 4)).astype(np.float32)
    u, s, vh = linalg.batched_svd(x)
    chex.assert_shape((u, s, vh), ((3, 5, 4), (3, 4), (3, 4, 4)))
    np.testing.assert_allclose(np.einsum("bik,bk,bkj->bij", u, s, vh), x,
                               atol=1e-5)
    np.testing.assert_allclose(s, np.linalg.svd(x, compute_uv=False),
                               rtol=1e-5)

  def test_truncated_svd_is_eckart_young(self):
    x = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    u, s, vh = linalg.truncated_svd(x, 2)
    err = np.sum((x - (u * s) @ vh) ** 2)
    sv = np.linalg.svd(x, compute_uv=False)
    np.testing.assert_allclose(err, np.sum(sv[2:] ** 2), rtol=1e-4)
    with self.assertRaisesRegex(ValueError, r"rank=5 must be in \[1, 4\]"):
      linalg.truncated_svd(x, 5)

  def test_top_left_singular_vectors_span(self):
    # wide matrix (Gram path): same subspace as numpy's top singular vectors
    x = np.random.default_rng(2).normal(size=(4, 30)).astype(np.float32)
    u = np.asarray(linalg.top_left_singular_vectors(x, 2))
    ref = np.linalg.svd(x)[0][:, :2]
    np.testing.assert_allclose(u @ u.T, ref @ ref.T, atol=1e-4)
    np.testing.assert_allclose(u.T @ u, np.eye(2), atol=1e-5)


class TensorAlgebraTest(absltest.TestCase):

  def test_unfold_fold_mode_dot_match_tensorly(self):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    a = rng.normal(size=(2, 4)).astype(np.float32)
    for mode in range(3):
      np.testing.assert_allclose(linalg.unfold(x, mode), tl.unfold(x, mode),
                                 atol=0)
      np.testing.assert_allclose(
          linalg.fold(linalg.unfold(x, mode), mode, x.shape), x, atol=0)
    np.testing.assert_allclose(linalg.mode_dot(x, a, 1),
                               tenalg.mode_dot(x, a, 1), atol=1e-5)
    mats = [rng.normal(size=(2, 3)).astype(np.float32), None,
            rng.normal(size=(5, 5)).astype(np.float32)]
    ref = tenalg.mode_dot(tenalg.mode_dot(x, mats[0], 0), mats[2], 2)
    np.testing.assert_allclose(linalg.multi_mode_dot(x, mats), ref,
                               rtol=1e-4, atol=1e-4)


class KMeansTest(absltest.TestCase):

  def test_recovers_separated_clusters(self):
    rng = np.random.default_rng(4)
    centres = np.array([[0., 0.], [10., 0.], [0., 10.]], np.float32)
    labels_true = np.repeat(np.arange(3), 20)
    x = centres[labels_true] + 0.1 * rng.normal(size=(60, 2)).astype(
        np.float32)
    c, labels, inertia = linalg.kmeans(x, 3, key=jax.random.key(0))
    labels = np.asarray(labels)
    # same partition as the truth (up to relabelling)
    for j in range(3):
      self.assertLen(set(labels[labels_true == j]), 1)
    self.assertLen(set(labels), 3)
    np.testing.assert_allclose(
        inertia, np.sum((x - np.asarray(c)[labels]) ** 2), rtol=1e-4)

  def test_pp_init_picks_distinct_rows(self):
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    c = np.asarray(linalg.kmeans_pp_init(x, 5, key=jax.random.key(1)))
    # with k = N every row is chosen once (a chosen row has distance 0)
    self.assertEqual(sorted(map(tuple, c)), sorted(map(tuple, x)))
    with self.assertRaisesRegex(ValueError, r"k=6 must be in \[1, 5\]"):
      linalg.kmeans_pp_init(x, 6, key=jax.random.key(1))


if __name__ == "__main__":
  absltest.main()
