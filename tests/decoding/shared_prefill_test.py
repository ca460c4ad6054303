"""`shared_prefill` (paper M): one scored prefill cropped per budget gives
the tokens of the per-call paths (plain generate, the "snapkv" policy,
`speckv_generate`), StreamingLLM keeps the sinks and the recent window, and
`early_exit.first_layers` is the target's first k layers read through its
final norm and head."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from jaxlab.decoding import sampler
from jaxlab.decoding import shared_prefill as sp_lib
from jaxlab.decoding import speckv as speckv_lib
from jaxlab.models import early_exit
from jaxlab.testing import tiny_models

RNG = np.random.default_rng(0)
# Rows of different lengths (left padding), longer than the budgets.
PROMPTS = [RNG.integers(3, 64, n).tolist() for n in (40, 33, 37)]
OPTS = dict(window=4, kernel=3)
NEW = 5


class SharedPrefillTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder(0, num_layers=3)
    cls.draft = early_exit.first_layers(cls.model, 1)
    cls.look = sampler.generate(cls.draft, PROMPTS, max_new_tokens=3).tokens
    cls.sp = sp_lib.scored_prefill(cls.model, PROMPTS, cls.look,
                                   window=OPTS["window"], pad_multiple=16)

  def gen(self, method, budget=12):
    return sp_lib.generate_from_prefill(self.model, self.sp, method, PROMPTS,
                                        budget=budget, max_new_tokens=NEW,
                                        **OPTS)

  def test_full_equals_generate(self):
    ref = sampler.generate(self.model, PROMPTS, max_new_tokens=NEW).tokens
    self.assertEqual(self.gen("full"), ref)

  def test_snapkv_equals_the_policy(self):
    ref = sampler.generate(
        self.model, PROMPTS, max_new_tokens=NEW, cache_policy="snapkv",
        cache_policy_options=dict(budget=12, **OPTS)).tokens
    self.assertEqual(self.gen("snapkv"), ref)

  def test_speckv_equals_speckv_generate(self):
    ref = speckv_lib.speckv_generate(
        self.model, self.draft, PROMPTS, budget=12, max_new_tokens=NEW,
        draft_tokens=self.look, **OPTS).tokens
    self.assertEqual(self.gen("speckv"), ref)

  def test_streaming_keeps_sinks_and_recent_window(self):
    cache = sp_lib.crop(self.sp, "streaming", budget=10, sink=2, **OPTS)
    pos = np.asarray(cache.positions)
    for row, p in enumerate(PROMPTS):
      n = len(p)
      want = [0, 1] + list(range(n - 8, n))
      for head in range(pos.shape[1]):
        self.assertEqual(sorted(x for x in pos[row, head] if x >= 0), want)

  def test_unknown_crop_is_one_error(self):
    with self.assertRaisesRegex(ValueError, "unknown crop"):
      sp_lib.crop(self.sp, "h2o", budget=8)


class FirstLayersTest(absltest.TestCase):

  def test_equals_first_blocks_then_final_norm_and_head(self):
    model = tiny_models.tiny_decoder(3, num_layers=3, tie_embeddings=True)
    draft = early_exit.first_layers(model, 2)
    self.assertEqual(draft.cfg.num_layers, 2)
    ids = jnp.asarray([PROMPTS[0][:12]])
    hidden = model.forward(ids, output_hidden_states=True).hidden_states
    # hidden_states[2] = the residual stream after block 1 (before the norm).
    want = model.unembed(hidden[2])
    np.testing.assert_allclose(np.asarray(draft.forward(ids).logits),
                               np.asarray(want), rtol=1e-5, atol=1e-5)
    self.assertEqual(len(model.layers), 3)  # the target is unchanged

  def test_shared_layers_are_the_same_arrays_and_zero_is_the_embedding(self):
    model = tiny_models.tiny_decoder()
    shared = early_exit.first_layers(model, 1, share=True)
    copied = early_exit.first_layers(model, 1)
    self.assertIs(shared.layers[0].attn.q_dnh, model.layers[0].attn.q_dnh)
    self.assertIsNot(copied.layers[0].attn.q_dnh, model.layers[0].attn.q_dnh)
    self.assertEqual(len(model.layers), 2)
    ids = jnp.array([[1, 2, 3]], jnp.int32)
    h = model.forward(ids, output_hidden_states=True).hidden_states
    h1 = early_exit.first_layers(model, 1, share=True).forward(
        ids, output_hidden_states=True).hidden_states
    self.assertLen(h1, 2)  # the embedding output and block 0's
    np.testing.assert_array_equal(np.asarray(h1[1]), np.asarray(h[1]))
    self.assertEqual(
        early_exit.first_layers(model, 0, share=True).cfg.num_layers, 0)

  def test_bad_depth_is_one_error(self):
    with self.assertRaisesRegex(ValueError, "num_layers must be in \\["):
      early_exit.first_layers(tiny_models.tiny_decoder(), 3)


if __name__ == "__main__":
  absltest.main()
