r"""Code-generation pass@k as lm-evaluation-harness scores it, run sandboxed.

    progs = [code_exec.humaneval_prediction(row, completion)]
    code_exec.pass_at_k([progs], [code_exec.humaneval_reference(row)], k=(1,))

The harness's `humaneval` and `mbpp` tasks (lm_eval 0.4.8, the version the
DPad repository pins, github.com/Crys-Chen/DPad requirements.txt at
461b36e; EleutherAI/lm-evaluation-harness tag v0.4.8 = 6d2abda) score a
completion with Hugging Face's `code_eval` metric (huggingface/evaluate
metrics/code_eval/code_eval.py and execute.py, a7dd338): each candidate
program is `prediction + "\n" + reference`, executed with a 3 s limit;
"passed" iff it runs to its end; pass@k of a problem is the unbiased
estimator `1 - C(n - c, k) / C(n, k)` over its n candidates with c passing
(`estimate_pass_at_k`, the HumanEval paper's formula), averaged over
problems. Here each program runs in `jaxlab.rewards.sandbox.run_program`
(its own namespaces, dropped privileges, rlimits and a wall-clock kill)
instead of code_eval's in-process `exec` under `reliability_guard`.

The tasks' prompts and post-processing (lm_eval/tasks/{humaneval,mbpp}):

* HumanEval as released (`openai/openai_humaneval`, config
  `openai_humaneval`, split test: `task_id`, `prompt`,
  `canonical_solution`, `test`, `entry_point`). 0-shot; the context is the
  `prompt`; generation stops at `HUMANEVAL_UNTIL`; the prediction is
  `prompt + completion` (`utils.build_predictions`); the reference is
  `test + "\ncheck(" + entry_point + ")"` (`doc_to_target`).
* MBPP as released (`google-research-datasets/mbpp`, config `full`:
  `task_id`, `text`, `code`, `test_list`, `test_setup_code`,
  `challenge_test_list`; split test). 3-shot from the task's fixed
  examples (`MBPP_FEWSHOT`, `utils.list_fewshot_samples`, sampler
  `first_n`), each `doc_to_text + code + "\n[DONE]"` (target_delimiter "")
  joined by "\n\n"; the context is `doc_to_text` of the row (`mbpp_text`);
  generation stops at "[DONE]"; the prediction is the completion itself;
  the reference is the first three `test_list` asserts joined by "\n"
  (`test_setup_code` and `challenge_test_list` unused, as in the task).

`dpad_humaneval_program` is the DPad repository's own post-processing for
HumanEval with an instruct model (llada/postprocess_code.py + sanitize.py
at 461b36e, which the paper's HumanEval pass@1 goes through): the
completion is not cut at the stop strings; the first ```python block (or
the whole text) is appended to the prompt after a newline and reduced by
`sanitize` to the imports and the definitions the entry point reaches.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

HUMANEVAL_UNTIL = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
MBPP_UNTIL = ("[DONE]",)
TIMEOUT_S = 3.0   # code_eval's default per-program limit

# lm_eval/tasks/mbpp/utils.py::list_fewshot_samples (v0.4.8), verbatim.
MBPP_FEWSHOT = (
    {"task_id": 2,
     "text": "Write a function to find the similar elements from the given "
             "two tuple lists.",
     "code": "def similar_elements(test_tup1, test_tup2):\r\n  res = "
             "tuple(set(test_tup1) & set(test_tup2))\r\n  return (res) ",
     "test_list": [
         "assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
         "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
         "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == "
         "(13, 14)"]},
    {"task_id": 3,
     "text": "Write a python function to identify non-prime numbers.",
     "code": "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n"
             "    for i in range(2,int(math.sqrt(n)) + 1):\r\n        if n % i"
             " == 0:\r\n            result = True\r\n    return result",
     "test_list": ["assert is_not_prime(2) == False",
                   "assert is_not_prime(10) == True",
                   "assert is_not_prime(35) == True"]},
    {"task_id": 4,
     "text": "Write a function to find the largest integers from a given "
             "list of numbers using heap queue algorithm.",
     "code": "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  "
             "largest_nums = hq.nlargest(n, nums)\r\n  return largest_nums",
     "test_list": [
         "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)"
         "==[85, 75, 65] ",
         "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)"
         "==[85, 75] ",
         "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],5)"
         "==[85, 75, 65, 58, 35]"]},
)

HUMANEVAL_COLUMNS = ("task_id", "prompt", "test", "entry_point")
MBPP_COLUMNS = ("task_id", "text", "code", "test_list")


def check_columns(rows, columns: Sequence[str], name: str) -> None:
  """A ValueError naming the released layout when a column is missing."""
  if len(rows) and not set(columns) <= set(rows[0]):
    raise ValueError(f"{name} rows need columns {', '.join(columns)} (as "
                     f"released); got {sorted(rows[0])}")


def cut(completion: str, until: Sequence[str]) -> str:
  """`completion` up to the first of the stop strings (the harness's
  `until`; the whole text when none occurs)."""
  end = min([i for i in (completion.find(u) for u in until) if i >= 0],
            default=len(completion))
  return completion[:end]


# -- HumanEval -----------------------------------------------------------------


def humaneval_prompt(row: Mapping[str, Any]) -> str:
  """The task's context: `doc_to_text: "{{prompt}}"` (0-shot)."""
  return row["prompt"]


