"""Generate from a checkpoint with the KV-cache sampler (`jaxlab/experiments/generate`).

    python -m jaxlab.main --config=jaxlab/configs/generate.py:tiny \
        --workdir=workdirs/generate
    python -m jaxlab.main --config=jaxlab/configs/generate.py \
        --workdir=workdirs/gen --config.init_from=/path/to/hf_llama_dir \
        --config.tokenizer=none --config.prompt_ids='((1, 450, 4996),)'

    python -m jaxlab.main --config=jaxlab/configs/generate.py \
        --workdir=workdirs/chat --config.init_from=/ckpt/Qwen3-0.6B \
        --config.tokenizer=auto --config.chats=conversations.jsonl \
        --config.prompts='()'

`init_from` is any checkpoint `jaxlab.io.pretrained.load` reads: a shipped
name, a Hugging Face Llama/Qwen2/Qwen3/Mistral/Gemma 3 directory, a llama.cpp
`.gguf` file (no torch needed), a jaxlab trainer workdir or a Hub id (online);
empty means a random decoder built from `model` (a smoke test of the whole
path). Prompts are
`prompts` (text, encoded with `tokenizer`: "byte", "auto" = the checkpoint's
own tokenizer.json, a tokenizer directory, or a sentencepiece `.model` path)
plus `chats` (a JSONL file of conversations, `{"messages": [{"role", "content"},
...]}` per line, rendered with the checkpoint's chat template and its
generation prompt and `chat_template_kwargs`) or, with `tokenizer="none"`,
`prompt_ids`. Text prompts get the special tokens the checkpoint's tokenizer
adds (transformers' `add_special_tokens`: Llama 3's bos, nothing for
Qwen). Generation stops at every eos id of the checkpoint (tokenizer and generation_config.json). Writes WORKDIR/samples.jsonl and
WORKDIR/results.json. Args: `tiny` (random 2-layer model, 3 prompts, 24 new
tokens: seconds on 2 CPU cores).
"""

from jaxlab.configs import common


def get_config(arg: str | None = None):
  args = common.parse_arg(arg, tiny=False)
  c = common.base_config()
  c.experiment = "generate"
  c.dtype = "float32"          # compute dtype for a loaded checkpoint
  c.tokenizer = "byte"         # byte | auto | none | tokenizer dir | .model
  c.chats = ""                 # JSONL of conversations (needs a chat template)
  # Chat-template keywords for `chats`, a JSON object (e.g.
  # '{"enable_thinking": false}'); a row's own "tools" join them.
  c.chat_template_kwargs = ""
  c.prompts = ("The quick brown fox", "def fib(n):", "Once upon a time")
  c.prompt_ids = ((1, 2, 3),)  # used when tokenizer == "none"
  c.samples_per_prompt = 1
  c.max_new_tokens = 64
  c.temperature = 0.0          # 0 = greedy
  c.top_k = 0                  # 0 = off
  c.top_p = 1.0                # 1.0 = off
  c.eos_id = -1                # -1: the tokenizer's eos (none if no tokenizer)
  if args.tiny:
    c.model.update(dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                   mlp_dim=64)
    c.max_new_tokens = 24
    c.samples_per_prompt = 2
    c.temperature = 0.8
    c.top_p = 0.95
  return c
