r"""Trust-GRPO miniature (paper G, SophiaVL-R1): thinking-reward hacking.

    python -m experiments.main --config=configs/trust_grpo.py --workdir=/tmp/tg
    python -m experiments.main --config=configs/trust_grpo.py:tiny \
        --workdir=/tmp/tg_tiny
    # any field from the command line, e.g. DAPO-style asymmetric clipping:
    python -m experiments.main --config=configs/trust_grpo.py:tiny \
        --workdir=/tmp/tg_tiny --config.grpo.clip_eps_high=0.28

A tiny decoder answers "(a + b) mod K" as `<think> <answer> EOS`, where the
thinking token is a value v ("I get v") or the degenerate filler HACK, which
never yields a correct outcome. A synthetic thinking reward model (TRM)
rates the right v highest on most questions but, on a fixed 30 % "hackable"
subset, rates HACK highest. Variants: outcome-only, +thinking (no trust, no
anneal), +anneal, Trust-GRPO (trust + anneal), and Trust-GRPO with the
shipped code's switches (b) saturated-group skip and (c) R^t only when
R^o >= 0.2 ("trust_code"). The others use the paper's reading of (a)-(c)
(T = total steps; binary outcomes make gamma = 1 always under (c), spec G
8(c)).

Sections reach their classes whole: `DecoderConfig` from `model`
(`jaxlab.models.registry.decoder_config`; vocab_size 0 = the task's),
`GRPOConfig(**grpo)` (sampling length and special ids come from the task),
the RL optimizer from `optim`, the SFT warm start's from `sft`.
"""

import ml_collections
from ml_collections import config_dict

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False)
  c = common.base_config()
  c.experiment = "trust_grpo"
  c.seeds = tuple(range(10))  # RL miniatures: 10 seeds (issue 11)
  c.variants = "outcome,thinking,anneal,trust,trust_code"
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
  c.trust = dict(alpha=0.3, anneal_T=0.0)  # 0: T = total RL steps (paper)
  if args.tiny:
    c.seeds = (0,)
    c.variants = "outcome,thinking,trust"
    c.sft.update(steps=30)
    c.rl.update(steps=20, eval_every=10, eval_samples=4)
  return c
