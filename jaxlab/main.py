r"""The launcher: `python -m jaxlab.main --config=jaxlab/configs/X.py --workdir=D`.

    python -m jaxlab.main --config=jaxlab/configs/lm_tiny.py:tiny \
        --workdir=/tmp/run --config.train.steps=50 --config.optim.lr=1e-3

The config is locked: an unknown `--config.x.y` is an error, as is a value of
the wrong type. `config.experiment` names a module `experiments.<name>` whose
`run(config, workdir) -> dict` is called. Re-running the same command resumes
from the workdir's latest checkpoint.

Multi-process (one mesh over the devices of several processes/hosts): run the
same command in every process, adding

    --coordinator_address=HOST:PORT --num_processes=N --process_id=I

(`jaxlab/experiments/launch_local.py` does this for N processes on one machine), or
`--auto_distributed` (or `JAXLAB_DISTRIBUTED=auto`) on a TPU VM pod slice or
under Slurm/Open MPI, where `jax.distributed.initialize()` detects the
cluster. CPU runs use gloo collectives. Only process 0 writes metrics, logs
and results; when a process dies the others stop within
`--heartbeat_timeout_s`, and re-running every process resumes.
"""

import importlib
import json
import os
import pkgutil
import sys

from absl import app
from absl import logging
from absl import flags
from ml_collections import config_flags

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "configs")

_CONFIG = config_flags.DEFINE_config_file(
    "config", None,
    "A packaged config by name (NAME[:preset], e.g. lm_tiny:tiny; the files "
    "of jaxlab/configs/) or a path to a config file (PATH.py[:preset]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "Directory for checkpoints, metrics, results.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None,
    "HOST:PORT of process 0 for a multi-process run (with --num_processes "
    "and --process_id); absent: a single process.")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Number of processes of a multi-process run.")
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "This process's index in [0, --num_processes).")
_AUTO_DISTRIBUTED = flags.DEFINE_bool(
    "auto_distributed", False,
    "Call jax.distributed.initialize() without arguments so it detects a "
    "TPU VM pod slice / Slurm / Open MPI cluster (also JAXLAB_DISTRIBUTED="
    "auto). Off by default: a plain run is one process.")
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout_s", 60,
    "Multi-process: a process silent this long is declared dead and the "
    "whole run stops (bounded failure time).")
_INIT_TIMEOUT = flags.DEFINE_integer(
    "initialization_timeout_s", 300,
    "Multi-process: how long to wait for every process to join.")
flags.mark_flags_as_required(["config", "workdir"])


# Where losses register themselves (`jaxlab.train.losses.register`): every
# module of these packages, and these modules, are imported before a run, so
# `config.loss.name` finds a paper's loss without the experiment importing its
# module first.
LOSS_PACKAGES = ("jaxlab.objectives",)
LOSS_MODULES = ("jaxlab.train.losses", "jaxlab.rl.learner")


def import_loss_modules() -> tuple[str, ...]:
  """Imports every module that registers losses; returns the loss names."""
  for package_name in LOSS_PACKAGES:
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
      importlib.import_module(f"{package_name}.{info.name}")
  for module_name in LOSS_MODULES:
    importlib.import_module(module_name)
  from jaxlab.train import losses  # pylint: disable=g-import-not-at-top
  return losses.available()


def check_loss(config) -> None:
  """`config.loss.name` is a registered loss (one error listing the valid)."""
  section = config.get("loss")
  if section is None or not hasattr(section, "get"):
    return
  name = section.get("name")
  if name is None:
    return
  valid = import_loss_modules()
  if name not in valid:
    raise ValueError(f"config.loss.name={name!r} is not a registered loss; "
                     f"valid: {', '.join(valid)}")


# Modules of `jaxlab.experiments` that are not experiments (no `run`).
_NOT_EXPERIMENTS = frozenset({"launch_local", "report", "results", "compile",
                              "bench"})


def available_experiments() -> tuple[str, ...]:
  """Names `config.experiment` may take: the runnable modules of
  `jaxlab.experiments` (found by package walk: a new experiment is a new
  file)."""
  from jaxlab import experiments  # pylint: disable=g-import-not-at-top
  return tuple(sorted(
      info.name for info in pkgutil.iter_modules(experiments.__path__)
      if not info.name.startswith("_") and not info.ispkg
      and info.name not in _NOT_EXPERIMENTS))


