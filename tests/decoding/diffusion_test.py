"""Tests for jaxlab.decoding.diffusion (LLaDA / Fast-dLLM / DPad decoding).

One tiny 1-layer bidirectional decoder serves every test: with a single
layer the keys/values of a token depend only on that token and its
position, so prefix and dual caches are exact there (the approximate
multi-layer agreement is measured by the benchmark).
"""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.decoding import diffusion
from jaxlab.models import decoder as dec
from jaxlab.testing import tiny_models

MASK, EOS = 63, 2
PROMPTS = tiny_models.PROMPTS
GEN, BLOCK = 32, 16


class ScheduleTest(absltest.TestCase):

  def test_num_transfer_tokens_hand_cases(self):
    np.testing.assert_array_equal(diffusion.num_transfer_tokens(10, 4),
                                  [3, 3, 2, 2])
    np.testing.assert_array_equal(diffusion.num_transfer_tokens(32, 32),
                                  np.ones(32))
    np.testing.assert_array_equal(diffusion.num_transfer_tokens(3, 5),
                                  [1, 1, 1, 0, 0])
    np.testing.assert_array_equal(
        diffusion.num_transfer_tokens([7, 0], 3), [[3, 2, 2], [0, 0, 0]])
    with self.assertRaisesRegex(ValueError, "steps"):
      diffusion.num_transfer_tokens(4, 0)

  def test_suffix_keep_prob_formula(self):
    w, k, a = 64, 3.0, 1.6
    got = diffusion.suffix_keep_prob(w, k=k, a=a)
    self.assertEqual(got.shape, (w,))
    for d in (0, 1, 10, 63):
      want = a / math.sqrt(2 * math.pi) * math.exp(-0.5 * (k * d / (w - 1))**2)
      self.assertAlmostEqual(float(got[d]), want, places=6)
    self.assertAlmostEqual(float(got[0]), 0.6383, places=4)  # spec: p ~ 0.64
    # E[#kept] ~ a (W/k) 0.4987 for W = 256 (spec: ~68).
    self.assertAlmostEqual(
        float(diffusion.suffix_keep_prob(256, k=3.0, a=1.6).sum()), 68.3,
        delta=0.5)

  def test_dpad_config_errors(self):
    with self.assertRaisesRegex(ValueError, "dpad.sampler"):
      diffusion.DPadConfig(window=8, sampler="beta")
    with self.assertRaisesRegex(ValueError, "dpad.n"):
      diffusion.DPadConfig(window=8, sampler="uniform")


class GenerateTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder(0, causal=False, num_layers=1,
                                         max_position_embeddings=64)
    cls.vanilla = diffusion.generate(cls.model, PROMPTS, gen_len=GEN,
                                     block_len=BLOCK, mask_id=MASK)

  def _gen(self, **kw):
    return diffusion.generate(self.model, PROMPTS, gen_len=GEN,
                              block_len=BLOCK, mask_id=MASK, **kw)

  def test_vanilla_is_one_token_per_step(self):
    self.assertEqual(self.vanilla.nfe, GEN)
    self.assertFalse((self.vanilla.tokens == MASK).any())
    self.assertEqual(self.vanilla.tokens.shape, (len(PROMPTS), GEN))

  def test_threshold_one_equals_one_token_per_step(self):
    out = self._gen(threshold=1.0)
    np.testing.assert_array_equal(out.tokens, self.vanilla.tokens)
    self.assertEqual(out.nfe, GEN)

  def test_dpad_full_window_keep_one_is_vanilla(self):
    # k = 0 and a = 3 > sqrt(2 pi): every suffix token is kept.
    out = self._gen(dpad=diffusion.DPadConfig(window=GEN, k=0.0, a=3.0))
    np.testing.assert_array_equal(out.tokens, self.vanilla.tokens)
    self.assertEqual(out.tokens_processed, self.vanilla.tokens_processed)

  def test_caches_exact_for_one_layer(self):
    prefix = self._gen(cache="prefix")
    dual = self._gen(cache="dual")
    np.testing.assert_array_equal(prefix.tokens, self.vanilla.tokens)
    np.testing.assert_array_equal(dual.tokens, self.vanilla.tokens)
    # Real query tokens: vanilla feeds prompt + whole canvas every step.
    self.assertLess(dual.tokens_processed, prefix.tokens_processed)
    self.assertLess(prefix.tokens_processed, self.vanilla.tokens_processed)
    self.assertLess(dual.flops, self.vanilla.flops)

  def test_early_stop_fills_eos(self):
    eos = int(self.vanilla.tokens[0, 3])  # a token row 0 makes in block 0
    out = self._gen(early_stop=True, eos_id=eos)
    first = self.vanilla.tokens[:, :BLOCK]
    np.testing.assert_array_equal(out.tokens[:, :BLOCK], first)
    for row in range(len(PROMPTS)):
      if (first[row] == eos).any():
        self.assertTrue((out.tokens[row, BLOCK:] == eos).all())
      else:
        np.testing.assert_array_equal(out.tokens[row],
                                      self.vanilla.tokens[row])

  def test_compiles_only_after_dispatched_blocks_finish(self):
    # wall_s subtracts compile seconds: a block compiled while earlier ones
    # still ran would take their device time out of the measurement too
    # (issue 29: 0.56 s measured for 7.0 s of work). With a prefix cache each
    # block position has its own executable, so blocks 1.. compile mid-call.
    real = diffusion._decode_block  # pylint: disable=protected-access
    pending = []

    class Checked:

      def lower(self, *args, **kw):
        arrays = [a for a in jax.tree.leaves(args) if hasattr(a, "is_ready")]
        pending.append(sum(not a.is_ready() for a in arrays))
        return real.lower(*args, **kw)

    diffusion._EXECUTABLES.clear()  # pylint: disable=protected-access
    diffusion._decode_block = Checked()  # pylint: disable=protected-access
    try:
      out = self._gen(cache="prefix", threshold=0.9)
    finally:
      diffusion._decode_block = real  # pylint: disable=protected-access
    self.assertEqual(len(pending), GEN // BLOCK)  # one compile per block
    self.assertEqual(pending, [0] * len(pending))
    self.assertGreater(out.compile_s, 0.0)
    self.assertGreater(out.wall_s, 0.0)

  def test_shift_logits_reads_the_previous_position(self):
    """One block decoded in one step: every token is the argmax of the full
    canvas logits at the position before it (Dream's shifted logits); the
    dual cache agrees with no cache (1 layer: exact)."""
    prompt = np.array([[5, 17, 3, 22]], np.int32)
    canvas = np.concatenate([prompt, np.full((1, 16), MASK, np.int32)], 1)
    logits = np.asarray(jax.jit(lambda x: self.model(x, causal=False))(
        jnp.asarray(canvas)))[0]
    kw = dict(gen_len=16, block_len=16, steps=1, mask_id=MASK,
              prompt_bucket=4)
    shifted = diffusion.generate(self.model, prompt, shift_logits=True, **kw)
    np.testing.assert_array_equal(shifted.tokens[0], logits[3:19].argmax(-1))
    self.assertFalse((logits[3:19].argmax(-1) ==
                      logits[4:20].argmax(-1)).all())
    cached = diffusion.generate(self.model, PROMPTS, gen_len=GEN,
                                block_len=BLOCK, mask_id=MASK,
                                shift_logits=True, cache="dual")
    uncached = diffusion.generate(self.model, PROMPTS, gen_len=GEN,
                                  block_len=BLOCK, mask_id=MASK,
                                  shift_logits=True)
    np.testing.assert_array_equal(cached.tokens, uncached.tokens)

  def test_dropped_suffix_logits_equal_kept_set_run(self):
    """The gathered view (original RoPE ids) equals the full canvas with the
    dropped suffix denied as keys, at every kept position."""
    model = self.model
    b, big_l, be, w = 2, 48, 16, 16
    rng = np.random.default_rng(0)
    x = np.full((b, big_l), MASK, np.int32)
    x[:, :be] = rng.integers(0, 60, (b, be))
    pos = np.broadcast_to(np.arange(big_l, dtype=np.int32), (b, big_l))
    valid = np.ones((b, big_l), bool)
    dpad = diffusion.DPadConfig(window=w, k=3.0, a=1.6)
    slots = diffusion.suffix_slots(dpad, w)
    self.assertLess(slots, w)
    spec = diffusion._BlockSpec(
        block_len=8, view_len=be + slots, query_len=0, cache=None,
        max_steps=1, threshold=None, temperature=0.0, mask_id=MASK,
        dpad=dpad, canvas_len=big_l, suffix_slots=slots, block_start=be - 8)
    view = np.asarray(diffusion._build_view(jax.random.key(3), be, spec, b))
    kept = view[:, be:][view[:, be:] >= 0]
    self.assertGreater(len(kept), 0)
    self.assertTrue((kept < be + w).all())  # nothing beyond the window
    tok, p, v = diffusion._gather(jnp.asarray(x), jnp.asarray(pos),
                                  jnp.asarray(valid), jnp.asarray(view))
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, tok, p, v, x, keys):
      m = nnx.merge(graphdef, state)
      pruned = m.forward(tok, positions=p, attention_mask=v, causal=False)
      full = m.forward(x, causal=False, allowed_mask=keys[:, None, None, :])
      return pruned.logits, full.logits

    keys = np.zeros((b, big_l), bool)
    for row in range(b):
      keys[row, view[row][view[row] >= 0]] = True
    pruned, full_all = map(np.asarray, run(state, tok, p, v, jnp.asarray(x),
                                           jnp.asarray(keys)))
    for row in range(b):
      full = full_all[row]
      idx = view[row][view[row] >= 0]
      np.testing.assert_allclose(pruned[row, :len(idx)], full[idx],
                                 rtol=1e-4, atol=1e-4)


