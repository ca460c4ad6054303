"""Paper N's "instruction tuning" of the aleatoric-QA LM toward its mode.

Spec N, CPU miniature (a): RL or DPO toward the plurality answer (not a
proper loss), expected to break B-calibration.

  grpo_toward_mode  GRPO (`jaxlab.rl.learner`) with reward
                    1[B(z) = mode of p*(.|x)], B = the last number;
  dpo_toward_mode   the `dpo` loss (`jaxlab.objectives.dpo`) on
                    `aleatoric.dpo_pairs` (mode answer ≻ another answer),
                    reference = the base model.

`cfg` holds the `grpo`, `rl`, `dpo` and `pretrain.max_len` fields of
`jaxlab/configs/calibration.py` (and `mesh` / `sharding_rules`: both
sub-trainings run on `config.mesh` fitted to their batch,
`parallel.mesh_from_config`). Each returns (tuned copy, history).
"""

from __future__ import annotations

from flax import nnx
import jax
import ml_collections
import numpy as np

from jaxlab import parallel
from jaxlab.data.synthetic import aleatoric
from jaxlab.evals import calibration as cal
from jaxlab.objectives import dpo as dpo_lib
from jaxlab.objectives import self_generated as sg
from jaxlab.rl import learner as learner_lib
from jaxlab.train import runner


def _tuned(kind: str, base, tok, task, cfg, seed: int):
  """A GRPO (reward 1[B(z) = mode]) or DPO (mode ≻ other, reference = the
  base model) copy of `base` and its training history."""
  if kind == "rl":
    rl = cfg.rl
    gcfg = learner_lib.GRPOConfig(**dict(cfg.grpo), eos_id=tok.eos_id,
                                  pad_id=tok.pad_id)
    n_prompts = min(rl.prompts_per_step, len(task.questions))
    learner = learner_lib.GRPOLearner(
        nnx.clone(base), gcfg, {"lr": rl.lr}, total_steps=rl.steps,
        seed=seed, rules=cfg.get("sharding_rules"),
        mesh=parallel.mesh_from_config(
            cfg, batch=n_prompts * gcfg.group_size // gcfg.num_minibatches))

    def batches():
      rng = np.random.default_rng(40_000 + seed)
      while True:
        qis = rng.choice(len(task.questions), n_prompts, replace=False)
        yield {"prompts": [tok.encode(task.prompt(
            task.questions[i], aleatoric.DIRECT, int(rng.integers(len(
                aleatoric.QUESTION_TEMPLATES)))), add_bos=True) for i in qis],
               "mode": [str(task.questions[i].mode) for i in qis]}

    def reward_fn(*, completions, mode, **_):
      return np.array([float(cal.collapse_numeric("", tok.decode(
          [t for t in c if t < 256])) == m) for c, m in zip(completions, mode)],
                      np.float32)
    history = learner.train(batches(), reward_fn, steps=rl.steps,
                            key=jax.random.key(41_000 + seed))
    return learner.policy, [row["reward_mean"] for row in history]
  prompts, chosen, rejected = aleatoric.dpo_pairs(
      task, cfg.dpo.pairs_per_question, seed)
  batch = {}
  for side, answers in (("chosen", chosen), ("rejected", rejected)):
    enc = sg.encode_pairs(tok, prompts, answers, max_len=cfg.pretrain.max_len)
    batch.update({f"{side}_{k}": enc[k] for k in ("inputs", "targets",
                                                  "mask")})
  batch.update(dpo_lib.reference_logps(base, batch))
  d = cfg.dpo
  rows = min(d.batch_size, len(prompts))
  run = runner.StepRunner(
      nnx.clone(base), loss="dpo", loss_config=ml_collections.ConfigDict(
          {"beta": float(d.beta)}), optim=runner.optim_config(lr=d.lr),
      steps=d.steps, seed=seed, rules=cfg.get("sharding_rules"),
      mesh=parallel.mesh_from_config(cfg, batch=rows))
  rng = np.random.default_rng(61_000 + seed)

  def draw(_):
    idx = rng.choice(len(prompts), rows, replace=False)
    return {k: v[idx] for k, v in batch.items()}
  hist = runner.train_on_batches(run, draw, steps=d.steps)
  return run.model(), hist



def grpo_toward_mode(base, tok, task, cfg, seed: int):
  """GRPO copy of `base`, reward 1[B(z) = mode]; history = reward means."""
  return _tuned("rl", base, tok, task, cfg, seed)


def dpo_toward_mode(base, tok, task, cfg, seed: int):
  """DPO copy of `base` (mode ≻ other); history = per-step metrics."""
  return _tuned("dpo", base, tok, task, cfg, seed)
