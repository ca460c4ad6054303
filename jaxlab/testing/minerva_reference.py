r"""lm-evaluation-harness's minerva_math scoring: the tests' reference.

A port of lm_eval/tasks/minerva_math/utils.py of lm-evaluation-harness
v0.4.8 (tag v0.4.8 = 6d2abda; the version DPad's requirements.txt pins at
461b36e): last_boxed_only_string, remove_boxed, normalize_final_answer,
get_unnormalized_answer, is_equiv, process_results, and the few-shot
context of lm_eval/api/samplers.py::ContextSampler.get_context (target " "
+ solution, then "\n\n"). `jaxlab.evals.minerva_math` is checked against
it (tests/evals/minerva_math_test.py) and the DPad real-run test scores its
saved MATH completions with it. The LaTeX parser of `ref_is_equiv` is an
argument (sympy's `parse_latex` needs the ANTLR 4.11 runtime).
"""

import re

import sympy


def ref_last_boxed_only_string(string):
  idx = string.rfind("\\boxed")
  if "\\boxed " in string:
    return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
  if idx < 0:
    idx = string.rfind("\\fbox")
    if idx < 0:
      return None
  i, right, depth = idx, None, 0
  while i < len(string):
    if string[i] == "{":
      depth += 1
    if string[i] == "}":
      depth -= 1
      if depth == 0:
        right = i
        break
    i += 1
  return None if right is None else string[idx:right + 1]


def ref_remove_boxed(s):
  if "\\boxed " in s:
    return s[len("\\boxed "):]
  left = "\\boxed{"
  assert s[:len(left)] == left and s[-1] == "}"
  return s[len(left):-1]


def ref_normalize_final_answer(final_answer):
  final_answer = final_answer.split("=")[-1]
  subs = [("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), (r"\ ", ""),
          (" ", ""), ("mbox", "text"), (",\\text{and}", ","),
          ("\\text{and}", ","), ("\\text{m}", "\\text{}")]
  removed = ["square", "ways", "integers", "dollars", "mph", "inches", "ft",
             "hours", "km", "units", "\\ldots", "sue", "points", "feet",
             "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds",
             "meters", "meals", "edges", "students", "childrentickets",
             "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
             "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}",
             r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;", r",\!", "{,}",
             '"', "\\dots"]
  for before, after in subs:
    final_answer = final_answer.replace(before, after)
  for expr in removed:
    final_answer = final_answer.replace(expr, "")
  final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
  final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
  final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
  final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
  final_answer = final_answer.replace("$", "")
  if final_answer.replace(",", "").isdigit():
    final_answer = final_answer.replace(",", "")
  return final_answer


def ref_get_unnormalized_answer(text):
  text += "I hope it is correct."
  match = re.search(
      r"Final Answer: The final answer is(.*?). I hope it is correct.", text)
  return match.group(1).strip() if match else "[invalidanswer]"


def ref_is_equiv(x1, x2, parse_latex):
  try:
    try:
      p1, p2 = parse_latex(x1), parse_latex(x2)
    except Exception:  # LaTeXParsingError, SympifyError, TypeError
      return False
    try:
      diff = p1 - p2
    except TypeError:
      return False
    try:
      return sympy.simplify(diff) == 0
    except ValueError:
      return None
  except Exception:  # the harness's outer handler
    return False


def ref_process_results(doc, results, parse_latex):
  from math_verify import parse, verify  # pylint: disable=g-import-not-at-top
  answer = ref_normalize_final_answer(
      ref_remove_boxed(ref_last_boxed_only_string(doc["solution"])))
  candidates = results[0]
  pred = ref_normalize_final_answer(ref_get_unnormalized_answer(candidates))
  return {"exact_match": 1 if ref_is_equiv(pred, answer, parse_latex) else 0,
          "math_verify": 1 if verify(parse(answer), parse(candidates)) else 0}


def ref_context(problem, shots):
  doc_to_text = lambda p: "Problem:" + "\n" + p + "\n\n" + "Solution:"
  labeled = ""
  for p, s in shots:
    labeled += doc_to_text(p) + " " + s + "\n\n"
  return labeled + doc_to_text(problem)
