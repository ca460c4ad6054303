"""VideoReasonBench's released scoring == jaxlab.evals.video_reason_release.

The reference below is github.com/llyx97/video_reason_bench at commit
2524387968b843e9121707ae148c850f967c1486: `utils/eval_utils.py`
(extract_final_answer, get_next_board_*, extract_tgt_*, eval_op_*),
`eval_huggingface.py` (evaluate, evaluate_operation) and
`utils/show_results.py` (show_result), ported with two changes: the LLM
calls are parameters (`judge(prompt) -> "Correct"/"Incorrect"`; the
operation extraction is `extract(demo, text)`), and show_result returns its
summary instead of printing it. Rows are written in the release's
questions/*.json layout (fields, dims, question wording and script arrays
as in questions/{hrd,grid,cup,file_sys,card,chip}.json).
"""

import copy
import re
from collections import Counter

from absl.testing import absltest
import numpy as np

from jaxlab.evals import video_reason as ev
from jaxlab.evals import video_reason_release as rel

# -- the reference (ported) ----------------------------------------------------


def ref_extract_final_answer(response):
  if not response:
    return False
  for think_tok in ["\u25c1/think\u25b7"]:
    response = response.split(think_tok)[1] if think_tok in response else (
        response)
  match = re.search(r"Final Answer\s*(.*?)\s*$", response, re.DOTALL)
  if match:
    return match.group(1)
  return False


def ref_get_judge_prompt(question, response, ground_truth):
  return rel.JUDGE_PROMPT.format(question=question, response=response,
                                 ground_truth=ground_truth)


def find_blank(board, board_size):
  for i in range(board_size):
    for j in range(board_size):
      if board[i][j] == 0:
        return i, j
  return None


def get_next_board_grid(move, board, coord):
  x, y = copy.deepcopy(coord)
  board = copy.deepcopy(board)
  if move == "x-1":
    x = x - 1
  elif move == "x+1":
    x = x + 1
  elif move == "y-1":
    y = y - 1
  elif move == "y+1":
    y = y + 1
  if not (0 <= x < len(board) and 0 <= y < len(board)):
    return False, coord
  board[y][x] = 1 - board[y][x]
  for dx, dy in [(0, -1), (0, 1), (-1, 0), (1, 0)]:
    nx, ny = x + dx, y + dy
    if 0 <= nx < len(board) and 0 <= ny < len(board):
      board[ny][nx] = 1 - board[ny][nx]
  return board, (x, y)


def get_next_board_hrd(move, board):
  bi, bj = find_blank(board, len(board))
  if move == "up":
    target = (bi - 1, bj)
  elif move == "down":
    target = (bi + 1, bj)
  elif move == "left":
    target = (bi, bj + 1)
  elif move == "right":
    target = (bi, bj - 1)
  else:
    return board, False
  ti, tj = target
  if ti < 0 or ti >= len(board) or tj < 0 or tj >= len(board):
    return board, False
  new_board = copy.deepcopy(board)
  new_board[bi][bj], new_board[ti][tj] = new_board[ti][tj], new_board[bi][bj]
  return new_board, True


CUPMAP = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4, "1": 0, "2": 1, "3": 2,
          "4": 3, "5": 4}


def get_next_board_cup(move, board):
  try:
    r1, c1 = CUPMAP.get(move[0][0], None), CUPMAP.get(move[0][1], None)
    r2, c2 = CUPMAP.get(move[1][0], None), CUPMAP.get(move[1][1], None)
    new_board = copy.deepcopy(board)
    new_board[r1][c1], new_board[r2][c2] = new_board[r2][c2], new_board[r1][c1]
  except Exception:  # pylint: disable=broad-except
    new_board = copy.deepcopy(board)
  return new_board


