"""The tokenizer a Hugging Face checkpoint ships, through transformers.

    tok = from_pretrained("/ckpt/Qwen3-0.6B")      # tokenizer.json (+ configs)
    ids = tok.encode("Hello")
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}],
                                  enable_thinking=False, tools=[get_weather])
    ids, mask = tok.chat_loss_mask(conversation)   # 1 on assistant tokens

The checkpoint directory is loaded with `transformers.AutoTokenizer` (no
torch needed), as MaxText and tunix do, so encode/decode, the special tokens
and the chat template (every keyword `apply_chat_template` takes: `tools` as
JSON schemas or Python functions, `documents`, `chat_template=`,
`continue_final_message`, template variables such as `enable_thinking`) are
transformers' own. On top of it: extra end-of-sequence ids from
`generation_config.json` (`eos_ids`), `add_bos` following the checkpoint, and
`chat_loss_mask`, the assistant-token mask for fine-tuning (see there).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jaxlab.data import tokenizer_base as tok_lib

TOKENIZER_FILE = "tokenizer.json"
SENTENCEPIECE_FILE = "tokenizer.model"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
GENERATION_CONFIG_FILE = "generation_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
# Every file `save` copies (and the exporter copies next to the weights).
FILES = (TOKENIZER_FILE, SENTENCEPIECE_FILE, TOKENIZER_CONFIG_FILE,
         SPECIAL_TOKENS_FILE, CHAT_TEMPLATE_FILE, "vocab.json", "merges.txt",
         "added_tokens.json")
# transformers' SPECIAL_TOKENS_ATTRIBUTES: what a template sees by name.
NAMED_SPECIALS = ("bos_token", "eos_token", "unk_token", "sep_token",
                  "pad_token", "cls_token", "mask_token")
# Keywords of transformers' apply_chat_template that would change what these
# methods return; they are fixed here.
_RESERVED = ("tokenize", "return_dict", "return_tensors",
             "return_assistant_tokens_mask", "padding", "truncation",
             "max_length", "conversation")
# transformers' test for `{% generation %}` markers in a template.
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")
# Stands in for one message's content to find where the template puts it
# (private-use characters: never at the edge of real content).
_MARK = "\ue000jaxlab-content\ue001"


def _read_json(path: str) -> dict[str, Any]:
  if not os.path.exists(path):
    return {}
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not valid JSON ({e})") from None
  if not isinstance(data, dict):
    raise ValueError(f"{path}: expected a JSON object, got "
                     f"{type(data).__name__}")
  return data


def _token_text(value: Any) -> str | None:
  """A special token as written in the configs: a string or AddedToken dict."""
  if value is None or isinstance(value, str):
    return value
  if isinstance(value, Mapping) and "content" in value:
    return value["content"]
  raise ValueError(f"cannot read special token {value!r}")


def _load(path: str, config: Mapping[str, Any],
          specials: Mapping[str, Any]):
  """`transformers.AutoTokenizer` of the directory (local files only)."""
  import transformers  # pylint: disable=g-import-not-at-top
  try:
    return transformers.AutoTokenizer.from_pretrained(path,
                                                      local_files_only=True)
  except Exception as first:  # pylint: disable=broad-except
    # Hand-written configs may spell special tokens as bare {"content": ...}
    # dicts, which transformers rejects; retry with them as strings.
    names = {}
    for name in NAMED_SPECIALS:
      value = config.get(name, specials.get(name))
      if isinstance(value, Mapping):
        names[name] = _token_text(value)
    if names:
      try:
        return transformers.AutoTokenizer.from_pretrained(
            path, local_files_only=True, **names)
      except Exception:  # pylint: disable=broad-except
        pass
    raise ValueError(f"{path}: transformers.AutoTokenizer cannot load the "
                     f"tokenizer ({type(first).__name__}: {first})") from None


def _common_prefix(a: str, b: str) -> int:
  n = min(len(a), len(b))
  i = 0
  while i < n and a[i] == b[i]:
    i += 1
  return i


def _common_suffix(a: str, b: str, limit: int) -> int:
  n = min(len(a), len(b), limit)
  i = 0
  while i < n and a[-1 - i] == b[-1 - i]:
    i += 1
  return i


class HFTokenizer(tok_lib.Tokenizer):
  """A checkpoint's own tokenizer with its special tokens and chat template.

  `hf` is the underlying `transformers` tokenizer.
  """

  def __init__(self, path: str | os.PathLike):
    path = os.fspath(path)
    if not os.path.isdir(path):
      raise FileNotFoundError(f"{path}: not a checkpoint directory")
    if not any(os.path.exists(os.path.join(path, name))
               for name in (TOKENIZER_FILE, SENTENCEPIECE_FILE, "vocab.json")):
      raise FileNotFoundError(
          f"{os.path.join(path, TOKENIZER_FILE)}: not found (nor "
          f"{SENTENCEPIECE_FILE}); a Hugging Face checkpoint directory needs "
          "its tokenizer files")
    self.path = path
    config = _read_json(os.path.join(path, TOKENIZER_CONFIG_FILE))
    specials = _read_json(os.path.join(path, SPECIAL_TOKENS_FILE))
    generation = _read_json(os.path.join(path, GENERATION_CONFIG_FILE))
    self.config = config
    self.hf = _load(path, config, specials)
    self.special_tokens: dict[str, str] = {}
    for name in NAMED_SPECIALS:
      value = getattr(self.hf, name, None)
      if value is not None:
        self.special_tokens[name] = str(value)
    template = self.hf.chat_template
    if isinstance(template, Mapping):  # named templates
      template = template.get("default", next(iter(template.values()), None))
    self.chat_template: str | None = template
    self._bos = self.hf.bos_token_id
    self._eos = self.hf.eos_token_id
    self._pad = self.hf.pad_token_id
    gen_eos = generation.get("eos_token_id")
    gen_eos = [] if gen_eos is None else (
        [gen_eos] if isinstance(gen_eos, int) else list(gen_eos))
    if self._eos is None and gen_eos:
      self._eos = int(gen_eos[0])
    if self._bos is None and generation.get("bos_token_id") is not None:
      self._bos = int(generation["bos_token_id"])
    eos_ids = ([] if self._eos is None else [self._eos]) + gen_eos
    self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys(int(i)
                                                        for i in eos_ids))
    # What the checkpoint's tokenizer adds around a text (add_special_tokens):
    # e.g. Llama 3's <|begin_of_text|>; nothing for Qwen or SmolLM2.
    probe = "a"
    plain = self.hf.encode(probe, add_special_tokens=False)
    full = self.hf.encode(probe, add_special_tokens=True)
    for k in range(len(full) - len(plain) + 1):
      if full[k:k + len(plain)] == plain:
        self._prefix = list(full[:k])
        break
    else:
      self._prefix = []
    self._special_ids = set(int(i) for i in self.hf.all_special_ids) | {
        int(i) for i, t in self.hf.added_tokens_decoder.items()
        if getattr(t, "special", False)} | set(self.eos_ids)

  # -- Tokenizer interface --------------------------------------------------
  @property
  def vocab_size(self) -> int:
    return len(self.hf)

  @property
  def bos_id(self) -> int | None:  # some checkpoints (Qwen) have no bos
    return self._bos

  @property
  def eos_id(self) -> int:
    if self._eos is None:
      raise ValueError(f"{self.path}: the checkpoint defines no eos token")
    return self._eos

  @property
  def pad_id(self) -> int:
    if self._pad is not None:
      return self._pad
    return self._eos if self._eos is not None else 0

  @property
  def bos_prefix(self) -> list[int]:
    """The ids the checkpoint's tokenizer puts before a text (may be [])."""
    return list(self._prefix)

  def encode(self, text: str, *, add_bos: bool = False,
             add_eos: bool = False,
             add_special_tokens: bool = False) -> list[int]:
    """Token ids of `text`.

    `add_bos` puts the checkpoint's own leading special tokens first, as
    transformers does with `add_special_tokens=True` (Llama 3: its
    <|begin_of_text|>; Qwen, SmolLM2: nothing), not `bos_token` blindly.
    `add_special_tokens` is exactly transformers' `tokenizer(text)`.
    `add_eos` appends `eos_id`.
    """
    if add_special_tokens:
      ids = list(self.hf.encode(text, add_special_tokens=True))
    else:
      ids = list(self.hf.encode(text, add_special_tokens=False))
      if add_bos:
        ids = self._prefix + ids
    if add_eos:
      ids.append(self.eos_id)
    return ids

  def decode(self, ids: Sequence[int], *,
             skip_special_tokens: bool = False) -> str:
    return self.hf.decode([int(i) for i in ids],
                          skip_special_tokens=skip_special_tokens)

  def token_id(self, piece: str) -> int:
    tid = self.hf.convert_tokens_to_ids(piece)
    unk = self.hf.unk_token_id
    if tid is None or (tid == unk and piece != self.hf.unk_token):
      return super().token_id(piece)
    return int(tid)

  # -- chat templates -------------------------------------------------------
  def _check(self, messages, kwargs) -> list[dict[str, Any]]:
    if not (kwargs.get("chat_template") or self.chat_template):
      raise ValueError(
          f"{self.path}: no chat template ({CHAT_TEMPLATE_FILE} or "
          f"{TOKENIZER_CONFIG_FILE}['chat_template']); encode plain text")
    bad = [k for k in _RESERVED if k in kwargs]
    if bad:
      raise TypeError(f"chat template keyword(s) {bad} are fixed by this "
                      "method")
    out = []
    for i, m in enumerate(messages):
      if not isinstance(m, Mapping) or "role" not in m:
        raise ValueError(f"message {i} must be a dict with 'role' and "
                         f"'content', got {m!r}")
      out.append(dict(m))
    return out

  def render_chat(self, messages: Sequence[Mapping[str, Any]], *,
                  add_generation_prompt: bool = True,
                  **kwargs: Any) -> str:
    """The chat template's text for `messages` (transformers' rendering).

    `kwargs` are transformers' `apply_chat_template` keywords: `tools`,
    `documents`, `chat_template`, `continue_final_message`, and any
    template variable (`enable_thinking`, ...).
    """
    messages = self._check(messages, kwargs)
    return self.hf.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt,
        **kwargs)

  def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], *,
                          add_generation_prompt: bool = True,
                          **kwargs: Any) -> list[int]:
    """Token ids of the rendered conversation (no special tokens added)."""
    messages = self._check(messages, kwargs)
    ids = self.hf.apply_chat_template(
        messages, tokenize=True, return_dict=False,
        add_generation_prompt=add_generation_prompt, **kwargs)
    return [int(i) for i in ids]

  def has_generation_markers(self, chat_template: str | None = None,
                             tools: Any = None) -> bool:
    """Whether the template marks assistant text with `{% generation %}`."""
    source = self.hf.get_chat_template(chat_template, tools)
    return bool(_GENERATION_RE.search(source))

  def chat_loss_mask(self, messages: Sequence[Mapping[str, Any]],
                     **kwargs: Any) -> tuple[list[int], list[int]]:
    """(ids, mask) of a whole conversation; mask 1 on assistant-written tokens.

    `ids` are `apply_chat_template(messages, add_generation_prompt=False,
    **kwargs)`. Where the template has `{% generation %}` markers, the mask
    is transformers' `return_assistant_tokens_mask` (what the markers
    enclose). Otherwise, for each assistant message, the mask covers what the
    model writes in that turn of the single full rendering: from the end of
    the assistant header (the template's generation prompt, e.g.
    `<|im_start|>assistant\\n`) through the turn's end-of-turn token (the
    first special token after the message's content, e.g. `<|im_end|>`):
    its thinking when the template renders it, the content, tool calls and
    the end-of-turn token; not the role header, not the newline after the
    end-of-turn token. With `continue_final_message=True` the last
    assistant message ends at its content (no end-of-turn token).

    The spans are character offsets into that one rendering, so templates
    that render earlier turns differently from the last one (Qwen3 drops the
    thinking of turns before the last user message) are handled. The body
    starts after the generation prompt of `messages[:i]` where the full
    rendering continues that prompt (else after its first line, the role
    header: Qwen3's `enable_thinking=False` pre-fills an empty thinking block
    that earlier turns lack; else after the last such header before the
    content). The content ends where rendering the conversation with this
    message's content replaced by a marker stops differing from it.
    """
    if kwargs.pop("add_generation_prompt", False):
      raise ValueError("chat_loss_mask renders a finished conversation; "
                       "add_generation_prompt=True is not allowed")
    messages = self._check(messages, kwargs)
    cont = bool(kwargs.get("continue_final_message"))
    if not cont and self.has_generation_markers(kwargs.get("chat_template"),
                                                kwargs.get("tools")):
      out = self.hf.apply_chat_template(
          messages, tokenize=True, return_dict=True,
          return_assistant_tokens_mask=True, add_generation_prompt=False,
          **kwargs)
      return ([int(i) for i in out["input_ids"]],
              [int(m) for m in out["assistant_masks"]])
    full = self.render_chat(messages, add_generation_prompt=False, **kwargs)
    ids, offsets = self._encode_with_offsets(full)
    prefix_kw = {k: v for k, v in kwargs.items()
                 if k != "continue_final_message"}
    mask = [0] * len(ids)
    lo = 0  # the end of the previous assistant span (characters)
    for i, m in enumerate(messages):
      if m["role"] != "assistant":
        continue
      last_open = cont and i == len(messages) - 1
      content_start, content_end = self._content_span(messages, i, full,
                                                      kwargs)
      start = self._body_start(messages, i, full, prefix_kw, lo,
                               content_start)
      if content_end is None:  # the template does not render the content
        content_end = start
      start = min(start, content_end)
      first = next((k for k, (a, b) in enumerate(offsets)
                    if b > start or (a == b and a >= start)), len(ids))
      if last_open:
        end_tok = max((k for k, (a, _) in enumerate(offsets)
                       if a < content_end), default=first - 1)
      else:
        end_tok = next((k for k in range(first, len(ids))
                        if ids[k] in self._special_ids
                        and offsets[k][0] >= content_end), None)
        if end_tok is None:
          raise ValueError(
              f"assistant message {i}: no end-of-turn token after its "
              "content in the rendered conversation; cannot tell where the "
              "turn ends")
      for k in range(first, end_tok + 1):
        mask[k] = 1
      lo = offsets[end_tok][1] if end_tok >= first else start
    return ids, mask

  # -- helpers of chat_loss_mask -------------------------------------------
  def _encode_with_offsets(self, text: str
                           ) -> tuple[list[int], list[tuple[int, int]]]:
    try:
      enc = self.hf(text, add_special_tokens=False,
                    return_offsets_mapping=True)
      return ([int(i) for i in enc["input_ids"]],
              [(int(a), int(b)) for a, b in enc["offset_mapping"]])
    except NotImplementedError:  # a Python (slow) tokenizer: no offsets
      raise ValueError(
          f"{self.path}: chat_loss_mask needs character offsets, which only a "
          f"fast tokenizer ({TOKENIZER_FILE}) gives, for a chat template "
          "without {% generation %} markers") from None

  def _content_span(self, messages, i, full, kwargs
                    ) -> tuple[int | None, int | None]:
    """Where message i's content lies in `full` ((None, None): not shown)."""
    marked = [dict(m) for m in messages]
    marked[i]["content"] = _MARK
    other = self.render_chat(marked, add_generation_prompt=False, **kwargs)
    if other == full:
      return None, None
    p = _common_prefix(full, other)
    s = _common_suffix(full, other, min(len(full), len(other)) - p)
    return p, len(full) - s

  def _body_start(self, messages, i, full, kwargs, lo,
                  content_start) -> int:
    """Where assistant message i's text starts in `full` (after its header)."""
    try:
      context = self.render_chat(messages[:i], add_generation_prompt=False,
                                 **kwargs)
      prompt = self.render_chat(messages[:i], add_generation_prompt=True,
                                **kwargs)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"assistant message {i}: the chat template cannot "
                       f"render the conversation before it ({e})") from None
    hi = len(full) if content_start is None else content_start
    header = prompt[_common_prefix(prompt, context):]  # the generation prompt
    # The whole generation prompt, else its first line: the role header
    # without what it pre-fills (Qwen3's empty thinking, which turns before
    # the last user message do not have).
    cut = header.find("\n") + 1
    candidates = [header] + ([header[:cut]] if 0 < cut < len(header) else [])
    if full.startswith(context) and len(context) >= lo:
      for cand in candidates:
        if full.startswith(cand, len(context)):
          return min(len(context) + len(cand), max(hi, len(context)))
    # Earlier turns render differently here: find the header just before the
    # content.
    for cand in candidates:
      if not cand:
        continue
      pos = (full.rfind(cand, lo, hi) if content_start is not None
             else full.find(cand, lo))
      if pos >= 0:
        return pos + len(cand)
    raise ValueError(
        f"assistant message {i}: cannot find its header {header!r} in the "
        "rendered conversation; cannot tell assistant tokens apart")


def from_pretrained(path: str | os.PathLike) -> HFTokenizer:
  """The tokenizer of a Hugging Face checkpoint directory."""
  return HFTokenizer(path)


def save(tokenizer: HFTokenizer, out_dir: str | os.PathLike) -> list[str]:
  """Copies the tokenizer's files (and generation config) into `out_dir`."""
  import shutil  # pylint: disable=g-import-not-at-top
  os.makedirs(out_dir, exist_ok=True)
  written = []
  for name in FILES + (GENERATION_CONFIG_FILE,):
    src = os.path.join(tokenizer.path, name)
    if os.path.exists(src):
      dst = os.path.join(os.fspath(out_dir), name)
      if os.path.abspath(src) != os.path.abspath(dst):
        shutil.copyfile(src, dst)
      written.append(dst)
  return written
