"""Data and loss of the rope_extension / frequency_entropy experiments."""

from absl.testing import absltest
import jax
import numpy as np
from flax import nnx

from jaxlab.experiments import frequency_entropy as fe_exp
from jaxlab.experiments import rope_extension as rope_exp
from jaxlab.data.tokenizers import ByteTokenizer
from jaxlab.models import decoder as decoder_lib

TOK = ByteTokenizer()


class PasskeyTaskTest(absltest.TestCase):

  def test_examples_hold_one_copy_episode(self):
    src = rope_exp.PasskeySource(TOK, num=40, length=64, digits=3, seed=5,
                                 answer_weight=20.0)
    question_positions = set()
    for i in range(len(src)):
      ex = src[i]
      self.assertEqual(ex["inputs"].shape, (64,))
      np.testing.assert_array_equal(ex["inputs"][1:], ex["targets"][:-1])
      ans_idx = np.flatnonzero(ex["answer_mask"])
      self.assertLen(ans_idx, 3)
      np.testing.assert_array_equal(np.diff(ans_idx), [1, 1])
      answer = TOK.decode(ex["targets"][ans_idx])
      self.assertLen(set(answer), 3)          # distinct digits
      self.assertTrue(answer.isdigit())
      # The answer follows the question marker, and the needle (marker +
      # the same digits) is the only earlier marker.
      q = ans_idx[0]
      self.assertEqual(TOK.decode(ex["inputs"][q:q + 1]), "#")
      prompt = TOK.decode(ex["inputs"][:q])
      self.assertEqual(prompt.count("#"), 1)
      self.assertIn(f"#{answer}. ", prompt)
      np.testing.assert_array_equal(ex["loss_mask"],
                                    1.0 + 19.0 * ex["answer_mask"])
      question_positions.add(int(q))
    # The question does not always sit at the same position.
    self.assertGreater(len(question_positions), 10)

  def test_loss_and_metrics_match_numpy(self):
    cfg = decoder_lib.DecoderConfig(vocab_size=TOK.vocab_size, dim=32,
                                    num_layers=1, num_heads=2, num_kv_heads=1,
                                    mlp_dim=64)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    src = rope_exp.PasskeySource(TOK, num=4, length=48, digits=3, seed=1,
                                 answer_weight=5.0)
    batch = {k: np.stack([src[i][k] for i in range(4)]) for k in src[0]}
    # Make the first row's answer exactly right: its targets become the
    # model's own argmax there, so exact match is 1 for row 0.
    logits = np.asarray(model(batch["inputs"]), np.float64)
    pred = logits.argmax(-1)
    ans = batch["answer_mask"] > 0
    batch["targets"][0][ans[0]] = pred[0][ans[0]]
    loss, m = rope_exp.passkey_loss(model, batch, rng=jax.random.key(0))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, batch["targets"][..., None], -1)[..., 0]
    w = batch["loss_mask"]
    self.assertAlmostEqual(float(loss), (nll * w).sum() / w.sum(), places=4)
    correct = pred == batch["targets"]
    self.assertAlmostEqual(float(m["answer_acc"]), correct[ans].mean(),
                           places=6)
    want_exact = np.mean([correct[r][ans[r]].all() for r in range(4)])
    self.assertAlmostEqual(float(m["answer_exact"]), want_exact, places=6)
    self.assertGreaterEqual(float(m["answer_exact"]), 0.25)
    self.assertAlmostEqual(float(m["answer_nll"]), nll[ans].mean(), places=4)


class StreamSourceTest(absltest.TestCase):

  def test_windows_tile_one_stream_without_padding(self):
    docs = [[257, 1, 2, 3, 258], [257, 4, 5, 258], [257, 6, 7, 8, 9, 258]]
    src = fe_exp.StreamSource(docs, seq_len=4)
    stream = np.concatenate([np.asarray(d) for d in docs])
    self.assertLen(src, (len(stream) - 1) // 4)
    for i in range(len(src)):
      ex = src[i]
      np.testing.assert_array_equal(ex["inputs"], stream[4 * i:4 * i + 4])
      np.testing.assert_array_equal(ex["targets"],
                                    stream[4 * i + 1:4 * i + 5])
      np.testing.assert_array_equal(ex["loss_mask"], np.ones(4))
    with self.assertRaisesRegex(ValueError, "shorter than one sequence"):
      fe_exp.StreamSource([[1, 2]], seq_len=4)
    # rows(n): the first n windows' inputs, capped at the windows there are.
    np.testing.assert_array_equal(src.rows(2), stream[:8].reshape(2, 4))
    self.assertEqual(src.rows(99).shape, (len(src), 4))


class SmolLM2PresetTest(absltest.TestCase):

  def test_preset_probes_a_pretrained_model_on_the_fixed_corpus(self):
    from jaxlab.configs import frequency_entropy as fe_config  # pylint: disable=g-import-not-at-top
    from jaxlab.data import prose  # pylint: disable=g-import-not-at-top
    c = fe_config.get_config("smollm2")
    self.assertEqual(c.init_from, "smollm2-135m-instruct")
    self.assertEqual(fe_config.get_config(None).init_from, "")
    # 7 STFT frames over the probe signal, as the paper's 4096/1024/512.
    self.assertEqual(1 + (c.fe.probe_len - c.fe.frame) // c.fe.hop, 7)
    # held-out and probe passages do not overlap
    self.assertLessEqual(c.fe.num_eval_seqs, c.fe.probe_from)
    self.assertLess(c.fe.probe_from, len(prose.passages()))
    self.assertEqual(tuple(c.fe.alphas), (0.1,))  # the paper's downstream


class ProseTest(absltest.TestCase):

  def test_token_windows(self):
    from jaxlab.data import prose  # pylint: disable=g-import-not-at-top

    class WordTok:  # one id per word: the windows are easy to read
      def encode(self, text):
        return [len(w) for w in text.split()]

    texts = ["a bb ccc dddd", "ee f gg hhh iiii"]
    np.testing.assert_array_equal(prose.token_windows(WordTok(), texts, 3),
                                  [[1, 2, 3], [2, 1, 2]])
    # stream: joined by a blank line (no word), cut into whole windows
    np.testing.assert_array_equal(
        prose.token_windows(WordTok(), texts, 4, stream=True),
        [[1, 2, 3, 4], [2, 1, 2, 3]])
    self.assertEqual(prose.token_windows(WordTok(), texts, 2, stream=True,
                                         max_windows=3).shape, (3, 2))
    with self.assertRaisesRegex(ValueError, "passage 0 has 4 tokens"):
      prose.token_windows(WordTok(), texts, 5)
    self.assertGreaterEqual(min(len(p.split()) for p in prose.passages()),
                            250)


if __name__ == "__main__":
  absltest.main()
