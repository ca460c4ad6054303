"""Metrics: `WORKDIR/metrics.jsonl`, TensorBoard events, a progress line.

Each logged step appends one JSON object with `step`, the losses/metrics and
(eval rows) `eval/...` keys. Throughput numbers go under `perf/` so that the
deterministic part of a row (everything else) is identical between an
interrupted-and-resumed run and an uninterrupted one. Only process 0 writes.

Throughput counts two things. A *slot* is one of the B*T token positions a
step computes (padding included); a *target* is a token the loss is taken
on (a nonzero of the batch's `loss_mask`, else `mask`; a batch without
either counts every slot, as the `lm` loss does). In a padded chat
fine-tune the two differ a lot (e.g. 64 targets in 512 slots):

  perf/tokens_per_s       target tokens per second (the progress line's
                          `tok/s`; all slots when no count is given)
  perf/slot_tokens_per_s  B*T slots per second (`slot tok/s`)
  perf/mfu                model FLOPs of every slot per second over the peak:
                          the FLOPs really spent (`MFU(slots)`)
  perf/useful_mfu         the same over target tokens only (`useful MFU`)
"""

import functools
import json
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.io import paths


@functools.lru_cache(maxsize=None)
def measured_peak_flops(n: int = 1024, repeats: int = 5) -> float:
  """Achievable matmul FLOP/s of all local devices (the MFU denominator).

  Times an `n x n` float32 matmul on one device and multiplies by the local
  device count; on CPU this is the machine's measured peak, not a datasheet
  number.
  """
  x = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda a: a @ a)
  f(x).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(x).block_until_ready()
    best = min(best, time.perf_counter() - t)
  per_device = 2 * n ** 3 / best
  # CPU "devices" faked by XLA flags share the same cores.
  n_dev = 1 if jax.default_backend() == "cpu" else jax.local_device_count()
  return per_device * n_dev * max(jax.process_count(), 1)


def _scalar(v: Any) -> float | int:
  v = np.asarray(v)
  return v.item() if v.ndim == 0 else v.tolist()


