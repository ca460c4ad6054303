"""Decoder extension points: attention probabilities (parity with
transformers' eager `output_attentions`), per-call `causal`, and
`allowed_mask` that grants attention (restart-at-0 positions in NoPE)."""

import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.io import hf
from jaxlab.models import decoder as decoder_lib
from jaxlab.testing import hf_fixtures as hfx

VOCAB = 97
ARCHS = {
    "llama_gqa2": dict(arch="llama", num_kv_heads=2),
    "qwen2_gqa4_bias": dict(arch="qwen2", num_kv_heads=1, rope_theta=1e6),
}


def _padded_batch(seed=0):
  """Two rows of 9 slots: a full row and one left-padded by 3."""
  ids = np.random.RandomState(seed).randint(1, VOCAB, (2, 9)).astype(np.int32)
  mask = np.ones((2, 9), bool)
  mask[1, :3] = False
  ids[1, :3] = 0
  return ids, mask


class AttentionsMatchTransformersTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.models = {}
    for name, kw in ARCHS.items():
      path, hf_model = hfx.make_hf_checkpoint(
          os.path.join(cls.root, name), return_model=True, seed=2,
          vocab_size=VOCAB, **kw)
      model, _ = hf.load(path)
      cls.models[name] = (model, hf_model)

  @parameterized.named_parameters(*[(n, n) for n in ARCHS])
  def test_left_padded(self, name):
    model, hf_model = self.models[name]
    ids, mask = _padded_batch()
    out = model.forward(jnp.asarray(ids), attention_mask=jnp.asarray(mask),
                        output_attentions=True)
    ref = hfx.hf_forward(hf_model, ids, mask,
                         position_ids_bt=hfx.hf_positions(mask),
                         output_attentions=True)
    self.assertLen(out.attentions, 2)
    for ours, theirs in zip(out.attentions, ref.attentions):
      chex.assert_shape(ours, (2, 4, 9, 9))
      self.assertEqual(ours.dtype, jnp.float32)
      theirs = theirs.numpy()
      ours = np.asarray(ours)
      # Padded query rows are arbitrary in both; compare real rows only.
      for b in range(2):
        np.testing.assert_allclose(ours[b][:, mask[b]], theirs[b][:, mask[b]],
                                   atol=1e-5)
      np.testing.assert_array_equal(ours[1][:, 3:, :3], 0.0)  # pad keys
      # Not trivially uniform: the probabilities really vary.
      self.assertGreater(np.abs(np.diff(ours[0, :, -1], axis=-1)).max(), 0.05)
    # The explicit path does not change the logits of the fused path.
    plain = model(jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    np.testing.assert_allclose(out.logits, plain, atol=1e-5)

  @parameterized.named_parameters(*[(n, n) for n in ARCHS])
  def test_with_cache(self, name):
    model, hf_model = self.models[name]
    ids, mask = _padded_batch(seed=1)
    prompt, nxt = ids[:, :8], ids[:, 8:]
    pmask = mask[:, :8]
    cache = model.init_cache(2, 12)
    pre = model.forward(jnp.asarray(prompt), attention_mask=jnp.asarray(pmask),
                        cache=cache, output_attentions=True)
    step = model.forward(jnp.asarray(nxt), cache=pre.cache,
                         output_attentions=True)
    pos = hfx.hf_positions(pmask)
    ref_pre = hfx.hf_forward(hf_model, prompt, pmask, position_ids_bt=pos,
                             output_attentions=True, use_cache=True)
    ref_step = hfx.hf_forward(
        hf_model, nxt, mask, position_ids_bt=pos[:, -1:] + 1,
        past_key_values=ref_pre.past_key_values, output_attentions=True)
    for ours, theirs in zip(pre.attentions, ref_pre.attentions):
      chex.assert_shape(ours, (2, 4, 8, 12))  # over the 12 cache slots
      ours, theirs = np.asarray(ours), theirs.numpy()
      np.testing.assert_array_equal(ours[..., 8:], 0.0)  # empty slots
      for b in range(2):
        np.testing.assert_allclose(ours[b][:, pmask[b], :8],
                                   theirs[b][:, pmask[b]], atol=1e-5)
    for ours, theirs in zip(step.attentions, ref_step.attentions):
      chex.assert_shape(ours, (2, 4, 1, 12))
      ours = np.asarray(ours)
      np.testing.assert_allclose(ours[..., :9], theirs.numpy(), atol=1e-5)
      np.testing.assert_array_equal(ours[..., 9:], 0.0)
    np.testing.assert_allclose(step.logits, ref_step.logits.numpy(),
                               atol=1e-4)


def _nope_model(**kw):
  cfg = decoder_lib.DecoderConfig(**{**dict(
      vocab_size=64, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
      mlp_dim=64, init_std=0.3, nope_layers=(0, 1)), **kw})
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))


