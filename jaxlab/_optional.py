"""Optional dependencies: one import helper, one message naming the extra.

    soundfile = _optional.require("soundfile", "audio")

imports `soundfile` or raises `MissingExtraError` (an ImportError)

    jaxlab.data.audio needs soundfile: pip install 'jaxlab[audio]'

The extras are declared in pyproject.toml ([project.optional-dependencies]);
tests/packaging_test.py checks that every `require(module, extra)` names an
extra that declares the module's distribution.
"""

import importlib
import sys
import types


class MissingExtraError(ImportError):
  """An optional dependency of jaxlab is not installed."""


def require(module: str, extra: str, *, user: str | None = None
            ) -> types.ModuleType:
  """Imports `module` (dotted names allowed), or names the extra to install.

  Args:
    module: what to import, e.g. "imageio.v3".
    extra: the jaxlab extra that provides it, e.g. "video".
    user: who needs it, for the message; default: the calling module.

  Raises:
    MissingExtraError: `module` (or a module it imports) is not installed.
  """
  try:
    return importlib.import_module(module)
  except ModuleNotFoundError as e:
    if user is None:
      caller = sys._getframe(1)  # pylint: disable=protected-access
      user = caller.f_globals.get("__name__", "jaxlab")
    missing = e.name or module.split(".")[0]
    raise MissingExtraError(
        f"{user} needs {missing}: pip install 'jaxlab[{extra}]'",
        name=missing) from e
