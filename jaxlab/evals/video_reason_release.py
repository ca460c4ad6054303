"""VideoReasonBench's released scoring (paper R, spec R.4 "Scoring").

    report = score_release(rows, responses)          # rows as released
    report.per_dim["order_operation"], report.per_level[3], report.by

What github.com/llyx97/video_reason_bench computes
(`eval_huggingface.py`, `utils/eval_utils.py`, `utils/show_results.py`):

* `extract_final_answer`: the text after "◁/think▷" when present, then the
  text after the first "Final Answer" (to the end, stripped); a response
  without it (or with nothing after it) is wrong (`Report.malformed`).
* a row with an `answer`: an LLM judge's verdict on (question, extracted
  answer, ground truth) with the released prompt (`JUDGE_PROMPT`,
  "Correct" / "Incorrect"). Without an LLM the default judge here is
  `normalized_match` [inferred]: the answer equals the ground truth once
  both are lower-cased and stripped of whitespace, commas, semicolons,
  `*` and backticks (so "2nd: (a2, c2)\\n3rd: ..." matches "2nd: (a2,c2),
  3rd: ..."); `llm_judge(generate)` is the paper's judge around any text
  model.
* prediction_operation (no `answer`): the operations named in the answer
  are applied to the source state with the release's rules
  (`eval_op_hrd`, `_grid`, `_cup`, `_file`, `_card`, `_chip`: illegal
  Number / Circle moves are skipped, a bad card / chip operation fails)
  and the result compared with the target state parsed from the question.
  The release extracts the operations with an LLM (Table-19 prompts);
  `extract_operations` is the rule-based extractor used here [inferred]
  (moves `up/down/left/right` in order; cup swaps "(a1, b2)"; file
  commands split on " & "; "add|remove <card> to|from pileN"; "add|remove
  <value> [to|from] cupN").
* the report (`show_results.py`): accuracy overall, per `dim` (the ids
  `order_state` / `counting_state` counted as `infer_state`), by state
  size (`state_1`: 3x3 or 1 set, `state_2`: 4x4 or 2 sets) and by
  operation count (`num_op_5_9`, `num_op_10_14`); per level (1 recall, 2
  infer, 3 predict) as the mean over its questions.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import re
from typing import Any, Callable, Sequence

import numpy as np

from jaxlab import registry
from jaxlab.decoding import sampler

# Released dim ids -> show_results' key (order_state / counting_state are
# Infer State questions).
DIMS = ("order_operation", "counting_operation", "infer_state",
        "comparison_state", "prediction_state", "prediction_operation")
DIM_KEY = {**{d: d for d in DIMS}, "order_state": "infer_state",
           "counting_state": "infer_state"}
LEVEL = {"order_operation": 1, "counting_operation": 1, "infer_state": 2,
         "comparison_state": 2, "prediction_state": 3,
         "prediction_operation": 3}
# jaxlab's skill names (jaxlab.data.synthetic.video_reason.SKILLS).
SKILL = {"order_operation": "recall_order",
         "counting_operation": "recall_count", "infer_state": "infer_state",
         "comparison_state": "compare_state",
         "prediction_state": "predict_state",
         "prediction_operation": "predict_operation"}
STATE_SIZE = {3: 1, 4: 2, 1: 1, 2: 2}  # show_results' state_size_map
THINK_END = "\u25c1/think\u25b7"

JUDGE_PROMPT = """You will be given a question, a model response and a ground-truth answer. Your task is to determine whether the model response is correct based on the ground-truth answer. The model response should contain all information in the ground-truth answer.

Question: {question}

Model Response: {response}

Ground-Truth Answer: {ground_truth}

