"""Fine-tune a Hugging Face checkpoint on a chat JSONL file, then export it.

    python -m jaxlab.main --workdir=workdirs/ft \
        --config=jaxlab/configs/finetune.py:init_from=/ckpt/Qwen3-0.6B,data=chats.jsonl,lora_rank=8,export_dir=/out/ft

`init_from` is a checkpoint directory (config.json + safetensors +
tokenizer.json, as downloaded from the hub); the tokenizer and its chat
template are the checkpoint's own (`data.tokenizer="auto"`). `data` is a JSONL
file, one conversation per line: `{"messages": [{"role": "user", "content":
...}, {"role": "assistant", "content": ...}]}`; the loss is on the assistant
turns only (what the template renders for them, end-of-turn token included).
Chat-template keywords (`enable_thinking`, `tools`, ...) are
`--config.data.chat_template_kwargs='{"enable_thinking": false}'` (a JSON
object); a row may carry its own "tools", and messages may have content
lists, `reasoning_content` and `tool_calls` (content null). `lora_rank=0`
fine-tunes every weight; a rank > 0 trains LoRA factors on
`lora.targets` and merges them at export. `export_dir` receives the merged
weights and the tokenizer files; it loads in transformers with the same
logits. Args: `tiny` (a few steps, for tests), `init_from`, `data`,
`eval_data`, `lora_rank`, `export_dir`, `steps`, `seq_len`.
"""

from jaxlab.configs import common


def get_config(arg: str | None = None):
  args = common.parse_arg(arg, tiny=False, init_from="", data="",
                          eval_data="", lora_rank=0, export_dir="",
                          steps=200, seq_len=512)
  c = common.base_config()
  c.experiment = "train"
  c.init_from = args.init_from
  c.export_dir = args.export_dir
  c.data.update(source="chat_jsonl", path=args.data, eval_path=args.eval_data,
                tokenizer="auto", packing="pad", eval_fraction=0.0)
  c.lora.rank = args.lora_rank
  c.lora.targets = ("q_dnh", "k_dkh", "v_dkh", "o_nhd", "gate_df", "up_df",
                    "down_fd")
  c.train.update(steps=args.steps, batch_size=8, seq_len=args.seq_len,
                 log_every=10, eval_every=0, eval_batch_size=8,
                 eval_batches=0, checkpoint_every=100, keep_checkpoints=1)
  c.optim.update(lr=1e-4 if args.lora_rank == 0 else 1e-3, warmup_steps=10,
                 weight_decay=0.0)
  if args.tiny:
    c.train.update(steps=4, batch_size=8, seq_len=64, log_every=1,
                   checkpoint_every=4, tensorboard=False, peak_flops=-1.0,
                   async_checkpoint=False)
    c.optim.update(lr=1e-2, warmup_steps=1)
  # Cross-entropy over token chunks of this many rows (0: plain loss over
  # the full [B, T, V] logits); jaxlab.train.losses.chunked_token_nll.
  c.loss.chunk_size = 0
  return c
