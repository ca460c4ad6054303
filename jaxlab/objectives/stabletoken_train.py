"""StableToken's variants (spec E) and their training with the trainer's step.

`VARIANTS` names the full model and its ablations (model and loss
overrides of `cfg.tokenizer` / `cfg.loss`); `train_variant` trains one
tokenizer with `jaxlab.train.runner.StepRunner` on the registered
`"stabletoken"` loss, each step pairing a clean utterance with a random
one of its perturbed copies.
"""

from __future__ import annotations

from typing import Any

import ml_collections
import numpy as np
from flax import nnx

from jaxlab.models import registry as model_registry
from jaxlab.objectives import stabletoken as _  # registers the loss  # pylint: disable=unused-import
from jaxlab.train import runner

# variant -> (model overrides, loss overrides)
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "full": ({}, {"routing": "noise_aware"}),
    "no_consensus": ({}, {"routing": "noise_aware", "consensus_weight": 0.0}),
    "no_routing": ({}, {"routing": "augment"}),
    "single_branch": ({"n_voters": 1, "num_clean": 1}, {"routing": "augment"}),
    "vq": ({"quantizer": "vq"}, {"routing": "augment"}),
}
LABELS = {"full": "StableToken (full)", "no_consensus": "w/o consensus loss",
          "no_routing": "w/o noise-aware routing",
          "single_branch": "single branch (n=1)", "vq": "VQ baseline"}


def variant_configs(cfg, variant: str):
  if variant not in VARIANTS:
    raise ValueError(f"config.variants: unknown variant {variant!r}; valid: "
                     f"{', '.join(VARIANTS)}")
  model_over, loss_over = VARIANTS[variant]
  model_cfg = ml_collections.ConfigDict(cfg.tokenizer.to_dict())
  model_cfg.update(model_over)
  model_cfg.n_mels = cfg.features.n_mels
  loss_cfg = ml_collections.ConfigDict(cfg.loss.to_dict())
  loss_cfg.update(loss_over)
  return model_cfg, loss_cfg


def train_variant(cfg, variant: str, data: dict[str, Any], seed: int, *,
                  model: nnx.Module | None = None):
  """Trains one tokenizer with the trainer's step (StepRunner).

  `model`: the tokenizer to train (e.g. `models.whisper.WhisperTokenizer`
  from a checkpoint); None builds the miniature's from `cfg.tokenizer`.
  """
  model_cfg, loss_cfg = variant_configs(cfg, variant)
  if model is None:
    spec = model_registry.get_spec(model_cfg, vocab_size=cfg.speech.num_phones
                                   + 1, seed=seed)
    model = nnx.jit(spec.factory)()
  steps, bs = int(cfg.train.steps), int(cfg.train.batch_size)
  run = runner.StepRunner(model, loss="stabletoken", loss_config=loss_cfg,
                          optim=cfg.optim, steps=steps, seed=seed)
  tr = data["train"]
  n, copies = len(tr["features"]), tr["noisy"].shape[1]
  rng = np.random.default_rng(10_000 + seed)
  curve = []
  for step in range(steps):
    idx = rng.integers(0, n, bs)
    batch = {"features": tr["features"][idx],
             "features_noisy": tr["noisy"][idx, rng.integers(0, copies, bs)],
             "frame_lengths": tr["frame_lengths"][idx],
             "labels": tr["labels"][idx], "label_mask": tr["label_mask"][idx]}
    m = run.step(batch, step)
    if step % max(1, steps // 10) == 0 or step == steps - 1:
      curve.append({"step": step, **{k: m[k] for k in
                                     ("loss", "ctc", "consensus", "entropy")}})
      print(f"  {variant} step {step}: loss {m['loss']:.3f} ctc "
            f"{m['ctc']:.3f}", flush=True)
  return run.model(), curve


def n_voters(cfg, variant: str) -> int:
  """Branches of the variant's quantizer (1 unless Voting-LFQ)."""
  if VARIANTS[variant][0].get("quantizer", "voting_lfq") != "voting_lfq":
    return 1
  return variant_configs(cfg, variant)[0].n_voters