Directly output "Correct" or "Incorrect":
"""

Judge = Callable[[str, str, str], bool]   # (question, response, truth)
JUDGES: registry.Registry[Callable[..., Judge]] = registry.Registry(
    "video_reason release judge")


def extract_final_answer(response: str | None) -> str | None:
  """eval_utils.extract_final_answer: None when there is no answer."""
  if not response:
    return None
  if THINK_END in response:
    response = response.split(THINK_END)[1]
  m = re.search(r"Final Answer\s*(.*?)\s*$", response, re.DOTALL)
  return (m.group(1) or None) if m else None


def _normalize(text: str) -> str:
  return re.sub(r"[\s,;*`]+", "", str(text).lower()).rstrip(".")


@JUDGES.register("normalized_match")
def normalized_match() -> Judge:
  def judge(question: str, response: str, truth: str) -> bool:
    del question
    norm = _normalize(response)
    return bool(norm) and norm.lstrip(":") == _normalize(truth)
  return judge


@JUDGES.register("llm")
def llm_judge(generate: Callable[[str], str]) -> Judge:
  """The released judge: `generate(JUDGE_PROMPT...) == "Correct"`."""
  def judge(question: str, response: str, truth: str) -> bool:
    return generate(JUDGE_PROMPT.format(
        question=question, response=response,
        ground_truth=truth)).strip() == "Correct"
  return judge


JUDGE_SYSTEM = ("You are Qwen, created by Alibaba Cloud. You are a helpful "
                "assistant.")


def chat_generate(model, tokenizer, *, max_new_tokens: int = 4
                  ) -> Callable[[str], str]:
  """`generate(prompt) -> text` of a text checkpoint as the release's
  `test_chat_completion_hf` runs its judge: the system turn above and the
  prompt as the user turn through the checkpoint's chat template, greedy,
  `max_new_tokens` (4 for the judge), special tokens skipped."""
  def generate(prompt: str) -> str:
    ids = tokenizer.apply_chat_template(
        [{"role": "system", "content": JUDGE_SYSTEM},
         {"role": "user", "content": prompt}], add_generation_prompt=True)
    eos = tuple(tokenizer.eos_ids)
    res = sampler.generate(model, [ids], max_new_tokens=max_new_tokens,
                           eos_id=eos[0] if eos else None,
                           stop_ids=eos[1:], pad_id=tokenizer.pad_id or 0)
    return tokenizer.decode(res.tokens[0], skip_special_tokens=True)
  return generate


# -- prediction_operation: the release's simulators ----------------------------


def extract_operations(demo: str, text: str) -> list[Any]:
  """The operations an answer names, in order (rule-based, [inferred]:
  the release asks an LLM)."""
  low = text.lower()
  if demo in ("hrd", "grid"):
    return re.findall(r"\b(up|down|left|right)\b", low)
  if demo == "cup":
    return [list(p) for p in re.findall(
        r"\(\s*([a-e][1-5])\s*,\s*([a-e][1-5])\s*\)", low)]
  if demo == "file_sys":  # (the extracted answer starts after the marker)
    text = text.strip().lstrip(":*").strip()
    return [c.strip() for c in text.strip("`").replace(
        "bash\n", "").split(" & ") if c.strip()]
  if demo == "card":
    return [f"{a} {c} {p} {pile}" for a, c, p, pile in re.findall(
        r"\b(add|remove)\s+(.+?)\s+(to|from)\s+(pile\d)", text)]
  if demo == "chip":
    return [f"{a} {v} {cup}" for a, v, cup in re.findall(
        r"\b(add|remove)\s+(\d+)\s+(?:(?:to|from)\s+)?(cup\d)", text)]
  raise ValueError(f"unknown demo {demo!r}")


def _find_blank(board):
  for i, row in enumerate(board):
    for j, v in enumerate(row):
      if v == 0:
        return i, j
  return None


def _next_hrd(move, board):
  bi, bj = _find_blank(board)
  target = {"up": (bi - 1, bj), "down": (bi + 1, bj), "left": (bi, bj + 1),
            "right": (bi, bj - 1)}.get(move)
  if target is None:
    return board, False
  ti, tj = target
  if not (0 <= ti < len(board) and 0 <= tj < len(board)):
    return board, False
  new = copy.deepcopy(board)
  new[bi][bj], new[ti][tj] = new[ti][tj], new[bi][bj]
  return new, True


def _next_grid(move, board, coord):
  x, y = coord
  x += {"x-1": -1, "x+1": 1}.get(move, 0)
  y += {"y-1": -1, "y+1": 1}.get(move, 0)
  n = len(board)
  if not (0 <= x < n and 0 <= y < n):
    return None, coord
  board = copy.deepcopy(board)
  board[y][x] = 1 - board[y][x]
  for dx, dy in ((0, -1), (0, 1), (-1, 0), (1, 0)):
    nx, ny = x + dx, y + dy
    if 0 <= nx < n and 0 <= ny < n:
      board[ny][nx] = 1 - board[ny][nx]
  return board, (x, y)


_CUP = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4,
        "1": 0, "2": 1, "3": 2, "4": 3, "5": 4}


def _next_cup(move, board):
  try:
    r1, c1 = _CUP[move[0][0]], _CUP[move[0][1]]
    r2, c2 = _CUP[move[1][0]], _CUP[move[1][1]]
    new = copy.deepcopy(board)
    new[r1][c1], new[r2][c2] = new[r2][c2], new[r1][c1]
    return new
  except (KeyError, IndexError, TypeError):
    return copy.deepcopy(board)


def _target(pattern: str, question: str, what: str) -> str:
  m = re.search(pattern, question)
  if not m:
    raise ValueError(f"prediction_operation question without its {what}")
  return m.group(1)


def _size(pattern: str, question: str) -> tuple[int, int]:
  m = re.search(pattern, question)
  if not m:
    raise ValueError("prediction_operation question without its board size")
  return int(m.group(1)), int(m.group(2))


def _board(cells: str, shape, rows: dict[str, int], value) -> np.ndarray:
  board = np.zeros(shape, dtype=int)
  for cell in cells.split(", "):
    coord, v = value(cell)
    x, y = rows[coord[0]], _CUP[coord[1]]
    board[x][y] = v
  return board


def _src(row, key=None):
  i = 0 if row["visible_time"] == "end" else -1
  states = row["states"] if key is None else row["states"][key]
  return states[i]


_CARDS = {f"{r} of {s}" for r in ["Ace"] + [str(i) for i in range(2, 11)]
          + ["Jack", "Queen", "King"]
          for s in ("Hearts", "Clubs", "Diamonds", "Spades")}
_CHIPS = (5, 10, 20, 50, 100)


def check_operation(row: dict[str, Any], ops: Sequence[Any]) -> bool:
  """Do `ops` take the row's source state to its target (eval_op_*)?"""
  demo, q = row["demo"], row["question"]
  if not ops:
    return False
  if demo == "hrd":
    n_row, n_col = _size(r"on a (\d+)x(\d+) board", q)
    cells = _target(r"the desired number arrangement:\s*`([^`]+)`", q,
                    "target")
    rows = {l: n_row - 1 - i for i, l in enumerate("abcde")}
    tgt = _board(cells, (n_row, n_col), rows, lambda c: (
        c.split(": ")[0].strip("()").split(","), int(c.split(": ")[1])))
    board = copy.deepcopy(_src(row))
    for m in ops:
      board, _ = _next_hrd(m, board)
    return np.array_equal(np.array(board), tgt)
  if demo == "grid":
    moves = {"left": "x-1", "right": "x+1", "up": "y-1", "down": "y+1"}
    if not all(m in moves for m in ops):
      return False
    n_row, n_col = _size(r"presents a (\d+)x(\d+) grid", q)
    cells = _target(r"the desired arrangement of black and white pieces:"
                    r"\s*`([^`]+)`", q, "target")
    rows = {**{l: i for i, l in enumerate("abcde")},
            **{str(i): i for i in range(5)}}
    tgt = np.zeros((n_row, n_col), dtype=int)
    for cell in cells.split(", "):
      coord, colour = cell.split(": ")
      x, y = coord.strip("()").split(",")
      tgt[rows[x]][rows[y]] = 1 if colour == "black" else 0
    i = 0 if row["visible_time"] == "end" else -1
    board, coord = copy.deepcopy(row["states"][i]), tuple(row["coords"][i])
    for m in ops:
      nxt, coord = _next_grid(moves[m], board, coord)
      if nxt is not None:
        board = nxt
    return np.array_equal(np.array(board), tgt)
  if demo == "cup":
    n_row, n_col = _size(r"puzzle on a (\d+)x(\d+) board", q)
    cells = _target(r"achieve the desired distribution of coins:\s*"
                    r"`([^`]+)`", q, "target")
    tgt = np.zeros((n_row, n_col), dtype=int)
    for c in cells.split(", "):
      tgt[_CUP[c[0]]][_CUP[c[1]]] = 1
    board = copy.deepcopy(_src(row))
    for m in ops:
      board = _next_cup(m, board)
    return np.array_equal(np.array(board), tgt)
  n = int(row["num_state"])
  if demo == "file_sys":
    if len(ops) > 2:
      return False
    files = {"rm": set(), "touch": set()}
    for cmd in ops:
      if not (cmd.startswith("rm -rf") or cmd.startswith("touch")):
        return False
      m = re.search(r"\{([^}]+)\}", cmd)
      if not m:
        return False
      files["rm" if cmd.startswith("rm -rf") else "touch"] = set(
          m.group(1).split(","))
    if files["rm"] & files["touch"]:
      return False
    path = _target(r"to ensure that\s*`([^`]+)` contains exactly", q, "path")
    want = set(_target(r"contains exactly the following files:\s*`([^`]+)`",
                       q, "target").split(", "))
    i = 0 if row["visible_time"] == "end" else -1
    state = {f"path{k}": set(list(row["states"][f"path{k}"].values())[i])
             for k in range(n)}
    for cmd in ops:
      got = set(re.search(r"\{([^}]+)\}", cmd).group(1).split(","))
      paths = re.findall(r"path\d+", cmd)
      if cmd.startswith("rm"):
        state[paths[0]] -= got
      elif cmd.startswith("touch"):
        state[paths[0]] |= got
    return state.get(path) == want
  if demo == "card":
    pile = _target(r"to ensure that\s*`([^`]+)` contains exactly", q, "pile")
    want = _target(r"contains exactly the following cards from top to "
                   r"bottom:\s*`([^`]+)`", q, "target").split(", ")
    state = {f"pile{k}": list(_src(row, f"pile{k}")) for k in range(n)}
    for m in ops:
      words = m.split()
      if words[0] not in ("add", "remove") or words[-1] not in (
          "pile0", "pile1"):
        return False
      card = " ".join(words[1:-2])
      if card not in _CARDS or words[-1] not in state:
        return False
      if words[0] == "add":
        state[words[-1]].append(card)
      else:
        if not state[words[-1]] or card != state[words[-1]][0]:
          return False
        state[words[-1]].remove(card)
    return state[pile] == want
  if demo == "chip":
    cup = _target(r"to ensure that\s*`([^`]+)` contains exactly", q, "cup")
    want = [int(c) for c in _target(
        r"contains exactly the following chips:\s*`([^`]+)`", q,
        "target").split(", ")]
    state = {f"cup{k}": list(_src(row, f"cup{k}")) for k in range(n)}
    for m in ops:
      words = m.split()
      if words[0] not in ("add", "remove") or words[-1] not in (
          "cup0", "cup1") or not words[1].isdigit():
        return False
      chip = int(words[1])
      if chip not in _CHIPS:
        return False
      if words[0] == "add":
        state[words[-1]].append(chip)
      else:
        if chip not in state[words[-1]]:
          return False
        state[words[-1]].remove(chip)
    return collections.Counter(state[cup]) == collections.Counter(want)
  raise ValueError(f"unknown demo {demo!r}")


