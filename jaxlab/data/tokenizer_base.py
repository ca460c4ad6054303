"""The interface every jaxlab tokenizer implements (`Tokenizer`).

Its own module so that the implementations (`jaxlab.data.tokenizers`,
`jaxlab.data.hf_tokenizer`) import it without importing each other;
`jaxlab.data.tokenizers.Tokenizer` is this class.
"""

import abc
from collections.abc import Sequence


class Tokenizer(abc.ABC):
  """The interface every jaxlab tokenizer implements."""

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    ...

  @property
  @abc.abstractmethod
  def bos_id(self) -> int:
    ...

  @property
  @abc.abstractmethod
  def eos_id(self) -> int:
    ...

  @property
  @abc.abstractmethod
  def pad_id(self) -> int:
    ...

  @abc.abstractmethod
  def encode(self, text: str, *, add_bos: bool = False,
             add_eos: bool = False) -> list[int]:
    ...

  @abc.abstractmethod
  def decode(self, ids: Sequence[int]) -> str:
    ...

  def token_id(self, piece: str) -> int:
    """Id of a single-token string (e.g. " yes", a special token)."""
    ids = self.encode(piece)
    if len(ids) != 1:
      raise ValueError(f"{piece!r} is not a single token (ids {ids})")
    return ids[0]
