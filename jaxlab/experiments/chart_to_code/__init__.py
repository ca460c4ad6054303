r"""MSRL chart-to-code miniature (paper F): SFT, then GRPO stage 1, stage 2.

    python -m jaxlab.main --config=chart_to_code:tiny --workdir=/tmp/c2c_tiny

A composition: charts `jaxlab.data.synthetic.charts` (procedural 64x64
plots, code in a tiny grammar); policy `jaxlab.models.prefix_lm.
ImagePrefixLM` (ViT patch tokens of the 32x32 image before the decoder)
or, preset `vl`, `jaxlab.models.qwen2_vl_prefix.Qwen2VLPrefixLM`;
SFT by the trainer's step on `prefix_lm_nll` (`jaxlab.objectives.
prefix_lm`) until the held-out loss plateaus; GRPO stage 1 (R_text +
R_exec, own charts) then stage 2 (+ R_vis, SSIM judge, other charts) by
`jaxlab.rl.learner.GRPOLearner` (the rollout's prefix hook carries the
images, so the ViT learns with the decoder; k3 KL to the post-SFT policy),
rewards `jaxlab.rewards.chart` with renders memoised by
`jaxlab.rewards.render_cache`; after each phase greedy decoding of the
held-out charts scored by `jaxlab.rewards.chart_eval.evaluate`.

With `data.source` "hf" (the `paper` preset) the run is ChartMimic as
released, answered by the Qwen2.5-VL checkpoint `init_from` and scored as
ChartMimic scores it: `jaxlab.experiments.chart_to_code.chartmimic_run`.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.data.synthetic import charts as charts_lib
from jaxlab.experiments import results as results_lib
from jaxlab.io import stages
from jaxlab.io import params as params_io
from jaxlab.models import prefix_lm
from jaxlab.objectives import prefix_lm as prefix_lm_loss
from jaxlab.rewards import chart
from jaxlab.rewards import chart_eval
from jaxlab.rewards import render_cache
from jaxlab.rl import learner as learner_lib
from jaxlab.train import eval_loop
from jaxlab.train import runner as runner_lib


def make_policy(config, seed: int) -> prefix_lm.PrefixLM:
  """`config.model` (the grammar's vocabulary) + ViT `config.vit`, or the
  Qwen2.5-VL prefix LM (`vl` preset), by `build_image_prefix_lm`."""
  return prefix_lm.build_image_prefix_lm(
      config.model, config.vit, seed=seed, vocab_size=charts_lib.vocab_size(
          config.charts.get("fixed_axes", False)))


@nnx.jit
def _sft_eval_loss(model, batch):
  return prefix_lm_loss.prefix_lm_nll(model, batch)[0]


def sft(model, charts, sft_cfg, max_len, val, seed: int, *, mesh=None,
        rules=None) -> list[dict]:
  """SFT on `charts` with the trainer's update (`StepRunner`, on `mesh`
  with `rules` when given): minibatches drawn with replacement; the
  held-out loss every `eval_every` steps."""
  runner = runner_lib.StepRunner(model, loss=prefix_lm_loss.prefix_lm_nll,
                                 loss_config=None, optim=sft_cfg.optim,
                                 steps=int(sft_cfg.steps), seed=seed,
                                 mesh=mesh, rules=rules)
  rng = np.random.default_rng(seed)
  val_arr = jax.tree.map(jax.numpy.asarray,
                         charts_lib.sft_arrays(val, max_len))
  draw = lambda _: charts_lib.sft_arrays(  # noqa: E731
      [charts[i] for i in rng.integers(0, len(charts),
                                       int(sft_cfg.batch_size))], max_len)
  return eval_loop.train_with_eval(
      runner, draw, steps=int(sft_cfg.steps),
      eval_every=int(sft_cfg.eval_every),
      eval_fn=lambda m: _sft_eval_loss(m, val_arr))


def _rows_per_update(optim, rows: int) -> int:
  return rows // max(int(optim.get("grad_accum", 1)), 1)


def make_learner(config, model) -> learner_lib.GRPOLearner:
  """`GRPOConfig(**config.grpo)`, `config.rl.optim`: one optimizer state
  over both stages (the schedule counts every update); on `config.mesh`
  fitted to a minibatch (`parallel.mesh_from_config`)."""
  gcfg = learner_lib.GRPOConfig(**config.grpo)
  rows = _rows_per_update(config.rl.optim, int(config.rl.prompts_per_step)
                          * gcfg.group_size // gcfg.num_minibatches)
  return learner_lib.GRPOLearner(
      model, gcfg, config.rl.optim,
      total_steps=int(config.rl.stage1_steps) + int(config.rl.stage2_steps),
      mesh=parallel.mesh_from_config(config, batch=rows),
      rules=config.sharding_rules)


def chart_batches(charts, prompts_per_step: int, seed: int):
  """Endless GRPO batches: `prompts_per_step` charts drawn with replacement
  (`default_rng(seed)`), each prompted by `[BOS]` under its image (the
  `prefix_inputs`), the charts themselves as the `chart` field."""
  rng = np.random.default_rng(seed)
  while True:
    batch = [charts[i] for i in rng.integers(0, len(charts),
                                             int(prompts_per_step))]
    yield {"prompts": [[charts_lib.BOS]] * len(batch), "chart": batch,
           "prefix_inputs": np.stack([charts_lib.small_image(c["image"])
                                      for c in batch])}


def grpo_stage(learner, charts, reward_cfg, rl, steps: int, seed: int,
               log: list, render=None) -> None:
  """GRPO on `charts` with `reward_cfg` (one rollout -> one update) by
  `learner.train` over `chart_batches` with key `key(seed)`; appends one
  log row per step."""

  def reward_fn(*, completions, chart: list, group_size: int, **_):
    return render_cache.chart_rollout_reward(
        [charts_lib.detokenize(t) for t in completions], chart, reward_cfg,
        group_size=group_size, render=render)

  history = learner.train(chart_batches(charts, rl.prompts_per_step, seed),
                          reward_fn, steps=int(steps),
                          key=jax.random.key(seed))
  for m in history:
    log.append({"step": m["step"] - 1, "reward": m["reward_mean"], **{
        k: m[k] for k in ("group_std", "flat_groups", "exec", "text", "vis",
                          "kl", "loss", "grad_norm")}})


# What the SFT model depends on: a run that differs only in the RL
# sections reloads it (WORKDIR/sft_seedS_<digest>.npz, or `cache_dir`'s).
_SFT_FIELDS = ("model", "vit", "charts", "sft", "max_len")


def supervised_policy(config, seed: int, sft_charts, val,
                      cache_dir: str | None = None):
  """(policy after SFT, SFT curve); saved in `cache_dir` (when given) and
  reloaded by any run with the same `_SFT_FIELDS` and seed."""
  model = make_policy(config, seed)
  meta, key = params_io.config_key(config, *_SFT_FIELDS)
  meta["seed"] = seed
  path = (os.path.join(cache_dir, f"sft_seed{seed}_{key}.npz")
          if cache_dir else None)
  mesh = parallel.mesh_from_config(config, batch=_rows_per_update(
      config.sft.optim, int(config.sft.batch_size)))
  return model, stages.params_file(model, path, meta, lambda: sft(
      model, sft_charts, config.sft, int(config.max_len), val, seed,
      mesh=mesh, rules=config.sharding_rules))


def run_one(config, seed: int, cache_dir: str | None = None) -> dict:
  """SFT, then the two GRPO stages, for one seed; held-out metrics after
  each phase on charts shared by every seed (seed 99), so phase
  differences pair by seed."""
  t0 = time.time()
  max_len, sizes = int(config.max_len), config.charts
  make = lambda n, s: charts_lib.make_charts(  # noqa: E731
      int(n), s, bool(sizes.get("fixed_axes", False)))
  sft_charts = make(sizes.sft_size, 10 * seed + 1)
  stage1 = make(sizes.stage_size, 10 * seed + 2)
  stage2 = make(sizes.stage_size, 10 * seed + 3)
  val = make(sizes.eval_size, 99)      # fixed across seeds
  timing = {"charts_s": time.time() - t0}
  base = chart.ChartRewardConfig(**config.reward)
  render = render_cache.make_renderer(base)
  t = time.time()
  model, sft_hist = supervised_policy(config, seed, sft_charts, val,
                                      cache_dir)
  timing["sft_s"] = time.time() - t
  t = time.time()
  phases = {"sft": chart_eval.evaluate(model, val, max_len, base, render)}
  timing["eval_s"] = time.time() - t
  cur = chart.CurriculumConfig.two_stage(config.rl.stage1_steps,
                                         config.rl.stage2_steps, base=base)
  learner = make_learner(config, model)
  logs = {}
  for st, data in zip(cur.stages, (stage1, stage2)):
    if not st.steps:  # a stage of 0 steps is not run (nor evaluated)
      continue
    logs[st.name] = []
    t = time.time()
    grpo_stage(learner, data, st.reward, config.rl, st.steps,
               seed + (7 if st.name == "text_vis_exec" else 0),
               logs[st.name], render)
    timing[f"{st.name}_s"] = time.time() - t
    t = time.time()
    phases[st.name] = chart_eval.evaluate(learner.policy, val, max_len, base,
                                          render)
    timing["eval_s"] += time.time() - t
  timing.update(renders=render.misses, render_cache_hits=render.hits)
  return {"phases": phases, "sft_history": sft_hist, "rl_logs": logs,
          "timing": timing, "elapsed_s": time.time() - t0}


PHASE_LABELS = {"sft": "SFT", "text_exec": "+ GRPO stage 1 (text + exec)",
                "text_vis_exec": "+ GRPO stage 2 (+ visual)"}
PHASES_CAPTION = "Chart-to-code: held-out greedy decoding after each phase"
METRICS = (("exec_rate", "exec rate"), ("data_f1", "data-value soft F1"),
           ("type_acc", "chart-type acc"), ("text_elements", "text elements"),
           ("text_reward", "R_text"), ("visual_ssim", "visual SSIM"))


def results_table(runs: list[dict], seeds,
                  caption: str = PHASES_CAPTION) -> results_lib.Table:
  """The held-out metrics after each phase, one value per seed."""
  table = results_lib.Table(
      "phases", caption, row_label="phase",
      columns=[results_lib.Column(k, label) for k, label in METRICS])
  for seed, r in zip(seeds, runs):
    for phase, m in r["phases"].items():
      table.add_seed(PHASE_LABELS.get(phase, phase), seed,
                     {c.key: m[c.key] for c in table.columns if c.key in m})
  return table


def sft_table(runs: list[dict], seeds) -> results_lib.Table:
  """The SFT curve: held-out and training NLL at each evaluation step (the
  plateau the RL stages start from)."""
  table = results_lib.Table(
      "sft_curve", "Chart-to-code SFT: token NLL during SFT",
      row_label="SFT step",
      columns=[results_lib.Column("val_loss", "held-out NLL"),
               results_lib.Column("train_loss", "train-batch NLL")])
  for seed, r in zip(seeds, runs):
    for h in r["sft_history"]:
      table.add_seed(str(h["step"]), seed, {k: h[k] for k in
                                            ("val_loss", "train_loss")})
  return table


COMPARISONS = (
    ("data_f1", "text_exec", "sft", "stage 1 − SFT"),
    ("exec_rate", "text_exec", "sft", "stage 1 − SFT"),
    ("text_reward", "text_exec", "sft", "stage 1 − SFT"),
    ("text_elements", "text_exec", "sft", "stage 1 − SFT"),
    ("data_f1", "text_vis_exec", "text_exec", "stage 2 − stage 1"),
    ("visual_ssim", "text_vis_exec", "text_exec", "stage 2 − stage 1"),
    ("data_f1", "text_vis_exec", "sft", "stages 1+2 − SFT"),
)


def _write(workdir, config, seeds, runs, t0) -> None:
  table = results_table(runs, seeds,
                        config.get("table_caption") or PHASES_CAPTION)
  ran = set.intersection(*(set(r["phases"]) for r in runs))
  comparisons = [
      results_lib.Comparison("phases", col, PHASE_LABELS[a], PHASE_LABELS[b],
                             label) for col, a, b, label in COMPARISONS
      if a in ran and b in ran]
  results_lib.write(
      workdir, "chart_to_code", tables=[table, sft_table(runs, seeds)],
      comparisons=comparisons,
      extra={"runs": [dict(r, seed=s) for s, r in zip(seeds, runs)]},
      config=config, start_time=t0)


RELEASE_SOURCES = ("hf",)  # ChartMimic's directory layout (no grain/tfds)


def run(config, workdir: str) -> dict:
  """All seeds; writes WORKDIR/results.json (the phase table and the SFT
  curve per seed, stage comparisons paired by seed; curves, timings and
  example completions under `extra`) and chart_to_code.png. Resumable by
  seed (`io.stages.run_seeds`: WORKDIR/seeds/seed_<s>.json, keyed by the
  config, is reused by a rerun of the same config; results.json is
  rewritten after every seed); each seed's SFT model is
  saved in `config.cache_dir` (default WORKDIR) for RL sweeps to share.
  """
  t0 = time.time()
  if config.data.get("source", "") in RELEASE_SOURCES:
    from jaxlab.experiments.chart_to_code import chartmimic_run  # pylint: disable=g-import-not-at-top
    return chartmimic_run.run_release(config, workdir, t0)
  runs = stages.run_seeds(
      [int(x) for x in config.seeds],
      lambda s: run_one(config, s, config.get("cache_dir") or workdir),
      workdir=workdir, config=config,
      exclude=("seeds", "cache_dir", "table_caption"),
      write=lambda done, rs: _write(workdir, config, done, rs, t0))
  chart_eval.plot_curves(runs, os.path.join(workdir, "chart_to_code.png"))
  return {f"{p}/{m}": float(np.mean([r["phases"][p][m] for r in runs]))
          for p in runs[0]["phases"] for m, _ in METRICS
          if m in runs[0]["phases"][p]}
