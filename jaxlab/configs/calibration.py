r"""B-calibration miniature (paper N, "Trained on Tokens, Calibrated on
Concepts"): base vs RL (GRPO) vs DPO vs chain-of-thought.

    python -m jaxlab.main --config=jaxlab/configs/calibration.py \
        --workdir=/tmp/calibration
    python -m jaxlab.main --config=jaxlab/configs/calibration.py:tiny \
        --workdir=/tmp/calibration_tiny
    python -m jaxlab.main --config=jaxlab/configs/calibration.py:smollm2 \
        --workdir=/tmp/calibration_smollm2

`smollm2`: the shipped SmolLM2-135M-Instruct (`jaxlab.io.pretrained`) on
the short questions of `jaxlab.data.short_qa`, M answers per question
through its chat template, B-calibration under three collapsing functions
of the same samples (extracted answer, normalised and exact reply string).

A tiny byte-level decoder is trained with cross-entropy on synthetic
questions whose answers are aleatoric (`jaxlab.data.synthetic.aleatoric`:
p*(.|x) over 3 numbers, 4 question and 4 answer paraphrases) in two styles,
direct (" A:") and chain of thought (" T:", a scratchpad with compounding
copy errors). B = the last number of a response (`numeric`). Variants: the
base model answering directly, the base model prompted for CoT, and two
"instruction-tuned" copies of it: GRPO with reward 1[B(z) = mode of p*]
(`jaxlab.rl.learner`) and DPO on (mode, other answer) pairs
(`jaxlab.objectives.dpo`, reference = the base model). Each is evaluated
with M samples at T = 1 per question (spec N.3) against references drawn
from p*; the learnability probe (rank-8 LoRA, spec N.6) is fitted per
variant on half of the questions and scored on the other half.

The default preset is the docs miniature (3 seeds, sized for a 2-core
machine shared by many jobs); `tiny` runs in a few minutes on 2 CPU cores;
`tiny,smoke` is the colab test's.

`paper`: Qwen2.5-7B-Instruct from `init_from` (`Qwen/Qwen2.5-7B-Instruct`)
on GSM8K as released (`data.path=openai/gsm8k`, `data.subset=main`:
`question`, `answer` ending in `#### n`; its `test` split), M = 50 samples
a question at T = 1 through the chat template; B = the final number as
lm-evaluation-harness extracts it (`jaxlab.evals.gsm8k`, `gsm8k.filter`),
correct = the harness's exact match with the row's answer.
`--config.data.schema` picks another of the paper's datasets as released
(OpenMathInstruct-2 checked with math-verify; TriviaQA `rc.nocontext` and
SimpleQA by TriviaQA's normalised exact match; see the preset), with
`data.path` / `data.subset` / `data.split` to match. `short` (e.g.
`paper,short`): the same run with its budget cut
(`jaxlab.configs._scale.short`: 1 seed, 2 samples, 8 rows).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common


# Paper scale (spec N): B-calibration of Qwen2.5-7B-Instruct's sampled
# answers (the paper spans Qwen2.5 0.5B-72B, Llama-3.1, Gemma-3): M = 50
# samples per question [spec], short answers of <= 128 tokens after a
# <= 256-token prompt [inferred]; the forward pass scores them.
PAPER = dict(shape="qwen2_5_7b", topology="v5p:2x2x2", seq_len=384,
             batch_size=64, program="eval", sampler=(400, 256, 128),
             paper="spec N: Qwen2.5-7B-Instruct, M = 50 samples a question")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, smoke=False,
                          smollm2=False, short=False)
  c = common.base_config()
  c.experiment = "calibration"
  c.seeds = (0, 1, 2)
  c.variants = "base,rl,dpo,cot"
  # jaxlab.data.synthetic.aleatoric.make_task(**task); the question set is
  # the same for every seed (seeds vary the model, its data and sampling).
  c.task = dict(num_questions=16, num_values=10, values_per_question=3,
                concentration=1.0, cot_steps=4, cot_error=0.15, seed=0)
  c.model.update(dim=48, num_layers=2, num_heads=4, num_kv_heads=2,
                 mlp_dim=128, max_position_embeddings=64)
  c.pretrain = dict(samples_per_question=64, steps=800, batch_size=32,
                    lr=3e-3, warmup_steps=50, max_len=40)
  # Spec N.3: M = 50 samples at T = 1. Each question is scored against
  # `references_per_question` draws y ~ p*(.|x) (more (x, y) pairs, less
  # label noise in smECE; every pair keeps its question's confidence).
  c.eval = dict(num_samples=50, temperature=1.0, references_per_question=8,
                max_new_tokens=24, num_bins=10, num_bootstrap=50,
                sample_batch_size=1200)
  # "Instruction tuning" = RL toward the plurality (mode) answer, spec N
  # miniature (a): reward 1[B(z) = mode of p*(.|x)], not a proper loss.
  c.grpo = dict(group_size=8, num_iterations=1, num_minibatches=1,
                kl_beta=0.04, entropy_coef=0.0, temperature=1.0,
                max_new_tokens=12)
  c.rl = dict(steps=20, prompts_per_step=8, lr=2e-3)
  # DPO: chosen = the mode answer, rejected = another answer of p*(.|x).
  c.dpo = dict(beta=0.1, pairs_per_question=8, steps=30, batch_size=32,
               lr=1e-3)
  # Learnability probe (spec N.6): rank-8 LoRA, fitted on `train_frac` of
  # the questions, KL(pi_hat_x || q_x) on the rest.
  c.probe = dict(rank=8, alpha=16.0, steps=60, batch_size=8, lr=2e-2,
                 train_frac=0.5)
  if args.smollm2:
    # The real pretrained chat model on data.short_qa: per seed a question
    # subset (another shuffle) and its own sampling key; M answers per
    # question at T = 1 through the chat template. B-calibration under each
    # collapsing function B of `collapse` (same samples): the extracted
    # short answer (data.short_qa.canonical, the paper's semantic B), the
    # normalised reply string, the exact reply string (surface forms).
    # Correctness = data.short_qa.grade of the plurality class's reply.
    c.init_from = "smollm2-135m-instruct"
    c.seeds = (0, 1, 2, 3, 4)
    c.collapse = "semantic,normalized,exact"
    c.qa = dict(categories="capital,antonym,plural,successor,fact",
                num_questions=24, system="Answer with one word only.")
    # M = 10 (spec N.3 says 50; 2 shared CPU cores) [inferred budget].
    c.eval.update(num_samples=10, max_new_tokens=12, sample_batch_size=120,
                  pad_multiple=32, num_bootstrap=100)
  if args.tiny:
    c.seeds = (0,)
    c.task.update(num_questions=12)
    c.pretrain.update(samples_per_question=16, steps=150, warmup_steps=10)
    c.eval.update(num_samples=16, references_per_question=2,
                  num_bootstrap=10, sample_batch_size=192)
    c.rl.update(steps=3, prompts_per_step=6)
    c.dpo.update(pairs_per_question=4, steps=5, batch_size=16)
    c.probe.update(steps=10, batch_size=6)
  if args.smoke:  # the colab test: every code path, seconds
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.task.update(num_questions=6)
    c.pretrain.update(samples_per_question=4, steps=10, warmup_steps=2,
                      batch_size=16)
    c.eval.update(num_samples=4, references_per_question=1, num_bootstrap=3,
                  sample_batch_size=24)
    c.rl.update(steps=1, prompts_per_step=2)
    c.grpo.update(group_size=2)
    c.dpo.update(pairs_per_question=2, steps=2, batch_size=4)
    c.probe.update(steps=2, batch_size=3)
  if args.paper:
    scale.preset(c, PAPER)
    # Evaluation only: the released test split (1319 rows), every row.
    # `data.schema` names the released dataset (the paper's four main
    # ones, jaxlab.experiments.calibration.SCHEMAS): gsm8k (here),
    # openmathinstruct2 (nvidia/OpenMathInstruct-2, subset '', a train
    # split: train_1M / train_2M / train_5M / train; it has no test
    # split), trivia_qa (mandarjoshi/trivia_qa, subset rc.nocontext, split
    # validation) or simpleqa (basicv8vc/SimpleQA, subset '', split test).
    scale.paper_run(c, init_from="Qwen/Qwen2.5-7B-Instruct",
                    path="openai/gsm8k", subset="main", split="test",
                    schema="gsm8k")
    # B = the final number as lm-evaluation-harness's gsm8k task extracts
    # it (`flexible-extract`: the last number; the paper has an LLM extract
    # "the final number" [notes]), correct = the harness's exact match.
    # Concise answer style (the paper's "concise") [inferred prompt].
    c.collapse = "semantic,normalized,exact"
    c.gsm8k = dict(filter="flexible-extract",
                   system="Solve the problem. Answer with the final number "
                          "only.")
    # The system line of the other datasets [inferred prompts, concise
    # style]: math-verify reads the last \boxed{} or expression, the QA
    # grader the reply's first line.
    c.systems = dict(
        openmathinstruct2="Solve the problem. Give only the final answer, "
                          "in \\boxed{}.",
        trivia_qa="Answer the question with a short answer only.",
        simpleqa="Answer the question with a short answer only.")
    # M = 50 at T = 1 (spec N.3); <= 128 new tokens (PAPER's sampler).
    c.eval.update(num_samples=50, temperature=1.0, max_new_tokens=128,
                  sample_batch_size=400, pad_multiple=64, num_bootstrap=100)
  if args.short:
    scale.short(c)
  return c
