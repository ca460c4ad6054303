"""Tests for jaxlab.decoding.sampler: parity with transformers, cache vs full
forward, eos handling, log-probs and sampling statistics."""

import functools
import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.configs import generate as configs_generate
from jaxlab.experiments import generate as experiments_generate
from jaxlab.decoding import sampler
from jaxlab.io import hf
from jaxlab.testing import hf_fixtures
from jaxlab.testing import tiny_models

PROMPTS = tiny_models.PROMPTS
_tiny_decoder = tiny_models.tiny_decoder


_REF_LEN = 32


@functools.lru_cache(maxsize=None)
def _jitted_forward(graphdef):
  return jax.jit(lambda state, ids: nnx.merge(graphdef, state)(ids))


def _full_logits(model, seq):
  """Uncached full-forward logits `[len(seq), V]` (numpy) of one sequence.

  The sequence is right-padded to a fixed length so one compilation serves
  every call; causal attention makes the padding invisible to real tokens.
  """
  graphdef, state = nnx.split(model)
  ids = np.zeros((1, _REF_LEN), np.int32)
  ids[0, :len(seq)] = seq
  return np.asarray(_jitted_forward(graphdef)(state, ids))[0, :len(seq)]


def _token_logprobs(model, ids, attn, comp, temperature=1.0):
  graphdef, state = nnx.split(model)
  fn = jax.jit(lambda st, *a: sampler.token_logprobs(
      nnx.merge(graphdef, st), *a[:2], loss_mask_bt=a[2],
      temperature=temperature))
  return np.asarray(fn(state, ids, attn, comp))


def _full_forward_greedy(model, prompt, n):
  """Uncached reference: re-run the whole sequence for every new token."""
  ids = list(prompt)
  for _ in range(n):
    ids.append(int(np.argmax(_full_logits(model, ids)[-1])))
  return ids[len(prompt):]


def _np_sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
  """NumPy reference of the truncated, renormalised sampling distribution."""
  z = np.asarray(logits, np.float64) / temperature
  order = np.argsort(-z, kind="stable")
  keep = np.zeros(z.shape, bool)
  if top_k:
    keep[order[:top_k]] = True
  else:
    keep[:] = True
  p = np.where(keep, np.exp(z - z.max()), 0.0)
  p /= p.sum()
  if top_p is not None:
    mass = 0.0
    nucleus = np.zeros(z.shape, bool)
    for i in order:
      if not keep[i]:
        break
      nucleus[i] = True
      mass += p[i]
      if mass >= top_p:
        break
    p = np.where(nucleus, p, 0.0)
    p /= p.sum()
  return p


