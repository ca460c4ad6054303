"""Experiment "speckv": draft-based approximate inference (paper M).

For each seed: train a target and a smaller draft decoder (masked
next-token loss on the answer, the trainer's step with the whole
`config.optim`) on word-level RULER-like prompts, then answer held-out
prompts of `task.length` tokens with every method of `methods.names` at
each budget C_max of `methods.budgets`:

  full       the target with its whole cache (the reference);
  draft      the draft alone (how good the draft is);
  snapkv     "snapkv" cache policy (the target's own window queries);
  speckv     `kv_policies.speckv_generate` (draft answer as lookahead);
  specpc     `prompt_compression.specpc_generate` (draft-compressed prompt);
  speckv_pc  the cascade: SpecPC to `cascade_pc_budget`, then SpecKV;
  random / last_n   prompt-compression baselines.

Metrics per method and budget: exact match, token accuracy, RULER's part
recall, exact match split by question side and task family, and the cache
the target holds (prefill and decode slots per layer and KV head). The
Spearman correlation of draft and target SpecPC importance is measured on
the first `spearman_examples` prompts. `evaluate(..., timing=True)` (the
`kv_compression` benchmark) also times each method against full.

Stages (`jaxlab.io.stages`): `seed{N}/{target,draft}.npz` are reused by a
run whose `TRAIN_FIELDS` (less `TRAIN_EXCLUDE`) and seed are the same,
`seed{N}/eval.json` by one whose `EVAL_FIELDS` are the same too.
"""

import dataclasses
import os
import time
from typing import Any

import numpy as np
from flax import nnx

from jaxlab.experiments import results as results_lib
from jaxlab.decoding import kv_policies
from jaxlab.decoding import prompt_compression as pc
from jaxlab.decoding import sampler
from jaxlab.evals import long_context as lc
from jaxlab.io import params as params_io
from jaxlab.io import stages
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry
from jaxlab.train import runner as runner_lib

HELD_OUT_SEED = 999_999
FILLER_WORDS = tuple(f"w{i}" for i in range(32))
KEYS = tuple(f"key{i}" for i in range(16))
VAR_NAMES = tuple(f"var{i}" for i in range(16))
TEMPLATES = lc.RulerTemplates(
    filler="", keys=KEYS, value_alphabet="0123456789", value_len=4,
    value_sep=" , ", needle="{key} : {value} . ", question="? {key} . ",
    answer_lead="? {key} : ", multivalue_question="?? {key} . ",
    multivalue_lead="?? {key} : ", var_names=VAR_NAMES,
    vt_first="{name} = {value} . ", vt_next="{name} = {prev} . ",
    vt_question="?= {value} . ", vt_lead="?= {value} : ", name_sep=" ",
    question_first_lead="answer : ")


class WordTokenizer:
  """Whitespace words -> ids; a run of digits is one token per digit."""

  PAD, BOS, EOS = 0, 1, 2

  def __init__(self):
    words = (["<pad>", "<bos>", "<eos>", ".", ":", ",", "?", "??", "?=",
              "=", "answer"] + list(FILLER_WORDS) + list(KEYS) +
             list(VAR_NAMES) + list("0123456789"))
    self.words = words
    self.ids = {w: i for i, w in enumerate(words)}

  @property
  def vocab_size(self) -> int:
    return len(self.words)

  bos_id, eos_id, pad_id = BOS, EOS, PAD

  def encode(self, text: str) -> list[int]:
    out = []
    for w in text.replace(".", " . ").replace(",", " , ").split():
      if w.isdigit():
        out.extend(self.ids[c] for c in w)
      elif w in self.ids:
        out.append(self.ids[w])
      else:
        raise ValueError(f"word {w!r} is not in the task vocabulary")
    return out

  def decode(self, ids) -> str:
    text = ""
    for i in ids:
      w = self.words[int(i)] if 0 <= int(i) < len(self.words) else "?"
      if w in ("<pad>", "<bos>", "<eos>"):
        continue
      glue = w.isdigit() and text[-1:].isdigit()
      text += w if glue or not text else " " + w
    return text


