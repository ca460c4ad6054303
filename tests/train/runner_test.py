"""The generic step runner (the trainer's step): parity with a hand-written
update, reuse, the loss's step, state the loss updates, parameter groups."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data import tokenizers
from jaxlab.models import decoder
from jaxlab.objectives import self_generated as sg
from jaxlab.train import losses as losses_lib
from jaxlab.train import optim as optim_lib
from jaxlab.train import runner


class StepRunnerTest(absltest.TestCase):

  def test_matches_a_hand_written_update_and_reuses_the_step(self):
    """StepRunner's update == nnx.Optimizer on the trainer's optax chain.

    Compared in float64: the two programs (XLA fuses them differently) round
    float32 gradients differently by ~1e-7 relative, and Adam's
    m / (sqrt(v) + eps) scales that up to ~1e-5 on entries whose gradients
    nearly cancel (one of 2048 entries failed atol 1e-5 at LLVM O0). In
    float64 that noise is ~1e-9 smaller, so atol 1e-9 also sees changes that
    Adam's scale invariance hides from float32: a clip norm of 0.45 instead
    of 0.5 moves entries by only 7.6e-7.
    """
    tok = tokenizers.ByteTokenizer()
    data = sg.encode_for_lm(tok, ["Q: a\nA: ", "Q: bb\nA: "],
                            ["one two", "three"], max_len=24)
    ocfg = runner.optim_config(lr=1e-2, warmup_steps=1, weight_decay=0.1,
                               schedule="cosine", clip_norm=0.5)
    with jax.enable_x64(True):
      cfg = decoder.DecoderConfig(vocab_size=tok.vocab_size, dim=32,
                                  num_layers=1, num_heads=2, num_kv_heads=1,
                                  mlp_dim=64, param_dtype="float64",
                                  dtype="float64")
      ref = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
      opt = nnx.Optimizer(ref, optim_lib.make_optimizer(ocfg, 3),
                          wrt=nnx.Param)
      loss_fn = losses_lib.get("lm")

      @nnx.jit  # one compiled program instead of op-by-op float64 dispatch
      def hand_step(model, opt, batch):
        grads = nnx.grad(lambda m: loss_fn(m, batch, rng=None)[0])(model)
        opt.update(model, grads)

      for _ in range(3):
        hand_step(ref, opt, data)
      want = nnx.state(ref, nnx.Param)
      self.assertEqual(ref(jnp.asarray(data["inputs"][:1])).dtype,
                       jnp.float64)
      runners = []
      for _ in range(2):  # the second runner reuses the compiled step
        model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
        step_runner = runner.StepRunner(model, loss="lm", loss_config=None,
                                        optim=ocfg, steps=3, seed=0)
        for step in range(3):
          step_runner.step(dict(data), step)
        step_runner.write_back()
        got = nnx.state(model, nnx.Param)
        self.assertEqual({x.dtype for x in jax.tree.leaves(got)},
                         {np.dtype(np.float64)})
        chex.assert_trees_all_close(got, want, atol=1e-9, rtol=0)
        runners.append(step_runner)
    self.assertIs(runners[0]._step, runners[1]._step)  # pylint: disable=protected-access


class RunningMean(nnx.Variable):
  """A non-parameter variable a loss updates (like a dual or an EMA)."""


class _Toy(nnx.Module):

  def __init__(self):
    self.w_dd = nnx.Param(jnp.full((2, 2), 2.0))
    self.bias_d = nnx.Param(jnp.zeros(2))
    self.lagrange = nnx.Param(jnp.array([1.0, -1.0]))
    self.calls = RunningMean(jnp.zeros((), jnp.float32))
    self.stat = nnx.BatchStat(jnp.zeros(2))


def _linear_loss(model, batch, *, rng, config, step):
  """Linear in the weights (constant gradients); counts its calls."""
  del rng, config
  seen = model.calls[...]
  model.calls[...] = seen + 1.0
  model.stat[...] = model.stat[...] + jnp.mean(batch["x"], axis=0)
  scale = 1.0 + step.astype(jnp.float32)  # an annealed weight
  loss = scale * (jnp.sum(model.w_dd[...] * jnp.mean(batch["x"], 0)[:, None])
                  + jnp.sum(model.bias_d[...])
                  + jnp.sum(model.lagrange[...] * batch["c"][0]))
  return loss, {"seen": seen, "step": step.astype(jnp.float32)}


def _sgd(lr=1.0, **kw):
  return runner.optim_config(lr=lr, clip_norm=0.0, groups={
      "all": {"pattern": ".", "optimizer": "sgd"}}, **kw)


class TrainerFeatureTest(parameterized.TestCase):

  def _batch(self, rows=2):
    return {"x": np.tile(np.array([[1.0, 3.0]], np.float32), (rows, 1)),
            "c": np.tile(np.array([[0.5, -2.0]], np.float32), (rows, 1))}

  def test_loss_receives_the_step(self):
    # SGD at lr 1 on a loss (1 + step) * <w, g>: step s moves every weight
    # by -(1 + s) * g, so three steps move it by -6 g.
    model = _Toy()
    r = runner.StepRunner(model, loss=_linear_loss, loss_config=None,
                          optim=_sgd(), steps=3)
    steps = [r.step(self._batch(), i)["step"] for i in range(3)]
    self.assertEqual(steps, [0.0, 1.0, 2.0])
    self.assertEqual(r.update_count, 3)
    r.write_back()
    np.testing.assert_allclose(model.bias_d[...], [-6.0, -6.0])
    np.testing.assert_allclose(model.lagrange[...],
                               np.array([1.0, -1.0]) - 6 * np.array(
                                   [0.5, -2.0]), rtol=1e-6)
    np.testing.assert_allclose(model.w_dd[...],
                               2.0 - 6 * np.array([[1.0, 1.0], [3.0, 3.0]]),
                               rtol=1e-6)

  @parameterized.parameters(1, 2)
  def test_loss_updated_variables_are_kept(self, grad_accum):
    model = _Toy()
    r = runner.StepRunner(model, loss=_linear_loss, loss_config=None,
                          optim=_sgd(grad_accum=grad_accum), steps=3)
    seen = [r.step(self._batch(4), i)["seen"] for i in range(3)]
    # Each micro-batch sees the count the previous one left; the metric is
    # the micro-batch mean: 0, 2, 4 -> mean(0, 1) = 0.5, 2.5, 4.5 with A=2.
    want = np.arange(3) * grad_accum + (grad_accum - 1) / 2
    np.testing.assert_allclose(seen, want)
    r.write_back()
    self.assertEqual(float(model.calls[...]), 3 * grad_accum)
    np.testing.assert_allclose(model.stat[...],
                               3 * grad_accum * np.array([1.0, 3.0]))

  def test_train_on_arrays_draws_seeded_rows_and_logs_the_curve(self):
    # The loss adds each batch's mean x to `stat`: after 5 steps it is the
    # sum of the means of the rows default_rng(seed).integers drew.
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    data = {"x": x, "c": np.ones((6, 2), np.float32)}
    model = _Toy()
    r = runner.StepRunner(model, loss=_linear_loss, loss_config=None,
                          optim=_sgd(lr=0.0), steps=5)
    logged = []
    curve = runner.train_on_arrays(r, data, steps=5, batch_size=3, seed=7,
                                   log_every=2,
                                   log=lambda s, l: logged.append(s))
    rng = np.random.default_rng(7)
    want = sum(x[rng.integers(0, 6, 3)].mean(0) for _ in range(5))
    r.write_back()
    np.testing.assert_allclose(model.stat[...], want, rtol=1e-6)
    self.assertEqual([c["step"] for c in curve], [0, 2, 4])
    self.assertEqual(logged, [0, 2, 4])
    with self.assertRaisesRegex(ValueError, "empty data set"):
      runner.train_on_arrays(r, {"x": x[:0]}, steps=1, batch_size=1, seed=0)

  def test_train_on_batches_feeds_batch_fn_of_each_step(self):
    # `stat` sums each batch's mean x: batch i is x = i, so 0 + 1 + 2 + 3.
    model = _Toy()
    r = runner.StepRunner(model, loss=_linear_loss, loss_config=None,
                          optim=_sgd(lr=0.0), steps=4)
    seen = []

    def batch_fn(i):
      seen.append(i)
      return {"x": np.full((2, 2), i, np.float32),
              "c": np.ones((2, 2), np.float32)}
    metrics = runner.train_on_batches(r, batch_fn, steps=4)
    r.write_back()
    self.assertEqual(seen, [0, 1, 2, 3])
    self.assertLen(metrics, 4)
    np.testing.assert_allclose(model.stat[...], [6.0, 6.0])

  def test_parameter_groups_through_the_trainer_step(self):
    # Base AdamW lr 0.2 (bias: -0.2 sign(g)), the matrix at lr_mult 0.1
    # with wd 0.5, the multipliers by SGD ascent at lr -0.5 (+0.5 g).
    model = _Toy()
    optim = runner.optim_config(
        lr=0.2, clip_norm=0.0, weight_decay=0.5,
        groups={"weights": {"pattern": "w_dd", "lr_mult": 0.1},
                "duals": {"pattern": "lagrange", "optimizer": "sgd",
                          "lr": -0.5}})
    r = runner.StepRunner(model, loss=_linear_loss, loss_config=None,
                          optim=optim, steps=1)
    r.step(self._batch(), 0)
    r.write_back()
    np.testing.assert_allclose(model.w_dd[...], 2.0 - 0.02 * (1 + 0.5 * 2.0),
                               rtol=1e-5)
    np.testing.assert_allclose(model.bias_d[...], [-0.2, -0.2], rtol=1e-5)
    np.testing.assert_allclose(model.lagrange[...],
                               np.array([1.0, -1.0]) + 0.5 * np.array(
                                   [0.5, -2.0]), rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
