"""SpecPC, the SpecKV-PC cascade and the baselines (paper M)."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxlab.decoding import prompt_compression as pc
from jaxlab.decoding import sampler
from jaxlab.testing import tiny_models


def reference_select(scores, max_capacity_prompt, kernel_size,
                     neighbor_tokens, window_size):
  """NumPy port of the reference's `specpc_select_input_token_indices`.

  Written from its steps (furiosa-ai/draft-based-approx-llm,
  `specpc/specpc.py`), for one prompt, with the sorts made stable (ties to
  the lower index, -d before +d), as `pc.select_tokens` documents.
  """
  seq_len = len(scores)
  # Centre max-pool: F.pad (zeros) by ((k-1)//2, k-1-(k-1)//2), stride 1.
  left = (kernel_size - 1) // 2
  padded = np.concatenate([np.zeros(left), scores,
                           np.zeros(kernel_size - 1 - left)])
  pooled = np.array([padded[i:i + kernel_size].max()
                     for i in range(seq_len)])
  # topk(max_capacity_prompt, sorted=True), or all positions in order.
  if max_capacity_prompt < seq_len:
    ind = np.lexsort((np.arange(seq_len), -pooled))[:max_capacity_prompt]
  else:
    ind = np.arange(seq_len)
  if neighbor_tokens > 0:
    half = (neighbor_tokens - 1) // 2
    adj = np.arange(-half, neighbor_tokens - 1 - half + 1)
    adj = adj[np.argsort(np.abs(adj), kind="stable")]
    ind = np.clip((ind[:, None] + adj[None, :]).reshape(-1), 0, seq_len - 1)
    ind = list(dict.fromkeys(ind.tolist()))  # pandas.unique: first seen
  ind = list(range(seq_len - window_size, seq_len)) + list(ind)
  ind = list(dict.fromkeys(ind))[:max_capacity_prompt]
  return np.sort(np.asarray(ind))


class SelectTokensTest(parameterized.TestCase):

  def test_hand_example(self):
    scores = np.array([0., 9., 0., 0., 0., 0., 5., 0., 0., 1.])
    # No pooling, a span of 3 (±1) neighbours, keep the last token: window
    # [9] first, then token 1 with 0 and 2, then 6 -> truncated to 5,
    # sorted. (`neighbors` is the span width, as the reference's
    # `neighbor_tokens`; this example once passed neighbors=1 for ±1.)
    got = pc.select_tokens(scores, budget=5, kernel=1, neighbors=3,
                           keep_window=1)
    np.testing.assert_array_equal(got, [0, 1, 2, 6, 9])
    # Pooling (kernel 3) spreads 9 to tokens 0..2; ties keep token order.
    got = pc.select_tokens(scores, budget=3, kernel=3, neighbors=0,
                           keep_window=0)
    np.testing.assert_array_equal(got, [0, 1, 2])
    np.testing.assert_array_equal(
        pc.select_tokens(scores, budget=10, kernel=3), np.arange(10))

  def test_even_kernel_and_span_reach_one_further_right(self):
    # k = 4: s'_i = max(s_{i-1}, ..., s_{i+2}), so the spike at 5 fills
    # 3..6 (a -2..1 window would fill 4..7).
    scores = np.zeros(12)
    scores[5] = 1.0
    np.testing.assert_array_equal(pc._centre_max_pool(scores, 4)[2:8],
                                  [0, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(pc.neighbor_offsets(4), [0, -1, 1, 2])
    np.testing.assert_array_equal(pc.neighbor_offsets(5), [0, -1, 1, -2, 2])
    np.testing.assert_array_equal(pc.neighbor_offsets(0), [0])
    # The plateau 3..6 ranks first from its lower end, 3; 3's span of 4
    # (3, 2, 4, 5) already fills the budget; no window.
    np.testing.assert_array_equal(
        pc.select_tokens(scores, budget=4, kernel=4, keep_window=0),
        [2, 3, 4, 5])

  @parameterized.parameters((4096, 1024, 64, 64), (96, 16, 3, 8),
                            (2048, 256, 32, 64))
  def test_equals_reference(self, seq_len, budget, kernel, window):
    rng = np.random.default_rng(seq_len)
    for scores in (rng.random(seq_len),
                   rng.integers(0, 4, seq_len).astype(float)):  # many ties
      for neighbors in (None, kernel // 2):
        got = pc.select_tokens(scores, budget=budget, kernel=kernel,
                               neighbors=neighbors, keep_window=window)
        want = reference_select(scores, budget, kernel,
                                kernel if neighbors is None else neighbors,
                                window)
        chex.assert_shape(got, (budget,))
        np.testing.assert_array_equal(got, want)

  def test_bad_arguments_are_one_error(self):
    scores = np.ones(8)
    with self.assertRaisesRegex(ValueError, "SpecPC kernel must be >= 1"):
      pc.select_tokens(scores, budget=4, kernel=0)
    with self.assertRaisesRegex(ValueError, "SpecPC neighbors must be >= 0"):
      pc.select_tokens(scores, budget=4, kernel=3, neighbors=-1)
    with self.assertRaisesRegex(ValueError, r"shape \[P\]"):
      pc.select_tokens(np.ones((2, 8)), budget=4, kernel=3)

  def test_baselines(self):
    prompts = [list(range(100, 120)), [1, 2, 3]]
    last = pc.last_n_compress(prompts, budget=5)
    self.assertEqual(last.prompts, [list(range(115, 120)), [1, 2, 3]])
    rnd = pc.COMPRESSORS.get("random")(prompts, budget=6, keep_window=2,
                                       seed=3)
    idx = rnd.indices[0]
    self.assertLen(np.unique(idx), 6)
    np.testing.assert_array_equal(idx, np.sort(idx))
    np.testing.assert_array_equal(idx[-2:], [18, 19])
    self.assertEqual(rnd.prompts[1], [1, 2, 3])

  def test_spearman_matches_scipy(self):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, 30).astype(float)  # ties
    b = a + rng.normal(size=30)
    self.assertAlmostEqual(pc.spearman(a, b), stats.spearmanr(a, b)[0],
                           places=10)


class SpecPCTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.target = tiny_models.tiny_decoder()
    cls.draft = tiny_models.tiny_decoder(1, num_layers=1, dim=16)
    rng = np.random.default_rng(0)
    cls.prompts = [rng.integers(1, 64, 24).tolist(),
                   rng.integers(1, 64, 24).tolist()]
    cls.cfg = pc.SpecPCConfig(lookahead=3, window=6, kernel=3,
                              keep_window=4)

  def test_token_importance_equals_attention_reference(self):
    prompt, gen = self.prompts[0], [7, 8, 9]
    got = pc.token_importance(self.draft, prompt, gen, self.cfg)
    ids = jnp.asarray([prompt + gen[:-1]])
    att = np.asarray(self.draft.forward(ids, output_attentions=True)
                     .attentions[0][0])  # [N, T, T], one layer
    p, w = 24, 6
    win = att[:, p - w:p, :p] * np.linspace(0, 1, w)[None, :, None]
    want = np.max(np.stack([win.max(axis=(0, 1)), att[:, p, :p].max(0),
                            att[:, p + 1, :p].max(0)]), axis=0)
    np.testing.assert_allclose(got, want, atol=1e-6)

  def test_budget_at_least_prompt_returns_prompt(self):
    comp = pc.specpc_compress(self.prompts, budget=24, draft=self.draft,
                              target=self.target, config=self.cfg)
    self.assertEqual(comp.prompts, self.prompts)
    small = pc.specpc_compress(self.prompts, budget=10, draft=self.draft,
                               config=self.cfg)
    for p, kept, idx in zip(self.prompts, small.prompts, small.indices):
      self.assertLen(kept, 10)
      self.assertEqual(kept, [p[i] for i in idx])
      np.testing.assert_array_equal(idx[-4:], [20, 21, 22, 23])

  def test_given_importance_equals_computed(self):
    # Importance computed once and reused (the real-model run selects it at
    # several budgets) gives the indices of computing it inside.
    small = pc.specpc_compress(self.prompts, budget=10, draft=self.draft,
                               config=self.cfg)
    again = pc.specpc_compress(self.prompts, budget=10, draft=self.draft,
                               config=self.cfg,
                               draft_tokens=small.draft_tokens,
                               importance=small.scores)
    for a, b in zip(small.indices, again.indices):
      np.testing.assert_array_equal(a, b)
    flat = [np.ones(24) for _ in self.prompts]  # all ties: window + lowest
    kept = pc.specpc_compress(self.prompts, budget=10, draft=self.draft,
                              config=self.cfg, draft_tokens=small.draft_tokens,
                              importance=flat).indices
    for idx in kept:
      np.testing.assert_array_equal(idx, [0, 1, 2, 3, 4, 5, 20, 21, 22, 23])

  def test_cascade_at_large_budgets_equals_full(self):
    full = sampler.generate(self.target, self.prompts, max_new_tokens=4)
    got, comp = pc.speckv_pc_generate(
        self.target, self.draft, self.prompts, pc_budget=32, budget=32,
        window=2, max_new_tokens=4, config=self.cfg)
    self.assertEqual(comp.prompts, self.prompts)
    self.assertLen(comp.draft_tokens[0], 4)  # the full draft answer
    self.assertEqual(got.tokens, full.tokens)

  def test_vocab_mismatch_is_one_error(self):
    bad = tiny_models.tiny_decoder(1, vocab_size=80)
    with self.assertRaisesRegex(ValueError, "draft vocabulary size 80"):
      pc.specpc_generate(self.target, bad, self.prompts, budget=8,
                         max_new_tokens=2)


if __name__ == "__main__":
  absltest.main()
