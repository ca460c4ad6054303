"""Tests of LeSTD (jaxlab.compression.lestd): exact identities, tensorly
parity, compressed-domain attention vs the dense rebuild, accounting by
hand, and one clear error per bad input."""

import chex
import jax.numpy as jnp
import numpy as np
import tensorly as tl
from absl.testing import absltest
from flax import nnx
from tensorly.decomposition import tucker

from jaxlab.compression import lestd
from jaxlab.decoding import sampler
from jaxlab.models import decoder as decoder_lib
from jaxlab.nn import attention as attn_lib
from jaxlab.nn import rope


def _complete_basis(u: np.ndarray) -> np.ndarray:
  """`[I, I]` orthonormal basis whose first columns are u's columns."""
  i, r = u.shape
  if r == i:
    return u
  perp = np.eye(i) - u @ u.T
  q, s, _ = np.linalg.svd(perp)
  return np.concatenate([u, q[:, :i - r]], axis=1)


def _full_core(x, factors):
  """Coefficients of x in the completed orthonormal bases (float64)."""
  out = np.asarray(x, np.float64)
  for mode, f in enumerate(factors):
    full = _complete_basis(np.asarray(f, np.float64))
    out = np.moveaxis(np.tensordot(full.T, out, axes=([1], [mode])), 0, mode)
  return out


class HooiTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.default_rng(0)
    cls.x = rng.normal(size=(7, 6, 4, 3)).astype(np.float32)
    cls.ranks = (4, 3, 2, 3)
    cls.core, cls.factors = lestd.hooi(cls.x, cls.ranks, iters=50,
                                       skip_modes=(3,))

  def test_shapes_and_orthonormal_factors(self):
    chex.assert_shape(self.core, self.ranks)
    for f, dim, r in zip(self.factors, self.x.shape, self.ranks):
      chex.assert_shape(f, (dim, r))
      np.testing.assert_allclose(np.asarray(f).T @ np.asarray(f), np.eye(r),
                                 atol=1e-5)
    # the skipped head mode keeps the identity factor
    np.testing.assert_array_equal(self.factors[3], np.eye(3))

  def test_error_is_sum_of_dropped_core_entries(self):
    # In the completed orthonormal bases W = Σ c_β B_β exactly; the Tucker
    # approximation keeps the leading block of c, so the squared error is
    # the sum of the squared entries it drops.
    c = _full_core(self.x, self.factors)
    block = tuple(slice(0, r) for r in self.ranks)
    np.testing.assert_allclose(c[block], self.core, atol=1e-4)
    dropped = np.sum(c ** 2) - np.sum(c[block] ** 2)
    approx = np.asarray(lestd.tucker_to_tensor(self.core, self.factors))
    err = np.sum((self.x - approx) ** 2)
    np.testing.assert_allclose(err, dropped, rtol=1e-4)
    # and after sparsifying the core: the pruned entries join the sum
    sparse, keep = lestd.sparsify_core(self.x, self.factors, 20, alpha=0.1)
    self.assertEqual(int(keep.sum()), 20)
    self.assertEqual(int(np.count_nonzero(np.asarray(sparse))), 20)
    err_sparse = np.sum(
        (self.x - np.asarray(lestd.tucker_to_tensor(sparse, self.factors)))
        ** 2)
    pruned = np.sum(c[block][~keep] ** 2)
    np.testing.assert_allclose(err_sparse, dropped + pruned, rtol=1e-4)
    # importance g²/E orders entries as |g| does: the kept ones are the
    # 20 largest in magnitude, so iterative (α=0.1) = one-shot (α=1)
    _, keep_once = lestd.sparsify_core(self.x, self.factors, 20, alpha=1.0)
    np.testing.assert_array_equal(keep, keep_once)
    imp = lestd.core_importance(self.core, err)
    np.testing.assert_allclose(imp, np.asarray(self.core) ** 2 / err,
                               rtol=1e-6)

  def test_no_worse_than_tensorly(self):
    rng = np.random.default_rng(1)
    low = np.einsum("ia,jb,kc,abc->ijk", rng.normal(size=(9, 3)),
                    rng.normal(size=(8, 3)), rng.normal(size=(5, 2)),
                    rng.normal(size=(3, 3, 2)))
    # one shape (one compile): a random tensor and a low-rank + noise one
    cases = [(rng.normal(size=(9, 8, 5)), (4, 3, 2)),
             (low + 0.1 * rng.normal(size=low.shape), (3, 3, 2))]
    for x, ranks in cases:
      x = x.astype(np.float32)
      core, factors = lestd.hooi(x, ranks, iters=100, tol=1e-9)
      ours = np.sum((x - np.asarray(lestd.tucker_to_tensor(core, factors)))
                    ** 2)
      ref = tucker(tl.tensor(x.astype(np.float64)), rank=list(ranks),
                   init="svd", n_iter_max=100, tol=1e-8)
      theirs = np.sum((x - tl.tucker_to_tensor(ref)) ** 2)
      self.assertLessEqual(ours, theirs * (1 + 1e-4) + 1e-6)

  def test_recovers_shared_subspaces(self):
    # spec P.8(a)(i): W from shared orthonormal U's + a sparse core + noise
    rng = np.random.default_rng(2)
    us = [np.linalg.qr(rng.normal(size=(d, r)))[0]
          for d, r in ((7, 3), (6, 2), (4, 2))]
    g = rng.normal(size=(3, 2, 2, 3)) * (rng.random((3, 2, 2, 3)) < 0.5)
    g[0, 0, 0] += 3.0
    w = np.einsum("ia,jb,kc,abch->ijkh", *us, g)
    w = (w + 1e-4 * rng.normal(size=w.shape)).astype(np.float32)
    _, factors = lestd.hooi(w, (3, 2, 2, 3), skip_modes=(3,))
    for u, f in zip(us, factors):
      cosines = np.linalg.svd(u.T @ np.asarray(f), compute_uv=False)
      np.testing.assert_allclose(cosines, 1.0, atol=1e-3)

  def test_ranks_larger_than_dimensions_is_an_error(self):
    with self.assertRaisesRegex(
        ValueError, r"ranks\[1\]=9 is larger than the tensor's dimension 6"):
      lestd.hooi(self.x, (4, 9, 2, 3))
    with self.assertRaisesRegex(ValueError, "has 3 entries for a tensor of 4"):
      lestd.hooi(self.x, (4, 3, 2))


