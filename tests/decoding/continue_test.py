"""Continuing generation from a returned cache, and image/prefix inputs."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.decoding import sampler
from jaxlab.testing import tiny_models

PROMPTS = tiny_models.PROMPTS
_model = tiny_models.tiny_decoder


class ContinueFromCacheTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = _model()

  def _six_then_six(self, **kw):
    first = sampler.generate(self.model, PROMPTS, max_new_tokens=6,
                             return_cache=True, **kw)
    second = sampler.generate(
        self.model, [row[-1:] for row in first.tokens], cache=first.cache,
        max_new_tokens=6, step_offset=6, **kw)
    return first, second

  def test_greedy_equals_one_call(self):
    one = sampler.generate(self.model, PROMPTS, max_new_tokens=12)
    first, second = self._six_then_six()
    joined = [a + b for a, b in zip(first.tokens, second.tokens)]
    self.assertEqual(joined, one.tokens)
    # The returned cache holds the prompt and the first 5 generated tokens
    # (the 6th is the next prompt), with contiguous positions per row.
    pos = np.asarray(first.cache.positions)[:, 0]
    for row, prompt in zip(pos, PROMPTS):
      real = row[row >= 0]
      np.testing.assert_array_equal(real, np.arange(len(prompt) + 5))

  def test_sampled_with_fixed_key_equals_one_call(self):
    kw = dict(temperature=1.0, top_k=20, key=jax.random.key(7))
    one = sampler.generate(self.model, PROMPTS, max_new_tokens=12, **kw)
    first, second = self._six_then_six(**kw)
    joined = [a + b for a, b in zip(first.tokens, second.tokens)]
    self.assertEqual(joined, one.tokens)
    # The continued call attends over a cache of another (bucketed) length,
    # so XLA may sum the same terms in another order: float32 rounding of a
    # 2-layer forward and a log-softmax (~2^8 roundings on the longest
    # path) at the scale of the log-probs, not a bound one CPU printed.
    want = np.asarray(sum(one.logprobs, []))
    eps = float(np.finfo(np.float32).eps)
    np.testing.assert_allclose(
        sum((a + b for a, b in zip(first.logprobs, second.logprobs)), []),
        want, rtol=0, atol=2 ** 8 * eps * max(1.0, float(np.abs(want).max())))
    # The offset matters: without it the second half is drawn afresh.
    other = sampler.generate(
        self.model, [row[-1:] for row in first.tokens], cache=first.cache,
        max_new_tokens=6, **kw)
    self.assertNotEqual(other.tokens, second.tokens)

  def test_stopped_rows_leave_only_fed_tokens(self):
    free = sampler.generate(self.model, PROMPTS, max_new_tokens=8).tokens
    eos = free[1][2]
    res = sampler.generate(self.model, PROMPTS, max_new_tokens=8, eos_id=eos,
                           return_cache=True)
    pos = np.asarray(res.cache.positions)[:, 0]
    for row, prompt, toks in zip(pos, PROMPTS, res.tokens):
      # Prompt + every generated token but the last (a stop token included).
      np.testing.assert_array_equal(row[row >= 0],
                                    np.arange(len(prompt) + len(toks) - 1))
    self.assertLess(len(res.tokens[1]), 8)

  def test_continue_grows_the_cache_and_checks_the_batch(self):
    first = sampler.generate(self.model, PROMPTS, max_new_tokens=16,
                             return_cache=True)
    self.assertEqual(first.cache.max_len, 32)
    second = sampler.generate(self.model, [[1, 2, 3]] * 3, cache=first.cache,
                              max_new_tokens=3, return_cache=True)
    self.assertGreaterEqual(second.cache.max_len, 31 + 16 + 16)
    # Reference: one row continued by hand with the full forward (the cache
    # holds all generated tokens but the last).
    # One jitted forward at a fixed padded length (the model is causal: the
    # zeros after the sequence cannot change its logits) instead of three
    # eager op-by-op forwards of growing lengths.
    seq = PROMPTS[0] + first.tokens[0][:-1] + [1, 2, 3]
    fwd = jax.jit(lambda m, x: m(x))
    for _ in range(3):
      ids = np.zeros((1, 32), np.int32)
      ids[0, :len(seq)] = seq
      logits = fwd(self.model, jnp.asarray(ids))
      seq.append(int(jnp.argmax(logits[0, len(seq) - 1])))
    self.assertEqual(second.tokens[0], seq[-3:])
    with self.assertRaisesRegex(ValueError, "cache holds 3 rows"):
      sampler.generate(self.model, [[1]], cache=first.cache,
                       max_new_tokens=2)


class PrefixEmbedsTest(absltest.TestCase):

  def test_prefix_equals_greedy_by_hand(self):
    model = _model(seed=1)
    prefix = jax.random.normal(jax.random.key(0), (3, 5, 32)) * 0.5
    res = sampler.generate(model, PROMPTS, max_new_tokens=6,
                           prefix_embeds=prefix, return_cache=True)
    # Greedy by hand: a full forward over [prefix; prompt; tokens so far].
    # The decoder is causal, so the ids after the current position (zeros
    # here) cannot change its logits: one fixed-shape jitted forward per row.
    @jax.jit
    def logits_fn(prefix_row, ids):
      h = jnp.concatenate([prefix_row, model.embed(ids)], axis=1)
      return model.forward(inputs_embeds=h).logits

    for b, prompt in enumerate(PROMPTS):
      toks = []
      for _ in range(6):
        ids = np.zeros((1, len(prompt) + 6), np.int32)
        ids[0, :len(prompt) + len(toks)] = prompt + toks
        logits = logits_fn(prefix[b:b + 1], jnp.asarray(ids))
        last = prefix.shape[1] + len(prompt) + len(toks) - 1
        toks.append(int(jnp.argmax(logits[0, last])))
      self.assertEqual(res.tokens[b], toks)
    # The prefix is in the cache (positions 0..4 first, then the prompt).
    pos = np.asarray(res.cache.positions)[0, 0]
    np.testing.assert_array_equal(pos[:5], np.arange(5))
    # And it changes the output.
    plain = sampler.generate(model, PROMPTS, max_new_tokens=6)
    self.assertNotEqual(plain.tokens, res.tokens)

  def test_prefix_mask_and_shape_errors(self):
    model = _model(seed=1)
    prefix = jax.random.normal(jax.random.key(0), (3, 5, 32)) * 0.5
    mask = np.ones((3, 5), bool)
    mask[1, :2] = False  # row 1's image is 3 long (left-padded)
    res = sampler.generate(model, PROMPTS, max_new_tokens=4,
                           prefix_embeds=prefix, prefix_mask=mask)
    alone = sampler.generate(model, PROMPTS[1:2], max_new_tokens=4,
                             prefix_embeds=prefix[1:2, 2:])
    self.assertEqual(res.tokens[1], alone.tokens[0])
    with self.assertRaisesRegex(ValueError, "prefix_embeds must be"):
      sampler.generate(model, PROMPTS, max_new_tokens=2,
                       prefix_embeds=prefix[:, :, :8])
    with self.assertRaisesRegex(ValueError, "prefix_mask must be"):
      sampler.generate(model, PROMPTS, max_new_tokens=2,
                       prefix_embeds=prefix, prefix_mask=mask[:, :3])


if __name__ == "__main__":
  absltest.main()
