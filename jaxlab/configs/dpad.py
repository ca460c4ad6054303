r"""DPad miniature (paper L): a masked-diffusion LM decoded with DPad.

    python -m jaxlab.main --config=jaxlab/configs/dpad.py:tiny \
        --workdir=/tmp/dpad
    python -m jaxlab.experiments.bench dpad --config=tiny --workdir=/tmp/dpad

A 4-layer bidirectional decoder (dim 64) is trained from scratch with the
LLaDA SFT objective (`llada_sft`: the prompt is never masked) on digit-copy
sequences (or reversal / arithmetic chains, `task.kind`) followed by EOS padding
(`jaxlab.data.synthetic.arith_chains`), then decoded on held-out prompts by
`jaxlab.decoding.diffusion.generate` under each variant of `decode.variants`
(vanilla, +early stop, +DPad, +threshold, +threshold+prefix cache,
+threshold+early stop, +threshold+prefix cache+early stop, +all) at
each `decode.gen_lens`, block 32, DPad W = 64, k = 3, a = 1.6 (spec L's
CPU miniature), threshold 0.9.

The task (default) is copying 4-14 random digits with the prompt padded on
the right, so each answer token sits a constant 16 positions after its
source and a small model learns it in a few hundred steps; the answer is
followed by EOS padding up to the generation length (the long all-EOS
suffix DPad drops).

Args: `tiny` (2 seeds, 500 steps on a 64-token canvas, 4-12 digits, 32
held-out prompts, gen_len 64/128; bench 128/256/512: what 2 shared CPU
cores allow), `smoke` (seconds; plumbing only, used by the colab test),
`seeds=N`, `steps=N`, `prompts=N` (held-out prompts per gen_len),
`kind=copy|reverse|chain` (`chain`: the arithmetic chains of 2-5
operations, left-padded, which the 400-step model did not learn),
`init_from=PATH` (continue training from a run's `seed{seed}/params.npz`;
the committed miniature is `tiny` then `tiny,steps=300,init_from=...`).

`paper,task=T` (T in gsm8k, minerva_math, humaneval, mbpp): the main table
of the DPad repository (llada/scripts/main_instruct.sh at 461b36e):
LLaDA-8B-Instruct on T as released (`TASKS`: the harness's dataset and
n-shot), prompts in the chat template as its eval_llada.py does for an
instruct model, gen_len 256 (gsm8k, minerva_math) or 512 (humaneval,
mbpp), block 32, the script's DPad window / k / scale per task, the
variants vanilla, +DPad, +threshold, +threshold+DPad; HumanEval completions
post-processed as its postprocess_code.py does (`eval.code_postprocess`
"dpad"; "harness" is lm-eval's own). Scored with the harness's metrics
(`jaxlab.experiments.dpad.run_hf`).

`paper,task=T,model=dream`: the same tasks on Dream-v0-Base-7B with the
settings of DPad's dream/scripts/main_base.sh (`DREAM_DPAD`; plain prompts,
no chat template, as its dream/eval.py); `paper,model=dream`: its
long_seq.sh (gen_len 1024, W 128, k 3, a 2.3). `model=llada` (default)
is the LLaDA presets above.

`paper`: LLaDA-8B-Instruct from `init_from` (`GSAI-ML/LLaDA-8B-Instruct`;
any LLaDA / Dream checkpoint) decoding GSM8K as released
(`data.path=openai/gsm8k`, `data.subset=main`, test split, 1-shot from
train), gen_len 1024 (spec L's long setting), scored with the harness's
strict and flexible matching; latency and NFE per sample
(`jaxlab.experiments.dpad.run_hf`). `short`: the same run
with its budget cut (`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale
from jaxlab.data.synthetic import arith_chains
from jaxlab.evals import diffusion_decode

# name -> generate() keywords: the library's decoding variants.
VARIANTS = diffusion_decode.VARIANTS


# The real run's tasks (`config.eval.task`): the harness task's dataset as
# released (lm-evaluation-harness v0.4.8 task yamls: gsm8k.yaml,
# minerva_math_*.yaml, humaneval.yaml, mbpp.yaml), the n-shot of DPad's
# llada/scripts/main_instruct.sh (461b36e: -s=4 / 4 / none / 3), its
# gen_len (-l) and its DPad settings (-w, -k, -sc). minerva_math's subset
# "" is the group's seven configs.
TASKS = {
    "gsm8k": dict(path="openai/gsm8k", subset="main", split="train",
                  eval_split="test", num_fewshot=4, gen_len=256,
                  window=256, k=4.0, a=2.0),
    "minerva_math": dict(path="EleutherAI/hendrycks_math", subset="",
                         split="train", eval_split="test", num_fewshot=4,
                         gen_len=256, window=256, k=4.0, a=2.0),
    "humaneval": dict(path="openai/openai_humaneval",
                      subset="openai_humaneval", split="test",
                      eval_split="test", num_fewshot=0, gen_len=512,
                      window=512, k=3.0, a=2.3),
    "mbpp": dict(path="google-research-datasets/mbpp", subset="full",
                 split="train", eval_split="test", num_fewshot=3,
                 gen_len=512, window=128, k=3.0, a=2.3),
}

# Dream-7B (`model=dream`): DPad's dream/scripts/main_base.sh (Sitaoooo/
# DPad at 44c7b5bda97654caaae394a727b1b4121be85ddb; the "+DPad" lines'
# -w / -k / -sc, the same -s and -l as LLaDA's) for
# Dream-org/Dream-v0-Base-7B, the only Dream model its dream/run.py runs
# ("-m=instruct" raises "not supported"); dream/eval.py's
# apply_chat_template defaults to False and run.py does not set it (a
# plain prompt, `add_bos_token=true`). Without a task: long_seq.sh's
# gen_len 1024 GSM8K 1-shot, -w=128 -k=3 -sc=2.3. Unmasking order as
# run.py:44-52 sets it: the fixed-schedule variants (-th 0) run
# `alg=entropy`, ranking masked positions by the negative entropy
# (`DREAM_CONFIDENCE` -> decode.confidence; generation_utils_block.py:
# 1180-1209), the threshold variants `alg=confidence_threshold`, which
# ranks and thresholds the top-1 probability (decode.threshold_confidence
# "prob"; :1157-1179), and the entropy loop's per-step counts,
# int(n (1 - s / t)) over linspace(1, eps, steps + 1) from i = 1
# (:1181-1189; `DREAM_SCHEDULE` -> decode.schedule,
# `diffusion.dream_transfer_counts`).
DREAM_INIT_FROM = "Dream-org/Dream-v0-Base-7B"
DREAM_DPAD = {
    "gsm8k": dict(window=256, k=4.0, a=1.6),
    "minerva_math": dict(window=128, k=4.0, a=1.6),
    "humaneval": dict(window=128, k=3.0, a=2.3),
    "mbpp": dict(window=128, k=3.0, a=1.6),
}
DREAM_LONG = dict(window=128, k=3.0, a=2.3)
DREAM_CONFIDENCE = "entropy"
DREAM_SCHEDULE = "dream"
MODELS = ("llada", "dream")

# Paper scale (spec L): LLaDA-8B-Instruct decoding gen_len 1024 after a
# GSM8K 1-shot prompt (~256 tokens [inferred]); DPad is training-free, so the
# program is the bidirectional forward every denoising step runs.
PAPER = dict(shape="llada_8b", topology="v5p:2x2x2", seq_len=1280,
             batch_size=8, program="eval",
             paper="spec L: LLaDA-8B-Instruct, gen_len 1024, GSM8K 1-shot")

def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False,
                          smoke=False, seeds=0, steps=0,
                          prompts=0, kind="", init_from="", short=False,
                          task="", model="")
  c = common.base_config()
  c.experiment = "dpad"
  c.seeds = (0, 1, 2)
  c.model.update(vocab_size=arith_chains.VOCAB_SIZE, dim=64, num_layers=4,
                 num_heads=4, num_kv_heads=4, mlp_dim=192,
                 max_position_embeddings=1024, init_std=0.02)
  c.model.causal = False
  c.task = ml_collections.ConfigDict({
      # "copy": n random digits then "?", answer = the digits, then EOS
      # padding; "reverse": reversed; "chain": arithmetic chains mod 10
      # (min_ops..max_ops count digits for copy/reverse, operations for
      # chain). See jaxlab/data/synthetic/arith_chains.py.
      "kind": "copy",
      "pad": "right",           # prompt padded with PAD to prompt_len
      "prompt_len": 16,
      "min_ops": 4,
      "max_ops": 14,            # answer <= 14 tokens, then EOS padding
      "train_gen_len": 128,     # canvas = prompt_len + train_gen_len
      "train_examples": 20000,
      "data_seed": 1234,
  })
  c.loss = ml_collections.ConfigDict({"name": "llada_sft",
                                      "mask_id": arith_chains.MASK,
                                      "eps": 1e-3})
  c.train.update(steps=2000, batch_size=32, log_every=100)
  # A params.npz to continue training from ("{seed}" is the seed); the
  # optimizer state and schedule start afresh. "" = from scratch.
  c.init_from = ""
  c.optim.update(lr=3e-3, warmup_steps=50, weight_decay=0.0,
                 end_lr_frac=0.0)
  c.decode = ml_collections.ConfigDict({
      "gen_lens": (128, 256),
      "block_len": 32,
      "threshold": 0.9,
      # What masked positions are ranked by (`diffusion.CONFIDENCES`): in
      # the fixed-schedule variants ("prob": LLaDA's top-1 probability;
      # "entropy" / "margin": Dream's `alg=entropy` / `topk_margin`) and in
      # the threshold variants (ranked and compared with `threshold`).
      "confidence": "prob",
      "threshold_confidence": "prob",
      # The fixed-schedule variants' per-step counts (`diffusion.SCHEDULES`):
      # "llada" (even split) or "dream" (Dream's timestep ratios, last
      # timestep `eps`); the threshold variants unmask by the threshold.
      "schedule": "llada",
      "eps": 1e-3,
      "dpad": ml_collections.ConfigDict({"window": 64, "k": 3.0, "a": 1.6,
                                         "sampler": "gaussian", "n": 0}),
      # The miniature's variants (the committed runs): all but the main
      # table's "+threshold+DPad".
      "variants": tuple(v for v in VARIANTS if v != "+threshold+DPad"),
      "prompts": 64,            # held-out prompts per gen_len
      "batch": 64,
      "repeats": 1,             # timed passes (median)
      # The real run (data.source "hf"): the checkpoint's compute dtype.
      "dtype": "float32",
  })
  # The real run (data.source "hf"): which harness task (`TASKS`), its
  # few-shot count (-1: the task's, `TASKS`; GSM8K's are the first rows of
  # data.split, the others the task's fixed examples), whether prompts go
  # through the checkpoint's chat template (DPad's eval_llada.py does for
  # an instruct model), HumanEval's post-processing ("harness": prompt +
  # completion cut at the stop strings; "dpad": DPad's sanitize) and the
  # per-program limit of code tasks (code_eval's 3 s).
  c.eval = ml_collections.ConfigDict({
      "task": "gsm8k", "num_fewshot": -1, "chat_template": False,
      "code_postprocess": "harness", "timeout_s": 3.0})
  c.bench = ml_collections.ConfigDict({"gen_lens": (128, 256, 512)})
  if args.tiny:  # what 2 shared CPU cores allow: short canvas, few prompts
    c.seeds = (0, 1)
    c.task.update(max_ops=12, train_gen_len=48)
    c.train.update(steps=500, batch_size=32, log_every=50)
    c.decode.update(gen_lens=(64, 128), prompts=32, batch=32)
    c.bench.gen_lens = (128, 256, 512)
  if args.smoke:  # seconds-long plumbing check (colab tests); not a result
    c.seeds = (0,)
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=2,
                   mlp_dim=64)
    c.task.update(train_examples=64, max_ops=6)
    c.train.update(steps=2, batch_size=8, log_every=1)
    c.decode.update(gen_lens=(32,), block_len=16, prompts=4, batch=4,
                    variants=("vanilla", "+all"))
    c.decode.dpad.window = 16
    c.bench.gen_lens = (32,)
  if args.kind:
    c.task.kind = args.kind
    if args.kind == "chain":  # the original templated chains: 2-5 ops
      c.task.update(pad="left", min_ops=2, max_ops=5)
  if args.seeds:
    c.seeds = tuple(range(args.seeds))
  if args.steps:
    c.train.steps = args.steps
  if args.init_from:
    c.init_from = args.init_from
  if args.prompts:
    c.decode.prompts = c.decode.batch = args.prompts
  if args.model and args.model not in MODELS:
    raise ValueError(f"dpad: unknown model={args.model!r}; valid: "
                     f"{', '.join(MODELS)}")
  if args.model and not args.paper:
    raise ValueError("dpad: model= selects a paper preset's checkpoint; "
                     "use it with `paper`")
  dream = args.model == "dream"
  ckpt = DREAM_INIT_FROM if dream else "GSAI-ML/LLaDA-8B-Instruct"
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from=ckpt,
                    path="openai/gsm8k", subset="main", split="train",
                    eval_split="test")
    # Spec L's long setting: gen_len 1024, GSM8K 1-shot, block 32, DPad
    # W = 256, k = 3, a = 1.6, threshold 0.9, latency per sample (batch 1);
    # the variants of its long-sequence table.
    c.decode.update(gen_lens=(1024,), block_len=32, threshold=0.9, batch=1,
                    dtype="bfloat16",
                    variants=("vanilla", "+early stop", "+DPad",
                              "+threshold+prefix cache", "+all"))
    c.decode.dpad.update(window=256, k=3.0, a=1.6)
    if dream:
      c.decode.dpad.update(**DREAM_LONG)
      c.decode.confidence = DREAM_CONFIDENCE
      c.decode.schedule = DREAM_SCHEDULE
    c.eval.num_fewshot = 1
    if args.task:
      if args.task not in TASKS:
        raise ValueError(f"dpad: unknown task={args.task!r}; valid: "
                         f"{', '.join(TASKS)}")
      t = TASKS[args.task]
      scale.paper_run(c, init_from=ckpt,
                      path=t["path"], subset=t["subset"], split=t["split"],
                      eval_split=t["eval_split"])
      c.decode.update(gen_lens=(t["gen_len"],),
                      variants=("vanilla", "+DPad", "+threshold",
                                "+threshold+DPad"))
      c.decode.dpad.update(**(DREAM_DPAD[args.task] if dream else dict(
          window=t["window"], k=t["k"], a=t["a"])))
      c.eval.update(task=args.task, num_fewshot=t["num_fewshot"],
                    chat_template=not dream,
                    code_postprocess=("dpad" if args.task == "humaneval"
                                      else "harness"))
  if args.short:
    scale.short(c)
  return c
