"""Measurements of the controller miniature (paper I).

`model_config` is a variant's model section (vanilla decoder, soft τ = 1,
Gumbel-annealed); `evaluate` gives sequence-level exact accuracy
(teacher-forced argmax = greedy exact match), the trace alignment of the
executed ops with the simulator's opcodes and the selector entropy, also
with the controllers knocked out; `flop_rows` the FLOP overhead counted
(`controller_forward_flops`), measured (XLA cost analysis of the compiled
forward) and by the spec's formula (1/(2p))(d_s/D)^2.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.data.synthetic import algorithmic as alg
from jaxlab.models import controller as ctl
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry

VARIANT_LABELS = {"vanilla": "vanilla (B1)", "soft": "soft τ=1 (B6)",
                  "gumbel": "Gumbel-annealed"}


def _resolve(value: int, steps: int, frac: float) -> int:
  return int(round(frac * steps)) if value == -1 else int(value)


def model_config(config, variant: str) -> ml_collections.ConfigDict:
  """`config.model` for a variant (vanilla: the plain decoder)."""
  m = ml_collections.ConfigDict(config.model.to_dict())
  steps = int(config.train.steps)
  if variant == "vanilla":
    del m["controller"]
    m.name = "decoder"
    return m
  cc = m.controller
  cc.anneal_steps = _resolve(cc.anneal_steps, steps, 0.6)
  if cc.hard_after_step == -2:
    cc.hard_after_step = int(round(0.8 * steps))
  if variant == "soft":
    cc.update(schedule="constant", tau0=1.0, eval_selection="soft",
              straight_through=False, hard_after_step=-1)
  elif variant != "gumbel":
    raise ValueError(f"config.variants has unknown {variant!r}; valid: "
                     "vanilla, soft, gumbel")
  return m


@nnx.jit
def _predict(model, ids, knockout):
  """argmax predictions, and for controllers the executed op per layer."""
  if isinstance(model, ctl.ControlledDecoder):
    out = model.forward(ids, knockout=knockout, output_trace=True)
    ops = jnp.stack([t["op"] for t in out.trace], 0)
    probs = jnp.stack([t["probs"] for t in out.trace], 0)
    ent = -jnp.sum(probs * jnp.log(jnp.clip(probs, 1e-9)), -1)
    return jnp.argmax(out.logits, -1), ops, ent
  logits = model(ids)
  return jnp.argmax(logits, -1), None, None


def evaluate(model, arrays: dict[str, np.ndarray], batch_size: int, *,
             knockout: bool = False) -> dict[str, float]:
  """Exact accuracy, trace alignment and selector entropy on `arrays`."""
  acc, hits, total, ents = [], 0.0, 0.0, []
  n = len(arrays["inputs"])
  for i in range(0, n, batch_size):
    sl = slice(i, i + batch_size)
    pred, ops, ent = _predict(model, jnp.asarray(arrays["inputs"][sl]),
                              jnp.asarray(knockout))
    acc.append(alg.exact_match(np.asarray(pred), arrays["targets"][sl],
                               arrays["loss_mask"][sl]))
    if ops is not None:
      tgt = arrays["op_targets"][sl]
      valid = tgt >= 0
      hits += float(((np.asarray(ops) == tgt[None]) & valid[None]).sum())
      total += float(valid.sum()) * ops.shape[0]
      ents.append(float((np.asarray(ent) * valid[None]).sum() /
                        max(valid.sum() * ent.shape[0], 1)))
  out = {"acc": float(np.concatenate(acc).mean())}
  if total:
    out["align"] = hits / total
    out["entropy"] = float(np.mean(ents))
  return out


def _vocab(config) -> int:
  return alg.vocab_size(int(config.get("num_values", alg.NUM_VALUES)))


def flop_rows(config) -> list[dict]:
  """Counted / measured / formula overhead for each p of flops_every_p."""
  if not config.flops_every_p:
    return []
  base = model_registry.get_spec(model_config(config, "vanilla"),
                                 vocab_size=_vocab(config)).config
  ids = jnp.zeros((1, int(config.flops_seq_len)), jnp.int32)
  plain = decoder_lib.Decoder(base, rngs=nnx.Rngs(0))
  plain_flops = ctl.compiled_flops(lambda i: plain(i), ids)
  rows = []
  for p in config.flops_every_p:
    if p > base.num_layers:
      continue
    m = model_config(config, "gumbel")
    m.controller.every_p = int(p)
    spec = model_registry.get_spec(m, vocab_size=_vocab(config))
    ccfg = ctl.controller_config(m.controller)
    model = spec.factory()
    measured = ctl.compiled_flops(
        lambda i, model=model: model(i, selection="hard"), ids) / plain_flops
    rows.append({
        "p": int(p), "measured": measured - 1.0,
        "counted": ctl.flop_overhead(base, ccfg, int(config.flops_seq_len)),
        "formula": ctl.paper_overhead(int(p), ccfg.state_dim, base.dim)})
  return rows
