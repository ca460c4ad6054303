"""PMC's miniature methods (spec B): every unlearning method from one start.

The library side of `jaxlab.experiments.pmc`: a method's unlearning config
(`unlearn_config`: `pmc.default_config()` with the `unlearn` section, the
loss `unlearn_<method>`), unlearning a clone of the pre-trained model with
PMC (`pmc.run_pmc`) or a baseline (GA, GD, NPO, SimNPO, IDK, DPO through
`self_generated.run_self_generated`), and its evaluation
(`pmc.evaluate_unlearning` + the multiple-choice least-likely attack + the
log-prob drift of the forget values, `jaxlab.evals.unlearning`); and the
lottery machine's final forget mass / top-colour mass per seed. On TOFU
as released (`jaxlab.data.tofu.Splits`), `evaluate_tofu` is the evaluation:
PMC's UQ / utility (unlearning/experiment.py) and TOFU's model utility /
forget quality (`jaxlab.evals.tofu`).
"""

from __future__ import annotations

from flax import nnx
import jax
import numpy as np

from jaxlab.data.synthetic import facts as facts_lib
from jaxlab.evals import tofu as tofu_evals
from jaxlab.objectives import tofu_stats
from jaxlab.evals import unlearning as unlearning_evals
from jaxlab.io import stages
from jaxlab.models import decoder
from jaxlab.models import registry as model_registry
from jaxlab.objectives import pmc
from jaxlab.objectives import self_generated as sg
from jaxlab.train import runner

METRICS = ("uq", "utility", "recall_forget", "recall_forget_paraphrased",
           "recall_retain", "recall_world", "leak_greedy", "leak_prefill",
           "recall_prefill", "leak_sampling", "recall_real_authors",
           "leak_prefill_fixed", "recall_prefill_fixed",
           "mc_least_likely_acc", "mc_most_likely_acc", "drift",
           "abs_drift", "model_utility", "forget_quality", "ks_statistic")
# (metric key, Splits field) of PMC's evaluation on TOFU (spec B.10): greedy
# ROUGE-L recall against the ground truth on each (the retain set's 400-row
# subsample).
TOFU_RECALLS = (("forget", "forget"),
                ("forget_paraphrased", "forget_paraphrased"),
                ("retain", "retain_eval"), ("world", "world"),
                ("real_authors", "real_authors"))


def prompts(items):
  """The QA prompts of fact items."""
  return [facts_lib.qa_prompt(x.question) for x in items]


def value_pool(fs):
  """Attribute -> every value of that attribute in the fact set (MC decoys)."""
  pool = {}
  for x in fs.forget + fs.retain + fs.world:
    pool.setdefault(x.attribute, set()).add(x.value)
  return {k: sorted(v) for k, v in pool.items()}


def evaluate(model, tok, fs, cfg, seed, *, base=None, authors=()):
  """pmc.evaluate_unlearning + the MC attack + drift against `base`."""
  out = pmc.evaluate_unlearning(
      model, tok, fs, prompt_fn=facts_lib.qa_prompt,
      key=jax.random.key(1000 + seed), real_authors=authors, **dict(cfg.eval))
  p = cfg.probes
  out.update(unlearning_evals.mc_attack(
      model, tok, fs.forget, prompts(fs.forget), value_pool(fs),
      num_options=p.mc_options, normalize=p.mc_normalize, seed=seed,
      max_len=p.max_len))
  if base is not None:
    out.update(unlearning_evals.value_drift(model, base, tok, fs.forget,
                                            max_len=p.max_len))
  return out


def tofu_generate(model, tok, cfg, prompt_fn, questions, generate_fn=None,
                  memo: dict[str, str] | None = None):
  """Greedy answers to `questions` (`eval.max_new_tokens` new tokens).

  `memo` (question -> answer of this model): questions already answered are
  not generated again (greedy decoding answers a question the same way
  each time; TOFU's tasks ask PMC's recall sets' questions again), and the
  new answers are added to it."""
  if memo is None:
    memo = {}
  todo = list(dict.fromkeys(q for q in questions if q not in memo))
  if todo:
    memo.update(zip(todo, sg.generate_text(
        model, tok, [prompt_fn(q) for q in todo],
        max_new_tokens=int(cfg.eval.max_new_tokens),
        batch_size=int(cfg.unlearn.sample_batch_size),
        generate_fn=generate_fn)))
  return [memo[q] for q in questions]


