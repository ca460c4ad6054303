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
"""

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
