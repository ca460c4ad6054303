"""lm-evaluation-harness's humaneval / mbpp scoring: the tests' reference.

* `ref_estimate_pass_at_k`: huggingface/evaluate
  metrics/code_eval/code_eval.py::estimate_pass_at_k at a7dd338 (the same
  as openai/human-eval human_eval/evaluation.py).
* `RefHumanEval` / `RefMbpp`: lm-evaluation-harness v0.4.8 (6d2abda)
  lm_eval/tasks/humaneval/{humaneval.yaml,utils.py} and
  lm_eval/tasks/mbpp/{mbpp.yaml,utils.py}, with the few-shot context of
  lm_eval/api/samplers.py::ContextSampler.get_context.
* `ref_sanitize`: github.com/Crys-Chen/DPad llada/sanitize.py at 461b36e.
* `ref_passed`: code_eval's verdict on `candidate + "\n" + test_case`,
  here by running it in a fresh `python -c` with code_eval's 3 s limit
  (no sandbox: tests run only programs they wrote or a tiny model wrote).
`jaxlab.rewards.code_exec` is checked against these
(tests/rewards/code_exec_test.py) and the DPad real-run test rescoring its
saved completions.
"""

import ast
import subprocess
import sys

import numpy as np


# code_eval's unsafe_execute: `exec(check_program, {})`, "passed" unless it
# raises (any BaseException, SystemExit included).
_EXEC = ("import sys\nsrc = sys.stdin.read()\ntry:\n  exec(src, {})\n"
         "except BaseException:\n  sys.exit(1)\n")


def ref_passed(candidate, test_case, timeout=3.0):
  try:
    r = subprocess.run([sys.executable, "-I", "-c", _EXEC],
                       input=candidate + "\n" + test_case, text=True,
                       capture_output=True, timeout=timeout, check=False)
  except subprocess.TimeoutExpired:
    return False
  return r.returncode == 0


def ref_estimate_pass_at_k(num_samples, num_correct, k):
  def estimator(n, c, k):
    if n - c < k:
      return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))
  return np.array([estimator(int(n), int(c), k)
                   for n, c in zip(num_samples, num_correct)])


class RefHumanEval:
  UNTIL = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]

  @staticmethod
  def doc_to_text(doc):
    return doc["prompt"]

  @staticmethod
  def doc_to_target(doc):
    return f"{doc['test']}\ncheck({doc['entry_point']})"

  @classmethod
  def generate_until(cls, text):   # the model side's stop-string cut
    for u in cls.UNTIL:
      text = text.split(u)[0]
    return text

  @staticmethod
  def build_predictions(resps, docs):
    return [[doc["prompt"] + r for r in resp] for resp, doc in zip(resps, docs)]


class RefMbpp:

  @staticmethod
  def doc_to_text(doc):
    return ("You are an expert Python programmer, and here is your task: "
            + doc["text"] + " Your code should pass these tests:\n\n"
            + doc["test_list"][0] + "\n" + doc["test_list"][1] + "\n"
            + doc["test_list"][2] + "\n[BEGIN]\n")

  @staticmethod
  def doc_to_target(doc):
    if "is_fewshot" in doc:
      return doc["code"] + "\n[DONE]"
    return (doc["test_list"][0] + "\n" + doc["test_list"][1] + "\n"
            + doc["test_list"][2])

  @classmethod
  def context(cls, doc, shots):
    labeled = ""
    for s in shots:   # get_context with target_delimiter ""
      labeled += cls.doc_to_text(s) + "" + cls.doc_to_target(s) + "\n\n"
    return labeled + cls.doc_to_text(doc)


REF_MBPP_SHOTS = [   # lm_eval/tasks/mbpp/utils.py::list_fewshot_samples
    {"task_id": 2, "text": "Write a function to find the similar elements "
     "from the given two tuple lists.",
     "code": "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple("
     "set(test_tup1) & set(test_tup2))\r\n  return (res) ",
     "test_list": ["assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == "
                   "(4, 5)",
                   "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == "
                   "(3, 4)",
                   "assert similar_elements((11, 12, 14, 13),(17, 15, 14, "
                   "13)) == (13, 14)"], "is_fewshot": True},
    {"task_id": 3, "text": "Write a python function to identify non-prime "
     "numbers.",
     "code": "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n"
     "    for i in range(2,int(math.sqrt(n)) + 1):\r\n        if n % i == 0:"
     "\r\n            result = True\r\n    return result",
     "test_list": ["assert is_not_prime(2) == False",
                   "assert is_not_prime(10) == True",
                   "assert is_not_prime(35) == True"], "is_fewshot": True},
    {"task_id": 4, "text": "Write a function to find the largest integers "
     "from a given list of numbers using heap queue algorithm.",
     "code": "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  "
     "largest_nums = hq.nlargest(n, nums)\r\n  return largest_nums",
     "test_list": ["assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, "
                   "22, 58],3)==[85, 75, 65] ",
                   "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, "
                   "22, 58],2)==[85, 75] ",
                   "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, "
                   "22, 58],5)==[85, 75, 65, 58, 35]"], "is_fewshot": True},
]


def ref_sanitize(text, entrypoint=None):
  """DPad llada/sanitize.py::sanitize (refine_text, extract_longest_valid_
  code, get_deps, get_function_dependency), condensed."""
  text = text.replace("\t", "    ").replace("\r\n", "\n").replace("\r", "\n")
  text = text.strip() + "\n"
  lines = text.splitlines()[:100]
  max_valid, code = 0, ""
  for i in range(len(lines)):
    for j in range(i, len(lines)):
      snippet = "\n".join(lines[i:j + 1])
      try:
        ast.parse(snippet)
      except (SyntaxError, MemoryError):
        continue
      n = sum(1 for line in lines[i:j + 1] if line.strip())
      if n > max_valid:
        max_valid, code = n, snippet
  tree = ast.parse(code)
  definitions, imports = {}, []
  for node in tree.body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      imports.append(node)
    elif isinstance(node, ast.ClassDef):
      definitions[node.name] = ("class", node)
    elif isinstance(node, ast.FunctionDef):
      if any(isinstance(n, ast.Return) for n in ast.walk(node)):
        definitions[node.name] = ("function", node)
    elif isinstance(node, ast.Assign):
      t = node.targets
      if t and isinstance(t[0], ast.Name):
        definitions[t[0].id] = ("variable", node)
  if entrypoint:
    name2deps = {}
    for name, (_, node) in definitions.items():
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
      name2deps[name] = deps
    visited, to_visit = set(), [entrypoint]
    while to_visit:
      cur = to_visit.pop(0)
      if cur not in visited:
        visited.add(cur)
        to_visit.extend(name2deps.get(cur, set()) - visited)
  out = [ast.unparse(n) for n in imports]
  for name, (_, node) in definitions.items():
    if not entrypoint or name in visited:
      out.append(ast.unparse(node))
  return "\n".join(out)
