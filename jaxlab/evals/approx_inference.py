"""Evaluation of paper M's approximate-inference methods (Galim et al.
2026, arXiv 2506.08373): every method answers the same prompts at each KV
budget C_max, scored with `long_context.ruler_scores`.

Methods (`METHODS`):
  full       the target with its whole cache (the reference);
  draft      the draft alone (how good the draft is);
  snapkv     the "snapkv" cache policy (the target's own window queries);
  speckv     `decoding.speckv.speckv_generate` (draft answer as lookahead);
  specpc     `prompt_compression.specpc_generate` (draft-compressed prompt);
  speckv_pc  the cascade: SpecPC to `cascade_pc_budget`, then SpecKV;
  random / last_n   prompt-compression baselines;
  streaming  StreamingLLM (sink tokens + recent window; `evaluate_shared`);
  speckv_oracle  SpecKV with the target's own full-cache answer as the
             lookahead (a perfect draft; `evaluate_shared`, after "full").

`evaluate` runs each method per budget on the sampler (the toy miniature);
`evaluate_shared` does the target's long prefill once per prompt and crops
it for every KV method and budget (`decoding.shared_prefill`; a real model).
`config.methods` holds the method options (window, kernel, SpecPC sizes).
"""

import time
from typing import Any

import numpy as np

from jaxlab.decoding import prompt_compression as pc
from jaxlab.decoding import sampler
from jaxlab.decoding import shared_prefill
from jaxlab.decoding import speckv as speckv_lib
from jaxlab.evals import long_context as lc

METHODS = ("full", "draft", "snapkv", "speckv", "specpc", "speckv_pc",
           "random", "last_n", "streaming", "speckv_oracle")


def pc_config(config) -> pc.SpecPCConfig:
  m = config.methods
  return pc.SpecPCConfig(lookahead=int(m.pc_lookahead),
                         window=int(m.pc_window),
                         start_layer=int(m.pc_start_layer),
                         kernel=int(m.pc_kernel),
                         keep_window=int(m.pc_keep_window))


def run_method(name: str, budget: int | None, target, draft,
               prompts: list[list[int]], max_new: int, config
               ) -> tuple[list[list[int]], dict[str, int]]:
  """Generated tokens and the target's cache slots (prefill, decode)."""
  m = config.methods
  length = len(prompts[0])
  kv = dict(window=int(m.window), kernel=int(m.kernel), reduce=m.reduce)
  look = int(m.lookahead) or max_new
  if name == "full":
    out = sampler.generate(target, prompts, max_new_tokens=max_new)
    return out.tokens, {"prefill": length, "decode": length + max_new}
  if name == "draft":
    out = sampler.generate(draft, prompts, max_new_tokens=max_new)
    return out.tokens, {"prefill": 0, "decode": 0}
  if name == "snapkv":
    out = sampler.generate(target, prompts, max_new_tokens=max_new,
                           cache_policy="snapkv",
                           cache_policy_options=dict(budget=budget, **kv))
    return out.tokens, {"prefill": length, "decode": budget + max_new}
  if name == "speckv":
    out = speckv_lib.speckv_generate(
        target, draft, prompts, budget=budget, max_new_tokens=max_new,
        lookahead=look, prefill_pad_multiple=16, **kv)
    return out.tokens, {"prefill": length + look, "decode": budget + max_new}
  if name == "specpc":
    out, _ = pc.specpc_generate(target, draft, prompts, budget=budget,
                                max_new_tokens=max_new,
                                config=pc_config(config))
    return out.tokens, {"prefill": budget, "decode": budget + max_new}
  if name == "speckv_pc":
    pcb = int(m.cascade_pc_budget)
    out, _ = pc.speckv_pc_generate(
        target, draft, prompts, pc_budget=pcb, budget=budget,
        max_new_tokens=max_new, lookahead=look, config=pc_config(config),
        **kv)
    return out.tokens, {"prefill": min(pcb, length) + look,
                        "decode": budget + max_new}
  if name in ("random", "last_n"):
    comp = pc.COMPRESSORS.get(name)(prompts, budget=budget, seed=0,
                                    keep_window=int(m.pc_keep_window))
    out = sampler.generate(target, comp.prompts, max_new_tokens=max_new)
    return out.tokens, {"prefill": budget, "decode": budget + max_new}
  raise ValueError(f"unknown method {name!r} in methods.names; valid: full, "
                   "draft, snapkv, speckv, specpc, speckv_pc, random, last_n")


