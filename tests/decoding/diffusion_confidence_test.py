"""Tests for `confidence=` of jaxlab.decoding.diffusion.generate (issue 43).

The scores are checked by hand on tiny logits; the decode order against a
NumPy port of Dream's `sample_tokens` (Sitaoooo/DPad@44c7b5b
dream/model/generation_utils_block.py:97-129) and of the selection of its
loops: the fixed-schedule top-k of `alg=entropy` (:1194-1209) and the
`alg=confidence_threshold` loop (:1169-1179), on a tiny random bidirectional
decoder, step by step. Dream's per-step counts (`schedule="dream"`) against
its loop's arithmetic run in torch (`torch.linspace` timesteps, float32
int(n (1 - s / t)), :1180-1190).
"""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.configs import dpad as dpad_cfg
from jaxlab.decoding import diffusion
from jaxlab.evals import diffusion_decode
from jaxlab.models import decoder as dec
from jaxlab.testing import tiny_models

MASK = 63
PROMPTS = [[5, 17, 3, 22], [40, 41, 42, 7]]
GEN = 16


def ref_sample_tokens(logits, margin_confidence=False, neg_entropy=False):
  """Dream's `sample_tokens` at temperature 0 (no top-p / top-k), float64:
  probs = softmax(logits); confidence, x0 = probs.max(-1); then the margin
  (sorted top1 - top2) or the negative entropy sum p log(p + 1e-10)."""
  logits = np.asarray(logits, np.float64)
  z = np.exp(logits - logits.max(-1, keepdims=True))
  probs = z / z.sum(-1, keepdims=True)
  confidence, x0 = probs.max(-1), probs.argmax(-1)
  if margin_confidence:
    sorted_probs = -np.sort(-probs, axis=-1)
    confidence = sorted_probs[:, 0] - sorted_probs[:, 1]
  if neg_entropy:
    confidence = np.sum(probs * np.log(probs + 1e-10), axis=-1)
  return confidence, x0


_FLAGS = {"prob": {}, "margin": {"margin_confidence": True},
          "entropy": {"neg_entropy": True}}


def ref_select(full_confidence, *, count=None, threshold=None):
  """One row's transfer set from `full_confidence` (-inf off the mask), as
  the reference loops pick it: `torch.topk(full_confidence, count)`
  (:1198-1200), or the threshold loop (:1169-1178): topk over the block's
  masked count, the first always kept, each later one dropped when its
  confidence < threshold. Returns (selected positions, smallest gap at a
  decision boundary)."""
  order = np.argsort(-full_confidence, kind="stable")
  n_masked = int(np.isfinite(full_confidence).sum())
  if n_masked == 0:  # this row's block is done (another row's is not)
    return [], np.inf
  if count is not None:
    sel = list(order[:count])
    gap = (full_confidence[order[count - 1]] - full_confidence[order[count]]
           if count < n_masked else np.inf)
    return sel, gap
  top = order[:n_masked]
  sel = [top[0]] + [j for j in top[1:] if full_confidence[j] >= threshold]
  conf = full_confidence[top]
  gaps = np.abs(conf[1:] - threshold) if n_masked > 1 else np.array([np.inf])
  top_gap = conf[0] - conf[1] if n_masked > 1 else np.inf
  return sel, min(float(gaps.min()), float(top_gap))


