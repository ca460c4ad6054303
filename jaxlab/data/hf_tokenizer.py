"""The tokenizer a Hugging Face checkpoint ships, without transformers.

    tok = from_pretrained("/ckpt/Qwen3-0.6B")      # tokenizer.json (+ configs)
    ids = tok.encode("Hello", add_bos=False)
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    ids, mask = tok.chat_loss_mask(conversation)   # 1 on assistant tokens

A checkpoint directory holds `tokenizer.json` (the Rust fast tokenizer, read
with the `tokenizers` library) or, for older sentencepiece checkpoints,
`tokenizer.model`; the special tokens come from `tokenizer_config.json` and
`special_tokens_map.json`, extra end-of-sequence ids from
`generation_config.json` (its `eos_token_id` may be a list), the chat template
from `chat_template.jinja` or `tokenizer_config.json["chat_template"]`.

The chat template is rendered as transformers' `apply_chat_template` does: a
sandboxed, immutable Jinja environment with `trim_blocks`/`lstrip_blocks`, the
`loopcontrols` extension and the `{% generation %}` tag, the globals
`raise_exception`, `strftime_now`, `namespace`, a JSON `tojson` filter, and
the named special tokens (`bos_token`, `eos_token`, ...) as variables; the
rendered text is encoded without adding special tokens.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from jaxlab.data import tokenizers as tok_lib

TOKENIZER_FILE = "tokenizer.json"
SENTENCEPIECE_FILE = "tokenizer.model"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
GENERATION_CONFIG_FILE = "generation_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
# Every file `save` writes (and the exporter copies next to the weights).
FILES = (TOKENIZER_FILE, SENTENCEPIECE_FILE, TOKENIZER_CONFIG_FILE,
         SPECIAL_TOKENS_FILE, CHAT_TEMPLATE_FILE)
# transformers' SPECIAL_TOKENS_ATTRIBUTES: what a template sees by name.
NAMED_SPECIALS = ("bos_token", "eos_token", "unk_token", "sep_token",
                  "pad_token", "cls_token", "mask_token")


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


def _chat_template(path: str, config: Mapping[str, Any]) -> str | None:
  jinja = os.path.join(path, CHAT_TEMPLATE_FILE)
  if os.path.exists(jinja):
    with open(jinja, encoding="utf-8") as f:
      return f.read()
  template = config.get("chat_template")
  if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
    named = {t["name"]: t["template"] for t in template}
    template = named.get("default", next(iter(named.values()), None))
  return template


class _Backend:
  """Encode/decode/vocab over either `tokenizers` or sentencepiece."""

  def __init__(self, path: str):
    self.fast = None
    self.sp = None
    fast_file = os.path.join(path, TOKENIZER_FILE)
    sp_file = os.path.join(path, SENTENCEPIECE_FILE)
    if os.path.exists(fast_file):
      import tokenizers  # pylint: disable=g-import-not-at-top
      try:
        self.fast = tokenizers.Tokenizer.from_file(fast_file)
      except Exception as e:  # the Rust parser's own message, plus the path
        raise ValueError(f"{fast_file}: cannot be read by the `tokenizers` "
                         f"library ({e})") from None
    elif os.path.exists(sp_file):
      import sentencepiece as spm  # pylint: disable=g-import-not-at-top
      self.sp = spm.SentencePieceProcessor(model_file=sp_file)
    else:
      raise FileNotFoundError(
          f"{fast_file}: not found (nor {SENTENCEPIECE_FILE}); a Hugging Face "
          "checkpoint directory needs its tokenizer files")

  def size(self) -> int:
    if self.fast is not None:
      return self.fast.get_vocab_size(with_added_tokens=True)
    return self.sp.get_piece_size()

  def token_to_id(self, token: str) -> int | None:
    if self.fast is not None:
      return self.fast.token_to_id(token)
    pid = self.sp.piece_to_id(token)
    return None if pid == self.sp.unk_id() and token != self.sp.id_to_piece(
        pid) else pid

  def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Ids and character offsets, no special tokens added."""
    if self.fast is not None:
      enc = self.fast.encode(text, add_special_tokens=False)
      return list(enc.ids), [tuple(o) for o in enc.offsets]
    pieces = self.sp.encode(text, return_type="proto").pieces
    # sentencepiece offsets count UTF-8 bytes; the chat spans count chars.
    char_of_byte = [0] * (len(text.encode("utf-8")) + 1)
    pos = 0
    for i, ch in enumerate(text):
      for _ in range(len(ch.encode("utf-8"))):
        char_of_byte[pos] = i
        pos += 1
    char_of_byte[pos] = len(text)
    return ([p.id for p in pieces],
            [(char_of_byte[p.begin], char_of_byte[p.end]) for p in pieces])

  def decode(self, ids: Sequence[int], skip_special: bool) -> str:
    ids = [int(i) for i in ids]
    if self.fast is not None:
      return self.fast.decode(ids, skip_special_tokens=skip_special)
    return self.sp.decode(ids)


