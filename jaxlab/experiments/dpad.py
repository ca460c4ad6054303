"""DPad miniature (paper L): LLaDA training + Fast-dLLM / DPad decoding.

Per seed: a bidirectional decoder is trained with the loss registry's
`llada_sft` through the generic step runner on templated arithmetic chains
(`jaxlab.data.synthetic.arith_chains`), saved as `seed{N}/params.npz`
(reused by a run whose `TRAIN_FIELDS` and seed are the same), and decoded
on held-out prompts by `jaxlab.decoding.diffusion.generate` under every
variant of `config.decode.variants` (see `jaxlab/configs/dpad.py`) at every
`config.decode.gen_lens`. Per (gen_len, variant): exact match, latency
(decode seconds per call, compilation excluded), NFE, real tokens processed,
model FLOPs, and agreement with vanilla's tokens.

`python -m jaxlab.experiments.bench dpad` measures the same on one trained model
(including gen_len 512) and prints JSON.

The real run (`config.data.source == "hf"`, the `paper` preset): the
diffusion LM of `config.init_from` (LLaDA / Dream, `jaxlab.io.pretrained
.load`; its mask and EOS ids from its config.json,
`jaxlab.io.hf.diffusion_tokens`, Dream reading token i from the logits at
i - 1) decodes GSM8K as released (`openai/gsm8k`, subset `main`: `question`,
`answer` ending in `#### n`; `pipeline.read_split`) under each variant:
the prompt is lm-evaluation-harness's gsm8k text (`Question: {q}\nAnswer:`
after `gsm8k.num_fewshot` examples, the first rows of `data.split`, each
`Question: {q}\nAnswer: {a}` joined by a blank line: the task's
`fewshot_config` sampler `first_n`), the completion is cut at the EOS and
the harness's stop strings, and scored with its strict and flexible
extraction (`jaxlab.evals.gsm8k`). Per (gen_len, variant): accuracy under
both, latency (s per sample) and NFE per sample as the paper reports, and
the speed-up over vanilla. `completions.jsonl` holds every completion.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from jaxlab.configs import dpad as dpad_config
from jaxlab.experiments import results as results_lib
from jaxlab.data import pipeline
from jaxlab.data.synthetic import arith_chains as ac
from jaxlab.decoding import diffusion
from jaxlab.evals import diffusion_decode
from jaxlab.evals import gsm8k
from jaxlab.evals.diffusion_decode import decode_mesh
from jaxlab.evals.diffusion_decode import (  # the library's, used here
    build_model, held_out, load_params, train_chains, variant_kwargs)
from jaxlab.io import params as params_io
from jaxlab.io import pretrained
from jaxlab.io import stages
from jaxlab.models import decoder as decoder_lib
from jaxlab.objectives import llada  # pylint: disable=unused-import
from jaxlab.train import runner as runner_lib


def train_model(config, seed: int) -> tuple[decoder_lib.Decoder, list]:
  """Trains one seed with the loss registry's `config.loss.name`."""
  t = config.task
  init_from = str(config.init_from)
  if init_from:  # continued training from a saved params.npz
    model = load_params(config, init_from.format(seed=int(seed)))
  else:
    model = build_model(config, seed)
  chains = train_chains(config, seed)
  data = ac.training_arrays(chains, prompt_len=int(t.prompt_len),
                            gen_len=int(t.train_gen_len),
                            pad=str(t.get("pad", "left")))
  steps = int(config.train.steps)
  runner = runner_lib.StepRunner(
      model, loss=config.loss.name, loss_config=config.loss,
      optim=config.optim, steps=steps, seed=int(seed),
      mesh=runner_lib.mesh_for(config, int(config.train.batch_size)),
      rules=config.sharding_rules)
  curve = runner_lib.train_on_arrays(
      runner, data, steps=steps, batch_size=int(config.train.batch_size),
      seed=int(seed), log_every=int(config.train.log_every))
  return runner.write_back(), curve


def save_params(model, path: str) -> None:
  params_io.save(model, path)


# What each stage depends on (`jaxlab.io.stages`). The trained model: the
# model, the task (the training chains), the loss, the optimizer, training
# (`init_from` included, with the digest of the model it names) and
# the seed. Its evaluation (`eval.json`) also: the decode settings, the
# seeds (held-out prompts exclude every seed's training prompts) and the
# mesh it decodes on. A run that changes only `decode` decodes the saved
# model again; one that changes e.g. `optim.b2` trains again.
TRAIN_FIELDS = ("model", "task", "loss", "optim", "train", "init_from")
EVAL_FIELDS = ("decode", "seeds", "mesh")


PLAN = stages.Plan(TRAIN_FIELDS, EVAL_FIELDS)


def _init_digest(config, seed: int) -> str | None:
  init_from = str(config.init_from)
  init = init_from.format(seed=int(seed)) if init_from else ""
  return stages.stored_digest(init) if init else None


def train_key(config, seed: int) -> dict[str, Any]:
  return PLAN.train_key(config, seed,
                        init_from_digest=_init_digest(config, seed))


def eval_key(config, seed: int) -> dict[str, Any]:
  return PLAN.eval_key(
      config, seed,
      train_extra={"init_from_digest": _init_digest(config, seed)})


