"""Each config field's one-line meaning, read from the configs' own comments.

`--config=NAME --help` lists every field with its default and the comment
the code that sets it carries: a trailing `# ...` on the line, or the
comment lines directly above it. Fields are found by reading the source
with `ast` (no config is changed for this):

    c.init_from = ""                     # -> "init_from"
    c.unlearn.update(lam=1.25,  # ...    # -> "unlearn.lam"
    c.data = ConfigDict({"path": ""})    # -> "data.path"
    def train_config(): return ConfigDict({"steps": 1000})
    c.train = train_config()             # -> "train.steps"

A field's first assignment (the shallowest: the default, not a preset's
branch) is the one read. A config module's own comment wins over the trainer defaults'
(`jaxlab/train/defaults.py`) for the same field.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import tokenize

_DEFAULTS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "train", "defaults.py")

# The presets most configs share: purpose and rough cost. A config module
# may add or override entries with its own `PRESET_DOCS` dict.
PRESET_DOCS = {
    "tiny": "the test / colab miniature: seconds to a few minutes on CPU",
    "smoke": "the smallest end-to-end run (tests): seconds on CPU",
    "small": "between tiny and the default miniature: minutes on CPU",
    "table": "the miniature behind the committed docs table: minutes to an "
             "hour on 2 CPU cores",
    "spec": "the miniature at the spec's sizes: hours on CPU",
    "fit": "the paper shape cut to fit one accelerator",
    "paper": "the paper's checkpoint (init_from) and released data "
             "(data.path) at paper scale: a TPU slice or GPU node, hours; "
             "compile it first with python -m jaxlab.experiments.compile",
    "short": "the same run with its budget cut (steps, rows, seeds) to a "
             "smoke run; with paper: minutes on CPU from a small checkpoint",
    "smollm2": "the shipped SmolLM2-135M-Instruct as the real model: "
               "minutes to an hour on CPU",
    "vl": "the Qwen2.5-VL prefix LM shape (vision + language)",
}


def _comments(source: str) -> tuple[dict[int, str], dict[int, str]]:
  """(trailing comments by line, full-line comments by line)."""
  trailing, full = {}, {}
  code_lines = set()
  for tok in tokenize.generate_tokens(io.StringIO(source).readline):
    if tok.type == tokenize.COMMENT:
      text = tok.string.lstrip("#").strip()
      (trailing if tok.start[0] in code_lines else full)[tok.start[0]] = text
    elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                          tokenize.DEDENT, tokenize.ENCODING):
      code_lines.add(tok.start[0])
  return trailing, full


def _doc(line: int, trailing: dict[int, str], full: dict[int, str]) -> str:
  if trailing.get(line):
    return trailing[line]
  block, i = [], line - 1
  while i in full:
    block.insert(0, full[i])
    i -= 1
  return " ".join(b for b in block if b)


def _chain(node: ast.AST) -> list[str] | None:
  """`c.a.b` -> ["a", "b"] (the root name dropped); None otherwise."""
  parts = []
  while isinstance(node, ast.Attribute):
    parts.insert(0, node.attr)
    node = node.value
  return parts if isinstance(node, ast.Name) else None


def _entries(value: ast.AST):
  """(key, line, value) of a dict literal, `dict(...)` or
  `ConfigDict(...)` of one; [] for anything else."""
  if isinstance(value, ast.Call):
    name = value.func.attr if isinstance(value.func, ast.Attribute) else (
        value.func.id if isinstance(value.func, ast.Name) else "")
    if name == "dict":
      return [(k.arg, k.value.lineno, k.value) for k in value.keywords
              if k.arg]
    if name == "ConfigDict" and value.args:
      return _entries(value.args[0])
    return []
  if isinstance(value, ast.Dict):
    return [(k.value, k.lineno, v) for k, v in zip(value.keys, value.values)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)]
  return []


@functools.lru_cache(maxsize=None)
def field_comments(path: str) -> dict[str, str]:
  """Dotted field -> its comment, for the config code in `path`."""
  with open(path) as f:
    source = f.read()
  trailing, full = _comments(source)
  tree = ast.parse(source)
  docs: dict[str, str] = {}
  seen: set[str] = set()  # the shallowest assignment is the field's
  returns: dict[str, ast.AST] = {}  # function -> the dict it returns
  calls: list[tuple[str, str]] = []  # (prefix, function) assigned

  def put(prefix: str, key: str, line: int, value: ast.AST,
          parent_line: int = -1) -> None:
    field = f"{prefix}.{key}" if prefix else key
    if field not in seen:  # a preset's later assignment does not re-document
      seen.add(field)
      # A key on its section's line: the line's comment is the section's.
      text = "" if line == parent_line else _doc(line, trailing, full)
      if text:
        docs[field] = text
    for k, ln, v in _entries(value):
      put(field, k, ln, v, line)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
      calls.append((field, value.func.id))

  for node in ast.walk(tree):
    if isinstance(node, ast.FunctionDef):
      for stmt in node.body:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
          returns[node.name] = stmt.value
    elif isinstance(node, ast.Assign) and len(node.targets) == 1:
      parts = _chain(node.targets[0])
      if parts:
        put(".".join(parts[:-1]), parts[-1], node.lineno, node.value)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == "update"):
      parts = _chain(node.func.value)
      if parts:
        for k in node.keywords:
          if k.arg:
            put(".".join(parts), k.arg, k.value.lineno, k.value)
  for prefix, fn in calls:  # c.train = train_config()
    if fn in returns:
      for k, ln, v in _entries(returns[fn]):
        put(prefix, k, ln, v)
  return docs


def describe(config_path: str) -> dict[str, str]:
  """Field -> meaning for the config module at `config_path` (its own
  comments first, then the trainer defaults')."""
  out = dict(field_comments(_DEFAULTS))
  out.update(field_comments(os.path.abspath(config_path)))
  return out


def preset_docs(module) -> dict[str, str]:
  """Preset -> purpose and rough cost (the module's `PRESET_DOCS` over
  the shared ones)."""
  return {**PRESET_DOCS, **getattr(module, "PRESET_DOCS", {})}