def get_next_files(commands, all_states, tgt_path):
  states = {s: set(list(all_states[s].values())[-1]) for s in all_states}
  for cmd in commands:
    files = set(re.search(r"\{([^}]+)\}", cmd).group(1).split(","))
    paths = re.findall(r"path\d+", cmd)
    if cmd.startswith("rm"):
      states[paths[0]] = states[paths[0]] - files
    elif cmd.startswith("touch"):
      states[paths[0]] = states[paths[0]] | files
    elif cmd.startswith("cp"):
      files = files & states[paths[0]]
      states[paths[1]] = states[paths[1]] | files
    elif cmd.startswith("mv"):
      files = files & states[paths[0]]
      states[paths[0]] = states[paths[0]] - files
      states[paths[1]] = states[paths[1]] | files
    for s in all_states:
      all_states[s][cmd] = copy.deepcopy(states[s])
  return list(all_states[tgt_path].values())[-1]


def extract_tgt_board_grid(question):
  arrangements = re.search(r"the desired arrangement of black and white "
                           r"pieces:\s*`([^`]+)`", question).group(1)
  m = re.search(r"presents a (\d+)x(\d+) grid", question)
  num_row, num_col = int(m.group(1)), int(m.group(2))
  coordmap = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4, "0": 0, "1": 1, "2": 2,
              "3": 3, "4": 4}
  board = np.zeros((num_row, num_col), dtype=int)
  for argm in arrangements.split(", "):
    coord, color = argm.split(": ")
    coord = coord.strip("()").split(",")
    x, y = coordmap[coord[0]], coordmap[coord[1]]
    board[x][y] = 1 if color == "black" else 0
  return board


def extract_tgt_board_hrd(question):
  arrangements = re.search(r"the desired number arrangement:\s*`([^`]+)`",
                           question).group(1)
  m = re.search(r"on a (\d+)x(\d+) board", question)
  num_row, num_col = int(m.group(1)), int(m.group(2))
  coordmap = {"a": num_row - 1, "b": num_row - 2, "c": num_row - 3,
              "d": num_row - 4, "e": num_row - 5, "1": 0, "2": 1, "3": 2,
              "4": 3, "5": 4}
  board = np.zeros((num_row, num_col), dtype=int)
  for argm in arrangements.split(", "):
    coord, num = argm.split(": ")
    coord = coord.strip("()").split(",")
    x, y = coordmap[coord[0]], coordmap[coord[1]]
    board[x][y] = int(num)
  return board


def extract_tgt_board_cup(question):
  coords = re.search(r"achieve the desired distribution of coins:\s*"
                     r"`([^`]+)`", question).group(1)
  m = re.search(r"puzzle on a (\d+)x(\d+) board", question)
  board = np.zeros((int(m.group(1)), int(m.group(2))), dtype=int)
  for coord in coords.split(", "):
    board[CUPMAP[coord[0]]][CUPMAP[coord[1]]] = 1
  return board


def extract_tgt(question, what):
  items = re.search(rf"contains exactly the following {what}:\s*`([^`]+)`",
                    question).group(1)
  where = re.search(r"to ensure that\s*`([^`]+)` contains exactly",
                    question).group(1)
  return where, items


def eval_op_hrd(moves, question, src_board):
  if not moves:
    return False
  tgt_board = extract_tgt_board_hrd(question)
  next_board = copy.deepcopy(src_board)
  for move in moves:
    next_board, _ = get_next_board_hrd(move, next_board)
  return np.array_equal(np.array(next_board), tgt_board)


def eval_op_grid(moves, question, src_board, coord):
  movemap = {"left": "x-1", "right": "x+1", "up": "y-1", "down": "y+1"}
  if not moves:
    return False
  if not all(m in movemap for m in moves):
    return False
  moves = [movemap[m] for m in moves]
  tgt_board = extract_tgt_board_grid(question)
  boards = [copy.deepcopy(src_board)]
  for move in moves:
    next_board, coord = get_next_board_grid(move, boards[-1], coord)
    if not next_board:
      continue
    boards.append(next_board)
  return np.array_equal(np.array(boards[-1]), tgt_board)


