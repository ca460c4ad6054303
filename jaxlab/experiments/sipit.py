"""Experiment "sipit": inversion and collision tests on small decoders (Q.6).

Per seed: a decoder from `config.model` (random init) and a copy trained by
`runner.train_lm` on a bigram-chain text over V. For both:
  * SipIt (gradient policy) and BruteForce (random policy) invert
    `sipit.num_prompts` random prompts of `sipit.prompt_len` tokens from
    the states of every layer (targets through the verification path):
    exact-token accuracy and median proposals per token (vs |V|/2);
  * HardPrompts on the last layer (`sipit.hard_prompts_prompts`);
  * the collision test: minimum pairwise L2 distance of last-token states
    per layer over `collision.num_prompts` random prompts, chunked;
  * the exhaustive test: every token appended to the closest prompts;
  * controls: tied embedding rows (collision + SipIt cannot tell the two
    tokens apart), b-bit quantised states (collisions; SipIt verification).
Writes `results.json` (tables per seed, merged over seeds by `report`) and
`proposals.png`.
"""

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.analysis import injectivity as inj
from jaxlab.analysis import sipit
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.train import runner
from jaxlab.experiments import results as results_lib


def bigram_text(vocab: int, num_seqs: int, seq_len: int, follow: float,
                seed: int) -> dict[str, np.ndarray]:
  """LM arrays of a noisy bigram chain over all of V (every row trained)."""
  rng = np.random.default_rng(10_000 + seed)
  nxt = rng.permutation(vocab)
  seqs = np.zeros((num_seqs, seq_len + 1), np.int32)
  seqs[:, 0] = rng.integers(vocab, size=num_seqs)
  for t in range(1, seq_len + 1):
    seqs[:, t] = np.where(rng.random(num_seqs) < follow,
                          nxt[seqs[:, t - 1]],
                          rng.integers(vocab, size=num_seqs))
  return {"inputs": seqs[:, :-1], "targets": seqs[:, 1:],
          "loss_mask": np.ones((num_seqs, seq_len), np.float32)}


def _sipit_config(c, seed: int) -> sipit.SipItConfig:
  return sipit.SipItConfig(
      atol=float(c.atol), rtol=float(c.rtol), step_size=float(c.step_size),
      clip_norm=float(c.clip_norm), project_every=int(c.project_every),
      loss=c.loss, candidates_per_step=int(c.candidates_per_step),
      verify_batch=int(c.verify_batch), seed=seed)


def _invert_all(model, ids, layers, config, seed, log) -> dict[str, Any]:
  c = config.sipit
  states = sipit.layer_states(model, ids)
  tol = float(c.tol) or None
  out = {}
  for policy in c.policies:
    for layer in layers:
      res = sipit.invert(model, states[layer], layer=layer, policy=policy,
                         tol=tol, config=_sipit_config(c, seed))
      st = res.stats()
      out[f"{policy}/{layer}"] = {
          "accuracy": float(np.mean(res.ids == ids)),
          "prompt_exact": float(np.mean(np.all(res.ids == ids, axis=1))),
          "median_proposals": st["median_proposals"],
          "mean_proposals": st["mean_proposals"],
          "verified": st["verified_fraction"],
          "seconds_per_prompt": st["seconds"] / len(ids),
          "proposals": res.proposals.reshape(-1).tolist()}
      log(f"  {policy:8s} layer {layer}: acc {out[f'{policy}/{layer}']['accuracy']:.3f} "
          f"median proposals {st['median_proposals']:.1f}")
  last = max(layers)
  n_hp = int(c.hard_prompts_prompts)
  if n_hp:
    res = sipit.hard_prompts(model, states[last][:n_hp], layer=last,
                             steps=int(c.hard_prompts_steps) or None,
                             lr=float(c.hard_prompts_lr), seed=seed)
    out[f"hard_prompts/{last}"] = {
        "accuracy": float(np.mean(res.ids == ids[:n_hp])),
        "prompt_exact": float(np.mean(np.all(res.ids == ids[:n_hp], axis=1))),
        "seconds_per_prompt": float(np.mean(res.seconds)),
        "steps": int(res.proposals[0, 0]) * ids.shape[1]}
    log(f"  hard_prompts layer {last}: acc {out[f'hard_prompts/{last}']['accuracy']:.3f}")
  return out


def _collisions(model, prompts, config) -> dict[str, Any]:
  c = config.collision
  states = inj.last_token_states(model, prompts)
  stats = inj.per_layer_stats(states, chunk=int(c.chunk))
  out = {"min": [s.min for s in stats], "mean": [s.mean for s in stats],
         "collisions": [s.collisions for s in stats]}
  # The closest prompts at the last layer, every token appended.
  idx = inj.closest_prompts(stats[-1], int(c.exhaustive_prompts))
  exh = inj.exhaustive_continuation_test(model, prompts, idx,
                                         chunk=int(c.chunk))
  out["exhaustive_min"] = [s.min for s in exh]
  out["exhaustive_collisions"] = [s.collisions for s in exh]
  out["exhaustive_pairs"] = exh[0].num_pairs
  for bits in c.quant_bits:
    q = inj.quantize_states(states, int(bits), per=c.quant_per)
    qs = [inj.pair_stats(x, chunk=int(c.chunk)) for x in q]
    out[f"quant{bits}_min"] = [s.min for s in qs]
    out[f"quant{bits}_collisions"] = [s.collisions for s in qs]
  return out