def tofu_task_stats(model, tok, splits, cfg, prompt_fn, *, generate=True,
                    only=None, generate_fn=None,
                    memo: dict[str, str] | None = None):
  """`jaxlab.objectives.tofu_stats.task_stats` of every task in `splits.perturbed`
  (or the tasks in `only`): task -> per-item arrays (+ "generations");
  `memo` as `tofu_generate`'s."""
  out = {}
  for task, rows in splits.perturbed.items():
    if only is not None and task not in only:
      continue
    _, base_key, pert_key = tofu_evals.TASKS[task]
    gens = (tofu_generate(model, tok, cfg, prompt_fn,
                          [r["question"] for r in rows], generate_fn,
                          memo=memo)
            if generate else None)
    out[task] = tofu_stats.task_stats(
        model, tok, rows, prompt_fn, base_answer_key=base_key,
        perturbed_answer_key=pert_key, generations=gens,
        max_len=int(cfg.unlearn.max_len),
        batch_size=int(cfg.unlearn.sample_batch_size))
    if gens is not None:
      out[task]["generations"] = gens
  return out


def evaluate_tofu(model, tok, splits, cfg, prompt_fn, *, retain_forget=None,
                  generate_fn=None) -> dict:
  """PMC's UQ / utility and TOFU's model utility / forget quality on TOFU.

  PMC (unlearning/experiment.py): greedy answers, ROUGE-L recall against the
  ground truth on the forget set, its paraphrases, the retain subsample,
  world facts and real authors (`recall_<split>`); `uq` =
  `pmc.unlearning_quality`, `utility` = `pmc.utility` of the last three.
  TOFU (`jaxlab.evals.tofu`), when `splits.perturbed` has its tasks:
  `tofu_<task>_{rouge,prob,truth_ratio}` and `model_utility`; with
  `retain_forget` (the retain model's forget-task stats) also
  `forget_quality` and `ks_statistic`. "_artifacts" holds the generations
  and per-item arrays the numbers come from.
  """
  out, arts = {}, {}
  memo: dict[str, str] = {}  # each question is generated once
  for key, field in TOFU_RECALLS:
    items = getattr(splits, field)
    if not items:
      continue
    gens = tofu_generate(model, tok, cfg, prompt_fn,
                         [x.question for x in items], generate_fn, memo=memo)
    arts[f"generations_{key}"] = gens
    out[f"recall_{key}"] = pmc.mean_recall(gens, [x.answer for x in items])
  out["uq"] = pmc.unlearning_quality(out["recall_forget"],
                                     out["recall_forget_paraphrased"])
  out["utility"] = pmc.utility([out[f"recall_{k}"] for k in
                                ("retain", "world", "real_authors")
                                if f"recall_{k}" in out])
  stats = tofu_task_stats(model, tok, splits, cfg, prompt_fn,
                          generate_fn=generate_fn, memo=memo)
  per_task = {}
  for task, st in stats.items():
    per_task[task] = tofu_evals.task_metrics(
        task, **{k: v for k, v in st.items() if k != "generations"})
    out.update({f"tofu_{task}_{m}": v for m, v in per_task[task].items()})
    arts[f"tofu_{task}"] = {k: np.asarray(v).tolist() if k != "generations"
                            else v for k, v in st.items()}
  if all(t in per_task for t in tofu_evals.UTILITY_TASKS):
    out["model_utility"] = tofu_evals.model_utility(per_task)
  out["_artifacts"] = arts
  if retain_forget is not None:
    out.update(forget_quality_of(out, retain_forget))
  return out


def forget_quality_of(result: dict, retain_forget: dict) -> dict:
  """TOFU's `forget_quality` and `ks_statistic` of an `evaluate_tofu`
  result (from its per-item forget losses in "_artifacts") against the
  retain model's (`retain_forget`: its `avg_paraphrased_loss` and
  `average_perturb_loss` on the forget task); {} without a forget task."""
  forget = result.get("_artifacts", {}).get("tofu_forget")
  if forget is None:
    return {}
  return tofu_evals.forget_quality(
      forget["avg_paraphrased_loss"], forget["average_perturb_loss"],
      retain_forget["avg_paraphrased_loss"],
      retain_forget["average_perturb_loss"])


def unlearn_config(cfg, method, seed):
  """`pmc.default_config()` with `cfg.unlearn` for `method` and `seed`."""
  u = dict(cfg.unlearn)
  c = pmc.default_config()
  beta = u.pop("simnpo_beta") if method == "simnpo" else u["beta"]
  u.pop("simnpo_beta", None)
  c.update(u)
  c.beta = beta
  c.loss = f"unlearn_{method}"
  c.seed = seed
  return c


