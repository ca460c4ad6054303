r"""MSRL chart-to-code miniature (paper F): SFT, then GRPO stage 1, stage 2.

    python -m jaxlab.main --config=jaxlab/configs/chart_to_code.py \
        --workdir=/tmp/c2c
    python -m jaxlab.main --config=jaxlab/configs/chart_to_code.py:tiny \
        --workdir=/tmp/c2c_tiny

Charts are procedurally generated bar / line / scatter plots of 3-4 integer
values (1-9) with a one-word title, rendered at 64x64 by the same code path
as the sandbox (trusted ground-truth code runs in-process). With
`charts.fixed_axes` (the default) the code pins the y range to (0, 10), so
a value is a height on a fixed scale; tick labels and the title are not
legible at this size, so autoscaled charts show only the values' ratios
and no chart shows its title. The policy is image-
conditioned: `jaxlab.models.vit.ViTEncoder` turns the (2x downsampled) 32x32
image into 16 patch tokens, projected to the decoder width and fed as a
prefix through `Decoder.forward(inputs_embeds=...)`; the decoder writes code
in a tiny grammar, e.g. `plt.bar([0,1,2],[3,5,2]);plt.title('cost')`, one
grammar token per step.

Pipeline (spec F items 2-5): SFT on a small fixed set of pairs until the
held-out loss plateaus, then GRPO stage 1 (R = R_text + R_exec, its own
charts), then stage 2 (R = R_text + R_vis + R_exec, SSIM judge, other
charts). Generated code is executed in `jaxlab.rewards.sandbox` (parallel
renders via `chart_group_reward`). After each phase the held-out set is
decoded greedily and scored: execution rate, data-value soft F1 (+-5 %),
chart-type accuracy, text reward and SSIM visual similarity.

Every update is the generic trainer's step: SFT through
`jaxlab.train.runner.StepRunner` (teacher-forced NLL of the code given the
image), GRPO through `jaxlab.rl.learner.GRPOLearner` (the registered `grpo`
loss: clipped ratio, k3 KL to the post-SFT policy, global-norm clipping via
optax). Rollouts and evaluation decode with `jaxlab.decoding.sampler`
(KV cache, the image prefix as `prefix_embeds`); a rollout batch carries the
images as `prefix_inputs`, so the GRPO loss re-encodes them and the ViT
learns with the decoder.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.experiments import results as results_lib
from jaxlab.decoding import sampler
from jaxlab.io import params as params_io
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import registry as model_registry
from jaxlab.models import vit as vit_lib
from jaxlab.objectives import grpo
from jaxlab.rewards import chart
from jaxlab.rewards import sandbox
from jaxlab.rl import learner as learner_lib
from jaxlab.rl import rollout as rollout_lib
from jaxlab.train import losses as losses_lib
from jaxlab.train import runner as runner_lib

PAD, BOS, EOS = 0, 1, 2
KINDS = ("bar", "plot", "scatter")
TITLES = ("cost", "sales", "rate", "time")
# The fixed y range of `charts.fixed_axes` (values are 1..9). Last in the
# vocabulary, so a policy without it (`fixed_axes=False`) has the first
# len(VOCAB) - 1 ids and the same initialisation as before the option.
YLIM = ";plt.ylim(0,10)"
VOCAB = (["<pad>", "<bos>", "<eos>"] + [f"plt.{k}(" for k in KINDS]
         + ["[", "]", ",", ")", ";plt.title('", "')"]
         + [str(d) for d in range(10)] + list(TITLES) + [YLIM])
TOK = {s: i for i, s in enumerate(VOCAB)}


def vocab_size(fixed_axes: bool) -> int:
  """Grammar ids the policy has: the y-range token only with fixed axes."""
  return len(VOCAB) if fixed_axes else len(VOCAB) - 1


def chart_code(kind: str, values, title: str, *,
               fixed_axes: bool = False) -> list[str]:
  """Grammar tokens of `plt.<kind>([0..n-1],[values])[;plt.ylim(0,10)]
  ;plt.title('<title>')`.

  With `fixed_axes` the chart pins its y range, so a value is a height
  on a fixed scale; without it matplotlib autoscales the axis and, with
  tick labels illegible at 64 px, only the values' ratios are visible.
  """
  xs = list(range(len(values)))
  toks = [f"plt.{kind}(", "["]
  for i, x in enumerate(xs):
    toks += ([","] if i else []) + [str(x)]
  toks += ["]", ",", "["]
  for i, v in enumerate(values):
    toks += ([","] if i else []) + [str(int(v))]
  toks += ["]", ")"] + ([YLIM] if fixed_axes else [])
  toks += [";plt.title('", title, "')"]
  return toks


def detokenize(ids) -> str:
  out = []
  for i in ids:
    if i == EOS:
      break
    if 3 <= i < len(VOCAB):
      out.append(VOCAB[i])
  return "".join(out)


def render_trusted(code: str, size=(64, 64)) -> np.ndarray:
  """The sandbox's rendering path, in-process, for trusted ground truth."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  plt.close("all")
  exec(compile(code, "<gt>", "exec"), {"plt": plt, "np": np})  # noqa: S102
  fig = plt.figure(plt.get_fignums()[-1])
  h, w = size
  fig.set_dpi(100.0)
  fig.set_size_inches(w / 100.0, h / 100.0)
  fig.canvas.draw()
  img = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
  # The sandbox round-trips through PNG (lossless), so this matches it.
  plt.close("all")
  return img