def eval_op_cup(moves, question, src_board):
  if not moves:
    return False
  tgt_board = extract_tgt_board_cup(question)
  next_board = copy.deepcopy(src_board)
  for move in moves:
    next_board = get_next_board_cup(move, next_board)
  return np.array_equal(np.array(next_board), tgt_board)


def eval_op_file(cmds, question, states):
  if (not cmds) or len(cmds) > 2:
    return False
  cmd_files = {"rm": set(), "touch": set()}
  for cmd in cmds:
    if (not cmd.startswith("rm -rf")) and (not cmd.startswith("touch")):
      return False
    match = re.search(r"\{([^}]+)\}", cmd)
    if not match:
      return False
    files = set(match.group(1).split(","))
    if cmd.startswith("rm -rf"):
      cmd_files["rm"] = files
    elif cmd.startswith("touch"):
      cmd_files["touch"] = files
  if cmd_files["rm"] & cmd_files["touch"]:
    return False
  tgt_path, tgt_files = extract_tgt(question, "files")
  return get_next_files(cmds, states, tgt_path) == set(tgt_files.split(", "))


ALL_CARDS = {f"{cid} of {t}" for cid in ["Ace"] + [str(i) for i in
                                                  range(2, 11)]
             + ["Jack", "Queen", "King"]
             for t in ["Hearts", "Clubs", "Diamonds", "Spades"]}


def eval_op_card(moves, question, src_states):
  if not moves:
    return False
  tgt_pile, cards = extract_tgt(question, "cards from top to bottom")
  tgt_cards = cards.split(", ")
  states = copy.deepcopy(src_states)
  for move in moves:
    if not move.startswith("add") and not move.startswith("remove"):
      return False
    if not move.endswith("pile0") and not move.endswith("pile1"):
      return False
    card = " ".join(move.split()[1:-2])
    if card not in ALL_CARDS:
      return False
    action, pile = move.split()[0], move.split()[-1]
    if pile not in states:
      return False
    if action == "add":
      states[pile].append(card)
    elif action == "remove":
      if (not states[pile]) or (card != states[pile][0]):
        return False
      states[pile].remove(card)
  return states[tgt_pile] == tgt_cards


def eval_op_chip(moves, question, src_states):
  if not moves:
    return False
  tgt_cup, chips = extract_tgt(question, "chips")
  tgt_chips = [int(c) for c in chips.split(", ")]
  states = copy.deepcopy(src_states)
  for move in moves:
    if not move.startswith("add") and not move.startswith("remove"):
      return False
    if not move.endswith("cup0") and not move.endswith("cup1"):
      return False
    chip = move.split()[1]
    if not chip.isdigit():
      return False
    chip = int(chip)
    if chip not in [5, 10, 20, 50, 100]:
      return False
    action, cup = move.split()[0], move.split()[-1]
    if action == "add":
      states[cup].append(chip)
    elif action == "remove":
      if chip not in states[cup]:
        return False
      states[cup].remove(chip)
  return Counter(states[tgt_cup]) == Counter(tgt_chips)


def ref_evaluate(question, response, ground_truth, judge):
  response = ref_extract_final_answer(response)
  if not response:
    return False
  return judge(ref_get_judge_prompt(question, response, ground_truth)) == (
      "Correct")


def ref_evaluate_operation(response, data, extract):
  demo = data["demo"]
  response = ref_extract_final_answer(response)
  if not response:
    return False
  i = 0 if data["visible_time"] == "end" else -1
  moves = extract(demo, response)
  if demo == "hrd":
    return eval_op_hrd(moves, data["question"], data["states"][i])
  if demo == "grid":
    return eval_op_grid(moves, data["question"], data["states"][i],
                        data["coords"][i])
  if demo == "cup":
    return eval_op_cup(moves, data["question"], data["states"][i])
  n = int(data["num_state"])
  if demo == "file_sys":
    states = {k: dict([list(data["states"][k].items())[i]])
              for k in [f"path{j}" for j in range(n)]}
    return eval_op_file(moves, data["question"], states)
  if demo == "card":
    states = {k: data["states"][k][i] for k in [f"pile{j}" for j in range(n)]}
    return eval_op_card(moves, data["question"], states)
  states = {k: data["states"][k][i] for k in [f"cup{j}" for j in range(n)]}
  return eval_op_chip(moves, data["question"], states)


