"""Templated arithmetic chains with EOS padding (spec L's CPU miniature).

A prompt is a start digit and k operations on digits mod 10, e.g.
`3+4*2-5?`; the answer writes the chain one step at a time, each step
`<op><digit>=<result>;`, then EOS padding up to the generation length:

    prompt:  3 + 4 * 2 - 5 ?
    answer:  + 4 = 7 ; * 2 = 4 ; - 5 = 9 ; <eos> <eos> ... <eos>

Each step copies one operation from the prompt and applies it to the
previous result, so the answer can only be right left to right, and the long
EOS tail is the "suffix" that DPad drops. Character-level vocabulary with
EOS, MASK and PAD tokens; everything deterministic under a seed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

CHARS = "0123456789+-*=;?"
PAD, EOS, MASK = len(CHARS), len(CHARS) + 1, len(CHARS) + 2
VOCAB_SIZE = len(CHARS) + 3
_ID = {c: i for i, c in enumerate(CHARS)}
_OPS = "+-*"
KINDS = ("chain", "copy", "reverse")


def encode(text: str) -> list[int]:
  return [_ID[c] for c in text]


def decode(ids) -> str:
  out = []
  for t in ids:
    t = int(t)
    out.append(CHARS[t] if t < len(CHARS) else
               {PAD: "_", EOS: "$", MASK: "#"}[t])
  return "".join(out)


def _apply(a: int, op: str, b: int) -> int:
  return {"+": a + b, "-": a - b, "*": a * b}[op] % 10


@dataclasses.dataclass(frozen=True)
class Chain:
  prompt: list[int]
  answer: list[int]   # without EOS


def make_chain(rng: np.random.Generator, num_ops: int) -> Chain:
  """One chain of `num_ops` operations (prompt and answer ids)."""
  x = int(rng.integers(0, 10))
  prompt, answer = str(x), ""
  for _ in range(num_ops):
    op = _OPS[int(rng.integers(0, 3))]
    d = int(rng.integers(0, 10))
    y = _apply(x, op, d)
    prompt += f"{op}{d}"
    answer += f"{op}{d}={y};"
    x = y
  return Chain(encode(prompt + "?"), encode(answer))


def max_prompt_len(max_ops: int) -> int:
  return 2 + 2 * max_ops


def answer_len(num_ops: int) -> int:
  return 5 * num_ops


def make_copy(rng: np.random.Generator, num_digits: int, *,
              reverse: bool = False) -> Chain:
  """`num_digits` random digits then `?`; the answer copies them (reversed
  when `reverse`)."""
  digits = "".join(str(int(d)) for d in rng.integers(0, 10, num_digits))
  return Chain(encode(digits + "?"),
               encode(digits[::-1] if reverse else digits))


def make_chains(seed: int, n: int, *, min_ops: int, max_ops: int,
                kind: str = "chain") -> list[Chain]:
  """`n` examples of `kind` ("chain": `min_ops..max_ops` operations;
  "copy" / "reverse": that many digits)."""
  if kind not in KINDS:
    raise ValueError(f"task.kind={kind!r} is unknown; valid: "
                     f"{', '.join(KINDS)}")
  if not 1 <= min_ops <= max_ops:
    raise ValueError(f"need 1 <= task.min_ops <= task.max_ops, got "
                     f"{min_ops}, {max_ops}")
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    k = int(rng.integers(min_ops, max_ops + 1))
    out.append(make_chain(rng, k) if kind == "chain" else
               make_copy(rng, k, reverse=kind == "reverse"))
  return out


PAD_SIDES = ("left", "right")


def pad_prompt(prompt: list[int], prompt_len: int, pad: str = "left"
               ) -> list[int]:
  """`prompt` padded with PAD to `prompt_len` on the `pad` side. Right
  padding puts the i-th prompt token at position i, so a copied answer
  token sits a constant `prompt_len` after its source."""
  if pad not in PAD_SIDES:
    raise ValueError(f"task.pad={pad!r} is unknown; valid: "
                     f"{', '.join(PAD_SIDES)}")
  fill = [PAD] * (prompt_len - len(prompt))
  return fill + list(prompt) if pad == "left" else list(prompt) + fill


def training_arrays(chains: list[Chain], *, prompt_len: int, gen_len: int,
                    pad: str = "left") -> dict[str, np.ndarray]:
  """`inputs [N, prompt_len + gen_len]` (prompt padded with PAD on the `pad`
  side, answer, EOS padding) and `prompt_mask` (1 on the prompt region,
  never masked)."""
  n, total = len(chains), prompt_len + gen_len
  inputs = np.full((n, total), EOS, np.int32)
  prompt_mask = np.zeros((n, total), np.int32)
  for i, c in enumerate(chains):
    if len(c.prompt) > prompt_len or len(c.answer) >= gen_len:
      raise ValueError(f"chain of {len(c.prompt)} prompt / {len(c.answer)} "
                       f"answer tokens does not fit prompt_len={prompt_len} "
                       f"and gen_len={gen_len}")
    inputs[i, :prompt_len] = pad_prompt(c.prompt, prompt_len, pad)
    inputs[i, prompt_len:prompt_len + len(c.answer)] = c.answer
    prompt_mask[i, :prompt_len] = 1
  return {"inputs": inputs, "prompt_mask": prompt_mask}


def exact_match(generated: np.ndarray, chains: list[Chain]) -> np.ndarray:
  """Per row: the generation up to its first EOS equals the answer."""
  out = np.zeros((len(chains),), bool)
  for i, (g, c) in enumerate(zip(generated, chains)):
    g = list(map(int, g))
    cut = g.index(EOS) if EOS in g else len(g)
    out[i] = g[:cut] == c.answer
  return out
