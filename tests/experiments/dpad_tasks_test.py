"""`dpad:paper,short,task=...` on HumanEval- and MATH-layout copies.

Layouts as released (dataset cards): openai/openai_humaneval, config
`openai_humaneval`, `openai_humaneval/test-00000-of-00001.parquet`,
columns task_id, prompt, canonical_solution, test, entry_point;
EleutherAI/hendrycks_math, one config per subject (`algebra/test-00000-
of-00001.parquet`, ...), columns problem, level, type, solution. The tiny
LLaDA checkpoint is `jaxlab.testing.diffusion_fixtures.make_llada`. The
reported metrics are recomputed from the saved completions with the
harness's scorers ported in jaxlab/testing/{code_eval_reference,
minerva_reference}.py (lm-evaluation-harness v0.4.8, code_eval, DPad's
sanitize).
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import datasets
import numpy as np

from jaxlab import main
from jaxlab.configs import dpad as dpad_cfg
from jaxlab.data import hf_tokenizer
from jaxlab.evals import minerva_math
from jaxlab.experiments import dpad
from jaxlab.io import pretrained
from jaxlab.testing import diffusion_fixtures
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import tokenizer_fixtures
from jaxlab.testing.code_eval_reference import (  # pylint: disable=g-importing-member
    RefHumanEval, ref_passed, ref_sanitize)
from jaxlab.testing.minerva_reference import ref_process_results  # pylint: disable=g-importing-member

HUMANEVAL = [
    {"task_id": "HumanEval/0",
     "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Sum of a and b.\"\"\"\n",
     "canonical_solution": "    return a + b\n",
     "test": "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n",
     "entry_point": "add"},
    {"task_id": "HumanEval/1",
     "prompt": "def evens(xs: list) -> list:\n    \"\"\"Even items.\"\"\"\n",
     "canonical_solution": "    return [x for x in xs if x % 2 == 0]\n",
     "test": "\n\ndef check(candidate):\n    assert candidate([1, 2]) == [2]\n",
     "entry_point": "evens"},
    {"task_id": "HumanEval/2",
     "prompt": "def is_pal(s: str) -> bool:\n    \"\"\"Palindrome?\"\"\"\n",
     "canonical_solution": "    return s == s[::-1]\n",
     "test": "\n\ndef check(candidate):\n    assert candidate('aba')\n    "
             "assert not candidate('ab')\n",
     "entry_point": "is_pal"},
]
HUMANEVAL_README = """---
configs:
- config_name: openai_humaneval
  data_files:
  - split: test
    path: openai_humaneval/test-*
---
# openai_humaneval (a test copy in the released layout)
"""
MBPP = [   # google-research-datasets/mbpp, config `full`
    {"task_id": 11, "text": "Write a function to double a number.",
     "code": "def double(x):\r\n  return 2 * x",
     "test_list": ["assert double(1) == 2", "assert double(0) == 0",
                   "assert double(-3) == -6"],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 12, "text": "Write a function to negate a number.",
     "code": "def neg(x):\r\n  return -x",
     "test_list": ["assert neg(1) == -1", "assert neg(0) == 0",
                   "assert neg(-3) == 3"],
     "test_setup_code": "", "challenge_test_list": []},
]
MBPP_README = """---
configs:
- config_name: full
  data_files:
  - split: test
    path: full/test-*
---
# mbpp (a test copy in the released layout)
"""
MATH = {
    "algebra": [
        {"problem": "Solve $2x = 1$.", "level": "Level 1", "type": "Algebra",
         "solution": "Dividing, $x = \\boxed{\\frac{1}{2}}$."},
        {"problem": "What is $3 + 3$?", "level": "Level 1",
         "type": "Algebra", "solution": "$3+3=\\boxed{6}$."}],
    "prealgebra": [
        {"problem": "What is $2 \\cdot 3$?", "level": "Level 1",
         "type": "Prealgebra", "solution": "It is $\\boxed{6}$."}],
}
MATH_README = """---
configs:
- config_name: algebra
  data_files:
  - split: test
    path: algebra/test-*
- config_name: prealgebra
  data_files:
  - split: test
    path: prealgebra/test-*