STATE_SIZE_MAP = {3: 1, 4: 2, 1: 1, 2: 2}


def ref_show_result(results):
  summary = {"overall": [0, 0], "num_op_5_9": [0, 0],
             "num_op_10_14": [0, 0], "state_1": [0, 0], "state_2": [0, 0],
             "order_operation": [0, 0], "counting_operation": [0, 0],
             "infer_state": [0, 0], "comparison_state": [0, 0],
             "prediction_state": [0, 0], "prediction_operation": [0, 0]}
  for r in results.values():
    summary["overall"][0] += int(r["rating"])
    summary["overall"][1] += 1
    state_key = f"state_{STATE_SIZE_MAP[int(r['num_state'])]}"
    summary[state_key][0] += int(r["rating"])
    summary[state_key][1] += 1
    if 5 <= int(r["num_operation"]) < 10:
      num_op_key = "num_op_5_9"
    elif 10 <= int(r["num_operation"]) < 15:
      num_op_key = "num_op_10_14"
    summary[num_op_key][0] += int(r["rating"])
    summary[num_op_key][1] += 1
    dim = "infer_state" if r["dim"] in ["order_state", "counting_state"] else (
        r["dim"])
    summary[dim][0] += int(r["rating"])
    summary[dim][1] += 1
  return {k: v[0] / v[1] for k, v in summary.items() if v[1]}


# -- rows in the release's layout ----------------------------------------------

PROMPT = "\n\nProvide a summary of the final answer after 'Final Answer:'"


def _row(demo, dim, question, answer, *, num_state=3, num_operation=5,
         visible_time="start", **script):
  return dict(video=f"videos/{demo}/state{num_state}_op{num_operation}_"
              f"{visible_time}.mp4", question=question + PROMPT,
              answer=answer, dim=dim, visible_time=visible_time,
              num_state=num_state, num_operation=num_operation, demo=demo,
              **script)


HRD_STATES = [[[6, 5, 8], [4, 3, 0], [2, 1, 7]],
              [[6, 5, 8], [4, 3, 7], [2, 1, 0]]]
HRD_Q = ("The video shows a sliding puzzle on a 3x3 board. ... what sequence "
         "of moves (left, right, up, down) should be executed to achieve the "
         "desired number arrangement: `(a,1): 2, (a,2): 1, (a,3): 0, (b,1): "
         "4, (b,2): 3, (b,3): 7, (c,1): 6, (c,2): 5, (c,3): 8`?")
GRID_STATES = [[[0, 1, 0], [0, 0, 1], [0, 0, 0]],
               [[1, 0, 1], [0, 1, 1], [0, 0, 0]]]
GRID_Q = ("The video presents a 3x3 grid ... to achieve the desired "
          "arrangement of black and white pieces: `(a,0): black, (a,1): "
          "white, (a,2): black, (b,0): black, (b,1): black, (b,2): black, "
          "(c,0): black, (c,1): black, (c,2): white`? List them in order.")
CUP_STATES = [[[1, 0, 0], [1, 0, 0], [0, 1, 1]],
              [[0, 1, 0], [1, 0, 0], [1, 0, 1]]]
CUP_Q = ("The video presents a 'Tricky Cup' puzzle on a 3x3 board. ... what "
         "sequence of cup swaps should be executed to achieve the desired "
         "distribution of coins: `a2, b1, c1, c2`?")
FILE_STATES = {"path0": {"init": ["a.txt", "b.py", "c.csv"],
                         "rm -rf path0/{a.txt}": ["b.py", "c.csv"]}}
