"""Algorithmic tasks with opcode traces: sum-of-list mod 10, sorting, BFS.

Paper I's benchmarks (spec I "Benchmarks", "CPU miniature"): train on short
instances, test on long ones. Every example is one token sequence

    sum_mod10:  BOS x_1 .. x_n SEP (Σx mod 10) EOS                 x in 0..9
    sort:       BOS x_1 .. x_n SEP sorted(x) EOS                   x in 0..9
    bfs:        BOS u_1 v_1 .. u_m v_m SEP src SEP bfs_order EOS   n nodes

where n is the instance length (list length, or node count for BFS; node ids
are n distinct values of 0..V-1, neighbours visited in ascending id order).
V = `num_values` (default `NUM_VALUES` = 64, the miniature's) sets the token
space: values 0..V-1, then BOS, SEP, EOS, PAD = V..V+3 (`special_tokens`),
`vocab_size(V)` = V + 4. The paper's BFS at n = 320 nodes needs V >= 320.
The answer tokens (after the last SEP, EOS excluded) are the loss/accuracy
positions; with teacher forcing, all answer positions right <=> greedy
decoding reproduces the answer exactly (each greedy step sees the correct
prefix), so sequence-level exact accuracy needs no sampler.

Opcode traces come from a simulator of each algorithm on a register machine
with the controller's five ops (ASSIGN, ADD, COMPARE, BRANCH, NOOP):
`simulate_*` returns the full program trace (op, operands) and the result;
`token_ops` projects it to one opcode per token [inferred], the supervision
target of the controller at that position (spec I.6 L_op):

  sum_mod10: BOS ASSIGN (acc <- 0); x_i ADD (acc <- acc + x_i); rest NOOP.
  sort:      BOS ASSIGN; x_i COMPARE if x_i >= max(x_<i) (no swap when it is
             inserted), BRANCH if it must move (swaps); SEP NOOP; each output
             token ASSIGN (write the next smallest); EOS NOOP.
  bfs:       BOS, edge endpoints and src ASSIGN (write adjacency / enqueue);
             SEPs NOOP; output v_k COMPARE if v_k has the same BFS parent as
             v_{k-1}, BRANCH when the queue moves to a new parent (the
             source: ASSIGN); EOS NOOP.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence

import numpy as np

from jaxlab import registry

OPS = ("ASSIGN", "ADD", "COMPARE", "BRANCH", "NOOP")  # = controller.OPS
ASSIGN, ADD, COMPARE, BRANCH, NOOP = range(len(OPS))
NUM_VALUES = 64
BOS, SEP, EOS, PAD = NUM_VALUES, NUM_VALUES + 1, NUM_VALUES + 2, NUM_VALUES + 3
VOCAB_SIZE = NUM_VALUES + 4
IGNORE_OP = -1  # op target of padding


def special_tokens(num_values: int = NUM_VALUES) -> tuple[int, int, int, int]:
  """(BOS, SEP, EOS, PAD) of the token space with values 0..num_values-1."""
  v = int(num_values)
  return v, v + 1, v + 2, v + 3


def vocab_size(num_values: int = NUM_VALUES) -> int:
  """Vocabulary of the token space with values 0..num_values-1."""
  return int(num_values) + 4


@dataclasses.dataclass(frozen=True)
class Example:
  """One instance: tokens, which are answer tokens, per-token opcodes."""
  task: str
  length: int
  tokens: tuple[int, ...]
  answer_mask: tuple[bool, ...]
  token_ops: tuple[int, ...]
  program: tuple[tuple, ...]  # the simulator's full trace (op, operands...)


# fn(rng, n, *, num_values) -> Example.
TaskFn = Callable[..., Example]
TASKS: registry.Registry[TaskFn] = registry.Registry("algorithmic task")


# -----------------------------------------------------------------------------
# Simulators: full program traces on the register machine.
# -----------------------------------------------------------------------------


def simulate_sum(xs: Sequence[int], modulus: int = 10
                 ) -> tuple[list[tuple], int]:
  """acc <- 0; for x: acc <- acc + x; emit acc mod m."""
  prog, acc = [(ASSIGN, "acc", 0)], 0
  for x in xs:
    acc += int(x)
    prog.append((ADD, "acc", int(x)))
  prog.append((NOOP, "emit", acc % modulus))
  return prog, acc % modulus


def simulate_bubble_sort(xs: Sequence[int]) -> tuple[list[tuple], list[int]]:
  """Bubble sort with early exit: COMPARE(j, j+1), then BRANCH (swap) when
  a[j] > a[j+1]; a pass without swaps ends the program."""
  a, prog = [int(x) for x in xs], []
  for end in range(len(a) - 1, 0, -1):
    swapped = False
    for j in range(end):
      prog.append((COMPARE, j, j + 1))
      if a[j] > a[j + 1]:
        prog.append((BRANCH, j, j + 1))
        a[j], a[j + 1] = a[j + 1], a[j]
        swapped = True
    if not swapped:
      break
  return prog, a


def bfs_order(edges: Sequence[tuple[int, int]], src: int
              ) -> tuple[list[int], dict[int, int]]:
  """BFS visiting order (ascending neighbour ids) and each node's parent."""
  adj: dict[int, list[int]] = {}
  for u, v in edges:
    adj.setdefault(u, []).append(v)
    adj.setdefault(v, []).append(u)
  order, parent, queue, seen = [src], {src: -1}, [src], {src}
  while queue:
    u = queue.pop(0)
    for v in sorted(adj.get(u, [])):
      if v not in seen:
        seen.add(v)
        parent[v] = u
        order.append(v)
        queue.append(v)
  return order, parent


