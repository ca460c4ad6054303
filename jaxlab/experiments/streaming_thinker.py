"""StreamingThinker miniature (paper K): streaming vs batch vs interleaved.

Per seed and method (`config.methods`): a decoder is trained from scratch on
running-sum stories (`jaxlab.data.synthetic.running_sum`) laid out by
`jaxlab.objectives.streaming.encode_batch` (streaming mask + SPE, or the
causal baselines), with the loss registry's `streaming_lm` through the
generic step runner; it then decodes held-out stories greedily with
`jaxlab.decoding.streaming.decode` in its own mode (dual-cache READ/WRITE
for streaming), and `arrival_clock` gives TTFT (input tokens read before the
first reasoning token) and Delay (ticks from the end of the input to the
first answer token) at each `config.clock.tokens_per_tick`. Metrics per
method: answer accuracy, running-total (unit) accuracy, TTFT, Delay,
reasoning tokens.

Stages (`jaxlab.io.stages`): per seed and method, the trained model
(`seed{N}/{method}.npz`) is reused by a run whose `TRAIN_FIELDS` (less
`TRAIN_EXCLUDE`) are the same, its evaluation (`seed{N}/{method}.json`) by
one whose `EVAL_FIELDS` are the same too.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from absl import logging
from flax import nnx

from jaxlab.experiments import results as results_lib
from jaxlab.data.synthetic import running_sum as rs
from jaxlab.decoding import streaming as sd
from jaxlab.io import stages
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry
from jaxlab.objectives import streaming as st
from jaxlab.train import runner as runner_lib

HELD_OUT_SEED = 999_999


def _stories(config, seed: int, n: int) -> list[rs.Story]:
  t = config.task
  return rs.make_stories(seed, n, min_sentences=int(t.min_sentences),
                         max_sentences=int(t.max_sentences),
                         max_value=int(t.max_value),
                         max_total=int(t.max_total))


def check_methods(config) -> None:
  for m in config.methods:
    if m not in st.LAYOUTS:
      raise ValueError(f"config.methods: unknown method {m!r}; valid: "
                       f"{', '.join(st.LAYOUTS)}")
  if config.task.depth not in st.DEPTHS:
    raise ValueError(f"config.task.depth must be one of {st.DEPTHS}, got "
                     f"{config.task.depth!r}")


def delay_key(tokens_per_tick: float) -> str:
  """The metric / column key of Delay at one input rate ("delay_0p25")."""
  return f"delay_{tokens_per_tick:g}".replace(".", "p")


def total_len(config) -> int:
  return rs.max_len(int(config.task.max_sentences), config.task.depth)


def training_arrays(config, method: str, seed: int) -> dict[str, np.ndarray]:
  t = config.task
  stories = _stories(config, int(t.data_seed) + int(seed),
                     int(t.train_examples))
  examples = [rs.encode_example(rs.to_example(s, t.depth)) for s in stories]
  return st.encode_batch(examples, method, total_len(config), pad_id=rs.PAD)


def train_model(config, method: str, seed: int):
  """One method's model, trained with `config.loss.name` (streaming_lm)."""
  model = decoder_lib.Decoder(model_registry.decoder_config(config.model),
                              rngs=nnx.Rngs(int(seed)))
  data = training_arrays(config, method, seed)
  steps = int(config.train.steps)
  runner = runner_lib.StepRunner(
      model, loss=config.loss.name, loss_config=config.loss,
      optim=config.optim, steps=steps, seed=int(seed),
      mesh=runner_lib.mesh_for(config, int(config.train.batch_size)),
      rules=config.sharding_rules)
  curve = runner_lib.train_on_arrays(
      runner, data, steps=steps, batch_size=int(config.train.batch_size),
      seed=int(seed), log_every=int(config.train.log_every),
      log=lambda step, loss: logging.info("%s seed %d step %d loss %.4f",
                                          method, seed, step, loss))
  return runner.write_back(), curve


# What each stage depends on. A method's trained model: the model, the task
# (its training stories; not the held-out count), the loss, the optimizer,
# training, the seed and the method. Its evaluation also: the decode
# settings, the arrival clock and the whole task. A run that changes only
# `decode` or `clock` re-decodes the saved models.
TRAIN_FIELDS = ("model", "task", "loss", "optim", "train")
TRAIN_EXCLUDE = ("task.eval_stories",)
EVAL_FIELDS = ("decode", "clock", "task")


PLAN = stages.Plan(TRAIN_FIELDS, EVAL_FIELDS, train_exclude=TRAIN_EXCLUDE)


def train_key(config, method: str, seed: int) -> dict[str, Any]:
  return PLAN.train_key(config, seed, method=method)