def run_experiment(config, workdir: str) -> dict:
  """Imports `jaxlab.experiments.<config.experiment>` and runs it."""
  check_loss(config)
  name = config.get("experiment", "train")
  valid = available_experiments()
  if name not in valid:
    raise ValueError(f"config.experiment={name!r} is not an experiment "
                     f"(a module jaxlab/experiments/{name}.py with run()); "
                     f"valid: {', '.join(valid)}")
  module = importlib.import_module(f"jaxlab.experiments.{name}")
  if not hasattr(module, "run"):
    raise ValueError(f"jaxlab.experiments.{name} has no run(config, workdir)")
  return module.run(config, workdir)


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:  # orbax logs every save at INFO
    logging.set_verbosity(logging.WARNING)
  # Before any JAX computation: joining a cluster is impossible afterwards.
  from jaxlab.parallel import distributed  # pylint: disable=g-import-not-at-top
  multi = distributed.initialize(
      _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
      auto=_AUTO_DISTRIBUTED.value or distributed.auto_requested(),
      heartbeat_timeout_s=_HEARTBEAT.value,
      initialization_timeout_s=_INIT_TIMEOUT.value,
      shutdown_timeout_s=_HEARTBEAT.value)
  from jaxlab.train import trainer  # pylint: disable=g-import-not-at-top
  workdir = trainer.check_workdir(_WORKDIR.value)
  if not multi:
    result = run_experiment(_CONFIG.value, workdir)
  else:
    try:
      result = run_experiment(_CONFIG.value, workdir)
    except (ValueError, FileNotFoundError, FloatingPointError) as e:
      # A user error or a non-finite loss: every process usually hits the
      # same one. Exit now rather than wait in JAX's shutdown barrier.
      print(f"error: {e}", file=sys.stderr, flush=True)
      sys.stdout.flush()
      os._exit(2)  # pylint: disable=protected-access
    except Exception as e:  # pylint: disable=broad-except
      distributed.fail(e, resume_hint=f"checkpoints: {workdir}/checkpoints")
      raise
    if not distributed.is_main_process():
      return
  result = {k: v for k, v in (result or {}).items()
            if isinstance(v, (int, float, str, bool, type(None)))}
  print(json.dumps(result, indent=2, sort_keys=True), flush=True)
  if result.get("preempted"):
    print(f"Preempted; re-run the same command to resume from "
          f"{result.get('checkpoint_dir')}.", flush=True)
  else:
    print(f"Results: {os.path.join(workdir, 'results.json')}\n"
          f"Metrics: {os.path.join(workdir, 'metrics.jsonl')} "
          f"(TensorBoard: {os.path.join(workdir, 'tensorboard')})\n"
          f"Checkpoints: {result.get('checkpoint_dir')}", flush=True)


def _parse_flags(argv):
  """absl flag parsing, turning config-override errors into one line."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    msg = str(e)
    if "Traceback (most recent call last)" in msg:
      # ml_collections embeds the config file's traceback (e.g. an unknown
      # preset raised by common.parse_arg): keep the flag and the error.
      lines = [line for line in msg.splitlines() if line.strip()]
      flag = lines[0].split(": Error whilst", 1)[0]
      last = lines[-1]
      for kind in ("ValueError: ", "KeyError: ", "TypeError: "):
        last = last.removeprefix(kind)
      msg = f"{flag}: {last}"
    print(f"error: {msg}", file=sys.stderr)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    # ml_collections raises these for an unknown --config.a.b key or a value
    # of the wrong type; name the offending flag.
    msg = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
    bad = [a for a in argv[1:] if a.startswith("--config.")]
    print(f"error: invalid config override ({msg}); overrides given: "
          f"{' '.join(bad)}", file=sys.stderr)
  sys.exit(2)


def packaged_configs() -> tuple[str, ...]:
  """Names of the configs shipped in `jaxlab/configs/`."""
  return tuple(sorted(
      f[:-3] for f in os.listdir(CONFIG_DIR)
      if f.endswith(".py") and not f.startswith("_") and f != "common.py"))


def resolve_config_arg(value: str) -> str:
  """`--config` value -> a config file path (`[:preset]` kept).

  An existing file is used as given; otherwise a bare name (no `/`, no
  `.py`) is a packaged config, `jaxlab/configs/NAME.py`. Anything else is
  one clear error listing the packaged names.
  """
  path, sep, arg = value.partition(":")
  if os.path.isfile(path):
    return value
  is_name = "/" not in path and os.sep not in path and not path.endswith(
      ".py")
  if is_name and path in packaged_configs():
    return os.path.join(CONFIG_DIR, f"{path}.py") + sep + arg
  raise ValueError(f"--config={value}: no config file {path!r}"
                   + ("" if not is_name else " and no packaged config of that"
                      " name") + f"; packaged configs: "
                   f"{', '.join(packaged_configs())}")


def _resolve_config_flag(argv: list[str]) -> list[str]:
  out = list(argv)
  for i, a in enumerate(out):
    if a.startswith("--config="):
      out[i] = "--config=" + resolve_config_arg(a[len("--config="):])
    elif a == "--config" and i + 1 < len(out):
      out[i + 1] = resolve_config_arg(out[i + 1])
  return out


def _entry():
  try:
    sys.argv = _resolve_config_flag(sys.argv)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  try:
    app.run(main, flags_parser=_parse_flags)
  except (ValueError, FileNotFoundError) as e:  # user errors: one clear line
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  _entry()
