"""`GRPOLearner.train`: the one GRPO outer loop.

Checked: the reward function gets each batch's fields as keywords repeated
G times (row-aligned with the completions, as tunix's learner passes a
dataset's columns); the loop equals hand-written `step` calls with keys
`fold_in(key, i)`; evaluation rows; a run killed mid-way and resumed from
its orbax checkpoint equals the uninterrupted run (history and weights);
one step on 8 (fake) devices equals one device; bad batches are one clear
ValueError.
"""

import itertools
import shutil
import tempfile

from absl.testing import absltest
import chex
from flax import nnx
import jax
import numpy as np

from jaxlab import parallel
from jaxlab.models import decoder as decoder_lib
from jaxlab.parallel import preemption
from jaxlab.rl import learner as learner_lib

_TARGET = 7


def _model(seed=0, dtype="float32"):
  cfg = decoder_lib.DecoderConfig(vocab_size=12, dim=32, num_layers=1,
                                  num_heads=2, num_kv_heads=2, mlp_dim=64,
                                  max_position_embeddings=16,
                                  param_dtype=dtype, dtype=dtype)
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(seed))


def _learner(seed=0, mesh=None, dtype="float32", steps=4):
  cfg = learner_lib.GRPOConfig(group_size=4, max_new_tokens=2,
                               num_iterations=2, kl_beta=0.04)
  return learner_lib.GRPOLearner(_model(seed, dtype), cfg,
                                 {"lr": 1e-2, "schedule": "constant"},
                                 total_steps=steps, mesh=mesh, seed=seed)


def _batches(seed=0):
  """Endless batches of 2 prompts with per-prompt `target` fields."""
  rng = np.random.default_rng(seed)
  while True:
    a = rng.integers(1, 6, 2)
    yield {"prompts": [[1, int(x)] for x in a],
           "target": [_TARGET, int(a[1]) + 3], "qid": np.asarray(a)}


def _reward(*, completions, target, step, **_):
  del step
  r = np.array([float(c[0] == t) for c, t in zip(completions, target)],
               np.float32)
  return r, {"hit": float(r.mean())}


def _params(learner):
  return jax.tree.map(np.asarray, nnx.state(learner.policy, nnx.Param))


