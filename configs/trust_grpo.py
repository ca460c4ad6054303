r"""Trust-GRPO miniature (paper G, SophiaVL-R1): thinking-reward hacking.

    python -m experiments.main --config=configs/trust_grpo.py --workdir=/tmp/tg
    python -m experiments.main --config=configs/trust_grpo.py:tiny \
        --workdir=/tmp/tg_tiny

A tiny decoder answers "(a + b) mod K" as `<style> <answer> EOS`, where the
style token stands for the thinking. A synthetic thinking reward model (TRM)
rewards the good style on most questions but, on a fixed 30 % "hackable"
subset, prefers the degenerate style, which never yields a correct answer.
Variants: outcome-only, +thinking (no trust, no anneal), +anneal, Trust-GRPO
(trust + anneal). The binary outcome reward needs the paper's reading of the
code switches (b) and (c) (else gamma is always 1, spec G 8(c)), so
`trust.mode = "paper"`; "code" runs the shipped code's switches.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  tiny = arg is not None and "tiny" in arg.split(",")
  c = ml_collections.ConfigDict()
  c.experiment = "trust_grpo"
  c.seeds = (0, 1, 2)
  c.variants = "outcome,thinking,anneal,trust"
  c.task = dict(modulus=5, hackable_frac=0.3, task_seed=1234,
                trm_good=0.9, trm_bad=0.1)
  c.model = dict(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                 mlp_dim=64)
  c.sft = dict(steps=60, batch_size=64, lr=3e-3)
  c.rl = dict(steps=80, prompts_per_step=8, group_size=8,
              num_iterations=2, kl_beta=0.04, entropy_coef=1e-3,
              clip_eps=0.2, temperature=1.0, aggregation="token_mean",
              advantage="grpo", eval_every=20)
  c.optim = dict(lr=3e-3, warmup_steps=0, schedule="constant", b1=0.9,
                 b2=0.99, weight_decay=0.0, clip_norm=1.0)
  c.trust = dict(mode="paper", alpha=0.3, anneal_T=0.0)  # 0: total steps
  if tiny:
    c.seeds = (0,)
    c.sft.update(steps=30)
    c.rl.update(steps=20, eval_every=10)
  return c
