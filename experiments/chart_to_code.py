r"""MSRL chart-to-code miniature (paper F): SFT, then GRPO stage 1, stage 2.

    python -m experiments.main --config=configs/chart_to_code.py \
        --workdir=/tmp/c2c
    python -m experiments.main --config=configs/chart_to_code.py:tiny \
        --workdir=/tmp/c2c_tiny

Charts are procedurally generated bar / line / scatter plots of 3-4 integer
values with a one-word title, rendered at 64x64 by the same code path as the
sandbox (trusted ground-truth code runs in-process). The policy is image-
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
"""

from __future__ import annotations

import functools
import json
import os
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.models import decoder as decoder_lib
from jaxlab.models import vit as vit_lib
from jaxlab.objectives import grpo
from jaxlab.rewards import chart

PAD, BOS, EOS = 0, 1, 2
KINDS = ("bar", "plot", "scatter")
TITLES = ("cost", "sales", "rate", "time")
VOCAB = (["<pad>", "<bos>", "<eos>"] + [f"plt.{k}(" for k in KINDS]
         + ["[", "]", ",", ")", ";plt.title('", "')"]
         + [str(d) for d in range(10)] + list(TITLES))
TOK = {s: i for i, s in enumerate(VOCAB)}


def chart_code(kind: str, values, title: str) -> list[str]:
  """Grammar tokens of `plt.<kind>([0..n-1],[values]);plt.title('<title>')`."""
  xs = list(range(len(values)))
  toks = [f"plt.{kind}(", "["]
  for i, x in enumerate(xs):
    toks += ([","] if i else []) + [str(x)]
  toks += ["]", ",", "["]
  for i, v in enumerate(values):
    toks += ([","] if i else []) + [str(int(v))]
  toks += ["]", ")", ";plt.title('", title, "')"]
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


def make_charts(n: int, seed: int) -> list[dict]:
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    kind = KINDS[rng.integers(len(KINDS))]
    values = rng.integers(1, 10, int(rng.integers(3, 5))).tolist()
    title = TITLES[rng.integers(len(TITLES))]
    toks = chart_code(kind, values, title)
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
  """ViT prefix tokens + a decoder LM over the code grammar."""

  def __init__(self, dim: int, num_layers: int, max_len: int, seed: int):
    rngs = nnx.Rngs(seed)
    self.vit = vit_lib.ViTEncoder(vit_lib.ViTConfig(
        image_size=32, patch_size=8, dim=dim, num_layers=1, num_heads=2,
        mlp_dim=2 * dim, out_dim=dim), rngs=rngs)
    self.dec = decoder_lib.Decoder(decoder_lib.DecoderConfig(
        vocab_size=len(VOCAB), dim=dim, num_layers=num_layers, num_heads=2,
        num_kv_heads=2, mlp_dim=2 * dim,
        max_position_embeddings=16 + max_len + 2), rngs=rngs)
    self.num_prefix = 16

  def logits(self, images_bhwc, ids_bt):
    """Logits `[B, T, V]` where row t predicts ids[:, t + 1]."""
    prefix = self.vit(images_bhwc)
    h = jnp.concatenate([prefix, self.dec.embed(ids_bt).astype(prefix.dtype)],
                        axis=1)
    out = self.dec.forward(inputs_embeds=h).logits
    return out[:, self.num_prefix:]


def _seq_logp(model, images, ids_bt):
  """Per-token log-probs `[B, T]` of ids[:, 1:] (column 0 is 0) + entropy."""
  logits = model.logits(images, ids_bt)[:, :-1]
  lp, ent = grpo.token_logprobs_and_entropy(logits, ids_bt[:, 1:])
  pad = lambda x: jnp.pad(x, ((0, 0), (1, 0)))  # noqa: E731
  return pad(lp), pad(ent)


@functools.partial(nnx.jit, static_argnums=(3, 4))
def _sample(model, images, key, max_len: int, greedy: bool):
  """Autoregressive sampling (full forward each step; sequences are short)."""
  b = images.shape[0]
  ids = jnp.zeros((b, max_len + 1), jnp.int32).at[:, 0].set(BOS)

  def body(t, carry):
    ids, done = carry
    logits = model.logits(images, ids)[:, t]
    tok = (jnp.argmax(logits, -1) if greedy else
           jax.random.categorical(jax.random.fold_in(key, t), logits))
    tok = jnp.where(done, PAD, tok).astype(jnp.int32)
    ids = ids.at[:, t + 1].set(tok)
    return ids, done | (tok == EOS)

  ids, _ = jax.lax.fori_loop(0, max_len, body,
                             (ids, jnp.zeros((b,), bool)))
  return ids


