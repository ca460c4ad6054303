"""Sandbox throughput: a warm `SandboxPool` vs one process per job.

    python -m jaxlab.experiments.bench sandbox [--jobs=24] [--oneshot_jobs=6]
        [--workers=2] [--out=FILE]

An RL step of chart-to-code renders every completion of a group in
`jaxlab.rewards.sandbox`. Both modes run the same typical plotting program
(a labelled, titled bar chart with a legend and a line, like MSRL's
completions) with the same isolation (namespaces, drop to nobody when root,
limits, audit hook) and the same concurrency (`--workers` threads):

  pool      `SandboxPool(workers)`: warm zygotes, one fork per job;
  one_shot  `render_chart` without a pool: a fresh interpreter per job that
            imports numpy/matplotlib each time.

Reports jobs/s, median latency, the pool's start-up time (paid once per
training run) and the isolation modes the jobs actually got. Both modes
must render identical images (checked). Timings on a shared machine are
noisy; `load_avg` records the 1-minute load at the start. Prints one JSON
object (also written to --out when given).
"""

import argparse
import concurrent.futures
import os
import platform
import statistics
import time

import numpy as np

from jaxlab.experiments import bench
from jaxlab.rewards import sandbox

PROGRAM = """\
import matplotlib.pyplot as plt
import numpy as np
labels = ['Q1', 'Q2', 'Q3', 'Q4']
sales = [12, 19, 7, 15]
fig, ax = plt.subplots()
ax.bar(labels, sales, color='tab:blue', label='sales')
ax.plot(labels, np.cumsum(sales) / 4, 'r--o', label='running mean')
ax.set_title('Quarterly sales')
ax.set_xlabel('quarter')
ax.set_ylabel('units')
ax.legend()
"""


def _run(render, n: int, workers: int) -> tuple[float, list, list]:
  """Wall seconds for `n` jobs on `workers` threads, latencies, results."""
  def one(_):
    t0 = time.perf_counter()
    r = render(PROGRAM, timeout_s=60.0, size=(64, 64))
    return time.perf_counter() - t0, r
  t0 = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(workers) as ex:
    out = list(ex.map(one, range(n)))
  wall = time.perf_counter() - t0
  return wall, [o[0] for o in out], [o[1] for o in out]


def _summary(wall, lat, results, n) -> dict:
  bad = [r.error for r in results if not r.ok]
  if bad:
    raise RuntimeError(f"sandbox jobs failed: {bad[:3]}")
  return {"jobs": n, "wall_s": round(wall, 3),
          "jobs_per_s": round(n / wall, 3),
          "median_latency_s": round(statistics.median(lat), 3)}


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="python -m jaxlab.experiments.bench sandbox")
  parser.add_argument("--jobs", type=int, default=24)
  parser.add_argument("--oneshot_jobs", type=int, default=6)
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  load = os.getloadavg()[0]

  t0 = time.perf_counter()
  pool = sandbox.SandboxPool(args.workers)
  start_s = time.perf_counter() - t0
  try:
    pool.render(PROGRAM, timeout_s=60.0)  # first fork after start-up
    wall, lat, res = _run(pool.render, args.jobs, args.workers)
    pool_stats = {"start_s": round(start_s, 3),
                  **_summary(wall, lat, res, args.jobs)}
  finally:
    pool.close()
  wall, lat, res1 = _run(sandbox.render_chart, args.oneshot_jobs,
                         args.workers)
  one_stats = _summary(wall, lat, res1, args.oneshot_jobs)
  if not np.array_equal(res[0].image, res1[0].image):
    raise RuntimeError("pool and one-shot renderings differ")
  r = res[0]
  report = {
      "machine": platform.machine(), "cpu_count": os.cpu_count(),
      "load_avg": round(load, 2), "workers": args.workers,
      "program": "bar chart + line + legend + labels, 64x64",
      "isolation": {"net_mode": r.net_mode, "fs_mode": r.fs_mode,
                    "pid_ns": r.pid_ns, "dropped": r.dropped, "uid": r.uid},
      "pool": pool_stats,
      "one_process_per_job": one_stats,
      "pool_speedup": round(pool_stats["jobs_per_s"] /
                            one_stats["jobs_per_s"], 2),
      "note": "2 shared CPU cores under other load: timings are noisy",
  }
  bench.emit(report, args.out, indent=2)