class AccountingTest(absltest.TestCase):
  # W_total (d=8, d_head=4, 4, h=2), ranks (4, 2, 2): factors 8·4 + 4·2 +
  # 4·2 = 48 words, core 4·2·2·2 = 32 entries, original 4·2·8·4 = 256.
  shape, ranks = (8, 4, 4, 2), (4, 2, 2)

  def test_hand_case_counts_indices(self):
    coo = lestd.param_count(self.shape, self.ranks, 5, index_format="coo")
    self.assertEqual((coo["values"], coo["indices"], coo["total"],
                      coo["original"]), (53.0, 5.0, 58.0, 256.0))
    # a bitmap of 32 one-bit entries is one 32-bit word
    self.assertEqual(lestd.compression_ratio(
        self.shape, self.ranks, 5, index_format="bitmap"), 54 / 256)
    self.assertEqual(lestd.compression_ratio(
        self.shape, self.ranks, 5, index_format="auto"), 54 / 256)
    self.assertEqual(lestd.compression_ratio(
        self.shape, self.ranks, 5, index_format="none"), 53 / 256)
    # 16-bit COO indices: half a word each
    self.assertEqual(lestd.param_count(
        self.shape, self.ranks, 5, index_format="coo",
        index_bits=16)["indices"], 2.5)
    # a dense core stores no index
    self.assertEqual(lestd.compression_ratio(
        self.shape, self.ranks, 32, index_format="coo"), 80 / 256)
    # the budget inverse: the largest nnz meeting 58/256 with COO is 5
    self.assertEqual(lestd.max_nnz(self.shape, self.ranks, 58 / 256,
                                   index_format="coo"), 5)
    self.assertEqual(lestd.max_nnz(self.shape, self.ranks, 57.9 / 256,
                                   index_format="coo"), 4)

  def test_budget_that_cannot_be_met_is_an_error(self):
    w = np.random.default_rng(3).normal(size=self.shape).astype(np.float32)
    cfg = lestd.LeSTDConfig(target_ratio=0.05, ranks=(4, 2, 2))
    with self.assertRaisesRegex(ValueError,
                                r"target_ratio=0.05 cannot be met by LeSTD"):
      lestd.solve_budget(w, cfg)
    with self.assertRaisesRegex(ValueError, r"lestd.index_format='csr'"):
      lestd.LeSTDConfig(index_format="csr")


