r"""MathFimer miniature (paper H): FIM step expansion of coarse arithmetic.

    python -m jaxlab.main --config=jaxlab/configs/mathfimer.py \
        --workdir=workdirs/mathfimer
    python -m jaxlab.main --config=jaxlab/configs/mathfimer.py:table \
        --workdir=workdirs/mathfimer_table     # the docs table
    python -m jaxlab.main --config=jaxlab/configs/mathfimer.py:tiny --workdir=/tmp/mf

A tiny byte-level FIM model learns to fill a masked step of fine solutions
of a disjoint problem pool (3 masks per solution); it expands a coarse data set (40% of the
intermediate steps removed) for `rounds` rounds with the eta = 0.8 filter;
identical solvers train on coarse, each expansion round and (as a ceiling)
the fine data; held-out exact match of the final answer.

`paper`: Qwen2.5-Math-7B from `init_from` (`Qwen/Qwen2.5-Math-7B`); the
data expanded and evaluated is GSM8K as released (`data.path=openai/gsm8k`,
`data.subset=main`: `question`, `answer` ending in `#### n`; train /
test), the FIM model's is NuminaMath-CoT (`fim_data.path=AI-MO/NuminaMath-
CoT`: `problem`, `solution`). `short`: the same run with its budget cut
(`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale


# Paper scale (spec H): MathFimer-7B = full SFT of Qwen2.5-Math-7B, max_len
# 8192, global batch 128, lr 1e-5 (Qwen2.5-Math: RoPE base 1e4, 4k native).
PAPER = dict(shape="qwen2_5_7b", topology="v5p:2x2x4", seq_len=8192,
             batch_size=128, grad_accum=8,
             model_overrides={"rope_theta": 10000.0,
                              "max_position_embeddings": 8192},
             paper="spec H: Qwen2.5-Math-7B full SFT, max_len 8192, "
             "global batch 128")

def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, table=False, spec=False,
                          short=False)
  tiny, table = args.tiny, args.table
  c = common.base_config()
  c.experiment = "mathfimer"
  c.seeds = (0, 1, 2)
  # The arithmetic problem pools: num_fim fine solutions train the FIM model
  # (disjoint from the num_train solver pool); drop_frac of the steps are
  # removed to make the coarse data.
  # max_value bounds every number (99: two-digit values; 9: single digits).
  # step_format: "chain" ("7 * 3 = 21") or "variables" ("b=a*3=21", spec
  # H's example; see jaxlab/data/synthetic/arithmetic.py).
  c.problems = dict(num_fim=600, num_train=600, num_test=200, min_ops=3,
                    max_ops=5, drop_frac=0.4, seed=0, max_value=99,
                    step_format="chain")
  # solve_rounds: expansion rounds whose data trains a solver (() = all).
  # first_gap: also fill the gap between the question and y_1 ([inferred]).
  # fine_ceiling: also train a solver on the fine data (the ceiling).
  # seed: -1 = each seed trains its own FIM model; N >= 0 = seed N's FIM
  # model and expanded data serve every solver seed (the seeds then vary
  # the solvers only; expansion rows come from seed N's run alone).
  c.fim = dict(masks_per_solution=3, eta=0.8, rounds=2, max_new_tokens=24,
               min_step_chars=8, solve_rounds=(), first_gap=False,
               fine_ceiling=True, seed=-1, context_weight=0.0, order="psm",
               empty_masks=0, coarse_gaps=0, coarse_drop_frac=0.4)
  # context_weight: FIM loss weight on the non-middle tokens (0 = spec H.4).
  # order ([inferred]): "psm" (spec H.3, default) or "spm" (suffix first,
  # the prefix then ends right before the middle; jaxlab/objectives/fim.py).
  # empty_masks ([inferred], 0 = spec H.2): FIM examples per solution at an
  # intact gap with an empty middle ("nothing missing here").
  # coarse_gaps ([inferred], 0 = spec H.2): FIM examples per solution at a
  # gap of a copy with coarse_drop_frac of its steps deleted (middle = the
  # first deleted step there, or empty), as in the chains expansion fills.
  c.model.update(dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 mlp_dim=192)
  c.fim_train = dict(steps=1500, batch_size=32, lr=3e-3, warmup_steps=50,
                     max_len=128)
  c.solver_train = dict(steps=1500, batch_size=32, lr=3e-3, warmup_steps=50,
                        max_len=128)
  c.eval = dict(max_new_tokens=96)
  # A base LM pretrained on the FIM pool's fine solutions (solver format);
  # every FIM model and solver starts from a copy (steps 0 = from scratch).
  c.base_train = dict(steps=0, batch_size=32, lr=3e-3, warmup_steps=50,
                      max_len=128)
  if table:  # the measured docs table: ~25 min on 2 shared CPU cores
    c.problems.update(num_fim=400, num_train=400, num_test=60, min_ops=2,
                  max_ops=4)
    c.fim.update(rounds=2)
    c.fim_train.update(steps=500, batch_size=16, max_len=112)
    c.solver_train.update(steps=500, batch_size=16, max_len=112)
    c.eval.update(max_new_tokens=72)
  if args.spec:  # spec H's chains (3-6 steps), d=128 and 3 rounds, learnable
    # Single-digit values and the variables step format ("b=a*3=21"), so
    # the base solver learns the arithmetic on a CPU budget: with the chain
    # format ("7 * 3 = 21") a solver has to find the k-th operation of the
    # question by position, and d=64 solvers stayed at the majority answer
    # after 200 steps (a d=128 fine solver: 13 % EM after 250 steps of 32,
    # vs 48 % with the variables format after 400). Steps are 7 characters,
    # so no line is merged (min_step_chars=4). Run the seeds in one process
    # (`--config.seeds=(0,1,2)`): every stage is saved (the base model as
    # WORKDIR/base_model.npz; a stopped run resumes). The CPU budget (a
    # d=128 training is ~5-10 min on the shared cores): one FIM model (seed
    # 0, `fim.seed`) expands the data for every solver seed, solvers on
    # round 1 only (`fim.solve_rounds`), the fine ceiling off
    # (`fim.fine_ceiling`).
    c.seeds = (0,)
    c.problems.update(num_fim=3000, num_train=400, num_test=100, min_ops=3,
                      max_ops=6, max_value=9, step_format="variables")
    c.fim.update(rounds=3, max_new_tokens=12, solve_rounds=(1,),
                 min_step_chars=4, first_gap=True, fine_ceiling=False,
                 seed=0, context_weight=0.0, order="spm", empty_masks=0,
                 coarse_gaps=3, coarse_drop_frac=0.4)
    # The FIM model (issue 20 diagnosis, held-out masks of the test
    # problems, 60 coarse solutions expanded once; docs/papers/
    # pmc_mathfimer.md): with PSM the fill right after <|fim_middle|> is far
    # from the step before it, and the base LM's next-step skill does not
    # transfer (PSM, middle-only, 300 steps: 16 % of held-out masks filled
    # exactly, 6 % of inserted steps right; the old preset, PSM with
    # context_weight=1 and 200 steps: 4 %). SPM puts the prefix right
    # before the middle (55 % exact at 300 steps). Its 800-problem pool was
    # memorised (train loss 0.06), so the pool is 3000 problems; a gap of
    # the coarse chain with no step missing was filled with a wrong step
    # (fine masks always miss one), so 2 empty-middle examples per solution
    # teach "nothing missing" (`fim.empty_masks`); the held-out exact fill
    # still rose from 25 % to 58 % between steps 200 and 600, hence 1500.
    # That model (1500 steps) filled 85 % of held-out fine masks exactly,
    # but only 35 % of its insertions into the coarse chains were right:
    # fine masks never show a context with gaps elsewhere. So 3 of the 5
    # extra examples per solution come from coarsened copies instead
    # (`fim.coarse_gaps`, which include empty middles at intact gaps).
    c.model.update(dim=128, num_layers=2, num_heads=4, num_kv_heads=2,
                   mlp_dim=256)
    # From scratch, neither the coarse solver (500 steps of 16: the
    # majority-answer EM) nor the FIM model (400 steps of 16: 6 % of its
    # inserted steps right) learned on the shared CPUs; as in the paper,
    # every model starts from a pretrained base (a d=128 LM trained on the
    # FIM pool's fine solutions), then is fine-tuned briefly.
    c.base_train.update(steps=350, batch_size=32, lr=3e-3, warmup_steps=50,
                        max_len=112)
    c.fim_train.update(steps=1500, batch_size=16, lr=1e-3, warmup_steps=10,
                       max_len=120)
    c.solver_train.update(steps=150, batch_size=16, lr=1e-3,
                          warmup_steps=10, max_len=112)
    c.eval.update(max_new_tokens=72)
  if tiny:
    c.seeds = (0,)
    c.problems.update(num_fim=24, num_train=24, num_test=8)
    c.fim.update(rounds=1, max_new_tokens=12)
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.fim_train.update(steps=20, batch_size=8, warmup_steps=2)
    c.solver_train.update(steps=20, batch_size=8, warmup_steps=2)
    c.eval.update(max_new_tokens=32)
  if args.paper:
    scale.preset(c, PAPER)
    # `data.schema`: "gsm8k" (as here) or "math" (MATH as released,
    # `problem` / `solution` with \boxed{}: --config.data.path=
    # hendrycks/competition_math --config.data.subset='' --config.data.
    # schema=math), the data expanded (train) and evaluated (test).
    scale.paper_run(c, init_from="Qwen/Qwen2.5-Math-7B", path="openai/gsm8k",
                    subset="main", split="train", eval_split="test",
                    schema="gsm8k")
    # The FIM model's training data (spec H.2: NuminaMath-FIM is made from
    # NuminaMath-CoT's solutions, config `default`, `problem` / `solution`).
    c.fim_data = ml_collections.ConfigDict(dict(
        source="hf", path="AI-MO/NuminaMath-CoT", subset="", split="train",
        max_rows=0, cache_dir=""))
    # Spec H.5: lr 1e-5, global batch 128, max_len 8192 (the epoch count is
    # not stated: one pass over the ~2.6M FIM examples of 860k solutions,
    # [inferred]); decoding greedy, <= 256 new tokens (H.6, [inferred]).
    c.fim.update(max_new_tokens=256, rounds=3)  # H.7: 1 -> 3 rounds
    c.fim_train.update(steps=20000, batch_size=128, lr=1e-5,
                       warmup_steps=200, max_len=8192)
    # The solvers: SFT from the same checkpoint, 3 epochs of GSM8K-train
    # (7473 rows / 128 ~ 58 steps per epoch; [inferred], the paper's SFT
    # settings are not given), answers of <= 512 new tokens.
    c.solver_train.update(steps=175, batch_size=128, lr=1e-5,
                          warmup_steps=10, max_len=1024)
    c.eval.max_new_tokens = 512
    c.eval.batch_size = 64  # generation rows per sampler call
  if args.short:
    scale.short(c, {"fim.rounds": 1} if args.paper else None)
  return c