class ConfidenceScoresTest(absltest.TestCase):

  def test_hand_computed_scores(self):
    p = np.array([[0.5, 0.3, 0.2], [1 / 3, 1 / 3, 1 / 3],
                  [0.1, 0.7, 0.2]])
    logits = jnp.asarray(np.log(p) + 1.5, jnp.float32)  # shift-invariant
    x0 = jnp.argmax(logits, -1)

    def score(mode, temperature=0.0):
      return np.asarray(diffusion.confidence_scores(
          logits, x0, mode, temperature=temperature))

    np.testing.assert_allclose(score("prob"), [0.5, 1 / 3, 0.7], atol=1e-6)
    np.testing.assert_allclose(score("margin"), [0.2, 0.0, 0.5], atol=1e-6)
    h0 = 0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2)
    h2 = 0.1 * math.log(0.1) + 0.7 * math.log(0.7) + 0.2 * math.log(0.2)
    np.testing.assert_allclose(score("entropy"),
                               [h0, -math.log(3), h2], atol=1e-6)
    self.assertAlmostEqual(h0, -1.02965, places=4)
    # Dream tempers before scoring: at T = 2, p ~ sqrt(p) (row 0:
    # sqrt(.5, .3, .2) / 1.70204 = .41545, .32180, .26275).
    q = np.sqrt(p[0]) / np.sqrt(p[0]).sum()
    self.assertAlmostEqual(float(q[0]), 0.41545, places=4)
    np.testing.assert_allclose(score("margin", 2.0)[0], q[0] - q[1],
                               atol=1e-6)
    np.testing.assert_allclose(score("entropy", 2.0)[0],
                               np.sum(q * np.log(q)), atol=1e-6)
    # LLaDA's "prob" stays the untempered softmax (generate.py's x0_p).
    np.testing.assert_allclose(score("prob", 2.0)[0], 0.5, atol=1e-6)

  def test_scores_equal_the_reference_port(self):
    logits = np.random.default_rng(0).normal(0, 2, (5, 11))
    for mode, flags in _FLAGS.items():
      want, x0 = ref_sample_tokens(logits, **flags)
      got = diffusion.confidence_scores(jnp.asarray(logits, jnp.float32),
                                        jnp.asarray(x0), mode)
      np.testing.assert_allclose(np.asarray(got), want, atol=1e-5,
                                 err_msg=mode)

  def test_select_transfer_hand_cases(self):
    conf = jnp.asarray([[0.2, 0.9, 0.5, 0.95], [-1.0, -0.1, -3.0, -0.5]])
    masked = jnp.asarray([[True, True, True, False], [True, True, True,
                                                      True]])
    got = diffusion.select_transfer(conf, masked, count=jnp.asarray([2, 1]))
    np.testing.assert_array_equal(got, [[False, True, True, False],
                                        [False, True, False, False]])
    # Threshold: the best masked one always, plus every one >= tau.
    got = diffusion.select_transfer(conf, masked, threshold=0.6)
    np.testing.assert_array_equal(got, [[False, True, False, False],
                                        [False, True, False, False]])
    got = diffusion.select_transfer(conf, masked, threshold=-0.7)
    np.testing.assert_array_equal(got, [[True, True, True, False],
                                        [False, True, False, True]])


_THRESHOLDS = {
    "prob": (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.06, 0.04),
    "margin": (0.05, 0.1, 0.15, 0.2, 0.3, 0.03, 0.02, 0.01),
    "entropy": (-3.0, -2.5, -2.0, -1.5, -3.5, -3.8, -4.0, -1.0)}


class _NoMaskDecoder(nnx.Module):
  """A random decoder that never predicts MASK (logit -1e9), so every
  transfer really unmasks and the schedule ends each block on time."""

  def __init__(self, inner):
    self.inner = inner
    self.cfg = inner.cfg

  def forward(self, ids, *, positions, attention_mask, causal, cache=None):
    assert cache is None, "the parity test runs without a cache"
    logits = self.inner.forward(ids, positions=positions,
                                attention_mask=attention_mask,
                                causal=causal).logits
    return dec.DecoderOutput(logits=logits.at[..., MASK].set(-1e9))