def summary(scores: dict[str, Any]) -> dict[str, float]:
  """Means of `ruler_scores`, exact match pooled by question side / task."""
  groups = scores["groups"]

  def pooled(pred):
    sel = [(v["exact"], v["n"]) for k, v in groups.items() if pred(k)]
    n = sum(c for _, c in sel)
    return float(sum(e * c for e, c in sel) / n) if n else float("nan")

  return {"exact": scores["exact"],
          "token_accuracy": scores["token_accuracy"],
          "part_recall": scores.get("part_recall", float("nan")),
          "exact_q_first": pooled(lambda k: k.endswith("/first")),
          "exact_q_last": pooled(lambda k: k.endswith("/last")),
          "exact_niah": pooled(lambda k: k.startswith("niah")),
          "exact_vt": pooled(lambda k: k.startswith("variable"))}


def importance_correlation(target, draft, examples, config) -> float:
  """Mean Spearman correlation of draft vs target SpecPC importance."""
  cfg = pc_config(config)
  rhos = []
  for ex in examples[:int(config.methods.spearman_examples)]:
    prompt = ex.prompt_ids.tolist()
    gen = sampler.generate(draft, [prompt], max_new_tokens=1).tokens[0]
    rhos.append(pc.spearman(pc.token_importance(draft, prompt, gen, cfg),
                            pc.token_importance(target, prompt, gen, cfg)))
  return float(np.mean(rhos))


def evaluate(target, draft, config, tok, examples, *, timing: bool = False
             ) -> dict[str, Any]:
  """{method: {budget: metrics}} ("full"/"draft" under every budget)."""
  prompts = [ex.prompt_ids.tolist() for ex in examples]
  max_new = max(len(ex.answer_ids) for ex in examples)
  out: dict[str, Any] = {}
  cache: dict[str, Any] = {}
  for name in config.methods.names:
    for budget in config.methods.budgets:
      budget = int(budget)
      if name in ("full", "draft") and name in cache:
        out.setdefault(name, {})[str(budget)] = cache[name]
        continue
      tokens, slots = run_method(name, budget, target, draft, prompts,
                                 max_new, config)
      rec = summary(lc.ruler_scores(examples, tokens, tokenizer=tok))
      rec.update(prefill_cache=slots["prefill"], decode_cache=slots["decode"],
                 peak_cache=max(slots["prefill"], slots["decode"]))
      if timing:  # the first call compiled; time a second one
        t0 = time.perf_counter()
        run_method(name, budget, target, draft, prompts, max_new, config)
        rec["latency_s"] = time.perf_counter() - t0
      out.setdefault(name, {})[str(budget)] = rec
      if name in ("full", "draft"):
        cache[name] = rec
  if timing and "full" in out:
    for name, per_b in out.items():
      for b, rec in per_b.items():
        rec["latency_vs_full"] = rec["latency_s"] / out["full"][b][
            "latency_s"]
  return out


