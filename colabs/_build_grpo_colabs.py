"""Writes colabs/trust_grpo.ipynb and colabs/chart_to_code.ipynb.

    python colabs/_build_grpo_colabs.py

The notebooks launch the experiments (`jaxlab.main.run_experiment`, the
launcher's entry) and use library modules only, on a preset chosen by the
JAXLAB_COLAB_PRESET environment variable ("tiny" by default, further
shrunk so CI stays fast; the test suite executes chart-to-code's "tiny" and
Trust-GRPO's "tiny,smoke"; "" for the full preset).
"""

import os
import sys

import nbformat
from nbformat import v4

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _setup_cell  # pylint: disable=g-import-not-at-top,wrong-import-position


def trust_notebook():
  cells = [
      v4.new_code_cell(_setup_cell.setup_cell("tiny")),
      v4.new_markdown_cell(
          "# Trust-GRPO (SophiaVL-R1) in jaxlab\n\n"
          "Paper: *SophiaVL-R1: Reinforcing MLLMs Reasoning with Thinking "
          "Reward* (arXiv 2505.17018). GRPO with an outcome reward plus a "
          "thinking reward R^t from a thinking reward model, weighted by a "
          "per-group trust gamma and annealed: R = R^o + gamma alpha "
          "exp(-t/T) R^t. Modules: `jaxlab.objectives.grpo`, "
          "`jaxlab.rl.learner`, `jaxlab.rewards.thinking`."),
      v4.new_markdown_cell(
          "## 1. The trust weight on a hand-made group\nTwo correct "
          "responses whose thinking scores 0.2, two wrong ones scoring 0.8: "
          "the TRM prefers wrong reasoning, so gamma = exp(0.2 - 0.8)."),
      v4.new_code_cell(
          "import numpy as np\nfrom jaxlab.objectives import grpo\n"
          "from jaxlab.rewards import thinking\n"
          "rt = np.array([[0.2, 0.2, 0.8, 0.8]])\n"
          "correct = np.array([[True, True, False, False]])\n"
          "print('gamma: %.4f' % float(thinking.trust_weight(rt, correct)[0]))\n"
          "r, m = thinking.combine_trust_rewards(np.array([1., 1., 0., 0.]), "
          "rt[0], 4, step=0, cfg=thinking.TrustConfig.paper(), "
          "total_steps=10)\n"
          "print('combined rewards:', np.round(np.asarray(r), 4))\n"
          "print('advantages:', np.round(np.asarray("
          "grpo.group_advantages(r, 4)), 3))"),
      v4.new_markdown_cell(
          "## 2. The miniature\nA tiny decoder answers (a + b) mod K as "
          "`<think> <answer>`; the synthetic TRM is hackable on 30 % of the "
          "questions (it rates the degenerate thinking token highest). "
          "Compare outcome-only, +thinking and Trust-GRPO (the tiny preset "
          "is far too short to separate them; the README table uses the "
          "full preset)."),
      v4.new_code_cell(
          "from jaxlab import main as launcher\n"
          "from jaxlab.configs import trust_grpo as tg_config\n"
          "config = tg_config.get_config(PRESET)\n"
          "if PRESET == 'tiny':\n"
          "  config.rl.steps = 4; config.rl.eval_every = 2; "
          "config.sft.steps = 10\n"
          "flat = launcher.run_experiment(config, WORKDIR)\n"
          "res = json.load(open(os.path.join(WORKDIR, 'results.json')))\n"
          "print('| variant | acc | sampled hack rate (hackable) |')\n"
          "for v, row in res['extra']['summary'].items():\n"
          "  print(f\"| {v} | {row['acc'][0]:.3f} | "
          "{row['sampled_hack_rate_hackable'][0]:.3f} |\")"),
      v4.new_code_cell(
          "from IPython.display import Image, display\n"
          "display(Image(os.path.join(WORKDIR, 'accuracy.png')))"),
      v4.new_markdown_cell(
          "## 3. A learned thinking reward model\nThe paper's TRM is a "
          "model trained on a judge's 0.1-step scores, balanced over the "
          "score bins. `trust.trm='learned'` (preset `learned`) does that "
          "here: a `TinyThinkingScorer` fitted with the library loop on "
          "noisy judge labels of rollout-like samples, then used as R^t. "
          "Below: its scores of HACK and v = 0..4 beside the judge's, on "
          "one hackable and one informative question."),
      v4.new_code_cell(
          "from jaxlab.data.synthetic import thinking_task\n"
          "from jaxlab.rewards import learned_trm\n"
          "lcfg = tg_config.get_config('learned' if PRESET == '' else "
          "'learned,' + PRESET)\n"
          "task = thinking_task.make_task(lcfg.task)\n"
          "trm, info = learned_trm.fit_learned_trm(task, lcfg.trm, seed=0)\n"
          "judge, learned = thinking_task.judge_table(task), trm.table()\n"
          "qh = min(task.hackable)\n"
          "qi = min(set(range(25)) - task.hackable)\n"
          "print('judge (hackable question):', judge[qh])\n"
          "print('learned (hackable question):', np.round(learned[qh], 2))\n"
          "print('judge (informative question):', judge[qi])\n"
          "print('learned (informative question):', "
          "np.round(learned[qi], 2))\n"
          "print('learned TRM: mean abs. error vs judge %.3f, top thinking "
          "= judge\\'s on %.0f %% of questions' % (info['trm_mae'], "
          "100 * info['trm_argmax_agree']))"),
  ]
  return v4.new_notebook(cells=cells, metadata={"kernelspec": {
      "name": "python3", "display_name": "Python 3", "language": "python"}})