def completion_mask(ids: np.ndarray) -> np.ndarray:
  """1 on generated tokens up to and including the first EOS."""
  gen = ids[:, 1:]
  eos = np.cumsum(gen == EOS, 1)
  keep = (eos == 0) | ((eos == 1) & (gen == EOS))
  return np.pad(keep, ((0, 0), (1, 0))).astype(np.float32)


def sft(model, charts, cfg, max_len, val) -> list[dict]:
  opt = nnx.Optimizer(model, optax.adam(cfg.lr), wrt=nnx.Param)

  def arrays(cs):
    ids = np.zeros((len(cs), max_len + 1), np.int32)
    for i, c in enumerate(cs):
      seq = [BOS] + c["ids"]
      ids[i, :len(seq)] = seq
    mask = completion_mask(ids)
    imgs = np.stack([small_image(c["image"]) for c in cs])
    return jnp.asarray(imgs), jnp.asarray(ids), jnp.asarray(mask)

  @nnx.jit
  def loss_fn(model, imgs, ids, mask):
    lp, _ = _seq_logp(model, imgs, ids)
    return -jnp.sum(lp * mask) / jnp.sum(mask)

  @nnx.jit
  def step(model, opt, imgs, ids, mask):
    loss, g = nnx.value_and_grad(loss_fn)(model, imgs, ids, mask)
    opt.update(model, g)
    return loss

  rng = np.random.default_rng(cfg.seed)
  val_arr = arrays(val)
  history = []
  for s in range(cfg.steps):
    rows = rng.integers(0, len(charts), cfg.batch_size)
    loss = step(model, opt, *arrays([charts[i] for i in rows]))
    if (s + 1) % cfg.eval_every == 0:
      history.append({"step": s + 1, "train_loss": float(loss),
                      "val_loss": float(loss_fn(model, *val_arr))})
  return history


def evaluate(model, charts, max_len, reward_cfg) -> dict[str, float]:
  imgs = jnp.asarray(np.stack([small_image(c["image"]) for c in charts]))
  ids = np.asarray(_sample(model, imgs, jax.random.key(0), max_len, True))
  codes = [detokenize(r[1:]) for r in ids]
  _, comp = chart.chart_group_reward(
      codes, [c["code"] for c in charts], [c["image"] for c in charts],
      reward_cfg.replace(w_vis=1.0, w_exec=1.0, w_text=1.0))
  data, ctype = [], []
  for code, c in zip(codes, charts):
    f = chart.text_reward_fields(code, c["code"])
    data.append(f["data"])
    ctype.append(f["type"])
  return {"exec_rate": float(comp["exec"].mean()),
          "data_f1": float(np.mean(data)),
          "type_acc": float(np.mean(ctype)),
          "text_reward": float(comp["text"].mean()),
          "visual_ssim": float(comp["vis"].mean()),
          "example": codes[0]}


