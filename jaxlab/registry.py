"""Name -> function registries: how a config picks a paper's variant by string.

Every family (RoPE scalings, training losses, advantage estimators, rerank
weights and directions, visual judges, unlearning objectives, model builders)
is one `Registry`, so registration, lookup and the error for an unknown name
behave the same everywhere:

    SCALINGS = Registry("RoPE scaling method")

    @SCALINGS.register("yarn")
    def yarn_inv_freq(...): ...

    SCALINGS.get("yarm")  # ValueError: unknown RoPE scaling method 'yarm';
                          # valid choices: default, ntk, pi, yarn

Registration is discovery: a module registers its entries when imported,
and `import_package_modules("jaxlab.models")` imports every module of a
package (a package walk), so a new file is found without an edit anywhere.
Directories on `JAXLAB_PLUGIN_PATH` (`os.pathsep`-separated) are laid out
like the `jaxlab` package (`DIR/models/x.py` is module `jaxlab.models.x`,
`DIR/configs/x.py` a config, `DIR/colabs/`, `DIR/docs/papers/`): the walk
covers them too, for a paper developed outside the checkout.
"""

import dataclasses
import importlib
import os
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
  """An unregistered name. A ValueError for users, a KeyError for mappings."""

  def __str__(self) -> str:  # KeyError would quote the message.
    return str(self.args[0])


class Registry(Mapping[str, T], Generic[T]):
  """A read-only mapping from names to registered objects of one family."""

  def __init__(self, kind: str):
    self.kind = kind
    self._items: dict[str, T] = {}

  def register(self, name: str) -> Callable[[T], T]:
    """Decorator registering its target under `name` (once per name)."""

    def wrap(obj: T) -> T:
      if name in self._items and self._items[name] is not obj:
        raise ValueError(f"{self.kind} {name!r} is already registered")
      self._items[name] = obj
      return obj

    return wrap

  def get(self, name: str) -> T:  # pytype: disable=signature-mismatch
    if name not in self._items:
      raise UnknownNameError(
          f"unknown {self.kind} {name!r}; valid choices: "
          f"{', '.join(self.names())}")
    return self._items[name]

  def names(self) -> tuple[str, ...]:
    return tuple(sorted(self._items))

  def __getitem__(self, name: str) -> T:
    return self.get(name)

  def __contains__(self, name: object) -> bool:
    return name in self._items

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())

  def __len__(self) -> int:
    return len(self._items)

  def __repr__(self) -> str:
    return f"Registry({self.kind!r}: {', '.join(self.names())})"


# -- discovery ----------------------------------------------------------------

PLUGIN_ENV = "JAXLAB_PLUGIN_PATH"


def plugin_dirs() -> tuple[str, ...]:
  """The directories of `JAXLAB_PLUGIN_PATH` (laid out like `jaxlab/`)."""
  return tuple(os.path.abspath(d) for d in
               os.environ.get(PLUGIN_ENV, "").split(os.pathsep) if d)


def plugin_subdirs(*parts: str) -> tuple[str, ...]:
  """`DIR/<parts>` of every plugin directory where it exists."""
  return tuple(p for p in (os.path.join(d, *parts) for d in plugin_dirs())
               if os.path.isdir(p))


def package_path(package_name: str) -> list[str]:
  """`package.__path__`, extended by the plugin directories' counterparts
  (`DIR/models` for `jaxlab.models`), so their modules import as the
  package's own."""
  package = importlib.import_module(package_name)
  path = package.__path__
  extra = [d for d in plugin_subdirs(*package_name.split(".")[1:])
           if d not in path]
  if extra:
    path.extend(extra)
    importlib.invalidate_caches()
  return list(path)


def package_modules(package_name: str, *,
                    packages: bool = False) -> tuple[str, ...]:
  """Names of the modules of `package_name` (plugin directories included),
  sorted; private ones (`_x`) left out, subpackages only with `packages`."""
  return tuple(sorted({
      info.name for info in pkgutil.iter_modules(package_path(package_name))
      if not info.name.startswith("_") and (packages or not info.ispkg)}))


def import_package_modules(package_name: str) -> tuple[str, ...]:
  """Imports every module of `package_name` (its registrations run);
  returns their full names."""
  names = tuple(f"{package_name}.{m}" for m in package_modules(package_name))
  for name in names:
    importlib.import_module(name)
  return names


def config_value(value):
  """A config value as plain Python: a ConfigDict -> dict (`to_dict`), a list
  -> tuple (dataclass fields are hashable, jit-static), recursively."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, Mapping):
    return {k: config_value(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return tuple(config_value(v) for v in value)
  return value


def dataclass_from_config(cls: type[T], section: Mapping | None, *,
                          exclude: tuple[str, ...] = ("name",),
                          where: str = "model",
                          defaults: Mapping | None = None,
                          **overrides) -> T:
  """`cls(**section)`: one config section (dict or ConfigDict) -> dataclass.

  Keys in `exclude` are dropped; values go through `config_value`; `defaults`
  fill keys the section lacks (like `dict.setdefault`); `overrides` always
  win. A key
  that is not a field of `cls` is one error naming it (as `where.key`) and the
  valid fields.
  """
  fields = {f.name for f in dataclasses.fields(cls)}
  kw = {}
  for key, value in dict(section or {}).items():
    if key in exclude:
      continue
    if key not in fields:
      raise ValueError(f"{where}.{key} is not a {cls.__name__} field; "
                       f"valid: {', '.join(sorted(fields))}")
    kw[key] = config_value(value)
  for key, value in (defaults or {}).items():
    kw.setdefault(key, value)
  kw.update(overrides)
  return cls(**kw)
