"""The op breakdown of `profile.py` run in a child process, and its summary.

Its own module: the decode and train benchmarks call it, and `profile.py`
(the child's entry) imports them for their model sizes.
"""

import json
import sys
from typing import Any


def in_child(argv: list[str], timeout: float = 3600) -> dict[str, Any]:
  """`main(argv)` in a fresh interpreter (the flags need a fresh backend),
  so the caller's timings run without tracing; returns its JSON (or
  {"error": ...})."""
  import subprocess  # pylint: disable=g-import-not-at-top
  cmd = [sys.executable, "-m", "jaxlab.experiments.bench", "profile", *argv]
  try:
    res = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         timeout=timeout)
    text = res.stdout
    return json.loads(text[text.index("{"):])
  except (subprocess.SubprocessError, ValueError) as e:
    return {"error": f"{type(e).__name__}: {str(e)[-500:]}"}


def summary(prof: dict[str, Any]) -> dict[str, Any]:
  """The part of a breakdown a benchmark row keeps."""
  if "error" in prof:
    return prof
  keep = ("by_part", "by_phase", "by_op_kind", "by_module", "total_op_ms",
          "loadavg")
  out = {k: prof[k] for k in keep if k in prof}
  out["by_op_kind"] = {k: v for k, v in out.get("by_op_kind", {}).items()
                       if v >= 0.005}
  out["top_ops"] = prof.get("top_ops", [])[:5]
  return out
