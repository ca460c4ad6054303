"""Training of the controller miniature's variants (paper I).

`train_variant` trains one variant on short instances with the trainer's
step (`jaxlab.train.runner.StepRunner`, the registered `"controller"`
loss with `loss_config`: the entropy schedule resolved against the steps).
"""

from __future__ import annotations

import ml_collections

from jaxlab.data.synthetic import algorithmic as alg
from jaxlab.data.synthetic import controller_data
from jaxlab.data.synthetic.controller_data import pad_lengths
from jaxlab.evals.controller_eval import _resolve, model_config
from jaxlab.models import registry as model_registry
from jaxlab.objectives import controller as ctl_loss  # registers the loss
from jaxlab.train import runner

del ctl_loss


def loss_config(config) -> ml_collections.ConfigDict:
  lc = ml_collections.ConfigDict(config.loss.to_dict())
  lc.ent_steps = _resolve(lc.ent_steps, int(config.train.steps), 1.0)
  return lc


def train_variant(config, task: str, variant: str, seed: int, log):
  steps, bs = int(config.train.steps), int(config.train.batch_size)
  spec = model_registry.get_spec(model_config(config, variant),
                                 vocab_size=controller_data.vocab_size(config),
                                 seed=seed)
  model = spec.factory()
  lengths = list(config.train_lengths)
  v = controller_data.num_values(config)
  train = alg.encode(alg.make_examples(task, lengths, steps * bs,
                                       seed=1000 + seed, num_values=v),
                     pad_to=pad_lengths(config)[0], num_values=v)
  run = runner.StepRunner(
      model, loss="controller", loss_config=loss_config(config),
      optim=config.optim,  # the whole section: b2, clip_norm, grad_accum...
      steps=steps, seed=seed)
  keys = ("inputs", "targets", "loss_mask", "op_targets")
  last = {}
  for step in range(steps):
    sl = slice(step * bs, (step + 1) * bs)
    last = run.step({k: train[k][sl] for k in keys}, step)
    if step % max(steps // 5, 1) == 0 or step == steps - 1:
      log(f"{task}/{variant}/seed{seed} step {step}: "
          + " ".join(f"{k}={v:.3f}" for k, v in sorted(last.items())
                     if k in ("loss", "task_loss", "op_acc", "tau")))
  return run.write_back(), last
