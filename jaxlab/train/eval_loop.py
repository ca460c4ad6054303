"""A step loop with a held-out evaluation every few steps.

    history = train_with_eval(runner, lambda s: next_batch(s), steps=2500,
                              eval_every=100,
                              eval_fn=lambda model: held_out_loss(model))
    # [{"step": 100, "train_loss": ..., "val_loss": ...}, ...]

The update is the runner's (`jaxlab.train.runner.StepRunner.step`); the
caller draws the batches (`batch_fn(step)`), so any sampling order works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def train_with_eval(runner, batch_fn: Callable[[int], dict[str, Any]], *,
                    steps: int, eval_every: int,
                    eval_fn: Callable[[Any], float]) -> list[dict]:
  """`steps` updates; after every `eval_every`-th, the training batch loss
  and `eval_fn(runner.model())` (as "val_loss"). Writes the weights back
  into the runner's model at the end."""
  history = []
  for s in range(int(steps)):
    m = runner.step(batch_fn(s), s)
    if (s + 1) % int(eval_every) == 0:
      history.append({"step": s + 1, "train_loss": m["loss"],
                      "val_loss": float(eval_fn(runner.model()))})
  runner.write_back()
  return history