def humaneval_prediction(row: Mapping[str, Any], completion: str) -> str:
  """`build_predictions`: the prompt followed by the completion cut at
  `HUMANEVAL_UNTIL`."""
  return row["prompt"] + cut(completion, HUMANEVAL_UNTIL)


def humaneval_reference(row: Mapping[str, Any]) -> str:
  """`doc_to_target: "{{test}}\\ncheck({{entry_point}})"`."""
  return f"{row['test']}\ncheck({row['entry_point']})"


# -- MBPP ----------------------------------------------------------------------


def mbpp_text(row: Mapping[str, Any]) -> str:
  """The task's `doc_to_text`."""
  t = row["test_list"]
  return (f"You are an expert Python programmer, and here is your task: "
          f"{row['text']} Your code should pass these tests:\n\n{t[0]}\n"
          f"{t[1]}\n{t[2]}\n[BEGIN]\n")


def mbpp_prompt(row: Mapping[str, Any], num_fewshot: int = 3) -> str:
  """The context: `num_fewshot` of `MBPP_FEWSHOT` (each `doc_to_text`, the
  code, "\\n[DONE]", then the fewshot delimiter "\\n\\n"), then the row's
  `doc_to_text`."""
  if not 0 <= num_fewshot <= len(MBPP_FEWSHOT):
    raise ValueError(f"num_fewshot={num_fewshot}: MBPP has "
                     f"{len(MBPP_FEWSHOT)} few-shot examples")
  head = "".join(f"{mbpp_text(s)}{s['code']}\n[DONE]\n\n"
                 for s in MBPP_FEWSHOT[:num_fewshot])
  return head + mbpp_text(row)


def mbpp_prediction(completion: str) -> str:
  """The completion cut at "[DONE]" (no filter: it is the program)."""
  return cut(completion, MBPP_UNTIL)


def mbpp_reference(row: Mapping[str, Any]) -> str:
  """`doc_to_target` of a test row: its first three asserts."""
  t = row["test_list"]
  return f"{t[0]}\n{t[1]}\n{t[2]}"


# -- DPad's HumanEval post-processing (llada/sanitize.py) ---------------------


def _refine_text(text: str) -> str:
  text = text.replace("\t", "    ")
  text = text.replace("\r\n", "\n").replace("\r", "\n")
  return text.strip() + "\n"


def _syntax_ok(code: str) -> bool:
  try:
    ast.parse(code)
    return True
  except (SyntaxError, MemoryError, ValueError):
    return False


def _longest_valid_code(text: str) -> str:
  """The span of the first 100 lines with the most non-blank lines that
  parses (first such span on ties)."""
  lines = text.splitlines()[:100]
  best, best_code = 0, ""
  for i in range(len(lines)):
    for j in range(i, len(lines)):
      snippet = "\n".join(lines[i:j + 1])
      if _syntax_ok(snippet):
        n = sum(1 for line in lines[i:j + 1] if line.strip())
        if n > best:
          best, best_code = n, snippet
  return best_code


def _deps(node: ast.AST) -> set[str]:
  deps, stack = set(), [node]
  while stack:
    cur = stack.pop()
    for child in ast.iter_child_nodes(cur):
      if isinstance(child, ast.Name):
        deps.add(child.id)
      elif isinstance(child, ast.Attribute):
        deps.add(child.attr)
      else:
        stack.append(child)
  return deps


