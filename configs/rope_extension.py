r"""MrRoPE miniature (paper D): train short on passkey data, test long.

    python -m experiments.main --config=configs/rope_extension.py \
        --workdir=workdirs/rope_extension
    python -m experiments.main --config=configs/rope_extension.py:tiny \
        --workdir=/tmp/rope_ext

A 2-layer byte-level decoder (head_dim 16, base 1e4) is trained at
`train_len` on a passkey-style corpus (a 5-digit key hidden at a random
depth in random filler sentences, asked for at the end), then evaluated
training-free at 1x, 4x, 8x and 16x the training length under every RoPE
scaling (spec D "tiny model"): passkey accuracy over a depth grid and
chunked perplexity. Args: `tiny` (train_len 64, fewer steps; a few minutes
on 2 CPU cores), `smoke` (seconds; plumbing only), `seeds=N`, `steps=N`, `samples=N` (passkey prompts per
depth per length).
"""

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, smoke=False, seeds=0, steps=0,
                          samples=0)
  c = common.base_config()
  c.experiment = "rope_extension"
  c.seeds = (0, 1, 2)
  c.model.update(dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 mlp_dim=192, rope_theta=10000.0,
                 max_position_embeddings=128, vocab_size=320)  # bytes+specials
  c.task = ml_collections.ConfigDict({
      "train_len": 128,
      "eval_factors": (1, 4, 8, 16),
      "digits": 5,
      "answer_weight": 4.0,     # loss weight of the answer digits
      "train_examples": 20000,
      "eval_docs": 4,           # long documents for perplexity per length
      "depths": (0.1, 0.3, 0.5, 0.7, 0.9),
      "samples": 8,             # passkey prompts per (length, depth)
      "data_seed": 1234,
      "eval_batch_size": 2,
  })
  c.methods = ("default", "pi", "ntk", "dynamic_ntk", "yarn", "yarn_rotation",
               "llama3", "mrope_uni", "mrope_pro")
  c.train.update(steps=1500, batch_size=32, seq_len=128, log_every=100,
                 eval_every=0, eval_batch_size=32, eval_batches=2,
                 checkpoint_every=0, keep_checkpoints=1, tensorboard=False,
                 peak_flops=1.0)
  c.optim.update(lr=3e-3, warmup_steps=100, weight_decay=0.01)
  if args.tiny:
    c.model.update(dim=48, num_heads=3, num_kv_heads=1, mlp_dim=128,
                   max_position_embeddings=64)
    c.task.update(train_len=64, train_examples=8000, samples=4,
                  depths=(0.1, 0.5, 0.9), eval_docs=2)
    c.train.update(steps=800, batch_size=32, seq_len=64, log_every=100)
  if args.smoke:  # seconds-long plumbing check (colab tests); not a result
    c.seeds = (0,)
    c.methods = ("default", "yarn", "mrope_pro")
    c.task.update(train_len=64, eval_factors=(1, 4), train_examples=256,
                  samples=1, depths=(0.5,), eval_docs=1)
    c.train.update(steps=10, batch_size=8, seq_len=64, log_every=5)
  if args.seeds:
    c.seeds = tuple(range(args.seeds))
  if args.steps:
    c.train.steps = args.steps
  if args.samples:
    c.task.samples = args.samples
  return c
