"""HF checkpoint tokenizers: parity with transformers' AutoTokenizer."""

import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.data import hf_tokenizer
from jaxlab.data import tokenizers
from jaxlab.testing import tokenizer_fixtures as fx

TEXTS = (
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Grüße aus Zürich! 東京は晴れ。 🙂🚀 naïve café",
    "  leading and trailing spaces   \n\n\ttabs\t\tand\r\nnewlines\n",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "<|im_start|>user\nspecial tokens inline<|im_end|>",
    "",
)
CONVERSATIONS = (
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "Be terse."},
     {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! 🙂"},
     {"role": "user", "content": "  spaces  \n"}],
)


def setUpModule():
  global TMP, PATH, REF
  import transformers  # pylint: disable=g-import-not-at-top
  TMP = tempfile.mkdtemp()
  PATH = fx.make_hf_tokenizer(os.path.join(TMP, "chatml"),
                              generation_eos=(2, 0))
  REF = transformers.AutoTokenizer.from_pretrained(PATH)


class HFTokenizerTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tok = tokenizers.from_pretrained(PATH)

  def test_files_are_what_transformers_writes(self):
    self.assertTrue(os.path.exists(os.path.join(PATH, "tokenizer.json")))
    self.assertTrue(os.path.exists(os.path.join(PATH,
                                                "tokenizer_config.json")))

  @parameterized.parameters(*TEXTS)
  def test_encode_decode_equal_auto_tokenizer(self, text):
    ids = self.tok.encode(text)
    self.assertEqual(ids, REF(text, add_special_tokens=False)["input_ids"])
    self.assertEqual(self.tok.decode(ids), REF.decode(ids))
    self.assertEqual(
        self.tok.decode(ids, skip_special_tokens=True),
        REF.decode(ids, skip_special_tokens=True))

  def test_special_tokens(self):
    self.assertEqual(self.tok.bos_id, REF.bos_token_id)
    self.assertEqual(self.tok.eos_id, REF.eos_token_id)
    self.assertEqual(self.tok.pad_id, REF.pad_token_id)
    self.assertEqual(self.tok.vocab_size, len(REF))
    self.assertEqual(self.tok.encode("hi", add_bos=True, add_eos=True),
                     [REF.bos_token_id] + REF.encode(
                         "hi", add_special_tokens=False) + [REF.eos_token_id])
    # generation_config's list joins the tokenizer's own eos, in order.
    self.assertEqual(self.tok.eos_ids, (REF.eos_token_id, 0))

  @parameterized.product(conversation=(0, 1),
                         add_generation_prompt=(True, False))
  def test_chat_template_equals_transformers(self, conversation,
                                             add_generation_prompt):
    messages = CONVERSATIONS[conversation]
    ours = self.tok.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt)
    ref = REF.apply_chat_template(messages,
                                  add_generation_prompt=add_generation_prompt,
                                  tokenize=True, return_dict=False)
    self.assertEqual(ours, list(ref))

  def test_template_variables_and_raise_exception(self):
    path = fx.make_hf_tokenizer(os.path.join(TMP, "bos"),
                                chat_template=fx.BOS_TEMPLATE)
    import transformers  # pylint: disable=g-import-not-at-top
    ref = transformers.AutoTokenizer.from_pretrained(path)
    tok = tokenizers.from_pretrained(path)
    messages = CONVERSATIONS[1][1:]
    self.assertEqual(tok.render_chat(messages, add_generation_prompt=False),
                     ref.apply_chat_template(messages, tokenize=False))
    self.assertTrue(tok.render_chat(messages).startswith("<|endoftext|>"))
    with self.assertRaisesRegex(Exception, "unknown role tool"):
      self.tok.render_chat([{"role": "tool", "content": "x"}])

  def test_chat_loss_mask_covers_exactly_the_assistant_turns(self):
    messages = CONVERSATIONS[1] + [{"role": "assistant", "content": "ok."}]
    ids, mask = self.tok.chat_loss_mask(messages)
    self.assertEqual(ids, self.tok.apply_chat_template(
        messages, add_generation_prompt=False))
    picked = self.tok.decode([i for i, m in zip(ids, mask) if m])
    self.assertEqual(picked, "Hello! 🙂<|im_end|>\nok.<|im_end|>\n")

  def test_missing_tokenizer_json_names_the_file(self):
    empty = os.path.join(TMP, "empty")
    os.makedirs(empty, exist_ok=True)
    with self.assertRaisesRegex(FileNotFoundError,
                                f"{empty}/tokenizer.json: not found"):
      tokenizers.from_pretrained(empty)

  def test_malformed_tokenizer_config_names_the_file(self):
    bad = fx.make_hf_tokenizer(os.path.join(TMP, "bad"))
    with open(os.path.join(bad, "tokenizer_config.json"), "w") as f:
      f.write("{not json")
    with self.assertRaisesRegex(ValueError,
                                "bad/tokenizer_config.json: not valid JSON"):
      tokenizers.from_pretrained(bad)

  def test_build_names_and_errors(self):
    self.assertIsInstance(tokenizers.build("auto", checkpoint=PATH),
                          hf_tokenizer.HFTokenizer)
    with self.assertRaisesRegex(ValueError, "no checkpoint is set"):
      tokenizers.build("auto", field="data.tokenizer")
    with self.assertRaisesRegex(ValueError, "data.tokenizer='bpe'; valid"):
      tokenizers.build("bpe", field="data.tokenizer")

  def test_save_copies_the_files(self):
    out = os.path.join(TMP, "copy")
    hf_tokenizer.save(self.tok, out)
    again = tokenizers.from_pretrained(out)
    self.assertEqual(again.apply_chat_template(CONVERSATIONS[1]),
                     self.tok.apply_chat_template(CONVERSATIONS[1]))
    with open(os.path.join(out, "generation_config.json")) as f:
      self.assertEqual(json.load(f)["eos_token_id"], [2, 0])


if __name__ == "__main__":
  absltest.main()
