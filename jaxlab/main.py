r"""The launcher: `python -m jaxlab.main --config=NAME[:preset] --workdir=D`.

    python -m jaxlab.main --config=lm_tiny:tiny \
        --workdir=/tmp/run --config.train.steps=50 --config.optim.lr=1e-3

(the `jaxlab` console script is the same command). `--config` is a packaged
config by name (`jaxlab/configs/NAME.py`) or a path to a config file.
`--help` with `--config=NAME` lists that config's presets, arguments and
fields with their defaults; without, the packaged configs.

The config is locked: an unknown `--config.x.y` is an error, as is a value of
the wrong type. `config.experiment` names a module
`jaxlab.experiments.<name>` whose `run(config, workdir) -> dict` is called.
Re-running the same command resumes from the workdir's latest checkpoint.

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
import sys
import textwrap

from absl import app
from absl import logging
from absl import flags
from ml_collections import config_flags

from jaxlab import _optional
from jaxlab import configs as configs_lib
from jaxlab import experiments as experiments_lib

CONFIG_DIR = configs_lib.CONFIG_DIR

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


# Where losses register themselves: `jaxlab.experiments.import_loss_modules`.
LOSS_PACKAGES = experiments_lib.LOSS_PACKAGES
LOSS_MODULES = experiments_lib.LOSS_MODULES
import_loss_modules = experiments_lib.import_loss_modules


# The experiment runner (`jaxlab.experiments`, where benchmarks reach it
# without importing the launcher).
check_loss = experiments_lib.check_loss
available_experiments = experiments_lib.available_experiments
run_experiment = experiments_lib.run_experiment


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:  # orbax logs every save at INFO
    logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  try:
    config.get("experiment")
  except OSError as e:  # get_config raised an OSError: ml_collections defers
    raise ValueError(f"--config: {e}") from None  # it to the first access
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
    result = _run_preemptible(config, workdir)
  else:
    try:
      result = _run_preemptible(config, workdir)
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
    from jaxlab.experiments import results as results_lib  # pylint: disable=g-import-not-at-top
    where = (f" at step {result['checkpoint_step']}"
             if result.get("checkpoint_step") is not None else "")
    print(f"Preempted ({result.get('preempted_by') or 'signal'}): saved"
          f"{where} in {result.get('checkpoint_dir') or workdir}; resume "
          f"with: {results_lib.command_line()}", flush=True)
  else:
    print(outputs_message(workdir, result), flush=True)
  table = final_tables(workdir)
  if table:
    print("\n" + table, flush=True)


def final_tables(workdir: str) -> str:
  """WORKDIR/results.json's tables as the docs show them ('' when it has
  none: `train` and `generate` print their values above)."""
  from jaxlab.experiments import report  # pylint: disable=g-import-not-at-top
  from jaxlab.io import paths  # pylint: disable=g-import-not-at-top
  path = paths.join(workdir, "results.json")
  try:
    if not paths.exists(path) or not json.loads(
        paths.read_text(path)).get("tables"):
      return ""
    return report.render_workdir(workdir)
  except Exception as e:  # pylint: disable=broad-except
    # The run's files are written; a table that does not render is a note.
    return f"(tables not rendered: {type(e).__name__}: {e}; " \
           f"python -m jaxlab.experiments.report --workdir={workdir})"


def _run_preemptible(config, workdir: str) -> dict:
  """`run_experiment` with Ctrl-C / SIGTERM as a preemption.

  The first signal sets `parallel.preemption`'s flag: the trainer saves a
  checkpoint at its next step boundary and returns `preempted`; stage loops
  (`io.stages`) raise `Preempted` at their next boundary. Either way the run
  ends here with `preempted` set (exit 0; re-running resumes). A run whose
  experiment finished anyway after the signal gets `"preempted": true` added
  to its results.json (its numbers may come from a model cut short).
  """
  from jaxlab.parallel import preemption  # pylint: disable=g-import-not-at-top
  with preemption.handling():
    try:
      result = dict(run_experiment(config, workdir) or {})
    except preemption.Preempted:
      result = {"preempted": True, "workdir": workdir}
    if preemption.requested():
      result["preempted"] = True
      result["preempted_by"] = preemption.reason()
      _mark_results_preempted(workdir, preemption.reason())
  return result


def _mark_results_preempted(workdir: str, why: str | None) -> None:
  """Adds `"preempted": true` to WORKDIR/results.json when it exists."""
  from jaxlab.io import paths  # pylint: disable=g-import-not-at-top
  path = paths.join(workdir, "results.json")
  if not paths.exists(path):
    return
  res = json.loads(paths.read_text(path))
  if res.get("preempted") is True:
    return
  res["preempted"] = True
  res["preempted_by"] = why
  paths.write_text(path, json.dumps(res, indent=1, ensure_ascii=False)
                   + "\n")


def outputs_message(workdir: str, result: dict) -> str:
  """The run's output files, one per line: only those that exist."""
  from jaxlab.io import paths  # pylint: disable=g-import-not-at-top
  ckpt = result.get("checkpoint_dir")
  tb = paths.join(workdir, "tensorboard")
  rows = [("Results", paths.join(workdir, "results.json"), ""),
          ("Samples", paths.join(workdir, "samples.jsonl"), ""),
          ("Metrics", paths.join(workdir, "metrics.jsonl"),
           f" (TensorBoard: {tb})" if paths.epath_of(tb).is_dir() else ""),
          ("Checkpoints", ckpt if isinstance(ckpt, str) else "", "")]
  lines = [f"{name}: {path}{extra}" for name, path, extra in rows
           if path and paths.exists(path)]
  return "\n".join(lines) or f"Workdir: {workdir}"


