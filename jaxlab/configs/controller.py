r"""Discrete controller modules (paper I): length generalisation miniature.

    python -m jaxlab.main --config=jaxlab/configs/controller.py \
        --workdir=/tmp/controller              # the docs table (3 seeds)
    python -m jaxlab.main --config=jaxlab/configs/controller.py:tiny \
        --workdir=/tmp/controller_tiny         # tests / colab

Trains, per task (sum-of-list mod 10, sorting) and seed, three models on
lengths 8-16 and tests at 32 and 64 (spec I "CPU miniature"):
  vanilla  the plain decoder (B1),
  soft     the controller at τ = 1 fixed, soft at test time (B6),
  gumbel   the controller with Gumbel-softmax annealed 1 -> 0.1 by 60 % of
           training, straight-through from 80 %, hard execution at test.
Both controllers get the simulator's opcode traces (L_op, λ_op = 0.5).
Scaled down for 2 CPU cores [inferred]: D = 64 (spec 128), d_s = 32,
d_r = 16 (spec 128 / 64), so d_s / D = 1/2.
Presets: `tiny` (1 seed, sum only, few steps), `smoke` (even smaller, for the
colab test).
"""

import ml_collections

from jaxlab.configs import common

VARIANTS = ("vanilla", "soft", "gumbel")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  a = common.parse_arg(arg, tiny=False, smoke=False)
  c = common.base_config()
  c.experiment = "controller"
  c.tasks = "sum_mod10,sort"
  c.variants = VARIANTS  # names of jaxlab.evals.controller_eval.model_config
  c.seeds = (0, 1, 2)
  c.train_lengths = tuple(range(8, 17))
  c.test_lengths = (32, 64)
  c.num_eval = 128            # examples per evaluated length
  c.eval_batch_size = 64
  c.model.update(name="controller", dim=64, num_layers=4, num_heads=4,
                 num_kv_heads=2, mlp_dim=128, vocab_size=0)
  c.model.controller = ml_collections.ConfigDict(dict(
      every_p=2, num_registers=8, register_dim=16, num_flags=8,
      state_dim=32, control_dim=32, use_memory=False, kappa=20.0,
      branch_hidden=32, schedule="exponential", tau0=1.0, tau_min=0.1,
      anneal_steps=-1,        # -1: 60 % of train.steps
      gumbel_noise=True, straight_through=False,
      hard_after_step=-2,     # -2: 80 % of train.steps; -1: never
      eval_selection="hard"))
  c.loss = ml_collections.ConfigDict(dict(
      name="controller", op_weight=0.5,
      # L_op on softmax(π): how the committed docs/results/controller.json
      # was trained; "y" is the spec's cross-entropy of the Gumbel sample
      # (the loss's default), for a rerun.
      op_loss_on="pi",
      sem_weight=0.1, ent_weight_start=0.01, ent_weight_end=0.1,
      ent_steps=-1, spar_weight=1e-3))
  c.train.update(steps=200, batch_size=32)
  c.optim.update(lr=3e-3, warmup_steps=25, schedule="cosine",
                 end_lr_frac=0.05, weight_decay=0.01)
  # FLOP overhead: p values counted / measured (XLA cost analysis) at
  # flops_seq_len tokens.
  c.flops_every_p = (1, 2)
  c.flops_seq_len = 64
  if a.tiny or a.smoke:
    c.seeds = (0,)
    c.tasks = "sum_mod10"
    c.train_lengths = (4, 5, 6)
    c.test_lengths = (12,)
    c.num_eval = 32
    c.eval_batch_size = 32
    c.model.update(dim=32, num_layers=2, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.model.controller.update(every_p=1, register_dim=8, state_dim=16,
                              control_dim=16, branch_hidden=16)
    c.train.update(steps=30, batch_size=16)
    c.optim.update(warmup_steps=5)
    c.flops_every_p = (1, 2)
    c.flops_seq_len = 16
  if a.smoke:
    c.variants = ("gumbel",)
    c.train.update(steps=8, batch_size=8)
    c.num_eval = 16
    c.eval_batch_size = 16
    c.flops_every_p = ()
  return c
