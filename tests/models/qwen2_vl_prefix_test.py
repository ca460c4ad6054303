"""Qwen2VLPrefixLM: the prefix-LM protocol on Qwen2.5-VL, against the full
model on the Qwen token layout, the host processor and transformers."""

import shutil
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.data import vision_processor
from jaxlab.io import hf
from jaxlab.models import registry
from jaxlab.nn import partitioning as pt
from jaxlab.objectives import video_lm  # pylint: disable=unused-import
from jaxlab.testing import hf_fixtures
from jaxlab.train import lora as lora_lib
from jaxlab.train import runner as runner_lib

torch = None
transformers = None
try:  # reference implementation (CPU torch)
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover
  pass

V = 20  # the task vocabulary; the model's has V + 4 ids
EPS = float(np.finfo(np.float32).eps)


def _tol(ref) -> float:
  """float32 rounding of a 2-layer network (inner dims <= 64, ~2^8
  roundings along the longest path) times the output scale."""
  return 2 ** 8 * EPS * max(1.0, float(np.abs(ref).max()))


def _model_cfg(**prefix):
  return dict(
      name="qwen2_5_vl_prefix", dim=32, num_layers=2, num_heads=2,
      num_kv_heads=1, mlp_dim=64, max_position_embeddings=128,
      vision=dict(depth=2, hidden_size=16, intermediate_size=32,
                  num_heads=2, patch_size=4, window_size=16,
                  fullatt_block_indexes=(1,)),
      prefix=prefix)


def _full_row_logits(model, ids, x, attention_mask=None):
  """`Qwen2VL.forward` on [vision start, pads, vision end, ids] with the
  item's patches: what transformers computes for that prompt."""
  b = ids.shape[0]
  head = np.broadcast_to(np.array(model.prefix_ids), (b, model.num_prefix))
  full = np.concatenate([head, ids], 1)
  mask = None if attention_mask is None else np.concatenate(
      [np.ones_like(head), attention_mask], 1)
  pv = np.asarray(model.pixel_values(jnp.asarray(x)))
  grids = np.array([model.grid] * b)
  kw = (dict(pixel_values=pv, image_grid_thw=grids)
        if model.prefix.kind == "image" else
        dict(pixel_values_videos=pv, video_grid_thw=grids,
             second_per_grid_ts=[model.prefix.seconds_per_grid] * b))
  # Jitted with the ids as constants (rope_index runs on them at trace).
  logits = jax.jit(lambda: model.vl.forward(full, attention_mask=mask,
                                            **kw).logits)()
  return np.asarray(logits)[:, model.num_prefix:], full, kw


