"""Experiment "sipit": inversion and collision tests (paper Q, spec Q.6).

Toy presets: per seed a random-init decoder and a copy trained on a bigram
text; `config.init_from` (the `smollm2` and `paper` presets): a real
checkpoint and real text: the rows of `config.data` (`data.source` "hf" /
"grain" / "tfds" with `data.path`: any text dataset, column
`data.text_key`, read by `jaxlab.data.pipeline.read_split`, at most
`data.max_rows` and `sipit.text_rows` rows; counted in results.json's
`data.rows`), else the config's `sentences`. For each:
`inversion_report` (SipIt / BruteForce / HardPrompts per layer),
`injectivity.collision_report` and the tied-row and quantised-state
controls; with a real checkpoint also the noise sweep with the
nearest-candidate rule (`injectivity.noise_sweep`, config `noise`) and the
prompt-length curve of the collision test (`injectivity.length_curve`,
config `length_curve`). Writes `results.json` and `proposals.png`.
"""

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.analysis import figures
from jaxlab.analysis import injectivity as inj
from jaxlab.analysis import sipit
from jaxlab.data import pipeline
from jaxlab.experiments import log as log_lib
from jaxlab.experiments import results as results_lib
from jaxlab.io import pretrained
from jaxlab.models import decoder
from jaxlab.models import early_exit
from jaxlab.models import registry as model_registry
from jaxlab.train import runner

_ckw = lambda c: dict(chunk=int(c.chunk), quant_per=c.quant_per,  # pylint: disable=g-long-lambda
                      exhaustive_prompts=int(c.exhaustive_prompts),
                      quant_bits=tuple(int(b) for b in c.quant_bits))
NAMES = {"gradient": "SipIt (gradient)", "random": "BruteForce (random)",
         "hard_prompts": "HardPrompts"}



# -- the report: inversion per policy and layer, the proposals plot ------------


def inversion_report(model, ids, layers, *, policies=("gradient",),
                     config: sipit.SipItConfig | None = None,
                     tol: float | None = None, hard_prompts_prompts: int = 0,
                     hard_prompts_steps: int | None = None,
                     hard_prompts_lr: float = 0.1, states=None,
                     time_limit_s: float | None = None,
                     log=None, prefix_len: int = 0) -> dict[str, Any]:
  """Inverts the prompts `ids [B, T]` from the states of each layer with
  each policy (and HardPrompts at the last of `layers` on the first
  `hard_prompts_prompts` prompts): {"policy/layer": accuracy, exact-prompt
  rate, median / mean proposals, verified fraction, seconds per prompt,
  proposals, the margin nearest_rejected / radius}. `prefix_len` > 0:
  the first `prefix_len` tokens of each prompt are a known prefix
  (`invert(prefix_ids=...)`); accuracy, proposals and margins count only
  the positions after it."""
  ids = np.asarray(ids, np.int32)
  states = sipit.layer_states(model, ids) if states is None else states
  p = int(prefix_len)
  out = {}
  for policy in policies:
    for layer in layers:
      res = sipit.invert(model, states[layer], layer=layer, policy=policy, tol=tol,
                   config=config, time_limit_s=time_limit_s,
                   prefix_ids=ids[:, :p] if p else None)
      st = res.stats()
      hit = res.ids[:, p:] == ids[:, p:]
      rec = {"accuracy": float(np.mean(hit)),
             "prompt_exact": float(np.mean(np.all(hit, axis=1))),
             "median_proposals": st["median_proposals"],
             "mean_proposals": st["mean_proposals"],
             "verified": st["verified_fraction"],
             "seconds_per_prompt": st["seconds"] / len(ids),
             "proposals": res.proposals[:, p:].reshape(-1).tolist()}
      if p:
        rec["prefix_len"] = p
      if res.timed_out:
        rec["timed_out"] = True
      if res.radius is not None and not np.all(np.isnan(res.radius)):
        rec["min_margin"] = float(np.min(res.nearest_rejected[:, p:] /
                                         res.radius[:, p:]))
      out[f"{policy}/{layer}"] = rec
      if log:
        log(f"  {policy:8s} layer {layer}: acc {rec['accuracy']:.3f} "
            f"median proposals {st['median_proposals']:.1f}")
  last = max(layers)
  if hard_prompts_prompts:
    n_hp = int(hard_prompts_prompts)
    res = sipit.hard_prompts(model, states[last][:n_hp], layer=last,
                       steps=hard_prompts_steps, lr=hard_prompts_lr,
                       seed=config.seed if config else 0)
    out[f"hard_prompts/{last}"] = {
        "accuracy": float(np.mean(res.ids == ids[:n_hp])),
        "prompt_exact": float(np.mean(np.all(res.ids == ids[:n_hp], axis=1))),
        "seconds_per_prompt": float(np.mean(res.seconds)),
        "steps": int(res.proposals[0, 0]) * ids.shape[1]}
    if log:
      log(f"  hard_prompts layer {last}: acc "
          f"{out[f'hard_prompts/{last}']['accuracy']:.3f}")
  return out


