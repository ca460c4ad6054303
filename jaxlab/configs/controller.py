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

`paper`: the paper's task sizes (spec I "Benchmarks"): sum-of-list,
sorting and BFS trained on lengths 10 / 20 / 40 / 80 and tested at 80 /
160 / 320 (BFS: node counts, so node ids span 0..319: `num_values` = 320,
a vocabulary of 324), 9 seeds, at the paper's controller sizes (N_r = 8
registers of d_r = 64, d_s = 128) on a decoder of width D = 256
(`PAPER_MODEL`; the FLOP overhead (1/2p)(d_s/D)^2 of 5-7 % at p = 2 gives
D ~ 256 [derived]; depth and heads [inferred]), positions for the longest
test sequence (BFS at 320 nodes: 1122 input tokens). The paper releases
no code, checkpoint or data (OpenReview 14dlTHVxDX and the papernotes
summary list no code; no public repository found): its tasks are
generated, here by `jaxlab.data.synthetic.algorithmic` at those sizes,
and the model trains from scratch (`init_from=""`,
`data.source="synthetic"`). DROP and RobustFill (the paper's other
evaluations) are not part of this experiment. `config.scale` makes it an
AOT target: `python -m jaxlab.experiments.compile --config=controller:paper`
compiles the Gumbel controller's train step (loss "controller", batch
`scale.example` at `train.seq_len` = the padded training length) for
`scale.topology` (v5e:2x2 [inferred]: the paper names no hardware; the
8.5M-parameter model and its batch of 32 fit one chip, FSDP over 4).
`short`: the same run with its budget cut (`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common
from jaxlab.data.synthetic import controller_data

VARIANTS = ("vanilla", "soft", "gumbel")

# Paper scale (spec I): `config.model` and `config.model.controller` fields
# (see the module docstring for what is derived / inferred); positions
# cover the longest test sequence (BFS at n = 320 nodes: 1122 input tokens;
# sort at n = 320: 642).
PAPER_MODEL = dict(dim=256, num_layers=8, num_heads=8, num_kv_heads=8,
                   mlp_dim=1024, max_position_embeddings=1152)
# BFS node ids 0..319 (the paper's largest graphs).
PAPER_NUM_VALUES = 320
# The AOT compile target of `paper` (module docstring).
PAPER_TOPOLOGY = "v5e:2x2"
PAPER_CONTROLLER = dict(every_p=2, num_registers=8, register_dim=64,
                        num_flags=8, state_dim=128, control_dim=128,
                        branch_hidden=128)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  a = common.parse_arg(arg, tiny=False, smoke=False, paper=False,
                       short=False)
  c = common.base_config()
  c.experiment = "controller"
  c.tasks = "sum_mod10,sort"
  # Token values 0..num_values-1 (BFS node ids), then BOS/SEP/EOS/PAD.
  c.num_values = 64
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
  if a.paper:
    c.tasks = "sum_mod10,sort,bfs"
    c.num_values = PAPER_NUM_VALUES
    c.train_lengths = (10, 20, 40, 80)
    c.test_lengths = (80, 160, 320)
    c.seeds = tuple(range(9))     # "mean of 9 runs"
    c.model.update(**PAPER_MODEL)
    c.model.controller.update(**PAPER_CONTROLLER)
    c.flops_every_p = (1, 2, 3, 4)
    c.flops_seq_len = 643
    c.mesh.update(data=1, fsdp=-1, tensor=1)
    c.model.vocab_size = controller_data.vocab_size(c)
    # The compiled step reads one padded training batch (the controller
    # loss's keys) at the training length.
    c.train.seq_len = controller_data.pad_lengths(
        ml_collections.ConfigDict(dict(tasks=c.tasks,
                                       train_lengths=c.train_lengths,
                                       test_lengths=c.train_lengths,
                                       num_values=c.num_values)))[0]
    c.scale = ml_collections.ConfigDict(dict(
        shape="controller", topology=PAPER_TOPOLOGY, num_slices=1,
        paper="spec I: Benchmarks (lengths, 9 runs), Spec (N_r, d_r, d_s)",
        note="the Gumbel controller's train step (the soft and vanilla "
        "variants are the same model less the anneal / less the "
        "controllers)", program="train", loss="controller",
        example=dict(inputs="int32", targets="int32", loss_mask="float32",
                     op_targets="int32")))
    # No released checkpoint or data (module docstring): the fields are
    # kept, empty / synthetic.
    c.init_from = ""
    c.data.source = "synthetic"
    c.data.path = ""
    c.data.subset = ""
    c.data.max_rows = 0
  if a.short:
    scale.short(c)
  return c
