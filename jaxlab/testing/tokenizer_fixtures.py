"""Tiny Hugging Face tokenizers for tests, written the way the hub ships them.

    path = make_hf_tokenizer(tmp_dir)             # byte-level BPE + ChatML
    ref = transformers.AutoTokenizer.from_pretrained(path)

A byte-level BPE is trained with the `tokenizers` library on a small built-in
corpus, wrapped in transformers' `PreTrainedTokenizerFast` with ChatML special
tokens and a chat template, and saved with `save_pretrained` (tokenizer.json,
tokenizer_config.json, chat_template.jinja, ...). transformers is imported
lazily: this module is test-only.
"""

import json
import os

CORPUS = (
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Once upon a time, there was a tiny model that learned to count: "
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10.",
    "Grüße aus Zürich! Ça va? 東京は晴れ。 emoji: 🙂🚀",
    "    indented\tand\ttabbed\n\n\nlines   with   spaces",
    "user: what is 2 + 3? assistant: 2 + 3 = 5.",
)

# ChatML, as Qwen-style checkpoints ship it; exercises loops, conditionals,
# `raise_exception` and a default system message.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + message['role']) }}{% endif %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# Llama-2 style: bos/eos from the special-token variables.
BOS_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + "
    "' [/INST]' }}{% else %}{{ ' ' + message['content'] + eos_token }}"
    "{% endif %}{% endfor %}")


def make_hf_tokenizer(path: str | os.PathLike, *, vocab_size: int = 400,
                      chat_template: str = CHATML_TEMPLATE,
                      generation_eos: tuple[int, ...] | None = None) -> str:
  """Trains, wraps and saves a byte-level BPE tokenizer; returns `path`.

  Specials: `<|endoftext|>` (bos and pad), `<|im_start|>`, `<|im_end|>` (eos).
  `generation_eos` writes a generation_config.json whose `eos_token_id` is
  that list.
  """
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders, models, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top,g-multiple-import
  import transformers  # pylint: disable=g-import-not-at-top
  path = os.fspath(path)
  os.makedirs(path, exist_ok=True)
  specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=specials,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(list(CORPUS) * 4, trainer=trainer)
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, bos_token="<|endoftext|>",
      eos_token="<|im_end|>", pad_token="<|endoftext|>",
      unk_token=None)
  fast.chat_template = chat_template
  fast.save_pretrained(path)
  if generation_eos is not None:
    with open(os.path.join(path, "generation_config.json"), "w") as f:
      json.dump({"eos_token_id": list(generation_eos)}, f)
  return path


# Qwen3's chat template (tokenizer_config.json of Qwen/Qwen3-0.6B): tools in
# the system turn, thinking (`reasoning_content` or `<think>...</think>` in
# the content) kept only for assistant turns after the last user query, an
# empty thinking block pre-filled by `enable_thinking=False`.
QWEN3_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

# Qwen2/Qwen3's pre-tokenizer split (before byte-level encoding).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
              r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Added but not special (skip_special_tokens keeps them), as in Qwen3.
QWEN_ADDED = ("<tool_call>", "</tool_call>", "<tool_response>",
              "</tool_response>", "<think>", "</think>")


def make_qwen3_tokenizer(path: str | os.PathLike, *, vocab_size: int = 400,
                         chat_template: str = QWEN3_TEMPLATE) -> str:
  """A Qwen3-style tokenizer directory written as the hub ships it.

  Built with the `tokenizers` library only (no transformers): NFC, Qwen's
  regex split + byte-level BPE, specials `<|endoftext|>` (pad),
  `<|im_start|>`, `<|im_end|>` (eos), the non-special `<think>`/`<tool_call>`
  tags; tokenizer_config.json (no bos, `Qwen2Tokenizer`) and
  generation_config.json (eos `<|im_end|>`, `<|endoftext|>`) written by hand.
  `vocab_size` counts every id.
  """
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top,g-multiple-import
  path = os.fspath(path)
  os.makedirs(path, exist_ok=True)
  tok = tokenizers.Tokenizer(models.BPE())
  tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(tokenizers.Regex(QWEN_SPLIT), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  n_added = len(QWEN_SPECIALS) + len(QWEN_ADDED)
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size - n_added,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  corpus = list(CORPUS) + ["<think>\nLet me think.\n</think>\n\nSure!",
                           '{"name": "get_weather", "arguments": {}}']
  tok.train_from_iterator(corpus * 4, trainer=trainer)
  tok.add_special_tokens([tokenizers.AddedToken(t, special=True,
                                                normalized=False)
                          for t in QWEN_SPECIALS])
  tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False)
                  for t in QWEN_ADDED])
  tok.save(os.path.join(path, "tokenizer.json"))
  decoder = {}
  for t in QWEN_SPECIALS + QWEN_ADDED:
    decoder[str(tok.token_to_id(t))] = {
        "content": t, "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False, "special": t in QWEN_SPECIALS}
  config = {
      "add_bos_token": False, "add_prefix_space": False,
      "added_tokens_decoder": decoder,
      "additional_special_tokens": list(QWEN_SPECIALS[1:]),
      "bos_token": None, "chat_template": chat_template,
      "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
      "errors": "replace", "model_max_length": 131072,
      "pad_token": "<|endoftext|>", "split_special_tokens": False,
      "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
  with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
    json.dump(config, f, indent=2, ensure_ascii=False)
  with open(os.path.join(path, "generation_config.json"), "w") as f:
    json.dump({"eos_token_id": [tok.token_to_id("<|im_end|>"),
                                tok.token_to_id("<|endoftext|>")],
               "pad_token_id": tok.token_to_id("<|endoftext|>")}, f)
  return path
