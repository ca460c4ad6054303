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
i - 1) decodes the lm-evaluation-harness task `config.eval.task` under
each variant, its rows as released from `config.data`
(`pipeline.read_split`), prompts as the harness builds them (optionally
inside the checkpoint's chat template, `eval.chat_template`, as DPad's
eval_llada.py does for an instruct model), the completion cut at the EOS
and the task's stop strings, scored as the harness scores it:

* `gsm8k` (`openai/gsm8k`, subset `main`: `question`, `answer` ending in
  `#### n`): `Question: {q}\nAnswer:` after `eval.num_fewshot` examples,
  the first rows of `data.split` (`fewshot_config` sampler `first_n`);
  strict and flexible extraction (`jaxlab.evals.gsm8k`).
* `minerva_math` (`EleutherAI/hendrycks_math`; `data.subset` one config,
  several joined by ",", or "" for the group's seven: `problem`,
  `solution`, ...): the Minerva 4-shot prompt; exact match (Minerva's
  final-answer extraction and sympy equivalence) and math-verify
  (`jaxlab.evals.minerva_math`).
* `humaneval` (`openai/openai_humaneval`) and `mbpp`
  (`google-research-datasets/mbpp`, `full`): the task's prompt (MBPP
  3-shot from its fixed examples), pass@1 of `prediction + "\n" + tests`
  run in `jaxlab.rewards.sandbox` (`jaxlab.rewards.code_exec`); HumanEval
  post-processed as the harness does or as DPad does
  (`eval.code_postprocess`).

Per (gen_len, variant): the task's metrics, latency (s per sample) and NFE
per sample as the paper reports, and the speed-up over vanilla.
`completions.jsonl` holds every completion and its per-row scores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxlab.configs import dpad as dpad_config
from jaxlab.experiments import results as results_lib
from jaxlab.data import pipeline
from jaxlab.data.synthetic import arith_chains as ac
from jaxlab.decoding import diffusion
from jaxlab.rewards import code_exec
from jaxlab.evals import diffusion_decode
from jaxlab.evals import gsm8k
from jaxlab.evals import minerva_math
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


def completion_text(tok, tokens, *, eos_id: int, mask_id: int,
                    until: tuple[str, ...] | None = gsm8k.UNTIL) -> str:
  """The decoded text of one generated row: cut at the first EOS, ids the
  tokenizer lacks (and MASK) dropped, then cut at the task's `until` (none:
  the whole text)."""
  ids = [t for t in diffusion.truncate_at_eos(tokens, eos_id)
         if t != mask_id and t < tok.vocab_size]
  text = tok.decode(ids, skip_special_tokens=True)
  return gsm8k.cut(text, until) if until else text


TASK_NAMES = ("gsm8k", "minerva_math", "humaneval", "mbpp")
# The harness's few-shot count each task uses in DPad's main table
# (`jaxlab.configs.dpad.TASKS`), for `eval.num_fewshot` = -1.
_DEFAULT_SHOTS = {name: t["num_fewshot"]
                  for name, t in dpad_config.TASKS.items()}


@dataclasses.dataclass
class TaskData:
  """One harness task's rows made ready to decode and score.

  prompts: the context text of each row; until: stop strings the completion
  is cut at (None: none); records: what completions.jsonl keeps per row
  besides the completions; score: completions -> {metric: float [N]} (0/1
  per row; the mean is the metric); columns: (metric, label) of the table;
  rows_read: rows read per split (results' data.rows); shots: n-shot.
  """
  name: str
  prompts: list[str]
  until: tuple[str, ...] | None
  records: list[dict[str, Any]]
  score: Callable[[list[str]], dict[str, np.ndarray]]
  columns: list[tuple[str, str]]
  rows_read: dict[str, int]
  shots: int
  eval_split: str


def _split_names(config) -> tuple[str, str]:
  return (config.data.get("eval_split", "") or "test",
          config.data.get("split", "") or "train")


def _shots(config, name: str, most: int | None = None) -> int:
  n = int(config.eval.num_fewshot)
  n = _DEFAULT_SHOTS[name] if n < 0 else n
  if most is not None and n > most:
    raise ValueError(f"config.eval.num_fewshot={n}: {name} has {most} "
                     "few-shot examples")
  return n


def _rows(ds) -> list[dict[str, Any]]:
  return [ds[i] for i in range(len(ds))]


