"""The demo: a tiny byte-level decoder on a generated corpus (2 CPU cores).

    python -m jaxlab.main --config=jaxlab/configs/lm_tiny.py \
        --workdir=workdirs/lm_tiny

Runs in a few minutes on 2 cores; the loss falls from ~5.6 (uniform over 259
bytes) to ~1. Re-running the same command resumes from the last checkpoint.
Args: `tiny` (a 30-second version used by tests), e.g.
`--config=jaxlab/configs/lm_tiny.py:tiny`.
"""

from jaxlab.configs import common


def get_config(arg: str | None = None):
  args = common.parse_arg(arg, tiny=False)
  c = common.base_config()
  c.experiment = "train"
  c.model.update(dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 mlp_dim=192)
  c.data.num_docs = 3000
  c.train.update(steps=300, batch_size=16, seq_len=128, log_every=25,
                 eval_every=100, eval_batch_size=16, eval_batches=4,
                 checkpoint_every=100, keep_checkpoints=2)
  c.optim.update(lr=3e-3, warmup_steps=30, weight_decay=0.01)
  if args.tiny:
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.data.num_docs = 400
    c.train.update(steps=40, batch_size=8, seq_len=64, log_every=10,
                   eval_every=20, eval_batch_size=8, eval_batches=2,
                   checkpoint_every=20)
    c.optim.update(lr=1e-2, warmup_steps=5)
  # Cross-entropy over token chunks of this many rows (0: plain loss over
  # the full [B, T, V] logits); jaxlab.train.losses.chunked_token_nll.
  c.loss.chunk_size = 0
  return c