class DreamOrderParityTest(parameterized.TestCase):
  """`generate(confidence=...)` against the reference port, step by step,
  on a tiny random bidirectional decoder (no cache, no DPad)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = _NoMaskDecoder(tiny_models.tiny_decoder(
        3, causal=False, num_layers=2, max_position_embeddings=64))

  def _logits(self, x):
    length = x.shape[1]
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), x.shape)
    return np.asarray(self.model.forward(
        jnp.asarray(x, jnp.int32), positions=pos,
        attention_mask=jnp.ones(x.shape, bool), causal=False).logits)

  def _reference(self, mode, *, block_len, steps=None, threshold=None,
                 dream=False):
    """Decodes with the reference selection; at every step also checks
    the library's `confidence_scores` + `select_transfer` pick the same
    positions. `dream`: the counts of Dream's `alg=entropy` loop
    (`dream_reference_count`). Returns (tokens, per-step selections, min
    boundary gap)."""
    x = np.array([p + [MASK] * GEN for p in PROMPTS])
    b, length = x.shape
    p_len = length - GEN
    history, min_gap = [], np.inf
    self._not_left_to_right = 0
    per_block = None if steps is None else steps // (GEN // block_len)
    for start in range(p_len, length, block_len):
      counts = (diffusion.num_transfer_tokens(block_len, per_block)
                if per_block else None)
      step = 0
      while (x[:, start:start + block_len] == MASK).any():
        if dream:  # Dream's i = step + 1; every row has as many masks
          left = (x[:, start:start + block_len] == MASK).sum(1)
          self.assertEqual(len(set(left.tolist())), 1)
          counts = {step: dream_reference_count(int(left[0]), step + 1,
                                                per_block)}
        logits = self._logits(x)[:, start:start + block_len]
        masked = x[:, start:start + block_len] == MASK
        want = np.zeros_like(masked)
        x0_all = np.zeros(masked.shape, np.int64)
        for row in range(b):
          conf, x0 = ref_sample_tokens(logits[row], **_FLAGS[mode])
          full = np.where(masked[row], conf, -np.inf)
          if counts is not None:
            sel, gap = ref_select(full, count=int(counts[step]))
          else:
            sel, gap = ref_select(full, threshold=threshold)
          min_gap = min(min_gap, gap)
          want[row, sel] = True
          x0_all[row] = x0
        lib_conf = diffusion.confidence_scores(
            jnp.asarray(logits), jnp.asarray(x0_all), mode)
        got = diffusion.select_transfer(
            lib_conf, jnp.asarray(masked),
            count=None if counts is None else jnp.full(
                (b,), int(counts[step])),
            threshold=threshold)
        np.testing.assert_array_equal(np.asarray(got), want,
                                      err_msg=f"{mode} step {step}")
        blk = x[:, start:start + block_len]
        x[:, start:start + block_len] = np.where(want, x0_all, blk)
        history.append(want)
        for row in range(b):
          n = int(want[row].sum())
          leftmost = np.flatnonzero(masked[row])[:n]
          self._not_left_to_right += int(
              not np.array_equal(np.flatnonzero(want[row]), leftmost))
        step += 1
    return x[:, p_len:], history, min_gap

  @parameterized.product(mode=("prob", "entropy", "margin"),
                         path=("schedule", "threshold"))
  def test_unmasking_order_matches_reference(self, mode, path):
    block_len = 8
    if path == "schedule":
      kw = dict(steps=6)            # 3 steps a block: 3, 3, 2 tokens
      want, history, min_gap = self._reference(mode, block_len=block_len,
                                               **kw)
    else:
      # The first threshold (on this model's score scale) that both admits
      # several tokens in a step and holds some back, away from every
      # decision boundary.
      for tau in _THRESHOLDS[mode]:
        kw = dict(threshold=tau)
        want, history, min_gap = self._reference(mode, block_len=block_len,
                                                 **kw)
        n_admitted = max(int(h.sum(1).max()) for h in history)
        if (min_gap > 1e-3 and n_admitted > 1
            and GEN // block_len < len(history) < GEN):
          break
      else:
        self.fail(f"no well-posed threshold for {mode}")
    # Well posed: no decision within float32 noise of a boundary.
    self.assertGreater(min_gap, 1e-4)
    got = diffusion.generate(self.model, PROMPTS, gen_len=GEN,
                             block_len=block_len, mask_id=MASK,
                             prompt_bucket=len(PROMPTS[0]),
                             confidence=mode, **kw)
    np.testing.assert_array_equal(got.tokens, want)
    self.assertEqual(got.nfe, len(history))
    per_step = np.array([h.sum(1) for h in history])      # [steps, B]
    if path == "threshold":  # the threshold both admits and holds back
      self.assertTrue((per_step > 1).any())
      self.assertLess(len(history), GEN)
      self.assertGreater(len(history), GEN // block_len)
    # Not vacuous: some step does not unmask the leftmost masked positions.
    self.assertGreater(self._not_left_to_right, 0)

  @parameterized.parameters("entropy", "prob")
  def test_dream_schedule_matches_dreams_loop(self, mode):
    # 8-token blocks, 4 steps a block: Dream unmasks 2, 2, 4 (three
    # forwards a block), not LLaDA's 2, 2, 2, 2.
    self.assertEqual(diffusion.dream_transfer_counts(8, 4), [2, 2, 4])
    want, history, min_gap = self._reference(mode, block_len=8, steps=8,
                                             dream=True)
    self.assertGreater(min_gap, 1e-4)
    self.assertEqual([int(h.sum(1)[0]) for h in history], [2, 2, 4] * 2)
    kw = dict(gen_len=GEN, block_len=8, steps=8, mask_id=MASK,
              prompt_bucket=len(PROMPTS[0]), confidence=mode)
    got = diffusion.generate(self.model, PROMPTS, schedule="dream", **kw)
    np.testing.assert_array_equal(got.tokens, want)
    self.assertEqual(got.nfe, 6)
    self.assertEqual(diffusion.generate(self.model, PROMPTS, **kw).nfe, 8)

  def test_modes_order_differently(self):
    orders = {m: self._reference(m, block_len=8, steps=6)[1]
              for m in ("prob", "entropy", "margin")}
    for a, b in (("prob", "entropy"), ("prob", "margin"),
                 ("entropy", "margin")):
      self.assertFalse(all(np.array_equal(u, v) for u, v in
                           zip(orders[a], orders[b])), (a, b))

  def test_default_is_prob(self):
    kw = dict(gen_len=GEN, block_len=8, mask_id=MASK, steps=6,
              prompt_bucket=len(PROMPTS[0]))
    np.testing.assert_array_equal(
        diffusion.generate(self.model, PROMPTS, **kw).tokens,
        diffusion.generate(self.model, PROMPTS, confidence="prob",
                           **kw).tokens)

  def test_errors(self):
    kw = dict(gen_len=GEN, block_len=8, mask_id=MASK)
    with self.assertRaisesRegex(ValueError, "confidence='top1' is unknown"):
      diffusion.generate(self.model, PROMPTS, confidence="top1", **kw)
    with self.assertRaisesRegex(ValueError, "must be <= 0"):
      diffusion.generate(self.model, PROMPTS, confidence="entropy",
                         threshold=0.9, **kw)


def dream_reference_count(left: int, i: int, steps_per_block: int,
                          eps: float = 1e-3) -> int:
  """Dream's count at loop index i (generation_utils_block.py:1180-1190),
  its own arithmetic in torch: float32 timesteps from torch.linspace, the
  masked count averaged over the batch (a float32 tensor)."""
  import torch  # pylint: disable=g-import-not-at-top
  timesteps = torch.linspace(1, eps, steps_per_block + 1)
  mask_index = torch.ones((1, left), dtype=torch.bool)
  t, s = timesteps[i], timesteps[i + 1]
  num_mask_token = mask_index.sum() / mask_index.shape[0]
  return (int(num_mask_token * (1 - s / t)) if i < steps_per_block - 1
          else int(num_mask_token))


class DreamScheduleTest(parameterized.TestCase):
  """`schedule="dream"`: Dream's per-step unmask counts."""

  def test_timesteps_equal_torch_linspace(self):
    import torch  # pylint: disable=g-import-not-at-top
    for steps in range(1, 257):
      for eps in (1e-3, 1e-2):
        np.testing.assert_array_equal(
            diffusion.dream_timesteps(steps, eps),
            torch.linspace(1, eps, steps + 1).numpy(),
            err_msg=f"steps={steps} eps={eps}")

  def test_hand_computed_counts(self):
    # timesteps(4) = 1, .75025, .5005, .25075, .001: 32 * (1 - .5005 /
    # .75025) = 10.65 -> 10; 22 * (1 - .25075 / .5005) = 10.98 -> 10;
    # the last step takes the 12 left.
    self.assertEqual(diffusion.dream_transfer_counts(32, 4), [10, 10, 12])
    # Two steps a block: one forward unmasks everything.
    self.assertEqual(diffusion.dream_transfer_counts(8, 2), [8])
    with self.assertRaisesRegex(ValueError, "steps >= 2"):
      diffusion.dream_transfer_counts(8, 1)

  def test_counts_equal_dreams_loop(self):
    for n in (1, 5, 8, 32, 64, 100):
      for spb in (2, 3, 4, 7, 8, 16, 32, 64):
        want, left = [], n
        for i in range(1, spb):
          k = dream_reference_count(left, i, spb)
          want.append(k)
          left -= k
          if left == 0:
            break
        got = diffusion.dream_transfer_counts(n, spb)
        # Dream's loop stops once the block has no mask; the library's
        # list runs to the last step (zeros after the block is done).
        self.assertEqual(got[:len(want)], want, (n, spb))
        self.assertEqual(sum(got), n)
        self.assertTrue(all(k == 0 for k in got[len(want):]), (n, spb))