def plot_proposals(per_seed, layers, vocab, path, *,
                   kinds=("random-init", "trained"),
                   policies=("gradient", "random")):
  """Median proposals per token per layer (mean and std over seeds) of
  `per_seed[i][kind]["inversion"]["policy/layer"]`, log scale, |V|/2 line."""
  with figures.figure(path, figsize=(6, 3.6)) as (_, ax):
    _plot_proposals(ax, per_seed, layers, vocab, kinds, policies)
  return path


def _plot_proposals(ax, per_seed, layers, vocab, kinds, policies):
  for model_kind, ls in zip(kinds, ("--", "-")):
    for policy, color in zip(policies, ("C0", "C1")):
      med = [[rec[model_kind]["inversion"][f"{policy}/{l}"]["median_proposals"]
              for l in layers] for rec in per_seed
             if f"{policy}/{layers[0]}" in rec[model_kind]["inversion"]]
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


def inversion_summary(per_seed, kinds, policies, layers) -> dict[str, Any]:
  """{"kind/policy": mean accuracy and median proposals over seeds and
  layers} of `per_seed[i][kind]["inversion"]["policy/layer"]` records."""
  return {f"{k}/{p}": {
      "accuracy": float(np.mean([rec[k]["inversion"][f"{p}/{l}"]["accuracy"]
                                 for rec in per_seed for l in layers])),
      "median_proposals": float(np.median(np.concatenate([
          rec[k]["inversion"][f"{p}/{l}"]["proposals"]
          for rec in per_seed for l in layers])))}
          for k in kinds for p in policies}


def _save(workdir, per_seed):
  with open(os.path.join(workdir, "per_seed.json"), "w") as fh:
    json.dump(results_lib.to_jsonable(per_seed), fh)


def _tables(name, vocab, layers):
  col = results_lib.Column
  return (
      results_lib.Table(
          "inversion", "exact-token accuracy (%) of the recovered prompts",
          [col(f"l{l}", f"layer {l}", 1, 100) for l in layers],
          row_label="model, method"),
      results_lib.Table(
          "proposals", f"median proposals per token (|V| = {vocab}, |V|/2 = "
          f"{vocab // 2})", [col(f"l{l}", f"layer {l}", 1) for l in layers],
          row_label="model, method"),
      results_lib.Table(
          "collisions", "minimum pairwise L2 distance of last-token states "
          "(collision threshold 1e-6)",
          [col(f"l{l}", f"layer {l}", 4) for l in layers] +
          [col("pairs", "pairs per layer", 0, spread=False)],
          row_label="model, test"),
      results_lib.Table("controls", "negative controls at the last layer"
                        if name == "sipit" else "negative controls",
                        [col("value", "value", 3)], row_label="control"))