class CachedRender:
  """Memoises a sandbox `render(code, **kw)` by its arguments.

  A matplotlib program in the sandbox renders deterministically, and the
  policy repeats itself (G samples of one chart share most codes, greedy
  evaluation repeats across phases), so each distinct code is rendered once.
  Timeouts are not cached (under load they can be spurious). At most
  `max_entries` results are kept (least recently used dropped).
  """

  def __init__(self, render, max_entries: int = 8192):
    self._render = render
    self._cache: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()
    self.max_entries = int(max_entries)
    self.hits = self.misses = 0

  def __call__(self, code: str, **kw) -> sandbox.RenderResult:
    key = (code, tuple(sorted(kw.items())))
    with self._lock:
      hit = self._cache.get(key)
      if hit is not None:
        self._cache.move_to_end(key)
        self.hits += 1
        return hit
      self.misses += 1
    result = self._render(code, **kw)
    if not (result.error or "").startswith("timeout"):
      with self._lock:
        self._cache[key] = result
        while len(self._cache) > self.max_entries:
          self._cache.popitem(last=False)
    return result


def make_renderer(reward_cfg: chart.ChartRewardConfig) -> CachedRender:
  """The cached sandbox renderer: the warm `sandbox.shared_pool` when
  `reward.pool`, else a fresh sandbox process per render."""
  if reward_cfg.pool:
    return CachedRender(
        sandbox.shared_pool(max(1, reward_cfg.max_workers)).render)
  return CachedRender(sandbox.render_chart)


