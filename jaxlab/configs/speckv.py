r"""Draft-based approximate inference miniature (paper M): SnapKV, SpecKV,
SpecPC, SpecKV-PC and the random / last-N baselines on RULER-like retrieval.

    python -m jaxlab.main --config=jaxlab/configs/speckv.py:tiny \
        --workdir=/tmp/speckv
    python -m jaxlab.experiments.bench kv_compression --config=tiny \
        --workdir=/tmp/speckv

Per seed, a 4-layer "target" and a 2-layer "draft" decoder are trained
from scratch (`train_lm`, answer-only loss) on word-level RULER-like
prompts (`jaxlab.evals.long_context.ruler_example`: multi-key NIAH with
multi-token values, multi-value NIAH, variable tracking; question first or
last) of random lengths up to `task.length`, then every method answers
held-out prompts of `task.length` tokens at each budget C_max in
`methods.budgets`; the Spearman correlation of draft and target token
importance is measured on the same prompts.

Scaled to 2 CPU cores: the spec's target (4 layers, d=256) and draft (2
layers, d=96) at context 512-2048 and C_max 32-128 become, by default,
d=128 / d=64 at context 256 and C_max 16-64, with the window / kernel /
SpecPC sizes scaled down in proportion (`methods.*`; the paper's values are
in the comments). `tiny` shrinks further to what 2 cores shared by nine
sessions allowed: d=64 / d=32 (4 / 2 layers), context 96, C_max 16 and 32,
300 training steps, multi-key NIAH and variable tracking only.

Args: `tiny` (2 seeds, the documented miniature), `smoke` (seconds;
plumbing only, used by the colab test), `seeds=N`, `steps=N`,
`samples=N` (held-out prompts per task and question side).

`paper`: the target Llama-3.1-8B-Instruct from `init_from`
(`meta-llama/Llama-3.1-8B-Instruct`) on LongBench as released
(`data.path=THUDM/LongBench` or a local copy: `<task>/test-*.parquet` as on
the Hub, or its data.zip's `data/<task>.jsonl`; `data.subset` a task,
default `qasper`; the `test` split), scored with LongBench's own metric per
task (`jaxlab.evals.longbench`):

    python -m jaxlab.main --config=speckv:paper,short \
        --config.init_from=smollm2-135m-instruct \
        --config.data.path=/data/LongBench --config.data.subset=qasper \
        --workdir=/tmp/speckv_longbench

The methods are the paper's at its LongBench settings (SpecKV / SnapKV:
window 32, kernel 7, max reduce, lookahead = the whole answer, C_max 256 /
512 / 1024; SpecPC: window 64, kernel 32, keep 64, one draft token, layers
from 8; its paper budgets are 1024-3072: `--config.methods.budgets`). The
draft is the target's first `draft_layers` layers (0: half);
`draft_from` names the paper's draft Llama-3.2-1B-Instruct, not read yet.
Prompts longer than `task.max_length` tokens keep their first and last
halves (LongBench's pred.py; 31500 = its 32K models' limit); answers get
`task.max_new_tokens` tokens (0: the task's LongBench length). `short`:
the same run with its budget cut (`jaxlab.configs._scale.short`: the first
8 rows).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common


# Paper scale (spec M): target Llama-3.1-8B-Instruct with the draft
# Llama-3.2-1B-Instruct, RULER at 32k context. The programs: the target's
# forward over 32k-token prompts, and the sampler's prefill of one 31,500-
# token LongBench prompt (pred.py: one row at a time; bucketed to 32,768)
# into its KV cache and its decode loop (qasper's 128 new tokens). On TPU
# that prefill attends by `chunked_cached_attention` (splash takes no
# cache; the dense [B, N, T, S] mask and scores of a 32k prefill do not fit
# a chip): `nn.attention.chunked_cached_call`.
PAPER = dict(shape="llama3_8b", topology="v5p:2x2x4", seq_len=32768,
             batch_size=16, program="eval", sampler=(1, 31500, 128),
             paper="spec M: Llama-3.1-8B target (Llama-3.2-1B draft), 32k")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, smoke=False,
                          smollm2=False, seeds=0, steps=0, samples=0, length=0,
                          short=False)
  if args.smollm2:
    return smollm2_config(args)
  c = common.base_config()
  c.experiment = "speckv"
  c.seeds = (0, 1, 2)
  c.model.update(dim=128, num_layers=4, num_heads=4, num_kv_heads=2,
                 mlp_dim=256, max_position_embeddings=1024, init_std=0.02,
                 vocab_size=0)  # 0: the task's word vocabulary
  c.draft = ml_collections.ConfigDict({
      "dim": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
      "mlp_dim": 128})
  c.task = ml_collections.ConfigDict({
      "length": 256,              # held-out prompt length (tokens)
      "min_train_length": 32,     # training prompts: uniform lengths
      "tasks": ("niah_multikey", "niah_multivalue", "variable_tracking"),
      "question_first": (False, True),
      "num_keys": 4,
      "num_values": 2,
      "num_hops": 1,
      "value_len": 4,             # digits per value (one token each)
      "train_examples": 8000,
      "samples": 8,               # held-out prompts per task and side
      "data_seed": 1234,
  })
  c.methods = ml_collections.ConfigDict({
      "budgets": (16, 32, 64),
      "names": ("full", "snapkv", "speckv", "specpc", "speckv_pc",
                "random", "last_n", "draft"),
      "window": 8,                # SnapKV / SpecKV window (paper 32)
      "kernel": 7,                # SnapKV / SpecKV pooling (paper 7)
      "reduce": "max",
      "lookahead": 0,             # SpecKV draft tokens; 0 = the full answer
      "pc_window": 16,            # SpecPC query window (paper 64)
      "pc_kernel": 5,             # SpecPC pooling = neighbours (paper 64/32)
      "pc_keep_window": 8,        # SpecPC kept last tokens (paper 64)
      "pc_lookahead": 1,          # SpecPC draft tokens (paper 1)
      "pc_start_layer": 8,        # deep drafts only (ours have 2 layers)
      "cascade_pc_budget": 128,   # SpecKV-PC's SpecPC budget (paper 2048)
      "spearman_examples": 12,
  })
  c.train.update(steps=1500, batch_size=32, log_every=100)
  # The whole section reaches both trainings (cosine decay to 0 and
  # clipping at 1, as the committed run was trained).
  c.optim.update(lr=2e-3, warmup_steps=100, weight_decay=0.01,
                 schedule="cosine", end_lr_frac=0.0, clip_norm=1.0)
  if args.tiny:  # what 2 CPU cores shared by 9 sessions allowed
    c.seeds = (0, 1)
    c.model.update(dim=64, num_layers=4, num_heads=4, num_kv_heads=2,
                   mlp_dim=128)
    c.draft.update(dim=32, num_layers=2, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.task.update(length=96, min_train_length=48,
                  tasks=("niah_multikey", "variable_tracking"),
                  train_examples=1200, samples=4)
    c.methods.update(budgets=(16, 32), cascade_pc_budget=48,
                     spearman_examples=4, pc_window=12, pc_kernel=3)
    c.train.update(steps=300, batch_size=16, log_every=25)
    c.optim.update(lr=3e-3, warmup_steps=50)
  if args.smoke:  # seconds-long plumbing check (colab tests); not a result
    c.seeds = (0,)
    c.model.update(dim=32, num_layers=2, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.draft.update(dim=16, num_layers=1, num_heads=2, num_kv_heads=1,
                   mlp_dim=32)
    c.task.update(length=64, min_train_length=48, train_examples=32,
                  samples=1, tasks=("niah_multikey",), num_keys=2)
    c.methods.update(budgets=(16,), cascade_pc_budget=32,
                     spearman_examples=1, names=("full", "speckv"))
    c.train.update(steps=2, batch_size=8, log_every=1)
  if args.seeds:
    c.seeds = tuple(range(args.seeds))
  if args.steps:
    c.train.steps = args.steps
  if args.samples:
    c.task.samples = args.samples
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="meta-llama/Llama-3.1-8B-Instruct",
                    path="THUDM/LongBench", subset="qasper", split="test",
                    eval_split="test")
    c.draft_from = "meta-llama/Llama-3.2-1B-Instruct"
    longbench_run(c)
  if args.short:
    scale.short(c)
  return c


def longbench_run(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The `paper` run's LongBench task and method settings (docstring)."""
  c.draft_layers = 0              # 0: the target's first half
  c.task = ml_collections.ConfigDict({
      "max_length": 31500,        # prompt tokens kept (pred.py, 32K models)
      "max_new_tokens": 0,        # 0: LongBench's dataset2maxlen per task
      "batch_size": 1,            # rows per prefill (pred.py: one)
  })
  c.methods = ml_collections.ConfigDict({
      "budgets": (256, 512, 1024),
      "names": ("full", "snapkv", "speckv", "specpc", "streaming", "last_n",
                "draft"),
      "window": 32, "kernel": 7, "reduce": "max",
      "sink": 4,                  # StreamingLLM attention sinks
      "lookahead": 0,             # SpecKV draft tokens; 0 = the answer
      "pc_window": 64, "pc_kernel": 32, "pc_keep_window": 64,
      "pc_lookahead": 1, "pc_start_layer": 8,
  })
  return c


