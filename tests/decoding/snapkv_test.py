"""SnapKV / SpecKV (paper M): `select_indices` against a NumPy reference,
the "snapkv" / "speckv" policies on the sampler, and their errors."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.decoding import kv_policies
from jaxlab.decoding import sampler
from jaxlab.testing import tiny_models

PROMPTS = tiny_models.PROMPTS


def reference_select(q, k, budget, window, kernel, reduce):
  """NumPy SnapKV selection written from the issue's description."""
  b, hq, w, d = q.shape
  _, hkv, s, _ = k.shape
  if budget >= s:
    return np.broadcast_to(np.arange(s), (b, hkv, s))
  g = hq // hkv
  out = np.zeros((b, hkv, budget), np.int64)
  for bi in range(b):
    for kh in range(hkv):
      rows = []
      for qh in range(kh * g, (kh + 1) * g):
        logits = q[bi, qh] @ k[bi, kh].T / np.sqrt(d)  # [w, s]
        for i in range(w):
          z = np.where(np.arange(s) <= s - w + i, logits[i], -np.inf)
          p = np.exp(z - z.max())
          rows.append(p / p.sum())
      rows = np.stack(rows)
      score = rows.max(0) if reduce == "max" else rows.mean(0)
      cand = score[:s - window]
      half = kernel // 2
      padded = np.concatenate([np.full(half, -np.inf), cand,
                               np.full(half, -np.inf)])
      pooled = np.array([padded[j:j + kernel].max()
                         for j in range(len(cand))])
      top = np.argsort(-pooled, kind="stable")[:budget - window]
      out[bi, kh] = np.sort(np.concatenate(
          [top, np.arange(s - window, s)]))
  return out


class SelectIndicesTest(parameterized.TestCase):

  @parameterized.parameters(("max", 3), ("mean", 7))
  def test_matches_numpy_reference_gqa(self, reduce, kernel):
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 4, 5, 8)).astype(np.float32) * 2
    k = rng.normal(size=(2, 2, 30, 8)).astype(np.float32) * 2
    for budget in (5, 12, 29, 30, 40):
      got = np.asarray(kv_policies.select_indices(
          jnp.asarray(q), jnp.asarray(k), budget=budget, window=5,
          kernel=kernel, reduce=reduce))
      want = reference_select(q, k, budget, 5, kernel, reduce)
      np.testing.assert_array_equal(got, want, err_msg=f"budget {budget}")
    self.assertEqual(got.shape, (2, 2, 30))  # budget >= S keeps all

  def test_budget_below_window_is_one_error(self):
    q, k = jnp.zeros((1, 2, 4, 8)), jnp.zeros((1, 1, 10, 8))
    with self.assertRaisesRegex(ValueError, r"budget=3 is smaller than "
                                r"window=4"):
      kv_policies.select_indices(q, k, budget=3, window=4)
    with self.assertRaisesRegex(ValueError, "budget=3 is smaller"):
      kv_policies.get("snapkv")(None, model=None, prefill=None, budget=3,
                                window=4)


class PolicyTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder()
    cls.draft = tiny_models.tiny_decoder(1, num_layers=1, dim=16)
    cls.full = sampler.generate(cls.model, PROMPTS, max_new_tokens=6)

  def test_snapkv_budget_at_least_context_equals_full(self):
    got = sampler.generate(self.model, PROMPTS, max_new_tokens=6,
                           cache_policy="snapkv",
                           cache_policy_options={"budget": 8, "window": 2})
    self.assertEqual(got.tokens, self.full.tokens)
    np.testing.assert_allclose(np.concatenate(got.model_logprobs),
                               np.concatenate(self.full.model_logprobs),
                               atol=1e-5)

  def test_speckv_budget_at_least_context_equals_full(self):
    got = kv_policies.speckv_generate(self.model, self.draft, PROMPTS,
                                      budget=8, window=2, lookahead=3,
                                      max_new_tokens=6)
    self.assertEqual(got.tokens, self.full.tokens)
    np.testing.assert_allclose(np.concatenate(got.model_logprobs),
                               np.concatenate(self.full.model_logprobs),
                               atol=1e-5)

  def test_snapkv_policy_equals_select_indices_on_model_queries(self):
    # One layer (the layer reduction is then the identity), one unpadded
    # prompt: the kept slots are select_indices of the layer's queries.
    model = tiny_models.tiny_decoder(2, num_layers=1)
    prompt = list(np.random.default_rng(1).integers(1, 64, 16))
    budget, window, kernel = 7, 3, 3
    got = sampler.generate(model, [prompt], max_new_tokens=2,
                           cache_policy="snapkv", return_cache=True,
                           cache_policy_options=dict(budget=budget,
                                                     window=window,
                                                     kernel=kernel))
    ids = jnp.asarray([prompt])
    pos = jnp.arange(16)[None]
    cos, sin = model.rotary(pos, seq_len=got.cache.max_len)
    block = model.layers[0]
    q, k, _ = block.attn.project_qkv(block.attn_norm(model.embed(ids)), cos,
                                     sin)
    want = kv_policies.select_indices(
        jnp.swapaxes(q[:, -window:], 1, 2), jnp.swapaxes(k, 1, 2),
        budget=budget, window=window, kernel=kernel)
    np.testing.assert_array_equal(
        np.asarray(got.cache.positions)[:, :, :budget], np.asarray(want))
    # Decode writes go after the kept slots.
    np.testing.assert_array_equal(
        np.asarray(got.cache.positions)[0, :, budget], [16, 16])

  def test_speckv_crop_keeps_budget_and_drops_lookahead(self):
    prompt = list(range(1, 21))
    first = sampler.generate(
        self.model, [prompt + [5, 6, 7]], max_new_tokens=1,
        cache_policy="speckv", return_cache=True,
        cache_policy_options=dict(budget=6, lookahead=3, window=2))
    pos = np.asarray(first.cache.positions)[0]
    # 4 chosen + the 2 prompt tokens before the last (17, 18); 19 (the last
    # prompt token) and the lookahead (20..22) are gone.
    self.assertTrue(np.all(pos[:, 4:6] == [17, 18]))
    self.assertTrue(np.all((pos[:, :4] >= 0) & (pos[:, :4] < 17)))
    self.assertTrue(np.all(pos[:, 6:] == -1))

  def test_draft_vocab_mismatch_is_one_error(self):
    bad = tiny_models.tiny_decoder(1, vocab_size=80)
    with self.assertRaisesRegex(ValueError, "draft vocabulary size 80 "
                                "differs from the target's 64"):
      kv_policies.speckv_generate(self.model, bad, PROMPTS, budget=8,
                                  window=2, max_new_tokens=2)


if __name__ == "__main__":
  absltest.main()
