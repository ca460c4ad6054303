"""Held-out chart-to-code scoring (paper F miniature).

    metrics = evaluate(policy, charts, max_len=28, reward_cfg=cfg,
                       render=render)
    # exec_rate, data_f1, type_acc, text_elements, text_reward,
    # visual_ssim, example

The policy (a `jaxlab.models.prefix_lm.ImagePrefixLM`) decodes each chart
greedily from `[BOS]` under its image prefix through the KV-cache sampler;
the code is executed in the sandbox (`render`, e.g. the memoising
`jaxlab.rewards.render_cache.CachedRender`) and scored field by field by
the chart rewards (`jaxlab.rewards.chart`; a measurement built on the
rewards, so it lives in their layer).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxlab import plotting
from jaxlab.data.synthetic import charts as charts_lib
from jaxlab.rewards import chart


def sample_codes(model, images: np.ndarray, *, max_len: int,
                 temperature: float, key: jax.Array | None = None
                 ) -> list[list[int]]:
  """Token lists (ending at EOS when one is emitted) of `[BOS]` continued
  under the image prefix, by `jaxlab.decoding.sampler.generate`."""
  out = model.generate(images, [[charts_lib.BOS]] * len(images),
                       max_new_tokens=max_len, temperature=temperature,
                       eos_id=charts_lib.EOS, pad_id=charts_lib.PAD, key=key)
  return out.tokens


def evaluate(model, charts, max_len, reward_cfg, render=None
             ) -> dict[str, float]:
  """Greedy decoding of `charts`, scored (renders through `render`)."""
  imgs = np.stack([charts_lib.small_image(c["image"]) for c in charts])
  codes = [charts_lib.detokenize(t) for t in
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


def plot_curves(runs, path: str) -> None:
  """The SFT held-out NLL and the RL rollouts' exec rate, per seed."""
  plt = plotting.pyplot()
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
  fig.savefig(path, dpi=80)
  plt.close(fig)
