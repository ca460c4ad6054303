"""PMC: reward, BT selection, the monotone cache and the self-generated loop."""

import types
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import numpy as np

from jaxlab.data import tokenizers
from jaxlab.data.synthetic import facts as facts_lib
from jaxlab.models import decoder
from jaxlab.objectives import pmc
from jaxlab.objectives import self_generated as sg


class CacheAndSelectionTest(parameterized.TestCase):

  def test_cache_is_monotone_and_stops_at_zero(self):
    cache = sg.MonotoneCache()
    self.assertTrue(cache.needs_sampling(3))
    self.assertTrue(cache.update(3, "a", 0.6))
    self.assertFalse(cache.update(3, "b", 0.7))   # worse: kept "a"
    self.assertEqual((cache[3].answer, cache[3].score), ("a", 0.6))
    self.assertTrue(cache.update(3, "c", 0.6))    # ties replace (<=)
    self.assertEqual(cache[3].answer, "c")
    self.assertTrue(cache.needs_sampling(3))
    self.assertTrue(cache.update(3, "d", 0.0))
    self.assertFalse(cache.needs_sampling(3))
    with self.assertRaisesRegex(ValueError, ">= 0"):
      cache.update(4, "x", -0.1)

  def test_cache_never_raises_under_random_updates(self):
    rng = np.random.default_rng(0)
    cache = sg.MonotoneCache()
    best = {}
    for _ in range(500):
      i = int(rng.integers(5))
      s = float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]))
      before = cache[i].score if i in cache else np.inf
      cache.update(i, str(s), s)
      self.assertLessEqual(cache[i].score, before)
      best[i] = min(best.get(i, np.inf), s)
    self.assertEqual(cache.scores(), best)

  def test_bt_select(self):
    self.assertEqual(sg.bt_select([0.5, 0.2, 0.2, 0.9]), 1)  # argmin, first
    rng = np.random.default_rng(0)
    picks = [sg.bt_select([0.0, 1.0], tau=0.5, rng=rng) for _ in range(4000)]
    # P(0) = e^{1/0.5} / (e^{1/0.5} + e^0) for rewards (1, 0).
    want = np.exp(2) / (np.exp(2) + 1)
    self.assertAlmostEqual(1 - np.mean(picks), want, delta=0.02)

  def test_score_and_reward(self):
    ref = "Kalo Renzotav was born in Lisbon."
    self.assertEqual(pmc.rouge_recall_score(ref, ref), 1.0)
    self.assertEqual(pmc.rouge_recall_score("He was born in Osaka.", ref),
                     3 / 6)  # he/was born in/osaka vs 6 ref tokens: LCS 3
    self.assertEqual(pmc.pmc_reward("nothing", ref), 1.0)
    # Length penalty: empty sample gets s = min(1, 0 + e^0) = 1.
    self.assertEqual(pmc.rouge_recall_score("", ref, min_len=3), 1.0)
    self.assertAlmostEqual(pmc.rouge_recall_score("xx yy", ref, min_len=3),
                           np.exp(-2))

  def test_empty_questions_skipped_and_counted(self):
    keep, skipped = pmc.clean_forget_questions(["q1", "", "  ", "q2"])
    self.assertEqual((keep, skipped), ([0, 3], 2))
    with self.assertRaisesRegex(ValueError, "no non-empty question"):
      pmc.clean_forget_questions(["", " "])

  def test_prefill(self):
    p, rest = pmc.prefill_prompts(["Q: x\nA: "], ["Ab Cd was born in Oslo."],
                                  prefix_words=3)
    self.assertEqual(p, ["Q: x\nA: Ab Cd was "])
    self.assertEqual(rest, ["born in Oslo."])
    p, rest = pmc.prefill_prompts(["P "], ["a"], mode="fixed")
    self.assertEqual((p, rest), (["P The answer is: "], ["a"]))
    with self.assertRaisesRegex(ValueError, "valid: fixed"):
      pmc.prefill_prompts(["P"], ["a"], mode="bad")

  def test_lottery_machine(self):
    with_r = pmc.lottery_machine(rounds=2000, use_retain=True, seed=1)
    without = pmc.lottery_machine(rounds=2000, use_retain=False, seed=1)
    np.testing.assert_allclose(with_r.sum(-1), 1.0)
    self.assertEqual(with_r[-1, 7:].sum(), 0.0)       # forget colours gone
    self.assertTrue(np.all(with_r[-1, :7] > 0.05))    # retain anchored
    self.assertEqual(np.max(without[-1]), 1.0)        # one colour left


