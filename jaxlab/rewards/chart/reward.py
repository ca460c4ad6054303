"""The weighted MSRL chart reward and its curriculum (spec F items 4-5).

R = w_text * R_text + w_vis * R_vis + w_exec * R_exec, with a two-stage
curriculum (stage 1: w_v = 0; stage 2: w_v > 0, spec F item 5).

* `exec_reward`: 1 if the code renders a figure in the sandbox.
* `visual_reward`: render (in the sandbox) and compare with a judge of
  `jaxlab.rewards.chart.judges.JUDGES`.
* `ChartRewardConfig`, `chart_reward`, `chart_group_reward` (a group reward
  fn), and `CurriculumConfig` / `stage_for_step`.

Values not reported by the paper are marked [inferred] and are config fields.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from jaxlab.rewards import sandbox
from jaxlab.rewards.chart import fields
from jaxlab.rewards.chart import judges
from jaxlab.rewards.chart import normalize

# ----------------------------------------------------------------------------
# Rewards and curriculum.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChartRewardConfig:
  """R = w_text R_text + w_vis R_vis + w_exec R_exec (weights [inferred]).

  The paper's weights were not found (spec F): equal weights by default.
  """
  w_text: float = 1.0
  w_vis: float = 1.0
  w_exec: float = 1.0
  text_weights: tuple[tuple[str, float], ...] = tuple(
      (d, 1.0) for d in fields.TEXT_DIMENSIONS)
  rel_tol: float = 0.05
  judge: str = "ssim"
  timeout_s: float = 10.0
  size: tuple[int, int] = (64, 64)
  require_fence: bool = False
  max_workers: int = 2
  # Render in the process-wide warm `sandbox.shared_pool(max_workers)`
  # (matplotlib imported once; each job still forked, dropped and limited
  # alone) instead of one fresh interpreter per render.
  pool: bool = False

  def replace(self, **kw) -> "ChartRewardConfig":
    return dataclasses.replace(self, **kw)


def exec_reward(result: sandbox.RenderResult) -> float:
  """R_exec in {0, 1}: the code ran and produced a figure."""
  return float(result.ok and result.image is not None)


def visual_reward(result: sandbox.RenderResult, target: np.ndarray,
                  judge: str | judges.Judge = "ssim") -> float:
  """R_vis: judge(rendering, target) in [0, 1]; render failure -> 0."""
  if not result.ok or result.image is None:
    return 0.0
  fn = judges.get_judge(judge) if isinstance(judge, str) else judge
  return float(np.clip(fn(result.image, target), 0.0, 1.0))


def weighted_reward(r_text: float, r_vis: float, r_exec: float,
                    cfg: ChartRewardConfig) -> float:
  return cfg.w_text * r_text + cfg.w_vis * r_vis + cfg.w_exec * r_exec


def chart_reward(completion: str, gt_code: str, target_image: np.ndarray | None,
                 cfg: ChartRewardConfig = ChartRewardConfig(), *,
                 render: Callable[..., sandbox.RenderResult] | None = None
                 ) -> dict[str, float]:
  """All reward components of one completion (spec F item 4)."""
  render = render or sandbox.render_chart
  code = normalize.extract_code(completion, require_fence=cfg.require_fence)
  if code is None:
    return {"reward": 0.0, "text": 0.0, "vis": 0.0, "exec": 0.0}
  r_text = fields.text_reward(code, gt_code, weights=dict(cfg.text_weights),
                       rel_tol=cfg.rel_tol)
  need_render = cfg.w_exec != 0 or cfg.w_vis != 0
  result = render(code, timeout_s=cfg.timeout_s, size=cfg.size) if (
      need_render) else None
  r_exec = exec_reward(result) if result is not None else 0.0
  r_vis = 0.0
  if cfg.w_vis != 0 and result is not None and target_image is not None:
    r_vis = visual_reward(result, target_image, cfg.judge)
  return {"reward": weighted_reward(r_text, r_vis, r_exec, cfg),
          "text": r_text, "vis": r_vis, "exec": r_exec}


def chart_group_reward(completions: Sequence[str], gt_codes: Sequence[str],
                       target_images: Sequence[np.ndarray | None],
                       cfg: ChartRewardConfig = ChartRewardConfig(), *,
                       render=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
  """A group reward fn: rewards `[N]` and per-component arrays.

  Renders run concurrently in `cfg.max_workers` sandboxes (warm pool
  workers when `cfg.pool`; `render` overrides both).
  """
  if not (len(completions) == len(gt_codes) == len(target_images)):
    raise ValueError("completions, gt_codes and target_images must have the "
                     "same length")
  if render is None and cfg.pool:
    render = sandbox.shared_pool(max(1, cfg.max_workers)).render
  with concurrent.futures.ThreadPoolExecutor(max(1, cfg.max_workers)) as ex:
    parts = list(ex.map(lambda a: chart_reward(*a, cfg, render=render),
                        zip(completions, gt_codes, target_images)))
  comps = {k: np.array([p[k] for p in parts], np.float32) for k in parts[0]}
  return comps.pop("reward"), comps


@dataclasses.dataclass(frozen=True)
class CurriculumStage:
  name: str
  steps: int
  dataset: str
  reward: ChartRewardConfig


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
  """MSRL two-stage curriculum (spec F item 5), each stage its own data."""
  stages: tuple[CurriculumStage, ...]

  @classmethod
  def two_stage(cls, stage1_steps: int, stage2_steps: int, *,
                stage1_data: str = "stage1", stage2_data: str = "stage2",
                base: ChartRewardConfig = ChartRewardConfig()
                ) -> "CurriculumConfig":
    return cls((CurriculumStage("text_exec", stage1_steps, stage1_data,
                                base.replace(w_vis=0.0)),
                CurriculumStage("text_vis_exec", stage2_steps, stage2_data,
                                base)))


def stage_for_step(step: int, curriculum: CurriculumConfig) -> CurriculumStage:
  """The stage that global `step` falls in (the last one afterwards)."""
  if step < 0:
    raise ValueError(f"step must be >= 0, got {step}")
  start = 0
  for st in curriculum.stages:
    if step < start + st.steps:
      return st
    start += st.steps
  return curriculum.stages[-1]