FILE_Q = ("... to ensure that `path0` contains exactly the following files: "
          "`b.py, c.csv, d.json`, what sequence of commands should be "
          "executed?")
CARD_STATES = {"pile0": [["7 of Spades", "8 of Clubs"],
                         ["7 of Spades", "8 of Clubs", "Ace of Hearts"]]}
CARD_Q = ("... to ensure that `pile0` contains exactly the following cards "
          "from top to bottom: `8 of Clubs, Ace of Hearts, Queen of Clubs`, "
          "what sequence of actions should be performed?")
CHIP_STATES = {"cup0": [[20, 10, 100], [20, 10, 100, 5]]}
CHIP_Q = ("... to ensure that `cup0` contains exactly the following chips: "
          "`100, 10, 5, 50` (order does not matter), what sequence of "
          "actions should be performed?")


def rows_and_responses():
  """(rows, responses): every dim, right / wrong / malformed replies."""
  cases = [
      (_row("cup", "order_operation", "What are the 2nd to 4th moves?",
            "2nd: (a2, c2)\n3rd: (b2, c1)\n4th: (b1, c3)"),
       "Thinking...\nFinal Answer: 2nd: (a2, c2), 3rd: (b2, c1), 4th: "
       "(b1, c3)"),
      (_row("cup", "order_operation", "What are the 2nd to 4th moves?",
            "2nd: (a2, c2)\n3rd: (b2, c1)\n4th: (b1, c3)",
            visible_time="end", num_state=4, num_operation=11),
       "Final Answer: 2nd: (a2, c2), 3rd: (b1, c1), 4th: (b1, c3)"),
      (_row("hrd", "counting_operation", "How many times was 'up' "
            "performed?", "2 times", num_operation=12), "final answer: 2"),
      (_row("hrd", "order_state", "What was the board at the start?",
            "(a,1): 2, (a,2): 1"), "Final Answer:** (a,1): 2, (a,2): 1"),
      (_row("grid", "counting_state", "How many black pieces?", "4",
            num_state=4), "Final Answer 4"),
      (_row("file_sys", "comparison_state", "Which files differ?",
            "a.txt", num_state=2), "\u25c1think\u25b7 x \u25c1/think\u25b7"
       "Final Answer: a.txt."),
      (_row("chip", "prediction_state", "What chips will cup0 hold?",
            "3 chips: 20, 10, 5", num_state=1, num_operation=9),
       "Final Answer: 3 chips: 20, 10, 5"),
      (_row("card", "prediction_state", "Which cards?", "Ace of Hearts",
            num_state=2), ""),
      # prediction_operation: verified by simulation.
      (_row("hrd", "prediction_operation", HRD_Q, None,
            states=HRD_STATES), "Final Answer: right, up"),   # illegal 'up'
      (_row("hrd", "prediction_operation", HRD_Q, None, states=HRD_STATES),
       "Final Answer: left"),
      (_row("hrd", "prediction_operation", HRD_Q, None, states=HRD_STATES,
            visible_time="end"), "Final Answer: up, right, right"),
      (_row("grid", "prediction_operation", GRID_Q, None,
            states=GRID_STATES, coords=[[2, 0], [1, 0]]),
       "Final Answer: up, down, left"),
      (_row("grid", "prediction_operation", GRID_Q, None,
            states=[[[1, 0, 1], [1, 1, 1], [1, 1, 0]]] * 2,
            coords=[[0, 1], [0, 1]]), "Final Answer: left"),  # off: kept
      (_row("cup", "prediction_operation", CUP_Q, None, states=CUP_STATES),
       "Final Answer: (c3, c2)"),
      (_row("cup", "prediction_operation", CUP_Q, None, states=CUP_STATES,
            visible_time="end"), "Final Answer: (a1, a2), (b2, c2)"),
      (_row("cup", "prediction_operation", CUP_Q, None, states=CUP_STATES),
       "Final Answer: (a2, e5)"),   # off the 3x3 board: ignored
      (_row("file_sys", "prediction_operation", FILE_Q, None, num_state=1,
            commands=[], states=FILE_STATES),
       "Final Answer: touch path0/{d.json}"),
      (_row("file_sys", "prediction_operation", FILE_Q, None, num_state=1,
            states=FILE_STATES, visible_time="end"),
       "Final Answer: touch path0/{d.json} & rm -rf path0/{a.txt}"),
      (_row("file_sys", "prediction_operation", FILE_Q, None, num_state=1,
            states=FILE_STATES),
       "Final Answer: touch path0/{d.json} & rm -rf path0/{d.json}"),
      (_row("card", "prediction_operation", CARD_Q, None, num_state=1,
            states=CARD_STATES),
       "Final Answer: remove 7 of Spades from pile0, add Queen of Clubs to "
       "pile0"),
      (_row("card", "prediction_operation", CARD_Q, None, num_state=1,
            states=CARD_STATES),
       "Final Answer: remove 8 of Clubs from pile0, add Queen of Clubs to "
       "pile0"),
      (_row("chip", "prediction_operation", CHIP_Q, None, num_state=1,
            states=CHIP_STATES),
       "Final Answer: remove 20 cup0, add 50 to cup0"),
      (_row("chip", "prediction_operation", CHIP_Q, None, num_state=1,
            states=CHIP_STATES, visible_time="end"),
       "Final Answer: remove 20 from cup0, add 5 to cup0, add 50 to cup0"),
      (_row("chip", "prediction_operation", CHIP_Q, None, num_state=1,
            states=CHIP_STATES), "Final Answer: add 7 to cup0"),
  ]
  return [r for r, _ in cases], [t for _, t in cases]


