"""Long-context evaluation: generators, scoring, perplexity, RoPE harness."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.evals import long_context as lc
from jaxlab.models import decoder as decoder_lib

TOK = ByteTokenizer()


def _model(**kw):
  cfg = decoder_lib.DecoderConfig(
      vocab_size=TOK.vocab_size, dim=32, num_layers=2, num_heads=2,
      num_kv_heads=1, mlp_dim=64, head_dim=16, **kw)
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))


class _Oracle(nnx.Module):
  """Logits that predict the next token of the input (peeking ahead)."""

  def __init__(self, vocab: int, wrong_from_end: int = 0):
    self.vocab = vocab
    self.wrong_from_end = wrong_from_end

  def __call__(self, ids_bt):
    nxt = jnp.roll(ids_bt, -1, axis=1)
    if self.wrong_from_end:
      t = ids_bt.shape[1]
      bad = jnp.arange(t) >= t - 1 - self.wrong_from_end
      nxt = jnp.where(bad, (nxt + 1) % self.vocab, nxt)
    return jax.nn.one_hot(nxt, self.vocab)


class GeneratorTest(parameterized.TestCase):

  @parameterized.parameters(0.0, 0.3, 0.5, 1.0)
  def test_passkey_prompt(self, depth):
    ex = lc.passkey_example(TOK, length=400, depth=depth,
                            rng=np.random.default_rng(1))
    self.assertLen(ex.prompt_ids, 400)
    text = TOK.decode(ex.prompt_ids)
    self.assertEqual(TOK.decode(ex.answer_ids), ex.answer)
    self.assertLen(ex.answer, 5)
    needle = f"The pass key is {ex.answer}."
    self.assertEqual(text.count(needle), 1)
    self.assertTrue(text.endswith(lc.PASSKEY_QUESTION))
    self.assertTrue(TOK.decode(ex.prompt_ids[ex.needle_start:]).startswith(
        needle))
    # The needle sits at a sentence boundary near the requested depth.
    n_fill = 400 - len(lc.PASSKEY_PREFIX) - len(lc.PASSKEY_QUESTION) - len(
        lc.PASSKEY_NEEDLE.format(value=ex.answer))
    offset = ex.needle_start - len(lc.PASSKEY_PREFIX)
    self.assertLessEqual(abs(offset - depth * n_fill), 25)
    if depth == 0.0:
      self.assertEqual(ex.needle_start, len(lc.PASSKEY_PREFIX))
    if depth == 1.0:
      self.assertTrue(text.endswith(
          lc.PASSKEY_NEEDLE.format(value=ex.answer) + lc.PASSKEY_QUESTION))
    else:  # a sentence boundary (depth 1 may follow a truncated sentence)
      self.assertEqual(text[ex.needle_start - 2:ex.needle_start], ". ")

  def test_needle_with_distractors(self):
    ex = lc.needle_example(TOK, length=500, depth=0.4, num_distractors=3,
                           rng=np.random.default_rng(2))
    self.assertLen(ex.prompt_ids, 500)
    text = TOK.decode(ex.prompt_ids)
    self.assertEqual(text.count("The special magic"), 4 + 1)  # + question
    key = text.rsplit("What is the special magic ", 1)[1].split(" ")[0]
    self.assertEqual(text.count(f"magic {key} number is: {ex.answer}."), 1)

  def test_grid_is_deterministic_and_covers_cells(self):
    kw = dict(lengths=[300, 400], depths=[0.1, 0.9], samples=3, seed=7)
    a = lc.retrieval_grid(lc.passkey_example, TOK, **kw)
    b = lc.retrieval_grid(lc.passkey_example, TOK, **kw)
    self.assertLen(a, 12)
    self.assertEqual([x.answer for x in a], [x.answer for x in b])
    self.assertEqual(sorted({(x.length, x.depth) for x in a}),
                     [(300, 0.1), (300, 0.9), (400, 0.1), (400, 0.9)])

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, "too short"):
      lc.passkey_example(TOK, length=100, depth=0.5,
                         rng=np.random.default_rng(0))
    with self.assertRaisesRegex(ValueError, "depth"):
      lc.passkey_example(TOK, length=400, depth=1.5,
                         rng=np.random.default_rng(0))


class ScoringTest(absltest.TestCase):

  def test_oracle_scores(self):
    exs = lc.retrieval_grid(lc.passkey_example, TOK, lengths=[300],
                            depths=[0.2, 0.7], samples=3)
    perfect = lc.evaluate_retrieval(_Oracle(TOK.vocab_size), exs,
                                    batch_size=4)
    self.assertEqual(perfect["exact"], 1.0)
    self.assertEqual(perfect["cells"][(300, 0.2)]["n"], 3)
    # Wrong on the last answer digit: exact 0, token accuracy 4/5.
    last_wrong = lc.evaluate_retrieval(_Oracle(TOK.vocab_size, 1), exs)
    self.assertEqual(last_wrong["exact"], 0.0)
    self.assertAlmostEqual(last_wrong["token_accuracy"], 0.8)

  def test_chunked_perplexity_matches_manual(self):
    model = _model()
    toks = np.random.default_rng(3).integers(0, 256, (2, 96))

    def nll_rows(ids):
      logits = np.asarray(lc.model_logits(model, ids), np.float64)
      logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
      return -np.take_along_axis(logp[:, :-1], ids[:, 1:, None], -1)[..., 0]

    # Disjoint windows of 32: every window scores its 31 targets. (Batches
    # of 6 rows throughout, so the model compiles once.)
    got = lc.chunked_perplexity(model, toks, chunk_len=32, batch_size=6)
    windows = toks.reshape(6, 32)
    want = nll_rows(windows)
    self.assertEqual(got["tokens"], 6 * 31)
    self.assertAlmostEqual(got["nll"], want.mean(), places=5)
    # Stride 16: the first window scores all, later ones their last 16.
    got = lc.chunked_perplexity(model, toks[:1], chunk_len=32, stride=16,
                                batch_size=6)
    wins = np.stack([toks[0, s:s + 32] for s in range(0, 65, 16)])
    per = nll_rows(np.concatenate([wins, wins[:1]]))[:5]
    want = np.concatenate([per[0]] + [p[-16:] for p in per[1:]])
    self.assertEqual(got["tokens"], 95)  # each target of the row once
    self.assertAlmostEqual(got["nll"], want.mean(), places=5)
    self.assertAlmostEqual(got["perplexity"], math.exp(want.mean()),
                           places=3)
    # score_from skips early window positions.
    got = lc.chunked_perplexity(model, toks, chunk_len=32, score_from=16,
                                batch_size=6)
    self.assertAlmostEqual(got["nll"], nll_rows(windows)[:, 15:].mean(),
                           places=5)


class HarnessTest(parameterized.TestCase):

  def test_scaling_for(self):
    self.assertIsNone(lc.scaling_for("default", train_len=64, eval_len=256))
    self.assertEqual(
        lc.scaling_for("mrope_pro", train_len=64, eval_len=256),
        {"method": "mrope_pro", "factor": 4.0, "original_max_position": 64})
    self.assertEqual(
        lc.scaling_for("dynamic_ntk", train_len=64, eval_len=256)["factor"],
        1.0)
    self.assertEqual(lc.scaling_for("yarn", train_len=64, eval_len=32)
                     ["factor"], 1.0)

  def test_same_params_and_pi_equals_position_halving(self):
    model = _model()
    pi = lc.with_rope_scaling(model, {"method": "pi", "factor": 2.0})
    self.assertIs(pi.layers[0].attn.q_dnh[...], model.layers[0].attn.q_dnh[...])
    self.assertEqual(pi.cfg.rope_scaling["method"], "pi")
    self.assertIsNone(model.cfg.rope_scaling)
    ids = jnp.asarray(np.random.default_rng(4).integers(0, 256, (1, 40)))
    pos = jnp.arange(40)[None]
    fwd = jax.jit(lambda g, s, x, p: nnx.merge(g, s)(x, positions=p))
    np.testing.assert_array_equal(
        np.asarray(fwd(*nnx.split(pi), ids, 2 * pos)),
        np.asarray(fwd(*nnx.split(model), ids, pos)))
    back = lc.with_rope_scaling(pi, None)
    np.testing.assert_array_equal(np.asarray(lc.model_logits(back, ids)),
                                  np.asarray(lc.model_logits(model, ids)))

  def test_dynamic_ntk_follows_sequence_length(self):
    model = _model()
    dyn = lc.with_rope_scaling(model, {"method": "dynamic_ntk", "factor": 1.0,
                                       "original_max_position": 32})
    ids = jnp.asarray(np.random.default_rng(5).integers(0, 256, (1, 96)))
    # Within L: the default frequencies; at T = 3L: NTK with S = 3.
    run = lambda m, x: np.asarray(lc.model_logits(m, x))
    np.testing.assert_array_equal(run(dyn, ids[:, :32]),
                                  run(model, ids[:, :32]))
    ntk3 = lc.with_rope_scaling(model, {"method": "ntk", "factor": 3.0})
    np.testing.assert_allclose(run(dyn, ids), run(ntk3, ids), atol=1e-7)
    self.assertGreater(np.abs(run(dyn, ids) - run(model, ids)).max(), 1e-4)

  def test_train_short_test_long(self):
    model = _model()
    toks = np.random.default_rng(6).integers(0, 256, (1, 128))
    tasks = {"ppl": lambda m, n: lc.chunked_perplexity(
        m, toks, chunk_len=n)["perplexity"]}
    res = lc.train_short_test_long(
        model, train_len=32, eval_lengths=[64, 128], tasks=tasks,
        methods=("default", "mrope_pro"))
    self.assertEqual(res["lengths"], [64, 128])
    want = lc.chunked_perplexity(model, toks, chunk_len=128)["perplexity"]
    self.assertAlmostEqual(res["metrics"]["ppl"]["default"][1], want,
                           places=4)
    pro = lc.with_rope_scaling(model, {"method": "mrope_pro", "factor": 2.0,
                                       "original_max_position": 32})
    self.assertAlmostEqual(
        res["metrics"]["ppl"]["mrope_pro"][0],
        lc.chunked_perplexity(pro, toks, chunk_len=64)["perplexity"],
        places=4)
    with self.assertRaisesRegex(ValueError, "valid choices: .*mrope_uni"):
      lc.train_short_test_long(model, train_len=32, eval_lengths=[64],
                               tasks=tasks, methods=("mrope",))


class _ChatBytes(ByteTokenizer):
  """Bytes with a ChatML-like template (what `chat_needle_example` reads)."""

  def render_chat(self, messages, add_generation_prompt=True):
    del add_generation_prompt
    return "".join(f"<{m['role']}>{m['content']}</>" for m in messages) + (
        "<assistant>")


class ChatNeedleTest(absltest.TestCase):

  def test_length_needle_and_template(self):
    tok = _ChatBytes()
    ex = lc.chat_needle_example(tok, length=700, depth=0.5,
                                rng=np.random.default_rng(3), digits=4)
    self.assertLen(ex.prompt_ids, 700)
    text = tok.decode(ex.prompt_ids.tolist())
    needle = f"The secret code is {ex.answer}. "
    self.assertEqual(tok.decode(ex.prompt_ids[ex.needle_start:ex.needle_start
                                              + len(needle)].tolist()), needle)
    self.assertEqual(text.count(ex.answer), 1)
    self.assertTrue(text.startswith("<user>" + lc.CHAT_INTRO))
    self.assertTrue(text.endswith(lc.CHAT_QUESTION + "</><assistant>"))
    self.assertLen(ex.answer, 4)
    self.assertNotEqual(ex.answer[0], "0")
    self.assertEqual(ex.parts, (ex.answer,))
    # Depth 0.5: the needle starts near the middle of the haystack.
    self.assertLess(abs(ex.needle_start / 700 - 0.5), 0.1)


if __name__ == "__main__":
  absltest.main()
