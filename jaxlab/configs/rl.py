"""GRPO on a Hugging Face checkpoint with verifiable answers (`jaxlab/experiments/rl`).

    python -m jaxlab.main --workdir=workdirs/rl \
        --config=jaxlab/configs/rl.py:init_from=/ckpt/Qwen3-0.6B,data=math.jsonl,steps=200

`init_from` is a checkpoint directory; its own tokenizer and chat template
are used (`data.tokenizer="auto"`): each question is rendered as a user turn
with the generation prompt, and sampling stops at every eos id of the
checkpoint. `data` is a JSONL file of `{"prompt": str, "answer": str}` rows
(or `{"messages": [...], "answer": str}`); empty generates arithmetic
questions ("What is 3 + 4?" -> "7"). Chat-template keywords (e.g.
`--config.data.chat_template_kwargs='{"enable_thinking": false}'`, a JSON
object) reach the template; a row's own "tools" join them. The reward is 1
when the completion's answer equals the reference under `rl.reward` (a
collapsing function of `jaxlab.evals.calibration`: numeric, normalized,
exact). The GRPO update is the library's learner (`jaxlab.rl.learner`).
`export_dir` writes the tuned model as a HF checkpoint with the tokenizer
files.

Args: `tiny` (no checkpoint: a random byte-level decoder, 3 steps, for
tests), `init_from`, `data`, `eval_data`, `steps`, `export_dir`.
"""

import ml_collections

from jaxlab.configs import common


def get_config(arg: str | None = None):
  args = common.parse_arg(arg, tiny=False, init_from="", data="",
                          eval_data="", steps=200, export_dir="")
  c = common.base_config()
  c.experiment = "rl"
  c.init_from = args.init_from
  c.export_dir = args.export_dir
  c.data.update(source="qa_jsonl", path=args.data, eval_path=args.eval_data,
                tokenizer="auto", eval_fraction=0.1)
  c.rl = ml_collections.ConfigDict({
      "steps": args.steps,
      "prompts_per_step": 8,
      "eval_every": 50,          # 0: only before and after
      "eval_questions": 64,      # greedy accuracy on this many held-out
      "reward": "numeric",       # jaxlab.evals.calibration.COLLAPSERS
      "chat": True,              # render with the chat template when present
      # Generated questions when data is empty: a + b with a, b < max_operand.
      "num_questions": 512,
      "max_operand": 50,
  })
  c.grpo = ml_collections.ConfigDict({
      "group_size": 8, "num_iterations": 1, "num_minibatches": 1,
      "advantage": "grpo", "clip_eps": 0.2, "kl_beta": 0.04,
      "entropy_coef": 0.0, "aggregation": "token_mean",
      "max_new_tokens": 64, "temperature": 1.0,
  })
  c.optim.update(lr=1e-6, warmup_steps=0, weight_decay=0.0, clip_norm=1.0)
  if args.tiny:
    c.data.tokenizer = "byte" if not args.init_from else "auto"
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.rl.update(steps=min(args.steps, 3), prompts_per_step=2, eval_every=0,
                eval_questions=4, num_questions=32, max_operand=5)
    c.grpo.update(group_size=4, max_new_tokens=6)
    c.optim.update(lr=1e-3)
  return c