def fake_llm(prompt: str) -> str:
  """A deterministic stand-in of the LLM judge: "Correct" iff the prompt's
  response equals its ground truth up to case, spaces and commas."""
  resp = re.search(r"Model Response: (.*?)\n\nGround-Truth Answer: ",
                   prompt, re.DOTALL).group(1)
  truth = re.search(r"Ground-Truth Answer: (.*?)\n\nDirectly", prompt,
                    re.DOTALL).group(1)
  def norm(s):
    return re.sub(r"[\s,;*`]+", "", s.lower()).rstrip(".")
  return "Correct" if norm(resp).lstrip(":") == norm(truth) else "Incorrect"


class ReleaseScorerTest(absltest.TestCase):

  def _reference(self, rows, responses):
    results = {}
    for i, (row, resp) in enumerate(zip(rows, responses)):
      if row["answer"]:
        rating = ref_evaluate(row["question"], resp, row["answer"], fake_llm)
      else:
        rating = ref_evaluate_operation(resp, row, rel.extract_operations)
      results[i] = dict(row, rating=rating)
    return results

  def test_ratings_and_summary_equal_the_release(self):
    rows, responses = rows_and_responses()
    ref = self._reference(rows, responses)
    want = [ref[i]["rating"] for i in range(len(rows))]
    summary = ref_show_result(ref)
    for judge in ("normalized_match", rel.llm_judge(fake_llm)):
      rep = rel.score_release(rows, responses, judge=judge)
      self.assertEqual(rep.correct, want)
      self.assertAlmostEqual(rep.accuracy, summary["overall"])
      for dim, acc in rep.per_dim.items():
        self.assertAlmostEqual(acc, summary[dim], msg=dim)
      self.assertEqual(set(rep.per_dim), set(rel.DIMS))
      for k in ("state_1", "state_2"):
        self.assertAlmostEqual(rep.by["state"][k], summary[k])
      for k in ("num_op_5_9", "num_op_10_14"):
        self.assertAlmostEqual(rep.by["num_op"][k], summary[k])
    # Hand-checked: both operation outcomes occur for every demo.
    ops = {}
    for row, ok in zip(rows, want):
      if row["dim"] == "prediction_operation":
        ops.setdefault(row["demo"], set()).add(ok)
    self.assertEqual(ops, {d: {True, False} for d in
                           ("hrd", "grid", "cup", "file_sys", "card",
                            "chip")})
    # Levels: the mean over each level's questions.
    rep = rel.score_release(rows, responses)
    for level in (1, 2, 3):
      sel = [ok for row, ok in zip(rows, want)
             if rel.LEVEL[rel.DIM_KEY[row["dim"]]] == level]
      self.assertAlmostEqual(rep.per_level[level], sum(sel) / len(sel))
    self.assertEqual(rep.malformed, 2)  # "final answer:" (case) and ""

  def test_extract_final_answer(self):
    for text in ("no marker", "", None, "Final Answer", "x Final Answer  \n",
                 "a Final Answer: b Final Answer: c",
                 "\u25c1/think\u25b7 Final Answer: (a,1)\n"):
      got = rel.extract_final_answer(text)
      want = ref_extract_final_answer(text)
      self.assertEqual(got, want or None, msg=repr(text))

  def test_llm_judge_runs_the_checkpoint_as_the_release_does(self):
    """chat_generate == transformers' generate on the release's judge
    messages (test_chat_completion_hf: system + user turn, greedy)."""
    import os  # pylint: disable=g-import-not-at-top
    import shutil  # pylint: disable=g-import-not-at-top
    import tempfile  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
    from jaxlab.testing import hf_fixtures  # pylint: disable=g-import-not-at-top
    from jaxlab.testing import tokenizer_fixtures  # pylint: disable=g-import-not-at-top
    cleanup = hf_fixtures.inductor_cleanup()
    d = tempfile.mkdtemp()
    try:
      ckpt = os.path.join(d, "judge")
      tokenizer_fixtures.make_hf_tokenizer(ckpt)
      hf_fixtures.make_hf_checkpoint(ckpt, "llama", vocab_size=416,
                                     num_layers=1, init_std=0.05)
      model, _ = pretrained.load(ckpt)
      generate = rel.chat_generate(model, pretrained.tokenizer(ckpt))
      hf_tok = transformers.AutoTokenizer.from_pretrained(ckpt)
      ref = transformers.AutoModelForCausalLM.from_pretrained(ckpt).eval()
      prompt = rel.JUDGE_PROMPT.format(question="Q?", response="(a,1): 2",
                                       ground_truth="(a,1): 3")
      text = hf_tok.apply_chat_template(
          [{"role": "system", "content": rel.JUDGE_SYSTEM},
           {"role": "user", "content": prompt}], tokenize=False,
          add_generation_prompt=True)
      x = hf_tok([text], return_tensors="pt", add_special_tokens=False)
      with torch.no_grad():
        out = ref.generate(**x, max_new_tokens=4, do_sample=False,
                           eos_token_id=hf_tok.eos_token_id,
                           pad_token_id=hf_tok.pad_token_id)
      want = hf_tok.batch_decode(out[:, x["input_ids"].shape[1]:],
                                 skip_special_tokens=True)[0]
      self.assertEqual(generate(prompt), want)
      judge = rel.llm_judge(generate)
      self.assertEqual(judge("Q?", "(a,1): 2", "(a,1): 3"),
                       want.strip() == "Correct")
    finally:
      shutil.rmtree(d, ignore_errors=True)
      cleanup()

  def test_errors(self):
    rows, responses = rows_and_responses()
    with self.assertRaisesRegex(ValueError, "one response per row"):
      rel.score_release(rows, responses[:-1])
    with self.assertRaisesRegex(ValueError, "unknown dim 'recall'"):
      rel.score_release([dict(rows[0], dim="recall")], ["Final Answer: x"])
    self.assertIs(ev.score_release, rel.score_release)


if __name__ == "__main__":
  absltest.main()