def simulate_bfs(edges: Sequence[tuple[int, int]], src: int
                 ) -> tuple[list[tuple], list[int]]:
  """enqueue src; per dequeued u, per neighbour v: COMPARE (visited?), and
  if new BRANCH + ASSIGN (mark, enqueue)."""
  adj: dict[int, list[int]] = {}
  for u, v in edges:
    adj.setdefault(u, []).append(v)
    adj.setdefault(v, []).append(u)
  prog, order, queue, seen = [(ASSIGN, "enqueue", src)], [src], [src], {src}
  while queue:
    u = queue.pop(0)
    for v in sorted(adj.get(u, [])):
      prog.append((COMPARE, u, v))
      if v not in seen:
        prog.append((BRANCH, u, v))
        prog.append((ASSIGN, "enqueue", v))
        seen.add(v)
        order.append(v)
        queue.append(v)
  return prog, order


# -----------------------------------------------------------------------------
# Tasks (token sequences + per-token opcodes).
# -----------------------------------------------------------------------------


def _example(task, n, prompt, prompt_ops, answer, answer_ops, program,
             num_values=NUM_VALUES):
  bos, sep, eos, _ = special_tokens(num_values)
  tokens = [bos, *prompt, sep, *answer, eos]
  ops = [ASSIGN, *prompt_ops, NOOP, *answer_ops, NOOP]
  mask = [False] * (len(prompt) + 2) + [True] * len(answer) + [False]
  return Example(task, n, tuple(int(t) for t in tokens), tuple(mask),
                 tuple(int(o) for o in ops), tuple(program))


@TASKS.register("sum_mod10")
def sum_mod10(rng: random.Random, n: int, *, num_values: int = NUM_VALUES
              ) -> Example:
  xs = [rng.randrange(10) for _ in range(n)]
  prog, ans = simulate_sum(xs)
  return _example("sum_mod10", n, xs, [ADD] * n, [ans], [NOOP], prog,
                  num_values)


def sort_token_ops(xs: Sequence[int]) -> list[int]:
  """COMPARE if x_i >= every earlier x (inserting it swaps nothing), else
  BRANCH."""
  ops, top = [], None
  for x in xs:
    ops.append(COMPARE if top is None or x >= top else BRANCH)
    top = x if top is None else max(top, x)
  return ops


@TASKS.register("sort")
def sort(rng: random.Random, n: int, *, num_values: int = NUM_VALUES
         ) -> Example:
  xs = [rng.randrange(10) for _ in range(n)]
  prog, ys = simulate_bubble_sort(xs)
  return _example("sort", n, xs, sort_token_ops(xs), ys, [ASSIGN] * n, prog,
                  num_values)