def smollm2_config(args) -> ml_collections.ConfigDict:
  """The real-model preset (module docstring); nothing is trained."""
  c = common.base_config()
  c.experiment = "speckv"
  c.init_from = "smollm2-135m-instruct"
  c.draft_layers = 15             # of 30: the draft costs half the target
  c.task = ml_collections.ConfigDict({
      "length": args.length or 1024,  # prompt tokens (chat template included)
      "samples": args.samples or 8,   # needles (depth (i + 0.5) / samples)
      "digits": 4,
      "data_seed": 2026,
  })
  c.methods = ml_collections.ConfigDict({
      "budgets": (64, 128, 256),
      "names": ("full", "snapkv", "speckv", "speckv_oracle", "specpc",
                "streaming", "last_n", "draft"),
      "max_new_tokens": 12,       # "The secret code is NNNN." + end of turn
      "window": 32,               # SnapKV / SpecKV window (paper 32)
      "kernel": 7,                # SnapKV / SpecKV pooling (paper 7)
      "reduce": "max",
      "sink": 4,                  # StreamingLLM attention sinks
      "lookahead": 0,             # SpecKV draft tokens; 0 = max_new_tokens
      "pc_window": 32,            # SpecPC query window (paper 64)
      "pc_kernel": 7,             # SpecPC pooling = neighbours (paper 64/32)
      "pc_keep_window": 32,       # SpecPC kept last tokens (paper 64)
      "pc_lookahead": 1,          # SpecPC draft tokens (paper 1)
      "pc_start_layer": 8,        # draft layers used from (paper 8)
  })
  return c
