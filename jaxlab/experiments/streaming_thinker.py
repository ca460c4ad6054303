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
from jaxlab.data import streaming_format as sf
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
      m[sd.delay_key(float(k))] = c.delay_ticks
    rows.append(m)
    if i < 3:
      samples.append({"story": rs.decode(
          [t for seg in ex.source for t in seg]),
                      "reasoning": rs.decode(res.tokens),
                      "answer": story.answer})
  return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}, samples


def run(config, workdir: str) -> dict[str, Any]:
  if config.get("data") is not None and config.data.get("source", "") in (
      "hf", "grain", "tfds"):
    return run_released(config, workdir)
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
          *[results_lib.Column(sd.delay_key(k), f"Delay @{k:g} tok/tick "
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
        results_lib.Comparison("methods", sd.delay_key(rates[0]), "streaming",
                               "batch")]
  if "streaming" in config.methods and "interleaved" in config.methods:
    comparisons.append(results_lib.Comparison("methods", "accuracy",
                                              "streaming", "interleaved"))
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed}
  results_lib.write(workdir, "streaming_thinker", tables=[table],
                    comparisons=comparisons, extra=extra, config=config,
                    start_time=t0)
  return extra


# -- StreamingCoT as released (`NAME:paper`) ---------------------------------
#
# Row schema: the authors' reader of StreamingCoT rows, EIT-NLP/StreamingLLM
# StreamingThinker/dataloader_hf.py (`extract_instruct`, snapshot 47b7bd1)
# and its data/example_D2.json: `Instruct_Context` = {"instruct": the
# question, "context": sentences each ending in <EOS>}, `streaming_reasoning`
# (units ending in <EOQ> / <EOT>), `deep_reasoning`, `answer` ("\\boxed{285}").
# Configs / splits: the dataset card's `configs:` metadata
# (huggingface.co/datasets/JunlongTong/StreamingCoT, README.md e30d7bc):
# Train -> train (Train/train.parquet); Eval -> metamathqa_1k_eval,
# gsm_symbolic_p1_1k_eval, gsm_symbolic_p2_0_5k_eval (Eval/<split>.parquet).
# Evaluation reads `Instruct_Context` and `answer` only (the authors'
# inference path of `extract_instruct`).

# The authors' system instruction is a config choice (`Instruct` in their
# params_qwen_D*.json); this one is [inferred].
INSTRUCT = ("<|im_start|>system\nPlease reason step by step while reading, "
            "and put your final answer within \\boxed{}.<|im_end|>\n"
            "<|im_start|>user\n")
ASSISTANT = "<|im_start|>assistant\n<think>\n"
END_INSTRUCT = "<|im_end|>\n"


def row_segments(row: dict[str, Any]) -> list[str]:
  """A StreamingCoT row's source segments (text), the authors' layout.

  [INSTRUCT + <SEP>], [instruct + <EOQ>], then the context split after each
  <EOS> (`streaming_format.segment_text`), `END_INSTRUCT` appended to the
  last (`streaming_format.format_example`'s order, as strings).
  """
  ic = row.get("Instruct_Context")
  if not isinstance(ic, dict) or "instruct" not in ic or "context" not in ic:
    raise ValueError("StreamingCoT row: expected `Instruct_Context` with "
                     f"`instruct` and `context`, got keys {sorted(row)}")
  sentences = [s for s in sf.segment_text(ic["context"], (sf.EOS,))
               if s.strip()]
  if not sentences:
    raise ValueError("StreamingCoT row: `Instruct_Context.context` is empty")
  segs = [INSTRUCT + sf.SEP, ic["instruct"] + sf.EOQ] + sentences
  segs[-1] += END_INSTRUCT
  return segs


def _single_ids(tok, pieces) -> list[int]:
  """Ids of the pieces the tokenizer holds as one token (the separators of
  the authors' tokenizer; a tokenizer without them has none)."""
  out = []
  for p in pieces:
    ids = tok.encode(p)
    if len(ids) == 1:
      out.append(int(ids[0]))
  return out


def boxed_match(prediction: str, reference: str) -> float:
  """Spec K accuracy: the boxed answers match exactly (whitespace-stripped;
  `evals.math_answers.last_boxed`; the reference's own box, else itself)."""
  from jaxlab.evals import math_answers  # pylint: disable=g-import-not-at-top
  pred = math_answers.last_boxed(prediction)
  ref = math_answers.last_boxed(reference)
  ref = reference if ref is None else ref
  return float(pred is not None and pred.strip() == ref.strip())