# Checkpoint fields that were merged into `config.init_from` (issue 42).
RENAMED_CHECKPOINT_FIELDS = ("pretrained", "fe.pretrained", "checkpoint",
                             "train.init_from")


def _renamed_field_error(argv) -> str | None:
  """One clear message for an old checkpoint field given as an override."""
  for a in argv[1:]:
    field = a.split("=", 1)[0].removeprefix("--config.")
    if a.startswith("--config.") and field in RENAMED_CHECKPOINT_FIELDS:
      return (f"--config.{field} is gone: every experiment reads its "
              "checkpoint from config.init_from (a shipped name, a HF "
              "directory, a .gguf file, a jaxlab trainer workdir or a Hub "
              f"id); use --config.init_from=... instead of --config.{field}")
  return None


def _parse_flags(argv):
  """absl flag parsing, turning config-override errors into one line."""
  renamed = _renamed_field_error(argv)
  if renamed:
    print(f"error: {renamed}", file=sys.stderr)
    sys.exit(2)
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
  except SyntaxError as e:  # the config file itself does not parse
    print(f"error: --config: {e.filename}:{e.lineno}: SyntaxError: {e.msg}",
          file=sys.stderr)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    # ml_collections raises these for an unknown --config.a.b key or a value
    # of the wrong type; name the offending flag.
    msg = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
    bad = [a for a in argv[1:] if a.startswith("--config.")]
    print(f"error: invalid config override ({msg}); overrides given: "
          f"{' '.join(bad)}", file=sys.stderr)
  sys.exit(2)


packaged_configs = configs_lib.packaged
resolve_config_arg = configs_lib.resolve
_resolve_config_flag = configs_lib.resolve_flag


def _flatten(config, prefix: str = "") -> list[tuple[str, object]]:
  """`config` -> [(dotted field, value)], leaves only, in key order."""
  out = []
  for key in config.keys():
    value = config[key]
    if hasattr(value, "keys") and hasattr(value, "items"):
      sub = _flatten(value, f"{prefix}{key}.")
      out.extend(sub if sub else [(f"{prefix}{key}", "{}")])
    else:
      out.append((f"{prefix}{key}", value))
  return out