def random_graph(rng: random.Random, n: int, extra_edges: int | None = None,
                 *, num_values: int = NUM_VALUES
                 ) -> tuple[list[tuple[int, int]], int]:
  """A connected graph on n distinct ids of 0..num_values-1: a random tree
  plus `extra_edges` (default n // 4) chords; returns (shuffled edges,
  src)."""
  if not 1 <= n <= num_values:
    raise ValueError(f"bfs length (node count) must be in [1, {num_values}] "
                     f"(num_values: the node ids), got {n}")
  ids = rng.sample(range(num_values), n)
  edges = {tuple(sorted((ids[k], ids[rng.randrange(k)])))
           for k in range(1, n)}
  extra = n // 4 if extra_edges is None else extra_edges
  for _ in range(extra if n > 2 else 0):
    u, v = rng.sample(ids, 2)
    edges.add(tuple(sorted((u, v))))
  edges = [e if rng.random() < 0.5 else (e[1], e[0]) for e in sorted(edges)]
  rng.shuffle(edges)
  return edges, ids[0]


def bfs_token_ops(order: Sequence[int], parent: dict[int, int]) -> list[int]:
  ops = []
  for k, v in enumerate(order):
    if k == 0:
      ops.append(ASSIGN)
    elif k > 1 and parent[v] == parent[order[k - 1]]:
      ops.append(COMPARE)
    else:
      ops.append(BRANCH)
  return ops


@TASKS.register("bfs")
def bfs(rng: random.Random, n: int, *, num_values: int = NUM_VALUES
        ) -> Example:
  edges, src = random_graph(rng, n, num_values=num_values)
  sep = special_tokens(num_values)[1]
  prog, order = simulate_bfs(edges, src)
  _, parent = bfs_order(edges, src)
  prompt = [t for e in edges for t in e] + [sep, src]
  prompt_ops = [ASSIGN] * (2 * len(edges)) + [NOOP, ASSIGN]
  return _example("bfs", n, prompt, prompt_ops, order,
                  bfs_token_ops(order, parent), prog, num_values)


# -----------------------------------------------------------------------------
# Splits and arrays.
# -----------------------------------------------------------------------------


def make_examples(task: str, lengths: Sequence[int], num: int, *,
                  seed: int = 0, num_values: int = NUM_VALUES
                  ) -> list[Example]:
  """`num` examples of `task`, each length drawn uniformly from `lengths`,
  in the token space of `num_values` values (`special_tokens`)."""
  fn = TASKS.get(task)
  lengths = [int(n) for n in lengths]
  if not lengths or min(lengths) < 1:
    raise ValueError(f"lengths must be a non-empty list of ints >= 1, got "
                     f"{lengths}")
  rng = random.Random(f"{task}-{seed}")
  return [fn(rng, rng.choice(lengths), num_values=int(num_values))
          for _ in range(num)]


def encode(examples: Sequence[Example], *, pad_to: int | None = None,
           num_values: int = NUM_VALUES) -> dict[str, np.ndarray]:
  """Next-token arrays: `inputs`, `targets` `[N, T]` (PAD-padded on the
  right), `loss_mask` (target is an answer token), `op_targets` (opcode of
  the input token, -1 on padding), `lengths` `[N]`.

  T = `pad_to` or the longest sequence minus one; a longer one is an error.
  PAD is that of `num_values` (`special_tokens`).
  """
  pad = special_tokens(num_values)[3]
  need = max(len(e.tokens) for e in examples) - 1
  t = need if pad_to is None else int(pad_to)
  if t < need:
    raise ValueError(f"pad_to={t} is shorter than the longest example "
                     f"({need} input tokens)")
  n = len(examples)
  out = {"inputs": np.full((n, t), pad, np.int32),
         "targets": np.full((n, t), pad, np.int32),
         "loss_mask": np.zeros((n, t), np.float32),
         "op_targets": np.full((n, t), IGNORE_OP, np.int32),
         "lengths": np.array([e.length for e in examples], np.int32)}
  for i, e in enumerate(examples):
    k = len(e.tokens) - 1
    out["inputs"][i, :k] = e.tokens[:-1]
    out["targets"][i, :k] = e.tokens[1:]
    out["loss_mask"][i, :k] = e.answer_mask[1:]
    out["op_targets"][i, :k] = e.token_ops[:-1]
  return out


def exact_match(pred_bt: np.ndarray, targets_bt: np.ndarray,
                loss_mask_bt: np.ndarray) -> np.ndarray:
  """Per row: every answer position predicted right (float 0/1 `[B]`)."""
  wrong = (np.asarray(pred_bt) != np.asarray(targets_bt)) & (
      np.asarray(loss_mask_bt) > 0)
  return (~wrong.any(axis=-1)).astype(np.float32)
