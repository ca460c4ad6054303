"""VideoReasonBench miniature (spec R.6): see jaxlab/configs/video_reason.py.

1. Solvers on the full benchmark layout: the oracle (must be 100%),
   noisy-perception solvers (each operation mis-seen with probability p) and
   the no-reasoning solver (answers with the revealed state), per skill and
   level, and by operation-count bin.
2. The shared video LM (`jaxlab.models.video`) trained with the `video_lm`
   loss through the generic step runner on Cup/Chip videos
   (`jaxlab.data.synthetic.video_reason.lm_data`), decoded at several
   thinking budgets by `jaxlab.decoding.budget.budget_forced` (spec R.5:
   the thinking budget helps most on this benchmark).
Writes WORKDIR/results.json and budget.png.

The release (`config.data.source` "hf" / "grain" / "tfds", the `paper`
preset; `run_release`): VideoReasonBench as published under `data.path`
(`jaxlab.data.video_reason_release`: questions/*.json + videos/), answered
by the Qwen2.5-VL checkpoint `config.init_from` with its own chat
template, tokenizer and video processor (`jaxlab.evals.vl_chat`: frames
as qwen-vl-utils picks them, `release.nframes` or `release.fps`, at most
`release.max_pixels`), greedy, and scored as the release scores each skill
level (`jaxlab.evals.video_reason_release`). `release.budgets` is the
thinking-budget sweep (spec R.5): each budget b lets the model write up to
b tokens, then, when no "Final Answer" came, appends "Final Answer:" and
lets it answer in `release.answer_tokens` more (budget forcing); empty =
one run of up to `release.max_new_tokens` tokens, as eval_huggingface.py.
"""

from __future__ import annotations

import os
import time

import numpy as np

from jaxlab import plotting
from jaxlab.data import tokenizers
from jaxlab.data import video_files
from jaxlab.data import video_reason_release as release
from jaxlab.data.synthetic import video_reason as vr
from jaxlab.data.synthetic.video_reason import lm_data
from jaxlab.decoding import budget as budget_lib
from jaxlab.evals import video_reason as ev
from jaxlab.evals import video_reason_release as ev_release
from jaxlab.evals import vl_chat
from jaxlab.io import pretrained
from jaxlab.models import registry as model_registry
from jaxlab.objectives import video_lm  # pylint: disable=unused-import
from jaxlab.train import runner
from jaxlab.experiments import report
from jaxlab.experiments import results as results_lib

plt = plotting.pyplot()

SKILL_LABELS = {"recall_order": "RecO", "recall_count": "RecC",
                "infer_state": "InfS", "compare_state": "CmpS",
                "predict_state": "PrdS", "predict_operation": "PrdO"}


def _columns(with_malformed: bool = False) -> list[results_lib.Column]:
  cols = [results_lib.Column(s, SKILL_LABELS[s], decimals=1, scale=100)
          for s in vr.SKILLS]
  cols += [results_lib.Column(f"L{l}", f"L{l} {vr.LEVELS[l]}", decimals=1,
                              scale=100) for l in vr.LEVELS]
  cols.append(results_lib.Column("overall", "overall", decimals=1,
                                 scale=100))
  if with_malformed:
    cols.append(results_lib.Column("malformed", "malformed", decimals=1,
                                   scale=100))
  return cols


def _row_values(rep: ev.Report) -> dict[str, float]:
  out = dict(rep.per_skill)
  out.update({f"L{l}": v for l, v in rep.per_level.items()})
  out["overall"] = rep.accuracy
  out["malformed"] = rep.malformed / max(rep.n, 1)
  return out


# -- part 1: solvers -----------------------------------------------------------


def run_solvers(cfg, seed: int, table, bins: dict, bin_table=None) -> None:
  b = cfg.bench
  videos = vr.generate(lm_data.demos(b.demos),
                       num_ops=range(b.num_ops_min, b.num_ops_max + 1),
                       seed=seed, frame_size=b.frame_size, progress=False)
  recs = vr.records(videos)
  rows = [("oracle", vr.solvers.oracle(videos))]
  rows += [(f"noisy p={p:g}", vr.solvers.noisy(videos, p, seed=seed))
           for p in b.error_rates]
  rows.append(("visible state (no reasoning)",
               vr.solvers.visible_state(videos)))
  for label, responses in rows:
    rep = ev.score(recs, responses)
    table.add_seed(label, seed, {k: v for k, v in _row_values(rep).items()
                                 if k != "malformed"})
    bins.setdefault(label, []).append(rep.by["op_bin"])
    if bin_table is not None:
      bin_table.add_seed(label, seed, {f"ops {k}": v
                                       for k, v in rep.by["op_bin"].items()})


