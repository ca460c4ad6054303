"""The passkey miniature's loss (paper D): weighted next-token NLL.

Registered as `"passkey_copy"`; `jaxlab.experiments.rope_extension` passes it
to the trainer with `jaxlab.evals.passkey_copy.PasskeySource` batches.
"""

import jax.numpy as jnp
import optax

from jaxlab.train import losses


@losses.register("passkey_copy")
def passkey_loss(model, batch, *, rng, config=None):
  """Weighted next-token NLL, plus answer accuracy metrics (learning curve).

  loss = sum_t w_t nll_t / sum_t w_t with w = `loss_mask`; metrics
  `answer_nll`, `answer_acc` (fraction of answer digits whose argmax is
  right) and `answer_exact` (all digits right, teacher-forced = greedy).
  """
  del rng, config
  logits = model(batch["inputs"]).astype(jnp.float32)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits,
                                                        batch["targets"])
  w = batch["loss_mask"].astype(jnp.float32)
  ans = batch["answer_mask"].astype(jnp.float32)
  correct = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32)
  n_ans = jnp.maximum(ans.sum(), 1.0)
  row_ok = jnp.all((correct > 0) | (ans == 0), axis=-1).astype(jnp.float32)
  metrics = {
      "answer_nll": jnp.sum(nll * ans) / n_ans,
      "answer_acc": jnp.sum(correct * ans) / n_ans,
      "answer_exact": jnp.mean(row_ok),
      "filler_nll": jnp.sum(nll * (1 - ans)) / jnp.maximum(
          (1 - ans).sum(), 1.0),
  }
  return jnp.sum(nll * w) / jnp.maximum(w.sum(), 1.0), metrics
