r"""Trust-GRPO (paper G) on its released data, from Qwen2.5-VL checkpoints.

    python -m jaxlab.main --config=trust_grpo:paper,short \
        --config.init_from=QWEN2_5_VL_DIR --config.trm.init_from=TRM_DIR \
        --config.data.path=SOPHIAVL_R1_130K_DIR \
        --config.eval_data.path=MATHVISTA_DIR --workdir=W

The `paper` preset's path (`data.source="hf"`), composed of library parts:

1. Rows: SophiaVL-R1-130k's layout (`jaxlab.data.sophiavl.read_train`:
   problem, problem_type, options, solution, path) and MathVista's
   (`read_eval`: question, choices, answer, answer_type, precision,
   query, decoded_image); `data.max_rows` / `eval_data.max_rows`.
2. Policy: the Qwen2.5-VL of `init_from` (`jaxlab.evals.vl_chat.VLChat`:
   weights, tokenizer, chat template, processor). Its prompt is
   SophiaVL-R1's (`rewards.sophiavl.policy_question`, `SYSTEM_PROMPT`),
   the image first in the user turn as `RLHFDataset` puts it. For GRPO
   the checkpoint is wrapped as a prefix LM
   (`models.qwen2_vl_prefix.Qwen2VLPrefixLM.wrap`, `head_ids` = the
   rendered chat up to the image, so [head; image; question] is exactly
   the chat template's sequence, logits equal to `Qwen2VL.forward` on it)
   with every image resized to `real.image_size` (one static grid); the
   rollout's prefix hook feeds the images.
3. GRPO: `jaxlab.rl.learner.GRPOLearner` (`config.grpo`, `config.optim`),
   reward R = R^o + gamma alpha exp(-t/T) R^t
   (`rewards.thinking.combine_trust_rewards`, the variant's `TrustConfig`
   from `rewards.trust_variants`), R^o SophiaVL-R1's outcome score by
   problem type (`rewards.sophiavl.outcome_score`), R^t the thinking
   reward model of `trm.init_from` (`rewards.sophiavl.
   VLThinkingRewardModel`: its prompt, greedy reply, `extract_score`),
   queried only where the variant's switches use it (the code's
   saturated-group skip (b) and R^o >= 0.2 rule (c)).
4. Accuracy: greedy replies (`VLChat.answer_images`, README's evaluation
   system prompt, MathVista's `query` as the question, VLMEvalKit's pixel
   bounds `real.eval_min_pixels` / `eval_max_pixels`) scored by
   MathVista's matching (`jaxlab.evals.mathvista`), for the checkpoint
   before training ("init_from") and after each variant's GRPO.

Writes WORKDIR/results.json (table "accuracy": MathVista accuracy per
policy; `data.rows` = the training rows read and the evaluation rows
read, `extra.eval_data` the evaluation set's provenance), replies.json
(each policy's replies, predictions and verdicts per evaluation row) and
train_history.json (per-step rewards, gamma, TRM calls).
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab import parallel
from jaxlab.data import sophiavl as sophiavl_data
from jaxlab.data import vision_processor
from jaxlab.evals import mathvista
from jaxlab.evals import vl_chat
from jaxlab.experiments import results as results_lib
from jaxlab.models import qwen2_vl_prefix
from jaxlab.rewards import sophiavl
from jaxlab.rewards import thinking as thinking_rewards
from jaxlab.rewards import trust_variants
from jaxlab.rl import learner as learner_lib

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"


def _size(value) -> tuple[int, int]:
  return ((int(value), int(value)) if np.ndim(value) == 0
          else tuple(int(v) for v in value))


def fixed_image(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
  """uint8 `[H, W, 3]` -> float32 `[h, w, 3]` in [0, 1] at `size` (PIL
  bicubic, the Qwen-VL processor's resampling)."""
  chw = vision_processor.resize(np.ascontiguousarray(img.transpose(2, 0, 1)),
                                *size)
  return (chw.transpose(1, 2, 0).astype(np.float32) / 255.0)


class PolicyPrompts:
  """SophiaVL-R1 prompts of the training rows, split for the prefix LM.

  The chat template's rendering of row i (system prompt, user turn
  [image, question], generation prompt; one image placeholder) is made on
  first use and kept: `head` is the part before `<|vision_start|>` (the
  same for every row), `tail(i)` the part after `<|vision_end|>`,
  `prompt_str(i)` the whole prompt decoded with special tokens skipped
  (what SophiaVL-R1's reward manager shows the TRM).
  """

  def __init__(self, chat, rows):
    self.chat, self.rows = chat, rows
    tok = chat.tokenizer
    self._vs, self._ve = tok.token_id(VISION_START), tok.token_id(VISION_END)
    self._cache: dict[int, tuple[list[int], str]] = {}
    self.head = None   # set by the first rendering

  def _render(self, i: int) -> tuple[list[int], str]:
    if i not in self._cache:
      ids = self.chat.prompt_ids(
          sophiavl.policy_question(self.rows[i]), media="image",
          num_images=1, system=sophiavl.SYSTEM_PROMPT)
      i0, i1 = ids.index(self._vs), ids.index(self._ve)
      if self.head is None:
        self.head = ids[:i0]
      elif ids[:i0] != self.head:
        raise ValueError("the chat template renders different text before "
                         "the image for different rows")
      self._cache[i] = (ids[i1 + 1:], self.chat.tokenizer.decode(
          ids, skip_special_tokens=True))
    return self._cache[i]

  def tail(self, i: int) -> list[int]:
    return self._render(i)[0]

  def prompt_str(self, i: int) -> str:
    return self._render(i)[1]


class TrustReward:
  """R = R^o + gamma alpha exp(-t/T) R^t of a rollout batch of real rows.

  R^t is asked of the TRM only where the variant's `TrustConfig` can use
  it: not for saturated groups under (b), not below R^o 0.2 under (c),
  never for outcome-only.
  """

  def __init__(self, rows, prompts: PolicyPrompts, image_fn, tokenizer,
               trm, trust, *, total_steps: int):
    self.rows, self.prompts, self.image_fn = rows, prompts, image_fn
    self.tok, self.trm, self.trust = tokenizer, trm, trust
    self.total_steps = total_steps
    self.trm_calls = 0

  def _needs_thinking(self, ro_g: np.ndarray) -> np.ndarray:
    t = self.trust
    need = np.ones(ro_g.shape, bool)
    if t.skip_saturated_groups and (np.all(ro_g >= t.saturated_hi)
                                    or np.all(ro_g <= t.saturated_lo)):
      need[:] = False
    if t.thinking_min_outcome is not None:
      need &= ro_g >= t.thinking_min_outcome
    return need

  def from_fields(self, *, completions, row, step: int, group_size: int,
                  **_):
    g = group_size
    replies = [self.tok.decode(c, skip_special_tokens=True)
               for c in completions]
    idx = [int(i) for i in row]
    ro = np.asarray([sophiavl.outcome_score(
        r, self.rows[i]["solution"], self.rows[i].get("problem_type", ""))
                     for r, i in zip(replies, idx)], np.float32)
    metrics = {"outcome": float(ro.mean()),
               "format": float(np.mean([sophiavl.format_ok(r)
                                        for r in replies]))}
    if self.trust is None:
      return ro, metrics
    rt = np.zeros_like(ro)
    ask = [p * g + int(j) for p in range(len(ro) // g)
           for j in np.flatnonzero(self._needs_thinking(ro[p * g:(p + 1) * g]))]
    if ask:   # the TRM scores the batch's pairs in one call
      rt[ask] = self.trm.scores(
          [self.prompts.prompt_str(idx[k]) for k in ask],
          [replies[k].replace("$$", "").replace("$", "") for k in ask],
          [self.image_fn(idx[k]) for k in ask])
      self.trm_calls += len(ask)
    r, m = thinking_rewards.combine_trust_rewards(
        ro, rt, g, step, self.trust, total_steps=self.total_steps)
    metrics.update(thinking=float(np.mean(rt)),
                   gamma_mean=float(np.mean(np.asarray(m["gamma"]))),
                   gamma_lt1_groups=int(np.sum(np.asarray(m["gamma"]) < 1)),
                   thinking_weight=float(np.mean(
                       np.asarray(m["thinking_weight"]))),
                   trm_calls=self.trm_calls)
    return np.asarray(r), metrics


def prompt_batches(prompts: PolicyPrompts, rows_used, image_fn, size,
                   per_step: int, seed: int):
  """Endless GRPO batches of `per_step` of the `rows_used` (a fresh
  permutation each pass, `default_rng(seed + 1000)`): prompt tails, the
  images at `size` as `prefix_inputs` (read when the batch is made), the
  row indices as `row`."""
  rng = np.random.default_rng(seed + 1000)
  rows_used = list(rows_used)
  order: list[int] = []
  while True:
    while len(order) < per_step:
      order += [rows_used[j] for j in rng.permutation(len(rows_used))]
    take, order = order[:per_step], order[per_step:]
    yield {"prompts": [prompts.tail(i) for i in take],
           "prefix_inputs": np.stack([fixed_image(image_fn(i), size)
                                      for i in take]),
           "row": take}


def evaluate(chat, rows, image_fn, real) -> list[dict]:
  """Greedy replies to the MathVista rows and MathVista's verdicts."""
  out = []
  for i, row in enumerate(rows):
    img = image_fn(i)
    question = row.get("query") or row["question"]
    reply, n = chat.answer_images(
        [img], question, max_new_tokens=int(real.eval_max_new_tokens),
        min_pixels=int(real.eval_min_pixels) or None,
        max_pixels=int(real.eval_max_pixels) or None,
        system=sophiavl.EVAL_SYSTEM_PROMPT)
    out.append({"pid": str(row.get("pid", len(out))), "reply": reply,
                "tokens": n, "prediction": mathvista.prediction(reply, row),
                "answer": row["answer"],
                "correct": bool(mathvista.is_correct(reply, row))})
  return out


def _copy(model):
  graphdef, state = nnx.split(model)
  return nnx.merge(graphdef, jax.tree.map(jnp.copy, state))


def run_variant(config, variant: str, seed: int, chat, trm, rows,
                rows_used, prompts: PolicyPrompts, image_fn, eval_rows,
                eval_image_fn) -> dict:
  """GRPO of one Trust-GRPO variant from the checkpoint, then accuracy."""
  rl, real = config.rl, config.real
  tok = chat.tokenizer
  trust = trust_variants.trust_config(variant, config.trust)
  prefix = qwen2_vl_prefix.PrefixConfig(
      kind="image", image_size=_size(real.image_size),
      vision_end_token_id=tok.token_id(VISION_END),
      image_mean=chat.processor.image_mean,
      image_std=chat.processor.image_std, head_ids=tuple(prompts.head))
  policy = qwen2_vl_prefix.Qwen2VLPrefixLM.wrap(_copy(chat.model), prefix)
  eos = tuple(tok.eos_ids)
  gcfg = learner_lib.GRPOConfig(
      **config.grpo, max_new_tokens=int(real.max_new_tokens),
      eos_id=eos[0] if eos else None, stop_ids=eos[1:],
      pad_id=tok.pad_id or 0)
  grad_accum = int(config.optim.get("grad_accum", 1))
  rows_per_update = (int(rl.prompts_per_step) * gcfg.group_size
                     // gcfg.num_minibatches // grad_accum)
  learner = learner_lib.GRPOLearner(
      policy, gcfg, config.optim, total_steps=int(rl.steps), seed=seed,
      mesh=parallel.mesh_from_config(config, batch=rows_per_update),
      rules=config.sharding_rules)
  reward = TrustReward(rows, prompts, image_fn, tok, trm, trust,
                       total_steps=int(rl.steps))
  history = learner.train(
      prompt_batches(prompts, rows_used, image_fn, prefix.image_size,
                     int(rl.prompts_per_step), seed),
      reward.from_fields, steps=int(rl.steps), key=jax.random.key(seed))
  trained = vl_chat.VLChat(learner.policy.vl, tok, chat.processor,
                           chat.chat_template)
  replies = evaluate(trained, eval_rows, eval_image_fn, real)
  return {"history": history, "replies": replies,
          "acc": float(np.mean([r["correct"] for r in replies]))
                 if replies else float("nan")}


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  if not config.get("init_from"):
    raise ValueError("trust_grpo with data.source='hf' needs init_from (a "
                     "Qwen2.5-VL checkpoint: the policy)")
  if not config.trm.get("init_from"):
    raise ValueError("trust_grpo with data.source='hf' needs trm.init_from "
                     "(the thinking reward model, a Qwen2.5-VL checkpoint)")
  variants = trust_variants.variant_names(config.variants)
  rows = sophiavl_data.read_train(config.data)
  eval_rows = sophiavl_data.read_eval(config.eval_data)
  if not rows:
    raise ValueError(f"data.path={config.data.path!r}: no training rows")
  root = sophiavl_data.image_root(config.data)
  eroot = sophiavl_data.image_root(config.eval_data)
  image_fn = lambda i: sophiavl_data.image(rows[i], root)  # noqa: E731
  eval_image_fn = lambda i: sophiavl_data.image(  # noqa: E731
      eval_rows[i], eroot)
  # GRPO trains on the image rows (SophiaVL-R1 pads a text-only row with a
  # blank, attention-masked image; such rows are counted and left out).
  rows_used = [i for i, r in enumerate(rows)
               if r.get("data_type", "image") == "image"]
  if not rows_used:
    raise ValueError(f"data.path={config.data.path!r}: no image rows "
                     "(data_type 'image') to train on")
  real = config.real

  dtype = config.model.get("dtype") or None
  chat = vl_chat.VLChat.load(config.init_from, dtype=dtype)
  trm = sophiavl.VLThinkingRewardModel(
      vl_chat.VLChat.load(config.trm.init_from, dtype=dtype),
      max_new_tokens=int(config.trm.max_new_tokens),
      min_pixels=int(real.trm_min_pixels) or None,
      max_pixels=int(real.trm_max_pixels) or None)
  prompts = PolicyPrompts(chat, rows)
  prompts.tail(rows_used[0])   # renders the head

  replies = {"init_from": evaluate(chat, eval_rows, eval_image_fn, real)}
  acc = {"init_from": [float(np.mean([r["correct"] for r in
                                      replies["init_from"]]))
                       if eval_rows else float("nan")]}
  histories = {}
  seeds = [int(s) for s in config.seeds]
  for v in variants:
    acc[v] = []
    for seed in seeds:
      out = run_variant(config, v, seed, chat, trm, rows, rows_used,
                        prompts, image_fn, eval_rows, eval_image_fn)
      acc[v].append(out["acc"])
      replies[f"{v}/{seed}"] = out["replies"]
      histories[f"{v}/{seed}"] = out["history"]

  table = results_lib.Table(
      "accuracy", "MathVista accuracy (MathVista's answer matching)",
      [results_lib.Column("acc", "accuracy", decimals=3)],
      row_label="policy")
  table.add_seed("init_from", None, {"acc": acc["init_from"][0]})
  for v in variants:
    for seed, a in zip(seeds, acc[v]):
      table.add_seed(trust_variants.LABELS.get(v, v), seed, {"acc": a})
  eval_split = config.eval_data.get("split", "") or "eval"
  eval_cfg = ml_collections.ConfigDict({"data": config.eval_data.to_dict()})
  results_lib.write(
      workdir, "trust_grpo", tables=[table], config=config, start_time=t0,
      extra={"accuracy": acc, "variants": list(variants), "seeds": seeds,
             "train_image_rows": len(rows_used),
             "eval_data": results_lib.data_provenance(
                 eval_cfg, rows={eval_split: len(eval_rows)})},
      data=results_lib.data_provenance(
          config, rows={config.data.get("split", "train") or "train":
                        len(rows), eval_split: len(eval_rows)}))
  with open(os.path.join(workdir, "replies.json"), "w") as f:
    json.dump(replies, f, indent=1)
  with open(os.path.join(workdir, "train_history.json"), "w") as f:
    json.dump(histories, f, indent=1, default=str)
  return {f"{k}/acc": float(np.mean(v)) for k, v in acc.items()}