# -- part 2: the video LM ------------------------------------------------------


def train_model(cfg, tok, seed: int):
  train = lm_data.task_videos(cfg.task, 10_000 + seed,
                               cfg.task.train_videos_per_cell)
  data = lm_data.encode_examples(cfg, tok, train,
                                 np.random.default_rng(seed))
  model = model_registry.get_spec(cfg.model, vocab_size=tok.vocab_size,
                                  seed=seed).factory()
  steps, bs = cfg.train.steps, cfg.train.batch_size
  run = runner.StepRunner(
      model, loss="video_lm", loss_config=None,
      optim=cfg.optim,  # the whole section: b2, clip_norm, grad_accum, ...
      steps=steps, seed=seed)
  rng = np.random.default_rng(seed)
  n = len(data["inputs"])
  order = np.array([], np.int64)
  curve = []
  for step in range(steps):
    while len(order) < bs:
      order = np.concatenate([order, rng.permutation(n)])
    idx, order = order[:bs], order[bs:]
    m = run.step({k: v[idx] for k, v in data.items()}, step)
    if step % max(1, steps // 10) == 0 or step == steps - 1:
      curve.append({"step": step, "loss": m["loss"],
                    "answer_acc": m["answer_acc"]})
  return run.model(), curve, n


def run_model(cfg, seed: int, table, extra: dict) -> None:
  tok = tokenizers.ByteTokenizer()
  model, curve, n_train = train_model(cfg, tok, seed)
  evals = lm_data.task_videos(cfg.task, 20_000 + seed,
                              cfg.task.eval_videos_per_cell)
  frames, prompts = lm_data.eval_inputs(tok, evals,
                                        model_registry.num_frames(cfg.model))
  recs = vr.records(evals)
  per_budget = {}
  for budget in cfg.task.budgets:
    responses, used = budget_lib.budget_forced(
        model, tok, frames, prompts, budget=budget,
        answer_tokens=cfg.task.answer_tokens, think=lm_data.THINK,
        final=lm_data.FINAL)
    rep = ev.score(recs, responses)
    label = f"budget {budget}"
    table.add_seed(label, seed, _row_values(rep))
    per_budget[label] = {"think_tokens": used, "accuracy": rep.accuracy,
                         "by": rep.by, "malformed": rep.malformed,
                         "example": responses[:6]}
  # Chance-free reference: the same questions answered by the oracle and by
  # a noisy viewer (p = 0.2) of the same videos.
  for label, responses in (("oracle", vr.solvers.oracle(evals)),
                           ("noisy p=0.2", vr.solvers.noisy(evals, 0.2,
                                                            seed=seed))):
    table.add_seed(label, seed, _row_values(ev.score(recs, responses)))
  extra.setdefault("model", []).append({
      "seed": seed, "train_examples": n_train, "eval_questions": len(recs),
      "curve": curve, "budgets": per_budget})


def _plot(path: str, bins: dict) -> str:
  fig, ax = plt.subplots(figsize=(5, 3.2))
  for label, per_seed in bins.items():
    keys = sorted(per_seed[0])
    ax.plot(keys, [np.mean([s[k] for s in per_seed]) for k in keys],
            marker="o", label=label)
  ax.set_xlabel("operations")
  ax.set_ylabel("accuracy")
  ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


# -- the release ---------------------------------------------------------------

RELEASE_SOURCES = ("hf", "grain", "tfds")


def _answer(chat, frames, fps, question, rel, budget):
  """(response, generated tokens) at a thinking budget (None: one run of
  `max_new_tokens`)."""
  kw = dict(nframes=int(rel.nframes) or None,
            fps=float(rel.fps) or None, max_pixels=int(rel.max_pixels) or None,
            min_pixels=int(rel.min_pixels) or None)
  if budget is None:
    return chat.answer(frames, fps, question,
                       max_new_tokens=int(rel.max_new_tokens), **kw)
  text, used = "", 0
  if budget > 0:
    text, used = chat.answer(frames, fps, question, max_new_tokens=budget,
                             **kw)
  if ev_release.extract_final_answer(text) is None:
    forced = text + "\nFinal Answer:"
    more, n = chat.answer(frames, fps, question, continuation=forced,
                          max_new_tokens=int(rel.answer_tokens), **kw)
    text, used = forced + more, used + n
  return text, used


def run_release(config, workdir: str, t0: float) -> dict:
  """VideoReasonBench as released, answered by `config.init_from`."""
  if not config.get("init_from"):
    raise ValueError("the release run needs config.init_from (a Qwen2.5-VL "
                     "checkpoint, e.g. Qwen/Qwen2.5-VL-7B-Instruct)")
  rel, data = config.release, config.data
  rows = release.load_questions(data.path, max_rows=int(data.max_rows))
  judge = rel.judge
  if judge == "llm":   # the release's judge: a text checkpoint
    if not rel.judge_from:
      raise ValueError("release.judge='llm' needs release.judge_from (the "
                       "judge checkpoint, e.g. Qwen/Qwen2.5-72B-Instruct)")
    jmodel, _ = pretrained.load(rel.judge_from,
                                dtype=config.model.get("dtype"))
    judge = ev_release.llm_judge(ev_release.chat_generate(
        jmodel, pretrained.tokenizer(rel.judge_from)))
  chat = vl_chat.VideoChat.load(config.init_from,
                                dtype=config.model.get("dtype"))
  budgets = [None] if not len(rel.budgets) else [int(b) for b in
                                                 rel.budgets]
  table = results_lib.Table(
      "release", f"{config.init_from} on VideoReasonBench (accuracy %)",
      _columns(with_malformed=True), row_label="decode")
  per_budget, videos = {}, {}
  for budget in budgets:
    label = "greedy" if budget is None else f"budget {budget}"
    responses, used = [], []
    for row in rows:
      if row["video"] not in videos:
        videos[row["video"]] = video_files.read_video(
            release.video_file(data.path, row))
      text, n = _answer(chat, *videos[row["video"]], row["question"], rel,
                        budget)
      responses.append(text)
      used.append(n)
    rep = ev_release.score_release(rows, responses, judge=judge)
    vals = dict(rep.per_skill)
    vals.update({f"L{l}": v for l, v in rep.per_level.items()})
    vals["overall"] = rep.accuracy
    vals["malformed"] = rep.malformed / max(rep.n, 1)
    table.add_seed(label, 0, vals)
    per_budget[label] = dict(rep.to_json(), tokens=used,
                             responses=responses,
                             ids=[r["id"] for r in rows])
  prov = results_lib.data_provenance(config, rows={"test": len(rows)})
  prov["videos"] = len(videos)
  out = results_lib.write(workdir, "video_reason", tables=[table],
                          extra={"release": per_budget}, config=config,
                          start_time=t0, data=prov)
  out["table_markdown"] = report.render_table(out, table.id)
  return out


def run(config, workdir: str) -> dict:
  t0 = time.time()
  if config.data.get("source", "") in RELEASE_SOURCES:
    os.makedirs(workdir, exist_ok=True)
    return run_release(config, workdir, t0)
  os.makedirs(workdir, exist_ok=True)
  parts = {p.strip() for p in config.parts.split(",") if p.strip()}
  unknown = parts - {"solvers", "model"}
  if unknown:
    raise ValueError(f"config.parts has unknown parts {sorted(unknown)}; "
                     "valid: solvers, model")
  solvers_table = results_lib.Table(
      "solvers", "Reference solvers on the benchmark layout (accuracy %)",
      _columns(), row_label="solver")
  model_table = results_lib.Table(
      "model", "Tiny video LM on Cup at each thinking budget "
      "(accuracy %)", _columns(with_malformed=True), row_label="decode")
  b = config.bench
  bin_keys = sorted({ev.op_bin(t) for t in range(b.num_ops_min,
                                                 b.num_ops_max + 1)},
                    key=lambda k: int(k.split("-")[0]))
  bin_table = results_lib.Table(
      "op_bins", "Solvers' overall accuracy by operation count (%)",
      [results_lib.Column(f"ops {k}", f"{k} ops", decimals=1, scale=100)
       for k in bin_keys], row_label="solver")
  bins, extra = {}, {}
  if "solvers" in parts:
    for seed in config.seeds:
      run_solvers(config, seed, solvers_table, bins, bin_table)
  if "model" in parts:
    for seed in config.model_seeds:
      run_model(config, seed, model_table, extra)
  tables, comparisons, plots = [], [], []
  if "solvers" in parts:
    tables += [solvers_table, bin_table]
    worst = f"noisy p={config.bench.error_rates[-1]:g}"
    comparisons.append(results_lib.Comparison("solvers", "overall", "oracle",
                                              worst))
    extra["op_bins"] = bins
    plots.append(_plot(os.path.join(workdir, "op_bins.png"), bins))
  if "model" in parts:
    tables.append(model_table)
    budgets = [f"budget {b}" for b in config.task.budgets]
    comparisons.append(results_lib.Comparison("model", "overall",
                                              budgets[-1], budgets[0]))
  out = results_lib.write(workdir, "video_reason", tables=tables,
                          comparisons=comparisons, extra=extra, config=config,
                          start_time=t0)
  out["plots"] = plots
  out["table_markdown"] = "\n\n".join(
      report.render_table(out, t.id) for t in tables)
  return out