class MetricsWriter:
  """Appends metric rows; prints progress lines (process 0 only).

  `tokens_per_step` is the slots (B*T) per step and `flops_per_step` their
  model FLOPs; the target tokens come from `count_targets`.
  """

  def __init__(self, workdir: str, *, total_steps: int,
               tokens_per_step: int = 0, flops_per_step: float | None = None,
               peak_flops: float | None = None, tensorboard: bool = True):
    self.enabled = jax.process_index() == 0
    self.path = paths.join(workdir, "metrics.jsonl")
    # Object stores (gs://) cannot append: keep the rows, rewrite the file.
    self._remote = paths.is_url(self.path)
    self._lines: list[str] | None = None
    self.total_steps = total_steps
    self.tokens_per_step = tokens_per_step
    self.flops_per_step = flops_per_step
    self.peak_flops = peak_flops
    self._tb = None
    self._tb_dir = paths.join(workdir, "tensorboard")
    self._want_tb = tensorboard
    self._t0, self._s0 = None, None
    self._targets = None  # target tokens of the steps after `start`

  def truncate_after(self, step: int) -> None:
    """Drops rows newer than `step` (written after the checkpoint we resume)."""
    if not self.enabled or not paths.exists(self.path):
      self._lines = []
      return
    rows = [line + "\n" for line in paths.read_text(self.path).splitlines()
            if line.strip()]
    keep = [line for line in rows if json.loads(line)["step"] <= step]
    self._lines = keep
    paths.write_text(self.path, "".join(keep))

  def start(self, step: int) -> None:
    """Marks the (re)start of timing after compilation."""
    self._t0, self._s0 = time.perf_counter(), step
    self._targets = None

  def count_targets(self, step: int, n: float) -> None:
    """Adds step `step`'s number of target tokens (the loss mask's nonzeros).

    Steps up to the one passed to `start` are not timed and not counted;
    without any call, target tokens are taken to be every slot.
    """
    if self._s0 is not None and step > self._s0:
      self._targets = (self._targets or 0) + float(n)

  def perf(self, step: int) -> dict[str, float]:
    if self._t0 is None or step <= self._s0:
      return {}
    dt = time.perf_counter() - self._t0
    steps_s = (step - self._s0) / max(dt, 1e-9)
    slots_s = steps_s * self.tokens_per_step
    targets_s = (slots_s if self._targets is None
                 else self._targets / max(dt, 1e-9))
    out = {"perf/steps_per_s": steps_s,
           "perf/tokens_per_s": targets_s,
           "perf/slot_tokens_per_s": slots_s,
           "perf/eta_s": (self.total_steps - step) / max(steps_s, 1e-9)}
    if self.flops_per_step and self.peak_flops:
      mfu = steps_s * self.flops_per_step / self.peak_flops
      out["perf/mfu"] = mfu
      out["perf/useful_mfu"] = mfu * (targets_s / slots_s if slots_s else 1.0)
    return out

  def write(self, step: int, metrics: dict[str, Any],
            progress: bool = True) -> dict[str, Any]:
    row = {"step": int(step)}
    row.update({k: _scalar(v) for k, v in metrics.items()})
    if not self.enabled:
      return row
    line = json.dumps(row) + "\n"
    if self._remote:
      if self._lines is None:
        self._lines = ([l + "\n" for l in paths.read_text(
            self.path).splitlines() if l.strip()]
                       if paths.exists(self.path) else [])
      self._lines.append(line)
      paths.write_text(self.path, "".join(self._lines))
    else:
      with open(self.path, "a") as f:
        f.write(line)
    self._write_tb(row)
    if progress:
      self._progress(row)
    return row

  def _write_tb(self, row: dict[str, Any]) -> None:
    if not self._want_tb:
      return
    if self._tb is None:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      if paths.is_url(self._tb_dir):
        _register_epath_event_writer(self._tb_dir)
      self._tb = SummaryWriter(self._tb_dir)
    for k, v in row.items():
      if k != "step" and isinstance(v, (int, float)):
        self._tb.add_scalar(k, v, row["step"])
    self._tb.flush()

  def _progress(self, row: dict[str, Any]) -> None:
    parts = [f"step {row['step']}/{self.total_steps}"]
    for k in ("loss", "eval/loss"):
      if k in row:
        parts.append(f"{k} {row[k]:.4f}")
    if "perf/steps_per_s" in row:
      parts.append(f"{row['perf/steps_per_s']:.2f} steps/s")
      parts.append(f"{row['perf/tokens_per_s']:.0f} tok/s")
      if "perf/slot_tokens_per_s" in row:
        parts.append(f"{row['perf/slot_tokens_per_s']:.0f} slot tok/s")
      eta = row["perf/eta_s"]
      parts.append(f"ETA {int(eta // 60)}m{int(eta % 60):02d}s")
    if "perf/mfu" in row:
      parts.append(f"MFU(slots) {100 * row['perf/mfu']:.1f}%")
    if "perf/useful_mfu" in row:
      parts.append(f"useful MFU {100 * row['perf/useful_mfu']:.1f}%")
    print(" | ".join(parts), file=sys.stdout, flush=True)

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


def read_metrics(workdir: str) -> list[dict[str, Any]]:
  path = paths.join(workdir, "metrics.jsonl")
  if not paths.exists(path):
    return []
  return [json.loads(line) for line in paths.read_text(path).splitlines()
          if line.strip()]


class _EpathEventFile:
  """A TensorBoard event file on an object store, written through epath.

  Objects cannot be appended to: the records are kept and the whole file is
  uploaded again on each flush (event files of scalars stay small).
  """

  def __init__(self, path: str):
    self._path, self._data = path, bytearray()

  def write(self, data: bytes) -> None:
    self._data += data

  def flush(self) -> None:
    paths.write_bytes(self._path, bytes(self._data))

  def close(self) -> None:
    self.flush()


class _EpathEventFactory:

  def open(self, path: str) -> _EpathEventFile:
    paths.makedirs(path.rsplit("/", 1)[0])
    return _EpathEventFile(path)

  def directory_check(self, path: str) -> None:
    paths.makedirs(path)


def _register_epath_event_writer(url: str) -> None:
  """Routes tensorboardX's writes under `url`'s scheme through epath (its
  own gs:// writer needs google-cloud-storage; epath uses gcsfs / gfile)."""
  from tensorboardX import record_writer  # pylint: disable=g-import-not-at-top
  record_writer.register_writer_factory(paths.scheme(url),
                                        _EpathEventFactory())
