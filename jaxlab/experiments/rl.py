"""GRPO with verifiable answers on any checkpoint of the library.

`run(config, workdir)` (jaxlab/configs/rl.py): loads `init_from` (or builds a
random decoder), the checkpoint's tokenizer and chat template, a question
set with reference answers (JSONL or generated arithmetic), then runs the
library's `GRPOLearner`: each step samples `group_size` completions per
prompt (stopping at every eos id), rewards them with
`jaxlab.rewards.answer.answer_rewards` and updates the policy. Greedy
accuracy on held-out questions is measured before, every `eval_every`
steps and after. Writes WORKDIR/metrics.jsonl, WORKDIR/rollouts.jsonl (every
sampled completion with its reward), WORKDIR/results.json and, with
`export_dir`, the tuned model as a HF checkpoint with the tokenizer files.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.data import sources
from jaxlab.data import tokenizers
from jaxlab.io import pretrained
from jaxlab.decoding import sampler
from jaxlab.experiments import results as results_lib
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry
from jaxlab.rewards import answer as answer_lib
from jaxlab.rl import learner as learner_lib
from jaxlab.train import metrics as metrics_lib


def arithmetic_questions(n: int, *, max_operand: int, seed: int
                         ) -> list[dict[str, str]]:
  """`n` distinct "What is a + b?" questions (a, b < max_operand)."""
  pairs = [(a, b) for a in range(max_operand) for b in range(max_operand)]
  rng = np.random.default_rng(seed)
  pick = rng.permutation(len(pairs))[:n]
  return [{"prompt": f"What is {pairs[i][0]} + {pairs[i][1]}?",
           "answer": str(pairs[i][0] + pairs[i][1])} for i in pick]


def read_questions(path: str) -> list[dict[str, Any]]:
  """Rows `{"prompt" | "messages", "answer"}` of a JSONL file."""
  rows = sources.read_jsonl(path, text_key=None)
  for i, row in enumerate(rows, start=1):
    if not isinstance(row, dict) or "answer" not in row or not (
        isinstance(row.get("prompt"), str)
        or isinstance(row.get("messages"), list)):
      raise ValueError(f"{path}: row {i}: expected {{'prompt': str | "
                       "'messages': [...], 'answer': str}, got "
                       f"{str(row)[:80]!r}")
    row["answer"] = str(row["answer"])
  return rows


def questions(config) -> tuple[list[dict], list[dict]]:
  """(train, eval) question rows."""
  dc, rl = config.data, config.rl
  if dc.path:
    train = read_questions(dc.path)
    if dc.eval_path:
      return train, read_questions(dc.eval_path)
  else:
    train = arithmetic_questions(rl.num_questions,
                                 max_operand=rl.max_operand,
                                 seed=int(config.seed))
  n_eval = max(1, int(len(train) * float(dc.eval_fraction)))
  if n_eval >= len(train):
    raise ValueError(f"data: {len(train)} questions leave none for "
                     f"training after holding out {n_eval}")
  return train[:-n_eval], train[-n_eval:]


def _model(config, tok):
  if config.init_from:
    return pretrained.load(config.init_from, dtype=config.model.dtype,
                           param_dtype=config.model.param_dtype)
  vocab = tokenizers.padded_vocab_size(tok.vocab_size)
  cfg = model_registry.decoder_config(config.model, vocab_size=vocab)
  return decoder_lib.Decoder(cfg, rngs=nnx.Rngs(int(config.seed))), cfg


def encoder(tok, *, chat: bool, template_kwargs=None):
  """question row -> prompt ids (chat template when there is one).

  `template_kwargs` (and a row's own `tools`/`documents`) go to the chat
  template (e.g. `enable_thinking`).
  """
  use_chat = chat and getattr(tok, "chat_template", None)

  def encode(row) -> list[int]:
    messages = row.get("messages") or [{"role": "user",
                                        "content": row["prompt"]}]
    if use_chat:
      return tok.apply_chat_template(
          messages, add_generation_prompt=True,
          **tokenizers.row_template_kwargs(row, template_kwargs))
    if "prompt" not in row:
      raise ValueError("a 'messages' row needs a tokenizer with a chat "
                       "template (data.tokenizer='auto')")
    return tok.encode(row["prompt"], add_bos=True)
  return encode


class _Decoder:
  """Completion ids -> text, without the stop tokens."""

  def __init__(self, tok, stops):
    self.tok, self.stops = tok, set(stops)

  def __call__(self, ids) -> str:
    return self.tok.decode([int(t) for t in ids if int(t) not in self.stops])


def greedy_accuracy(policy, rows, prompts, decode, gcfg, collapse) -> float:
  out = sampler.generate(policy, prompts, max_new_tokens=gcfg.max_new_tokens,
                         eos_id=gcfg.eos_id, stop_ids=gcfg.stop_ids,
                         pad_id=gcfg.pad_id)
  texts = [decode(t) for t in out.tokens]
  return float(answer_lib.answer_rewards(
      texts, [r["answer"] for r in rows], collapse=collapse).mean())


def run(config, workdir: str) -> dict[str, Any]:
  start_time = time.time()
  os.makedirs(workdir, exist_ok=True)
  rl = config.rl
  tok = (pretrained.tokenizer(config.init_from)  # the checkpoint's own
         if config.data.tokenizer == "auto" and config.init_from else
         tokenizers.build(config.data.tokenizer,
                          path=config.data.tokenizer_path,
                          field="data.tokenizer"))
  model, mcfg = _model(config, tok)
  if tok.vocab_size > mcfg.vocab_size:
    raise ValueError(f"the tokenizer has {tok.vocab_size} ids but the model "
                     f"only {mcfg.vocab_size}")
  train, held_out = questions(config)
  held_out = held_out[:rl.eval_questions]
  encode = encoder(tok, chat=bool(rl.chat),
                   template_kwargs=tokenizers.template_kwargs(
                       config.data.get("chat_template_kwargs"),
                       field="data.chat_template_kwargs"))
  train_prompts = [encode(r) for r in train]
  eval_prompts = [encode(r) for r in held_out]
  eos_ids = tuple(getattr(tok, "eos_ids", (tok.eos_id,)))
  gcfg = learner_lib.GRPOConfig(**config.grpo, eos_id=tok.eos_id,
                                pad_id=tok.pad_id, stop_ids=eos_ids)
  decode = _Decoder(tok, eos_ids)
  grad_accum = int(config.optim.get("grad_accum", 1))
  learner = learner_lib.GRPOLearner(
      model, gcfg, config.optim, total_steps=int(rl.steps),
      seed=int(config.seed), rules=config.sharding_rules,
      mesh=parallel.mesh_from_config(
          config, batch=int(rl.prompts_per_step) * gcfg.group_size
          // gcfg.num_minibatches // grad_accum))
  writer = metrics_lib.MetricsWriter(workdir, total_steps=int(rl.steps),
                                     tensorboard=False)

  def evaluate(step):
    acc = greedy_accuracy(learner.policy, held_out, eval_prompts, decode,
                          gcfg, rl.reward)
    writer.write(step, {"eval/accuracy": acc})
    return acc

  def batches():
    """`prompts_per_step` questions per step (`default_rng(seed + 1)`)."""
    rng = np.random.default_rng(int(config.seed) + 1)
    while True:
      picks = rng.choice(len(train), rl.prompts_per_step,
                         replace=len(train) < rl.prompts_per_step)
      yield {"prompts": [train_prompts[i] for i in picks],
             "question": [int(i) for i in picks],
             "answer": [train[i]["answer"] for i in picks]}

  before = evaluate(0)
  rollouts = open(os.path.join(workdir, "rollouts.jsonl"), "w")

  def reward_fn(*, completions, question, answer, step, **_):
    texts = [decode(c) for c in completions]
    rewards = answer_lib.answer_rewards(texts, answer, collapse=rl.reward)
    for c, q, a, text, r in zip(completions, question, answer, texts,
                                rewards):
      rollouts.write(json.dumps({
          "step": step, "question": q,
          "completion_ids": [int(t) for t in c],
          "completion": text, "answer": a, "reward": float(r)}) + "\n")
    return rewards, {"accuracy": float(rewards.mean())}

  def eval_fn(_, step):
    if step < int(rl.steps):   # the last is `after`, below
      evaluate(step)

  metrics = {}

  def on_row(row):   # streamed: each step's metrics as soon as it is done
    if "eval" not in row:
      metrics.update(row)
      writer.write(row["step"], {k: v for k, v in row.items()
                                 if k != "step" and np.isscalar(v)})

  try:
    learner.train(batches(), reward_fn, steps=int(rl.steps),
                  key=jax.random.key(int(config.seed)), eval_fn=eval_fn,
                  eval_every=int(rl.eval_every or 0), on_row=on_row)
  finally:
    rollouts.close()
  after = evaluate(int(rl.steps))
  results = {
      "init_from": config.init_from or "random",
      "train_questions": len(train), "eval_questions": len(held_out),
      "eval_accuracy_before": before, "eval_accuracy_after": after,
      "final_train_reward": metrics.get("reward_mean"),
      "steps": int(rl.steps),
  }
  if config.export_dir:
    from jaxlab.data import hf_tokenizer  # pylint: disable=g-import-not-at-top
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    results["exported_to"] = hf.save(learner.policy, mcfg, config.export_dir)
    if isinstance(tok, hf_tokenizer.HFTokenizer):
      hf_tokenizer.save(tok, config.export_dir)
  # The provenance every experiment's results.json carries (command,
  # commit, versions, config), with the final values at the top level.
  results_lib.write(workdir, "rl", fields=results, config=config,
                    start_time=start_time)
  return results
