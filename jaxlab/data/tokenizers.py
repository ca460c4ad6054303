"""Tokenizers behind one small interface.

`ByteTokenizer` needs no files (UTF-8 bytes + a few specials, optionally extra
named special tokens such as FIM sentinels); `SentencePieceTokenizer` wraps a
`.model` file (both for the miniatures). `from_pretrained(path)` is a Hugging
Face checkpoint's own tokenizer through `transformers.AutoTokenizer`
(`jaxlab.data.hf_tokenizer.HFTokenizer`: chat templates, assistant masks).
All expose encode/decode, bos/eos/pad ids and vocab_size.
"""

from collections.abc import Callable, Mapping, Sequence
import json
from typing import Any

from jaxlab import registry
from jaxlab.data.tokenizer_base import Tokenizer


class ByteTokenizer(Tokenizer):
  """UTF-8 bytes as ids 0..255, then pad, bos, eos, then named specials.

  Named special tokens (e.g. `("<fim_prefix>", "<fim_suffix>")`) are matched
  verbatim in `encode` and each becomes one id.
  """

  PAD, BOS, EOS = 256, 257, 258

  def __init__(self, special_tokens: Sequence[str] = ()):
    self._specials = list(special_tokens)
    if len(set(self._specials)) != len(self._specials):
      raise ValueError(f"duplicate special tokens: {self._specials}")
    self._special_ids = {s: 259 + i for i, s in enumerate(self._specials)}

  @property
  def vocab_size(self) -> int:
    return 259 + len(self._specials)

  @property
  def bos_id(self) -> int:
    return self.BOS

  @property
  def eos_id(self) -> int:
    return self.EOS

  @property
  def pad_id(self) -> int:
    return self.PAD

  @property
  def special_tokens(self) -> dict[str, int]:
    return dict(self._special_ids)

  def add_special_tokens(self, tokens: Sequence[str]) -> list[int]:
    """Adds named specials (idempotent); returns their ids."""
    for tok in tokens:
      if tok not in self._special_ids:
        self._special_ids[tok] = 259 + len(self._specials)
        self._specials.append(tok)
    return [self._special_ids[t] for t in tokens]

  def encode(self, text: str, *, add_bos: bool = False,
             add_eos: bool = False) -> list[int]:
    ids = [self.BOS] if add_bos else []
    i = 0
    # Longest special first so that overlapping names match greedily.
    specials = sorted(self._specials, key=len, reverse=True)
    while i < len(text):
      for s in specials:
        if text.startswith(s, i):
          ids.append(self._special_ids[s])
          i += len(s)
          break
      else:
        j = i
        while j < len(text) and not any(text.startswith(s, j)
                                        for s in specials):
          j += 1
        ids.extend(text[i:j].encode("utf-8"))
        i = j
    if add_eos:
      ids.append(self.EOS)
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    inverse = {v: k for k, v in self._special_ids.items()}
    out, buf = [], bytearray()
    for t in ids:
      t = int(t)
      if t < 256:
        buf.append(t)
        continue
      out.append(buf.decode("utf-8", errors="replace"))
      buf = bytearray()
      if t in inverse:
        out.append(inverse[t])
      # pad/bos/eos decode to nothing.
    out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)


class SentencePieceTokenizer(Tokenizer):
  """Wraps a sentencepiece `.model` file."""

  def __init__(self, model_path: str):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    import os  # pylint: disable=g-import-not-at-top
    if not os.path.exists(model_path):
      raise FileNotFoundError(f"sentencepiece model not found: {model_path}")
    self._sp = spm.SentencePieceProcessor(model_file=model_path)

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  @property
  def bos_id(self) -> int:
    return self._sp.bos_id()

  @property
  def eos_id(self) -> int:
    return self._sp.eos_id()

  @property
  def pad_id(self) -> int:
    pad = self._sp.pad_id()
    return pad if pad >= 0 else self._sp.eos_id()

  def encode(self, text: str, *, add_bos: bool = False,
             add_eos: bool = False) -> list[int]:
    ids = list(self._sp.encode(text))
    if add_bos:
      ids = [self.bos_id] + ids
    if add_eos:
      ids = ids + [self.eos_id]
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    return self._sp.decode([int(i) for i in ids])

  def token_id(self, piece: str) -> int:
    pid = self._sp.piece_to_id(piece)
    if pid == self._sp.unk_id() and piece != self._sp.id_to_piece(pid):
      return super().token_id(piece)
    return pid