def _real_tables(per_seed, layers) -> list:
  """The noise sweep and the length curve of a real checkpoint's seeds."""
  col, out = results_lib.Column, []
  noisy = [r for r in per_seed if "noise" in r["pretrained"]]
  if noisy:
    nz = noisy[0]["pretrained"]["noise"]
    t = results_lib.Table(
        "noise", f"nearest-candidate inversion at layer {nz['layer']} of "
        "states with noise of norm c * margin / 2 (exact below c = 1)",
        [col("accuracy", "exact tokens (%)", 1, 100),
         col("prompt_exact", "exact prompts (%)", 1, 100)],
        row_label="noise scale c")
    for r in noisy:
      z = r["pretrained"]["noise"]
      for c, a, p in zip(z["scales"], z["accuracy"], z["prompt_exact"]):
        t.add_seed(f"c={c:g}", r["seed"], {"accuracy": a, "prompt_exact": p})
    out.append(t)
  curved = [r for r in per_seed if "length_curve" in r["pretrained"]]
  if curved:
    t = results_lib.Table(
        "length_curve", "minimum pairwise L2 distance of last-token states "
        "vs prompt length", [col(f"l{l}", f"layer {l}", 4) for l in layers],
        row_label="prompt length")
    for r in curved:
      lc = r["pretrained"]["length_curve"]
      for n, mins in zip(lc["lengths"], lc["min"]):
        t.add_seed(f"{n} tokens", r["seed"],
                   {f"l{l}": mins[l] for l in layers if l < len(mins)})
    out.append(t)
  return out


