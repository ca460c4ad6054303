"""A memoising chart renderer and the rollout reward of paper F's GRPO.

    render = make_renderer(chart.ChartRewardConfig(pool=True))
    rewards, metrics = chart_rollout_reward(codes, charts, cfg,
                                            group_size=8, render=render)
    render.hits, render.misses
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from jaxlab.rewards import chart
from jaxlab.rewards import sandbox


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


def chart_rollout_reward(codes, charts, reward_cfg, *, group_size: int,
                         render=None) -> tuple[np.ndarray, dict[str, float]]:
  """Rewards of a rollout batch's `codes` against its `charts` (row-aligned
  dicts with `code` and `image`, G rows per chart) and their means: the
  components (`exec`, `text`, `vis`), the within-group reward spread
  `group_std` (GRPO's only signal: a group whose rewards are all equal has
  zero advantages) and the fraction of such `flat_groups`."""
  rewards, comp = chart.chart_group_reward(
      codes, [c["code"] for c in charts], [c["image"] for c in charts],
      reward_cfg, render=render)
  rewards = np.asarray(rewards, np.float32)
  spread = rewards.reshape(-1, group_size).std(axis=1)
  return rewards, {"group_std": float(spread.mean()),
                   "flat_groups": float(np.mean(spread < 1e-6)),
                   **{k: float(comp[k].mean()) for k in ("exec", "text",
                                                         "vis")}}
