"""SnapKV / SpecKV (paper M): `select_indices` and SpecKV's slot scores
against NumPy references, the "snapkv" / "speckv" policies on the sampler,
and their errors."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.decoding import kv_policies
from jaxlab.decoding import speckv as speckv_lib
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


def reference_speckv_scores(qk, *, lookahead, window, kernel, reduce,
                            layer_reduce, capacity):
  """NumPy SpecKV slot scores written from the spec (paper M, SpecKV 2).

  `qk`: per layer (q `[B, T, N, H]`, k `[B, T, K, H]`) of an unpadded
  prefill of T = prompt + lookahead tokens. The W' = window + lookahead + 1
  last queries attend causally, softmax(q kᵀ / √H), over the T keys; a KV
  head's score is the max (or mean) over its query group's G·W' rows; the
  layers are averaged (or maxed); the keys before the last W' are pooled
  (max, `kernel`, stride 1, same) among themselves. Slots >= T are empty
  cache slots (score 0, never candidates).

  Returns (raw `[B, K, capacity]`, pooled: raw pooled over the candidates,
  -inf elsewhere).
  """
  per_layer = []
  for q, k in qk:
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    b, t, n, h = q.shape
    kv = k.shape[2]
    g, wq = n // kv, window + lookahead + 1
    score = np.zeros((b, kv, capacity))
    for bi in range(b):
      for kh in range(kv):
        rows = []
        for qh in range(kh * g, (kh + 1) * g):
          for i in range(t - wq, t):
            z = q[bi, i, qh] @ k[bi, :, kh].T / np.sqrt(h)
            z = np.where(np.arange(t) <= i, z, -np.inf)
            e = np.exp(z - z.max())
            rows.append(e / e.sum())
        rows = np.stack(rows)
        score[bi, kh, :t] = rows.max(0) if reduce == "max" else rows.mean(0)
    per_layer.append(score)
  raw = (np.mean(per_layer, 0) if layer_reduce == "mean"
         else np.max(per_layer, 0))
  n_cand, half = t - wq, kernel // 2
  pooled = np.full_like(raw, -np.inf)
  for j in range(n_cand):
    lo, hi = max(0, j - half), min(n_cand, j + half + 1)
    pooled[..., j] = raw[..., lo:hi].max(-1)
  return raw, pooled


class SpecKVScoresTest(parameterized.TestCase):
  """`speckv_scores` (what the "speckv" policy ranks) and the raw
  `cache_key_scores` under it, against `reference_speckv_scores` on a
  2-layer GQA model (4 query heads, 2 KV heads)."""

  LOOKAHEAD, WINDOW, KERNEL = 3, 2, 3
  REDUCTIONS = (("max", "mean"), ("mean", "max"))  # (reduce, layer_reduce)

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    model = tiny_models.tiny_decoder(3)
    graphdef, state = nnx.split(model)
    rng = np.random.default_rng(4)
    ids = jnp.asarray(rng.integers(1, 64, (2, 14)), jnp.int32)
    cls.capacity = ids.shape[1] + 2  # two empty slots, as in a prefill

    @jax.jit
    def run(state, ids):
      m = nnx.merge(graphdef, state)
      b, t = ids.shape
      mask = jnp.ones((b, t), bool)
      positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
      out = m.forward(ids, positions=positions, attention_mask=mask,
                      cache=m.init_cache(b, cls.capacity),
                      output_hidden_states=True)
      prefill = kv_policies.PrefillInfo(
          hidden_states=out.hidden_states, positions=positions,
          attention_mask=mask, start=jnp.int32(0))
      scores = {}
      for reduce, layer_reduce in cls.REDUCTIONS:
        scores[reduce, layer_reduce] = (
            kv_policies.speckv_scores(
                out.cache, model=m, prefill=prefill,
                lookahead=cls.LOOKAHEAD, window=cls.WINDOW,
                kernel=cls.KERNEL, reduce=reduce, layer_reduce=layer_reduce),
            kv_policies.cache_key_scores(
                m, out.cache, prefill,
                observation=cls.WINDOW + cls.LOOKAHEAD + 1, reduce=reduce,
                layer_reduce=layer_reduce))
      # The reference's queries and keys come from a plain (cacheless) pass.
      return scores, m.forward(ids, output_qk=True).qk
    cls.scores, cls.qk = jax.device_get(run(state, ids))

  @parameterized.parameters(*REDUCTIONS)
  def test_scores_match_numpy_reference(self, reduce, layer_reduce):
    pooled, raw = self.scores[reduce, layer_reduce]
    want_raw, want_pooled = reference_speckv_scores(
        self.qk, lookahead=self.LOOKAHEAD, window=self.WINDOW,
        kernel=self.KERNEL, reduce=reduce, layer_reduce=layer_reduce,
        capacity=self.capacity)
    self.assertEqual(raw.shape, (2, 2, self.capacity))
    np.testing.assert_allclose(raw, want_raw, rtol=1e-5, atol=1e-7)
    # Candidates: slots 0..7 (14 - 3 lookahead - 1 last prompt - 2 window).
    np.testing.assert_array_equal(np.isfinite(pooled),
                                  np.isfinite(want_pooled))
    self.assertEqual(int(np.isfinite(pooled[0, 0]).sum()), 8)
    fin = np.isfinite(want_pooled)
    np.testing.assert_allclose(pooled[fin], want_pooled[fin], rtol=1e-5,
                               atol=1e-7)
    # Not vacuous: pooling changed some candidate, the heads disagree.
    self.assertGreater(np.abs(want_pooled[fin] - want_raw[fin]).max(), 1e-3)
    self.assertGreater(np.abs(want_raw[:, 0] - want_raw[:, 1]).max(), 1e-3)


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
    got = speckv_lib.speckv_generate(self.model, self.draft, PROMPTS,
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
      speckv_lib.speckv_generate(self.model, bad, PROMPTS, budget=8,
                                  window=2, max_new_tokens=2)


if __name__ == "__main__":
  absltest.main()
