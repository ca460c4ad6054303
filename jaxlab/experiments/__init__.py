"""One module per experiment (`config.experiment`), found by package walk.

`import_loss_modules` imports every module that registers a trainer loss
(`jaxlab.train.losses.register`), so `config.loss.name` finds a paper's loss
without the experiment importing its module first; the launcher and the
ahead-of-time compiler call it before a run. Both walks cover the plugin
directories of `JAXLAB_PLUGIN_PATH` (`jaxlab.registry.plugin_dirs`).

`run_experiment(config, workdir)` runs the experiment `config.experiment`
names: the launcher's (`jaxlab.main.run_experiment` is this function), and
what a notebook or benchmark calls to run one.
"""

import importlib

from jaxlab import registry

# Every module of these packages, and these modules, register losses.
LOSS_PACKAGES = ("jaxlab.objectives",)
LOSS_MODULES = ("jaxlab.train.losses", "jaxlab.rl.learner")


def import_loss_modules() -> tuple[str, ...]:
  """Imports every module that registers losses; returns the loss names."""
  for package_name in LOSS_PACKAGES:
    registry.import_package_modules(package_name)
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
  # Already registered (a built-in loss, or its module imported): done,
  # without importing every objective module (a fresh process, e.g. a
  # notebook kernel, pays ~0.5 s for them). Otherwise import them all.
  from jaxlab.train import losses  # pylint: disable=g-import-not-at-top
  if name in losses.available():
    return
  valid = import_loss_modules()
  if name not in valid:
    raise ValueError(f"config.loss.name={name!r} is not a registered loss; "
                     f"valid: {', '.join(valid)}")


# Modules of `jaxlab.experiments` that are not experiments (no `run`).
_NOT_EXPERIMENTS = frozenset({"launch_local", "report", "results", "compile",
                              "bench"})


def available_experiments() -> tuple[str, ...]:
  """Names `config.experiment` may take: the runnable modules and
  per-paper packages of `jaxlab.experiments` (found by package walk,
  plugin directories included: a new experiment is a new file, or a
  package `experiments/<paper>/` with its own glue beside it)."""
  return tuple(name for name in registry.package_modules("jaxlab.experiments",
                                                         packages=True)
               if name not in _NOT_EXPERIMENTS)


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
  from jaxlab import progress  # pylint: disable=g-import-not-at-top
  progress.start(name)  # stage / step / ETA lines and a heartbeat
  try:
    return module.run(config, workdir)
  finally:
    progress.stop()