def evaluate_rows(model, tok, config, method: str, rows
                  ) -> tuple[dict[str, float], list[dict[str, Any]]]:
  """Greedy `decoding.streaming.decode` of each row in `method`'s mode;
  mean accuracy, TTFT, Delay per rate and reasoning tokens, and samples."""
  d, clk = config.decode, config.clock
  seps = _single_ids(tok, sf.SEPARATORS)
  stops = sorted(set(_single_ids(tok, ("<|im_end|>",)) + [int(tok.eos_id)]))
  seed = tok.encode(ASSISTANT) + _single_ids(tok, (sf.SEP,))
  per_row, samples = [], []
  for i in range(len(rows)):
    row = rows[i]
    src = [tok.encode(s) for s in row_segments(row)]
    res = sd.decode(model, src, seed_tokens=seed, separator_ids=seps,
                    stop_ids=stops, max_new_tokens=int(d.max_new_tokens),
                    mode=method, temperature=float(d.temperature),
                    read_chunk=int(d.read_chunk))
    text = tok.decode(res.tokens)
    m = {"accuracy": boxed_match(text, str(row["answer"])),
         "reasoning_tokens": float(len(res.tokens))}
    for k in clk.tokens_per_tick:
      c = sd.arrival_clock(res.trace, [len(s) for s in src],
                           tokens_per_tick=float(k),
                           concurrent_reads=method == "streaming",
                           read_ticks_per_token=float(
                               clk.read_ticks_per_token))
      m["ttft_tokens"] = float(c.ttft_tokens)
      m[sd.delay_key(float(k))] = c.delay_ticks
    per_row.append(m)
    if i < 3:
      samples.append({"question": row["Instruct_Context"]["instruct"],
                      "reasoning": text, "answer": str(row["answer"])})
  return ({k: float(np.mean([r[k] for r in per_row])) for k in per_row[0]},
          samples)


def run_released(config, workdir: str) -> dict[str, Any]:
  """StreamingCoT's evaluation rows (`config.data`, `read_split`) decoded by
  the `config.init_from` checkpoint in every method's mode: accuracy, TTFT
  and Delay. No streaming fine-tune here (the paper fine-tunes first)."""
  from jaxlab.data import pipeline  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  t0 = time.time()
  for m in config.methods:
    if m not in sf.LAYOUTS:
      raise ValueError(f"config.methods: unknown method {m!r}; valid: "
                       f"{', '.join(sf.LAYOUTS)}")
  if not config.get("init_from"):
    raise ValueError("streaming_thinker on released data needs "
                     "config.init_from (a checkpoint)")
  split = config.data.split
  rows = pipeline.read_split(config.data, split)
  if not len(rows):
    raise ValueError(f"{config.data.path} [{config.data.subset}/{split}]: "
                     "no rows")
  model, _ = pretrained.load(config.init_from)
  tok = pretrained.tokenizer(config.init_from)
  rates = [float(k) for k in config.clock.tokens_per_tick]
  cols = [results_lib.Column("accuracy", "boxed acc %", 1, 100),
          results_lib.Column("ttft_tokens", "TTFT (input tokens)", 1),
          *[results_lib.Column(sd.delay_key(k), f"Delay @{k:g} tok/tick "
                                  "(ticks)", 1) for k in rates],
          results_lib.Column("reasoning_tokens", "reasoning tokens", 1)]
  table = results_lib.Table(
      "methods", f"StreamingCoT {config.data.subset}/{split} "
      f"({len(rows)} rows, greedy, {config.init_from})", cols,
      row_label="method")
  per_method = {}
  for method in config.methods:
    metrics, samples = evaluate_rows(model, tok, config, method, rows)
    per_method[method] = {"metrics": metrics, "samples": samples}
    table.add_seed(method, 0, {c.key: metrics[c.key] for c in cols})
  extra = {"methods": per_method, "rows": len(rows)}
  results_lib.write(workdir, "streaming_thinker", tables=[table],
                    comparisons=[], extra=extra, config=config,
                    start_time=t0,
                    data=results_lib.data_provenance(
                        config, rows={split: len(rows)}))
  return extra