class EncodeTest(absltest.TestCase):

  def test_prompt_masked_pairs(self):
    tok = tokenizers.ByteTokenizer()
    b = sg.encode_pairs(tok, ["Q?", "Q"], ["ab", "c"], max_len=6)
    # row 0 ids: bos Q ? a b eos -> inputs bos Q ? a b, targets Q ? a b eos
    np.testing.assert_array_equal(b["targets"][0, :5],
                                  [ord("Q"), ord("?"), ord("a"), ord("b"),
                                   tok.eos_id])
    np.testing.assert_array_equal(b["mask"][0], [0, 0, 1, 1, 1, 0])
    np.testing.assert_array_equal(b["mask"][1], [0, 1, 1, 0, 0, 0])
    self.assertEqual(b["truncated"], 0)
    b = sg.encode_pairs(tok, ["Q?"], ["abcdef"], max_len=4)
    self.assertEqual(b["truncated"], 1)
    np.testing.assert_array_equal(b["mask"][0], [0, 0, 1, 1])


  def test_sequence_nll_dataset_sums_and_compiles_once(self):
    tok = tokenizers.ByteTokenizer()
    cfg = decoder.DecoderConfig(vocab_size=tok.vocab_size, dim=16,
                                num_layers=1, num_heads=2, num_kv_heads=1,
                                mlp_dim=32)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    prompts, answers = ["Q?", "Q", "W:"], ["ab", "c", "xyz"]
    # By hand: the answer tokens' (and eos's) NLL under the model's logits.
    enc = sg.encode_pairs(tok, prompts, answers, max_len=8)
    logp = np.asarray(jax.nn.log_softmax(model(enc["inputs"]), -1))
    want = -np.sum(np.take_along_axis(logp, enc["targets"][..., None],
                                      -1)[..., 0] * enc["mask"], -1)
    with mock.patch.object(sg.unlearning, "model_sequence_nll",
                           wraps=sg.unlearning.model_sequence_nll) as spy:
      for _ in range(3):  # one program for every call of these shapes
        got = sg.sequence_nll_dataset(model, tok, prompts, answers,
                                      max_len=8, batch_size=4)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    self.assertLessEqual(spy.call_count, 1)   # traced at most once