class LearnerTrainTest(absltest.TestCase):

  def test_reward_gets_batch_fields_as_keywords(self):
    calls = []

    def reward_fn(**kw):
      calls.append(kw)
      return np.zeros(len(kw["completions"]), np.float32)

    learner = _learner()
    batch = {"prompts": [[1, 2], [1, 3, 4]], "answers": ["5", "9"],
             "qid": np.array([10, 11])}
    history = learner.train([batch, batch], reward_fn, steps=2,
                            key=jax.random.key(0))
    self.assertLen(calls, 2)
    kw = calls[1]
    self.assertEqual(set(kw), {"prompts", "completions", "step",
                               "group_size", "answers", "qid"})
    self.assertEqual(kw["step"], 1)                 # the learner's count
    self.assertEqual(kw["group_size"], 4)
    self.assertEqual(kw["prompts"], [[1, 2]] * 4 + [[1, 3, 4]] * 4)
    self.assertEqual(kw["answers"], ["5"] * 4 + ["9"] * 4)
    np.testing.assert_array_equal(kw["qid"], [10] * 4 + [11] * 4)
    self.assertLen(kw["completions"], 8)
    self.assertEqual([r["step"] for r in history], [1, 2])
    self.assertEqual(learner.step_count, 2)

  def test_equals_hand_written_steps(self):
    key = jax.random.key(3)
    got = _learner().train(_batches(), _reward, steps=3, key=key)
    ref, hand = _learner(), []
    for i, b in zip(range(3), _batches()):
      def old_reward(rb, step, b=b):
        return _reward(completions=rb.completions, step=step,
                       target=[t for t in b["target"] for _ in range(4)])
      hand.append(ref.step(b["prompts"], old_reward,
                           key=jax.random.fold_in(key, i)))
    for g, h in zip(got, hand):
      for k, v in h.items():
        self.assertAlmostEqual(g[k], v, places=6, msg=k)

  def test_eval_rows(self):
    seen = []

    def eval_fn(learner, step):
      seen.append((learner.step_count, step))
      return {"n": step * 10}

    history = _learner(steps=5).train(_batches(), _reward, steps=5,
                                      key=jax.random.key(0), eval_fn=eval_fn,
                                      eval_every=2)
    self.assertEqual(seen, [(2, 2), (4, 4), (5, 5)])   # every 2 and the last
    evals = [r for r in history if "eval" in r]
    self.assertEqual(evals, [{"step": s, "eval": {"n": 10 * s}}
                             for s in (2, 4, 5)])
    self.assertLen(history, 8)

  def test_resume_equals_uninterrupted(self):
    key = jax.random.key(7)
    eval_fn = lambda lr, s: {"param_sum": float(  # noqa: E731
        np.asarray(jax.tree.leaves(nnx.state(lr.policy, nnx.Param))[0]
                   ).sum())}
    full = _learner()
    want = full.train(_batches(), _reward, steps=4, key=key, eval_fn=eval_fn,
                      eval_every=1)

    class Killed(Exception):
      pass

    def dies_at_step_2(**kw):
      if kw["step"] == 2:
        raise Killed()
      return _reward(**kw)

    d = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, d, ignore_errors=True)
    with self.assertRaises(Killed):
      _learner().train(_batches(), dies_at_step_2, steps=4, key=key,
                       eval_fn=eval_fn, eval_every=1, checkpoint_dir=d,
                       checkpoint_every=1)
    resumed = _learner()        # a new process: built as the first was
    steps_run = []

    def counting(**kw):
      steps_run.append(kw["step"])
      return _reward(**kw)
    got = resumed.train(_batches(), counting, steps=4, key=key,
                        eval_fn=eval_fn, eval_every=1, checkpoint_dir=d,
                        checkpoint_every=1)
    self.assertEqual(steps_run, [2, 3])  # from the step-2 checkpoint on
    self.assertEqual(resumed.step_count, 4)
    self.assertEqual(len(got), len(want))
    for g, w in zip(got, want):
      self.assertEqual(g.keys(), w.keys())
      for k in w:
        if k == "eval":
          self.assertAlmostEqual(g[k]["param_sum"], w[k]["param_sum"],
                                 places=5)
        else:
          self.assertAlmostEqual(g[k], w[k], places=6, msg=k)
    chex.assert_trees_all_close(_params(resumed), _params(full), atol=1e-6)
    # Finished: a third call restores the end and runs nothing.
    again = _learner()
    self.assertLen(again.train(iter(()), _reward, steps=4, key=key,
                               checkpoint_dir=d), len(want))
    chex.assert_trees_all_close(_params(again), _params(full), atol=1e-6)
    with self.assertRaisesRegex(ValueError, "another key"):
      _learner().train(_batches(), _reward, steps=4,
                       key=jax.random.key(8), checkpoint_dir=d)

  def test_preemption_saves_and_stops(self):
    d = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, d, ignore_errors=True)
    self.addCleanup(preemption.clear)

    def reward(**kw):
      if kw["step"] == 1:
        preemption.request("test")     # as Ctrl-C during step 2 would
      return _reward(**kw)

    with self.assertRaises(preemption.Preempted):
      _learner().train(_batches(), reward, steps=4, key=jax.random.key(0),
                       checkpoint_dir=d)
    preemption.clear()
    resumed = _learner()
    history = resumed.train(_batches(), _reward, steps=4,
                            key=jax.random.key(0), checkpoint_dir=d)
    self.assertEqual([r["step"] for r in history], [1, 2, 3, 4])
    self.assertEqual(resumed.step_count, 4)

  def test_one_step_on_8_devices_equals_one(self):
    """A whole train step: rollout under the mesh, then the updates.

    float32 (the KV-cache sampler is float32 here): the mesh reorders the
    reductions (~1e-7 relative), so the sampled tokens are the same (no
    near-tie flips at this size), losses agree to 1e-5 and Adam's
    m / sqrt(v) moves a weight whose gradient nearly cancels by at most
    ~1 % of one lr (1e-2) step: atol 1e-4 on the weights.
    """
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    key = jax.random.key(5)
    runs = []
    for mesh in (None, parallel.make_mesh({"data": 2, "fsdp": 2,
                                           "tensor": 2})):
      learner = _learner(2, mesh=mesh)
      seen = []

      def reward(**kw):
        seen.append([list(c) for c in kw["completions"]])
        return _reward(**kw)
      if mesh is not None:
        gate = learner.policy.layers[0].mlp.gate_df[...]
        self.assertEqual(gate.sharding.spec, jax.P("fsdp", "tensor"))
      runs.append((learner.train(_batches(), reward, steps=1, key=key),
                   _params(learner), seen))
    (h1, p1, c1), (h8, p8, c8) = runs
    self.assertEqual(c8, c1)                 # the same sampled tokens
    for k in ("loss", "pg_loss", "kl", "grad_norm", "reward_mean"):
      np.testing.assert_allclose(h8[0][k], h1[0][k], rtol=1e-5, atol=1e-7,
                                 err_msg=k)
    self.assertGreater(h1[0]["grad_norm"], 1e-3)
    chex.assert_trees_all_close(p8, p1, atol=1e-4, rtol=0)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(
        jax.tree.leaves(p1), jax.tree.leaves(_params(_learner(2)))))
    self.assertGreater(moved, 1e-3)

  def test_bad_batches(self):
    learner = _learner()
    with self.assertRaisesRegex(ValueError, "needs 'prompts'"):
      learner.train([{"text": ["a"]}], _reward, steps=1,
                    key=jax.random.key(0))
    with self.assertRaisesRegex(ValueError, "one value per prompt"):
      learner.train([{"prompts": [[1, 2]], "target": [1, 2]}], _reward,
                    steps=1, key=jax.random.key(0))
    with self.assertRaisesRegex(ValueError, "ran out after 2"):
      learner.train(itertools.islice(_batches(), 2), _reward, steps=3,
                    key=jax.random.key(0))


if __name__ == "__main__":
  absltest.main()
