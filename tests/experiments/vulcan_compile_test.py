"""`vulcan:paper` compiles for a TPU topology from this CPU.

The paper preset's train step (the DeiT-B/16 / ViT-B/16 classifier at 224
px, `classification` loss, batch 256 of `[224, 224, 3]` images, AdamW) is
lowered and compiled for `PAPER_TOPOLOGY` (v5e:2x2, FSDP over its 4
chips) with `jaxlab.train.aot`, cut to 1 of its 12 identical blocks and
a batch of 4 (one image per chip); the preset's parameter count is
ViT-B's (86.6M: transformers' `DeiTForImageClassification` of the
released config), the
compiled state is 3 fp32 copies (param, Adam mu and nu) sharded 4 ways,
and it fits the chip. Skipped without libtpu (the `tpu` extra).
"""

import unittest

from jaxlab.train import aot

aot.configure_host_env()

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
import jax  # pylint: disable=g-import-not-at-top

from jaxlab.configs import vulcan as vulcan_config  # pylint: disable=g-import-not-at-top
from jaxlab.models import vit_classifier as vc  # pylint: disable=g-import-not-at-top

_NO_LIBTPU = ("libtpu is not installed: pip install "
              f"'jax[tpu]=={jax.__version__}' (the `tpu` extra)")
# DeiTForImageClassification(facebook/deit-base-patch16-224's config):
# sum(p.numel()) in transformers (ViT-B/16 with a 1000-way head).
VIT_B_PARAMS = 86_567_656


@unittest.skipUnless(aot.libtpu_available(), _NO_LIBTPU)
class VulcanPaperCompileTest(absltest.TestCase):

  def test_paper_train_step_compiles_for_tpu(self):
    config = vulcan_config.get_config("paper")
    self.assertEqual(vc.config_from_dict(config.model).num_params(),
                     VIT_B_PARAMS)
    # Compiled at 1 of its 12 identical blocks and a batch of 4 (1 image
    # per chip, the least that shards over the 4 chips) instead of 256:
    # XLA's TPU compile time grows with both (47 s at 2 blocks x 256, 16 s
    # at 1 x 16 on this CPU); the full preset's numbers are in
    # docs/bench/tpu_presets.json.
    self.assertEqual(config.train.batch_size, 256)
    config.model.num_layers = 1
    config.train.batch_size = batch = 4
    n_params = vc.config_from_dict(config.model).num_params()
    self.assertEqual(VIT_B_PARAMS - n_params, 11 * (
        4 * (768 * 768 + 768) + 2 * 768 * 3072 + 3072 + 768 + 4 * 768))
    # The CLI's path (`python -m jaxlab.experiments.compile
    # --config=vulcan:paper --topology=v5e:2x2`): the preset's shape is
    # built abstractly (no weights are read), the batch is images.
    from jaxlab.experiments import compile as compile_cli  # pylint: disable=g-import-not-at-top
    report = compile_cli.run(config, vulcan_config.PAPER_TOPOLOGY)
    self.assertEqual(report["chips"], 4)
    rep = report["train_step"]
    self.assertEqual(rep["params"], n_params)
    self.assertEqual(rep["batch_size"], batch)
    self.assertTrue(rep["memory"]["fits"])
    # Param + Adam mu + nu in fp32, each at least a 4-way shard.
    self.assertGreaterEqual(rep["state_bytes_per_chip"],
                            3 * 4 * n_params // 4)
    self.assertLess(rep["state_bytes_per_chip"], 3 * 4 * n_params // 2)
    # batch / 4 chips of an image and an int32 label.
    self.assertEqual(rep["batch_bytes_per_chip"],
                     batch // 4 * (224 * 224 * 3 * 4 + 4))


if __name__ == "__main__":
  absltest.main()