# -- low-confidence remasking against a plain-Python reference ---------------

_VOCAB, _POSITIONS = 64, 32       # MASK = 63 is the last id
_TOKEN_STRIDE = 7                 # predicted id = (7 p + n_known) mod 63


def _context_margins(base, gain, ids, positions, known):
  """NumPy twin of `_ContextModel`'s margins `[B, T]` (float64)."""
  g = gain[positions]                                  # [B, T, V]
  ctx = np.einsum("btv,bsv->bt", g, np.eye(_VOCAB)[ids] * known[..., None])
  raw = base[positions] + ctx
  return 0.5 + np.log1p(np.exp(raw))                   # 0.5 + softplus


class _ContextModel(nnx.Module):
  """A deterministic mask predictor whose decode order is observable.

  At position p, with n_known unmasked real tokens in the row, it predicts
  id (7 p + n_known) mod 63 (never MASK) with logit margin
  m_p = 0.5 + softplus(base[p] + sum_{known j} gain[p, x_j]) over 0 for
  every other id. So the confidence softmax(logits)[argmax] =
  e^m / (e^m + 63) moves with the context (the greedy order is not fixed),
  and the final id at a position tells how many tokens were known when it
  was unmasked, i.e. the step that unmasked it.
  """

  def __init__(self, seed: int):
    self.cfg = dec.DecoderConfig(vocab_size=_VOCAB, dim=8, num_layers=1,
                                 num_heads=1, num_kv_heads=1, mlp_dim=8,
                                 max_position_embeddings=_POSITIONS)
    rng = np.random.default_rng(seed)
    self.base = nnx.Param(jnp.asarray(rng.uniform(-2.0, 2.0, _POSITIONS),
                                      jnp.float32))
    self.gain = nnx.Param(jnp.asarray(
        rng.normal(0.0, 0.5, (_POSITIONS, _VOCAB)), jnp.float32))

  def forward(self, ids, *, positions, attention_mask, causal, cache=None):
    del causal
    assert cache is None, "the reference test runs without a cache"
    known = (attention_mask & (ids != MASK)).astype(jnp.float32)
    ctx = jnp.einsum("btv,bsv->bt", self.gain[...][positions],
                     jax.nn.one_hot(ids, _VOCAB) * known[..., None])
    margin = 0.5 + jax.nn.softplus(self.base[...][positions] + ctx)
    n_known = jnp.sum(known, axis=1).astype(jnp.int32)[:, None]
    token = (_TOKEN_STRIDE * positions + n_known) % (_VOCAB - 1)
    return dec.DecoderOutput(
        logits=margin[..., None] * jax.nn.one_hot(token, _VOCAB))


