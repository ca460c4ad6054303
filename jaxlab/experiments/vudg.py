r"""Experiment "vudg": video QA domain generalisation on mini-VUDG (paper S).

    python -m jaxlab.main --config=jaxlab/configs/vudg.py:tiny --workdir=/tmp/v

Per seed: generate the mini-VUDG train and test splits
(`jaxlab.data.synthetic.video_domains`, disjoint script seeds), then train
the shared video model (`jaxlab.models.video`, built by name from
`config.model`) with the generic trainer's step (`StepRunner`, the
`video_lm` loss: NLL of the answer tokens given frames + question) once per
protocol split of `jaxlab.evals.vudg` (full-domain, leave-one-domain-out
for `protocols.lodo_domains`, single-source for
`protocols.single_source_domains`), each for `fit.steps` steps, and answer
the test questions by greedy decoding through the library sampler
(`VideoLM.generate`: frames as `prefix_embeds`). Replies are scored by the
harness (letter extraction, malformed counted). The full-domain model is
also probed with blank frames (text-only) and one repeated frame
(single-frame); the longest-option baseline and chance need no model.

Tables (results.json): `protocols` (D-Avg / Avg_m / Avg_s, malformed
rate; paired comparisons full vs held-out), `domains` (per-domain
in-domain accuracy of the full model beside the held-out accuracy of the
LODO models), `qtypes` (per question type, full model).

The release (`config.data.source` "hf" / "grain" / "tfds", the `paper`
preset; `run_release`): VUDG's multiple-choice test split as released
(`pipeline.read_split(config.data, data.eval_split)`: test_mul.json /
test_multi.json rows, `jaxlab.data.vudg`), each video from
`<video root>/testset/<domain>/<video>` (video root `release.video_root`,
default `data.path`), answered zero-shot by the Qwen2.5-VL checkpoint
`config.init_from` as zero_shot/qwen2.5vl.py does (`jaxlab.evals.vl_chat`:
question + "\n\nAnswer with only the letter of the correct choice.", fps
1, at most 360 * 420 pixels, 16 new tokens, the reply stripped and
upper-cased) and scored as utils/collect_results.py does
(`vudg.score(strict=True)`: per-domain accuracy, D-Avg = their unweighted
mean, per question type, the QA-weighted overall; per shift type).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from jaxlab.experiments import results as results_lib
from jaxlab.data import pipeline
from jaxlab.data import video_files
from jaxlab.data import vudg as release
from jaxlab.data.synthetic import video_domains as vd
from jaxlab.evals import vl_chat
from jaxlab.evals import vudg
from jaxlab.evals.vudg_qa import (  # pylint: disable=unused-import
    ANSWER_CUE, STEMS, answer, encode, make_tokenizer, prompt_ids,
    target_text)
from jaxlab.models import registry as model_registry
from jaxlab.objectives import video_lm  # pylint: disable=unused-import
from jaxlab.train import runner as runner_lib

def train(config, arrays, domains_of_rows, train_domains, tok, seed):
  """A fresh video model trained on the rows of `train_domains` (None for
  zero-shot: the untrained model)."""
  spec = model_registry.get_spec(config.model, vocab_size=tok.vocab_size,
                                 seed=seed)
  import flax.nnx as nnx  # pylint: disable=g-import-not-at-top
  model = nnx.jit(spec.factory)()
  if not train_domains:
    return model, []
  fit = config.fit
  rows = np.flatnonzero(np.isin(domains_of_rows, list(train_domains)))
  runner = runner_lib.StepRunner(
      model, loss="video_lm", loss_config=None,
      optim=runner_lib.optim_config(
          lr=float(fit.lr), warmup_steps=int(fit.warmup_steps),
          weight_decay=float(fit.weight_decay), schedule="cosine"),
      steps=int(fit.steps), seed=seed)
  rng = np.random.default_rng(seed)
  log = []
  for step in range(int(fit.steps)):
    idx = rows[rng.integers(0, len(rows), int(fit.batch_size))]
    m = runner.step({k: v[idx] for k, v in arrays.items()}, step)
    if step % 50 == 0 or step == int(fit.steps) - 1:
      log.append({"step": step, "loss": m["loss"],
                  "answer_acc": m["answer_acc"]})
  print(f"trained on {len(train_domains)} domains, {int(fit.steps)} steps:"
        f" loss {log[0]['loss']:.3f} -> {log[-1]['loss']:.3f}", flush=True)
  return runner.write_back(), log


RELEASE_SOURCES = ("hf", "grain", "tfds")
PROMPT_SUFFIX = "\n\nAnswer with only the letter of the correct choice."


def run_release(config, workdir: str, t0: float) -> dict[str, Any]:
  """Zero-shot VUDG as released, answered by `config.init_from`."""
  if not config.get("init_from"):
    raise ValueError("the release run needs config.init_from (a Qwen2.5-VL "
                     "checkpoint, e.g. Qwen/Qwen2.5-VL-7B-Instruct)")
  rel, data = config.release, config.data
  split = data.get("eval_split") or "test"
  root = rel.video_root or data.path
  if not os.path.isdir(root):
    raise ValueError(f"release.video_root={root!r} is not a directory: set "
                     "it to the folder holding testset/<domain>/<video> "
                     "(the release's videos, unpacked)")
  rows = pipeline.read_split(data, split=split)
  questions = release.from_rows(rows, where=f"{data.path} {split}")
  chat = vl_chat.VideoChat.load(config.init_from,
                                dtype=config.model.get("dtype"))
  replies, videos = [], {}
  kw = dict(fps=float(rel.fps) or None, nframes=int(rel.nframes) or None,
            max_pixels=int(rel.max_pixels) or None,
            min_pixels=int(rel.min_pixels) or None,
            max_new_tokens=int(rel.max_new_tokens))
  for q in questions:
    path = release.video_path(root, "test", q)
    if path not in videos:
      videos[path] = video_files.read_video(path)
    text, _ = chat.answer(*videos[path], q.question + PROMPT_SUFFIX, **kw)
    replies.append(text.strip().upper())
  res = vudg.score(questions, replies, strict=True, match_option_text=False)
  pct = dict(decimals=1, scale=100)
  summary = results_lib.Table(
      "release", f"{config.init_from} zero-shot on VUDG (accuracy %)",
      row_label="metric",
      columns=[results_lib.Column("acc", "accuracy", **pct)])
  summary.add("D-Avg", "acc", 0, res.d_avg)
  summary.add("Overall (QA-weighted)", "acc", 0, res.overall)
  for s, acc in res.by_shift_type.items():
    summary.add(f"Shift: {s}", "acc", 0, acc)
  summary.add("Unparsed replies", "acc", 0,
              res.num_malformed / res.num_questions)
  domains_t = results_lib.Table(
      "release_domains", "Per domain (accuracy %)", row_label="domain",
      columns=[results_lib.Column("acc", "accuracy", **pct)])
  for d, acc in res.by_domain.items():
    domains_t.add(d, "acc", 0, acc)
  qtypes = results_lib.Table(
      "release_qtypes", "Per question type (accuracy %)",
      row_label="question type",
      columns=[results_lib.Column("acc", "accuracy", **pct)])
  for t, acc in res.by_question_type.items():
    qtypes.add(vd.QUESTION_TYPES[t], "acc", 0, acc)
  prov = results_lib.data_provenance(config, rows={split: len(rows)})
  prov["videos"] = len(videos)
  return results_lib.write(
      workdir, "vudg", tables=[summary, domains_t, qtypes],
      extra={"release": dict(res.to_json(), replies=replies,
                             qa_num=[q.qa_num for q in questions])},
      config=config, start_time=t0, data=prov)


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  if config.data.get("source", "") in RELEASE_SOURCES:
    return run_release(config, workdir, t0)
  tok = make_tokenizer()
  vcfg, pcfg, fit = config.vudg, config.protocols, config.fit
  lodo = vd.check_domains(pcfg.lodo_domains, "protocols.lodo_domains")
  single = vd.check_domains(pcfg.single_source_domains,
                            "protocols.single_source_domains")
  score_kw = dict(match_option_text=bool(vcfg.match_option_text))

  pct = dict(decimals=1, scale=100)
  protocols = results_lib.Table(
      "protocols", "Mini-VUDG: protocols and probes (accuracy %, 6 options)",
      row_label="setting",
      columns=[results_lib.Column("acc", "accuracy", **pct),
               results_lib.Column("malformed", "malformed %", **pct)])
  domains_t = results_lib.Table(
      "domains", "Per domain: in-domain (full-domain model) vs held out "
      "(leave-one-domain-out model), accuracy %", row_label="domain",
      columns=[results_lib.Column("in_domain", "in-domain", **pct),
               results_lib.Column("held_out", "held out", **pct)])
  qtypes = results_lib.Table(
      "qtypes", "Full-domain model per question type (accuracy %)",
      row_label="question type",
      columns=[results_lib.Column("acc", "accuracy", **pct)])
  full_lbl = "Full-domain: D-Avg (upper bound)"
  full_h_lbl = "Full-domain on the LODO domains"
  lodo_lbl = "Multi-source LODO: Avg_m"
  full_s_lbl = "Full-domain on the single-source test domains"
  single_lbl = "Single-source: Avg_s"
  extra: dict[str, Any] = {"curves": {}, "splits": {}}

  def add(label, seed, res: vudg.MCQResult, value=None):
    protocols.add(label, "acc", seed, res.d_avg if value is None else value)
    protocols.add(label, "malformed", seed,
                  res.num_malformed / res.num_questions)

  nf = model_registry.num_frames(config.model)
  for seed in config.seeds:
    seed = int(seed)
    train_set = vd.generate("train",
                            clips_per_domain=int(vcfg.train_clips_per_domain),
                            seed=seed, num_frames=nf,
                            size=int(vcfg.size))
    test_set = vd.generate("test",
                           clips_per_domain=int(vcfg.test_clips_per_domain),
                           seed=seed, num_frames=nf,
                           size=int(vcfg.size))
    max_len = max(len(prompt_ids(tok, q)) for q in train_set.questions) + 4
    arrays = encode(train_set, tok, vcfg.answer_format, max_len)
    row_domains = np.array([q.domain for q in train_set.questions])

    def evaluate(model, test_domains, probe=None):
      sub = test_set.select(test_domains)
      replies = answer(model, sub, tok, batch=int(fit.eval_batch),
                       probe=probe)
      return vudg.score(sub.questions, replies, **score_kw)

    # Full-domain (upper bound) + probes.
    model, log = train(config, arrays, row_domains, vd.ALL_DOMAINS, tok,
                       seed)
    extra["curves"][f"seed{seed}/full"] = log
    full = evaluate(model, vd.ALL_DOMAINS)
    extra["splits"][f"seed{seed}/full"] = full.to_json()
    add(full_lbl, seed, full)
    for d, acc in full.by_domain.items():
      domains_t.add(d, "in_domain", seed, acc)
    for t, acc in full.by_question_type.items():
      qtypes.add(vd.QUESTION_TYPES[t], "acc", seed, acc)
    for probe in pcfg.probes:
      res = evaluate(model, vd.ALL_DOMAINS, probe)
      add(f"Probe {probe.replace('_', '-')} (full-domain model)", seed, res)
    qs = test_set.questions
    add("Longest-option baseline", seed,
        vudg.score(qs, vudg.longest_option(qs), **score_kw))
    protocols.add("Chance", "acc", seed, vudg.chance(qs))
    protocols.add("Chance", "malformed", seed, 0.0)
    if pcfg.zero_shot:
      untrained, _ = train(config, arrays, row_domains, (), tok, seed)
      add("Zero-shot (untrained model)", seed,
          evaluate(untrained, vd.ALL_DOMAINS))

    def run_splits(protocol, only):
      """Trains and evaluates one model per split; records curve and result."""
      runs = []
      for split in vudg.protocol_splits(protocol, vd.ALL_DOMAINS, only=only):
        model, log = train(config, arrays, row_domains, split.train, tok,
                           seed)
        res = evaluate(model, split.test)
        extra["curves"][f"seed{seed}/{split.name}"] = log
        extra["splits"][f"seed{seed}/{split.name}"] = res.to_json()
        runs.append((split, res))
      return runs

    def malformed_rate(runs):
      return float(np.mean([r.num_malformed / r.num_questions
                            for _, r in runs]))

    # Multi-source: leave one domain out.
    if lodo:
      runs = run_splits("multi_source", lodo)
      for split, res in runs:
        domains_t.add(split.test[0], "held_out", seed, res.overall)
      protocols.add(lodo_lbl, "acc", seed, vudg.protocol_average(
          "multi_source", (), [r for _, r in runs]))
      protocols.add(lodo_lbl, "malformed", seed, malformed_rate(runs))
      protocols.add(full_h_lbl, "acc", seed,
                    float(np.mean([full.by_domain[d] for d in lodo])))

    # Single-source: train on one domain, test on the other ten.
    if single:
      runs = run_splits("single_source", single)
      protocols.add(single_lbl, "acc", seed, vudg.protocol_average(
          "single_source", (), [r for _, r in runs]))
      protocols.add(single_lbl, "malformed", seed, malformed_rate(runs))
      protocols.add(full_s_lbl, "acc", seed, float(np.mean(
          [np.mean([full.by_domain[d] for d in s.test]) for s, _ in runs])))

  comparisons = []
  if lodo:
    comparisons.append(results_lib.Comparison("protocols", "acc", full_h_lbl,
                                              lodo_lbl))
  if single:
    comparisons.append(results_lib.Comparison("protocols", "acc", full_s_lbl,
                                              single_lbl))
  if lodo and single:
    comparisons.append(results_lib.Comparison("protocols", "acc", lodo_lbl,
                                              single_lbl))
  return results_lib.write(workdir, "vudg",
                           tables=[protocols, domains_t, qtypes],
                           comparisons=comparisons, extra=extra,
                           config=config, start_time=t0)