# -- the report ----------------------------------------------------------------


@dataclasses.dataclass
class Report:
  """Scores of one set of responses (accuracies in [0, 1])."""
  accuracy: float
  n: int
  correct: list[bool]
  malformed: int                       # no "Final Answer"
  per_dim: dict[str, float]            # show_results' dims
  per_skill: dict[str, float]          # jaxlab's skill names
  per_level: dict[int, float]
  by: dict[str, dict[str, float]]      # state / num_op / reveal / demo

  def to_json(self) -> dict[str, Any]:
    return {"accuracy": self.accuracy, "n": self.n,
            "malformed": self.malformed, "per_dim": self.per_dim,
            "per_level": {str(k): v for k, v in self.per_level.items()},
            "by": self.by}


def _mean(xs):
  return sum(xs) / len(xs) if xs else float("nan")


def rate(row: dict[str, Any], response: str, judge: Judge) -> bool:
  """One row's rating as eval_huggingface.py gives it."""
  answer = extract_final_answer(response)
  if answer is None:
    return False
  if row["answer"]:
    return bool(judge(row["question"], answer, row["answer"]))
  try:
    return check_operation(row, extract_operations(row["demo"], answer))
  except (KeyError, IndexError, TypeError, AttributeError):
    return False   # operations the simulator cannot apply