def _load_config(path: str, arg: str | None):
  """(config, parse_arg's defaults or None) of config file `path` at `arg`.

  The defaults are what the file passes to `common.parse_arg`: booleans are
  presets, the rest `key=value` arguments.
  """
  import importlib.util  # pylint: disable=g-import-not-at-top
  from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("_jaxlab_help_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  seen = []
  parse_arg = common.parse_arg

  def recording(a, **defaults):
    seen.append(defaults)
    return parse_arg(a, **defaults)

  common.parse_arg = recording
  try:
    config = module.get_config(arg) if arg else module.get_config()
  finally:
    common.parse_arg = parse_arg
  return module, config, (seen[0] if seen else None)


def config_help(value: str) -> str:
  """`--help` text for `--config=value`: presets, args, fields + defaults."""
  path, _, arg = resolve_config_arg(value).partition(":")
  module, config, defaults = _load_config(path, arg or None)
  name = os.path.basename(path)[:-3]
  doc = (module.__doc__ or "").strip().split("\n\n")[0]
  lines = [f"--config={value} ({path})", ""]
  if doc:
    lines += [doc, ""]
  from jaxlab.configs import _field_docs as field_docs  # pylint: disable=g-import-not-at-top
  if defaults is not None:
    presets = sorted(k for k, v in defaults.items() if isinstance(v, bool))
    args = sorted((k, v) for k, v in defaults.items()
                  if not isinstance(v, bool))
    purposes = field_docs.preset_docs(module)
    lines.append(f"Presets (--config={name}:P1,P2,...):" +
                 ("" if presets else " none"))
    for p in presets:
      lines.append(textwrap.fill(
          purposes.get(p, "see the config's docstring"), 78,
          initial_indent=f"  {p:<10} ", subsequent_indent=" " * 13))
    lines.append(f"Arguments (--config={name}:KEY=VALUE): " + (
        ", ".join(f"{k}={v!r}" for k, v in args) or "none"))
    lines.append("")
  meanings = field_docs.describe(path)
  lines.append(f"Fields (--config.FIELD=VALUE; defaults"
               f"{' with ' + arg if arg else ''}; meaning below each):")
  for k, v in _flatten(config):
    lines.append(f"  {k}={v!r}")
    if meanings.get(k):
      lines.append(textwrap.fill(meanings[k], 78, initial_indent=" " * 6,
                                 subsequent_indent=" " * 6))
  return "\n".join(lines)


def launcher_help() -> str:
  """`--help` text without `--config`: usage, flags, packaged configs."""
  doc = (sys.modules[__name__].__doc__ or "").strip()
  usage = doc.split("\n\n", 3)
  flag_help = flags.FLAGS.module_help(sys.modules[__name__]) if (
      __name__ != "__main__") else flags.FLAGS.main_module_help()
  return "\n\n".join([
      "\n\n".join(usage[:3]), "Flags:\n" + flag_help,
      "Packaged configs (--config=NAME[:preset]; --help --config=NAME lists "
      "its presets and fields):\n" + textwrap.fill(
          ", ".join(packaged_configs()), 78, initial_indent="  ",
          subsequent_indent="  ")])


_HELP_FLAGS = ("--help", "-h", "-?", "--helpshort")


def _config_value(argv: list[str]) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a[len("--config="):]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _entry():
  if any(a in _HELP_FLAGS for a in sys.argv[1:]):
    value = _config_value(sys.argv[1:])
    try:
      print(config_help(value) if value else launcher_help())
    except (ValueError, FileNotFoundError, ImportError) as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)
    sys.exit(0)
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
  except _optional.MissingExtraError as e:  # names the extra to install
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


def entry():
  """The `jaxlab` console script (`jaxlab --config=NAME[:preset] ...`)."""
  _entry()


if __name__ == "__main__":
  _entry()