def shared_answers(target, draft, config, prompts: list[list[int]], *,
                   max_new: int, eos_id: int | None = None,
                   stop_ids: tuple[int, ...] = ()
                   ) -> dict[str, dict[str, list[list[int]]]]:
  """{method: {budget: greedy answer tokens per prompt}} of every method in
  `config.methods.names` at every budget, sharing the expensive passes.

  One draft pass gives the lookahead (`methods.lookahead`, 0 = `max_new`)
  and SpecPC's first tokens; one scored target prefill per batch serves
  full, snapkv, speckv and streaming at every budget (`shared_prefill`;
  "speckv_oracle" adds a second prefill whose lookahead is the full cache's
  answer, cut to the shortest row's length); SpecPC's draft importance is
  computed once per prompt and selected per budget. Target answers stop at
  `eos_id` / `stop_ids` (kept); the draft's run `max(lookahead, 1)` tokens.
  """
  m = config.methods
  look = int(m.lookahead) or max_new
  stops = dict(eos_id=eos_id, stop_ids=tuple(stop_ids))
  drafted = sampler.generate(draft, prompts, max_new_tokens=max(look, 1),
                             pad_multiple=64).tokens
  answers: dict[str, dict[str, list[list[int]]]] = {}
  kv = dict(window=int(m.window), kernel=int(m.kernel), sink=int(m.sink))
  sp = shared_prefill.scored_prefill(target, prompts, drafted,
                                     window=int(m.window), reduce=m.reduce,
                                     room=max_new + 16)
  cfg = pc_config(config)
  importance = ([pc.token_importance(draft, p, d[:cfg.lookahead], cfg)
                 for p, d in zip(prompts, drafted)]
                if "specpc" in m.names else None)
  oracle = None
  for name in m.names:
    for budget in (str(int(b)) for b in m.budgets):
      if name in ("full", "draft") and name in answers:
        answers[name][budget] = next(iter(answers[name].values()))
      elif name == "draft":
        answers[name] = {budget: drafted}
      elif name == "speckv_oracle":  # the target's own answer as lookahead
        if oracle is None:
          oracle = shared_prefill.scored_prefill(
              target, prompts, next(iter(answers["full"].values())),
              window=int(m.window), reduce=m.reduce, room=max_new + 16)
        answers.setdefault(name, {})[budget] = (
            shared_prefill.generate_from_prefill(
                target, oracle, "speckv", prompts, budget=int(budget),
                max_new_tokens=max_new, **stops, **kv))
      elif name in shared_prefill.CROPS:
        answers.setdefault(name, {})[budget] = (
            shared_prefill.generate_from_prefill(
                target, sp, name, prompts, budget=int(budget),
                max_new_tokens=max_new, **stops, **kv))
      elif name == "specpc":
        comp = pc.specpc_compress(prompts, budget=int(budget), draft=draft,
                                  config=cfg, draft_tokens=drafted,
                                  importance=importance)
        answers.setdefault(name, {})[budget] = sampler.generate(
            target, comp.prompts, max_new_tokens=max_new, **stops).tokens
      elif name in ("random", "last_n"):
        comp = pc.COMPRESSORS.get(name)(prompts, budget=int(budget), seed=0,
                                        keep_window=cfg.keep_window)
        answers.setdefault(name, {})[budget] = sampler.generate(
            target, comp.prompts, max_new_tokens=max_new, **stops).tokens
      else:
        raise ValueError(f"method {name!r} has no shared-prefill evaluation;"
                         f" valid: {METHODS} less speckv_pc")
  return answers


def evaluate_shared(target, draft, config, tok, examples
                    ) -> list[dict[str, Any]]:
  """Per example: {"correct": {method: {budget: 0/1}}, "agree": ...}.

  The answers of `shared_answers` (`methods.max_new_tokens` each, stopping
  at the tokenizer's eos). "correct" = the needle's value appears in the
  decoded answer (`part_recall`); "agree" = the greedy answer equals the
  full cache's token for token.
  """
  prompts = [ex.prompt_ids.tolist() for ex in examples]
  answers = shared_answers(target, draft, config, prompts,
                           max_new=int(config.methods.max_new_tokens),
                           eos_id=tok.eos_id)
  full = next(iter(answers["full"].values())) if "full" in answers else None
  out = []
  for i, ex in enumerate(examples):
    rec = {"correct": {}, "agree": {}}
    for name, per_b in answers.items():
      for b, toks in per_b.items():
        score = lc.ruler_scores([ex], [toks[i]], tokenizer=tok)
        rec["correct"].setdefault(name, {})[b] = score["part_recall"]
        if full is not None:
          rec["agree"].setdefault(name, {})[b] = float(
              list(toks[i]) == list(full[i]))
    out.append(rec)
  return out
