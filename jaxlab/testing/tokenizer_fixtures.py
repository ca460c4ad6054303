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