class HFTokenizer(tok_lib.Tokenizer):
  """A checkpoint's own tokenizer with its special tokens and chat template."""

  def __init__(self, path: str | os.PathLike):
    path = os.fspath(path)
    if not os.path.isdir(path):
      raise FileNotFoundError(f"{path}: not a checkpoint directory")
    self.path = path
    self._backend = _Backend(path)
    config = _read_json(os.path.join(path, TOKENIZER_CONFIG_FILE))
    specials = _read_json(os.path.join(path, SPECIAL_TOKENS_FILE))
    generation = _read_json(os.path.join(path, GENERATION_CONFIG_FILE))
    self.config = config
    self.special_tokens: dict[str, str] = {}
    for name in NAMED_SPECIALS:
      value = _token_text(config.get(name, specials.get(name)))
      if value is not None:
        self.special_tokens[name] = value
    self.chat_template = _chat_template(path, config)
    self._bos = self._id_of("bos_token")
    self._eos = self._id_of("eos_token")
    self._pad = self._id_of("pad_token")
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

  def _id_of(self, name: str) -> int | None:
    text = self.special_tokens.get(name)
    if text is None:
      return None
    tid = self._backend.token_to_id(text)
    if tid is None:
      raise ValueError(f"{os.path.join(self.path, TOKENIZER_CONFIG_FILE)}: "
                       f"{name}={text!r} is not in the vocabulary")
    return tid

  # -- Tokenizer interface --------------------------------------------------
  @property
  def vocab_size(self) -> int:
    return self._backend.size()

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

  def encode(self, text: str, *, add_bos: bool = False,
             add_eos: bool = False) -> list[int]:
    ids, _ = self._backend.encode(text)
    if add_bos and self._bos is not None:
      ids = [self._bos] + ids
    if add_eos:
      ids = ids + [self.eos_id]
    return ids

  def decode(self, ids: Sequence[int], *,
             skip_special_tokens: bool = False) -> str:
    return self._backend.decode(ids, skip_special_tokens)

  def token_id(self, piece: str) -> int:
    tid = self._backend.token_to_id(piece)
    return tid if tid is not None else super().token_id(piece)

  # -- chat templates -------------------------------------------------------
  def render_chat(self, messages: Sequence[Mapping[str, Any]], *,
                  add_generation_prompt: bool = True,
                  **kwargs: Any) -> str:
    """The chat template's text for `messages` (transformers' rendering)."""
    if not self.chat_template:
      raise ValueError(
          f"{self.path}: no chat template ({CHAT_TEMPLATE_FILE} or "
          f"{TOKENIZER_CONFIG_FILE}['chat_template']); encode plain text")
    for i, m in enumerate(messages):
      if not isinstance(m, Mapping) or "role" not in m:
        raise ValueError(f"message {i} must be a dict with 'role' and "
                         f"'content', got {m!r}")
    template = _compile(self.chat_template)
    variables = {**self.special_tokens, **kwargs}
    return template.render(messages=[dict(m) for m in messages],
                           add_generation_prompt=add_generation_prompt,
                           tools=variables.pop("tools", None),
                           documents=variables.pop("documents", None),
                           **variables)

  def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], *,
                          add_generation_prompt: bool = True,
                          **kwargs: Any) -> list[int]:
    """Token ids of the rendered conversation (no special tokens added)."""
    return self.encode(self.render_chat(
        messages, add_generation_prompt=add_generation_prompt, **kwargs))

  def chat_loss_mask(self, messages: Sequence[Mapping[str, Any]],
                     **kwargs: Any) -> tuple[list[int], list[int]]:
    """(ids, mask) of a whole conversation; mask 1 on assistant-written tokens.

    Assistant spans come from the template itself: for each assistant turn
    i, the text between rendering `messages[:i]` with the generation prompt
    and rendering `messages[:i + 1]` (both prefixes of the full rendering) is
    what the model must write, end-of-turn tokens included. A token is
    masked in when its characters lie inside such a span.
    """
    full = self.render_chat(messages, add_generation_prompt=False, **kwargs)
    spans = []
    for i, m in enumerate(messages):
      if m["role"] != "assistant":
        continue
      start = self.render_chat(messages[:i], add_generation_prompt=True,
                               **kwargs)
      end = self.render_chat(messages[:i + 1], add_generation_prompt=False,
                             **kwargs)
      if not (full.startswith(end) and end.startswith(start)):
        raise ValueError(
            "the chat template does not render conversations incrementally "
            f"(turn {i}); cannot tell assistant tokens apart")
      spans.append((len(start), len(end)))
    ids, offsets = self._backend.encode(full)
    mask = [int(any(s <= a and b <= e for s, e in spans) and b > a)
            for a, b in offsets]
    return ids, mask


_TEMPLATES: dict[str, Any] = {}


def _compile(source: str):
  """Jinja template compiled in transformers' sandboxed environment."""
  if source in _TEMPLATES:
    return _TEMPLATES[source]
  import jinja2  # pylint: disable=g-import-not-at-top
  from jinja2 import ext  # pylint: disable=g-import-not-at-top
  from jinja2 import sandbox  # pylint: disable=g-import-not-at-top

  class Generation(ext.Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
      lineno = next(parser.stream).lineno
      body = parser.parse_statements(("name:endgeneration",),
                                     drop_needle=True)
      return jinja2.nodes.CallBlock(self.call_method("_body"), [], [],
                                    body).set_lineno(lineno)

    def _body(self, caller):
      return caller()

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None,
             sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)

  def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)

  env = sandbox.ImmutableSandboxedEnvironment(
      trim_blocks=True, lstrip_blocks=True,
      extensions=[Generation, ext.loopcontrols])
  env.filters["tojson"] = tojson
  env.globals.update(raise_exception=raise_exception,
                     strftime_now=strftime_now,
                     namespace=jinja2.utils.Namespace)
  _TEMPLATES[source] = env.from_string(source)
  return _TEMPLATES[source]


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
