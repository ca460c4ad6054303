"""Accuracy and hacking of a policy on the Trust-GRPO task (paper G).

    metrics = evaluate(policy, task, samples=16, key=key)
    # acc, acc_hackable, acc_informative (greedy), sampled_acc_* and
    # sampled_hack_rate_* (temperature 1, `samples` per question)

A visual task (`Task(visual=True)`) is asked of an image-prefix policy
(`jaxlab.models.qwen2_vl_prefix.Qwen2VLPrefixLM`): each question's image
(`task.images`) goes before its `[BOS]` prompt through the policy's
`generate(images, prompts, ...)`.
"""

from __future__ import annotations

import numpy as np

from jaxlab import plotting
from jaxlab.data.synthetic.thinking_task import EOS
from jaxlab.data.synthetic.thinking_task import Task
from jaxlab.decoding import sampler


def generate(model, task: Task, qis, **kw):
  """The sampler's `GenerateResult` for questions `qis` (3 new tokens):
  `sampler.generate` of the prompts, or for a visual task the policy's
  `generate(task.images(qis), prompts, ...)`."""
  prompts = [task.prompt(q) for q in qis]
  kw = dict(max_new_tokens=3, eos_id=EOS, **kw)
  if task.visual:
    return model.generate(task.images(qis), prompts, **kw)
  return sampler.generate(model, prompts, **kw)


def evaluate(model, task: Task, *, samples: int, key) -> dict[str, float]:
  """Greedy accuracy, and sampled (T = 1) accuracy / degenerate-style rate."""
  qis = list(range(len(task.questions)))
  h = np.array([q in task.hackable for q in qis])
  greedy = generate(model, task, qis, temperature=0.0)
  acc = np.array([task.outcome(q, c) for q, c in zip(qis, greedy.tokens)])
  rep = [q for q in qis for _ in range(samples)]
  samp = generate(model, task, rep, temperature=1.0, key=key)
  s_acc = np.array([task.outcome(q, c)
                    for q, c in zip(rep, samp.tokens)]).reshape(-1, samples)
  s_hack = np.array([task.is_hack(c) for c in samp.tokens],
                    float).reshape(-1, samples)
  return {"acc": float(acc.mean()), "acc_hackable": float(acc[h].mean()),
          "acc_informative": float(acc[~h].mean()),
          "sampled_acc_hackable": float(s_acc[h].mean()),
          "sampled_acc_informative": float(s_acc[~h].mean()),
          "sampled_hack_rate_hackable": float(s_hack[h].mean()),
          "sampled_hack_rate_informative": float(s_hack[~h].mean())}


def plot_curves(runs, path: str) -> str | None:
  """Greedy accuracies and the sampled hack rate over RL steps, per
  variant (mean over seeds, min-max band); `runs[v]` = per-seed dicts with
  a `curve` of `evaluate` results and `step`."""
  try:
    plt = plotting.pyplot()
  except ImportError:
    return None
  keys = ("acc", "acc_hackable", "acc_informative",
          "sampled_hack_rate_hackable")
  fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.3))
  for v, rs in runs.items():
    steps = [c["step"] for c in rs[0]["curve"]]
    for ax, key in zip(axes, keys):
      ys = np.array([[c[key] for c in r["curve"]] for r in rs])
      ax.plot(steps, ys.mean(0), label=v)
      ax.fill_between(steps, ys.min(0), ys.max(0), alpha=0.15)
      ax.set_title(key + (" (greedy)" if key.startswith("acc") else ""))
      ax.set_xlabel("RL step")
  axes[0].legend()
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path