class DreamScheduleDecodeTest(absltest.TestCase):

  def test_cached_decode_spends_dreams_forwards(self):
    model = tiny_models.tiny_decoder(3, causal=False, num_layers=1,
                                     max_position_embeddings=64)
    for cache in ("prefix", "dual"):
      got = diffusion.generate(model, PROMPTS, gen_len=GEN, block_len=8,
                               steps=8, mask_id=MASK, cache=cache,
                               prompt_bucket=len(PROMPTS[0]),
                               schedule="dream")
      self.assertEqual(got.nfe, 6, cache)   # 3 forwards a block

  def test_errors(self):
    kw = dict(gen_len=GEN, block_len=8, mask_id=MASK)
    model = tiny_models.tiny_decoder(3, causal=False, num_layers=1,
                                     max_position_embeddings=64)
    with self.assertRaisesRegex(ValueError, "schedule='even' is unknown"):
      diffusion.generate(model, PROMPTS, schedule="even", **kw)
    with self.assertRaisesRegex(ValueError, "pass one or the other"):
      diffusion.generate(model, PROMPTS, schedule="dream", threshold=0.9,
                         **kw)
    with self.assertRaisesRegex(ValueError, "at least 2 steps a block"):
      diffusion.generate(model, PROMPTS, schedule="dream", steps=2, **kw)