def seed_model(config, seed: int, seed_dir: str
               ) -> tuple[decoder_lib.Decoder, list]:
  """The seed's trained model and learning curve: `seed_dir/params.npz`
  when it was trained with this `train_key`, else trained (and saved)."""
  return stages.cached(os.path.join(seed_dir, "params.npz"),
                       train_key(config, seed),
                       lambda: train_model(config, seed), kind="npz",
                       init=lambda: build_model(config, 0))


def decode_all(model, config, gen_lens, variants, *, prompts, chains,
               batch: int, repeats: int = 1, seed: int = 0, mesh=None
               ) -> dict[str, dict[str, dict[str, float]]]:
  """`jaxlab.evals.diffusion_decode.decode_all` with `config`'s variants."""
  return diffusion_decode.decode_all(
      model, gen_lens, variants,
      variant_kwargs=lambda name: variant_kwargs(config, name),
      prompts=prompts, chains=chains, batch=batch, repeats=repeats,
      seed=seed, mesh=mesh)


# -- the real run: a pretrained diffusion LM on GSM8K --------------------------


def gsm8k_rows(rows) -> tuple[list[str], list[str]]:
  """(questions, answers) of GSM8K rows as released (`question`, `answer`)."""
  rows = [rows[i] for i in range(len(rows))]
  if rows and not {"question", "answer"} <= set(rows[0]):
    raise ValueError("GSM8K rows need columns 'question' and 'answer' (as "
                     f"released, openai/gsm8k); got {sorted(rows[0])}")
  return [r["question"] for r in rows], [r["answer"] for r in rows]


def gsm8k_prompt(question: str, shots: list[tuple[str, str]]) -> str:
  """lm-evaluation-harness's gsm8k context: `doc_to_text` "Question: {q}
  \nAnswer:", each few-shot example followed by " " + its answer
  (`target_delimiter`) and "\n\n" (`fewshot_delimiter`)."""
  head = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in shots)
  return f"{head}Question: {question}\nAnswer:"


def diffusion_ids(config, tok) -> dict[str, Any]:
  """{mask_id, eos_id, shift_logits} of `config.init_from` (its config.json;
  the tokenizer's EOS when the config names none)."""
  from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
  src = pretrained.path(str(config.init_from))
  if src.endswith(".gguf") or not os.path.isdir(src):
    raise ValueError(f"config.init_from={config.init_from!r}: DPad decodes a "
                     "LLaDA / Dream checkpoint directory (or Hub id)")
  ids = hf.diffusion_tokens(src)
  if ids["mask_id"] is None:
    raise ValueError(f"config.init_from={config.init_from!r}: its config.json "
                     "has no mask_token_id (not a LLaDA / Dream checkpoint)")
  eos = ids["eos_id"]
  if isinstance(eos, (list, tuple)):
    eos = eos[0] if eos else None
  if eos is None:
    eos = tok.eos_id
  return {"mask_id": int(ids["mask_id"]), "eos_id": int(eos),
          "shift_logits": bool(ids["shift_logits"])}


def completion_text(tok, tokens, *, eos_id: int, mask_id: int) -> str:
  """The decoded text of one generated row: cut at the first EOS, ids the
  tokenizer lacks (and MASK) dropped, then cut at the harness's `until`."""
  ids = [t for t in diffusion.truncate_at_eos(tokens, eos_id)
         if t != mask_id and t < tok.vocab_size]
  return gsm8k.cut(tok.decode(ids, skip_special_tokens=True))