class LoopTest(absltest.TestCase):

  def test_pmc_loop_with_scripted_sampler(self):
    tok = tokenizers.ByteTokenizer()
    cfg = decoder.DecoderConfig(vocab_size=tok.vocab_size, dim=32,
                                num_layers=1, num_heads=2, num_kv_heads=1,
                                mlp_dim=64)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    refs = ["alpha beta gamma", "delta epsilon", "zeta eta theta"]
    prompts = ["Q: one\nA: ", "Q: two\nA: ", "Q: three\nA: "]
    # Scripted sampler: the k-th call for a prompt returns answers whose
    # overlap with the reference shrinks, reaching 0 on the 3rd call.
    script = {p: [[r, r.split()[0] + " x"], ["y " + r.split()[-1], r],
                  ["none at all", "zzz"]] for p, r in zip(prompts, refs)}
    calls = {p: 0 for p in prompts}

    def fake_generate(model, ids, *, temperature, key, **kw):
      del model, temperature, key, kw
      texts = [tok.decode(i) for i in ids]
      out, seen = [], {}
      for t in texts:
        j = seen.get(t, 0)
        seen[t] = j + 1
        out.append(tok.encode(script[t][calls[t]][j], add_eos=True))
      for t in seen:
        calls[t] += 1
      return types.SimpleNamespace(tokens=out)

    score_fn = pmc.make_score_fn(refs)
    config = pmc.default_config()
    config.update(num_samples=2, batch_size=3, steps=6, max_len=48,
                  lr=1e-3, seed=0)
    out = sg.run_self_generated(
        model, tok, forget_prompts=prompts, retain_prompts=["Q: r\nA: "],
        retain_answers=["kept"], score_fn=score_fn, config=config,
        generate_fn=fake_generate)
    # Each prompt sampled exactly 3 times (scores 1/3, 1/2->..., then 0),
    # then never again.
    self.assertEqual(calls, {p: 3 for p in prompts})
    self.assertEqual(out["cache_stats"]["samples_drawn"], 3 * 3 * 2)
    self.assertEqual(out["cache_stats"]["skipped_done"], 3 * 3)
    self.assertEqual(out["cache"].scores(), {0: 0.0, 1: 0.0, 2: 0.0})
    self.assertEqual(out["cache"][0].answer, "none at all")
    means = [h["cache_mean_score"] for h in out["history"]]
    self.assertTrue(all(a >= b for a, b in zip(means, means[1:])), means)
    # Step 0 selects argmin of [1.0, 1/3] = "alpha x" for prompt 0.
    self.assertAlmostEqual(means[0], np.mean([1 / 3, 1 / 2, 1 / 3]))

  def test_baseline_loop_decreases_idk_loss(self):
    tok = tokenizers.ByteTokenizer()
    cfg = decoder.DecoderConfig(vocab_size=tok.vocab_size, dim=32,
                                num_layers=1, num_heads=2, num_kv_heads=1,
                                mlp_dim=64)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    fs = facts_lib.make_fact_set(10, seed=0, num_world=0)
    config = pmc.default_config()
    config.update(loss="unlearn_idk", batch_size=4, steps=25, max_len=64,
                  lr=3e-3)
    out = sg.run_self_generated(
        model, tok,
        forget_prompts=[facts_lib.qa_prompt(x.question) for x in fs.forget],
        retain_prompts=[facts_lib.qa_prompt(x.question) for x in fs.retain],
        retain_answers=[x.answer for x in fs.retain], score_fn=None,
        fixed_forget_answers=["I don't know."] * len(fs.forget),
        config=config)
    h = out["history"]
    self.assertLess(h[-1]["forget_nll"], 0.5 * h[0]["forget_nll"])
    with self.assertRaisesRegex(ValueError, "exactly one of"):
      sg.run_self_generated(model, tok, forget_prompts=["a"],
                            retain_prompts=["b"], retain_answers=["c"],
                            score_fn=None, config=config)

  def test_run_pmc_skips_and_counts_empty_questions(self):
    tok = tokenizers.ByteTokenizer()
    cfg = decoder.DecoderConfig(vocab_size=tok.vocab_size, dim=32,
                                num_layers=1, num_heads=2, num_kv_heads=1,
                                mlp_dim=64)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    seen = []

    def fake_generate(model, ids, *, temperature, key, **kw):
      del model, key, kw
      texts = [tok.decode(i) for i in ids]
      seen.append((temperature, texts))
      # Greedy reference "ref words"; samples share nothing with it.
      ans = "ref words" if temperature == 0 else "other"
      return types.SimpleNamespace(
          tokens=[tok.encode(ans, add_eos=True) for _ in ids])

    config = pmc.default_config()
    config.update(num_samples=2, batch_size=2, steps=1, max_len=32, seed=0)
    out = pmc.run_pmc(model, tok, forget_questions=["", "Q one", "  ", "Q 2"],
                      retain_prompts=["r"], retain_answers=["kept"],
                      config=config, generate_fn=fake_generate)
    self.assertEqual(out["skipped_empty_questions"], 2)
    self.assertEqual(out["kept_indices"], [1, 3])
    self.assertEqual(out["references"], ["ref words", "ref words"])
    self.assertEqual(out["empty_references"], 0)
    # References come from greedy decoding of the kept questions only.
    self.assertEqual(seen[0], (0.0, ["Q one", "Q 2"]))
    self.assertEqual(out["cache"].scores(), {0: 0.0, 1: 0.0})
    with self.assertRaisesRegex(ValueError, "no non-empty question"):
      pmc.run_pmc(model, tok, forget_questions=["", " "],
                  retain_prompts=["r"], retain_answers=["kept"],
                  config=config, generate_fn=fake_generate)


