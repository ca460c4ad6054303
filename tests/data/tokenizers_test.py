"""Byte and sentencepiece tokenizers behind one interface."""

import json
import os
import random
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.data import tokenizers


class ByteTokenizerTest(parameterized.TestCase):

  @parameterized.parameters("hello world", "héllo wörld", "你好, 世界",
                            "emoji 🙂👍🏽 and tabs\t\nnewlines", "")
  def test_round_trip(self, text):
    tok = tokenizers.ByteTokenizer()
    ids = tok.encode(text)
    self.assertEqual(ids, list(text.encode("utf-8")))
    self.assertEqual(tok.decode(ids), text)
    with_specials = tok.encode(text, add_bos=True, add_eos=True)
    self.assertEqual(with_specials[0], tok.bos_id)
    self.assertEqual(with_specials[-1], tok.eos_id)
    self.assertEqual(tok.decode(with_specials), text)

  def test_ids_and_vocab(self):
    tok = tokenizers.ByteTokenizer()
    self.assertEqual((tok.pad_id, tok.bos_id, tok.eos_id), (256, 257, 258))
    self.assertEqual(tok.vocab_size, 259)
    self.assertEqual(tok.encode("é"), [0xC3, 0xA9])
    self.assertEqual(tok.decode([tok.pad_id, 104, 105, tok.eos_id]), "hi")

  def test_named_specials(self):
    tok = tokenizers.ByteTokenizer(("<fim_prefix>", "<fim_suffix>", "<fim>"))
    self.assertEqual(tok.vocab_size, 262)
    text = "a<fim_prefix>ü<fim>b<fim_suffix>"
    ids = tok.encode(text)
    self.assertEqual(ids, [97, 259, 0xC3, 0xBC, 261, 98, 260])
    self.assertEqual(tok.decode(ids), text)
    self.assertEqual(tok.token_id("<fim_suffix>"), 260)
    self.assertEqual(tok.add_special_tokens(["<fim>", "<new>"]), [261, 262])
    self.assertEqual(tok.vocab_size, 263)
    with self.assertRaisesRegex(ValueError, "not a single token"):
      tok.token_id("ab")
    with self.assertRaisesRegex(ValueError, "duplicate"):
      tokenizers.ByteTokenizer(("<x>", "<x>"))


def _corpus(n_lines: int, seed: int) -> list[str]:
  rng = random.Random(seed)
  words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "über",
           "naïve", "café", "quick", "brown", "fox", "jumps", "lazy"]
  return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
          for _ in range(n_lines)]


class SentencePieceTokenizerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    cls.dir = tempfile.mkdtemp()
    corpus = os.path.join(cls.dir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as fh:
      fh.write("\n".join(_corpus(400, seed=0)))
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(cls.dir, "tiny"),
        vocab_size=60, model_type="bpe", character_coverage=1.0,
        pad_id=3, bos_id=1, eos_id=2, unk_id=0, minloglevel=2)
    cls.path = os.path.join(cls.dir, "tiny.model")
    cls.sp = spm.SentencePieceProcessor(model_file=cls.path)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    super().tearDownClass()

  def test_interface(self):
    tok = tokenizers.SentencePieceTokenizer(self.path)
    self.assertEqual(tok.vocab_size, 60)
    self.assertEqual((tok.bos_id, tok.eos_id, tok.pad_id), (1, 2, 3))

  def test_round_trip_matches_sentencepiece(self):
    tok = tokenizers.SentencePieceTokenizer(self.path)
    for text in _corpus(20, seed=1) + ["café über naïve"]:
      ids = tok.encode(text)
      self.assertEqual(ids, self.sp.encode(text))
      self.assertEqual(tok.decode(ids), text)
      full = tok.encode(text, add_bos=True, add_eos=True)
      self.assertEqual(full, [1] + ids + [2])
      self.assertEqual(tok.decode(full), text)
    # BPE merged frequent words: fewer ids than characters.
    self.assertLess(len(tok.encode("the quick brown fox")),
                    len("the quick brown fox"))

  def test_token_id(self):
    tok = tokenizers.SentencePieceTokenizer(self.path)
    piece = self.sp.id_to_piece(10)
    self.assertEqual(tok.token_id(piece), 10)

  def test_pad_falls_back_to_eos(self):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    prefix = os.path.join(self.dir, "nopad")
    spm.SentencePieceTrainer.train(
        input=os.path.join(self.dir, "corpus.txt"), model_prefix=prefix,
        vocab_size=40, model_type="unigram", minloglevel=2)
    tok = tokenizers.SentencePieceTokenizer(prefix + ".model")
    self.assertEqual(tok.pad_id, tok.eos_id)

  def test_checkpoint_dir_falls_back_to_tokenizer_model(self):
    # An older checkpoint: tokenizer.model + tokenizer_config.json, no
    # tokenizer.json; special tokens named as sentencepiece spells them.
    ckpt = os.path.join(self.dir, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    shutil.copyfile(self.path, os.path.join(ckpt, "tokenizer.model"))
    with open(os.path.join(ckpt, "tokenizer_config.json"), "w") as fh:
      json.dump({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
                 "pad_token": "<pad>"}, fh)
    tok = tokenizers.from_pretrained(ckpt)
    self.assertEqual((tok.bos_id, tok.eos_id, tok.pad_id), (1, 2, 3))
    self.assertEqual(tok.vocab_size, 60)
    text = _corpus(1, seed=2)[0]
    self.assertEqual(tok.encode(text), self.sp.encode(text))
    self.assertEqual(tok.decode(self.sp.encode(text)), text)
    # Whether a bos goes first is the checkpoint's call (Llama 2:
    # LlamaTokenizer with add_bos_token), as in transformers.
    self.assertEqual(tok.encode(text, add_bos=True), self.sp.encode(text))
    with open(os.path.join(ckpt, "tokenizer_config.json"), "w") as fh:
      json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True,
                 "bos_token": "<s>", "eos_token": "</s>",
                 "pad_token": "<pad>"}, fh)
    tok = tokenizers.from_pretrained(ckpt)
    self.assertEqual(tok.encode(text, add_bos=True), [1] + self.sp.encode(
        text))
    self.assertEqual(tok.encode(text), self.sp.encode(text))

  def test_template_kwargs(self):
    self.assertEqual(tokenizers.template_kwargs(""), {})
    self.assertEqual(tokenizers.template_kwargs(None), {})
    self.assertEqual(tokenizers.template_kwargs('{"enable_thinking": false}'),
                     {"enable_thinking": False})
    import ml_collections  # pylint: disable=g-import-not-at-top
    self.assertEqual(tokenizers.template_kwargs(ml_collections.ConfigDict(
        {"enable_thinking": True})), {"enable_thinking": True})
    with self.assertRaisesRegex(ValueError, "data.x='nope': not a JSON"):
      tokenizers.template_kwargs("nope", field="data.x")
    with self.assertRaisesRegex(ValueError, "expected a JSON object"):
      tokenizers.template_kwargs("[1]")
    row = {"prompt": "q", "tools": [{"name": "f"}]}
    self.assertEqual(tokenizers.row_template_kwargs(row, {"a": 1}),
                     {"a": 1, "tools": [{"name": "f"}]})

  def test_missing_file(self):
    with self.assertRaisesRegex(FileNotFoundError, "no_such.model"):
      tokenizers.SentencePieceTokenizer(os.path.join(self.dir,
                                                     "no_such.model"))



class PaddedVocabTest(absltest.TestCase):

  def test_rounds_up_to_a_multiple_of_64(self):
    self.assertEqual(tokenizers.padded_vocab_size(259), 320)  # bytes + 3
    self.assertEqual(tokenizers.padded_vocab_size(49152), 49152)
    self.assertEqual(tokenizers.padded_vocab_size(49153), 49216)
    self.assertEqual(tokenizers.padded_vocab_size(1), 64)
    self.assertEqual(tokenizers.padded_vocab_size(100, multiple=128), 128)

if __name__ == "__main__":
  absltest.main()