def _tied_control(model, config, seed) -> dict[str, Any]:
  """Tie row dst := row src; prompts holding dst collide with their src
  twins and SipIt returns src or dst (whichever it proposes first)."""
  c = config.collision
  src, dst = (int(x) for x in c.tie)
  tied = inj.tie_embedding_rows(model, src, dst)
  layers = int(model.cfg.num_layers)
  rng = np.random.default_rng(500 + seed)
  n, t = int(c.control_prompts), int(config.sipit.prompt_len)
  ids = rng.integers(model.cfg.vocab_size, size=(n, t)).astype(np.int32)
  ids[:, t // 2] = dst
  twin = ids.copy()
  twin[:, t // 2] = src
  both = sipit.layer_states(tied, np.concatenate([ids, twin]))
  dist = np.linalg.norm(both[layers][:n, -1] - both[layers][n:, -1], axis=-1)
  res = sipit.invert(tied, both[layers][:n], layer=layers,
                     config=_sipit_config(config.sipit, seed))
  at = res.ids[:, t // 2]
  return {"twin_distance_max": float(dist.max()),
          "recovered_dst": float(np.mean(at == dst)),
          "recovered_src": float(np.mean(at == src)),
          "accuracy_elsewhere": float(np.mean(np.delete(res.ids == ids,
                                                        t // 2, axis=1)))}


def _quant_inversion(model, ids, config, seed, bits) -> dict[str, float]:
  """SipIt on b-bit quantised last-layer states (allclose acceptance)."""
  layer = int(model.cfg.num_layers)
  h = sipit.layer_states(model, ids)[layer]
  q = inj.quantize_states(h, int(bits), per=config.collision.quant_per)
  res = sipit.invert(model, q, layer=layer,
                     config=_sipit_config(config.sipit, seed))
  return {"verified": float(np.mean(res.verified)),
          "accuracy": float(np.mean(res.ids == ids))}


def plot_proposals(per_seed, layers, vocab, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 3.6))
  for model_kind, ls in (("random-init", "--"), ("trained", "-")):
    for policy, color in (("gradient", "C0"), ("random", "C1")):
      med = [[rec[model_kind]["inversion"][f"{policy}/{l}"]["median_proposals"]
              for l in layers] for rec in per_seed]
      if not med or not med[0]:
        continue
      m = np.mean(med, axis=0)
      s = np.std(med, axis=0, ddof=1) if len(med) > 1 else 0 * m
      name = "SipIt (gradient)" if policy == "gradient" else "BruteForce"
      ax.errorbar(layers, m, yerr=s, color=color, linestyle=ls, marker="o",
                  capsize=3, label=f"{name}, {model_kind}")
  ax.axhline(vocab / 2, color="gray", linestyle=":", label="|V|/2")
  ax.set_yscale("log")
  ax.set_xlabel("layer (0 = embedding output)")
  ax.set_ylabel("median proposals per token")
  ax.set_xticks(list(layers))
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def results_tables(per_seed, layers, vocab, config):
  col = results_lib.Column
  lcols = [col(f"l{l}", f"layer {l}", 1) for l in layers]
  acc = results_lib.Table(
      "inversion", "exact-token accuracy (%) of the recovered prompts",
      [col(f"l{l}", f"layer {l}", 1, 100) for l in layers],
      row_label="model, method")
  props = results_lib.Table(
      "proposals", f"median proposals per token (|V| = {vocab}, |V|/2 = "
      f"{vocab // 2})", lcols, row_label="model, method")
  coll = results_lib.Table(
      "collisions", "minimum pairwise L2 distance of last-token states "
      "(collision threshold 1e-6)",
      [col(f"l{l}", f"layer {l}", 4) for l in layers] +
      [col("pairs", "pairs per layer", 0, spread=False)],
      row_label="model, test")
  ctrl = results_lib.Table(
      "controls", "negative controls at the last layer",
      [col("value", "value", 3)], row_label="control")
  names = {"gradient": "SipIt (gradient)", "random": "BruteForce (random)",
           "hard_prompts": "HardPrompts"}
  last = max(layers)
  for rec in per_seed:
    seed = rec["seed"]
    for kind in ("random-init", "trained"):
      r = rec[kind]
      for key, v in r["inversion"].items():
        policy, layer = key.split("/")
        row = f"{kind}, {names[policy]}"
        acc.add(row, f"l{layer}", seed, v["accuracy"])
        if "median_proposals" in v:
          props.add(row, f"l{layer}", seed, v["median_proposals"])
      cr = r["collisions"]
      n = rec["num_collision_prompts"]
      rows = [(f"{kind}, {n} prompts", cr["min"], n * (n - 1) // 2),
              (f"{kind}, exhaustive (closest x V)", cr["exhaustive_min"],
               cr["exhaustive_pairs"])]
      for bits in config.collision.quant_bits:
        rows.append((f"{kind}, states quantised to {bits} bits",
                     cr[f"quant{bits}_min"], n * (n - 1) // 2))
      for label, mins, pairs in rows:
        coll.add_seed(label, seed, {f"l{l}": mins[l] for l in layers})
        coll.add(label, "pairs", seed, pairs)
      if kind == "trained":
        t = r["tied"]
        ctrl.add("tied rows: L2 distance of twin prompts", "value", seed,
                 t["twin_distance_max"])
        ctrl.add("tied rows: SipIt returns the tied-in token (%)", "value",
                 seed, 100 * t["recovered_src"])
        ctrl.add("tied rows: SipIt returns the true token (%)", "value",
                 seed, 100 * t["recovered_dst"])
        for bits, q in r["quant_inversion"].items():
          ctrl.add(f"{bits}-bit states: positions that verify (%)", "value",
                   seed, 100 * q["verified"])
          ctrl.add(f"{bits}-bit states: exact tokens (nearest kept) (%)",
                   "value", seed, 100 * q["accuracy"])
  comps = []
  for kind in ("random-init", "trained"):
    comps.append(results_lib.Comparison(
        "proposals", f"l{last}", f"{kind}, {names['gradient']}",
        f"{kind}, {names['random']}"))
  return [acc, props, coll, ctrl], comps


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  log = lambda msg: print(f"[sipit {time.time() - t0:6.0f}s] {msg}",  # pylint: disable=g-long-lambda
                          flush=True)
  mcfg = model_registry.decoder_config(config.model)
  vocab = int(mcfg.vocab_size)
  layers = tuple(int(l) for l in config.sipit.layers) or tuple(
      range(mcfg.num_layers + 1))
  per_seed = []
  for seed in config.seeds:
    seed = int(seed)
    base = decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))
    trained = nnx.clone(base)
    tx = config.text
    logs = runner.train_lm(
        trained, bigram_text(vocab, int(tx.num_seqs), int(tx.seq_len),
                             float(tx.follow), seed),
        seed=seed, log_every=max(1, int(config.pretrain.steps) // 4),
        **dict(config.pretrain))
    # The runner leaves the weights on its one-device mesh; placing them
    # like the random-init copy's lets both share every compiled function.
    nnx.update(trained, jax.tree.map(lambda x: jnp.asarray(np.asarray(x)),
                                     nnx.state(trained)))
    log(f"seed {seed}: trained, loss {logs[0]['loss']:.3f} -> "
        f"{logs[-1]['loss']:.3f}")
    rng = np.random.default_rng(seed)
    ids = rng.integers(vocab, size=(int(config.sipit.num_prompts),
                                    int(config.sipit.prompt_len))
                       ).astype(np.int32)
    c = config.collision
    prompts = inj.random_prompts(int(c.num_prompts), vocab_size=vocab,
                                 min_len=int(c.min_len),
                                 max_len=int(c.max_len), seed=seed)
    rec = {"seed": seed, "train_loss": [l["loss"] for l in logs],
           "num_collision_prompts": len(prompts)}
    for kind, model in (("random-init", base), ("trained", trained)):
      log(f"seed {seed}, {kind}: inversion")
      r = {"inversion": _invert_all(model, ids, layers, config, seed, log)}
      log(f"seed {seed}, {kind}: collisions")
      r["collisions"] = _collisions(model, prompts, config)
      log(f"  min distance per layer {np.round(r['collisions']['min'], 4)}")
      if kind == "trained":
        r["tied"] = _tied_control(model, config, seed)
        r["quant_inversion"] = {
            int(b): _quant_inversion(model, ids[:int(c.control_prompts)],
                                     config, seed, b)
            for b in c.quant_bits}
        log(f"  controls: {r['tied']} {r['quant_inversion']}")
      rec[kind] = r
    per_seed.append(rec)
    with open(os.path.join(workdir, "per_seed.json"), "w") as fh:
      json.dump(results_lib.to_jsonable(per_seed), fh)
  plot = plot_proposals(per_seed, layers, vocab,
                        os.path.join(workdir, "proposals.png"))
  tables, comps = results_tables(per_seed, layers, vocab, config)
  out = {"per_seed": per_seed, "layers": list(layers), "vocab_size": vocab,
         "plots": [plot]}
  summary = {}
  for kind in ("random-init", "trained"):
    for policy in config.sipit.policies:
      summary[f"{kind}/{policy}"] = {
          "accuracy": float(np.mean([
              rec[kind]["inversion"][f"{policy}/{l}"]["accuracy"]
              for rec in per_seed for l in layers])),
          "median_proposals": float(np.median(np.concatenate([
              rec[kind]["inversion"][f"{policy}/{l}"]["proposals"]
              for rec in per_seed for l in layers])))}
  out["summary"] = summary
  results_lib.write(workdir, "sipit", tables=tables, comparisons=comps,
                    extra={"summary": summary, "per_seed": [
                        {k: v for k, v in rec.items()} for rec in per_seed]},
                    config=config, start_time=t0)
  return out