def _add_seed(tables, rec, kinds, layers, quant_bits):
  acc, props, coll, ctrl = tables
  seed = rec["seed"]
  for kind in kinds:
    r = rec[kind]
    for key, v in r["inversion"].items():
      policy, layer = key.split("/")
      acc.add(f"{kind}, {NAMES[policy]}", f"l{layer}", seed, v["accuracy"])
      if "median_proposals" in v:
        props.add(f"{kind}, {NAMES[policy]}", f"l{layer}", seed,
                  v["median_proposals"])
    cr, n = r["collisions"], rec["num_collision_prompts"]
    rows = [(f"{kind}, {n} prompts", cr["min"], n * (n - 1) // 2)]
    if "exhaustive_min" in cr:
      rows.append((f"{kind}, exhaustive (closest x "
                   f"{rec.get('continuations', 'V')})",
                   cr["exhaustive_min"], cr["exhaustive_pairs"]))
    rows += [(f"{kind}, states quantised to {b} bits", cr[f"quant{b}_min"],
              n * (n - 1) // 2) for b in quant_bits]
    for label, mins, pairs in rows:
      coll.add_seed(label, seed, {f"l{l}": mins[l] for l in layers})
      coll.add(label, "pairs", seed, pairs)
    if "tied" in r:
      for label, val in inj.control_rows(r):
        ctrl.add(label, "value", seed, val)


REAL_SOURCES = ("hf", "grain", "tfds")


def text_streams(config, tok) -> tuple[list[list[int]], dict[str, int] | None]:
  """Token streams of the real text: one per row of `config.data` when it
  names a dataset (`data.source` in `REAL_SOURCES` and `data.path`; the
  `data.text_key` column, `data.max_rows` rows; no special tokens), else
  one per `config.sentences`. Returns (streams, {split: rows read} or
  None)."""
  data = config.get("data")
  if (data is not None and data.get("source", "") in REAL_SOURCES
      and data.get("path", "")):
    # The rows tokenised: data.max_rows and sipit.text_rows (the text the
    # run needs; 0 = no cap), whichever is smaller.
    caps = [int(x) for x in (data.get("max_rows", 0) or 0,
                             config.sipit.get("text_rows", 0) or 0) if int(x)]
    rows = pipeline.read_split(data, max_rows=min(caps) if caps else 0)
    key = data.get("text_key", "text") or "text"
    if len(rows) and key not in rows[0]:
      raise ValueError(f"data.text_key={key!r} is not a column of "
                       f"data.path={data.path!r} (columns: "
                       f"{', '.join(sorted(rows[0]))}); set data.text_key")
    streams = [list(tok.encode(rows[i][key])) for i in range(len(rows))]
    return streams, {data.get("split", "train") or "train": len(rows)}
  sentences = config.get("sentences")
  if not sentences:
    raise ValueError("sipit with init_from needs text: set data.source=hf "
                     "and data.path (a text dataset) or config.sentences")
  return [list(tok.encode(s)) for s in sentences], None


def _layers(c, model) -> tuple[int, ...]:
  """`sipit.layers`, () = every layer 0..L of the model."""
  return (tuple(int(l) for l in c.layers)
          or tuple(range(sipit.num_layers(model) + 1)))


def _layer(value, layers) -> int:
  """A layer field: -1 = the last of `layers`."""
  return max(layers) if int(value) < 0 else int(value)


def _run_pretrained(config, workdir, log) -> tuple[list, tuple, int, Any]:
  """Per seed: a sample of the text's streams (`prompt_len` tokens)
  inverted at each layer by the model truncated to it; collisions over
  distinct windows of the text's tokens; the noise sweep and the length
  curve when configured."""
  model, _ = pretrained.load(config.init_from, cache=True)
  vocab = int(model.cfg.vocab_size)
  tok = pretrained.tokenizer(config.init_from)
  c, cc = config.sipit, config.collision
  layers = _layers(c, model)
  streams, rows = text_streams(config, tok)
  plen = int(c.prompt_len)
  eligible = [s for s in streams if len(s) >= plen]
  if not eligible:
    raise ValueError(f"no text row has sipit.prompt_len={plen} tokens "
                     f"(longest: {max((len(s) for s in streams), default=0)})"
                     "; lower sipit.prompt_len or read longer rows")
  per_seed = []
  for seed in (int(s) for s in config.seeds):
    rng = np.random.default_rng(seed)
    # Seed s inverts the s-th block of num_prompts streams of one fixed
    # shuffle, so seeds 0..len/num_prompts-1 take different text.
    n = int(c.num_prompts)
    order = np.random.default_rng(0).permutation(len(eligible))
    pick = np.take(order, np.arange(seed * n, seed * n + n), mode="wrap")
    ids = np.array([eligible[i][:plen] for i in pick], np.int32)
    # known_bos: BOS + the text's tokens, the BOS given (prefix_len 1).
    bos = bool(c.get("known_bos", False))
    full = (np.concatenate([np.full((len(ids), 1), tok.bos_id, np.int32),
                            ids], axis=1) if bos else ids)
    states = sipit.layer_states(model, full)
    inv = {}
    for layer in layers:
      inv.update(inversion_report(
          early_exit.first_layers(model, layer, share=True), full, (layer,),
          policies=tuple(c.policies), config=sipit.config_from(c, seed),
          states=states, time_limit_s=float(c.time_limit_s) or None, log=log,
          prefix_len=int(bos)))
    prompts = inj.text_window_prompts(streams, int(cc.num_prompts),
                                      min_len=int(cc.min_len),
                                      max_len=int(cc.max_len), seed=seed)
    n_cont = int(cc.get("continuations", 0) or 0)
    conts = (rng.choice(vocab, min(n_cont, vocab), replace=False)
             if n_cont else None)
    r = {"inversion": inv, "collisions": inj.collision_report(
        model, prompts, continuations=conts, **_ckw(cc))}
    control_layer = _layer(cc.get("control_layer", -1), layers)
    r.update(inj.control_report(
        early_exit.first_layers(model, control_layer, share=True),
        ids[:1],
        tie=cc.tie, quant_bits=cc.quant_bits, quant_per=cc.quant_per,
        seed=seed, layer=control_layer, tie_ids=ids[:1],
        config=sipit.config_from(c, seed),
        time_limit_s=float(cc.get("time_limit_s", 0.0)) or None))
    noise = config.get("noise")
    if noise is not None and noise.scales:
      nl = _layer(noise.layer, layers)
      k = min(int(noise.num_prompts), len(full))
      r["noise"] = dict(layer=nl, **inj.noise_sweep(
          early_exit.first_layers(model, nl, share=True), full[:k],
          layer=nl, scales=tuple(float(x) for x in noise.scales),
          prefix_len=int(bos), seed=seed))
      log(f"seed {seed}: noise sweep layer {nl}: {r['noise']['accuracy']}")
    curve = config.get("length_curve")
    if curve is not None and curve.lengths:
      r["length_curve"] = inj.length_curve(
          model, streams, tuple(int(x) for x in curve.lengths),
          num=int(curve.num_prompts), seed=seed, chunk=int(cc.chunk))
    log(f"seed {seed}: {r['collisions']['min']} {r['tied']}")
    # Which streams were inverted: indices of the eligible data rows (or
    # of config.sentences).
    per_seed.append({"seed": seed,
                     ("rows" if rows else "sentences"): [int(i) for i in pick],
                     "num_collision_prompts": len(prompts),
                     "continuations": len(conts) if n_cont else vocab,
                     "pretrained": r})
    _save(workdir, per_seed)
  return per_seed, layers, vocab, rows


def _run_toy(config, workdir, log) -> tuple[list, tuple, int]:
  mcfg = model_registry.decoder_config(config.model)
  vocab, c, cc = mcfg.vocab_size, config.sipit, config.collision
  layers = tuple(int(l) for l in c.layers) or tuple(range(mcfg.num_layers + 1))
  per_seed = []
  for seed in (int(s) for s in config.seeds):
    base = decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))
    trained = nnx.clone(base)
    logs = runner.train_lm(
        trained, inj.bigram_text(vocab, seed=seed, **config.text),
        seed=seed, log_every=max(1, int(config.pretrain.steps) // 4),
        **dict(config.pretrain))
    # The runner leaves the weights on its one-device mesh; placing them
    # like the random-init copy's lets both share every compiled function.
    nnx.update(trained, jax.tree.map(lambda x: jnp.asarray(np.asarray(x)),
                                     nnx.state(trained)))
    log(f"seed {seed}: loss {logs[0]['loss']:.3f} -> {logs[-1]['loss']:.3f}")
    ids = np.random.default_rng(seed).integers(
        vocab, size=(int(c.num_prompts), int(c.prompt_len))).astype(np.int32)
    prompts = inj.random_prompts(int(cc.num_prompts), vocab_size=vocab,
                                 min_len=int(cc.min_len),
                                 max_len=int(cc.max_len), seed=seed)
    rec = {"seed": seed, "train_loss": [l["loss"] for l in logs],
           "num_collision_prompts": len(prompts)}
    scfg = sipit.config_from(c, seed)
    for kind, model in (("random-init", base), ("trained", trained)):
      log(f"seed {seed}, {kind}: inversion")
      r = {"inversion": inversion_report(
          model, ids, layers, policies=tuple(c.policies), config=scfg,
          tol=float(c.tol) or None,
          hard_prompts_prompts=int(c.hard_prompts_prompts),
          hard_prompts_steps=int(c.hard_prompts_steps) or None,
          hard_prompts_lr=float(c.hard_prompts_lr), log=log)}
      r["collisions"] = inj.collision_report(model, prompts, **_ckw(cc))
      log(f"  min distance per layer {np.round(r['collisions']['min'], 4)}")
      if kind == "trained":
        r.update(inj.control_report(
            model, ids, tie=cc.tie, quant_bits=cc.quant_bits, seed=seed,
            quant_per=cc.quant_per, num_prompts=int(cc.control_prompts),
            config=scfg))
        log(f"  controls: {r['tied']} {r['quant_inversion']}")
      rec[kind] = r
    per_seed.append(rec)
    _save(workdir, per_seed)
  return per_seed, layers, vocab, None


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  log = log_lib.logger("sipit")
  real = bool(config.get("init_from"))
  per_seed, layers, vocab, rows = (_run_pretrained if real else _run_toy)(
      config, workdir, log)
  kinds = ("pretrained",) if real else ("random-init", "trained")
  tables = _tables(name := config.get("results_name", "sipit"), vocab, layers)
  for rec in per_seed:
    _add_seed(tables, rec, kinds, layers, config.collision.quant_bits)
  tables = list(tables) + _real_tables(per_seed, layers) if real else tables
  pols = tuple(config.sipit.policies)
  comps = [results_lib.Comparison(
      "proposals", f"l{max(layers)}", f"{k}, {NAMES['gradient']}",
      f"{k}, {NAMES['random']}") for k in kinds if "random" in pols]
  plot = plot_proposals(per_seed, layers, vocab,
                              os.path.join(workdir, "proposals.png"),
                              kinds=kinds, policies=pols)
  summary = inversion_summary(per_seed, kinds, pols, layers)
  results_lib.write(workdir, name, tables=list(tables), comparisons=comps,
                    extra={"summary": summary, "per_seed": per_seed},
                    config=config, start_time=t0,
                    data=(results_lib.data_provenance(config, rows=rows)
                          if rows is not None else None))
  return {"per_seed": per_seed, "layers": list(layers), "vocab_size": vocab,
          "plots": [plot], "summary": summary}
