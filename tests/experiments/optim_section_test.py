"""Every experiment sub-training builds its optimizer from all of config.optim.

`--config.optim.b2`, `clip_norm` and `grad_accum` (and every other optim
field) must reach the optimizer of each training an experiment runs, not
only the fields it copies by hand. Each site is run on its smoke/tiny
preset with `optim` overridden until the optimizer is built (then
stopped); the section it was built from must be the config's whole
section, and the optax transformation built from it must give the
hand-computed AdamW updates for the overridden b2 and clip_norm.
"""

import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

from jaxlab.configs import controller as controller_config
from jaxlab.configs import dpad as dpad_config
from jaxlab.configs import rope_extension as rope_config
from jaxlab.configs import speckv as speckv_config
from jaxlab.configs import streaming_thinker as st_config
from jaxlab.configs import video_reason as video_config
from jaxlab.data import tokenizers
from jaxlab.experiments import controller
from jaxlab.experiments import dpad
from jaxlab.experiments import rope_extension
from jaxlab.experiments import speckv
from jaxlab.experiments import streaming_thinker
from jaxlab.experiments import video_reason
from jaxlab.train import optim as optim_lib

_MAKE_OPTIMIZER = optim_lib.make_optimizer
# As `--config.optim.b2=0.5 --config.optim.clip_norm=2 ...` would set them
# (constant lr, no decay: the updates are hand-computable).
OVERRIDES = dict(b2=0.5, clip_norm=2.0, grad_accum=2, lr=0.1,
                 schedule="constant", warmup_steps=0, weight_decay=0.0)
GRADS = (np.array([3.0, 4.0]), np.array([0.3, -0.4]))  # norms 5 and 0.5


def adam_clip_reference(grads, *, lr, b1, b2, eps, clip):
  """Global-norm clipping then Adam (bias-corrected), by hand."""
  m = v = np.zeros_like(grads[0])
  out = []
  for t, g in enumerate(grads, 1):
    norm = np.linalg.norm(g)
    if clip > 0 and norm > clip:
      g = g * clip / norm
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
    out.append(-lr * mh / (np.sqrt(vh) + eps))
  return out


def _updates(optim_cfg, steps):
  tx = _MAKE_OPTIMIZER(optim_cfg, steps)
  params = {"w": jnp.zeros(2)}
  state = tx.init(params)
  out = []
  for g in GRADS:
    u, state = tx.update({"w": jnp.asarray(g, jnp.float32)}, state, params)
    out.append(np.asarray(u["w"]))
  return out


class _Built(Exception):
  """Raised once the optimizer is built: the training itself is not run."""


def _tmp(test):
  out = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, out, ignore_errors=True)
  return out


def _dpad(test):
  c = dpad_config.get_config("smoke")
  return c, lambda: dpad.train_model(c, 0)


def _speckv(test):
  c = speckv_config.get_config("smoke")
  return c, lambda: speckv.train_models(c, speckv.WordTokenizer(), 0)


def _rope(test):
  c = rope_config.get_config("smoke")
  c.train.batch_size = 16  # micro-batches of 8 rows over the 8 devices
  return c, lambda: rope_extension.train_model(
      c, _tmp(test), 0, tokenizers.ByteTokenizer())


def _streaming(test):
  c = st_config.get_config("smoke")
  return c, lambda: streaming_thinker.train_model(c, "streaming", 0)


def _controller(test):
  c = controller_config.get_config("smoke")
  return c, lambda: controller.train_variant(c, "sum_mod10", "gumbel", 0,
                                             log=lambda msg: None)


def _video(test):
  c = video_config.get_config("tiny")
  return c, lambda: video_reason.train_model(c, tokenizers.ByteTokenizer(),
                                             0)


SITES = (("dpad", _dpad), ("speckv", _speckv), ("rope_extension", _rope),
         ("streaming_thinker", _streaming), ("controller", _controller),
         ("video_reason", _video))


class OptimSectionTest(parameterized.TestCase):

  def test_reference_tells_b2_and_clip_apart(self):
    """The check below can fail: b2 and clip_norm change these updates."""
    ref = dict(lr=0.1, b1=0.9, eps=1e-8)
    mine = adam_clip_reference(GRADS, b2=0.5, clip=2.0, **ref)
    for other in (dict(b2=0.95, clip=2.0), dict(b2=0.5, clip=1.0),
                  dict(b2=0.5, clip=0.0)):
      self.assertGreater(np.abs(adam_clip_reference(GRADS, **other, **ref)[1]
                                - mine[1]).max(), 1e-3)

  @parameterized.named_parameters(*SITES)
  def test_whole_optim_section_reaches_the_optimizer(self, make):
    config, train = make(self)
    config.optim.update(OVERRIDES)
    built = []

    def record(optim_cfg, total_steps):
      built.append((optim_cfg.to_dict(), int(total_steps)))
      raise _Built()

    with mock.patch.object(optim_lib, "make_optimizer", side_effect=record):
      with self.assertRaises(_Built):
        train()
    self.assertLen(built, 1)
    section, steps = built[0]
    self.assertEqual(section, config.optim.to_dict())
    self.assertEqual(steps, int(config.train.steps))
    want = adam_clip_reference(GRADS, lr=0.1, b1=float(config.optim.b1),
                               b2=0.5, eps=float(config.optim.eps), clip=2.0)
    got = _updates(config.optim.__class__(section), steps)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-7)


if __name__ == "__main__":
  absltest.main()
