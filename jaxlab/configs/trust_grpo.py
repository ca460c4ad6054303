r"""Trust-GRPO miniature (paper G, SophiaVL-R1): thinking-reward hacking.

    python -m jaxlab.main --config=jaxlab/configs/trust_grpo.py --workdir=/tmp/tg
    python -m jaxlab.main --config=jaxlab/configs/trust_grpo.py:tiny \
        --workdir=/tmp/tg_tiny
    # any field from the command line, e.g. DAPO-style asymmetric clipping:
    python -m jaxlab.main --config=jaxlab/configs/trust_grpo.py:tiny \
        --workdir=/tmp/tg_tiny --config.grpo.clip_eps_high=0.28

A tiny decoder answers "(a + b) mod K" as `<think> <answer> EOS`, where the
thinking token is a value v ("I get v") or the degenerate filler HACK, which
never yields a correct outcome. A synthetic thinking reward model (TRM)
rates the right v highest on most questions but, on a fixed 30 % "hackable"
subset, rates HACK highest. Variants: outcome-only, +thinking (no trust, no
anneal), +anneal, Trust-GRPO (trust + anneal), Trust-GRPO at the shipped
code's T = 12000 ("trust_T12000", spec G 8(a)), and Trust-GRPO with the
shipped code's switches (b) saturated-group skip and (c) R^t only when
R^o >= 0.2 ("trust_code"). The others use the paper's reading of (a)-(c)
(T = total steps; binary outcomes make gamma = 1 always under (c), spec G
8(c)).

Sections reach their classes whole: `DecoderConfig` from `model`
(`jaxlab.models.registry.decoder_config`; vocab_size 0 = the task's),
`GRPOConfig(**grpo)` (sampling length and special ids come from the task),
the RL optimizer from `optim`, the SFT warm start's from `sft`.

Preset `vl` (combinable: `trust_grpo:tiny,vl`): the paper's policy family,
Qwen2.5-VL reading the question from an image. The task is asked visually
(`task.visual`: the prompt is `[BOS]`, the operands a and b are lit cells
of a 16 x 16 image, `jaxlab.data.synthetic.thinking_task.render_operands`)
and `model` is "qwen2_5_vl_prefix" (`jaxlab.models.qwen2_vl_prefix`: the
decoder fields plus a tiny `vision` tower, patch 4, and `prefix` {kind
"image", image_size = task.image_size}); the warm start, GRPO and the
evaluation pass the images as the prefix inputs.

`paper`: Qwen2.5-VL-7B-Instruct from `init_from`
(`Qwen/Qwen2.5-VL-7B-Instruct`), GRPO (N = 8, beta_KL 0.04, lr 5e-7, alpha
0.3, 1500 steps; spec G) on SophiaVL-R1-130k as released
(`data.path=bunny127/SophiaVL-R1-130k`, no subset, train split; the
repository README's name). The thinking reward model the paper trains is
`bunny127/SophiaVL-R1-Thinking-Reward-Model-3B` (`trm.init_from`, a
Qwen2.5-VL checkpoint prompted as SophiaVL-R1 prompts it); accuracy on
MathVista (`eval_data`: `AI4Math/MathVista` testmini as released) with
MathVista's answer matching (`jaxlab.evals.mathvista`). With
`data.source="hf"` the experiment runs `jaxlab.experiments.trust_grpo.
real`. `short`: the same run with its budget cut
(`jaxlab.configs._scale.short`: 2 RL steps, 8 training and 8 evaluation
rows, one seed).
"""

import ml_collections
from ml_collections import config_dict

from jaxlab.configs import _scale as scale
from jaxlab.configs import common


# Paper scale (spec G): SophiaVL-R1-7B = Qwen2.5-VL-7B-Instruct, GRPO with
# rollout n = 8 over 16 prompts, max response 1024, prompts up to 8192
# (2048 typical [inferred]), vision tower trained.
# The spec states no image resolution: [inferred] 448 x 448 (256 tokens).
PAPER = dict(shape="qwen2_5_7b", topology="v5p:2x2x4", seq_len=3072,
             batch_size=128, grad_accum=8, sampler=(128, 2048, 1024),
             vision=dict(kind="image", image_size=448),
             note=scale.VL_NOTE.format(size="7B"),
             paper="spec G: Qwen2.5-VL-7B GRPO, 16 prompts x 8, 1024 new; "
                   "images 448 x 448 [inferred]")

