"""`controller:paper` (paper I): the paper's tasks generated at its sizes.

The paper releases no code or data (OpenReview 14dlTHVxDX; the papernotes
summary lists its code as "to be confirmed"), so its algorithmic tasks
are generated: sum-of-list, sorting and BFS, trained on lengths 10-80 and
tested at 80 / 160 / 320 (BFS: node counts, ids 0..319). Checked here:
the generated instances at those sizes (BFS answers are the BFS order of
the written graph, recomputed here; tokens inside the vocabulary), the
padded lengths against the model's positions, `paper,short` end to end
with the model shrunk (results at the paper's lengths), and the AOT compile
of the Gumbel controller's train step for the preset's TPU topology
(skipped without libtpu).
"""

import collections
import json
import os
import tempfile
import unittest

from absl.testing import absltest
import numpy as np

from jaxlab.configs import controller as controller_config
from jaxlab.data.synthetic import algorithmic as alg
from jaxlab.data.synthetic import controller_data
from jaxlab.experiments import controller
from jaxlab.train import aot


def _bfs_reference(prompt, sep):
  """BFS order of the graph a prompt writes (u v pairs, SEP, src),
  neighbours in ascending id order: an independent re-implementation."""
  k = prompt.index(sep)
  pairs, src = prompt[:k], prompt[k + 1]
  adj = collections.defaultdict(set)
  for u, v in zip(pairs[0::2], pairs[1::2]):
    adj[u].add(v)
    adj[v].add(u)
  order, seen, queue = [src], {src}, collections.deque([src])
  while queue:
    for v in sorted(adj[queue.popleft()]):
      if v not in seen:
        seen.add(v)
        order.append(v)
        queue.append(v)
  return order


