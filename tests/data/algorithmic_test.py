"""Algorithmic tasks and their simulators (paper I benchmarks)."""

import random

from absl.testing import absltest
import numpy as np

from jaxlab.data.synthetic import algorithmic as alg
from jaxlab.models import controller as ctl

A, ADD, C, B, N = (alg.ASSIGN, alg.ADD, alg.COMPARE, alg.BRANCH, alg.NOOP)


class SimulatorTest(absltest.TestCase):

  def test_opcodes_match_the_controller(self):
    self.assertEqual(alg.OPS, ctl.OPS)
    self.assertEqual((A, ADD, C, B, N), (ctl.ASSIGN, ctl.ADD, ctl.COMPARE,
                                         ctl.BRANCH, ctl.NOOP))

  def test_sum_trace_hand_case(self):
    prog, ans = alg.simulate_sum([7, 5, 9])
    self.assertEqual(ans, 1)  # 21 mod 10
    self.assertEqual(prog, [(A, "acc", 0), (ADD, "acc", 7), (ADD, "acc", 5),
                            (ADD, "acc", 9), (N, "emit", 1)])

  def test_bubble_sort_trace_hand_case(self):
    prog, out = alg.simulate_bubble_sort([3, 1, 2])
    self.assertEqual(out, [1, 2, 3])
    # Pass 1: 3>1 swap -> [1,3,2]; 3>2 swap -> [1,2,3]. Pass 2: no swap, stop.
    self.assertEqual(prog, [(C, 0, 1), (B, 0, 1), (C, 1, 2), (B, 1, 2),
                            (C, 0, 1)])
    self.assertEqual(alg.sort_token_ops([3, 1, 2, 5, 5, 0]),
                     [C, B, B, C, C, B])

  def test_bfs_trace_hand_case(self):
    # 4 - 9 - 2, 4 - 7, 9 - 7 (a triangle 4-9-7 plus 2); from 4.
    edges = [(9, 2), (4, 9), (7, 4), (9, 7)]
    prog, order = alg.simulate_bfs(edges, 4)
    self.assertEqual(order, [4, 7, 9, 2])
    self.assertEqual(prog, [
        (A, "enqueue", 4),
        (C, 4, 7), (B, 4, 7), (A, "enqueue", 7),
        (C, 4, 9), (B, 4, 9), (A, "enqueue", 9),
        (C, 7, 4), (C, 7, 9),
        (C, 9, 2), (B, 9, 2), (A, "enqueue", 2), (C, 9, 4), (C, 9, 7),
        (C, 2, 9)])
    _, parent = alg.bfs_order(edges, 4)
    self.assertEqual(alg.bfs_token_ops(order, parent), [A, B, C, B])


class TasksTest(absltest.TestCase):

  def test_sum_example_and_encoding(self):
    ex = alg.sum_mod10(random.Random(0), 3)
    xs = list(ex.tokens[1:4])
    self.assertEqual(ex.tokens, (alg.BOS, *xs, alg.SEP, sum(xs) % 10,
                                 alg.EOS))
    self.assertEqual(ex.token_ops, (A, ADD, ADD, ADD, N, N, N))
    arr = alg.encode([ex], pad_to=8)
    np.testing.assert_array_equal(arr["inputs"][0],
                                  list(ex.tokens[:-1]) + [alg.PAD] * 2)
    np.testing.assert_array_equal(arr["targets"][0, :6], ex.tokens[1:])
    # The answer digit is the target at input position 4 (the SEP).
    np.testing.assert_array_equal(arr["loss_mask"][0],
                                  [0, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(arr["op_targets"][0],
                                  [A, ADD, ADD, ADD, N, N, -1, -1])
    with self.assertRaisesRegex(ValueError, "pad_to=4 is shorter"):
      alg.encode([ex], pad_to=4)

  def test_sort_and_bfs_answers_are_right(self):
    for ex in alg.make_examples("sort", [5, 9], 20, seed=1):
      xs = ex.tokens[1:1 + ex.length]
      ans = [t for t, m in zip(ex.tokens, ex.answer_mask) if m]
      self.assertEqual(ans, sorted(xs))
    for ex in alg.make_examples("bfs", [3, 8], 20, seed=2):
      ans = [t for t, m in zip(ex.tokens, ex.answer_mask) if m]
      self.assertEqual(sorted(ans), sorted(set(ans)))
      self.assertLen(ans, ex.length)  # connected: BFS visits every node
      self.assertEqual(ex.tokens[len(ex.tokens) - ex.length - 3], ans[0])
    lengths = {e.length for e in alg.make_examples("sum_mod10", [8, 16], 50)}
    self.assertEqual(lengths, {8, 16})

  def test_exact_match_and_bad_input(self):
    tgt = np.array([[1, 2, 3], [1, 2, 3]])
    mask = np.array([[0, 1, 1], [0, 1, 1]])
    pred = np.array([[9, 2, 3], [1, 2, 4]])
    np.testing.assert_array_equal(alg.exact_match(pred, tgt, mask), [1, 0])
    with self.assertRaisesRegex(ValueError, "unknown algorithmic task"):
      alg.make_examples("parity", [4], 1)
    with self.assertRaisesRegex(ValueError, r"node count\) must be in"):
      alg.make_examples("bfs", [65], 1)


if __name__ == "__main__":
  absltest.main()
