"""jaxlab.io.stages.params_file / keyed_path: one model trained in place,
reloaded while its stage key holds (the cache issue 46 keeps in io.stages)."""

import os
import shutil
import tempfile

from absl.testing import absltest
from flax import nnx
import jax
import numpy as np

from jaxlab.io import stages


def _model(seed=0):
  return nnx.Linear(3, 2, rngs=nnx.Rngs(seed))


def _kernel(model):
  return np.asarray(model.kernel.get_value())


def _never():
  raise AssertionError("trained again under a current key")


class ParamsFileTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
    self.key = {"model": {"dim": 3}, "seed": 0}
    self.calls = 0

  def _train(self, model):
    def train():
      self.calls += 1
      nnx.update(model, jax.tree.map(lambda x: x + 0.5,
                                     nnx.state(model, nnx.Param)))
      return [{"step": 0, "loss": 0.25}]
    return train

  def test_rerun_reloads_the_trained_weights_and_curve(self):
    path = stages.keyed_path(self.dir, "sft_seed0", self.key, "npz")
    self.assertEqual(os.path.basename(path),
                     f"sft_seed0_{stages.digest(self.key)}.npz")
    first = _model()
    fresh = _kernel(_model())
    curve = stages.params_file(first, path, self.key, self._train(first))
    self.assertEqual(curve, [{"step": 0, "loss": 0.25}])
    np.testing.assert_allclose(_kernel(first), fresh + 0.5)
    again = _model()  # untrained: the saved weights are loaded into it
    curve2 = stages.params_file(again, path, self.key, _never)
    self.assertEqual(curve2, curve)
    np.testing.assert_array_equal(_kernel(again), _kernel(first))
    self.assertEqual(self.calls, 1)

  def test_other_key_trains_again_beside_the_first(self):
    other = dict(self.key, seed=1)
    for key in (self.key, other):
      model = _model()
      stages.params_file(
          model, stages.keyed_path(self.dir, "sft", key, "npz"), key,
          self._train(model))
    self.assertEqual(self.calls, 2)
    self.assertLen([f for f in os.listdir(self.dir) if f.endswith(".npz")],
                   2)
    # The same path under a changed key: recomputed, not reloaded.
    path = os.path.join(self.dir, "one.npz")
    model = _model()
    stages.params_file(model, path, self.key, self._train(model))
    model = _model()
    stages.params_file(model, path, other, self._train(model))
    self.assertEqual(self.calls, 4)

  def test_no_path_trains_without_saving(self):
    model = _model()
    stages.params_file(model, None, self.key, self._train(model))
    stages.params_file(model, None, self.key, self._train(model))
    self.assertEqual(self.calls, 2)
    self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
  absltest.main()