def reference_low_confidence_decode(model, prompts, *, gen_len, block_len,
                                    steps):
  """LLaDA's semi-autoregressive low-confidence remasking, in plain NumPy.

  The canvas [prompt | MASK * gen_len] is decoded block by block with
  steps / num_blocks steps per block; step i of a block unmasks
  n_i = floor(block_len / S) + [i < block_len mod S] tokens (LLaDA's
  `get_num_transfer_tokens`): every masked position of the block is
  predicted (argmax), the n_i most confident predictions are kept and the
  rest stay masked.

  Returns (tokens [B, gen_len], known_at [B, gen_len]: the number of
  known tokens of the row when each position was unmasked, min_gap: the
  smallest confidence gap at a keep / remask boundary).
  """
  base, gain = np.asarray(model.base[...], np.float64), np.asarray(
      model.gain[...], np.float64)
  x = np.array([list(p) + [MASK] * gen_len for p in prompts])
  b, length = x.shape
  p_len = length - gen_len
  positions = np.broadcast_to(np.arange(length), (b, length))
  known_at = np.full((b, gen_len), -1)
  min_gap = np.inf
  per_block = steps // (gen_len // block_len)
  counts = [block_len // per_block + (i < block_len % per_block)
            for i in range(per_block)]
  for start in range(p_len, length, block_len):
    for count in counts:
      known = x != MASK
      margins = _context_margins(base, gain, x, positions, known)
      n_known = known.sum(1)
      for row in range(b):
        masked = [j for j in range(start, start + block_len)
                  if x[row, j] == MASK]
        # softmax(logits)[argmax] for logits = margin * one_hot(id).
        conf = {j: np.exp(margins[row, j]) / (np.exp(margins[row, j])
                                              + _VOCAB - 1) for j in masked}
        ranked = sorted(masked, key=lambda j: -conf[j])
        if count < len(ranked):
          min_gap = min(min_gap, conf[ranked[count - 1]] - conf[ranked[count]])
        for j in ranked[:count]:
          x[row, j] = (_TOKEN_STRIDE * j + n_known[row]) % (_VOCAB - 1)
          known_at[row, j - p_len] = n_known[row]
  return x[:, p_len:], known_at, min_gap


class LowConfidenceRemaskingTest(parameterized.TestCase):
  """`generate`'s fixed-schedule decoding (no threshold, cache or DPad)
  against `reference_low_confidence_decode` on `_ContextModel`."""

  PROMPTS = [[5, 17, 3, 22], [40, 41, 42, 7]]

  @parameterized.named_parameters(
      ("one_token_per_step", 8, 16),       # LLaDA's vanilla setting
      ("uneven_schedule", 8, 6),           # 3 steps a block: 3, 3, 2
      ("one_block", 16, 5))                # 4, 3, 3, 3, 3
  def test_tokens_and_unmasking_order_match_reference(self, block_len,
                                                      steps):
    gen_len = 16
    model = _ContextModel(seed=1)
    got = diffusion.generate(model, self.PROMPTS, gen_len=gen_len,
                             block_len=block_len, steps=steps, mask_id=MASK,
                             prompt_bucket=len(self.PROMPTS[0]))
    want, known_at, min_gap = reference_low_confidence_decode(
        model, self.PROMPTS, gen_len=gen_len, block_len=block_len,
        steps=steps)
    # Well posed: every keep / remask boundary is far above float32
    # rounding of the confidences (~1e-7), so the library cannot tie-break
    # differently from the float64 reference.
    self.assertGreater(min_gap, 1e-4)
    np.testing.assert_array_equal(got.tokens, want)
    self.assertEqual(got.nfe, steps)
    # The known-token count at unmasking time, read back from the ids the
    # library produced (ids are distinct mod 63 over the range of counts).
    p_len = len(self.PROMPTS[0])
    pos = p_len + np.arange(gen_len)
    got_known_at = (got.tokens - _TOKEN_STRIDE * pos) % (_VOCAB - 1)
    np.testing.assert_array_equal(got_known_at, known_at)
    # Not vacuous: the order is neither left to right nor shared by rows.
    for row in range(len(self.PROMPTS)):
      self.assertFalse(np.all(np.diff(known_at[row]) >= 0))
    self.assertFalse(np.array_equal(known_at[0], known_at[1]))


