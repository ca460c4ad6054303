"""HF checkpoint tokenizers: parity with transformers' AutoTokenizer.

ChatML and Qwen3-style tokenizers are built in the test (`tokenizers`, the
templates' text); the assistant masks are checked token by token.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.configs import generate as generate_cfg
from jaxlab.data import hf_tokenizer
from jaxlab.data import pipeline
from jaxlab.data import sources
from jaxlab.data import tokenizers
from jaxlab.experiments import generate as generate_exp
from jaxlab.experiments import rl as rl_exp
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


# ChatML whose assistant content is inside {% generation %} markers.
GENERATION_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] }}{% endgeneration %}"
    "{% else %}{{ message['content'] }}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}")


def runs(tok, ids, mask) -> list[str]:
  """The decoded runs of consecutive masked tokens."""
  out, cur = [], []
  for i, m in zip(list(ids) + [None], list(mask) + [0]):
    if m:
      cur.append(i)
    elif cur:
      out.append(tok.decode(cur))
      cur = []
  return out


def _edit_json(path, **fields):
  with open(path) as f:
    data = json.load(f)
  data.update(fields)
  with open(path, "w") as f:
    json.dump(data, f)


def setUpModule():
  global TMP, PATH, REF
  import transformers  # pylint: disable=g-import-not-at-top
  TMP = tempfile.mkdtemp()
  PATH = fx.make_hf_tokenizer(os.path.join(TMP, "chatml"),
                              generation_eos=(2, 0))
  REF = transformers.AutoTokenizer.from_pretrained(PATH)


def tearDownModule():
  shutil.rmtree(TMP, ignore_errors=True)


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
    # add_bos adds what the checkpoint's tokenizer adds (here: nothing).
    self.assertEqual(self.tok.encode("hi", add_bos=True, add_eos=True),
                     REF("hi")["input_ids"] + [REF.eos_token_id])
    self.assertEqual(self.tok.encode("hi", add_special_tokens=True),
                     REF("hi")["input_ids"])
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
    # Content + end-of-turn token; not the role header, not the newline.
    self.assertEqual(runs(self.tok, ids, mask),
                     ["Hello! 🙂<|im_end|>", "ok.<|im_end|>"])

  def test_continue_final_message_and_template_override(self):
    messages = CONVERSATIONS[1][:3]
    ours = self.tok.apply_chat_template(messages, add_generation_prompt=False,
                                        continue_final_message=True)
    ref = REF.apply_chat_template(messages, continue_final_message=True,
                                  tokenize=True, return_dict=False)
    self.assertEqual(ours, list(ref))
    self.assertFalse(self.tok.decode(ours).endswith("<|im_end|>\n"))
    ids, mask = self.tok.chat_loss_mask(messages, continue_final_message=True)
    self.assertEqual(runs(self.tok, ids, mask), ["Hello! 🙂"])
    ours = self.tok.render_chat(messages, chat_template=fx.BOS_TEMPLATE)
    self.assertEqual(ours, REF.apply_chat_template(
        messages, chat_template=fx.BOS_TEMPLATE, tokenize=False,
        add_generation_prompt=True))
    self.assertTrue(ours.startswith("<|endoftext|> Be terse.<|im_end|>"
                                    "[INST] Hi [/INST]"), ours)
    with self.assertRaisesRegex(TypeError, "fixed"):
      self.tok.apply_chat_template(messages, tokenize=False)
    with self.assertRaisesRegex(ValueError, "add_generation_prompt"):
      self.tok.chat_loss_mask(messages, add_generation_prompt=True)

  @parameterized.named_parameters(
      # Llama 3's layout (its header/eot tokens played by the fixture's).
      ("llama3", "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + "
       "m['role'] + '<|endoftext|>\n\n' + m['content'] | trim + "
       "'<|im_end|>' }}{% endfor %}{% if add_generation_prompt %}"
       "{{ '<|im_start|>assistant<|endoftext|>\n\n' }}{% endif %}",
       ["Hello! 🙂<|im_end|>", "ok.<|im_end|>"]),
      # Gemma's: a "model" role, no system role, newline after the eot.
      ("gemma", "{% for m in messages %}{% set role = 'model' if m['role'] "
       "== 'assistant' else m['role'] %}{{ '<|im_start|>' + role + '\n' + "
       "m['content'] + '<|im_end|>\n' }}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|im_start|>model\n' }}{% endif %}",
       ["Hello! 🙂<|im_end|>", "ok.<|im_end|>"]),
      # Llama 2's: no generation prompt, the answer after [/INST].
      ("llama2", fx.BOS_TEMPLATE, [" Hello! 🙂<|im_end|>", " ok.<|im_end|>"]))
  def test_mask_on_other_template_layouts(self, template, want):
    messages = CONVERSATIONS[1][1:] + [{"role": "assistant", "content": "ok."}]
    ids, mask = self.tok.chat_loss_mask(messages, chat_template=template)
    self.assertEqual(ids, list(REF.apply_chat_template(
        messages, chat_template=template, tokenize=True, return_dict=False)))
    self.assertEqual(runs(self.tok, ids, mask), want)

  def test_generation_markers_give_transformers_assistant_mask(self):
    messages = CONVERSATIONS[1] + [{"role": "assistant", "content": "ok."}]
    self.assertFalse(self.tok.has_generation_markers())
    self.assertTrue(self.tok.has_generation_markers(GENERATION_TEMPLATE))
    ids, mask = self.tok.chat_loss_mask(messages,
                                        chat_template=GENERATION_TEMPLATE)
    ref = REF.apply_chat_template(messages, chat_template=GENERATION_TEMPLATE,
                                  tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    self.assertEqual(ids, list(ref["input_ids"]))
    self.assertEqual(mask, list(ref["assistant_masks"]))
    # What the markers enclose (here the content only, no end-of-turn).
    self.assertEqual(runs(self.tok, ids, mask), ["Hello! 🙂", "ok."])

  def test_add_bos_follows_the_checkpoint(self):
    import transformers  # pylint: disable=g-import-not-at-top
    # SmolLM2: bos_token is <|im_start|>, but its tokenizer adds nothing.
    smol = fx.make_hf_tokenizer(os.path.join(TMP, "smol"))
    _edit_json(os.path.join(smol, "tokenizer_config.json"),
               bos_token="<|im_start|>")
    # Llama 3: the post-processor puts <|begin_of_text|> (here id 0) first.
    llama = fx.make_hf_tokenizer(os.path.join(TMP, "llama"))
    _edit_json(os.path.join(llama, "tokenizer.json"), post_processor={
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {
            "id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}})
    for path, prefix in ((smol, []), (llama, [0])):
      ref = transformers.AutoTokenizer.from_pretrained(path)
      tok = tokenizers.from_pretrained(path)
      self.assertEqual(tok.bos_prefix, prefix)
      for text in TEXTS[:3]:
        self.assertEqual(tok.encode(text, add_bos=True),
                         ref(text)["input_ids"])
        self.assertEqual(tok.encode(text, add_bos=True),
                         prefix + tok.encode(text))
      # generate's text prompts: transformers' ids, not bos_token + ids.
      cfg = generate_cfg.get_config()
      ids, _ = generate_exp._prompts(  # pylint: disable=protected-access
          cfg, tok)
      self.assertEqual(ids, [ref(t)["input_ids"] for t in cfg.prompts])
    self.assertEqual(tokenizers.from_pretrained(smol).bos_id, 1)

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


def get_weather(city: str, unit: str = "celsius") -> str:
  """Gets the current weather in a city.

  Args:
    city: The city's name.
    unit: celsius or fahrenheit.
  """
  del city, unit
  return "sunny"


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Gets the current weather.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"]}}}

# Three assistant turns; thinking in the earlier two (as reasoning_content
# and inline in the content), which Qwen3's template drops from them.
THINKING_CHAT = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "reasoning_content": "2 plus 3 is 5.",
     "content": "5."},
    {"role": "user", "content": "And 4 + 4?"},
    {"role": "assistant",
     "content": "<think>\nFour and four.\n</think>\n\n8, naïve café."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "reasoning_content": "Be polite.",
     "content": "You are welcome 🙂"},
]
# The full rendering, cut into (text, is assistant-written) by hand.
THINKING_SEGMENTS = [
    ("<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\n"
     "What is 2 + 3?<|im_end|>\n<|im_start|>assistant\n", 0),
    ("5.<|im_end|>", 1),
    ("\n<|im_start|>user\nAnd 4 + 4?<|im_end|>\n<|im_start|>assistant\n", 0),
    ("8, naïve café.<|im_end|>", 1),
    ("\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n", 0),
    ("<think>\nBe polite.\n</think>\n\nYou are welcome 🙂<|im_end|>", 1),
    ("\n", 0),
]
TOOL_CHAT = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny."},
]


class Qwen3TokenizerTest(parameterized.TestCase):
  """A Qwen3-style tokenizer (built with `tokenizers`) and its template."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    import transformers  # pylint: disable=g-import-not-at-top
    cls.path = fx.make_qwen3_tokenizer(os.path.join(TMP, "qwen3"))
    cls.ref = transformers.AutoTokenizer.from_pretrained(cls.path)
    cls.tok = tokenizers.from_pretrained(cls.path)

  def _ref_ids(self, messages, **kw):
    return list(self.ref.apply_chat_template(messages, tokenize=True,
                                             return_dict=False, **kw))

  @parameterized.parameters(*TEXTS, "<think>\nhm\n</think>\n\n<tool_call>")
  def test_encode_decode_equal_auto_tokenizer(self, text):
    ids = self.tok.encode(text)
    self.assertEqual(ids, self.ref(text, add_special_tokens=False)[
        "input_ids"])
    self.assertEqual(self.tok.encode(text, add_bos=True), self.ref(text)[
        "input_ids"])  # Qwen has no bos
    for skip in (False, True):
      self.assertEqual(self.tok.decode(ids, skip_special_tokens=skip),
                       self.ref.decode(ids, skip_special_tokens=skip))

  def test_special_tokens(self):
    self.assertIsNone(self.tok.bos_id)
    self.assertEqual(self.tok.eos_id, self.ref.convert_tokens_to_ids(
        "<|im_end|>"))
    self.assertEqual(self.tok.eos_ids, (self.tok.eos_id, self.tok.pad_id))
    self.assertEqual(self.tok.vocab_size, len(self.ref))
    self.assertEqual(self.tok.vocab_size, 400)

  def test_three_turn_thinking_mask_is_content_and_end_of_turn(self):
    ids, mask = self.tok.chat_loss_mask(THINKING_CHAT)
    full = "".join(text for text, _ in THINKING_SEGMENTS)
    self.assertEqual(self.ref.apply_chat_template(THINKING_CHAT,
                                                  tokenize=False), full)
    self.assertEqual(ids, self._ref_ids(THINKING_CHAT))
    want_ids, want_mask = [], []
    for text, written in THINKING_SEGMENTS:
      piece = self.ref.encode(text, add_special_tokens=False)
      want_ids += piece
      want_mask += [written] * len(piece)
    self.assertEqual(ids, want_ids)  # the segments tokenize apart
    self.assertEqual(mask, want_mask)  # token by token
    im_end = self.tok.eos_id
    ends = [k for k, m in enumerate(mask) if m and (
        k + 1 == len(mask) or not mask[k + 1])]
    self.assertEqual([ids[k] for k in ends], [im_end] * 3)
    self.assertEqual(runs(self.tok, ids, mask),
                     [t for t, w in THINKING_SEGMENTS if w])

  def test_mask_without_thinking_and_from_pipeline(self):
    ids, mask = self.tok.chat_loss_mask(THINKING_CHAT[:5],
                                        enable_thinking=False)
    self.assertEqual(ids, self._ref_ids(THINKING_CHAT[:5],
                                        enable_thinking=False))
    self.assertEqual(runs(self.tok, ids, mask), [
        "5.<|im_end|>",
        "<think>\nFour and four.\n</think>\n\n8, naïve café.<|im_end|>"])
    no_think = [dict(m) for m in THINKING_CHAT]
    no_think[-1] = {"role": "assistant", "content": "Welcome."}
    ids, mask = self.tok.chat_loss_mask(no_think, enable_thinking=False)
    # The pre-filled empty thinking is prompt, not written by the model.
    self.assertEqual(runs(self.tok, ids, mask)[-1], "Welcome.<|im_end|>")
    rows = pipeline.chat_examples([THINKING_CHAT], self.tok, seq_len=160)
    targets = [int(t) for t, m in zip(rows[0]["targets"],
                                      rows[0]["loss_mask"]) if m]
    want = self.tok.chat_loss_mask(THINKING_CHAT)
    self.assertEqual(targets, [i for i, m in zip(*want) if m][:len(targets)])
    self.assertEqual(len(targets), sum(want[1]))

  def test_generation_prompt_with_tools_equals_transformers(self):
    messages = THINKING_CHAT[:2]
    for tools in ([WEATHER_TOOL], [get_weather], [WEATHER_TOOL, get_weather]):
      for kw in ({}, {"enable_thinking": False}):
        ours = self.tok.apply_chat_template(messages, tools=tools, **kw)
        self.assertEqual(ours, self._ref_ids(
            messages, tools=tools, add_generation_prompt=True, **kw))
    text = self.tok.render_chat(messages, tools=[get_weather],
                                enable_thinking=False)
    self.assertIn('"name": "get_weather"', text)
    self.assertIn("The city's name.", text)
    self.assertTrue(text.endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"))

  def test_tool_call_turns(self):
    ids, mask = self.tok.chat_loss_mask(TOOL_CHAT, tools=[get_weather])
    self.assertEqual(ids, self._ref_ids(TOOL_CHAT, tools=[get_weather]))
    self.assertEqual(runs(self.tok, ids, mask), [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": '
        '"Paris"}}\n</tool_call><|im_end|>',
        "<think>\n\n</think>\n\nIt is sunny.<|im_end|>"])

  def test_chat_rows_keep_tools_content_lists_and_null_content(self):
    path = os.path.join(TMP, "rows.jsonl")
    image_chat = [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "What is it?"}]},
                  {"role": "assistant", "content": "A cat."}]
    with open(path, "w") as f:
      f.write(json.dumps({"messages": TOOL_CHAT, "tools": [WEATHER_TOOL]})
              + "\n")
      f.write(json.dumps({"messages": image_chat}) + "\n")
    rows = sources.read_chat_rows(path)
    self.assertEqual(rows[0], {"messages": TOOL_CHAT, "tools": [WEATHER_TOOL]})
    self.assertEqual(rows[1], {"messages": image_chat})
    self.assertEqual(sources.read_chat_jsonl(path), [TOOL_CHAT, image_chat])
    # The row's tools reach the template; the config's keywords too.
    examples = pipeline.chat_examples(rows[:1], self.tok, seq_len=1024,
                                      template_kwargs={"enable_thinking":
                                                       False})
    want_ids, _ = self.tok.chat_loss_mask(TOOL_CHAT, tools=[WEATHER_TOOL],
                                          enable_thinking=False)
    n = len(want_ids) - 1
    self.assertEqual(list(examples[0]["inputs"][:n]), want_ids[:-1])
    self.assertIn("# Tools", self.tok.decode(want_ids))
    with open(path, "w") as f:
      f.write(json.dumps({"messages": [{"role": "user", "content": None}]})
              + "\n")
    with self.assertRaisesRegex(ValueError, "conversation 1: message 0: "
                                "'content' may be null only"):
      sources.read_chat_rows(path)
    with open(path, "w") as f:  # `text` where the schema says `content`
      f.write(json.dumps({"messages": [{"role": "user", "text": "hi"}]})
              + "\n")
    with self.assertRaisesRegex(ValueError, r"message 0: a message needs "
                                r"'content'.*\['role', 'text'\]"):
      sources.read_chat_rows(path)
    with self.assertRaisesRegex(ValueError, "conversation 2 has no assistant "
                                r"message.*\['user'\]"):
      pipeline.chat_examples([image_chat, image_chat[:1]], self.tok,
                             seq_len=64)


  def test_generate_and_rl_pass_template_kwargs(self):
    chats = os.path.join(TMP, "ask.jsonl")
    ask = THINKING_CHAT[:2]
    with open(chats, "w") as f:
      f.write(json.dumps({"messages": ask, "tools": [WEATHER_TOOL]}) + "\n")
      f.write(json.dumps({"messages": ask}) + "\n")
    cfg = generate_cfg.get_config()
    # As --config.chat_template_kwargs='{"enable_thinking": false}'.
    cfg.update(chats=chats, prompts=("Hi",),
               chat_template_kwargs='{"enable_thinking": false}')
    ids, _ = generate_exp._prompts(  # pylint: disable=protected-access
        cfg, self.tok)
    self.assertEqual(ids, [
        self.ref("Hi")["input_ids"],
        self._ref_ids(ask, tools=[WEATHER_TOOL], enable_thinking=False,
                      add_generation_prompt=True),
        self._ref_ids(ask, enable_thinking=False,
                      add_generation_prompt=True)])
    encode = rl_exp.encoder(self.tok, chat=True,
                            template_kwargs={"enable_thinking": False})
    self.assertEqual(encode({"prompt": "Hi", "tools": [WEATHER_TOOL]}),
                     self._ref_ids([{"role": "user", "content": "Hi"}],
                                   tools=[WEATHER_TOOL], enable_thinking=False,
                                   add_generation_prompt=True))


if __name__ == "__main__":
  absltest.main()