def eval_key(config, method: str, seed: int) -> dict[str, Any]:
  return PLAN.eval_key(config, seed, train_extra={"method": method})


def method_model(config, method: str, seed: int, seed_dir: str):
  """(model, learning curve): `seed_dir/{method}.npz` when trained with
  this `train_key`, else trained (and saved)."""
  return stages.cached(
      os.path.join(seed_dir, f"{method}.npz"),
      train_key(config, method, seed),
      lambda: train_model(config, method, seed), kind="npz",
      init=lambda: decoder_lib.Decoder(
          model_registry.decoder_config(config.model),
          rngs=nnx.Rngs(int(seed))))


def evaluate(model, config, method: str, stories: list[rs.Story]
             ) -> tuple[dict[str, float], list[dict[str, Any]]]:
  """Greedy decodes of `stories` in `method`'s mode; mean metrics and a
  few decoded samples."""
  d, clk = config.decode, config.clock
  rows, samples = [], []
  for i, story in enumerate(stories):
    ex = rs.encode_example(rs.to_example(story, config.task.depth))
    res = sd.decode(model, ex.source, seed_tokens=rs.SEED_IDS,
                    separator_ids=rs.SEPARATOR_IDS, stop_ids=rs.STOP_IDS,
                    max_new_tokens=int(d.max_new_tokens), mode=method,
                    temperature=float(d.temperature),
                    read_chunk=int(d.read_chunk))
    m = rs.score(res.tokens, story)
    m["reasoning_tokens"] = float(len(res.tokens))
    answer = rs.answer_index(res.tokens)
    for k in clk.tokens_per_tick:
      c = sd.arrival_clock(res.trace, ex.src_lens, tokens_per_tick=float(k),
                           concurrent_reads=method == "streaming",
                           answer_write=answer,
                           read_ticks_per_token=float(
                               clk.read_ticks_per_token))
      m["ttft_tokens"] = float(c.ttft_tokens)
      m[delay_key(float(k))] = c.delay_ticks
    rows.append(m)
    if i < 3:
      samples.append({"story": rs.decode(
          [t for seg in ex.source for t in seg]),
                      "reasoning": rs.decode(res.tokens),
                      "answer": story.answer})
  return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}, samples


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  check_methods(config)
  stories = _stories(config, int(config.task.data_seed) + HELD_OUT_SEED,
                     int(config.task.eval_stories))
  per_seed = []
  for seed in config.seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    os.makedirs(seed_dir, exist_ok=True)
    rec = {"seed": int(seed), "methods": {}}
    for method in config.methods:
      def evaluate_method(method=method, seed=seed, seed_dir=seed_dir):
        model, curve = method_model(config, method, seed, seed_dir)
        metrics, samples = evaluate(model, config, method, stories)
        return {"metrics": metrics, "learning_curve": curve,
                "samples": samples}
      rec["methods"][method] = stages.cached(  # resume: per method
          os.path.join(seed_dir, f"{method}.json"),
          eval_key(config, method, seed), evaluate_method)
    per_seed.append(rec)

  rates = [float(k) for k in config.clock.tokens_per_tick]
  cols = [results_lib.Column("accuracy", "answer acc %", 1, 100),
          results_lib.Column("unit_accuracy", "running-total acc %", 1, 100),
          results_lib.Column("ttft_tokens", "TTFT (input tokens)", 1),
          *[results_lib.Column(delay_key(k), f"Delay @{k:g} tok/tick "
                               "(ticks)", 1) for k in rates],
          results_lib.Column("reasoning_tokens", "reasoning tokens", 1)]
  table = results_lib.Table(
      "methods", f"Running-sum stories, depth {config.task.depth} "
      f"({len(stories)} held-out stories, greedy)", cols, row_label="method")
  for rec in per_seed:
    for method, out in rec["methods"].items():
      table.add_seed(method, rec["seed"], {c.key: out["metrics"][c.key]
                                           for c in cols})
  comparisons = []
  if "streaming" in config.methods and "batch" in config.methods:
    comparisons += [
        results_lib.Comparison("methods", "accuracy", "streaming", "batch"),
        results_lib.Comparison("methods", delay_key(rates[0]), "streaming",
                               "batch")]
  if "streaming" in config.methods and "interleaved" in config.methods:
    comparisons.append(results_lib.Comparison("methods", "accuracy",
                                              "streaming", "interleaved"))
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed}
  results_lib.write(workdir, "streaming_thinker", tables=[table],
                    comparisons=comparisons, extra=extra, config=config,
                    start_time=t0)
  return extra