def from_pretrained(path: str) -> Tokenizer:
  """A Hugging Face checkpoint directory's own tokenizer (`HFTokenizer`).

  Loaded with `transformers.AutoTokenizer` (tokenizer.json, or an older
  checkpoint's tokenizer.model): `encode(text)`, `decode(ids,
  skip_special_tokens=)`, `apply_chat_template(messages, *,
  add_generation_prompt=True, **template_kwargs) -> list[int]` and
  `chat_loss_mask(messages, **template_kwargs) -> (ids, mask)`; see
  `jaxlab.data.hf_tokenizer`.
  """
  from jaxlab.data import hf_tokenizer  # pylint: disable=g-import-not-at-top
  return hf_tokenizer.from_pretrained(path)


def template_kwargs(value: Any, *,
                    field: str = "chat_template_kwargs") -> dict[str, Any]:
  """Chat-template keywords from a config value.

  `None`/`""` -> {}; a JSON object as text (the command line:
  `--config.data.chat_template_kwargs='{"enable_thinking": false}'`); or a
  mapping (a dict or ConfigDict set in a config file). The keywords go to
  `apply_chat_template`: template variables (`enable_thinking`, ...),
  `tools`, `documents`, `chat_template`.
  """
  if value is None or (isinstance(value, str) and not value.strip()):
    return {}
  if isinstance(value, str):
    try:
      value = json.loads(value)
    except json.JSONDecodeError as e:
      raise ValueError(f"{field}={value!r}: not a JSON object ({e})") from None
  if hasattr(value, "to_dict"):  # ml_collections.ConfigDict
    value = value.to_dict()
  if not isinstance(value, Mapping):
    raise ValueError(f"{field}: expected a JSON object of chat-template "
                     f"keywords, got {value!r}")
  return dict(value)


def row_template_kwargs(row: Any, base: Mapping[str, Any] | None = None
                        ) -> dict[str, Any]:
  """`base` keywords plus a data row's own `tools` / `documents`."""
  out = dict(base or {})
  if isinstance(row, Mapping):
    for name in ("tools", "documents"):
      if row.get(name) is not None:
        out[name] = row[name]
  return out


def padded_vocab_size(vocab_size: int, multiple: int = 64) -> int:
  """The model's vocabulary for a tokenizer of `vocab_size` ids: rounded up
  to a multiple of `multiple` (64), so the vocab axis divides any
  `mesh.tensor`; the padding ids are never produced by the tokenizer."""
  return -(-int(vocab_size) // multiple) * multiple


TOKENIZER_NAMES = ("byte", "sentencepiece", "auto", "hf")
# Further tokenizers by name: `fn(*, path, checkpoint) -> Tokenizer`,
# registered from their own module of `jaxlab.data` (found by package walk,
# plugin directories included), e.g.
#
#     @tokenizers.register("my_bpe")
#     def my_bpe(*, path, checkpoint): return MyBPE(path)
TOKENIZERS: registry.Registry[Callable[..., Tokenizer]] = registry.Registry(
    "tokenizer")
register = TOKENIZERS.register


def build(name: str, *, path: str = "", checkpoint: str = "",
          field: str = "tokenizer") -> Tokenizer:
  """The tokenizer a config names (one rule for every experiment).

  `byte`; `sentencepiece` (a `.model` file at `path`); `auto` (the
  checkpoint's own, `checkpoint` being the HF directory the model is loaded
  from); `hf` (a checkpoint directory's tokenizer at `path`); or a name
  registered with `register` (`TOKENIZERS`). `field` names the config field
  in error messages.
  """
  if name == "byte":
    return ByteTokenizer()
  if name == "sentencepiece":
    return SentencePieceTokenizer(path)
  if name == "auto":
    if not checkpoint:
      raise ValueError(f"{field}='auto' uses the tokenizer of the checkpoint "
                       "the model is loaded from, but no checkpoint is set "
                       "(init_from / checkpoint)")
    return from_pretrained(checkpoint)
  if name == "hf":
    if not path:
      raise ValueError(f"{field}='hf' needs the tokenizer directory as the "
                       "path field")
    return from_pretrained(path)
  if name not in TOKENIZERS:
    registry.import_package_modules("jaxlab.data")
  if name not in TOKENIZERS:
    raise ValueError(f"{field}={name!r}; valid: "
                     f"{', '.join(TOKENIZER_NAMES + TOKENIZERS.names())}")
  return TOKENIZERS.get(name)(path=path, checkpoint=checkpoint)