class ControllerPaperTest(absltest.TestCase):

  def test_paper_sizes_are_generated(self):
    c = controller_config.get_config("paper")
    self.assertEqual(c.tasks.split(","), ["sum_mod10", "sort", "bfs"])
    self.assertEqual(tuple(c.train_lengths), (10, 20, 40, 80))
    self.assertEqual(tuple(c.test_lengths), (80, 160, 320))
    self.assertLen(c.seeds, 9)
    self.assertEqual(c.model.vocab_size, 320 + 4)
    bos, sep, eos, pad = alg.special_tokens(c.num_values)
    self.assertEqual((bos, pad), (320, 323))
    train_t, eval_t = controller_data.pad_lengths(c)
    # BFS at 320 nodes: 399 edges (319 tree + 80 chords) -> 798 ids, 2 SEP,
    # src, BOS, 320 answers: 1122 inputs, + 4 of slack.
    self.assertEqual((train_t, eval_t), (286, 1126))
    self.assertEqual(c.train.seq_len, train_t)
    self.assertLessEqual(eval_t, c.model.max_position_embeddings)
    for ex in alg.make_examples("bfs", [320], 4, seed=5, num_values=320):
      self.assertEqual(ex.tokens[0], bos)
      self.assertEqual(ex.tokens[-1], eos)
      answer = [t for t, m in zip(ex.tokens, ex.answer_mask) if m]
      prompt = list(ex.tokens[1:ex.tokens.index(sep, ex.tokens.index(sep)
                                                + 1)])
      self.assertEqual(answer, _bfs_reference(prompt, sep))
      self.assertLen(answer, 320)
      self.assertLess(max(ex.tokens), c.model.vocab_size)
      self.assertGreaterEqual(max(answer), 64)  # ids beyond the miniature's
    arr = controller_data.eval_sets(
        controller_config.get_config("paper,short"), "bfs")
    self.assertEqual(set(arr), {"train", "80", "160", "320"})
    self.assertEqual(arr["320"]["inputs"].shape, (8, eval_t))
    np.testing.assert_array_equal(arr["320"]["lengths"], [320] * 8)
    np.testing.assert_array_equal(arr["320"]["loss_mask"].sum(-1), [320] * 8)
    self.assertEqual(int(arr["320"]["inputs"][0, -1]), pad)

  def test_miniature_token_space_is_unchanged(self):
    c = controller_config.get_config("tiny")
    self.assertEqual(controller_data.vocab_size(c), alg.VOCAB_SIZE)
    self.assertEqual(alg.special_tokens(), (alg.BOS, alg.SEP, alg.EOS,
                                            alg.PAD))
    # Same instances as before the token space became a parameter.
    a = alg.make_examples("bfs", [8], 3, seed=2)
    b = alg.make_examples("bfs", [8], 3, seed=2, num_values=64)
    self.assertEqual(a, b)
    with self.assertRaisesRegex(ValueError, r"\[1, 64\]"):
      alg.make_examples("bfs", [65], 1)

  def test_paper_short_runs_at_the_paper_lengths(self):
    c = controller_config.get_config("paper,short")
    self.assertEqual((tuple(c.seeds), c.train.steps, c.num_eval),
                     ((0,), 2, 8))
    # The model shrunk for a CPU test; the tasks and lengths the paper's.
    c.tasks = "sum_mod10,bfs"
    c.variants = ("vanilla", "gumbel")
    c.model.update(dim=32, num_layers=2, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.model.controller.update(every_p=1, register_dim=8, state_dim=16,
                              control_dim=16, branch_hidden=16)
    c.flops_every_p = (2,)
    # And run smaller than `short` (its 8 instances a length, batch 32):
    # the instances are padded to the 1126 positions of BFS at 320 either
    # way, so the accuracies, alignments and knockouts are as much at the
    # paper's lengths on 4 of them, at half the eval time. The training
    # rows stay 286 tokens (the padded paper lengths), 8 a step.
    c.num_eval = c.eval_batch_size = 4
    c.train.batch_size = 8
    with tempfile.TemporaryDirectory() as work:
      out = controller.run(c, work)
      with open(os.path.join(work, "results.json")) as f:
        res = json.load(f)
    self.assertEqual(out["lengths"], [37, 80, 160, 320])
    self.assertEqual({(r["task"], r["variant"]) for r in out["records"]},
                     {(t, v) for t in ("sum_mod10", "bfs")
                      for v in ("vanilla", "gumbel")})
    for r in out["records"]:
      accs = [r[f"acc_{n}"] for n in ("train", "80", "160", "320")]
      for a in accs:  # exact accuracy over 4 instances
        self.assertAlmostEqual(a * 4, round(a * 4))
      self.assertAlmostEqual(r["aul"], np.mean(accs))
      if r["variant"] == "gumbel":
        self.assertAlmostEqual(r["knockout_drop"],
                               r["acc_train"] - r["acc_knockout"])
        self.assertBetween(r["align_320"], 0.0, 1.0)
    tables = {t["id"] for t in res["tables"]}
    self.assertEqual(tables, {"accuracy", "controller", "flops"})
    self.assertEqual(out["flops"][0]["p"], 2)


@unittest.skipUnless(aot.libtpu_available(), "libtpu is not installed")
class ControllerPaperCompileTest(absltest.TestCase):

  def test_train_step_compiles_for_the_preset_topology(self):
    from jaxlab.experiments import compile as compile_cli  # pylint: disable=g-import-not-at-top
    from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
    c = controller_config.get_config("paper")
    # Compiled at 2 of its 8 blocks, one controller (every_p = 2): the
    # blocks are identical, and the whole model took 150 s of the suite.
    # And at a batch of 4 (1 row per chip, the least that shards over the
    # 4 chips) instead of 32: XLA's TPU compile time grows with the batch
    # too (41 s at 32 -> 12 s at 8 on this CPU). The full preset's
    # numbers: docs/bench/tpu_presets.json.
    self.assertEqual(c.train.batch_size, 32)
    c.model.num_layers = 2
    c.train.batch_size = batch = 4
    report = compile_cli.run(c, None, sampler=False)
    step = report["train_step"]
    self.assertEqual((report["topology"], report["chips"]), ("v5e:2x2", 4))
    self.assertTrue(step["memory"]["fits"])
    # The batch: 4 arrays (3 int32, 1 float32) of [batch / 4 chips, 286].
    self.assertEqual(step["batch_bytes_per_chip"], 4 * (batch // 4) * 286 * 4)
    spec = registry.get_spec(c.model)
    self.assertEqual(step["params"], spec.config.num_params())
    self.assertEqual(step["flops_per_step"],
                     spec.flops_per_token(286) * batch * 286)

if __name__ == "__main__":
  absltest.main()