class AllowedMaskTest(absltest.TestCase):

  def test_restart_at_zero_equals_contiguous_in_nope(self):
    # StreamingThinker-style layout: two segments of 4 whose position ids
    # restart at 0, attending causally across segments by an allowed_mask.
    model = _nope_model()
    ids = jax.random.randint(jax.random.key(0), (2, 8), 0, 64)
    contiguous = jnp.broadcast_to(jnp.arange(8), (2, 8))
    restart = jnp.broadcast_to(jnp.tile(jnp.arange(4), 2), (2, 8))
    tril = jnp.tril(jnp.ones((8, 8), bool))[None, None]
    ref = model(ids, positions=contiguous)
    got = model(ids, positions=restart, allowed_mask=tril)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # Without the allowed_mask the restarted ids change what is attended.
    wrong = model(ids, positions=restart)
    self.assertGreater(float(jnp.abs(wrong[:, 4:] - ref[:, 4:]).max()), 1e-3)
    # Attention probabilities agree too (explicit path).
    a = model.forward(ids, positions=restart, allowed_mask=tril,
                      output_attentions=True).attentions
    b = model.forward(ids, positions=contiguous,
                      output_attentions=True).attentions
    chex.assert_trees_all_close(a, b, atol=1e-6)

  def test_restart_at_zero_cache_path(self):
    model = _nope_model()
    ids = jax.random.randint(jax.random.key(1), (2, 8), 0, 64)
    ref = model(ids)
    s = 10
    cache = model.init_cache(2, s)
    out = model.forward(ids[:, :4], positions=jnp.broadcast_to(
        jnp.arange(4), (2, 4)), cache=cache)
    cache, steps = out.cache, [out.logits]
    for t in range(4, 8):
      # Slots 0..t hold the tokens so far; the position id restarts.
      allowed = (jnp.arange(s) <= t)[None, None, None, :]
      out = model.forward(ids[:, t:t + 1],
                          positions=jnp.full((2, 1), t - 4), cache=cache,
                          allowed_mask=allowed)
      cache = out.cache
      steps.append(out.logits)
    np.testing.assert_array_equal(cache.positions[0, 0, :8],
                                  [0, 1, 2, 3, 0, 1, 2, 3])
    np.testing.assert_allclose(jnp.concatenate(steps, 1), ref, atol=1e-5)

  def test_allowed_mask_keeps_padding_denied_and_extra_mask_anded(self):
    model = _nope_model()
    ids = jax.random.randint(jax.random.key(2), (1, 5), 0, 64)
    valid = jnp.asarray([[False, True, True, True, True]])
    everything = jnp.ones((1, 1, 5, 5), bool)
    # Bidirectional via allowed_mask equals causal=False; padding stays out.
    got = model.forward(ids, attention_mask=valid, allowed_mask=everything,
                        output_attentions=True)
    bidir = model.forward(ids, attention_mask=valid, causal=False,
                          output_attentions=True)
    np.testing.assert_allclose(got.logits, bidir.logits, atol=1e-6)
    np.testing.assert_array_equal(got.attentions[0][0, :, 1:, 0], 0.0)
    self.assertGreater(float(got.attentions[0][0, 0, 1, 4]), 0.0)
    # extra_mask still only denies.
    no_last = jnp.ones((1, 1, 5, 5), bool).at[..., 4].set(False)
    masked = model.forward(ids, attention_mask=valid,
                           allowed_mask=everything, extra_mask=no_last,
                           output_attentions=True)
    np.testing.assert_array_equal(masked.attentions[1][..., 4], 0.0)


class CausalOverrideTest(absltest.TestCase):

  def test_per_call_causal(self):
    cfg = decoder_lib.DecoderConfig(vocab_size=64, dim=32, num_layers=2,
                                    num_heads=4, num_kv_heads=2, mlp_dim=64,
                                    init_std=0.3)
    causal_model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    bidir_model = decoder_lib.Decoder(cfg.replace(causal=False),
                                      rngs=nnx.Rngs(0))
    ids = jax.random.randint(jax.random.key(0), (2, 6), 0, 64)
    np.testing.assert_allclose(causal_model(ids, causal=False),
                               bidir_model(ids), atol=1e-6)
    np.testing.assert_allclose(bidir_model(ids, causal=True),
                               causal_model(ids), atol=1e-6)
    self.assertGreater(
        float(jnp.abs(causal_model(ids) - bidir_model(ids)).max()), 1e-3)


if __name__ == "__main__":
  absltest.main()