class MeshTest(absltest.TestCase):
  """Decoding with the batch sharded over a data mesh axis (8 fake CPU
  devices, tests/conftest.py) gives exactly the unsharded tokens."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    if jax.device_count() < 8:
      raise absltest.SkipTest("needs 8 (fake CPU) devices")
    cls.model = tiny_models.tiny_decoder(0, causal=False, num_layers=1,
                                         max_position_embeddings=64)
    rng = np.random.default_rng(1)
    cls.prompts = [list(rng.integers(3, 60, n)) for n in (3, 5, 7, 4, 6, 2,
                                                         8, 5)]
    cls.mesh = parallel.make_mesh({"data": 8, "fsdp": 1, "tensor": 1},
                                  devices=jax.devices()[:8])

  def test_sharded_equals_unsharded(self):
    kw = dict(gen_len=GEN, block_len=BLOCK, mask_id=MASK, eos_id=EOS,
              threshold=0.5, cache="prefix", early_stop=True,
              dpad=diffusion.DPadConfig(window=16, k=3.0, a=1.6))
    plain = diffusion.generate(self.model, self.prompts, **kw)
    sharded = diffusion.generate(self.model, self.prompts, mesh=self.mesh,
                                 **kw)
    np.testing.assert_array_equal(sharded.tokens, plain.tokens)
    self.assertEqual(sharded.nfe, plain.nfe)
    self.assertEqual(sharded.tokens_processed, plain.tokens_processed)
    # The compiled block really ran with its batch split over 8 devices
    # (other tests in this process may have left 1-device executables).
    spans = [len(e.input_shardings[0][1].device_set)
             for k, e in diffusion._EXECUTABLES.items()
             if "data" in str(k[3])]
    self.assertIn(8, spans)

  def test_batch_must_split_over_the_mesh(self):
    with self.assertRaisesRegex(ValueError, "7 prompts do not split over "
                                "the mesh's 8 batch shards"):
      diffusion.generate(self.model, self.prompts[:7], gen_len=GEN,
                         block_len=BLOCK, mask_id=MASK, mesh=self.mesh)


class BadInputTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder(0, causal=False, num_layers=1,
                                         max_position_embeddings=64)

  def test_prompt_longer_than_positions(self):
    with self.assertRaisesRegex(ValueError, "max_position_embeddings"):
      diffusion.generate(self.model, [list(range(40))], gen_len=32,
                         block_len=16, mask_id=MASK)

  def test_gen_len_not_multiple_of_block(self):
    with self.assertRaisesRegex(ValueError, "gen_len=40 .*block_len=16"):
      diffusion.generate(self.model, PROMPTS, gen_len=40, block_len=16,
                         mask_id=MASK)

  def test_mask_id_outside_vocab(self):
    with self.assertRaisesRegex(ValueError, "mask_id=64 is outside"):
      diffusion.generate(self.model, PROMPTS, gen_len=32, block_len=16,
                         mask_id=64)


if __name__ == "__main__":
  absltest.main()
