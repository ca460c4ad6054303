"""KV-cache policies: the registry, the sampler hook, the SnapKV-style
observation attentions and slot selection."""

from absl.testing import absltest
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.decoding import kv_policies
from jaxlab.decoding import sampler
from jaxlab.testing import tiny_models

PROMPTS = tiny_models.PROMPTS
_model = tiny_models.tiny_decoder


def _drop_first_real(cache, *, model, prefill, budget):
  """Test policy: keeps the `budget` latest slots of every row (a sliding
  window over the prompt), so the first prompt tokens are evicted."""
  del model, prefill
  scores = jnp.broadcast_to(jnp.arange(cache.max_len, dtype=jnp.float32),
                            cache.positions.shape)
  keep = kv_policies.top_slots(scores, cache, budget)
  return cache.gather(keep, max_len=cache.max_len)


def _fill_cache(cache, *, model, prefill):
  del model, prefill
  return cache.replace(index=jnp.asarray(cache.max_len, jnp.int32))


class RegistryTest(absltest.TestCase):

  def test_full_is_registered_identity(self):
    self.assertIn("full", kv_policies.available())
    c = _model().init_cache(1, 4)
    self.assertIs(kv_policies.get("full")(c, model=None, prefill=None), c)
    with self.assertRaisesRegex(ValueError, "takes no options"):
      kv_policies.get("full")(c, model=None, prefill=None, budget=3)

  def test_unknown_name_is_registry_error(self):
    with self.assertRaisesRegex(
        ValueError, r"unknown KV-cache policy 'snapkvv'; valid choices: .*"
        r"full"):
      sampler.generate(_model(), PROMPTS, max_new_tokens=3,
                       cache_policy="snapkvv")


class SamplerHookTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = _model()

  def test_full_equals_no_policy(self):
    base = sampler.generate(self.model, PROMPTS, max_new_tokens=8,
                            return_cache=True)
    full = sampler.generate(self.model, PROMPTS, max_new_tokens=8,
                            cache_policy="full", return_cache=True)
    self.assertEqual(full.tokens, base.tokens)
    np.testing.assert_array_equal(full.cache.positions, base.cache.positions)
    key = jax.random.key(4)
    a = sampler.generate(self.model, PROMPTS, max_new_tokens=8,
                         temperature=1.0, key=key)
    b = sampler.generate(self.model, PROMPTS, max_new_tokens=8,
                         temperature=1.0, key=key, cache_policy="full")
    self.assertEqual(a.tokens, b.tokens)

  def test_policy_runs_between_prefill_and_decode(self):
    # A policy keeping the last 3 prompt slots: decoding then sees only
    # them, which equals decoding the last 3 prompt tokens with their
    # original positions; the first token comes from the full prefill.
    got = sampler.generate(self.model, PROMPTS, max_new_tokens=5,
                           cache_policy=_drop_first_real,
                           cache_policy_options={"budget": 3},
                           return_cache=True)
    base = sampler.generate(self.model, PROMPTS, max_new_tokens=5)
    self.assertEqual([t[0] for t in got.tokens], [t[0] for t in base.tokens])
    pos = np.asarray(got.cache.positions)
    for row, prompt in zip(pos[:, 0], PROMPTS):
      n = len(prompt)
      kept = list(range(max(n - 3, 0), n))
      np.testing.assert_array_equal(row[:3], kept + [-1] * (3 - len(kept)))
      np.testing.assert_array_equal(row[3:7], list(range(n, n + 4)))
    # Reference for row 0, by masking instead of gathering: prefill the
    # whole prompt, then decode with its first 4 slots denied.
    prompt = PROMPTS[0]

    @nnx.jit  # the reference compiled once, not op by op
    def reference(model, first):
      cache = model.forward(jnp.asarray([prompt]),
                            cache=model.init_cache(1, 12)).cache
      evicted = jnp.ones((1, 1, 1, 12), bool).at[..., :4].set(False)
      toks = [first]
      for _ in range(4):
        out = model.forward(toks[-1].reshape(1, 1), cache=cache,
                            extra_mask=evicted)
        cache = out.cache
        toks.append(jnp.argmax(out.logits[0, -1]).astype(first.dtype))
      return jnp.stack(toks)

    toks = [int(t) for t in reference(
        self.model, jnp.asarray(got.tokens[0][0], jnp.int32))]
    self.assertEqual(got.tokens[0], toks)
    self.assertNotEqual(got.tokens, base.tokens)

  def test_policy_without_room_raises(self):
    with self.assertRaisesRegex(ValueError, "cache overflow.*room"):
      sampler.generate(self.model, PROMPTS, max_new_tokens=4,
                       cache_policy=_fill_cache)


class ObservationTest(absltest.TestCase):

  def test_observation_attentions_equal_forward(self):
    model = _model(1)
    ids, mask = sampler.left_pad(PROMPTS, 8)

    # Forward and observation compiled together, not op by op.
    @nnx.jit(static_argnames="window")
    def run(model, window):
      cache = model.init_cache(3, 10)
      positions = model.default_positions(jnp.asarray(mask))
      out = model.forward(jnp.asarray(ids), attention_mask=jnp.asarray(mask),
                          cache=cache, output_hidden_states=True,
                          output_attentions=True)
      info = kv_policies.PrefillInfo(
          hidden_states=out.hidden_states, positions=positions,
          attention_mask=jnp.asarray(mask), start=cache.index)
      return (kv_policies.observation_attentions(model, out.cache, info,
                                                 window=window),
              out.attentions)

    obs, attentions = run(model, 2)
    self.assertLen(obs, 2)
    for o, full in zip(obs, attentions):
      chex.assert_shape(o, (3, 4, 2, 10))
      np.testing.assert_allclose(o, full[:, :, -2:], atol=1e-6)
    with self.assertRaisesRegex(ValueError, "window"):
      run(model, 9)

  def test_top_slots(self):
    c = _model().init_cache(1, 5)
    c = c.replace(positions=jnp.asarray([[[0, 1, 2, -1, -1],
                                          [0, 1, 2, 3, -1]]]))
    scores = jnp.asarray([[[3., 1., 2., 9., 9.], [1., 5., 0., 4., 9.]]])
    np.testing.assert_array_equal(kv_policies.top_slots(scores, c, 2),
                                  [[[0, 2], [1, 3]]])
    # Fewer filled slots than the budget: the rest are -1.
    np.testing.assert_array_equal(kv_policies.top_slots(scores, c, 4),
                                  [[[0, 1, 2, -1], [0, 1, 2, 3]]])


if __name__ == "__main__":
  absltest.main()