def score_release(rows: Sequence[dict[str, Any]], responses: Sequence[str],
                  *, judge: Judge | str = "normalized_match") -> Report:
  """Rates `responses[i]` for `rows[i]` and aggregates as show_results."""
  if len(rows) != len(responses):
    raise ValueError(f"got {len(responses)} responses for {len(rows)} rows: "
                     "one response per row is needed")
  if isinstance(judge, str):
    judge = JUDGES.get(judge)()
  correct, malformed = [], 0
  groups = collections.defaultdict(lambda: collections.defaultdict(list))
  for row, resp in zip(rows, responses):
    if row["dim"] not in DIM_KEY:
      raise ValueError(f"row {row.get('id')!r}: unknown dim {row['dim']!r};"
                       f" valid: {', '.join(DIM_KEY)}")
    malformed += extract_final_answer(resp) is None
    ok = rate(row, resp, judge)
    correct.append(ok)
    dim = DIM_KEY[row["dim"]]
    groups["dim"][dim].append(ok)
    groups["level"][LEVEL[dim]].append(ok)
    groups["state"][f"state_{STATE_SIZE[int(row['num_state'])]}"].append(ok)
    ops = int(row["num_operation"])
    if 5 <= ops < 10:
      groups["num_op"]["num_op_5_9"].append(ok)
    elif 10 <= ops < 15:
      groups["num_op"]["num_op_10_14"].append(ok)
    groups["reveal"][row["visible_time"]].append(ok)
    groups["demo"][row.get("demo", "")].append(ok)
  per_dim = {d: _mean(groups["dim"][d]) for d in DIMS if d in groups["dim"]}
  return Report(
      accuracy=_mean(correct), n=len(correct), correct=correct,
      malformed=malformed, per_dim=per_dim,
      per_skill={SKILL[d]: v for d, v in per_dim.items()},
      per_level={l: _mean(v) for l, v in sorted(groups["level"].items())},
      by={k: {name: _mean(v) for name, v in sorted(groups[k].items())}
          for k in ("state", "num_op", "reveal", "demo")})
