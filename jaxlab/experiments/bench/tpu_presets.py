r"""Compile every paper-scale preset for its TPU topology (no TPU needed).

    python -m jaxlab.experiments.bench.tpu_presets [--only=rope_extension,dpad]
        [--out=docs/bench/tpu_presets.json] [--timeout_s=1500]

Finds the configs of `jaxlab/configs/` whose `paper` preset names a TPU
topology (`paper_configs`), runs `python -m jaxlab.experiments.compile
--config=NAME:paper --out=...` for each in its own process (one at a time:
a compile uses every core), and merges the reports into one JSON with the
command, the exit status, wall and CPU seconds and the load average around
each. `python -m jaxlab.experiments.bench._tables` renders its table in
docs/benchmarks.md. A preset already in `--out` with the same config
digest is kept unless `--force` (so an interrupted sweep resumes).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from jaxlab import configs as configs_pkg
from jaxlab.io import params as params_io


def paper_configs() -> list[str]:
  """Names of the packaged configs with a `paper` preset that names a TPU
  topology (`config.scale.topology`: a `PAPER` dict through
  `jaxlab.configs._scale.preset`, or set by the config itself, as the
  controller and StableToken configs do), or whose module names one in
  `PAPER_TOPOLOGY` (Vulcan)."""
  out = []
  for info in pkgutil.iter_modules(configs_pkg.__path__):
    if info.name.startswith("_") or info.name == "common":
      continue
    mod = importlib.import_module(f"{configs_pkg.__name__}.{info.name}")
    try:
      mod.get_config("paper")
    except (ValueError, KeyError, TypeError):  # no `paper` argument
      continue
    if topology_flag(info.name) is not None:
      out.append(info.name)
  return sorted(out)


def topology_flag(name: str) -> list[str] | None:
  """The `compile` flags naming `name:paper`'s topology: none where the
  preset sets `scale.topology`, `--topology=` the config module's
  `PAPER_TOPOLOGY` otherwise (Vulcan); None: no topology known."""
  mod = importlib.import_module(f"{configs_pkg.__name__}.{name}")
  c = mod.get_config("paper")
  if c.get("scale") is not None and c.scale.get("topology"):
    return []
  if isinstance(getattr(mod, "PAPER_TOPOLOGY", None), str):
    return [f"--topology={mod.PAPER_TOPOLOGY}"]
  return None


def config_digest(name: str) -> str:
  mod = importlib.import_module(f"{configs_pkg.__name__}.{name}")
  c = mod.get_config("paper")
  _, digest = params_io.config_key(c, *sorted(c.keys()))
  return digest


def compile_one(name: str, *, timeout_s: float) -> dict[str, Any]:
  """One preset's compile in a child process; its report and the run."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "aot.json")
    flags = topology_flag(name) or []
    cmd = [sys.executable, "-m", "jaxlab.experiments.compile",
           f"--config={name}:paper", f"--out={out}", *flags]
    before = os.getloadavg()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
      proc = subprocess.run(cmd, capture_output=True, text=True,
                            timeout=timeout_s, check=False)
      code, tail = proc.returncode, (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired as e:
      code = None
      tail = f"timed out after {timeout_s:.0f} s: {str(e.stdout or '')[-500:]}"
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = None
    if os.path.isfile(out):
      with open(out) as f:
        report = json.load(f)
  status = ("ok" if code == 0 else "does_not_fit" if code == 1
            else "timeout" if code is None else "error")
  return {
      "config": name, "digest": config_digest(name),
      "command": " ".join(["python -m jaxlab.experiments.compile",
                           f"--config={name}:paper",
                           *(topology_flag(name) or [])]),
      "status": status, "exit_code": code, "process_wall_s": wall,
      "process_cpu_s": (usage1.ru_utime + usage1.ru_stime
                        - usage0.ru_utime - usage0.ru_stime),
      "loadavg_before": list(before), "loadavg_after": list(os.getloadavg()),
      "report": report, "output_tail": None if code == 0 else tail,
  }


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", default="",
                  help="comma-separated config names (default: all)")
  ap.add_argument("--out", default="docs/bench/tpu_presets.json")
  ap.add_argument("--timeout_s", type=float, default=1500.0)
  ap.add_argument("--force", action="store_true")
  args = ap.parse_args(argv)
  names = paper_configs()
  if args.only:
    wanted = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
      print(f"error: no paper preset in {unknown}; presets: "
            f"{', '.join(names)}", file=sys.stderr)
      return 2
    names = wanted
  doc: dict[str, Any] = {"what": __doc__.splitlines()[0], "cases": {}}
  if os.path.isfile(args.out):
    with open(args.out) as f:
      doc = json.load(f)
  for name in names:
    old = doc["cases"].get(name)
    if (old and not args.force and old.get("digest") == config_digest(name)
        and old.get("status") in ("ok", "does_not_fit")):
      print(f"{name}: kept ({old['status']})", flush=True)
      continue
    print(f"{name}: compiling ...", flush=True)
    rec = compile_one(name, timeout_s=args.timeout_s)
    doc["cases"][name] = rec
    print(f"{name}: {rec['status']} in {rec['process_wall_s']:.0f} s",
          flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
      json.dump(doc, f, indent=1, sort_keys=True)
      f.write("\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
