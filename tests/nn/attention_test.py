"""make_attention_mask and grouped-query Attention against NumPy."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn import attention
from jaxlab.nn import rope


def _pos(*rows):
  return jnp.asarray(rows, jnp.int32)


class MakeAttentionMaskTest(parameterized.TestCase):

  def test_causal_is_lower_triangular(self):
    p = _pos([0, 1, 2, 3])
    m = attention.make_attention_mask(p, p)
    chex.assert_shape(m, (1, 1, 4, 4))
    np.testing.assert_array_equal(m[0, 0], np.tril(np.ones((4, 4), bool)))

  def test_bidirectional_sees_all(self):
    p = _pos([0, 1, 2])
    m = attention.make_attention_mask(p, p, causal=False)
    np.testing.assert_array_equal(m[0, 0], np.ones((3, 3), bool))

  def test_padding_masks_keys(self):
    p = _pos([0, 0, 1, 2], [0, 1, 2, 3])  # row 0 left-padded by one
    valid = jnp.asarray([[0, 1, 1, 1], [1, 1, 1, 1]], bool)
    m = attention.make_attention_mask(p, p, key_valid_bs=valid)
    # Masking follows position ids: the pad query (position 0) still sees
    # the real position-0 key, so no row is empty (no NaN softmax).
    expected0 = np.array([[0, 1, 0, 0],
                          [0, 1, 0, 0],
                          [0, 1, 1, 0],
                          [0, 1, 1, 1]], bool)
    np.testing.assert_array_equal(m[0, 0], expected0)
    np.testing.assert_array_equal(m[1, 0], np.tril(np.ones((4, 4), bool)))

  def test_sliding_window(self):
    p = _pos([0, 1, 2, 3, 4])
    m = attention.make_attention_mask(p, p, sliding_window=2)
    i, j = np.meshgrid(np.arange(5), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(m[0, 0], (j <= i) & (i - j < 2))
    mb = attention.make_attention_mask(p, p, causal=False, sliding_window=2)
    np.testing.assert_array_equal(mb[0, 0], i - j < 2)

  def test_segment_ids(self):
    p = _pos([0, 1, 2, 0, 1])
    seg = jnp.asarray([[1, 1, 1, 2, 2]])
    m = attention.make_attention_mask(p, p, q_segment_ids_bt=seg,
                                      k_segment_ids_bs=seg)
    expected = np.zeros((5, 5), bool)
    expected[:3, :3] = np.tril(np.ones((3, 3), bool))
    expected[3:, 3:] = np.tril(np.ones((2, 2), bool))
    np.testing.assert_array_equal(m[0, 0], expected)
    with self.assertRaisesRegex(ValueError, "segment ids"):
      attention.make_attention_mask(p, p, q_segment_ids_bt=seg)

  def test_extra_mask_per_head_and_empty_cache_slots(self):
    q = _pos([2])
    k = _pos([0, 1, 2, -1])  # slot 3 empty
    extra = jnp.asarray([[[[1, 0, 1, 1]], [[1, 1, 1, 1]]]], bool)  # [1,2,1,4]
    m = attention.make_attention_mask(q, k, extra_mask=extra)
    chex.assert_shape(m, (1, 2, 1, 4))
    np.testing.assert_array_equal(m[0, 0, 0], [1, 0, 1, 0])
    np.testing.assert_array_equal(m[0, 1, 0], [1, 1, 1, 0])

  def test_allowed_mask_replaces_position_rule(self):
    q = _pos([0, 1, 0])  # ids restart at 0
    k = _pos([0, 1, 0, -1])  # slot 3 empty
    grant = jnp.ones((1, 1, 3, 4), bool)
    m = attention.make_attention_mask(q, k, allowed_mask=grant,
                                      sliding_window=1,
                                      key_valid_bs=_pos([1, 1, 1, 1]) > 0)
    # Everything granted except the empty slot; causal/window ignored.
    np.testing.assert_array_equal(m[0, 0], np.tile([1, 1, 1, 0], (3, 1)))
    # Without it, position ids decide: query 2 (id 0) sees only id-0 keys.
    m = attention.make_attention_mask(q, k)
    np.testing.assert_array_equal(m[0, 0, 2], [1, 0, 1, 0])
    # extra_mask still denies on top of a grant.
    m = attention.make_attention_mask(
        q, k, allowed_mask=grant,
        extra_mask=jnp.asarray([1, 0, 1, 1], bool)[None, None, None])
    np.testing.assert_array_equal(m[0, 0, 0], [1, 0, 1, 0])

  def test_per_kv_head_positions_expand_by_group(self):
    q = _pos([3])
    # KV head 0 keeps slots at positions 0..3, head 1 evicted position 1.
    k = jnp.asarray([[[0, 1, 2, 3], [0, -1, 2, 3]]], jnp.int32)
    m = attention.make_attention_mask(q, k, num_heads=4)
    chex.assert_shape(m, (1, 4, 1, 4))
    want = [[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 1, 1]]
    np.testing.assert_array_equal(m[0, :, 0], want)
    np.testing.assert_array_equal(
        attention.expand_kv_heads(jnp.asarray(want, bool)[None, ::2, None],
                                  4)[0, :, 0], want)


def np_rope(x_btnh, positions_bt, base):
  """Pairwise rotation of dims (i, i + H/2) by angle pos * base^(-2i/H)."""
  h = x_btnh.shape[-1]
  half = h // 2
  theta = base ** (-2.0 * np.arange(half) / h)
  ang = positions_bt[:, :, None, None] * theta  # [B,T,1,half]
  c, s = np.cos(ang), np.sin(ang)
  x1, x2 = x_btnh[..., :half], x_btnh[..., half:]
  return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def np_gqa_attention(x, wq, wk, wv, wo, bq, bk, bv, positions, mask, base):
  """Reference GQA: query head n reads KV head n // (N / K)."""
  q = np.einsum("btd,dnh->btnh", x, wq) + bq
  k = np.einsum("btd,dkh->btkh", x, wk) + bk
  v = np.einsum("btd,dkh->btkh", x, wv) + bv
  q, k = np_rope(q, positions, base), np_rope(k, positions, base)
  n, kh = q.shape[2], k.shape[2]
  k = np.repeat(k, n // kh, axis=2)
  v = np.repeat(v, n // kh, axis=2)
  logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
  logits = np.where(mask, logits, -1e30)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w = w / w.sum(-1, keepdims=True)
  out = np.einsum("bnts,bsnh->btnh", w, v)
  return np.einsum("btnh,nhd->btd", out, wo)


class AttentionTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("gqa2_bias", 4, 2, True, True),
      ("mqa", 4, 1, False, True),
      ("mha_bidirectional", 2, 2, True, False),
  )
  def test_matches_numpy_reference(self, n, k, bias, causal):
    d, h, b, t, base = 16, 8, 2, 6, 500.0
    attn = attention.Attention(d, n, k, h, rngs=nnx.Rngs(0), qkv_bias=bias,
                               init_std=0.3)
    rng = np.random.RandomState(0)
    if bias:
      for name in ("q_bias_nh", "k_bias_kh", "v_bias_kh"):
        p = getattr(attn, name)
        p[...] = jnp.asarray(rng.normal(size=p.shape) * 0.5, jnp.float32)
    x = rng.normal(size=(b, t, d)).astype(np.float32)
    positions = np.array([[0, 1, 2, 3, 4, 5], [3, 4, 5, 9, 10, 11]])
    valid = np.array([[1] * 6, [0, 1, 1, 1, 1, 1]], bool)
    mask = attention.make_attention_mask(
        jnp.asarray(positions), jnp.asarray(positions), causal=causal,
        key_valid_bs=jnp.asarray(valid))
    inv, scale = rope.inv_freq("default", head_dim=h, base=base)
    cos, sin = rope.cos_sin(jnp.asarray(positions), inv, scale)
    out, cache = attn(jnp.asarray(x), cos_btd=cos, sin_btd=sin, mask=mask)
    self.assertIsNone(cache)
    zeros = np.zeros
    ref = np_gqa_attention(
        x.astype(np.float64), np.asarray(attn.q_dnh[...]),
        np.asarray(attn.k_dkh[...]), np.asarray(attn.v_dkh[...]),
        np.asarray(attn.o_nhd[...]),
        np.asarray(attn.q_bias_nh[...]) if bias else zeros((n, h)),
        np.asarray(attn.k_bias_kh[...]) if bias else zeros((k, h)),
        np.asarray(attn.v_bias_kh[...]) if bias else zeros((k, h)),
        positions, np.asarray(mask), base)
    self.assertGreater(np.abs(ref).max(), 0.1)
    np.testing.assert_allclose(np.asarray(out), ref, atol=2e-5, rtol=1e-5)

  def test_cache_write_and_attend(self):
    d, n, k, h = 16, 4, 2, 8
    attn = attention.Attention(d, n, k, h, rngs=nnx.Rngs(1), init_std=0.3)
    x = jax.random.normal(jax.random.key(0), (1, 5, d))
    pos = jnp.arange(5)[None]
    inv, _ = rope.inv_freq("default", head_dim=h, base=1e4)
    cos, sin = rope.cos_sin(pos, inv)
    full, _ = attn(x, cos_btd=cos, sin_btd=sin,
                   mask=attention.make_attention_mask(pos, pos))
    # Prefill 3 tokens into an 8-slot cache, then 2 more at index 3.
    kc = jnp.zeros((1, 8, k, h))
    slots = jnp.full((1, 8), -1).at[:, :3].set(pos[:, :3])
    out1, (kc, vc) = attn(
        x[:, :3], cos_btd=cos[:, :3], sin_btd=sin[:, :3],
        mask=attention.make_attention_mask(pos[:, :3], slots),
        layer_cache=(kc, kc), cache_index=jnp.asarray(0))
    _, k_ref, v_ref = attn.project_qkv(x, cos, sin)
    np.testing.assert_allclose(kc[:, :3], k_ref[:, :3], atol=1e-6)
    np.testing.assert_array_equal(vc[:, 3:], 0.0)
    slots = slots.at[:, 3:5].set(pos[:, 3:])
    out2, (kc, vc) = attn(
        x[:, 3:], cos_btd=cos[:, 3:], sin_btd=sin[:, 3:],
        mask=attention.make_attention_mask(pos[:, 3:], slots),
        layer_cache=(kc, vc), cache_index=jnp.asarray(3))
    np.testing.assert_allclose(vc[:, :5], v_ref, atol=1e-6)
    np.testing.assert_allclose(jnp.concatenate([out1, out2], 1), full,
                               atol=1e-5)

  def test_explicit_probabilities_match_fused_path(self):
    d, n, k, h = 16, 4, 2, 8
    attn = attention.Attention(d, n, k, h, rngs=nnx.Rngs(2), init_std=0.3)
    x = jax.random.normal(jax.random.key(1), (2, 5, d))
    pos = jnp.asarray([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
    valid = jnp.asarray([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], bool)
    inv, _ = rope.inv_freq("default", head_dim=h, base=1e4)
    cos, sin = rope.cos_sin(pos, inv)
    mask = attention.make_attention_mask(pos, pos, key_valid_bs=valid)
    fused, _ = attn(x, cos_btd=cos, sin_btd=sin, mask=mask)
    out, _, probs = attn(x, cos_btd=cos, sin_btd=sin, mask=mask,
                         output_attentions=True)
    np.testing.assert_allclose(out, fused, atol=1e-5)
    # Reference probabilities from NumPy; head n reads KV head n // 2.
    q, kk, _ = attn.project_qkv(x, cos, sin)
    kk = np.repeat(np.asarray(kk), 2, axis=2)
    logits = np.einsum("btnh,bsnh->bnts", np.asarray(q), kk) / np.sqrt(h)
    logits = np.where(np.asarray(mask), logits, -np.inf)
    ref = np.exp(logits - logits.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(probs, ref, atol=1e-6)
    # Plain causal (mask=None, is_causal) gives the same probabilities.
    _, _, p_causal = attn(x[:1], cos_btd=cos[:1], sin_btd=sin[:1], mask=None,
                          is_causal=True, output_attentions=True)
    np.testing.assert_allclose(p_causal, probs[:1], atol=1e-6)

  def test_bad_head_counts(self):
    with self.assertRaisesRegex(ValueError, "multiple of num_kv_heads"):
      attention.Attention(16, 3, 2, 8, rngs=nnx.Rngs(0))


def _cache(batch=2, max_len=6, layers=2, kv_heads=2, head_dim=3, index=4,
           seed=0):
  """A cache whose keys/values encode (layer, row, slot, head) and whose
  first `index` slots hold positions 10*row + slot."""
  c = attention.KVCache.init(num_layers=layers, batch=batch, max_len=max_len,
                             num_kv_heads=kv_heads, head_dim=head_dim)
  rng = np.random.RandomState(seed)
  ks = tuple(jnp.asarray(rng.normal(size=a.shape), jnp.float32) for a in c.k)
  vs = tuple(jnp.asarray(rng.normal(size=a.shape), jnp.float32) for a in c.v)
  pos = np.full((batch, kv_heads, max_len), -1, np.int32)
  for b in range(batch):
    pos[b, :, :index] = 10 * b + np.arange(index)
  return attention.KVCache(k=ks, v=vs, positions=jnp.asarray(pos),
                           index=jnp.asarray(index, jnp.int32))


class KVCacheTest(parameterized.TestCase):

  def test_init_layout(self):
    c = attention.KVCache.init(num_layers=3, batch=2, max_len=5,
                               num_kv_heads=2, head_dim=4)
    chex.assert_shape(c.positions, (2, 2, 5))
    chex.assert_shape(c.k[0], (2, 5, 2, 4))
    self.assertEqual((c.max_len, c.batch_size, c.num_kv_heads,
                      c.num_layers), (5, 2, 2, 3))
    np.testing.assert_array_equal(c.positions, -1)

  def test_gather_shared_and_per_head(self):
    c = _cache()
    g = c.gather(jnp.asarray([[3, 0], [1, -1]]), max_len=5)
    self.assertEqual((g.max_len, int(g.index)), (5, 2))
    np.testing.assert_array_equal(g.positions[:, 0],
                                  [[3, 0, -1, -1, -1], [11, -1, -1, -1, -1]])
    np.testing.assert_array_equal(g.k[1][0, 0], c.k[1][0, 3])
    np.testing.assert_array_equal(g.v[0][1, 0], c.v[0][1, 1])
    np.testing.assert_array_equal(g.k[0][1, 1], 0.0)  # -1: empty slot
    # Per KV head: head 0 keeps slots (0, 2), head 1 keeps (1, 3).
    idx = jnp.asarray([[[0, 2], [1, 3]], [[0, 2], [1, 3]]])
    g = c.gather(idx)
    np.testing.assert_array_equal(g.positions[0], [[0, 2], [1, 3]])
    np.testing.assert_array_equal(g.k[0][0, :, 0], c.k[0][0, jnp.asarray(
        [0, 2]), 0])
    np.testing.assert_array_equal(g.k[0][0, :, 1], c.k[0][0, jnp.asarray(
        [1, 3]), 1])
    with self.assertRaisesRegex(ValueError, "gather indices"):
      c.gather(jnp.zeros((3, 2), jnp.int32))

  def test_split_concatenate_round_trip(self):
    c = _cache(batch=3)
    parts = c.split([1], axis="batch")
    self.assertEqual([p.batch_size for p in parts], [1, 2])
    back = attention.concatenate(parts, axis="batch")
    chex.assert_trees_all_equal(back, c)
    left, right = c.split([2], axis="sequence")
    self.assertEqual((int(left.index), int(right.index)), (2, 2))
    np.testing.assert_array_equal(right.positions[1, 0], [12, 13, -1, -1])
    back = attention.concatenate([left, right], axis="sequence")
    chex.assert_trees_all_equal(back, c)
    with self.assertRaisesRegex(ValueError, "equal capacities"):
      attention.concatenate([c, _cache(batch=3, max_len=7)], axis="batch")
    with self.assertRaisesRegex(ValueError, "axis"):
      c.split(2, axis="heads")

  def test_tile_repeats_rows(self):
    c = _cache()
    t = c.tile(3)
    self.assertEqual(t.batch_size, 6)
    for r in range(6):
      np.testing.assert_array_equal(t.k[1][r], c.k[1][r // 3])
      np.testing.assert_array_equal(t.positions[r], c.positions[r // 3])

  def test_grow(self):
    c = _cache()
    g = c.grow(9)
    self.assertEqual((g.max_len, int(g.index)), (9, 4))
    np.testing.assert_array_equal(g.positions[:, :, 6:], -1)
    np.testing.assert_array_equal(g.k[0][:, :6], c.k[0])
    with self.assertRaisesRegex(ValueError, "below the current capacity"):
      c.grow(3)

  def test_capacity_error(self):
    c = _cache(index=4, max_len=6)
    c.check_capacity(2)  # fits exactly
    with self.assertRaisesRegex(ValueError,
                                r"writing 3 new tokens at index 4 .*"
                                r"capacity is 6"):
      c.check_capacity(3)


if __name__ == "__main__":
  absltest.main()