def _gsm8k_task(config) -> TaskData:
  eval_split, train_split = _split_names(config)
  questions, answers = gsm8k_rows(pipeline.read_split(config.data,
                                                      split=eval_split))
  n = _shots(config, "gsm8k")
  rows_read = {eval_split: len(questions)}
  shots: list[tuple[str, str]] = []
  if n > 0:
    sq, sa = gsm8k_rows(pipeline.read_split(config.data, split=train_split,
                                            max_rows=n))
    shots = list(zip(sq, sa))
    rows_read[train_split] = rows_read.get(train_split, 0) + len(shots)

  def score(texts):
    return {key: gsm8k.score(texts, answers, filt)
            for filt, key in ((gsm8k.STRICT, "strict"),
                              (gsm8k.FLEXIBLE, "flexible"))}
  return TaskData(
      "gsm8k", [gsm8k_prompt(q, shots) for q in questions], gsm8k.UNTIL,
      [{"question": q, "answer": a} for q, a in zip(questions, answers)],
      score, [("strict", "strict match %"),
              ("flexible", "flexible extract %")], rows_read, n, eval_split)


def math_rows(config, split: str) -> list[dict[str, Any]]:
  """MATH rows as released (`problem`, `solution`, ...) of `data.subset`:
  one config name, several joined by ",", or "" for the seven of the
  harness's minerva_math group (EleutherAI/hendrycks_math), read in that
  order up to `data.max_rows` in all."""
  subset = str(config.data.get("subset", "") or "")
  names = ([s.strip() for s in subset.split(",") if s.strip()] if subset
           else list(minerva_math.SUBSETS))
  cap = int(config.data.get("max_rows", 0) or 0)
  rows: list[dict[str, Any]] = []
  for name in names:
    left = cap - len(rows) if cap else 0
    if cap and left <= 0:
      break
    rows += _rows(pipeline.read_split(config.data, split=split, subset=name,
                                      max_rows=left))
  if rows and not {"problem", "solution"} <= set(rows[0]):
    raise ValueError("MATH rows need columns 'problem' and 'solution' (as "
                     f"released, EleutherAI/hendrycks_math); got "
                     f"{sorted(rows[0])}")
  return rows


def _math_task(config) -> TaskData:
  eval_split, _ = _split_names(config)
  rows = math_rows(config, eval_split)
  n = _shots(config, "minerva_math", len(minerva_math.FEWSHOT))
  solutions = [r["solution"] for r in rows]

  def score(texts):
    return minerva_math.score_all(texts, solutions)
  return TaskData(
      "minerva_math", [minerva_math.prompt(r["problem"], n) for r in rows],
      minerva_math.UNTIL,
      [{"problem": r["problem"], "solution": r["solution"],
        "answer": minerva_math.answer(r["solution"])} for r in rows],
      score, [("exact_match", "exact match %"),
              ("math_verify", "math-verify %")], {eval_split: len(rows)}, n,
      eval_split)


def _code_task(config, name: str, run_program) -> TaskData:
  eval_split, _ = _split_names(config)
  rows = _rows(pipeline.read_split(config.data, split=eval_split))
  post = str(config.eval.get("code_postprocess", "harness"))
  if post not in ("harness", "dpad"):
    raise ValueError(f"config.eval.code_postprocess={post!r}; valid: "
                     "harness, dpad")
  timeout_s = float(config.eval.get("timeout_s", code_exec.TIMEOUT_S))
  if name == "humaneval":
    code_exec.check_columns(rows, code_exec.HUMANEVAL_COLUMNS,
                            "HumanEval (openai/openai_humaneval)")
    _shots(config, name, 0)
    n = 0
    prompts = [code_exec.humaneval_prompt(r) for r in rows]
    refs = [code_exec.humaneval_reference(r) for r in rows]
    if post == "dpad":
      until = None
      program = code_exec.dpad_humaneval_program
    else:
      until = code_exec.HUMANEVAL_UNTIL
      program = code_exec.humaneval_prediction
    records = [{"task_id": r["task_id"], "entry_point": r["entry_point"]}
               for r in rows]
  else:
    code_exec.check_columns(rows, code_exec.MBPP_COLUMNS,
                            "MBPP (google-research-datasets/mbpp)")
    n = _shots(config, name, len(code_exec.MBPP_FEWSHOT))
    prompts = [code_exec.mbpp_prompt(r, n) for r in rows]
    refs = [code_exec.mbpp_reference(r) for r in rows]
    until = code_exec.MBPP_UNTIL
    program = lambda r, text: code_exec.mbpp_prediction(text)
    records = [{"task_id": r["task_id"]} for r in rows]

  def score(texts):
    preds = [[program(r, t)] for r, t in zip(rows, texts)]
    _, verdicts = code_exec.pass_at_k(preds, refs, k=(1,),
                                      timeout_s=timeout_s, run=run_program)
    return {"pass_at_1": np.asarray([v[0] for v in verdicts], np.float32)}
  return TaskData(name, prompts, until, records, score,
                  [("pass_at_1", "pass@1 %")], {eval_split: len(rows)}, n,
                  eval_split)


