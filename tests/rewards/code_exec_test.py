"""Tests of jaxlab.rewards.code_exec: pass@k as the harness scores it.

References (jaxlab/testing/code_eval_reference.py, ported short from
their public repositories):
* `ref_estimate_pass_at_k`: huggingface/evaluate
  metrics/code_eval/code_eval.py::estimate_pass_at_k at a7dd338 (the same
  as openai/human-eval human_eval/evaluation.py), plus the closed form
  1 - C(n - c, k) / C(n, k) with math.comb.
* `RefHumanEval` / `RefMbpp`: lm-evaluation-harness v0.4.8 (6d2abda)
  lm_eval/tasks/humaneval/{humaneval.yaml,utils.py} and
  lm_eval/tasks/mbpp/{mbpp.yaml,utils.py}, with the few-shot context of
  lm_eval/api/samplers.py::ContextSampler.get_context (target_delimiter,
  fewshot_delimiter "\\n\\n") and code_eval's program
  `candidate + "\\n" + test_case`.
* `ref_sanitize`: github.com/Crys-Chen/DPad llada/sanitize.py and
  postprocess_code.py at 461b36e.
The rows are written here in the released layouts (openai_humaneval:
task_id, prompt, canonical_solution, test, entry_point; mbpp `full`:
task_id, text, code, test_list, test_setup_code, challenge_test_list).
"""

import math
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from jaxlab.rewards import code_exec
from jaxlab.rewards import sandbox
from jaxlab.testing.code_eval_reference import (  # pylint: disable=g-importing-member
    REF_MBPP_SHOTS, RefHumanEval, RefMbpp, ref_estimate_pass_at_k,
    ref_passed, ref_sanitize)


HUMANEVAL_ROWS = [
    {"task_id": "HumanEval/0",
     "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Sum of a and b.\n"
               "    >>> add(2, 3)\n    5\n    \"\"\"\n",
     "canonical_solution": "    return a + b\n",
     "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert "
             "candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
     "entry_point": "add"},
    {"task_id": "HumanEval/1",
     "prompt": "from typing import List\n\n\ndef evens(xs: List[int]) -> "
               "List[int]:\n    \"\"\"The even numbers of xs.\"\"\"\n",
     "canonical_solution": "    return [x for x in xs if x % 2 == 0]\n",
     "test": "\n\ndef check(candidate):\n    assert candidate([1, 2, 4]) == "
             "[2, 4]\n    assert candidate([]) == []\n",
     "entry_point": "evens"},
]
MBPP_ROW = {
    "task_id": 11, "text": "Write a python function to remove first and "
    "last occurrence of a given character from the string.",
    "code": "def remove_Occ(s,ch): \r\n    s = s.replace(ch, '', 1)\r\n    "
            "s = s[::-1].replace(ch, '', 1)\r\n    return s[::-1] ",
    "test_list": ['assert remove_Occ("hello","l") == "heo"',
                  'assert remove_Occ("abcda","a") == "bcd"',
                  'assert remove_Occ("PHP","P") == "H"'],
    "test_setup_code": "", "challenge_test_list": []}


class PassAtKTest(absltest.TestCase):

  def test_estimator_equals_reference_and_closed_form(self):
    ns = [1, 5, 10, 10, 20, 3, 200]
    cs = [0, 2, 0, 10, 7, 3, 13]
    for k in (1, 2, 5, 10):
      got = code_exec.estimate_pass_at_k(ns, cs, k)
      np.testing.assert_allclose(got, ref_estimate_pass_at_k(ns, cs, k),
                                 rtol=0, atol=1e-12)
      closed = [1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
                for n, c in zip(ns, cs)]
      np.testing.assert_allclose(got, closed, atol=1e-9)
    # pass@1 is the fraction correct; an int n applies to every problem.
    np.testing.assert_allclose(code_exec.estimate_pass_at_k(4, [0, 1, 4], 1),
                               [0.0, 0.25, 1.0])
    with self.assertRaisesRegex(ValueError, "2 sample counts for 3"):
      code_exec.estimate_pass_at_k([1, 2], [0, 0, 0], 1)


class PromptParityTest(absltest.TestCase):

  def test_humaneval_prompt_prediction_reference(self):
    completions = ["    return a + b\n\ndef other():\n    pass",
                   "    return [x for x in xs if x % 2 == 0]\nif True:\n  1",
                   "    return 1\n# trailing\nprint(1)"]
    for row in HUMANEVAL_ROWS:
      self.assertEqual(code_exec.humaneval_prompt(row),
                       RefHumanEval.doc_to_text(row))
      self.assertEqual(code_exec.humaneval_reference(row),
                       RefHumanEval.doc_to_target(row))
      for c in completions:
        want = RefHumanEval.build_predictions(
            [[RefHumanEval.generate_until(c)]], [row])[0][0]
        self.assertEqual(code_exec.humaneval_prediction(row, c), want)

  def test_mbpp_prompt_prediction_reference(self):
    for n in (0, 1, 3):
      self.assertEqual(code_exec.mbpp_prompt(MBPP_ROW, n),
                       RefMbpp.context(MBPP_ROW, REF_MBPP_SHOTS[:n]))
    self.assertEqual(code_exec.mbpp_reference(MBPP_ROW),
                     RefMbpp.doc_to_target(MBPP_ROW))
    self.assertEqual(code_exec.mbpp_prediction("def f():\n  return 1\n[DONE]"
                                               "\n\nYou are"),
                     "def f():\n  return 1\n")
    with self.assertRaisesRegex(ValueError, "3 few-shot"):
      code_exec.mbpp_prompt(MBPP_ROW, 4)

  def test_dpad_sanitize_equals_reference(self):
    row = HUMANEVAL_ROWS[1]
    texts = [
        "Here is the code:\n```python\nimport math\n\ndef helper(x):\n"
        "    return x % 2 == 0\n\ndef evens(xs):\n    return [x for x in xs "
        "if helper(x)]\n\nprint(evens([1, 2]))\n```\nDone.",
        "def evens(xs):\n\treturn [x for x in xs if x % 2 == 0]\nUNUSED = 3",
        "not code at all (",
    ]
    for t in texts:
      body = t.split("```python\n", 1)[-1].split("```")[0]
      want = ref_sanitize(row["prompt"] + "\n" + body, row["entry_point"])
      self.assertEqual(code_exec.dpad_humaneval_program(row, t), want)
      self.assertEqual(code_exec.sanitize(t), ref_sanitize(t))
    # By hand: the helper the entry point calls is kept, the print is not.
    self.assertEqual(code_exec.dpad_humaneval_program(row, texts[0]),
                     "from typing import List\nimport math\n"
                     "def helper(x):\n    return x % 2 == 0\n"
                     "def evens(xs):\n    return [x for x in xs if helper(x)]")


class SandboxedPassAtKTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The workers' matplotlib cache in a dir of the test's own.
    cls.mpl = tempfile.mkdtemp(prefix="code_exec_mpl_")
    cls.env = mock.patch.dict(os.environ, {"MPLCONFIGDIR": cls.mpl})
    cls.env.start()
    cls.pool = sandbox.SandboxPool(workers=1)

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()
    cls.env.stop()
    shutil.rmtree(cls.mpl, ignore_errors=True)
    super().tearDownClass()

  def test_verdicts(self):
    progs = {
        "passes": ("import math, heapq, collections\ndef f(x):\n    return "
                   "math.isqrt(x)\nassert f(17) == 4\nprint('ok')"),
        "fails an assert": "def f(x):\n    return x\nassert f(1) == 2",
        "raises": "def f(x):\n    return 1 / x\nf(0)",
        "times out": "while True:\n    pass",
        "sleeps past the limit": "import time\ntime.sleep(30)",
        "syntax error": "def f(:\n  pass",
        "exits": "raise SystemExit(0)",   # code_eval: BaseException, failed
        "no __name__ main": "if __name__ == '__main__':\n    assert False",
    }
    got = code_exec.run_checks(list(progs.values()), timeout_s=1.0,
                               run=self.pool.run_program)
    self.assertEqual(dict(zip(progs, got)),
                     {"passes": True, "fails an assert": False,
                      "raises": False, "times out": False,
                      "sleeps past the limit": False, "syntax error": False,
                      "exits": False, "no __name__ main": True})
    # code_eval's verdict (a plain interpreter) on the programs that do not
    # depend on the sandbox's globals or a 30 s sleep.
    for name in ("passes", "fails an assert", "raises", "syntax error",
                 "exits", "no __name__ main"):
      self.assertEqual(ref_passed(progs[name], "", timeout=10.0),
                       dict(zip(progs, got))[name], msg=name)
    r = self.pool.run_program("import time\ntime.sleep(30)", timeout_s=0.5)
    self.assertFalse(r.ok)
    self.assertIn("timeout", r.error)
    self.assertLess(r.elapsed_s, 10.0)
    r = self.pool.run_program("print('hi')\nassert 0, 'boom'")
    self.assertEqual((r.ok, r.stdout, r.image), (False, "hi\n", None))
    self.assertIn("AssertionError: boom", r.error)

  def test_pass_at_k_on_harness_programs(self):
    rows = HUMANEVAL_ROWS
    right = [code_exec.humaneval_prediction(r, r["canonical_solution"])
             for r in rows]
    wrong = [code_exec.humaneval_prediction(rows[0], "    return a - b\n"),
             code_exec.humaneval_prediction(rows[1], "    return xs\n")]
    refs = [code_exec.humaneval_reference(r) for r in rows]
    # Problem 0: right, wrong; problem 1: wrong, wrong.
    res, verdicts = code_exec.pass_at_k(
        [[right[0], wrong[0]], [wrong[1], wrong[1]]], refs, k=(1, 2, 3),
        run=self.pool.run_program)
    self.assertEqual(verdicts, [[True, False], [False, False]])
    # pass@1 = mean(1/2, 0); pass@2 = mean(1, 0); pass@3 not reported.
    self.assertEqual(res, {"pass@1": 0.25, "pass@2": 0.5})
    mb_ok = code_exec.mbpp_prediction(MBPP_ROW["code"] + "\n[DONE]")
    res, _ = code_exec.pass_at_k([[mb_ok], ["def remove_Occ(s, ch):\n  "
                                            "return s"]],
                                 [code_exec.mbpp_reference(MBPP_ROW)] * 2,
                                 run=self.pool.run_program)
    self.assertEqual(res, {"pass@1": 0.5})
    with self.assertRaisesRegex(ValueError, "1 candidate lists for 2"):
      code_exec.pass_at_k([[mb_ok]], ["a", "b"], run=self.pool.run_program)

  def test_program_kind_refuses_size(self):
    with self.assertRaisesRegex(ValueError, "no size"):
      self.pool.run_program("x = 1", size=(8, 8))
    with self.assertRaisesRegex(ValueError, "unknown run option"):
      self.pool.run_program("x = 1", colour="red")


if __name__ == "__main__":
  absltest.main()
