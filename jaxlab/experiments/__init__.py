"""One module per experiment (`config.experiment`), found by package walk.

`import_loss_modules` imports every module that registers a trainer loss
(`jaxlab.train.losses.register`), so `config.loss.name` finds a paper's loss
without the experiment importing its module first; the launcher and the
ahead-of-time compiler call it before a run. Both walks cover the plugin
directories of `JAXLAB_PLUGIN_PATH` (`jaxlab.registry.plugin_dirs`).
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
