"""The packaged configs: one file per experiment, `--config=NAME[:preset]`.

`resolve` turns a `--config` value into the file path ml_collections'
`DEFINE_config_file` reads, for the launcher (`jaxlab.main`) and the
ahead-of-time compiler (`jaxlab.experiments.compile`) alike. A config is
found by name in `jaxlab/configs/` and in the `configs/` folder of each
plugin directory (`JAXLAB_PLUGIN_PATH`, see `jaxlab.registry`).
"""

import os
from collections.abc import Sequence

from jaxlab import registry

CONFIG_DIR = os.path.dirname(os.path.abspath(__file__))


def config_dirs() -> tuple[str, ...]:
  """`jaxlab/configs/`, then the plugin directories' `configs/`."""
  return (CONFIG_DIR,) + registry.plugin_subdirs("configs")


def _files() -> dict[str, str]:
  """name -> path of every config (the first directory wins)."""
  out: dict[str, str] = {}
  for d in config_dirs():
    for f in sorted(os.listdir(d)):
      if f.endswith(".py") and not f.startswith("_") and f != "common.py":
        out.setdefault(f[:-3], os.path.join(d, f))
  return out


def packaged() -> tuple[str, ...]:
  """Names of the configs: `jaxlab/configs/` and the plugins' `configs/`."""
  return tuple(sorted(_files()))


def resolve(value: str) -> str:
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
  files = _files()
  if is_name and path in files:
    return files[path] + sep + arg
  raise ValueError(f"--config={value}: no config file {path!r}"
                   + ("" if not is_name else " and no packaged config of that"
                      " name") + f"; packaged configs: "
                   f"{', '.join(packaged())}")


def resolve_flag(argv: Sequence[str]) -> list[str]:
  """`argv` with its `--config=V` (or `--config V`) value resolved."""
  out = list(argv)
  for i, a in enumerate(out):
    if a.startswith("--config="):
      out[i] = "--config=" + resolve(a[len("--config="):])
    elif a == "--config" and i + 1 < len(out):
      out[i + 1] = resolve(out[i + 1])
  return out
