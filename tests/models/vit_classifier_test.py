"""ViT classifier: parameter/FLOP accounting by hand, per-layer widths, the
model registry, the generic trainer on image data through grain."""

import tempfile

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.configs import common
from jaxlab.data import images
from jaxlab.models import registry
from jaxlab.models import vit_classifier as vc
from jaxlab.objectives import classification  # pylint: disable=unused-import
from jaxlab.train import trainer

# dim 4, 1 layer, 1 head of dim 2, mlp 4, 3 classes, 4x4x1 images, patch 2.
_HAND = vc.ViTClassifierConfig(image_size=4, patch_size=2, channels=1, dim=4,
                               num_layers=1, num_heads=1, head_dim=2,
                               mlp_dim=4, num_classes=3)


class ViTClassifierTest(absltest.TestCase):

  def test_param_count_by_hand(self):
    # embed: 4*4 patch + 4 bias + 4 cls + 5*4 pos = 44; block: norms 16,
    # Q,K 2*2*(4+1)=20, V 2*5=10, O 2*4+4=12, MLP 16+4+16+4=40 -> 98;
    # head: norm 8 + 4*3 + 3 = 23.
    self.assertEqual(_HAND.num_params(), 165)
    model = nnx.eval_shape(lambda: vc.ViTClassifier(_HAND,
                                                    rngs=nnx.Rngs(0)))
    self.assertEqual(vc.count_params(model), 165)

  def test_flops_by_hand(self):
    # (N-1) p^2 c d = 4*4*4 = 64; (2 L N + C + 1) d = (10+4)*4 = 56;
    # (2 N d + N^2)(qk + v) H = (40+25)*4 = 260; 2 N d m = 160.
    self.assertEqual(_HAND.flops(), 540.0)

  def test_per_layer_widths_build_a_smaller_module(self):
    cfg = vc.ViTClassifierConfig(dim=16, num_layers=2, num_heads=2,
                                 head_dim=8, mlp_dim=32, qk_dims=(4, 8),
                                 v_dims=(8, 2), mlp_dims=(8, 32))
    model = nnx.eval_shape(lambda: vc.ViTClassifier(cfg, rngs=nnx.Rngs(0)))
    self.assertEqual(vc.count_params(model), cfg.num_params())
    dense = vc.ViTClassifierConfig(dim=16, num_layers=2, num_heads=2,
                                   head_dim=8, mlp_dim=32)
    self.assertLess(cfg.num_params(), dense.num_params())
    logits, taps = nnx.eval_shape(lambda m, x: m(x, taps=True), model,
                                  jnp.zeros((3, 8, 8, 1)))
    self.assertEqual(logits.shape, (3, 10))
    self.assertEqual([a.shape for a in taps["mlp_act"]],
                     [(3, 17, 8), (3, 17, 32)])
    with self.assertRaisesRegex(ValueError, "model.qk_dims has 1 entries"):
      vc.ViTClassifierConfig(num_layers=2, qk_dims=(4,))
    with self.assertRaisesRegex(ValueError, "model.depth is not"):
      vc.config_from_dict({"name": "vit_classifier", "depth": 3})

  def test_registry_model_trained_by_the_generic_trainer(self):
    x, y = images.select_classes(*images.load("digits"), (0, 1))
    config = common.base_config()
    config.model = {"name": "vit_classifier", "image_size": 8,
                    "patch_size": 4, "channels": 1, "dim": 16,
                    "num_layers": 1, "num_heads": 2, "head_dim": 8,
                    "mlp_dim": 16, "num_classes": 10}
    config.loss.name = "classification"
    config.optim.update(lr=1e-2, warmup_steps=0, schedule="constant")
    config.train.update(steps=40, batch_size=32, eval_every=0,
                        checkpoint_every=1000, tensorboard=False,
                        peak_flops=-1.0, async_checkpoint=False)
    spec = registry.get_spec(config.model, seed=0)
    self.assertEqual(spec.config.num_params(),
                     vc.count_params(nnx.eval_shape(spec.factory)))
    examples = list(images.examples(x, y))
    with tempfile.TemporaryDirectory() as workdir:
      out = trainer.train(config, workdir, train_source=examples,
                          eval_source=examples[:64])
    self.assertLess(out["loss"], 0.3)
    self.assertGreater(out["eval/accuracy"], 0.9)


class ImagesTest(absltest.TestCase):

  def test_digits_split_and_class_selection(self):
    x, y = images.load("digits")
    self.assertEqual(x.shape, (1797, 8, 8, 1))
    self.assertAlmostEqual(float(x.max()), 1.0)
    (tx, ty), (ex, ey) = images.split(x, y, eval_fraction=0.2, seed=0)
    self.assertEqual(len(tx) + len(ex), 1797)
    np.testing.assert_array_equal(np.unique(ey), np.arange(10))
    sx, sy = images.select_classes(tx, ty, (3, 1))
    self.assertEqual(set(sy.tolist()), {1, 3})
    self.assertEqual(len(sx), int(np.sum((ty == 1) | (ty == 3))))
    with self.assertRaisesRegex(ValueError, "target_classes is empty"):
      images.select_classes(tx, ty, ())
    with self.assertRaisesRegex(ValueError, r"class ids \[12\] outside"):
      images.select_classes(tx, ty, (1, 12))


if __name__ == "__main__":
  absltest.main()