@functools.lru_cache(maxsize=8)
def make_charts(n: int, seed: int, fixed_axes: bool = False) -> list[dict]:
  """`n` random charts from `seed`: kind, values, title, code, grammar ids
  and the 64x64 rendering (memoised: the held-out set is shared by seeds;
  treat the result as read-only). `fixed_axes`: see `chart_code`."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    kind = KINDS[rng.integers(len(KINDS))]
    values = rng.integers(1, 10, int(rng.integers(3, 5))).tolist()
    title = TITLES[rng.integers(len(TITLES))]
    toks = chart_code(kind, values, title, fixed_axes=fixed_axes)
    code = "".join(toks)
    img = render_trusted(code)
    out.append({"kind": kind, "values": values, "title": title, "code": code,
                "ids": [TOK[t] for t in toks] + [EOS], "image": img})
  return out


def small_image(img_hw3: np.ndarray) -> np.ndarray:
  """64x64 uint8 -> 32x32 float in [0, 1] (2x2 mean pooling)."""
  x = img_hw3.astype(np.float32) / 255.0
  return x.reshape(32, 2, 32, 2, 3).mean((1, 3))


class ChartPolicy(nnx.Module):
  """ViT prefix tokens + a decoder LM over the code grammar.

  The image's `vit` patch tokens (projected to the decoder width) are a
  prefix fed through `Decoder.forward(inputs_embeds=...)` before the token
  embeddings: for sampling through `jaxlab.decoding.sampler.generate(dec,
  ..., prefix_embeds=policy.prefix_embeds(images))` and for teacher forcing
  in `forward`.
  """

  def __init__(self, dec_cfg: decoder_lib.DecoderConfig,
               vit_cfg: vit_lib.ViTConfig, *, rngs: nnx.Rngs):
    if vit_cfg.out_dim != dec_cfg.dim:
      raise ValueError(f"vit out_dim={vit_cfg.out_dim} must equal the "
                       f"decoder width model.dim={dec_cfg.dim}")
    self.vit = vit_lib.ViTEncoder(vit_cfg, rngs=rngs)
    self.dec = decoder_lib.Decoder(dec_cfg, rngs=rngs)
    self.num_prefix = vit_cfg.num_patches

  def prefix_embeds(self, images_bhwc: jax.Array) -> jax.Array:
    """Images `[B, H, W, 3]` in [0, 1] -> prefix `[B, P, D]`."""
    return self.vit(images_bhwc)

  def forward(self, input_ids_bt: jax.Array,
              attention_mask: jax.Array | None = None, *,
              prefix_inputs: jax.Array | None = None,
              prefix_embeds: jax.Array | None = None
              ) -> decoder_lib.DecoderOutput:
    """Decoder output over `[prefix; ids]`, logits of the T ids only.

    The prefix is `prefix_embeds [B, P, D]` or, computed here (so the ViT
    is trained with the decoder), `prefix_embeds(prefix_inputs)` of images
    `[B, H, W, 3]`: the signature the GRPO loss calls with a rollout
    batch's `prefix_inputs` (`jaxlab.objectives.grpo.policy_token_logprobs`).
    Row t of the logits predicts ids[:, t + 1]; `attention_mask [B, T]`
    marks the real ids (the prefix is always attended), so positions are
    counted over [prefix; real ids] as the sampler counts them.
    """
    if (prefix_inputs is None) == (prefix_embeds is None):
      raise ValueError("ChartPolicy.forward needs exactly one of "
                       "prefix_inputs (images) and prefix_embeds")
    if prefix_embeds is None:
      prefix_embeds = self.prefix_embeds(prefix_inputs)
    b, p = prefix_embeds.shape[:2]
    h = jnp.concatenate(
        [prefix_embeds,
         self.dec.embed(input_ids_bt).astype(prefix_embeds.dtype)], axis=1)
    mask = None if attention_mask is None else jnp.concatenate(
        [jnp.ones((b, p), bool), attention_mask.astype(bool)], axis=1)
    out = self.dec.forward(inputs_embeds=h, attention_mask=mask)
    return dataclasses.replace(out, logits=out.logits[:, p:])

  def logits(self, images_bhwc, ids_bt):
    """Logits `[B, T, V]` where row t predicts ids[:, t + 1]."""
    return self.forward(ids_bt, prefix_inputs=images_bhwc).logits


def make_policy(config, seed: int) -> ChartPolicy:
  """`DecoderConfig` from `config.model`, `ViTConfig(**config.vit)`."""
  dec_cfg = model_registry.decoder_config(
      config.model,
      vocab_size=vocab_size(config.charts.get("fixed_axes", False)))
  vit_cfg = vit_lib.ViTConfig(**config.vit, out_dim=dec_cfg.dim)
  return ChartPolicy(dec_cfg, vit_cfg, rngs=nnx.Rngs(seed))


def completion_mask(ids: np.ndarray) -> np.ndarray:
  """1 on generated tokens up to and including the first EOS."""
  gen = ids[:, 1:]
  eos = np.cumsum(gen == EOS, 1)
  keep = (eos == 0) | ((eos == 1) & (gen == EOS))
  return np.pad(keep, ((0, 0), (1, 0))).astype(np.float32)


# -- SFT: the trainer's step on a teacher-forced, image-conditioned NLL --------


def sft_loss(model: ChartPolicy, batch: dict[str, jax.Array], *,
             rng: jax.Array | None = None, config=None):
  """Token-mean NLL of the code tokens (and EOS) given the image.

  batch: `images [B, 32, 32, 3]`, `ids [B, T]` ([BOS, code.., EOS, pad..]),
  `mask [B, T]` (1 on the tokens to predict, column 0 is 0).
  """
  del rng, config
  logits = model.logits(batch["images"], batch["ids"])[:, :-1]
  total, count = losses_lib.masked_token_nll(logits, batch["ids"][:, 1:],
                                             batch["mask"][:, 1:])
  return total / jnp.maximum(count, 1.0), {"tokens": count}


@nnx.jit
def _sft_eval_loss(model, batch):
  return sft_loss(model, batch)[0]


def sft_arrays(charts, max_len: int) -> dict[str, np.ndarray]:
  ids = np.zeros((len(charts), max_len + 1), np.int32)
  for i, c in enumerate(charts):
    seq = [BOS] + c["ids"]
    ids[i, :len(seq)] = seq
  return {"images": np.stack([small_image(c["image"]) for c in charts]),
          "ids": ids, "mask": completion_mask(ids)}


def sft(model, charts, sft_cfg, max_len, val, seed: int) -> list[dict]:
  """SFT on `charts` with the trainer's update (`StepRunner`): minibatches
  drawn with replacement; the held-out loss every `eval_every` steps."""
  steps = int(sft_cfg.steps)
  runner = runner_lib.StepRunner(model, loss=sft_loss, loss_config=None,
                                 optim=sft_cfg.optim, steps=steps, seed=seed)
  rng = np.random.default_rng(seed)
  val_arr = {k: jnp.asarray(v) for k, v in sft_arrays(val, max_len).items()}
  history = []
  for s in range(steps):
    rows = rng.integers(0, len(charts), int(sft_cfg.batch_size))
    m = runner.step(sft_arrays([charts[i] for i in rows], max_len), s)
    if (s + 1) % int(sft_cfg.eval_every) == 0:
      history.append({"step": s + 1, "train_loss": m["loss"],
                      "val_loss": float(_sft_eval_loss(runner.model(),
                                                       val_arr))})
  runner.write_back()
  return history


# -- sampling through the KV-cache sampler, image prefix first ------------------


@nnx.jit
def _prefix(model, images):
  return model.prefix_embeds(images)


def sample_codes(model: ChartPolicy, images: np.ndarray, *, max_len: int,
                 temperature: float, key: jax.Array | None = None
                 ) -> list[list[int]]:
  """Token lists (ending at EOS when one is emitted) of `[BOS]` continued
  under the image prefix, by `jaxlab.decoding.sampler.generate`."""
  prefix = _prefix(model, jnp.asarray(images))
  out = sampler.generate(model.dec, [[BOS]] * len(images),
                         prefix_embeds=prefix, max_new_tokens=max_len,
                         temperature=temperature, eos_id=EOS, pad_id=PAD,
                         key=key)
  return out.tokens


def evaluate(model, charts, max_len, reward_cfg, render=None
             ) -> dict[str, float]:
  """Greedy decoding of `charts`, scored (renders through `render`)."""
  imgs = np.stack([small_image(c["image"]) for c in charts])
  codes = [detokenize(t) for t in
           sample_codes(model, imgs, max_len=max_len, temperature=0.0)]
  _, comp = chart.chart_group_reward(
      codes, [c["code"] for c in charts], [c["image"] for c in charts],
      reward_cfg.replace(w_vis=1.0, w_exec=1.0, w_text=1.0), render=render)
  fields = [chart.text_reward_fields(code, c["code"])
            for code, c in zip(codes, charts)]
  return {"exec_rate": float(comp["exec"].mean()),
          "data_f1": float(np.mean([f["data"] for f in fields])),
          "type_acc": float(np.mean([f["type"] for f in fields])),
          # Text elements (the title): not legible at 64 px, so the best a
          # policy can do is the commonest title.
          "text_elements": float(np.mean([f["text"] for f in fields])),
          "text_reward": float(comp["text"].mean()),
          "visual_ssim": float(comp["vis"].mean()),
          "example": codes[0]}


# -- GRPO: rollouts through the sampler, updates by the GRPO learner ------------


@functools.partial(jax.jit, static_argnums=(0, 6))
def _rollout_logp(graphdef, state, images, ids, attn, comp, temperature):
  """Teacher-forced log pi_T of the sampled tokens (0 off `comp`): the
  function the `grpo` loss scores the policy with, so the first ratio is 1."""
  model = nnx.merge(graphdef, state)
  logp, _ = grpo.policy_token_logprobs(model, ids, attn, temperature,
                                       prefix_inputs=images)
  return logp * comp


def rollout_logp(model, images, ids, attn, comp, temperature) -> np.ndarray:
  graphdef, state = nnx.split(model)
  return np.asarray(_rollout_logp(graphdef, state, jnp.asarray(images),
                                  jnp.asarray(ids), jnp.asarray(attn),
                                  jnp.asarray(comp, jnp.float32),
                                  float(temperature)))


def rollout(learner: learner_lib.GRPOLearner, images: np.ndarray, *,
            key: jax.Array) -> rollout_lib.RolloutBatch:
  """G samples per chart (rows of `images` come in groups of G) from the
  current policy through the sampler, with old / reference log-probs."""
  cfg = learner.cfg
  policy = learner.policy
  tokens = sample_codes(policy, images, max_len=cfg.max_new_tokens,
                        temperature=cfg.temperature, key=key)
  prompts = [[BOS]] * len(images)
  ids, attn, comp = sampler.pack_sequences(
      prompts, tokens, pad_id=PAD, length=1 + cfg.max_new_tokens)
  old = rollout_logp(policy, images, ids, attn, comp, cfg.temperature)
  ref = (rollout_logp(learner.ref, images, ids, attn, comp, cfg.temperature)
         if learner.ref is not None else None)
  g = cfg.group_size
  return rollout_lib.RolloutBatch(
      prompts=prompts[::g], completions=tokens, input_ids_bt=ids,
      attention_mask_bt=attn, completion_mask_bt=comp, old_logp_bt=old,
      ref_logp_bt=ref, group_size=g, prefix_inputs=images)


def make_learner(config, model: ChartPolicy) -> learner_lib.GRPOLearner:
  """`GRPOConfig(**config.grpo)` with `config.rl.optim`, one optimizer
  state over both stages (the schedule counts every update)."""
  return learner_lib.GRPOLearner(
      model, learner_lib.GRPOConfig(**config.grpo), config.rl.optim,
      total_steps=int(config.rl.stage1_steps) + int(config.rl.stage2_steps))


def grpo_stage(learner, charts, reward_cfg, rl, steps: int, max_len: int,
               seed: int, log: list, render=None) -> None:
  """GRPO on `charts` with `reward_cfg` (one rollout -> one update);
  `rl.prompts_per_step` charts drawn with replacement per step, each
  sampled G times."""
  del max_len  # the learner's GRPOConfig.max_new_tokens
  g = learner.cfg.group_size
  rng = np.random.default_rng(seed)
  for step in range(steps):
    batch = [charts[i] for i in rng.integers(0, len(charts),
                                             int(rl.prompts_per_step))]
    rep = [c for c in batch for _ in range(g)]
    imgs = np.stack([small_image(c["image"]) for c in rep])
    key = jax.random.key(seed * 1000 + step)
    k_roll, k_upd = jax.random.split(key)
    rb = rollout(learner, imgs, key=k_roll)
    codes = [detokenize(t) for t in rb.completions]
    rewards, comp = chart.chart_group_reward(
        codes, [c["code"] for c in rep], [c["image"] for c in rep],
        reward_cfg, render=render)
    rewards = np.asarray(rewards, np.float32)
    m = learner.update(rb, rewards, k_upd)
    spread = rewards.reshape(-1, g).std(axis=1)
    log.append({"step": step, "reward": float(np.mean(rewards)),
                # Within-group spread: GRPO's only signal (a group whose
                # rewards are all equal has zero advantages).
                "group_std": float(spread.mean()),
                "flat_groups": float(np.mean(spread < 1e-6)),
                "exec": float(comp["exec"].mean()),
                "text": float(comp["text"].mean()),
                "vis": float(comp["vis"].mean()), "kl": m["kl"],
                "loss": m["loss"], "grad_norm": m["grad_norm"]})


# What the SFT model depends on: a run that differs only in the RL
# sections reloads it (WORKDIR/sft_seedS_<digest>.npz, or `cache_dir`'s).
_SFT_FIELDS = ("model", "vit", "charts", "sft", "max_len")


def supervised_policy(config, seed: int, sft_charts, val,
                      cache_dir: str | None = None
                      ) -> tuple[ChartPolicy, list[dict]]:
  """The seed's policy after SFT and its SFT curve; saved in `cache_dir`
  (when given) through `jaxlab.io.params` and reloaded by any run whose
  `_SFT_FIELDS` and seed are the same."""
  model = make_policy(config, seed)
  meta, key = params_io.config_key(config, *_SFT_FIELDS)
  meta["seed"] = seed
  path = (os.path.join(cache_dir, f"sft_seed{seed}_{key}.npz")
          if cache_dir else None)
  if path and params_io.exists(path):
    return model, params_io.load(model, path, meta)["history"]
  history = sft(model, sft_charts, config.sft, int(config.max_len), val, seed)
  if path:
    params_io.save(model, path, {**meta, "history": history})
  return model, history


def run_one(config, seed: int, cache_dir: str | None = None) -> dict:
  """SFT, then the two GRPO stages, for one seed; held-out metrics after
  each phase. The held-out charts (seed 99) are the same for every seed, so
  phase differences pair by seed on the same charts. The SFT model is
  cached in `cache_dir` (see `supervised_policy`)."""
  t0 = time.time()
  max_len = int(config.max_len)
  sizes = config.charts
  fixed = bool(sizes.get("fixed_axes", False))
  sft_charts = make_charts(int(sizes.sft_size), 10 * seed + 1, fixed)
  stage1 = make_charts(int(sizes.stage_size), 10 * seed + 2, fixed)
  stage2 = make_charts(int(sizes.stage_size), 10 * seed + 3, fixed)
  val = make_charts(int(sizes.eval_size), 99, fixed)      # fixed across seeds
  timing = {"charts_s": time.time() - t0}
  base = chart.ChartRewardConfig(**config.reward)
  render = make_renderer(base)
  t = time.time()
  model, sft_hist = supervised_policy(config, seed, sft_charts, val,
                                      cache_dir)
  timing["sft_s"] = time.time() - t
  t = time.time()
  phases = {"sft": evaluate(model, val, max_len, base, render)}
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
    grpo_stage(learner, data, st.reward, config.rl, st.steps, max_len,
               seed + (7 if st.name == "text_vis_exec" else 0),
               logs[st.name], render)
    timing[f"{st.name}_s"] = time.time() - t
    t = time.time()
    phases[st.name] = evaluate(learner.policy, val, max_len, base, render)
    timing["eval_s"] += time.time() - t
  timing["renders"] = render.misses
  timing["render_cache_hits"] = render.hits
  return {"phases": phases, "sft_history": sft_hist, "rl_logs": logs,
          "timing": timing, "elapsed_s": time.time() - t0}


PHASE_LABELS = {"sft": "SFT", "text_exec": "+ GRPO stage 1 (text + exec)",
                "text_vis_exec": "+ GRPO stage 2 (+ visual)"}


PHASES_CAPTION = "Chart-to-code: held-out greedy decoding after each phase"


def results_table(runs: list[dict], seeds,
                  caption: str = PHASES_CAPTION) -> results_lib.Table:
  """The held-out metrics after each phase, one value per seed."""
  table = results_lib.Table(
      "phases", caption,
      row_label="phase",
      columns=[results_lib.Column("exec_rate", "exec rate"),
               results_lib.Column("data_f1", "data-value soft F1"),
               results_lib.Column("type_acc", "chart-type acc"),
               results_lib.Column("text_elements", "text elements"),
               results_lib.Column("text_reward", "R_text"),
               results_lib.Column("visual_ssim", "visual SSIM")])
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
      table.add_seed(str(h["step"]), seed,
                     {"val_loss": h["val_loss"],
                      "train_loss": h["train_loss"]})
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


def run(config, workdir: str) -> dict:
  """All seeds; writes WORKDIR/results.json (`jaxlab.experiments.results` schema:
  the phase table and the SFT curve per seed, the stage comparisons paired
  by seed; curves, timings and example completions under `extra`) and
  chart_to_code.png.

  Resumable by seed: each finished seed is kept in
  WORKDIR/seeds/seed_<s>.json and skipped on a rerun, and results.json is
  rewritten after every seed (so a run stopped early reports the seeds it
  finished). Each seed's SFT model is saved in `config.cache_dir` (default
  WORKDIR), so RL sweeps from one SFT run share it.
  """
  t0 = time.time()
  os.makedirs(os.path.join(workdir, "seeds"), exist_ok=True)
  done_seeds, runs = [], []
  for s in (int(x) for x in config.seeds):
    path = os.path.join(workdir, "seeds", f"seed_{s}.json")
    if os.path.exists(path):
      with open(path) as f:
        r = json.load(f)
    else:
      r = run_one(config, s, config.get("cache_dir") or workdir)
      with open(path + ".tmp", "w") as f:
        json.dump(r, f, default=float)
      os.replace(path + ".tmp", path)
    done_seeds.append(s)
    runs.append(r)
    _write(workdir, config, done_seeds, runs, t0)
  _plot(runs, workdir)
  return {f"{p}/{m}": float(np.mean([r["phases"][p][m] for r in runs]))
          for p in runs[0]["phases"]
          for m in ("exec_rate", "data_f1", "type_acc", "text_elements",
                    "text_reward", "visual_ssim") if m in runs[0]["phases"][p]}


def _plot(runs, workdir):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
  for r in runs:
    h = r["sft_history"]
    axes[0].plot([x["step"] for x in h], [x["val_loss"] for x in h])
    log = (r["rl_logs"].get("text_exec", [])
           + r["rl_logs"].get("text_vis_exec", []))
    axes[1].plot([x["exec"] for x in log], alpha=0.6)
  axes[0].set_title("SFT held-out NLL")
  axes[1].set_title("RL rollout exec rate (stage 1 | stage 2)")
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "chart_to_code.png"), dpi=80)
  plt.close(fig)