def task_data(config, run_program=None) -> TaskData:
  """The rows of `config.eval.task` from `config.data`, ready to decode."""
  name = str(config.eval.task)
  if name not in TASK_NAMES:
    raise ValueError(f"config.eval.task={name!r}; valid: "
                     f"{', '.join(TASK_NAMES)}")
  if name == "gsm8k":
    return _gsm8k_task(config)
  if name == "minerva_math":
    return _math_task(config)
  return _code_task(config, name, run_program)


def encode_prompt(tok, text: str, chat: bool) -> list[int]:
  """Prompt ids: the text (BOS first), or as DPad's eval_llada.py does for
  an instruct model, the text as one user turn of the chat template."""
  if chat:
    text = tok.render_chat([{"role": "user", "content": text}],
                           add_generation_prompt=True)
  return tok.encode(text, add_bos=True)


def run_hf(config, workdir: str) -> dict[str, Any]:
  """The real run (module docstring): the harness task `config.eval.task`
  from `config.data`, the checkpoint of `config.init_from`, every variant
  at every gen_len."""
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  task_name = str(config.eval.task)
  if not str(config.init_from):
    raise ValueError(f"config.data.source='hf' ({task_name}) needs a "
                     "diffusion LM checkpoint: set --config.init_from")
  d = config.decode
  for name in d.variants:
    if name not in dpad_config.VARIANTS:
      raise ValueError(f"config.decode.variants: unknown variant {name!r}; "
                       f"valid: {', '.join(dpad_config.VARIANTS)}")
  with contextlib.ExitStack() as stack:
    run_program = None
    if task_name in ("humaneval", "mbpp"):
      from jaxlab.rewards import sandbox  # pylint: disable=g-import-not-at-top
      run_program = stack.enter_context(
          sandbox.SandboxPool(workers=2)).run_program
    task = task_data(config, run_program)
    extra = _decode_task(config, workdir, task, t0)
  return extra


def _decode_task(config, workdir: str, task: TaskData, t0: float
                 ) -> dict[str, Any]:
  d = config.decode
  data = results_lib.data_provenance(config, rows=task.rows_read)
  tok = pretrained.tokenizer(str(config.init_from))
  ids = diffusion_ids(config, tok)
  n_rows = len(task.prompts)
  if not n_rows:
    raise ValueError(f"config.data: no {task.name} rows read from "
                     f"{config.data.path!r} ({task.eval_split})")
  batch = min(int(d.batch), n_rows)
  mesh = decode_mesh(config, math.gcd(batch, n_rows))
  model, _ = pretrained.load(str(config.init_from),
                             dtype=str(d.get("dtype", "float32")))
  chat = bool(config.eval.get("chat_template", False))
  prompts = [encode_prompt(tok, p, chat) for p in task.prompts]
  records = [{"index": i, **r, "completions": {}}
             for i, r in enumerate(task.records)]
  keys = [k for k, _ in task.columns]
  per_seed = []
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
                                 mask_id=ids["mask_id"], until=task.until)
                 for row in toks]
        scores = task.score(texts)
        for key in keys:
          m[key] = float(np.mean(scores[key]))
        out[str(g)][name] = m
        tag = f"seed{seed}/{g}/{name}"
        for i, (r, text) in enumerate(zip(records, texts)):
          r["completions"][tag] = text
          r.setdefault("scores", {})[tag] = {k: float(scores[k][i])
                                             for k in keys}
      base = out[str(g)].get("vanilla")
      for m in out[str(g)].values():
        m["speedup"] = (base["latency_s"] / max(m["latency_s"], 1e-12)
                        if base else float("nan"))
    per_seed.append({"seed": int(seed), "decode": out})
  with open(os.path.join(workdir, "completions.jsonl"), "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  cols = [results_lib.Column(k, label, 1, 100) for k, label in task.columns]
  cols += [results_lib.Column("latency_s", "latency s/sample", 3),
           results_lib.Column("speedup", "speed-up vs vanilla", 1),
           results_lib.Column("nfe", "NFE/sample", 1)]
  title = {"gsm8k": "GSM8K", "minerva_math": "MATH (minerva_math)",
           "humaneval": "HumanEval", "mbpp": "MBPP"}[task.name]
  tables, comparisons = [], []
  for g in d.gen_lens:
    table = results_lib.Table(
        f"{task.name}_{g}", f"{title} ({n_rows} rows of {task.eval_split}, "
        f"{task.shots}-shot) with {config.init_from}, gen_len {g}, block "
        f"{d.block_len}", cols, row_label="variant")
    for rec in per_seed:
      for name, m in rec["decode"][str(g)].items():
        table.add_seed(name, rec["seed"], {c.key: m[c.key] for c in cols})
    tables.append(table)
    if "vanilla" in d.variants:
      comparisons += [results_lib.Comparison(table.id, keys[0], name,
                                             "vanilla")
                      for name in d.variants if name != "vanilla"]
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed,
           "task": task.name, "num_fewshot": task.shots,
           "chat_template": chat, **ids}
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