def chart_notebook():
  cells = [
      v4.new_code_cell(_setup_cell.setup_cell("tiny")),
      v4.new_markdown_cell(
          "# MSRL chart-to-code rewards in jaxlab\n\n"
          "Paper: *Breaking the SFT Plateau: Multimodal Structured "
          "Reinforcement Learning for Chart-to-Code Generation* (arXiv "
          "2508.13587). R = w_t R_text + w_v R_vis + w_e R_exec, with the "
          "generated code executed in a sandbox. Modules: "
          "`jaxlab.rewards.sandbox`, `jaxlab.rewards.chart`."),
      v4.new_markdown_cell(
          "## 1. Sandbox and rewards\nRender a chart, refuse hostile code, "
          "and score a near-miss completion field by field."),
      v4.new_code_cell(
          "from jaxlab.rewards import sandbox, chart\n"
          "# Warm sandbox workers (matplotlib imported once; every job still "
          "runs in\n# fresh processes), the same pool the experiment's "
          "rewards use below.\n"
          "pool = sandbox.shared_pool(2)\n"
          "gt = \"plt.bar([0,1,2],[3,5,2]);plt.title('cost')\"\n"
          "ok = sandbox.render_chart(gt, size=(64, 64), pool=pool)\n"
          "print('render ok:', ok.ok, ok.image.shape)\n"
          "bad = sandbox.render_chart(\"import os; os.system('ls')\", "
          "pool=pool)\n"
          "print('hostile ok:', bad.ok)\n"
          "pred = \"plt.bar([0,1,2],[3,5,4]);plt.title('cast')\"\n"
          "f = chart.text_reward_fields(pred, gt)\n"
          "print('fields:', {k: round(v, 3) for k, v in f.items()})\n"
          "r = chart.chart_reward(pred, gt, ok.image)\n"
          "print('reward: %.3f exec: %.0f' % (r['reward'], r['exec']))"),
      v4.new_markdown_cell(
          "## 2. The miniature\nA ViT-prefixed tiny decoder writes code for "
          "procedurally generated charts: SFT, then GRPO stage 1 (text + "
          "exec), then stage 2 (+ SSIM visual reward). The CI preset is "
          "minuscule; see docs/papers/grpo.md for the measured table."),
      v4.new_code_cell(
          "from jaxlab import main as launcher\n"
          "from jaxlab.configs import chart_to_code as c2c_config\n"
          "config = c2c_config.get_config(PRESET)\n"
          "if PRESET == 'tiny':\n"
          "  config.charts.eval_size = 2; config.rl.prompts_per_step = 1; "
          "config.sft.steps = 10; config.sft.eval_every = 5\n"
          "flat = launcher.run_experiment(config, WORKDIR)  "
          "# phase/metric -> mean over seeds\n"
          "print('| phase | exec | data F1 | SSIM |')\n"
          "for p in ('sft', 'text_exec', 'text_vis_exec'):\n"
          "  print(f\"| {p} | {flat[p + '/exec_rate']:.2f} | "
          "{flat[p + '/data_f1']:.2f} | {flat[p + '/visual_ssim']:.2f} |\")"),
  ]
  return v4.new_notebook(cells=cells, metadata={"kernelspec": {
      "name": "python3", "display_name": "Python 3", "language": "python"}})


# Notebook file -> its builder (the tests discover builders by this).
NOTEBOOKS = {"trust_grpo.ipynb": trust_notebook,
             "chart_to_code.ipynb": chart_notebook}


def main():
  for name, nb in (("trust_grpo.ipynb", trust_notebook()),
                   ("chart_to_code.ipynb", chart_notebook())):
    nbformat.write(nb, os.path.join(HERE, name))
    print("wrote", name)


if __name__ == "__main__":
  main()