def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False,
                          learned=False, smoke=False, vl=False, short=False)
  c = common.base_config()
  c.experiment = "trust_grpo"
  c.seeds = tuple(range(10))  # RL miniatures: 10 seeds (issue 11)
  # Names registered in jaxlab.rewards.trust_variants.VARIANTS.
  c.variants = ("outcome", "thinking", "anneal", "trust", "trust_code")
  c.task = dict(modulus=5, hackable_frac=0.3, task_seed=1234,
                # informative questions: right v / wrong v / HACK
                trm_right=0.9, trm_wrong=0.3, trm_hack=0.3,
                # hackable questions: HACK / any v
                trm_hack_hackable=0.9, trm_value_hackable=0.1)
  c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                 mlp_dim=64, max_position_embeddings=16)
  # Format warm start: plain Adam (b2 0.999, no clipping or decay).
  c.sft = dict(steps=60, batch_size=64, lr=3e-3, hack_prob=0.5)
  # jaxlab.rl.learner.GRPOConfig fields (max_new_tokens, eos_id and pad_id
  # are the task's).
  c.grpo = dict(group_size=8, num_iterations=2, num_minibatches=1,
                advantage="grpo", clip_eps=0.2,
                clip_eps_high=config_dict.placeholder(float),
                kl_beta=0.04, entropy_coef=1e-3, aggregation="token_mean",
                temperature=1.0, top_p=config_dict.placeholder(float))
  c.rl = dict(steps=150, prompts_per_step=25, eval_every=10, eval_samples=16)
  c.optim.update(lr=3e-3, warmup_steps=0, schedule="constant", b1=0.9,
                 b2=0.99, weight_decay=0.0, clip_norm=1.0)
  # anneal_T 0: T = total RL steps (paper). trm: "synthetic" (the rule
  # judge) or "learned" (a TinyThinkingScorer fitted on judge labels, `trm`).
  c.trust = dict(alpha=0.3, anneal_T=0.0, trm="synthetic")
  # The learned TRM (trust.trm="learned"): `samples` judge-labelled rollout
  # pairs (HACK w.p. hack_prob), label noise sd before rounding to 0.1,
  # bin balancing (at most per_bin rows per 0.1 bin), scorer widths and fit.
  c.trm = dict(samples=4000, hack_prob=0.5, label_noise=0.1, balance=True,
               per_bin=400, num_buckets=512, dim=64, hidden=256, steps=2000,
               batch_size=64, lr=1e-2)
  if args.vl:  # Qwen2.5-VL reading the operands from an image
    c.task.update(visual=True, image_size=16)
    c.model.update(name="qwen2_5_vl_prefix", max_position_embeddings=32)
    c.model.vision = dict(depth=2, hidden_size=32, intermediate_size=64,
                          num_heads=2, patch_size=4, window_size=16,
                          fullatt_block_indexes=(1,))
    c.model.prefix = dict(kind="image",
                          image_size=c.task.get_ref("image_size"))
  if args.learned:
    # The learned TRM in the loop, and the shipped code's T = 12000.
    c.trust.trm = "learned"
    c.seeds = (0, 1, 2)
    c.variants = ("outcome", "thinking", "trust", "trust_T12000")
    c.rl.eval_every = 50  # evaluation does not touch training's keys
  if args.tiny:
    c.seeds = (0,)
    c.variants = ("outcome", "thinking", "trust")
    c.sft.update(steps=30)
    c.rl.update(steps=20, eval_every=10, eval_samples=4)
    c.trm.update(samples=600, per_bin=60, steps=150)
  if args.smoke:  # colab/test size: a few seconds per variant
    c.seeds = (0,)
    c.sft.update(steps=10)
    c.rl.update(steps=3, eval_every=3, eval_samples=2)
    c.trm.update(samples=300, per_bin=30, steps=40)
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="Qwen/Qwen2.5-VL-7B-Instruct",
                    path="bunny127/SophiaVL-R1-130k", subset="",
                    split="train", eval_split="")
    # Spec G.6: N = 8, beta_KL 0.04, lr 5e-7, alpha 0.3, 1500 steps, 16
    # prompts a step, responses up to 1024 tokens.
    c.grpo.update(group_size=8, kl_beta=0.04)
    c.rl.update(steps=1500, prompts_per_step=16)
    c.optim.lr = 5e-7
    c.trust.alpha = 0.3
    # The real run (`jaxlab.experiments.trust_grpo.real`): Trust-GRPO as
    # the paper reads it, and as the released code runs it (spec G 8).
    c.variants = ("trust", "trust_code")
    c.seeds = (0,)   # the paper reports one run per model
    # The thinking reward model: a Qwen2.5-VL checkpoint prompted and
    # parsed as SophiaVL-R1's `get_process_reward` (rewards.sophiavl).
    c.trm.init_from = "bunny127/SophiaVL-R1-Thinking-Reward-Model-3B"
    c.trm.max_new_tokens = 16     # "<answer>0.7</answer>"
    # MathVista (its Hub layout) for the accuracy, MathVista's matching.
    c.eval_data = dict(source="hf", path="AI4Math/MathVista", subset="",
                       split="testmini", max_rows=0, image_root="",
                       cache_dir="")
    c.data.image_root = ""   # the rows' `path`s resolve here ('' = path)
    # Images at one size in GRPO (the prefix LM's static grid; spec G
    # states none, [inferred] 448 x 448); evaluation within VLMEvalKit's
    # Qwen2VLChat bounds (SophiaVL-R1 README: 1280 to 16384 x 28 x 28).
    c.real = dict(image_size=448, max_new_tokens=1024,
                  eval_max_new_tokens=2048, eval_min_pixels=1280 * 28 * 28,
                  eval_max_pixels=16384 * 28 * 28, trm_min_pixels=0,
                  trm_max_pixels=0)
  if args.short:
    scale.short(c)
  return c