def grpo_stage(model, ref, opt, charts, reward_cfg, rl, max_len, seed,
               log) -> None:
  """GRPO on `charts` with `reward_cfg` (one rollout -> one update)."""
  g = rl.group_size
  rng = np.random.default_rng(seed)

  @nnx.jit
  def update(model, opt, imgs, ids, mask, old, ref_lp, adv):
    def loss_fn(m):
      lp, ent = _seq_logp(m, imgs, ids)
      return grpo.grpo_loss(lp, old, ref_lp, adv, mask, clip_eps=rl.clip_eps,
                            kl_beta=rl.kl_beta, entropy=ent,
                            entropy_coef=rl.entropy_coef)
    (loss, metrics), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    opt.update(model, grads)
    return metrics

  logp_fn = nnx.jit(lambda m, i, x: _seq_logp(m, i, x)[0])
  for step in range(rl.steps):
    batch = [charts[i] for i in rng.integers(0, len(charts),
                                             rl.prompts_per_step)]
    rep = [c for c in batch for _ in range(g)]
    imgs = jnp.asarray(np.stack([small_image(c["image"]) for c in rep]))
    ids = np.asarray(_sample(model, imgs, jax.random.key(seed * 1000 + step),
                             max_len, False))
    mask = completion_mask(ids)
    codes = [detokenize(r[1:]) for r in ids]
    rewards, comp = chart.chart_group_reward(
        codes, [c["code"] for c in rep], [c["image"] for c in rep],
        reward_cfg)
    adv = grpo.group_advantages(jnp.asarray(rewards), g)
    ids_j, mask_j = jnp.asarray(ids), jnp.asarray(mask)
    old = logp_fn(model, imgs, ids_j) * mask_j
    ref_lp = logp_fn(ref, imgs, ids_j) * mask_j
    m = update(model, opt, imgs, ids_j, mask_j, old, ref_lp, adv)
    log.append({"step": step, "reward": float(rewards.mean()),
                "exec": float(comp["exec"].mean()),
                "text": float(comp["text"].mean()),
                "vis": float(comp["vis"].mean()), "kl": float(m["kl"])})


def run_one(config, seed: int) -> dict:
  t0 = time.time()
  max_len = config.max_len
  sft_charts = make_charts(config.data.sft_size, 10 * seed + 1)
  stage1 = make_charts(config.data.stage_size, 10 * seed + 2)
  stage2 = make_charts(config.data.stage_size, 10 * seed + 3)
  val = make_charts(config.data.eval_size, 99)          # fixed across seeds
  model = ChartPolicy(config.model.dim, config.model.num_layers, max_len,
                      seed)
  base = chart.ChartRewardConfig(
      w_text=config.reward.w_text, w_vis=config.reward.w_vis,
      w_exec=config.reward.w_exec, judge=config.reward.judge,
      timeout_s=config.reward.timeout_s, max_workers=config.reward.workers)
  sft_cfg = types.SimpleNamespace(**{**dict(config.sft), "seed": seed})
  sft_hist = sft(model, sft_charts, sft_cfg, max_len, val[:64])
  phases = {"sft": evaluate(model, val, max_len, base)}
  ref = nnx.clone(model)
  opt = nnx.Optimizer(model, optax.adam(config.rl.lr), wrt=nnx.Param)
  cur = chart.CurriculumConfig.two_stage(config.rl.stage1_steps,
                                         config.rl.stage2_steps, base=base)
  logs = {}
  for st, data in zip(cur.stages, (stage1, stage2)):
    rl = types.SimpleNamespace(**dict(config.rl), steps=st.steps)
    logs[st.name] = []
    grpo_stage(model, ref, opt, data, st.reward, rl, max_len,
               seed + (7 if st.name == "text_vis_exec" else 0),
               logs[st.name])
    phases[st.name] = evaluate(model, val, max_len, base)
  return {"phases": phases, "sft_history": sft_hist, "rl_logs": logs,
          "elapsed_s": time.time() - t0}


def run(config, workdir: str) -> dict:
  os.makedirs(workdir, exist_ok=True)
  runs = [run_one(config, s) for s in config.seeds]
  metrics = ("exec_rate", "data_f1", "type_acc", "text_reward",
             "visual_ssim")
  table = {}
  for phase in runs[0]["phases"]:
    table[phase] = {m: (float(np.mean([r["phases"][phase][m] for r in runs])),
                        float(np.std([r["phases"][phase][m] for r in runs])))
                    for m in metrics}
  result = {"table": table, "runs": runs, "seeds": list(config.seeds)}
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(result, f, indent=1)
  _plot(runs, workdir)
  return {f"{p}/{m}": v[0] for p, row in table.items() for m, v in row.items()}


def _plot(runs, workdir):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
  for r in runs:
    h = r["sft_history"]
    axes[0].plot([x["step"] for x in h], [x["val_loss"] for x in h])
    log = r["rl_logs"]["text_exec"] + r["rl_logs"]["text_vis_exec"]
    axes[1].plot([x["exec"] for x in log], alpha=0.6)
  axes[0].set_title("SFT held-out NLL")
  axes[1].set_title("RL rollout exec rate (stage 1 | stage 2)")
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "chart_to_code.png"), dpi=80)
  plt.close(fig)
