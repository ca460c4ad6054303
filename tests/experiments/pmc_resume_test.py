"""jaxlab/experiments/pmc: a rerun reloads the pre-trained model and method results.

A killed or extended spec-size run (hours of pre-training on 2 cores) must
not pre-train again: the stages are cached in the workdir under a digest of
the config fields they depend on. Training and evaluation are replaced by
fakes that leave a mark on the parameters, so the test checks what is
reloaded, not the (separately tested) unlearning.
"""

import glob
import os
import tempfile
from unittest import mock

from absl.testing import absltest
from flax import nnx
import jax
import numpy as np

from jaxlab.configs import pmc as pmc_config
from jaxlab.experiments import pmc as pmc_exp
from jaxlab.train import runner


def _config():
  c = pmc_config.get_config("tiny")
  c.parts, c.methods = "unlearn", "ga,npo"
  return c


def _checksum(model):
  return float(sum(np.abs(np.asarray(x, np.float64)).sum()
                   for x in jax.tree.leaves(nnx.state(model, nnx.Param))))


def _fake_train(model, data, **kw):
  del data, kw
  nnx.update(model, jax.tree.map(lambda x: x + 0.5,
                                 nnx.state(model, nnx.Param)))
  return [{"step": 0, "loss": 0.125}]


def _fake_eval(model, *a, **kw):
  del a, kw
  return {"recall_forget": _checksum(model)}


def _fake_unlearn(method, seed, base, *a):
  del a
  return {"eval": {"recall_forget": _checksum(base) + len(method)},
          "extra": {"pmc_cache_done_frac": float(seed)}}


def _run(config, workdir, train=_fake_train, evaluate=_fake_eval,
         unlearn=_fake_unlearn):
  with mock.patch.object(runner, "train_lm", side_effect=train) as t, \
       mock.patch.object(pmc_exp, "_eval", side_effect=evaluate) as e, \
       mock.patch.object(pmc_exp, "_unlearn_and_eval",
                         side_effect=unlearn) as u:
    return pmc_exp.run_unlearning(config, workdir), (t, e, u)


def _never(*a, **kw):
  raise AssertionError("recomputed a cached stage")


class PmcResumeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = tempfile.mkdtemp()
    cls.first, _ = _run(_config(), cls.workdir)

  def test_rerun_reloads_every_stage(self):
    again, _ = _run(_config(), self.workdir, _never, _never, _never)
    self.assertEqual(again["per_seed"], self.first["per_seed"])
    self.assertEqual(again["pretrain_final_loss_seed0"], 0.125)
    self.assertEqual(again["pmc_cache_done_frac_seed0"], 0.0)

  def test_reloaded_parameters_are_the_trained_ones(self):
    # A fresh model of seed 0 plus the fake training's +0.5 on every leaf.
    c = _config()
    fresh = pmc_exp.decoder.Decoder(
        pmc_exp.model_registry.decoder_config(c.model, vocab_size=pmc_exp.tokenizers.ByteTokenizer().vocab_size),
        rngs=nnx.Rngs(0))
    fresh_sum = _checksum(fresh)
    trained = self.first["per_seed"]["methods"]["original"][0]
    self.assertNotAlmostEqual(trained["recall_forget"], fresh_sum, places=2)
    c.unlearn.steps = 5  # new method stage, same pre-trained model
    out, (train, _, unlearn) = _run(c, self.workdir, train=_never)
    train.assert_not_called()
    self.assertEqual(unlearn.call_count, 2)
    self.assertEqual(out["per_seed"]["methods"]["ga"][0]["recall_forget"],
                     trained["recall_forget"] + 2)
    self.assertEqual(out["per_seed"]["methods"]["original"],
                     self.first["per_seed"]["methods"]["original"])

  def test_other_pretraining_config_pretrains_again(self):
    c = _config()
    c.pretrain.steps += 1
    _, (train, _, _) = _run(c, self.workdir)
    train.assert_called_once()
    self.assertLen(glob.glob(os.path.join(self.workdir,
                                          "pretrained_seed0_*.npz")), 2)


if __name__ == "__main__":
  absltest.main()