def _np_log_softmax(x):
  x = np.asarray(x, np.float64)
  m = x.max(-1, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


class HFParityTest(parameterized.TestCase):
  """Greedy tokens equal transformers' `generate(do_sample=False)`."""

  @parameterized.named_parameters(
      ("llama_gqa", "llama", dict(num_kv_heads=2)),
      ("qwen2_tied_mqa", "qwen2", dict(num_kv_heads=1, tie_embeddings=True,
                                       rope_theta=500.0)),
  )
  def test_greedy_matches_transformers(self, arch, kw):
    import torch  # pylint: disable=g-import-not-at-top
    n_new = 12
    with tempfile.TemporaryDirectory() as tmp:
      path, hf_model = hf_fixtures.make_hf_checkpoint(
          tmp, arch, vocab_size=97, return_model=True, **kw)
      model, _ = hf.load(path)
      # The generate experiment on the same checkpoint (greedy, ids in).
      config = configs_generate.get_config()
      config.update(init_from=path, tokenizer="none", max_new_tokens=n_new,
                    prompt_ids=tuple(map(tuple, PROMPTS)))
      experiments_generate.run(config, os.path.join(tmp, "work"))
      with open(os.path.join(tmp, "work", "samples.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    self.assertEqual([r["prompt_ids"] for r in rows], PROMPTS)
    ours = sampler.generate(model, PROMPTS, max_new_tokens=n_new)
    self.assertEqual([r["completion_ids"] for r in rows], ours.tokens)
    for prompt, got in zip(PROMPTS, ours.tokens):
      with torch.no_grad():
        out = hf_model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(
                1, len(prompt), dtype=torch.long),
            max_new_tokens=n_new, do_sample=False, eos_token_id=None,
            pad_token_id=0)
      want = out[0, len(prompt):].tolist()
      self.assertLen(want, n_new)
      self.assertEqual(got, want)
      # The check is meaningful only if greedy choices are not near-ties.
      full = hf_fixtures.hf_logits(hf_model, [prompt + want[:-1]])[0]
      top2 = np.sort(full[len(prompt) - 1:], axis=-1)[:, -2:]
      self.assertGreater(np.min(top2[:, 1] - top2[:, 0]), 1e-3)


class GenerateTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = _tiny_decoder()

  def test_batched_equals_single_and_uncached(self):
    n_new = 9
    batched = sampler.generate(self.model, PROMPTS, max_new_tokens=n_new,
                               return_cache=True)
    # Cache slots: 16 prompt slots (left-padded, padding at -1), then the
    # n_new - 1 fed-back tokens; the last token is never fed.
    positions = np.asarray(batched.cache.positions)  # [B, K, S]
    self.assertEqual(positions.shape, (3, 2, 16 + 16))
    np.testing.assert_array_equal(positions[:, 0], positions[:, 1])
    for row, prompt in zip(positions[:, 0], PROMPTS):
      want = [-1] * (16 - len(prompt)) + list(range(len(prompt) + n_new - 1))
      np.testing.assert_array_equal(row[:len(want)], want)
      np.testing.assert_array_equal(row[len(want):], -1)
    for prompt, got in zip(PROMPTS, batched.tokens):
      alone = sampler.generate(self.model, [prompt], max_new_tokens=n_new)
      self.assertEqual(alone.tokens[0], got)
      self.assertEqual(_full_forward_greedy(self.model, prompt, n_new), got)
    np.testing.assert_array_equal(batched.lengths, [n_new] * 3)
    np.testing.assert_array_equal(batched.prompt_lengths, [7, 2, 4])
    self.assertFalse(batched.done.any())
    # Greedy: the sampling distribution is a point mass.
    np.testing.assert_array_equal(np.asarray(batched.logprobs), 0.0)

  def test_eos_stops_row_others_continue(self):
    n_new = 10
    free = sampler.generate(self.model, PROMPTS, max_new_tokens=n_new).tokens
    eos = free[0][3]
    expect = []
    for row in free:
      expect.append(row[:row.index(eos) + 1] if eos in row else row)
    got = sampler.generate(self.model, PROMPTS, max_new_tokens=n_new,
                           eos_id=eos)
    self.assertEqual(got.tokens, expect)
    self.assertEqual(got.tokens[0][-1], eos)  # eos is included
    np.testing.assert_array_equal(got.done, [eos in row for row in free])
    np.testing.assert_array_equal(got.lengths, [len(r) for r in expect])
    # stop_ids behaves like eos_id.
    via_stop = sampler.generate(self.model, PROMPTS, max_new_tokens=n_new,
                                stop_ids=[eos])
    self.assertEqual(via_stop.tokens, expect)

  def test_no_recompile_within_bucket(self):
    sampler.generate(self.model, [[1, 2, 3]], max_new_tokens=5)
    before = dict(sampler.TRACE_COUNTS)
    # Other prompt lengths (<= 16) and budgets (<= 16): same executables.
    sampler.generate(self.model, [[4, 5, 6, 7, 8, 9]], max_new_tokens=11)
    sampler.generate(self.model, [[9]], max_new_tokens=16, eos_id=3)
    self.assertEqual(sampler.TRACE_COUNTS, before)

  def test_sampling_logprobs_match_full_forward(self):
    temperature, top_k, top_p = 0.7, 20, 0.9
    res = sampler.generate(self.model, PROMPTS, max_new_tokens=6,
                           temperature=temperature, top_k=top_k, top_p=top_p,
                           key=jax.random.key(3))
    for prompt, toks, lps, mlps in zip(PROMPTS, res.tokens, res.logprobs,
                                       res.model_logprobs):
      logits = _full_logits(self.model, prompt + toks)
      steps = logits[len(prompt) - 1:-1]
      want_model = _np_log_softmax(steps)[np.arange(len(toks)), toks]
      np.testing.assert_allclose(mlps, want_model, atol=2e-5)
      want = [np.log(_np_sampling_probs(s, temperature, top_k, top_p)[t])
              for s, t in zip(steps, toks)]
      np.testing.assert_allclose(lps, want, atol=2e-5)
    # Teacher-forced log-probs of the same completions agree.
    ids, attn, comp = sampler.pack_sequences(PROMPTS, res.tokens)
    tf = _token_logprobs(self.model, ids, attn, comp)
    for i, mlps in enumerate(res.model_logprobs):
      np.testing.assert_allclose(tf[i][comp[i]], mlps, atol=2e-5)
      np.testing.assert_array_equal(tf[i][~comp[i]], 0.0)

  def test_same_key_same_output_different_key_differs(self):
    run = functools.partial(sampler.generate, self.model, PROMPTS,
                            max_new_tokens=8, temperature=1.0)
    a = run(key=jax.random.key(0)).tokens
    b = run(key=jax.random.key(0)).tokens
    c = run(key=jax.random.key(1)).tokens
    self.assertEqual(a, b)
    self.assertNotEqual(a, c)

  def test_logits_processor_bans_token(self):
    free = sampler.generate(self.model, PROMPTS, max_new_tokens=6).tokens
    banned = free[0][0]
    got = sampler.generate(self.model, PROMPTS, max_new_tokens=6,
                           logits_processor=functools.partial(
                               _ban, token=banned))
    self.assertNotIn(banned, sum(got.tokens, []))
    self.assertNotEqual(got.tokens[0][0], free[0][0])
    # model_logprobs stay those of the raw model.
    logits = _full_logits(self.model, PROMPTS[0])[-1]
    np.testing.assert_allclose(got.model_logprobs[0][0],
                               _np_log_softmax(logits)[got.tokens[0][0]],
                               atol=2e-5)

  def test_bf16_model_matches_uncached(self):
    model = _tiny_decoder(seed=1, dtype="bfloat16")
    got = sampler.generate(model, PROMPTS[:2], max_new_tokens=5,
                           pad_multiple=8)
    for prompt, toks in zip(PROMPTS[:2], got.tokens):
      self.assertEqual(toks, _full_forward_greedy(model, prompt, 5))

  @parameterized.parameters(
      (dict(prompts=[], max_new_tokens=3), "prompts is empty"),
      (dict(prompts=[[1], []], max_new_tokens=3), "prompt 1 is empty"),
      (dict(prompts=[[1]], max_new_tokens=0), "max_new_tokens"),
      (dict(prompts=[[1]], max_new_tokens=2, temperature=1.0), "PRNG key"),
      (dict(prompts=[[1]], max_new_tokens=2, top_p=1.5), "top_p"),
      (dict(prompts=[[1]], max_new_tokens=2, temperature=-1.0),
       "temperature"),
  )
  def test_errors(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      sampler.generate(self.model, **kwargs)


def _ban(logits_bv, generated_bn, step, *, token):
  del generated_bn, step
  return logits_bv.at[:, token].set(-1e9)


class SampleLogitsTest(parameterized.TestCase):

  def test_truncation_hand_computed(self):
    logits = jnp.log(jnp.asarray([[0.05, 0.5, 0.15, 0.3]]))
    keep = lambda **kw: np.asarray(
        sampler.truncate_logits(logits, **kw) > -1e30)[0].tolist()
    self.assertEqual(keep(top_p=0.3), [False, True, False, False])
    self.assertEqual(keep(top_p=0.75), [False, True, False, True])
    self.assertEqual(keep(top_p=0.85), [False, True, True, True])
    self.assertEqual(keep(top_p=1.0), [True] * 4)
    self.assertEqual(keep(top_k=2), [False, True, False, True])
    # Nucleus over the renormalised top-3 (0.5, 0.3, 0.15)/0.95.
    self.assertEqual(keep(top_k=3, top_p=0.8), [False, True, False, True])
    self.assertEqual(keep(top_k=3, top_p=0.86), [False, True, True, True])
    np.testing.assert_allclose(
        np.exp(sampler.sampling_logprobs(logits, top_k=2))[0],
        [0.0, 0.625, 0.0, 0.375], atol=1e-6)

  @parameterized.named_parameters(
      ("plain", 1.0, None, None),
      ("hot", 2.0, None, None),
      ("top_k", 1.0, 3, None),
      ("top_p", 1.0, None, 0.7),
      ("top_k_top_p_cold", 0.8, 5, 0.8),
  )
  def test_empirical_frequencies(self, temperature, top_k, top_p):
    logits = jnp.asarray([1.2, -0.3, 0.4, 2.0, 0.0, -1.0, 0.9, 0.1])
    n = 40_000
    draws = sampler.sample_logits(jnp.broadcast_to(logits, (n, 8)),
                                  jax.random.key(7), temperature=temperature,
                                  top_k=top_k, top_p=top_p)
    counts = np.bincount(np.asarray(draws), minlength=8)
    expected = _np_sampling_probs(logits, temperature, top_k, top_p)
    # Excluded tokens never appear.
    np.testing.assert_array_equal(counts[expected == 0], 0)
    support = expected > 0
    chi2 = np.sum((counts[support] - n * expected[support]) ** 2
                  / (n * expected[support]))
    # 99.9% quantile of chi-square with <= 7 degrees of freedom is 24.3.
    self.assertLess(chi2, 24.3)

  def test_greedy_is_argmax(self):
    logits = jax.random.normal(jax.random.key(0), (5, 11))
    chex.assert_trees_all_equal(
        sampler.sample_logits(logits, None, temperature=0.0),
        jnp.argmax(logits, -1).astype(jnp.int32))


class TokenLogprobsTest(absltest.TestCase):

  def test_against_numpy_and_padding_invariance(self):
    model = _tiny_decoder(seed=2)
    prompts, comps = [[3, 4, 5], [9]], [[6, 7], [8, 1, 2]]
    ids, attn, comp = sampler.pack_sequences(prompts, comps)
    np.testing.assert_array_equal(ids, [[3, 4, 5, 6, 7, 0],
                                        [0, 0, 9, 8, 1, 2]])
    lp = _token_logprobs(model, ids, attn, comp, temperature=2.0)
    for i, (p, c) in enumerate(zip(prompts, comps)):
      seq = p + c
      logits = _full_logits(model, seq) / 2.0
      want = _np_log_softmax(logits[:-1])[np.arange(len(seq) - 1), seq[1:]]
      np.testing.assert_allclose(lp[i][comp[i]], want[len(p) - 1:],
                                 atol=2e-5)


if __name__ == "__main__":
  absltest.main()
