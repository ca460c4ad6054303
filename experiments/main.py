r"""The launcher: `python -m experiments.main --config=configs/X.py --workdir=D`.

    python -m experiments.main --config=configs/lm_tiny.py:tiny \
        --workdir=/tmp/run --config.train.steps=50 --config.optim.lr=1e-3

The config is locked: an unknown `--config.x.y` is an error, as is a value of
the wrong type. `config.experiment` names a module `experiments.<name>` whose
`run(config, workdir) -> dict` is called. Re-running the same command resumes
from the workdir's latest checkpoint.
"""

import importlib
import json
import os
import sys

from absl import app
from absl import logging
from absl import flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file (configs/X.py[:arg]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "Directory for checkpoints, metrics, results.")
flags.mark_flags_as_required(["config", "workdir"])


def run_experiment(config, workdir: str) -> dict:
  """Imports `experiments.<config.experiment>` and runs it."""
  name = config.get("experiment", "train")
  try:
    module = importlib.import_module(f"experiments.{name}")
  except ModuleNotFoundError as e:
    if e.name != f"experiments.{name}":
      raise
    here = os.path.dirname(__file__)
    valid = sorted(f[:-3] for f in os.listdir(here)
                   if f.endswith(".py") and not f.startswith("_")
                   and f != "main.py")
    raise ValueError(f"config.experiment={name!r} has no module "
                     f"experiments/{name}.py; valid: {', '.join(valid)}"
                     ) from None
  if not hasattr(module, "run"):
    raise ValueError(f"experiments.{name} has no run(config, workdir)")
  return module.run(config, workdir)


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:  # orbax logs every save at INFO
    logging.set_verbosity(logging.WARNING)
  from jaxlab import parallel  # pylint: disable=g-import-not-at-top
  parallel.maybe_initialize_distributed()  # before any JAX computation
  from jaxlab.train import trainer  # pylint: disable=g-import-not-at-top
  workdir = trainer.check_workdir(_WORKDIR.value)
  result = run_experiment(_CONFIG.value, workdir)
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
    print(f"error: {e}", file=sys.stderr)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    # ml_collections raises these for an unknown --config.a.b key or a value
    # of the wrong type; name the offending flag.
    msg = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
    bad = [a for a in argv[1:] if a.startswith("--config.")]
    print(f"error: invalid config override ({msg}); overrides given: "
          f"{' '.join(bad)}", file=sys.stderr)
  sys.exit(2)


def _entry():
  try:
    app.run(main, flags_parser=_parse_flags)
  except (ValueError, FileNotFoundError) as e:  # user errors: one clear line
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  _entry()