def _tiny_decoder(num_kv_heads=4, layers=1, qkv_bias=True):
  cfg = decoder_lib.DecoderConfig(
      vocab_size=48, dim=32, num_layers=layers, num_heads=4,
      num_kv_heads=num_kv_heads, mlp_dim=64, qkv_bias=qkv_bias, init_std=0.2)
  model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
  if qkv_bias:
    rng = np.random.default_rng(4)
    for blk in model.layers:
      for name in ("q_bias_nh", "k_bias_kh", "v_bias_kh"):
        p = getattr(blk.attn, name)
        p[...] = jnp.asarray(rng.normal(size=p[...].shape) * 0.1, jnp.float32)
  return model


class TuckerAttentionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = _tiny_decoder()
    cls.cfg = lestd.LeSTDConfig(target_ratio=0.3, ranks=(16, 6, 3))
    cls.compressed, cls.info = lestd.compress_decoder(cls.model, cls.cfg)

  def test_stack_layout(self):
    attn = self.model.layers[0].attn
    w = np.asarray(lestd.stack_attention(attn))
    chex.assert_shape(w, (32, 8, 4, 4))
    np.testing.assert_array_equal(w[:, :, 0, 2], attn.q_dnh[...][:, 2])
    np.testing.assert_array_equal(w[:, :, 3, 1], attn.o_nhd[...][1].T)
    back = lestd.unstack_attention(w)
    np.testing.assert_array_equal(back["o_nhd"], attn.o_nhd[...])

  def test_gqa_error_mode_rejects_gqa(self):
    # abstract (no weights computed): the check reads the head counts only
    gqa = nnx.eval_shape(lambda: attn_lib.Attention(32, 4, 2, 8,
                                                    rngs=nnx.Rngs(0)))
    with self.assertRaisesRegex(ValueError, r"num_kv_heads=2 < num_heads=4"):
      lestd.stack_attention(gqa, "error")
    with self.assertRaisesRegex(ValueError, r"lestd.gqa='heads'"):
      lestd.LeSTDConfig(gqa="heads")

  def test_svd_budget_that_cannot_be_met_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "cannot be met by per-matrix SVD"):
      lestd.svd_compress_decoder(self.model, 0.01)

  def test_plan_meets_budget_and_sparsifies(self):
    info = self.info[0]
    self.assertEqual(info["ranks"], (16, 6, 3))
    self.assertLessEqual(info["ratio"], 0.3)
    # budget 0.3·4096 words - factors (512 + 48 + 12) - bitmap (1152 / 32)
    self.assertEqual(info["nnz"], 620)
    tucker_attn = self.compressed.layers[0].attn
    self.assertIsInstance(tucker_attn, lestd.TuckerAttention)
    self.assertEqual(tucker_attn.nnz, 620)
    # the predicted error (orthonormal-basis identity) is the measured one
    np.testing.assert_allclose(info["rel_error"], info["measured_rel_error"],
                               rtol=1e-3)

  def test_matches_dense_attention_rebuilt_from_factors(self):
    tucker_attn = self.compressed.layers[0].attn
    dense = tucker_attn.to_dense()
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(size=(2, 5, 32)), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(5), (2, 5))
    cos, sin = rope.cos_sin(pos, *self.model.cfg.rope_tables())
    kw = dict(cos_btd=cos, sin_btd=sin, mask=None, is_causal=True)
    out_t, _ = tucker_attn(x, **kw)
    out_d, _ = dense(x, **kw)
    np.testing.assert_allclose(out_t, out_d, atol=1e-5, rtol=1e-5)
    # with a KV cache and explicit probabilities
    cache = (jnp.zeros((2, 8, 4, 8)), jnp.zeros((2, 8, 4, 8)))
    mask = attn_lib.make_attention_mask(pos, jnp.concatenate(
        [pos, -jnp.ones((2, 3), jnp.int32)], 1))
    kw = dict(cos_btd=cos, sin_btd=sin, mask=mask, layer_cache=cache,
              cache_index=jnp.array(0), output_attentions=True)
    out_t, kv_t, p_t = tucker_attn(x, **kw)
    out_d, kv_d, p_d = dense(x, **kw)
    np.testing.assert_allclose(out_t, out_d, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(kv_t[0], kv_d[0], atol=1e-5)
    np.testing.assert_allclose(p_t, p_d, atol=1e-5)

  def test_decoder_generates_through_normal_forward(self):
    # the same decoder with the dense rebuilt attention is the reference
    ref = nnx.clone(self.compressed)
    ref.layers[0].attn = ref.layers[0].attn.to_dense()
    ids = np.random.default_rng(6).integers(0, 48, (1, 7))
    np.testing.assert_allclose(self.compressed(jnp.asarray(ids)),
                               ref(jnp.asarray(ids)), atol=1e-4)
    # greedy generation with the KV cache (the sampler) = argmax of the
    # reference's full forward, token by token (one padded [1, 7] shape:
    # causal, so the padding after position t does not change its logits)
    prompt = [1, 2, 3, 4]
    got = sampler.generate(self.compressed, [prompt], max_new_tokens=3)
    seq = list(prompt)
    for _ in range(3):
      padded = jnp.asarray([seq + [0] * (7 - len(seq))])
      seq.append(int(jnp.argmax(ref(padded)[0, len(seq) - 1])))
    self.assertEqual(list(got.tokens[0]), seq[len(prompt):])

  def test_svd_baseline_is_eckart_young_at_the_ratio(self):
    svd_model, infos = lestd.svd_compress_decoder(self.model, 1.0)
    # r·(32 + 32) <= 1.0·32·32 -> r = 16 per 32x32 matrix
    self.assertEqual(infos[0]["rank"], 16)
    q = np.asarray(self.model.layers[0].attn.q_dnh[...]).reshape(32, 32)
    got = np.asarray(svd_model.layers[0].attn.q_dnh[...]).reshape(32, 32)
    s = np.linalg.svd(q, compute_uv=False)
    np.testing.assert_allclose(np.sum((q - got) ** 2), np.sum(s[16:] ** 2),
                               rtol=1e-4)


def _stack_mha_before_gqa(attn):
  """`stack_attention` as it was before the GQA extension (MHA only): the
  spec P.1 layout [Q, K, V, Oᵀ] per head, the reference of the r = 1
  case."""
  o_t = jnp.transpose(attn.o_nhd[...], (2, 0, 1))
  w = jnp.stack([attn.q_dnh[...], attn.k_dkh[...], attn.v_dkh[...], o_t],
                axis=-1)
  return jnp.transpose(w, (0, 2, 3, 1)).astype(jnp.float32)


def _qkv_before_gqa(u1, u2, m_ntrs, x):
  """TuckerAttention's q, k, v (before RoPE) as computed before the GQA
  extension (MHA, `m_ntrs [h, 4, R1, R2]`)."""
  y = x @ u1
  z = jnp.einsum("btr,njrs->btnjs", y, m_ntrs[:, :3])
  qkv = jnp.einsum("btnjs,hs->jbtnh", z, u2)
  return qkv[0], qkv[1], qkv[2]


class GqaTest(absltest.TestCase):
  """The [inferred] GQA extension ("group" mode): per KV group, mode 3
  stacks the group's r query heads, K, V and its r output heads."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # h = 4 query heads, g = 2 KV groups (r = 2), d_head 8, d_model 32
    cls.model = _tiny_decoder(num_kv_heads=2, layers=2)
    cls.attn = cls.model.layers[0].attn

  def test_stack_layout_per_group(self):
    w = np.asarray(lestd.stack_attention(self.attn))
    chex.assert_shape(w, (32, 8, 6, 2))  # [d_model, d_head, 2r+2, g]
    q, k = self.attn.q_dnh[...], self.attn.k_dkh[...]
    v, o = self.attn.v_dkh[...], self.attn.o_nhd[...]
    for grp in range(2):
      for j in range(2):  # query head 2·grp + j reads KV head grp
        np.testing.assert_array_equal(w[:, :, j, grp], q[:, 2 * grp + j])
        np.testing.assert_array_equal(w[:, :, 4 + j, grp],
                                      o[2 * grp + j].T)
      np.testing.assert_array_equal(w[:, :, 2, grp], k[:, grp])
      np.testing.assert_array_equal(w[:, :, 3, grp], v[:, grp])
    back = lestd.unstack_attention(w)
    for name, ref in (("q_dnh", q), ("k_dnh", k), ("v_dnh", v),
                      ("o_nhd", o)):
      np.testing.assert_array_equal(back[name], ref)

  def test_r1_is_the_mha_result_exactly(self):
    # (i) MHA (r = 1): the tensor is bit-for-bit the spec's [Q, K, V, Oᵀ]
    # stack, so HOOI, the plan and the sparse core are those of before; the
    # compressed-domain q/k/v equal the pre-GQA einsums.
    mha = _tiny_decoder()
    attn = mha.layers[0].attn
    w = lestd.stack_attention(attn)
    np.testing.assert_array_equal(w, _stack_mha_before_gqa(attn))
    cfg = lestd.LeSTDConfig(target_ratio=0.3, ranks=(16, 6, 3))
    mod, info = lestd.compress_layer(attn, cfg)
    plan, (core, factors) = lestd.solve_budget(_stack_mha_before_gqa(attn),
                                               cfg)
    self.assertEqual((info["ranks"], info["nnz"]), (plan.ranks, plan.nnz))
    sparse, _ = lestd.sparsify_core(_stack_mha_before_gqa(attn), factors,
                                    plan.nnz)
    m_ntrs = jnp.einsum("abci,tc->itab", sparse, factors[2])
    np.testing.assert_array_equal(mod.m_gtrs[...], m_ntrs)
    self.assertEqual((mod.num_heads, mod.num_kv_heads, mod.group), (4, 4, 1))
    x = jnp.asarray(np.random.default_rng(7).normal(size=(2, 5, 32)),
                    jnp.float32)
    mod.use_rope = False
    got = mod.project_qkv(x, None, None)
    want = _qkv_before_gqa(factors[0], factors[1], m_ntrs, x)
    for a, b, name in zip(got, want, "qkv"):
      # biases are added after the projection
      bias = getattr(mod, f"{name}_bias_{'nh' if name == 'q' else 'kh'}")
      np.testing.assert_allclose(a - bias[...], b, atol=1e-6, rtol=1e-6)

  def test_compressed_domain_qkvo_equal_dense_rebuild(self):
    # (ii) Q/K/V/O computed from the factors = the dense projections of the
    # weights the factors represent. float32 with contractions of at most
    # d_model + R1 + R2 = 54 terms of size ~1: |error| <~ 54·eps·|x|·|w|,
    # so 1e-5 relative to the output's scale.
    cfg = lestd.LeSTDConfig(target_ratio=0.35, ranks=(16, 6, 4))
    mod, info = lestd.compress_layer(self.attn, cfg)
    self.assertEqual((mod.num_heads, mod.num_kv_heads, mod.group), (4, 2, 2))
    self.assertLess(info["nnz"], 16 * 6 * 4 * 2)  # sparsified
    self.assertLessEqual(info["ratio"], 0.35)
    dense = mod.to_dense()
    rng = np.random.default_rng(8)
    x = jnp.asarray(rng.normal(size=(2, 5, 32)), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(5), (2, 5))
    cos, sin = rope.cos_sin(pos, *self.model.cfg.rope_tables())
    for a, b in zip(mod.project_qkv(x, cos, sin),
                    dense.project_qkv(x, cos, sin)):
      self.assertEqual(a.shape, b.shape)
      np.testing.assert_allclose(a, b, atol=1e-5 * float(jnp.max(abs(b))))
    self.assertEqual(mod.project_qkv(x, cos, sin)[1].shape, (2, 5, 2, 8))
    o = jnp.asarray(rng.normal(size=(2, 5, 4, 8)), jnp.float32)
    want = dense.project_out(o)
    np.testing.assert_allclose(mod.project_out(o), want,
                               atol=1e-5 * float(jnp.max(abs(want))))
    # the rebuilt weights are the Tucker reconstruction of W_total
    w = lestd.stack_attention(self.attn)
    sparse, _ = lestd.sparsify_core(
        w, lestd.solve_budget(w, cfg)[1][1], info["nnz"])
    rebuilt = lestd.tucker_to_tensor(sparse, lestd.solve_budget(w, cfg)[1][1])
    np.testing.assert_allclose(lestd.stack_attention(dense), rebuilt,
                               atol=1e-5)
    # with a GQA KV cache ([B, S, g, d_head]) and explicit probabilities
    cache = (jnp.zeros((2, 8, 2, 8)), jnp.zeros((2, 8, 2, 8)))
    mask = attn_lib.make_attention_mask(pos, jnp.concatenate(
        [pos, -jnp.ones((2, 3), jnp.int32)], 1))
    kw = dict(cos_btd=cos, sin_btd=sin, mask=mask, layer_cache=cache,
              cache_index=jnp.array(0), output_attentions=True)
    out_t, kv_t, p_t = mod(x, **kw)
    out_d, kv_d, p_d = dense(x, **kw)
    np.testing.assert_allclose(out_t, out_d, atol=1e-5)
    np.testing.assert_allclose(kv_t[1], kv_d[1], atol=1e-5)
    np.testing.assert_allclose(p_t, p_d, atol=1e-5)

  def test_full_ranks_no_pruning_gives_the_dense_decoder(self):
    # (iii) at full ranks the Tucker factors are orthogonal bases of each
    # mode and the core is W in those bases: the decoder computes the same
    # logits as the dense one (float32 rounding only).
    out = nnx.clone(self.model)
    for blk in out.layers:
      w = lestd.stack_attention(blk.attn)
      core, factors = lestd.hooi(w, w.shape, iters=2, skip_modes=(3,))
      blk.attn = lestd.TuckerAttention(
          core, factors, biases=lestd._attn_biases(blk.attn))  # pylint: disable=protected-access
      self.assertEqual(blk.attn.nnz, int(np.prod(w.shape)))
    ids = jnp.asarray(np.random.default_rng(9).integers(0, 48, (2, 7)))
    want = self.model(ids)
    np.testing.assert_allclose(out(ids), want,
                               atol=1e-4 * float(jnp.max(abs(want))))

  def test_ratio_accounting_by_hand(self):
    # (iv) W_total of h = 4, g = 2 (r = 2), d_model 8, d_head 4:
    # shape (8, 4, 2r+2 = 6, 2); original (2h + 2g)·d·d_head = 12·32 = 384
    # = the four projections' sizes (q 128 + k 64 + v 64 + o 128).
    attn = attn_lib.Attention(8, 4, 2, 4, rngs=nnx.Rngs(0))
    shape = lestd.stack_attention(attn).shape
    self.assertEqual(shape, (8, 4, 6, 2))
    sizes = sum(p[...].size for p in (attn.q_dnh, attn.k_dkh, attn.v_dkh,
                                      attn.o_nhd))
    self.assertEqual(sizes, 384)
    # ranks (4, 2, 3): factors 8·4 + 4·2 + 6·3 = 58; core 4·2·3·2 = 48
    c = lestd.param_count(shape, (4, 2, 3), 5, index_format="coo")
    self.assertEqual((c["values"], c["indices"], c["total"], c["original"],
                      c["core_size"]), (63.0, 5.0, 68.0, 384.0, 48.0))
    # a bitmap of 48 one-bit entries is 1.5 32-bit words (cheaper than COO)
    self.assertEqual(lestd.compression_ratio(shape, (4, 2, 3), 5), 64.5 / 384)
    self.assertEqual(lestd.compression_ratio(shape, (4, 2, 3), 5,
                                             index_format="none"), 63 / 384)
    # dense core, no index: 58 + 48 = 106
    self.assertEqual(lestd.compression_ratio(shape, (4, 2, 3), 48), 106 / 384)
    self.assertEqual(lestd.max_nnz(shape, (4, 2, 3), 64.5 / 384), 5)
    # R3 candidates are cut to the 2r+2 = 6 slots
    cfg = lestd.LeSTDConfig(rank_fractions=((0.5,), (0.5,)),
                            r3_values=(4, 6, 9))
    self.assertEqual(lestd.rank_grid(shape, cfg), [(4, 2, 4), (4, 2, 6)])

  def test_svd_baseline_keeps_gqa_shapes(self):
    svd_model, infos = lestd.svd_compress_decoder(self.model, 0.5)
    # W_Q, W_O: 32x32 -> r·64 <= 512, r = 8; W_K, W_V: 32x16 -> r·48 <= 256,
    # r = 5; stored 2·8·64 + 2·5·48 = 1504 of (2·4 + 2·2)·32·8 = 3072
    self.assertEqual(infos[0]["ranks"], {"q": 8, "k": 5, "v": 5, "o": 8})
    self.assertAlmostEqual(infos[0]["ratio"], 1504 / 3072)
    a = svd_model.layers[0].attn
    self.assertEqual(a.k_dkh[...].shape, (32, 2, 8))
    k = np.asarray(self.attn.k_dkh[...]).reshape(32, 16)
    got = np.asarray(a.k_dkh[...]).reshape(32, 16)
    s = np.linalg.svd(k, compute_uv=False)
    np.testing.assert_allclose(np.sum((k - got) ** 2), np.sum(s[5:] ** 2),
                               rtol=1e-4)

  def test_gqa_decoder_compresses_and_generates(self):
    cfg = lestd.LeSTDConfig(target_ratio=0.4,
                            rank_fractions=((0.5, 1.0), (0.75, 1.0)),
                            r3_values=(4, 6))
    comp, infos = lestd.compress_decoder(self.model, cfg)
    for info in infos:
      self.assertLessEqual(info["ratio"], 0.4)
    ref = lestd.dense_decoder(comp, self.model)
    self.assertEqual(ref.layers[0].attn.k_dkh[...].shape, (32, 2, 8))
    ids = jnp.asarray([[1, 2, 3, 4, 5, 6, 7]])
    np.testing.assert_allclose(comp(ids), ref(ids), atol=1e-4)
    got = sampler.generate(comp, [[1, 2, 3, 4]], max_new_tokens=3)
    want = sampler.generate(ref, [[1, 2, 3, 4]], max_new_tokens=3)
    self.assertEqual(list(got.tokens[0]), list(want.tokens[0]))


if __name__ == "__main__":
  absltest.main()
