r"""MSRL chart-to-code miniature (paper F): SFT -> GRPO stage 1 -> stage 2.

    python -m experiments.main --config=configs/chart_to_code.py \
        --workdir=/tmp/c2c
    python -m experiments.main --config=configs/chart_to_code.py:tiny \
        --workdir=/tmp/c2c_tiny

See experiments/chart_to_code.py. Reward weights are [inferred] (equal; the
paper's were not found); the visual judge is SSIM, the CPU proxy for
Qwen2.5-VL-72B. Rendering one chart in the sandbox costs ~0.5 s, so groups
and steps are small.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  tiny = arg is not None and "tiny" in arg.split(",")
  c = ml_collections.ConfigDict()
  c.experiment = "chart_to_code"
  c.seeds = (0, 1, 2)
  c.max_len = 28
  c.data = dict(sft_size=48, stage_size=64, eval_size=24)
  c.model = dict(dim=64, num_layers=2)
  c.sft = dict(steps=300, batch_size=32, lr=3e-3, eval_every=50, seed=0)
  c.rl = dict(stage1_steps=15, stage2_steps=15, prompts_per_step=4,
              group_size=4, lr=5e-4, clip_eps=0.2, kl_beta=0.01,
              entropy_coef=0.0)
  c.reward = dict(w_text=1.0, w_vis=1.0, w_exec=1.0, judge="ssim",
                  timeout_s=10.0, workers=2)
  if tiny:
    c.seeds = (0,)
    c.data.update(sft_size=16, stage_size=8, eval_size=4)
    c.sft.update(steps=20, eval_every=10)
    c.rl.update(stage1_steps=1, stage2_steps=1, prompts_per_step=2,
                group_size=2)
  return c
