"""Compute once, reload after: a JSON result or a model's trained weights.

    r = memo.json_file(path, lambda: run_one(config, seed))   # resumable
    curve = memo.params_file(model, path, meta, lambda: train(model),
                             field="history")

Unlike `jaxlab.io.stages`, a file found at `path` is reused as it is (no
config digest beside it): the caller puts what determines it into the path
(`jaxlab.io.params.config_key`) or, for weights, into `meta`, which
`jaxlab.io.params.load` checks.
"""

from __future__ import annotations

from collections.abc import Callable
import json
import os
from typing import Any

from jaxlab.io import params as params_io


def json_file(path: str, fn: Callable[[], Any]) -> Any:
  """The JSON at `path`, or `fn()` written there atomically (floats of
  numpy types as floats)."""
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  value = fn()
  with open(path + ".tmp", "w") as f:
    json.dump(value, f, default=float)
  os.replace(path + ".tmp", path)
  return value


def params_file(model, path: str | None, meta: dict[str, Any],
                train: Callable[[], Any], *, field: str = "result") -> Any:
  """Loads `model`'s weights from `path` (saved with `meta`) and returns
  the `field` saved beside them; else trains (`train()` updates `model` in
  place and returns that value) and saves both. `path` None: just trains.
  """
  if path and params_io.exists(path):
    return params_io.load(model, path, meta)[field]
  value = train()
  if path:
    params_io.save(model, path, {**meta, field: value})
  return value
