"""A data row -> token ids and a loss mask, for the row layouts datasets ship.

`config.data.format` names the layout (`auto` picks it from the row's
columns, in this order):

* `messages`  a conversation under `data.chat_key` (default `messages`),
  rendered with the checkpoint's chat template; the loss is on the
  assistant turns (`HFTokenizer.chat_loss_mask`), the row's `tools` /
  `documents` join the template's keywords.
* `prompt_completion`  `data.prompt_key` / `data.completion_key` (TRL's and
  MaxText's SFT columns).
* `question_answer`  `data.question_key` / `data.answer_key` (GSM8K, TOFU,
  MetaMathQA-style rows).
* `text`  `data.text_key`: plain language-model rows, loss on every token.

For the two pair layouts the prompt is context and the completion the
target (`data.completion_only=True`, MaxText's `completion_only` SFT and
tunix's masked SFT), or both are targets (`False`). With a chat template
(`data.chat_template="auto"` and a tokenizer that has one, or `"on"`), the
pair becomes a user / assistant conversation and is rendered like
`messages`; otherwise the text is `prompt + completion` with BOS / EOS as the
tokenizer adds them. Every function is picklable (grain worker processes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

FORMATS = ("auto", "messages", "prompt_completion", "question_answer", "text")
CHAT_TEMPLATE_MODES = ("auto", "on", "off")


@dataclasses.dataclass(frozen=True)
class RowFormat:
  """How rows are read: the layout and its column names."""
  kind: str = "auto"
  text_key: str = "text"
  chat_key: str = "messages"
  prompt_key: str = "prompt"
  completion_key: str = "completion"
  question_key: str = "question"
  answer_key: str = "answer"
  completion_only: bool = True
  chat_template: str = "auto"
  template_kwargs: tuple[tuple[str, Any], ...] = ()

  @classmethod
  def from_config(cls, data_cfg) -> "RowFormat":
    """The format of `config.data` (missing fields keep their defaults)."""
    from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
    get = data_cfg.get
    kw = {f.name: get(f.name) for f in dataclasses.fields(cls)
          if f.name not in ("kind", "template_kwargs")
          and get(f.name) is not None}
    kind = get("format") or "auto"
    if kind not in FORMATS:
      raise ValueError(f"data.format={kind!r}; valid: {', '.join(FORMATS)}")
    if kw.get("chat_template", "auto") not in CHAT_TEMPLATE_MODES:
      raise ValueError(f"data.chat_template={kw['chat_template']!r}; valid: "
                       f"{', '.join(CHAT_TEMPLATE_MODES)}")
    tk = tokenizers.template_kwargs(get("chat_template_kwargs"),
                                    field="data.chat_template_kwargs")
    return cls(kind=kind, template_kwargs=tuple(sorted(tk.items())), **kw)

  def pair_keys(self, kind: str) -> tuple[str, str]:
    return ((self.prompt_key, self.completion_key)
            if kind == "prompt_completion"
            else (self.question_key, self.answer_key))

  def resolve(self, columns) -> str:
    """The layout of rows with these `columns` (`kind` unless `auto`).

    Raises:
      ValueError: the columns have none of the layouts' keys, or lack the
        ones `kind` names.
    """
    columns = set(columns)
    need = {"messages": (self.chat_key,), "text": (self.text_key,),
            "prompt_completion": self.pair_keys("prompt_completion"),
            "question_answer": self.pair_keys("question_answer")}
    if self.kind != "auto":
      missing = [k for k in need[self.kind] if k not in columns]
      if missing:
        raise ValueError(
            f"data.format={self.kind!r} reads column(s) {missing}, which the "
            f"rows lack (columns: {sorted(columns)}); set the data.*_key "
            "fields to the dataset's column names")
      return self.kind
    for kind in ("messages", "prompt_completion", "question_answer", "text"):
      if all(k in columns for k in need[kind]):
        return kind
    raise ValueError(
        f"rows with columns {sorted(columns)} match no data.format: give "
        f"data.text_key, data.chat_key, data.prompt_key/completion_key or "
        "data.question_key/answer_key the dataset's column names")


def _uses_template(fmt: RowFormat, tokenizer) -> bool:
  has = (hasattr(tokenizer, "chat_loss_mask")
         and getattr(tokenizer, "chat_template", None))
  if fmt.chat_template == "on" and not has:
    raise ValueError(
        "data.chat_template='on' needs a checkpoint tokenizer with a chat "
        f"template, got {type(tokenizer).__name__}")
  return bool(has) and fmt.chat_template != "off"


def _as_text(value: Any, key: str) -> str:
  if isinstance(value, str):
    return value
  if isinstance(value, bytes):
    return value.decode("utf-8")
  if isinstance(value, (int, float)):
    return str(value)
  raise ValueError(f"column {key!r}: expected text, got "
                   f"{type(value).__name__} ({str(value)[:60]!r})")


def encode_row(row: Mapping[str, Any], tokenizer, fmt: RowFormat,
               kind: str) -> tuple[list[int], list[int]]:
  """(token ids, loss mask) of one row in layout `kind` (`fmt.resolve`).

  The mask is 1 on tokens that are targets: every token of `text`, the
  assistant turns of `messages`, the completion (with its EOS) of a pair,
  or the whole pair when `fmt.completion_only` is False.
  """
  kwargs = dict(fmt.template_kwargs)
  if kind == "text":
    ids = tokenizer.encode(_as_text(row[fmt.text_key], fmt.text_key),
                           add_bos=True, add_eos=True)
    return list(ids), [1] * len(ids)
  if kind == "messages":
    if not hasattr(tokenizer, "chat_loss_mask"):
      raise ValueError(
          "rows with a messages column need a checkpoint tokenizer with a "
          f"chat template (data.tokenizer='auto'), got "
          f"{type(tokenizer).__name__}")
    from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
    ids, mask = tokenizer.chat_loss_mask(
        list(row[fmt.chat_key]), **tokenizers.row_template_kwargs(row, kwargs))
    return list(ids), list(mask)
  pk, ck = fmt.pair_keys(kind)
  prompt, completion = _as_text(row[pk], pk), _as_text(row[ck], ck)
  if _uses_template(fmt, tokenizer):
    ids, mask = tokenizer.chat_loss_mask(
        [{"role": "user", "content": prompt},
         {"role": "assistant", "content": completion}], **kwargs)
    ids, mask = list(ids), list(mask)
  else:
    p = list(tokenizer.encode(prompt, add_bos=True, add_eos=False))
    c = list(tokenizer.encode(completion, add_bos=False, add_eos=True))
    ids, mask = p + c, [0] * len(p) + [1] * len(c)
  if not fmt.completion_only:
    mask = [1] * len(ids)
  return ids, mask
