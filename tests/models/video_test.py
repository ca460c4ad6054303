"""Video LM: the prefix path against the decoder run by hand, the sampler's
greedy decode against a full-recompute argmax loop, the registry + generic
trainer's step sharded over 8 devices against one device, and the errors."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.models import registry
from jaxlab.models import video
from jaxlab.objectives import video_lm  # pylint: disable=unused-import
from jaxlab.train import runner

_MODEL_CFG = {
    "name": "video", "dim": 32, "num_layers": 1, "num_heads": 2,
    "num_kv_heads": 1, "mlp_dim": 64, "vocab_size": 40,
    "max_position_embeddings": 64,
    "vit": {"image_size": 8, "patch_size": 4, "channels": 3, "dim": 16,
            "num_layers": 1, "num_heads": 2, "mlp_dim": 32},
    "video": {"num_frames": 3, "frame_pooling": "mean", "temporal_layers": 1,
              "temporal_heads": 2, "temporal_mlp_dim": 32},
}


def _frames(b: int, seed: int = 0, f: int = 3) -> np.ndarray:
  return np.random.default_rng(seed).uniform(size=(b, f, 8, 8, 3)).astype(
      np.float32)


class VideoLMTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    spec = registry.get_spec(_MODEL_CFG, seed=0)
    cls.cfg = spec.config
    cls.model = spec.factory()

  def test_prefix_path_equals_decoder_on_hand_built_embeddings(self):
    m, cfg = self.model, self.cfg
    frames = _frames(2)
    ids = np.array([[5, 6, 7, 8], [9, 10, 11, 0]], np.int32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    got = m.forward(jnp.asarray(ids), jnp.asarray(mask),
                    prefix_inputs=jnp.asarray(frames)).logits
    # By hand: ViT per frame, mean over patches, + temporal row, blocks,
    # norm; then [prefix; token embeddings] through the decoder with
    # positions 0..F-1, F.. over the real tokens.
    per_frame = [m.vit(jnp.asarray(frames[:, f])).mean(axis=1)
                 for f in range(cfg.num_frames)]
    x = jnp.stack(per_frame, axis=1) + m.temporal_pos_fd[...][None]
    for block in m.temporal:
      x = block(x)
    prefix = m.temporal_norm(x)
    self.assertEqual(prefix.shape, (2, cfg.num_prefix, 32))
    np.testing.assert_allclose(m.prefix_embeds(jnp.asarray(frames)), prefix,
                               rtol=1e-5, atol=1e-6)
    h = jnp.concatenate([prefix, m.decoder.embed(jnp.asarray(ids))], axis=1)
    full_mask = np.concatenate([np.ones((2, 3), bool), mask], axis=1)
    positions = np.array([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 5]])
    want = m.decoder.forward(inputs_embeds=h,
                             attention_mask=jnp.asarray(full_mask),
                             positions=jnp.asarray(positions)).logits[:, 3:]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1, :3], want[1, :3], rtol=1e-5, atol=1e-5)
    # The frames matter: other frames, other logits.
    other = m(jnp.asarray(_frames(2, seed=1)), jnp.asarray(ids))
    self.assertGreater(float(jnp.abs(other - got).max()), 1e-4)

  def test_sampler_greedy_equals_full_recompute_argmax(self):
    m = self.model
    frames = _frames(2, seed=2)
    prompts = [[5, 6, 7], [9, 10]]        # ragged: the sampler left-pads
    result = m.generate(frames, prompts, max_new_tokens=3)
    for row, prompt in enumerate(prompts):
      seq = list(prompt)
      for _ in range(3):
        logits = m(jnp.asarray(frames[row:row + 1]),
                   jnp.asarray([seq], jnp.int32))
        seq.append(int(jnp.argmax(logits[0, -1])))
      self.assertEqual(result.tokens[row], seq[len(prompt):])

  def test_trainer_step_sharded_on_8_devices_equals_one_device(self):
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    rng = np.random.default_rng(3)
    batch = {"frames": _frames(8, seed=3),
             "inputs": rng.integers(3, 40, (8, 6)).astype(np.int32),
             "targets": rng.integers(3, 40, (8, 6)).astype(np.int32),
             "loss_mask": np.tile([0, 0, 0, 1, 1, 0], (8, 1)).astype(
                 np.float32)}
    optim = runner.optim_config(lr=1e-2)
    outs = []
    for mesh in (None, parallel.make_mesh({"data": 8, "fsdp": 1,
                                           "tensor": 1})):
      model = registry.get_spec(_MODEL_CFG, seed=0).factory()
      r = runner.StepRunner(model, loss="video_lm", loss_config=None,
                            optim=optim, steps=2, seed=0, mesh=mesh)
      m1 = r.step(batch, 0)
      m2 = r.step(batch, 1)
      outs.append((m1, m2, nnx.state(r.model(), nnx.Param)))
    (a1, a2, sa), (b1, b2, sb) = outs
    self.assertAlmostEqual(a1["loss"], b1["loss"], places=5)
    self.assertAlmostEqual(a2["loss"], b2["loss"], places=5)
    self.assertLess(a2["loss"], a1["loss"])   # the update trains
    self.assertAlmostEqual(a1["tokens"], 16.0)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(
        np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6), sa, sb)

  def test_errors_name_the_field(self):
    with self.assertRaisesRegex(ValueError, r"frames must be \[B, 3, 8, 8, 3"):
      self.model.prefix_embeds(jnp.zeros((1, 2, 8, 8, 3)))
    with self.assertRaisesRegex(ValueError, "model.video.fps is not"):
      video.config_from_dict({**_MODEL_CFG, "video": {"fps": 1}})
    with self.assertRaisesRegex(ValueError, "model.vit.depth is not"):
      video.config_from_dict({**_MODEL_CFG, "vit": {"depth": 1}})
    with self.assertRaisesRegex(ValueError, "frame_pooling='max'"):
      video.config_from_dict({**_MODEL_CFG, "video": {"frame_pooling":
                                                      "max"}})
    with self.assertRaisesRegex(ValueError, "out_dim=16 must equal"):
      video.config_from_dict({**_MODEL_CFG, "vit": {"out_dim": 16}})
    with self.assertRaisesRegex(ValueError, "exactly one of prefix_inputs"):
      self.model.forward(jnp.zeros((1, 2), jnp.int32))
    with self.assertRaisesRegex(ValueError, "2 clips for 1 prompts"):
      self.model.generate(_frames(2), [[5]], max_new_tokens=1)


if __name__ == "__main__":
  absltest.main()