class EvalAndConfigTest(absltest.TestCase):

  def test_warmup_is_one_epoch_of_steps(self):
    c = pmc.default_config()
    self.assertEqual((c.warmup_epochs, c.max_new_tokens,
                      c.ref_max_new_tokens), (1.0, 200, 200))
    c.update(batch_size=16, steps=100)
    self.assertEqual(pmc.warmup_steps(c, 400), 25)   # 400 / 16
    self.assertEqual(pmc.warmup_steps(c, 50), 4)     # ceil(50 / 16)
    c.steps = 3
    self.assertEqual(pmc.warmup_steps(c, 400), 3)    # capped at steps
    c.warmup_epochs = None
    c.warmup_steps = 7
    self.assertEqual(pmc.warmup_steps(c, 400), 7)    # explicit steps kept

  def test_evaluate_unlearning_with_scripted_answers(self):
    tok = tokenizers.ByteTokenizer()
    qa = facts_lib.QA
    fs = types.SimpleNamespace(
        forget=[qa("Where was Ab born?", "Ab was born in Oslo.", "Ab",
                   "city", "Oslo")],
        forget_paraphrased=[qa("Birthplace of Ab?", "Ab was born in Oslo.",
                               "Ab", "city", "Oslo")],
        retain=[qa("Where was Cd born?", "Cd was born in Rome.", "Cd",
                   "city", "Rome")],
        world=[qa("Capital of Xy?", "The capital of Xy is Zz.", "Xy",
                  "capital", "Zz")])
    authors = [qa("Who wrote the book H?", "The book H was written by Wi.",
                  "Wi", "author", "Wi")]
    p = facts_lib.qa_prompt
    script = {
        p("Where was Ab born?"): "I do not know.",              # recall 0
        p("Birthplace of Ab?"): "Ab was born in Lima.",         # 4 / 5
        p("Where was Cd born?"): "Cd was born in Rome.",        # 1
        p("Capital of Xy?"): "The capital",                     # 2 / 6
        p("Who wrote the book H?"): "No idea.",                 # 0
        p("Where was Ab born?") + "Ab was born ": "in Oslo.",   # leaks
        p("Where was Ab born?") + "The answer is: ": "Rome.",   # no leak
    }

    def fake_generate(model, ids, *, temperature, **kw):
      del model, kw
      texts = [tok.decode(i) for i in ids]
      if temperature > 0:  # 2 samples of the forget question: one leaks
        outs = ["no", "maybe Oslo"]
      else:
        outs = [script[t] for t in texts]
      return types.SimpleNamespace(
          tokens=[tok.encode(o, add_eos=True) for o in outs])

    out = pmc.evaluate_unlearning(
        None, tok, fs, prompt_fn=p, leak_samples=2, real_authors=authors,
        generate_fn=fake_generate)
    self.assertAlmostEqual(out["recall_forget_paraphrased"], 0.8)
    self.assertAlmostEqual(out["uq"], 100 * (1 - (0 + 0.8) / 2))   # 60
    self.assertAlmostEqual(out["recall_real_authors"], 0.0)
    # utility = 100 * mean(retain 1, world 2/6, real authors 0).
    self.assertAlmostEqual(out["utility"], 100 * (1 + 1 / 3 + 0) / 3)
    self.assertEqual((out["leak_greedy"], out["leak_prefill"],
                      out["leak_prefill_fixed"], out["leak_sampling"]),
                     (0.0, 1.0, 0.0, 1.0))
    self.assertAlmostEqual(out["recall_prefill"], 1.0)  # vs "in Oslo."
    with self.assertRaisesRegex(ValueError, "prefill_modes"):
      pmc.evaluate_unlearning(None, tok, fs, prompt_fn=p,
                              prefill_modes="bad", generate_fn=fake_generate)


if __name__ == "__main__":
  absltest.main()