def run_hf(config, workdir: str) -> dict[str, Any]:
  """The real run (module docstring): GSM8K from `config.data`, the
  checkpoint of `config.init_from`, every variant at every gen_len."""
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  if not str(config.init_from):
    raise ValueError("config.data.source='hf' (GSM8K) needs a diffusion LM "
                     "checkpoint: set --config.init_from")
  d = config.decode
  for name in d.variants:
    if name not in dpad_config.VARIANTS:
      raise ValueError(f"config.decode.variants: unknown variant {name!r}; "
                       f"valid: {', '.join(dpad_config.VARIANTS)}")
  eval_split = config.data.get("eval_split", "") or "test"
  questions, answers = gsm8k_rows(pipeline.read_split(config.data,
                                                      split=eval_split))
  shots_n = int(config.gsm8k.num_fewshot)
  rows_read = {eval_split: len(questions)}
  shots: list[tuple[str, str]] = []
  if shots_n > 0:
    train_split = config.data.get("split", "") or "train"
    sq, sa = gsm8k_rows(pipeline.read_split(config.data, split=train_split,
                                            max_rows=shots_n))
    shots = list(zip(sq, sa))
    rows_read[train_split] = rows_read.get(train_split, 0) + len(shots)
  data = results_lib.data_provenance(config, rows=rows_read)
  tok = pretrained.tokenizer(str(config.init_from))
  ids = diffusion_ids(config, tok)
  batch = min(int(d.batch), len(questions))
  mesh = decode_mesh(config, math.gcd(batch, len(questions)))
  model, _ = pretrained.load(str(config.init_from),
                             dtype=str(d.get("dtype", "float32")))
  prompts = [tok.encode(gsm8k_prompt(q, shots), add_bos=True)
             for q in questions]
  per_seed, records = [], [{"index": i, "question": q, "answer": a,
                            "completions": {}}
                           for i, (q, a) in enumerate(zip(questions, answers))]
  for seed in config.seeds:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for g in d.gen_lens:
      out[str(g)] = {}
      for name in d.variants:
        toks, m = diffusion_decode.decode_prompts(
            model, prompts, gen_len=int(g),
            kwargs=variant_kwargs(config, name, **ids), batch=batch,
            seed=int(seed), mesh=mesh, repeats=int(d.repeats))
        texts = [completion_text(tok, row, eos_id=ids["eos_id"],
                                 mask_id=ids["mask_id"]) for row in toks]
        for filt, key in ((gsm8k.STRICT, "strict"), (gsm8k.FLEXIBLE,
                                                       "flexible")):
          m[key] = float(gsm8k.score(texts, answers, filt).mean())
        out[str(g)][name] = m
        for r, text in zip(records, texts):
          r["completions"][f"seed{seed}/{g}/{name}"] = text
      base = out[str(g)].get("vanilla")
      for m in out[str(g)].values():
        m["speedup"] = (base["latency_s"] / max(m["latency_s"], 1e-12)
                        if base else float("nan"))
    per_seed.append({"seed": int(seed), "decode": out})
  with open(os.path.join(workdir, "completions.jsonl"), "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  cols = [results_lib.Column("strict", "strict match %", 1, 100),
          results_lib.Column("flexible", "flexible extract %", 1, 100),
          results_lib.Column("latency_s", "latency s/sample", 3),
          results_lib.Column("speedup", "speed-up vs vanilla", 1),
          results_lib.Column("nfe", "NFE/sample", 1)]
  tables, comparisons = [], []
  for g in d.gen_lens:
    table = results_lib.Table(
        f"gsm8k_{g}", f"GSM8K ({len(questions)} rows of {eval_split}, "
        f"{shots_n}-shot) with {config.init_from}, gen_len {g}, block "
        f"{d.block_len}", cols, row_label="variant")
    for rec in per_seed:
      for name, m in rec["decode"][str(g)].items():
        table.add_seed(name, rec["seed"], {c.key: m[c.key] for c in cols})
    tables.append(table)
    if "vanilla" in d.variants:
      comparisons += [results_lib.Comparison(table.id, "strict", name,
                                             "vanilla")
                      for name in d.variants if name != "vanilla"]
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed,
           "num_fewshot": shots_n, **ids}
  results_lib.write(workdir, "dpad", tables=tables, comparisons=comparisons,
                    extra=extra, config=config, start_time=t0, data=data)
  return extra


def run(config, workdir: str) -> dict[str, Any]:
  if config.get("data") is not None and config.data.get("source") == "hf":
    return run_hf(config, workdir)
  t0 = time.time()
  d = config.decode
  prompts, chains = held_out(config, int(d.prompts))
  per_seed = []
  for seed in config.seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    os.makedirs(seed_dir, exist_ok=True)
    def evaluate(seed=seed, seed_dir=seed_dir):
      # Resume: a saved model of this train_key is decoded, not retrained.
      model, curve = seed_model(config, seed, seed_dir)
      metrics = decode_all(model, config, d.gen_lens, d.variants,
                           prompts=prompts, chains=chains,
                           batch=int(d.batch), repeats=int(d.repeats),
                           seed=int(seed),
                           mesh=decode_mesh(config, math.gcd(int(d.batch),
                                                             len(prompts))))
      return {"seed": int(seed), "learning_curve": curve, "decode": metrics}
    per_seed.append(stages.cached(os.path.join(seed_dir, "eval.json"),
                                  eval_key(config, seed), evaluate))

  cols = [results_lib.Column("exact_match", "exact match %", 1, 100),
          results_lib.Column("latency_s", "latency s/batch", 3),
          results_lib.Column("speedup", "speed-up vs vanilla", 1),
          results_lib.Column("nfe", "NFE", 0),
          results_lib.Column("tokens_processed", "tokens processed", 0,
                             spread=False),
          results_lib.Column("flops", "GFLOPs", 1, 1e-9, spread=False),
          results_lib.Column("agree_vanilla", "= vanilla %", 0, 100)]
  tables, comparisons = [], []
  for g in d.gen_lens:
    table = results_lib.Table(
        f"decode_{g}", f"Decoding gen_len {g} (block {d.block_len}, "
        f"{len(chains)} held-out prompts, batch {d.batch})", cols,
        row_label="variant")
    for rec in per_seed:
      for name, m in rec["decode"][str(g)].items():
        table.add_seed(name, rec["seed"], {k: m[k] for k in
                                           [c.key for c in cols]})
    tables.append(table)
    comparisons.append(results_lib.Comparison(
        table.id, "exact_match", "+all", "vanilla"))
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed}
  results_lib.write(workdir, "dpad", tables=tables, comparisons=comparisons,
                    extra=extra, config=config, start_time=t0)
  return extra