---
# hendrycks_math (a test copy in the released layout)
"""


class DpadTasksTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = staticmethod(hfx.inductor_cleanup())
    cls.root = tempfile.mkdtemp()
    cls.he = os.path.join(cls.root, "humaneval")
    os.makedirs(os.path.join(cls.he, "openai_humaneval"))
    with open(os.path.join(cls.he, "README.md"), "w") as f:
      f.write(HUMANEVAL_README)
    datasets.Dataset.from_list(HUMANEVAL).to_parquet(os.path.join(
        cls.he, "openai_humaneval", "test-00000-of-00001.parquet"))
    cls.math = os.path.join(cls.root, "math")
    for subset, rows in MATH.items():
      os.makedirs(os.path.join(cls.math, subset))
      datasets.Dataset.from_list(rows).to_parquet(os.path.join(
          cls.math, subset, "test-00000-of-00001.parquet"))
    with open(os.path.join(cls.math, "README.md"), "w") as f:
      f.write(MATH_README)
    cls.mbpp = os.path.join(cls.root, "mbpp")
    os.makedirs(os.path.join(cls.mbpp, "full"))
    with open(os.path.join(cls.mbpp, "README.md"), "w") as f:
      f.write(MBPP_README)
    datasets.Dataset.from_list(MBPP).to_parquet(os.path.join(
        cls.mbpp, "full", "test-00000-of-00001.parquet"))
    tok_dir = tokenizer_fixtures.make_hf_tokenizer(
        os.path.join(cls.root, "tok"))
    cls.eos = hf_tokenizer.HFTokenizer(tok_dir).eos_id
    cls.llada = diffusion_fixtures.make_llada(
        os.path.join(cls.root, "llada"), cls.eos)
    cls.dream = diffusion_fixtures.make_dream(
        os.path.join(cls.root, "dream"), cls.eos)
    cls.env = mock.patch.dict(os.environ, {
        "MPLCONFIGDIR": os.path.join(cls.root, "mpl")})
    cls.env.start()

  @classmethod
  def tearDownClass(cls):
    cls.env.stop()
    shutil.rmtree(cls.root, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  def _config(self, task, path, model="llada", **eval_kw):
    c = dpad_cfg.get_config(f"paper,short,task={task},model={model}")
    c.init_from = self.dream if model == "dream" else self.llada
    c.data.path = path
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    c.decode.update(gen_lens=(32,), block_len=16, batch=3, dtype="float32")
    c.decode.dpad.window = 16
    c.eval.update(**eval_kw)
    return c

  def _fake_decode(self, chosen):
    tok = pretrained.tokenizer(self.llada)

    def fake(model, prompts, *, gen_len, **kwargs):
      del model, kwargs
      self.assertLen(prompts, len(chosen))
      # Rows as long as the chosen texts need (past gen_len: the scoring,
      # not the decoder, is under test here).
      rows = [tok.encode(t) + [self.eos] * gen_len for t in chosen]
      width = max(len(r) for r in rows)
      rows = [r + [self.eos] * (width - len(r)) for r in rows]
      return (np.array(rows, np.int32),
              {"latency_s": 0.5, "nfe": 7.0, "tokens_processed": 1.0,
               "flops": 1.0, "compile_s": 0.0})
    return mock.patch.object(dpad.diffusion_decode, "decode_prompts", fake)

  def _assert_math_scored_as_the_harness(self, res, wd):
    """The run's per-variant exact_match / math_verify equal the harness's
    `process_results` (ported) on its saved completions, in row order;
    returns the per-variant metrics."""
    with open(os.path.join(wd, "completions.jsonl")) as f:
      records = [json.loads(line) for line in f]
    rows = MATH["algebra"] + MATH["prealgebra"]
    self.assertEqual([x["problem"] for x in records],
                     [r["problem"] for r in rows])
    _, parse = minerva_math._parser()  # pylint: disable=protected-access
    for name, m in res["per_seed"][0]["decode"]["32"].items():
      texts = [x["completions"][f"seed0/32/{name}"] for x in records]
      for key in ("exact_match", "math_verify"):
        want = np.mean([ref_process_results(r, [t], parse)[key]
                        for r, t in zip(rows, texts)])
        self.assertAlmostEqual(m[key], want, msg=(name, key))
      self.assertBetween(m["nfe"], 1.0, 32.0)
    return res["per_seed"][0]["decode"]["32"]

  def test_humaneval_through_main(self):
    """`jaxlab.main.run_experiment` on `dpad:paper,short,task=humaneval`
    (in process: the `python -m jaxlab.main` boundary and its overrides
    are tested in tests/experiments/main_test.py)."""
    wd = os.path.join(self.root, "he_main")
    c = self._config("humaneval", self.he, code_postprocess="harness")
    c.decode.variants = ("vanilla", "+threshold+DPad")
    main.run_experiment(c, wd)
    with open(os.path.join(wd, "results.json")) as f:
      saved = json.load(f)
    self.assertEqual(saved["data"]["rows"], {"test": 3})
    self.assertEqual((saved["data"]["path"], saved["data"]["subset"]),
                     (self.he, "openai_humaneval"))
    with open(os.path.join(wd, "completions.jsonl")) as f:
      records = [json.loads(line) for line in f]
    self.assertEqual([x["task_id"] for x in records],
                     [x["task_id"] for x in HUMANEVAL])
    metrics = saved["extra"]["per_seed"][0]["decode"]["32"]
    self.assertEqual(list(metrics), ["vanilla", "+threshold+DPad"])
    for name, m in metrics.items():
      texts = [x["completions"][f"seed0/32/{name}"] for x in records]
      want = np.mean([ref_passed(
          RefHumanEval.build_predictions(
              [[RefHumanEval.generate_until(t)]], [row])[0][0],
          RefHumanEval.doc_to_target(row)) for t, row in zip(texts, HUMANEVAL)])
      self.assertAlmostEqual(m["pass_at_1"], want, msg=name)
      self.assertGreater(m["latency_s"], 0.0)
      self.assertBetween(m["nfe"], 1.0, 32.0)
    self.assertEqual(metrics["vanilla"]["nfe"], 32.0)

  def test_humaneval_pass_at_1_on_chosen_completions(self):
    harness = ["    return a + b\n\ndef junk():\n    pass",
               "    return xs\n",
               "    return s == s[::-1]\nprint('x')"]
    # One variant: the fake decode gives every variant the same texts, so
    # each further one only re-ran the same programs (and is_pal's 1 s
    # timeout below) in the sandbox.
    c = self._config("humaneval", self.he, code_postprocess="harness")
    c.decode.variants = ("vanilla",)
    with self._fake_decode(harness):
      res = dpad.run(c, os.path.join(self.root, "he_harness"))
    m = res["per_seed"][0]["decode"]["32"]["vanilla"]
    # By hand: add and is_pal pass (cut at "\ndef" / "\nprint"), evens not.
    self.assertAlmostEqual(m["pass_at_1"], 2 / 3)
    dpad_style = ["Here:\n```python\ndef add(a, b):\n    return a + b\n```",
                  "```python\ndef evens(xs):\n    return xs\n```",
                  "def is_pal(s):\n    while True:\n        pass\n    return 1"]
    c = self._config("humaneval", self.he, timeout_s=1.0)
    c.decode.variants = ("vanilla",)
    with self._fake_decode(dpad_style):
      res = dpad.run(c, os.path.join(self.root, "he_dpad"))
    self.assertEqual(res["task"], "humaneval")
    self.assertTrue(res["chat_template"])
    m = res["per_seed"][0]["decode"]["32"]["vanilla"]
    # DPad's sanitize keeps the completion's add; evens is wrong; is_pal
    # loops past the 1 s limit.
    self.assertAlmostEqual(m["pass_at_1"], 1 / 3)
    with open(os.path.join(self.root, "he_dpad", "completions.jsonl")) as f:
      records = [json.loads(line) for line in f]
    want = []
    for x, row in zip(records, HUMANEVAL):
      t = x["completions"]["seed0/32/vanilla"]
      body = t.split("```python\n", 1)[-1].split("```")[0]
      prog = ref_sanitize(row["prompt"] + "\n" + body, row["entry_point"])
      want.append(ref_passed(prog, RefHumanEval.doc_to_target(row),
                             timeout=1.0))
    self.assertEqual(want, [True, False, False])
    self.assertEqual([x["scores"]["seed0/32/vanilla"]["pass_at_1"]
                      for x in records], [1.0, 0.0, 0.0])

  def test_mbpp_pass_at_1_on_chosen_completions(self):
    chosen = ["def double(x):\n  return 2 * x\n[DONE]\n\nYou are an expert",
              "def neg(x):\n  return x\n[DONE]"]
    c = self._config("mbpp", self.mbpp)
    c.decode.variants = ("vanilla",)
    wd = os.path.join(self.root, "mbpp_chosen")
    with self._fake_decode(chosen):
      res = dpad.run(c, wd)
    with open(os.path.join(wd, "results.json")) as f:
      self.assertEqual(json.load(f)["data"]["rows"], {"test": 2})
    self.assertEqual(res["num_fewshot"], 3)
    # By hand: double passes its three asserts (cut at "[DONE]"), neg not.
    m = res["per_seed"][0]["decode"]["32"]["vanilla"]
    self.assertAlmostEqual(m["pass_at_1"], 0.5)
    with open(os.path.join(wd, "completions.jsonl")) as f:
      texts = [json.loads(line)["completions"]["seed0/32/vanilla"]
               for line in f]
    self.assertEqual([ref_passed(t, "\n".join(r["test_list"][:3]))
                      for t, r in zip(texts, MBPP)], [True, False])

  def test_math_decodes_and_scores_as_the_harness(self):
    c = self._config("minerva_math", self.math)
    c.data.subset = "algebra,prealgebra"
    c.decode.variants = ("vanilla", "+threshold+DPad")
    # 1-shot: the 4-shot context (~1500 tiny-tokenizer ids) exceeds the tiny
    # checkpoint's 512 positions; the 4-shot text is checked in
    # tests/evals/minerva_math_test.py.
    c.eval.num_fewshot = 1
    wd = os.path.join(self.root, "math_run")
    res = dpad.run(c, wd)
    with open(os.path.join(wd, "results.json")) as f:
      saved = json.load(f)
    self.assertEqual(saved["data"]["rows"], {"test": 3})
    self.assertEqual(res["num_fewshot"], 1)
    self._assert_math_scored_as_the_harness(res, wd)

  def test_dream_task_path_decodes_and_scores_as_the_harness(self):
    """`dpad:paper,short,task=minerva_math,model=dream` on a tiny Dream."""
    c = self._config("minerva_math", self.math, model="dream")
    self.assertFalse(c.eval.chat_template)  # dream/eval.py: plain prompts
    c.data.subset = "algebra,prealgebra"
    c.decode.variants = ("vanilla", "+threshold+DPad")
    c.eval.num_fewshot = 1  # the tiny checkpoint's 512 positions
    wd = os.path.join(self.root, "dream_math_run")
    res = dpad.run(c, wd)
    for name, m in self._assert_math_scored_as_the_harness(res, wd).items():
      if name == "vanilla":
        # Dream's loop (schedule "dream"): steps per block - 1 forwards a
        # block, one token a step by default (steps = gen_len).
        gen, blk = c.decode.gen_lens[0], c.decode.block_len
        self.assertEqual(c.decode.schedule, "dream")
        self.assertEqual(m["nfe"], (gen // blk) * (blk - 1))

  def test_math_on_chosen_completions(self):
    chosen = ["Final Answer: The final answer is $\\frac{1}{2}$. I hope it "
              "is correct.\n\nProblem: next",
              "So it is $\\boxed{6}$.",
              "Final Answer: The final answer is $5$. I hope it is correct."]
    c = self._config("minerva_math", self.math)
    c.data.subset = "algebra,prealgebra"
    c.decode.variants = ("vanilla",)
    with self._fake_decode(chosen):
      res = dpad.run(c, os.path.join(self.root, "math_chosen"))
    m = res["per_seed"][0]["decode"]["32"]["vanilla"]
    # By hand: row 0 right under both; row 1 (boxed 6, no "Final Answer")
    # only under math-verify; row 2 wrong.
    self.assertAlmostEqual(m["exact_match"], 1 / 3)
    self.assertAlmostEqual(m["math_verify"], 2 / 3)

  def test_errors_are_named(self):
    c = self._config("humaneval", self.math)
    c.data.subset = "algebra"
    with self.assertRaisesRegex(ValueError, "HumanEval .* need columns"):
      dpad.run(c, os.path.join(self.root, "bad"))
    c = self._config("humaneval", self.he)
    c.eval.task = "arc"
    with self.assertRaisesRegex(ValueError, "config.eval.task='arc'"):
      dpad.run(c, os.path.join(self.root, "bad2"))
    with self.assertRaisesRegex(ValueError, "unknown task='arc'"):
      dpad_cfg.get_config("paper,task=arc")
    with self.assertRaisesRegex(ValueError, "unknown model='mistral'"):
      dpad_cfg.get_config("paper,task=gsm8k,model=mistral")
    with self.assertRaisesRegex(ValueError, "use it with `paper`"):
      dpad_cfg.get_config("tiny,model=dream")


class DpadPresetsTest(absltest.TestCase):
  """The paper presets against DPad's scripts (Sitaoooo/DPad at 44c7b5b)."""

  def test_dream_presets_are_main_base_sh(self):
    # dream/scripts/main_base.sh, "+DPad" lines: (-s, -l, -w, -k, -sc).
    want = {"gsm8k": (4, 256, 256, 4.0, 1.6),
            "minerva_math": (4, 256, 128, 4.0, 1.6),
            "humaneval": (0, 512, 128, 3.0, 2.3),
            "mbpp": (3, 512, 128, 3.0, 1.6)}
    for task, (shots, gen_len, w, k, a) in want.items():
      c = dpad_cfg.get_config(f"paper,task={task},model=dream")
      # dream/run.py: -m=base is Dream-org/Dream-v0-Base-7B (instruct is
      # refused); eval.py apply_chat_template defaults to False.
      self.assertEqual(c.init_from, "Dream-org/Dream-v0-Base-7B")
      self.assertFalse(c.eval.chat_template)
      self.assertEqual((c.eval.task, c.eval.num_fewshot, c.decode.gen_lens,
                        c.decode.block_len, c.decode.threshold),
                       (task, shots, (gen_len,), 32, 0.9))
      self.assertEqual((c.decode.dpad.window, c.decode.dpad.k,
                        c.decode.dpad.a), (w, k, a), task)
    # long_seq.sh: gsm8k -s=1 -l=1024 -w=128 -k=3 -sc=2.3.
    c = dpad_cfg.get_config("paper,model=dream")
    self.assertEqual((c.init_from, c.eval.num_fewshot, c.decode.gen_lens,
                      c.decode.dpad.window, c.decode.dpad.k, c.decode.dpad.a),
                     ("Dream-org/Dream-v0-Base-7B", 1, (1024,), 128, 3.0, 2.3))

  def test_llada_presets_unchanged(self):
    # llada/scripts/main_instruct.sh "+DPad" lines: (-w, -k, -sc).
    want = {"gsm8k": (256, 4.0, 2.0), "minerva_math": (256, 4.0, 2.0),
            "humaneval": (512, 3.0, 2.3), "mbpp": (128, 3.0, 2.3)}
    for task, (w, k, a) in want.items():
      for arg in (f"paper,task={task}", f"paper,task={task},model=llada"):
        c = dpad_cfg.get_config(arg)
        self.assertEqual(c.init_from, "GSAI-ML/LLaDA-8B-Instruct")
        self.assertTrue(c.eval.chat_template)
        self.assertEqual((c.decode.dpad.window, c.decode.dpad.k,
                          c.decode.dpad.a), (w, k, a))
    c = dpad_cfg.get_config("paper")
    self.assertEqual((c.decode.dpad.window, c.decode.dpad.k,
                      c.decode.dpad.a), (256, 3.0, 1.6))


if __name__ == "__main__":
  absltest.main()