def sanitize(text: str, entry_point: str | None = None) -> str:
  """DPad's (Dream's) `sanitize`: the longest parsable span of `text`,
  reduced to its imports and the top-level classes, functions with a
  `return` and assignments (the last of each name) reachable from
  `entry_point` by name (all of them without one), unparsed by `ast`."""
  code = _longest_valid_code(_refine_text(text))
  tree = ast.parse(code)
  defs: dict[str, ast.AST] = {}
  imports = []
  for node in tree.body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      imports.append(node)
    elif isinstance(node, ast.ClassDef):
      defs[node.name] = node
    elif isinstance(node, ast.FunctionDef):
      if any(isinstance(n, ast.Return) for n in ast.walk(node)):
        defs[node.name] = node
    elif isinstance(node, ast.Assign):
      if node.targets and isinstance(node.targets[0], ast.Name):
        defs[node.targets[0].id] = node
  reachable = None
  if entry_point:
    graph = {name: _deps(node) for name, node in defs.items()}
    reachable, todo = set(), [entry_point]
    while todo:
      cur = todo.pop(0)
      if cur not in reachable:
        reachable.add(cur)
        todo.extend(graph.get(cur, set()) - reachable)
  out = [ast.unparse(n) for n in imports]
  out += [ast.unparse(n) for name, n in defs.items()
          if reachable is None or name in reachable]
  return "\n".join(out)


def dpad_humaneval_program(row: Mapping[str, Any], completion: str) -> str:
  """postprocess_code.py: `sanitize(prompt + "\\n" + the completion's
  first ```python block (or all of it), entry_point)`."""
  body = completion.split("```python\n", 1)[-1].split("```")[0]
  return sanitize(row["prompt"] + "\n" + body, row["entry_point"])


# -- pass@k --------------------------------------------------------------------


def estimate_pass_at_k(num_samples, num_correct, k: int) -> np.ndarray:
  """Per problem `1 - C(n - c, k) / C(n, k)` (code_eval's / HumanEval's
  numerically stable product form); `num_samples` an int or one per
  problem."""
  def one(n: int, c: int) -> float:
    if n - c < k:
      return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
  if isinstance(num_samples, (int, np.integer)):
    ns = itertools.repeat(int(num_samples), len(num_correct))
  else:
    if len(num_samples) != len(num_correct):
      raise ValueError(f"{len(num_samples)} sample counts for "
                       f"{len(num_correct)} correct counts")
    ns = iter(num_samples)
  return np.array([one(int(n), int(c)) for n, c in zip(ns, num_correct)])


def run_checks(programs: Sequence[str], *, timeout_s: float = TIMEOUT_S,
               run: Callable[..., Any] | None = None) -> list[bool]:
  """Whether each program runs to its end in the sandbox (code_eval's
  "passed"). `run`: a `run_program`-like callable (e.g. a
  `SandboxPool.run_program`); default one pool of 2 workers for the call."""
  from jaxlab.rewards import sandbox  # pylint: disable=g-import-not-at-top
  if run is not None:
    return [bool(run(p, timeout_s=timeout_s).ok) for p in programs]
  if not programs:
    return []
  with sandbox.SandboxPool(workers=min(2, len(programs))) as pool:
    return [bool(pool.run_program(p, timeout_s=timeout_s).ok)
            for p in programs]


def pass_at_k(predictions: Sequence[Sequence[str]], references: Sequence[str],
              k: Sequence[int] = (1,), *, timeout_s: float = TIMEOUT_S,
              run: Callable[..., Any] | None = None
              ) -> tuple[dict[str, float], list[list[bool]]]:
  """code_eval's `compute`: ({"pass@k": mean estimate}, per-problem
  verdicts), candidate programs `prediction + "\\n" + reference`; a k is
  reported only when every problem has at least k candidates."""
  if len(predictions) != len(references):
    raise ValueError(f"{len(predictions)} candidate lists for "
                     f"{len(references)} references: give one each")
  programs = [c + "\n" + ref for cands, ref in zip(predictions, references)
              for c in cands]
  flat = run_checks(programs, timeout_s=timeout_s, run=run)
  verdicts, i = [], 0
  for cands in predictions:
    verdicts.append(flat[i:i + len(cands)])
    i += len(cands)
  total = np.array([len(v) for v in verdicts])
  correct = np.array([sum(v) for v in verdicts])
  out = {f"pass@{kk}": float(estimate_pass_at_k(total, correct, kk).mean())
         for kk in k if (total >= kk).all()}
  return out, verdicts