class ConfigTest(absltest.TestCase):

  def test_dream_presets_rank_by_entropy_threshold_by_prob(self):
    for arg in ("paper,model=dream", "paper,task=gsm8k,model=dream"):
      c = dpad_cfg.get_config(arg)
      self.assertEqual(c.decode.confidence, "entropy")
      self.assertEqual(c.decode.threshold_confidence, "prob")
      # run.py:44-52: -th 0 -> alg=entropy; -th 0.9 ->
      # alg=confidence_threshold (the top-1 probability).
      self.assertEqual(diffusion_decode.variant_kwargs(
          c, "vanilla")["confidence"], "entropy")
      self.assertEqual(diffusion_decode.variant_kwargs(
          c, "+DPad")["confidence"], "entropy")
      self.assertNotIn("confidence",
                       diffusion_decode.variant_kwargs(c, "+threshold"))
      # ... and Dream's per-step counts on the fixed-schedule variants.
      self.assertEqual(c.decode.schedule, "dream")
      kw = diffusion_decode.variant_kwargs(c, "vanilla")
      self.assertEqual((kw["schedule"], kw["eps"]), ("dream", 1e-3))
      self.assertNotIn("schedule",
                       diffusion_decode.variant_kwargs(c, "+threshold"))
    for arg in ("paper,task=gsm8k", "tiny"):
      c = dpad_cfg.get_config(arg)
      self.assertEqual(c.decode.confidence, "prob")
      self.assertNotIn("confidence",
                       diffusion_decode.variant_kwargs(c, "vanilla"))
      self.assertNotIn("schedule",
                       diffusion_decode.variant_kwargs(c, "vanilla"))


if __name__ == "__main__":
  absltest.main()