def dpo_arrays(base, tok, prompts, chosen, rejected, max_len):
  """DPO's extra forget rows: rejected answers + both reference NLLs."""
  rej = sg.encode_pairs(tok, prompts, rejected, max_len=max_len)
  ref_chosen = sg.sequence_nll_dataset(base, tok, prompts, chosen,
                                       max_len=max_len)
  extra = {"rejected_inputs": rej["inputs"],
           "rejected_targets": rej["targets"],
           "rejected_mask": rej["mask"],
           "rejected_ref_nll": sg.sequence_nll_dataset(
               base, tok, prompts, rejected, max_len=max_len)}
  return ref_chosen, extra


def unlearn_and_eval(method, seed, base, cfg, tok, fs, authors, *,
                     prompt_fn=facts_lib.qa_prompt, evaluate_fn=None) -> dict:
  """Unlearns from a clone of `base` with `method`; its eval and extras.

  `fs` has `forget` / `retain` items with `question` and `answer` (a
  `FactSet`, or `jaxlab.data.tofu.Splits`); `prompt_fn` formats a question;
  `evaluate_fn(model)` replaces `evaluate` (the TOFU run's `evaluate_tofu`).
  """
  f_prompts = [prompt_fn(x.question) for x in fs.forget]
  r_prompts = [prompt_fn(x.question) for x in fs.retain]
  r_answers = [x.answer for x in fs.retain]
  model = nnx.clone(base)
  ucfg = unlearn_config(cfg, method, seed)
  ucfg.warmup_steps = pmc.warmup_steps(ucfg, len(fs.forget))
  extra = {}
  if method == "pmc":
    res = pmc.run_pmc(model, tok, forget_questions=[x.question
                                                    for x in fs.forget],
                      retain_prompts=r_prompts, retain_answers=r_answers,
                      config=ucfg, prompt_fn=prompt_fn)
    extra["pmc_cache_done_frac"] = res["history"][-1]["cache_done_frac"]
    extra["pmc_skipped_empty_questions"] = res["skipped_empty_questions"]
  else:
    truth = [x.answer for x in fs.forget]
    answers = ([cfg.idk_answer] * len(fs.forget)
               if method in ("idk", "dpo") else truth)
    ref, extra_arrays = None, None
    if method == "npo":
      ref = sg.sequence_nll_dataset(base, tok, f_prompts, answers,
                                    max_len=ucfg.max_len)
    if method == "dpo":  # chosen "I don't know.", rejected the truth
      ref, extra_arrays = dpo_arrays(base, tok, f_prompts, answers,
                                      truth, ucfg.max_len)
    sg.run_self_generated(model, tok, forget_prompts=f_prompts,
                          retain_prompts=r_prompts,
                          retain_answers=r_answers, score_fn=None,
                          fixed_forget_answers=answers,
                          ref_forget_nll=ref,
                          extra_forget_arrays=extra_arrays, config=ucfg)
  if evaluate_fn is not None:
    return {"eval": evaluate_fn(model), "extra": extra}
  return {"eval": evaluate(model, tok, fs, cfg, seed, base=base,
                        authors=authors), "extra": extra}


def lottery_runs(lottery: dict) -> dict:
  """The lottery machine (spec B.7) per seed with and without the retain
  set: {"with_retain" / "no_retain": [(seed, history [R+1, C])]} for the
  `cfg.lottery` fields (`seeds` and `pmc.lottery_machine`'s keywords)."""
  lc = dict(lottery)
  seeds = lc.pop("seeds")
  return {("with_retain" if use_retain else "no_retain"):
          [(s, pmc.lottery_machine(use_retain=use_retain, seed=s, **lc))
           for s in seeds] for use_retain in (True, False)}


def pretrained_model(cfg, tok, train, seed: int, workdir: str, fields):
  """The tiny LM of `seed` after memorising the QA items `train`
  (`runner.train_lm` with `cfg.pretrain`): a `jaxlab.io.stages` stage keyed
  by `fields` and the seed, WORKDIR/pretrained_seed<S>_<digest>.npz
  (`stages.keyed_path`: another pre-training config keeps its own file).
  Returns (model, final training loss, reloaded?)."""
  mcfg = model_registry.decoder_config(cfg.model, vocab_size=tok.vocab_size)
  base = decoder.Decoder(mcfg, rngs=nnx.Rngs(seed))
  key = stages.key(cfg, fields, seed=int(seed))
  path = stages.keyed_path(workdir, f"pretrained_seed{seed}", key, "npz")
  reused = stages.is_current(path, key)

  def pretrain() -> float:
    data = sg.encode_for_lm(tok, prompts(train), [x.answer for x in train],
                            max_len=cfg.pretrain.max_len)
    p = dict(cfg.pretrain)
    p.pop("max_len")
    logs = runner.train_lm(base, data, seed=seed, log_every=100, **p)
    return float(logs[-1]["loss"])

  final_loss = stages.params_file(base, path, key, pretrain)
  return base, final_loss, reused