def _templates(rng: np.random.Generator, length: int) -> lc.RulerTemplates:
  sentences = [" ".join(FILLER_WORDS[j] for j in
                        rng.integers(0, len(FILLER_WORDS),
                                     rng.integers(3, 7))) + " . "
               for _ in range(length // 4 + 4)]
  return dataclasses.replace(TEMPLATES, filler="".join(sentences))


def make_example(tok, rng: np.random.Generator, *, task: str,
                 question_first: bool, length: int, config
                 ) -> lc.RulerExample:
  t = config.task
  return lc.ruler_example(
      task, tok, length=length, depth=float(rng.uniform()), rng=rng,
      question_first=question_first, num_keys=int(t.num_keys),
      num_values=int(t.num_values), num_hops=int(t.num_hops),
      templates=dataclasses.replace(_templates(rng, length),
                                    value_len=int(t.value_len)))


def training_arrays(tok, config, seed: int) -> dict[str, np.ndarray]:
  """Prompt + answer + EOS rows (random lengths), loss on answer and EOS."""
  t = config.task
  rng = np.random.default_rng([int(t.data_seed), int(seed)])
  rows = []
  for _ in range(int(t.train_examples)):
    task = t.tasks[rng.integers(len(t.tasks))]
    qf = bool(t.question_first[rng.integers(len(t.question_first))])
    length = int(rng.integers(int(t.min_train_length), int(t.length) + 1))
    while True:
      try:
        ex = make_example(tok, rng, task=task, question_first=qf,
                          length=length, config=config)
        break
      except ValueError:
        length += 16
    rows.append((ex.prompt_ids, np.append(ex.answer_ids, tok.EOS)))
  width = max(len(p) + len(a) for p, a in rows)
  seq = np.full((len(rows), width), tok.PAD, np.int32)
  mask = np.zeros((len(rows), width), bool)
  for i, (p, a) in enumerate(rows):
    seq[i, :len(p)] = p
    seq[i, len(p):len(p) + len(a)] = a
    mask[i, len(p):len(p) + len(a)] = True
  return {"inputs": seq[:, :-1], "targets": seq[:, 1:],
          "loss_mask": mask[:, 1:]}


def held_out(tok, config) -> list[lc.RulerExample]:
  t = config.task
  out = []
  for ti, task in enumerate(t.tasks):
    for qi, qf in enumerate(t.question_first):
      rng = np.random.default_rng([HELD_OUT_SEED, ti, qi])
      out += [make_example(tok, rng, task=task, question_first=bool(qf),
                           length=int(t.length), config=config)
              for _ in range(int(t.samples))]
  return out


def build_models(config, vocab_size: int, seed: int):
  target_cfg = model_registry.decoder_config(config.model,
                                             vocab_size=vocab_size)
  draft_cfg = target_cfg.replace(**dict(config.draft))
  return (decoder_lib.Decoder(target_cfg, rngs=nnx.Rngs(int(seed))),
          decoder_lib.Decoder(draft_cfg, rngs=nnx.Rngs(int(seed) + 1000)))


def train_lm(model, data: dict[str, np.ndarray], config, seed: int
             ) -> list[dict[str, float]]:
  """`runner.train_lm` with the optimizer of the whole `config.optim`
  section and `config.train`'s steps, batch size and logging."""
  return runner_lib.train_lm(model, data, steps=int(config.train.steps),
                             batch_size=int(config.train.batch_size),
                             seed=int(seed), optim=config.optim,
                             log_every=int(config.train.log_every))


def train_models(config, tok, seed: int):
  """(target, draft, {"target": curve, "draft": curve}) via `train_lm`."""
  data = training_arrays(tok, config, seed)
  target, draft = build_models(config, tok.vocab_size, seed)
  curves = {}
  for name, model in (("target", target), ("draft", draft)):
    curves[name] = train_lm(model, data, config, seed)
  return target, draft, curves


def save_params(model, path: str) -> None:
  params_io.save(model, path)


def load_params(model, path: str):
  params_io.load(model, path)
  return model


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
    out = kv_policies.speckv_generate(
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


def _summary(scores: dict[str, Any]) -> dict[str, float]:
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
      rec = _summary(lc.ruler_scores(examples, tokens, tokenizer=tok))
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


# What each stage depends on (`jaxlab.io.stages`). The trained target and
# draft: both models, the task (the training prompts; not the held-out
# count `task.samples`), the optimizer, training and the seed. Their
# evaluation also: the methods and the whole task (the held-out prompts).
# A run that changes only `methods` re-evaluates the saved models.
TRAIN_FIELDS = ("model", "draft", "task", "optim", "train")
TRAIN_EXCLUDE = ("task.samples",)
EVAL_FIELDS = ("methods", "task")


PLAN = stages.Plan(TRAIN_FIELDS, EVAL_FIELDS, train_exclude=TRAIN_EXCLUDE)
train_key, eval_key = PLAN.train_key, PLAN.eval_key


def seed_models(config, tok, seed: int, seed_dir: str):
  """Trained (target, draft, curves): `seed_dir/{target,draft}.npz` when
  they were trained with this `train_key`, else trained (and saved)."""

  def train():
    target, draft, curves = train_models(config, tok, seed)
    return {"target": target, "draft": draft}, curves

  def init():
    target, draft = build_models(config, tok.vocab_size, seed)
    return {"target": target, "draft": draft}

  models, curves = stages.cached(os.path.join(seed_dir, "{name}.npz"),
                                 train_key(config, seed), train, kind="npz",
                                 init=init)
  return models["target"], models["draft"], curves


COLUMNS = [
    results_lib.Column("exact", "exact %", 1, 100),
    results_lib.Column("part_recall", "part recall %", 1, 100),
    results_lib.Column("exact_q_first", "exact q-first %", 1, 100),
    results_lib.Column("exact_q_last", "exact q-last %", 1, 100),
    results_lib.Column("exact_niah", "exact NIAH %", 1, 100),
    results_lib.Column("exact_vt", "exact VT %", 1, 100),
    results_lib.Column("peak_cache", "peak cache", 0, spread=False),
    results_lib.Column("decode_cache", "decode cache", 0, spread=False),
]


def run(config, workdir: str) -> dict[str, Any]:
  t0 = time.time()
  tok = WordTokenizer()
  examples = held_out(tok, config)
  per_seed = []
  for seed in config.seeds:
    seed_dir = os.path.join(workdir, f"seed{seed}")
    def evaluate_seed(seed=seed, seed_dir=seed_dir):
      target, draft, curves = seed_models(config, tok, seed, seed_dir)
      # Timed (a second, compiled call per method): the kv_compression
      # benchmark reads seed 0's latencies from here instead of recompiling.
      metrics = evaluate(target, draft, config, tok, examples, timing=True)
      rho = importance_correlation(target, draft, examples, config)
      return {"seed": int(seed), "learning_curves": curves,
              "methods": metrics, "spearman": rho}
    per_seed.append(stages.cached(os.path.join(seed_dir, "eval.json"),
                                  eval_key(config, seed), evaluate_seed))

  tables, comparisons = [], []
  for b in config.methods.budgets:
    table = results_lib.Table(
        f"budget_{b}", f"C_max = {b} of {config.task.length} prompt tokens "
        f"({len(examples)} held-out prompts)", COLUMNS, row_label="method")
    for rec in per_seed:
      for name in config.methods.names:
        m = rec["methods"][name][str(b)]
        table.add_seed(name, rec["seed"], {c.key: m[c.key] for c in COLUMNS})
    tables.append(table)
    names = set(config.methods.names)
    for a, ref, col in (("speckv", "snapkv", "exact"),
                        ("speckv", "snapkv", "exact_q_first"),
                        ("specpc", "random", "exact"),
                        ("specpc", "last_n", "exact"),
                        ("speckv_pc", "speckv", "exact")):
      if a in names and ref in names:
        comparisons.append(results_lib.Comparison(table.id, col, a, ref))
  corr = results_lib.Table(
      "importance", "Spearman correlation of draft vs target SpecPC token "
      "importance", [results_lib.Column("spearman", "Spearman ρ", 3)],
      row_label="pair")
  for rec in per_seed:
    corr.add_seed("draft vs target", rec["seed"],
                  {"spearman": rec["spearman"]})
  tables.append(corr)
  extra = {"seeds": [int(s) for s in config.seeds], "per_seed": per_seed}
  results_lib.write(workdir, "speckv", tables=tables, comparisons=comparisons,
                    extra=extra, config=config, start_time=t0)
  return extra