class Qwen2VLPrefixTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hf_fixtures.inductor_cleanup()
    cls.rng = np.random.default_rng(0)
    cls.image = registry.get_spec(_model_cfg(kind="image", image_size=16),
                                  vocab_size=V, seed=0).factory()
    cls.video = registry.get_spec(
        _model_cfg(kind="video", image_size=16, num_frames=3,
                   seconds_per_grid=1.5), vocab_size=V, seed=1).factory()

  @classmethod
  def tearDownClass(cls):
    cls.cleanup()
    super().tearDownClass()

  def test_layout_and_vocabulary(self):
    m = self.image
    # 16 x 16 pixels, patch 4: a 4 x 4 grid, 2 x 2 merged -> 4 tokens.
    self.assertEqual((m.grid, m.num_vision), ((1, 4, 4), 4))
    self.assertEqual(m.prefix_ids, (V, V + 2, V + 2, V + 2, V + 2, V + 1))
    self.assertEqual(m.cfg.text.vocab_size, V + 4)
    # 3 frames -> padded to 4 -> 2 temporal patches.
    self.assertEqual(self.video.grid, (2, 4, 4))
    self.assertEqual(self.video.prefix_ids[1], V + 3)
    # Image rows: vision start 0, the 2 x 2 tokens at 1 + (0, h, w), the
    # vision end at 1 + max(h, w) = 3, text from 4.
    pos = m.positions_3bt(1, 2)[:, 0]
    np.testing.assert_array_equal(pos, [[0, 1, 1, 1, 1, 3, 4, 5],
                                        [0, 1, 1, 2, 2, 3, 4, 5],
                                        [0, 1, 2, 1, 2, 3, 4, 5]])
    # Video: temporal patch 1 at floor(1 * tokens_per_second 4 * 1.5) + 1.
    vpos = self.video.positions_3bt(1, 1)[:, 0]
    self.assertEqual(vpos[0, 5], 7)

  def test_forward_is_qwen2vl_on_the_qwen_layout(self):
    """Images with right padding, and clips: the prefix LM's logits of the
    ids equal the full model's on the whole row, cut to the task vocab."""
    for model, shape in ((self.image, (3, 16, 16, 3)),
                         (self.video, (2, 3, 16, 16, 3))):
      b = shape[0]
      x = self.rng.uniform(size=shape).astype(np.float32)
      ids = self.rng.integers(0, V, (b, 6))
      mask = np.ones((b, 6), np.int32)
      mask[0, 4:] = 0
      ours = np.asarray(jax.jit(
          lambda i, m, x, model=model: model.forward(
              i, m, prefix_inputs=x).logits)(ids, mask, x))
      ref, _, _ = _full_row_logits(model, ids, x, mask)
      self.assertEqual(ours.shape, (b, 6, V))
      np.testing.assert_allclose(ours[mask == 1], ref[mask == 1][:, :V],
                                 rtol=0, atol=_tol(ref))

  def test_chunked_prefix_loss_equals_the_plain_one(self):
    """`prefix_lm_nll` with `chunk_size` (the paper presets' vocabulary-
    chunked head over the text positions) == over full logits, value and
    gradient, with a chunk (5) that does not divide the B*(T-1) = 15 rows."""
    import ml_collections  # pylint: disable=g-import-not-at-top
    from flax import nnx  # pylint: disable=g-import-not-at-top
    from jaxlab.objectives import prefix_lm as prefix_lm_loss  # pylint: disable=g-import-not-at-top
    model = self.image
    batch = {"images": jnp.asarray(self.rng.uniform(
                 size=(3, 16, 16, 3)).astype(np.float32)),
             "ids": jnp.asarray(self.rng.integers(0, V, (3, 6)), jnp.int32),
             "mask": jnp.asarray(np.tile([0, 1, 1, 1, 1, 0], (3, 1)),
                                 jnp.float32)}

    def loss(m, chunk):
      cfg = ml_collections.ConfigDict({"chunk_size": chunk})
      return prefix_lm_loss.prefix_lm_nll(m, batch, config=cfg)[0]

    # Jitted (op-by-op, the backward pass of the tower and LM took ~20 s):
    # both sides are still float32 rounding of the same ops, so the same
    # bound (_tol) holds.
    plain, g_plain = nnx.jit(nnx.value_and_grad(lambda m: loss(m, 0)))(model)
    chunked, g_chunked = nnx.jit(nnx.value_and_grad(lambda m: loss(m, 5)))(
        model)
    np.testing.assert_allclose(chunked, plain, rtol=2 ** 8 * EPS)
    for (path, a), (_, b) in zip(nnx.to_flat_state(g_plain),
                                 nnx.to_flat_state(g_chunked)):
      a, b = np.asarray(a.get_value()), np.asarray(b.get_value())
      np.testing.assert_allclose(b, a, rtol=0, atol=_tol(a),
                                 err_msg=str(path))

  def test_sharded_tower_equals_unsharded(self):
    """Under a mesh whose batch axes (data x fsdp = 4) divide the batch,
    the tower runs vmapped with the items pinned to their batch shard
    (`spmd_axis_name`): logits equal the run without a mesh."""
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    from jaxlab import parallel  # pylint: disable=g-import-not-at-top
    model = self.image
    x = self.rng.uniform(size=(4, 16, 16, 3)).astype(np.float32)
    ids = self.rng.integers(0, V, (4, 6))
    fwd = lambda i, x: model.forward(i, prefix_inputs=x).logits
    want = np.asarray(jax.jit(fwd)(ids, x))
    mesh = jax.make_mesh((1, 4, 2), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    with jax.set_mesh(mesh), nnx.logical_axis_rules(parallel.DEFAULT_RULES):
      self.assertEqual(pt.batch_mesh_axes(4), ("data", "fsdp"))
      self.assertIsNone(pt.batch_mesh_axes(6))
      row = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
          ("data", "fsdp")))
      got = jax.jit(fwd)(jax.device_put(ids, row), jax.device_put(x, row))
    np.testing.assert_allclose(np.asarray(got), want, rtol=0,
                               atol=_tol(want))

  def test_pixel_values_match_the_host_processor(self):
    """The device normalisation + patchify equals the Qwen2-VL image
    processor (`data.vision_processor`, bit-exact vs transformers) on uint8
    images at a size it keeps."""
    imgs = self.rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    proc = vision_processor.QwenVLProcessor(
        patch_size=4, merge_size=2, min_pixels=16, max_pixels=16 * 16)
    want, grid = proc.images(list(imgs))
    np.testing.assert_array_equal(grid, [(1, 4, 4)] * 2)
    got = np.asarray(self.image.pixel_values(
        jnp.asarray(imgs.astype(np.float64) / 255.0, jnp.float32)))
    # |x| <= 1 / 0.26 ~ 3.8: a few float32 roundings of that scale.
    np.testing.assert_allclose(got, want, rtol=0, atol=8 * 4 * EPS)

  def test_greedy_generation_equals_teacher_forced_argmax(self):
    """Ragged prompts (left-padded by the sampler), KV-cached decoding at
    M-RoPE text positions: every greedy token is the argmax of the prefix
    LM's forward over prompt + the tokens before it."""
    for model, shape in ((self.image, (2, 16, 16, 3)),
                         (self.video, (2, 3, 16, 16, 3))):
      x = self.rng.uniform(size=shape).astype(np.float32)
      prompts = [[3, 4, 5, 6], [7, 8]]
      res = model.generate(x, prompts, max_new_tokens=4)
      forward = jax.jit(lambda s, m, x, model=model: model.forward(
          s, m, prefix_inputs=x).logits)
      # Right-padded teacher-forced rows: [prompt; tokens; pad].
      seq = np.zeros((2, 8), np.int32)
      mask = np.zeros((2, 8), np.int32)
      for i, (p, toks) in enumerate(zip(prompts, res.tokens)):
        self.assertLen(toks, 4)
        self.assertTrue(all(0 <= t < V for t in toks))
        seq[i, :len(p) + 4] = p + toks
        mask[i, :len(p) + 4] = 1
      logits = np.asarray(forward(seq, mask, x))
      for i, (p, toks) in enumerate(zip(prompts, res.tokens)):
        np.testing.assert_array_equal(
            np.argmax(logits[i, len(p) - 1:len(p) + 3], -1), toks)

  def test_bad_inputs_raise(self):
    with self.assertRaisesRegex(ValueError, r"\[B, 16, 16, 3\]"):
      self.image.pixel_values(jnp.zeros((1, 8, 8, 3)))
    with self.assertRaisesRegex(ValueError, "multiples of"):
      registry.get_spec(_model_cfg(kind="image", image_size=12),
                        vocab_size=V).factory()
    with self.assertRaisesRegex(ValueError, "kind"):
      registry.get_spec(_model_cfg(kind="audio"), vocab_size=V)

  @absltest.skipIf(transformers is None, "needs torch + transformers")
  def test_lora_finetune_by_the_trainer_exports_to_transformers(self):
    """The trainer's step (`video_lm` loss, LoRA on the language model)
    fine-tunes the video prefix LM; `hf.save(model.vl)` merges the factors
    into the weights it writes, and transformers' Qwen2_5_VLForConditionalGeneration gives the
    tuned model's logits on the Qwen layout."""
    model = registry.get_spec(
        _model_cfg(kind="video", image_size=16, num_frames=3,
                   seconds_per_grid=1.5), vocab_size=V, seed=1).factory()
    b, t = 4, 6
    frames = self.rng.uniform(size=(b, 3, 16, 16, 3)).astype(np.float32)
    ids = self.rng.integers(0, V, (b, t + 1))
    batch = dict(frames=frames, inputs=ids[:, :-1], targets=ids[:, 1:],
                 loss_mask=np.ones((b, t), np.float32))
    base, full, kw = _full_row_logits(model, batch["inputs"], frames)
    optim = runner_lib.optim_config(lr=5e-2, warmup_steps=0,
                                    schedule="constant", weight_decay=0.0)
    run = runner_lib.StepRunner(
        model, loss="video_lm", loss_config=None, optim=optim, steps=3,
        lora=dict(rank=2, alpha=4.0, targets=("q_dnh", "v_dkh", "up_df")))
    losses = [run.step(batch, s)["loss"] for s in range(3)]
    self.assertLess(losses[-1], losses[0])
    tuned = run.model()  # LoRA factors unmerged
    merged = lora_lib.merge_lora(nnx.clone(tuned))
    ours = np.asarray(jax.jit(lambda: merged.forward(
        batch["inputs"], prefix_inputs=frames).logits)())
    # The fine-tune moved the function well beyond the tolerance.
    self.assertGreater(np.abs(ours - base[..., :V]).max(), 100 * _tol(ours))
    d = tempfile.mkdtemp()
    try:
      hf.save(tuned.vl, tuned.cfg, d)
      ref = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
          d, attn_implementation="eager").eval()
    finally:
      shutil.rmtree(d, ignore_errors=True)
    tt = np.where(full == model.cfg.video_token_id, 2, 0)
    with torch.no_grad():
      theirs = ref(
          input_ids=torch.tensor(full), mm_token_type_ids=torch.tensor(tt),
          pixel_values_videos=torch.tensor(kw["pixel_values_videos"]),
          video_grid_thw=torch.tensor(kw["video_grid_thw"]),
          second_per_grid_ts=torch.tensor(kw["second_per_grid_ts"])
      ).logits.numpy()[:, model.num_prefix:, :V]
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=_tol(ours))


if __name__ == "__main__":
  absltest.main()
