"""Video LM: the prefix path against the decoder run by hand, the sampler's
greedy decode against a full-recompute argmax loop, frame batches sharded
over 8 devices against one device, and the errors. (Training through the
generic trainer's step is exercised by tests/colabs/vudg_colab_test.py.)"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.models import registry
from jaxlab.models import video

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


def _build(seed: int = 0):
  """(config, model) built by name, under jit (one compile, not op by op)."""
  spec = registry.get_spec(_MODEL_CFG, seed=seed)
  return spec.config, nnx.jit(spec.factory)()


class VideoLMTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cfg, cls.model = _build()

  def test_prefix_path_equals_decoder_on_hand_built_embeddings(self):
    m, cfg = self.model, self.cfg
    frames = jnp.asarray(np.concatenate([_frames(2), _frames(2, seed=1)]))
    ids = jnp.asarray([[5, 6, 7, 8], [9, 10, 11, 0]] * 2, jnp.int32)
    mask = jnp.asarray([[1, 1, 1, 1], [1, 1, 1, 0]] * 2, bool)
    positions = jnp.asarray([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 5]] * 2)

    @nnx.jit
    def both_paths(m, frames, ids, mask):
      got = m.forward(ids, mask, prefix_inputs=frames).logits
      # By hand: ViT per frame, mean over patches, + temporal row, blocks,
      # norm; then [prefix; token embeddings] through the decoder with
      # positions 0..F-1, F.. over the real tokens.
      per_frame = [m.vit(frames[:, f]).mean(axis=1)
                   for f in range(cfg.num_frames)]
      x = jnp.stack(per_frame, axis=1) + m.temporal_pos_fd[...][None]
      for block in m.temporal:
        x = block(x)
      prefix = m.temporal_norm(x)
      h = jnp.concatenate([prefix, m.decoder.embed(ids)], axis=1)
      full_mask = jnp.concatenate([jnp.ones((4, 3), bool), mask], axis=1)
      want = m.decoder.forward(inputs_embeds=h, attention_mask=full_mask,
                               positions=positions).logits[:, 3:]
      return got, want, prefix, m.prefix_embeds(frames)

    got, want, prefix, prefix_model = both_paths(m, frames, ids, mask)
    self.assertEqual(prefix.shape, (4, cfg.num_prefix, 32))
    np.testing.assert_allclose(prefix_model, prefix, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0::2], want[0::2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1::2, :3], want[1::2, :3], rtol=1e-5,
                               atol=1e-5)
    # The frames matter: other frames (rows 2, 3), other logits.
    self.assertGreater(float(jnp.abs(got[2:] - got[:2]).max()), 1e-4)

  def test_sampler_greedy_equals_full_recompute_argmax(self):
    m = self.model
    frames = _frames(2, seed=2)
    prompts = [[5, 6, 7], [9, 10]]        # ragged: the sampler left-pads
    n_new, width = 3, 6
    result = m.generate(frames, prompts, max_new_tokens=n_new)
    # Full recompute without a cache: right-padded rows of a fixed width
    # (one compile), the next token read at each row's last real token.
    step = nnx.jit(lambda m, f, ids, mask: m(f, ids, mask))
    seqs = [list(p) for p in prompts]
    for _ in range(n_new):
      ids = np.zeros((2, width), np.int32)
      mask = np.zeros((2, width), bool)
      for r, s in enumerate(seqs):
        ids[r, :len(s)], mask[r, :len(s)] = s, True
      logits = np.asarray(step(m, jnp.asarray(frames), jnp.asarray(ids),
                               jnp.asarray(mask)))
      for r, s in enumerate(seqs):
        s.append(int(np.argmax(logits[r, len(s) - 1])))
    for r, p in enumerate(prompts):
      self.assertEqual(result.tokens[r], seqs[r][len(p):])

  def test_frames_sharded_on_8_devices_equal_unsharded(self):
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    frames = jnp.asarray(_frames(8, seed=3))
    mesh = parallel.make_mesh({"data": 8, "fsdp": 1, "tensor": 1})
    sharded = jax.device_put(frames, parallel.batch_sharding(mesh))
    self.assertLen(sharded.sharding.device_set, 8)
    got = video.encode_prefix(self.model, sharded)   # rows 1 per device
    want = video.encode_prefix(self.model, frames)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

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
