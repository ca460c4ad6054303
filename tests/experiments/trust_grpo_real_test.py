"""trust_grpo:paper,short on SophiaVL-R1's and MathVista's released layouts.

References ported here (the test's own copies, not jaxlab's):

* MathVista's scoring, github.com/lupantech/MathVista commit 53d5258
  (53d525874bdde205128e6b160b7357a88277d479): `evaluation/extract_answer.py`
  `extract_answer` (its rule part, `quick_extract=True`; the GPT step is
  never reached on these replies) and `evaluation/calculate_score.py`
  `get_most_similar`, `normalize_extracted_answer`, `safe_equal`
  (`Levenshtein.distance` is rapidfuzz's, the same edit distance).
* SophiaVL-R1, github.com/kxfan2002/SophiaVL-R1 commit a818494:
  `verl/workers/reward/custom.py` (`extract_*`, `extract_score`, the
  `get_process_reward` prompt) and `verl/utils/reward_score/math.py`
  (`math_format_reward`, `choices_compute_score`).

The e2e run: a tiny random Qwen2.5-VL checkpoint (policy) and a second one
(the thinking reward model) as transformers saves them
(`jaxlab.testing.vl_fixtures`), four training rows (one text-only) in
SophiaVL-R1's layout (verl/data/demo.json, scripts/inference_single.py's
example row: problem_id, problem, data_type, problem_type, options,
process, solution, path, data_source; images under the dataset root) and
three MathVista rows in its Hub layout (README "Data Format": pid,
question, image, decoded_image, choices, unit, precision, answer,
question_type, answer_type, metadata, query; data/testmini-*.parquet).
"""

import json
import math
import os
import re
import shutil
import tempfile
import types

from absl.testing import absltest
from flax import nnx
import jax.numpy as jnp
import numpy as np
from rapidfuzz.distance import Levenshtein

from jaxlab.configs import trust_grpo as tg_config
from jaxlab.data import sophiavl as sophiavl_data
from jaxlab.evals import mathvista
from jaxlab.evals import vl_chat
from jaxlab.experiments.trust_grpo import real as tg_real
from jaxlab.models import qwen2_vl
from jaxlab.models import qwen2_vl_prefix
from jaxlab.rewards import sophiavl
from jaxlab.rewards import trust_variants
from jaxlab.testing import hf_fixtures
from jaxlab.testing import vl_fixtures

# ---------------------------------------------------------------------------
# MathVista's scorer (the reference), ported.
# ---------------------------------------------------------------------------


def ref_extract_answer(response, problem):
  question_type = problem["question_type"]
  answer_type = problem["answer_type"]
  choices = problem["choices"]
  if response == "":
    return ""
  if question_type == "multi_choice" and response in choices:
    return response
  if answer_type == "integer":
    try:
      extraction = int(response)
      return str(extraction)
    except Exception:  # pylint: disable=broad-except
      pass
  if answer_type == "float":
    try:
      extraction = str(float(response))
      return extraction
    except Exception:  # pylint: disable=broad-except
      pass
  # quick extraction
  try:
    result = re.search(r'The answer is "(.*)"\.', response)
    if result:
      extraction = result.group(1)
      return extraction
  except Exception:  # pylint: disable=broad-except
    pass
  return response  # (the GPT extraction's place)


def ref_get_most_similar(prediction, choices):
  distances = [Levenshtein.distance(prediction, choice) for choice in choices]
  ind = distances.index(min(distances))
  return choices[ind]


def ref_normalize_extracted_answer(extraction, choices, question_type,
                                   answer_type, precision):
  if question_type == "multi_choice":
    if isinstance(extraction, str):
      extraction = extraction.strip()
    else:
      try:
        extraction = str(extraction)
      except Exception:  # pylint: disable=broad-except
        extraction = ""
    letter = re.findall(r"\(([a-zA-Z])\)", extraction)
    if len(letter) > 0:
      extraction = letter[0].upper()
    sequential_characters = [chr(ord("A") + i) for i in range(len(choices))]
    if extraction in sequential_characters:
      option_index = sequential_characters.index(extraction)
      normalized_extraction = choices[option_index]
    else:
      normalized_extraction = ref_get_most_similar(extraction, choices)
    assert normalized_extraction in choices
  elif answer_type == "integer":
    try:
      normalized_extraction = str(int(float(extraction)))
    except Exception:  # pylint: disable=broad-except
      normalized_extraction = None
  elif answer_type == "float":
    try:
      normalized_extraction = str(round(float(extraction), int(precision)))
    except Exception:  # pylint: disable=broad-except
      normalized_extraction = None
  elif answer_type == "list":
    try:
      normalized_extraction = str(extraction)
    except Exception:  # pylint: disable=broad-except
      normalized_extraction = None
  return normalized_extraction


def ref_safe_equal(prediction, answer):
  try:
    if prediction == answer:
      return True
    return False
  except Exception:  # pylint: disable=broad-except
    return False


def ref_true_false(reply, problem):
  """The reply's `<answer>` content (SophiaVL-R1's format) through
  MathVista's extraction, normalisation and comparison."""
  m = re.findall(r"<answer>(.*?)</answer>", reply, re.DOTALL)
  response = (m[-1] if m else reply).strip()
  extraction = ref_extract_answer(response, problem)
  prediction = ref_normalize_extracted_answer(
      extraction, problem["choices"], problem["question_type"],
      problem["answer_type"], problem["precision"])
  return ref_safe_equal(prediction, problem["answer"])


# ---------------------------------------------------------------------------
# SophiaVL-R1's score parsing and choice score (the reference), ported.
# ---------------------------------------------------------------------------


def ref_extract_after_think_number(text):
  match = re.search(r"</think>\s*<answer>\s*([\d.]+)\s*</answer>", text)
  if match:
    number_str = match.group(1)
    return int(number_str) if number_str.isdigit() else float(number_str)
  match = re.search(r"</think>\s*([\d.]+)", text)
  if match:
    number_str = match.group(1)
    return int(number_str) if number_str.isdigit() else float(number_str)
  return None


def ref_extract_zero_wrong_steps(text):
  match = re.search(r"\*\*(\d+)\s+wrong steps\*\*", text)
  return int(match.group(1)) if match else None


def ref_extract_box_score(text):
  match = re.search(r"\\box(?:es)?\{([01](?:\.\d)?)\}", text)
  return float(match.group(1)) if match else None


def ref_extract_total_wrong_steps(text):
  match = re.search(r"Total Wrong Steps\*\*:\s*(\d+)", text)
  return int(match.group(1)) if match else None


def ref_extract_xml_answer(text):
  match = re.search(r"<answer>\s*([01](?:\.\d)?)\s*</answer>", text)
  return float(match.group(1)) if match else None


def ref_extract_plain_number(text):
  match = re.search(r"\b([01](?:\.\d)?)\b", text)
  return float(match.group(1)) if match else None


def ref_extract_wrong_steps(text):
  match = re.search(r"\*\*.*?\bWrong Steps\*\*:\s*(\d+)", text)
  return int(match.group(1)) if match else None


def ref_extract_score(text):
  for extractor in [ref_extract_box_score, ref_extract_xml_answer,
                    ref_extract_plain_number, ref_extract_after_think_number,
                    ref_extract_total_wrong_steps,
                    ref_extract_zero_wrong_steps, ref_extract_wrong_steps]:
    score = extractor(text)
    if score is not None:
      if score > 1:
        score = 1
      elif score < 0:
        score = 0
      return score
  return 0


def ref_math_format_reward(predict_str):
  pattern = re.compile(r"<think>(.*?)</think>.*<answer>(.*?)</answer>.*",
                       re.DOTALL)
  return 1.0 if re.fullmatch(pattern, predict_str) else 0.0


def ref_choices_compute_score(predict, ground_truth):
  if ref_math_format_reward(predict):
    match = re.search(r"<answer>(.*?)</answer>", predict, re.DOTALL)
    predict_str_strip = match.group(1) if match else predict
    if predict == "":
      return 0.0
    answer = [a.strip() for a in predict_str_strip.split(",")]
    if len(answer) != len(ground_truth):
      return 0.0
    for a in answer:
      if a not in ground_truth:
        return 0.0
    return 1.0
  return 0.0


def ref_trm_prompt(prompt_str, reasoning_str, image):
  if image is not None and "<image>" not in prompt_str:
    prompt_str = f"<image> {prompt_str}"
  prompt = f"""You are an expert reasoning evaluator. I will give you a multimodal question and an answer. Your goal is to judge a reward process and give a score between 0 and 1. You should focus on whether the reasoning process is good rather than whether the final answer is correct.### Evaluation Criteria:\n- **Logical Soundness**: Does each step follow logically from the previous one?\n- **Correct Reasoning**: Are the methods and steps used appropriate and valid? Are the facts and lemmas correctly stated and applied?\n- **Error Identification**: Are there any logical fallacies, unsupported assumptions, or incorrect steps?\n- **Language Consistency**: Is the reasoning process conducted in a single, consistent language without mixing different languages?\n- **Redundancy**: Is the reasoning concise, without unnecessary repetition or extraneous steps?\nProvide a single score from **{{0, 0.1, 0.2, ..., 1.0}}** based on the reasoning quality, where:\n - **0**: Completely flawed reasoning\n- **1**: Perfectly sound reasoning\n- Intermediate values (e.g., 0.3, 0.7) should reflect partial correctness or minor errors.\nBe strict, reward the good process and punish the bad one. You should only output the score without any explanation.
    Question: {prompt_str}
    Reasoning process: {reasoning_str}
    Your response format: <answer>your_score</answer>
    """  # noqa: E501  (the released f-string, verbatim)
  return prompt


# ---------------------------------------------------------------------------
# Rows in the released layouts.
# ---------------------------------------------------------------------------

MV_ROWS = [
    dict(pid="1", question="Which shape is red?",
         choices=["circle", "square", "triangle"], unit=None, precision=None,
         answer="square", question_type="multi_choice", answer_type="text",
         query="Hint: Please answer the question and provide the correct "
               "option letter, e.g., A, B, C, D, at the end.\nQuestion: "
               "Which shape is red?\nChoices:\n(A) circle\n(B) square\n"
               "(C) triangle"),
    dict(pid="2", question="How many dots are there?", choices=None,
         unit=None, precision=None, answer="3", question_type="free_form",
         answer_type="integer",
         query="Hint: Please answer the question requiring an integer "
               "answer and provide the final value, e.g., 1, 2, 3, at the "
               "end.\nQuestion: How many dots are there?"),
    dict(pid="3", question="What is the length of the bar?", choices=None,
         unit="cm", precision=1.0, answer="2.5", question_type="free_form",
         answer_type="float",
         query="Hint: Please answer the question requiring a floating-point "
               "number with one decimal place and provide the final value, "
               "e.g., 1.2, 1.3, 1.4, at the end.\nQuestion: What is the "
               "length of the bar?"),
]
REPLIES = [
    "<think>red is the square</think><answer>B</answer>",
    "<think>hmm</think><answer>(B) square</answer>",
    "<think>hmm</think><answer>squar</answer>",
    "<answer>circle</answer>",
    "The answer is \"triangle\".",
    "<think>three</think><answer>3</answer>",
    "<think>three</think><answer>3.0</answer>",
    "<think>x</think><answer>three</answer>",
    "<answer>2.50</answer>",
    "<answer>2.46</answer>",
    "<answer>2.54</answer>",
    "2.5",
    "",
    "<answer></answer>",
]


def _image(seed, size=56):
  rng = np.random.default_rng(seed)
  return (rng.random((size, size, 3)) * 255).astype(np.uint8)


def write_sophiavl(root):
  """Four rows as SophiaVL-R1's JSON files hold them, images under root."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rows = []
  kinds = [("numerical", [], "<answer>5</answer>"),
           ("multiple choice", ["A. 3", "B. 4", "C. 5"], "<answer>B</answer>"),
           ("numerical", [], "<answer>2.5</answer>")]
  for i, (ptype, options, solution) in enumerate(kinds):
    rel = f"./Math/CLEVR-Math/images/CLEVR_train_{i:06d}.png"
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(_image(i, 64 + 8 * i)).save(path)
    rows.append({"problem_id": i + 1,
                 "problem": f"Subtract {i} cyan cubes. How many objects "
                            "are left?",
                 "data_type": "image", "problem_type": ptype,
                 "options": options, "process": "", "solution": solution,
                 "path": rel, "data_source": "CLEVR-Math"})
  # A text-only row (data_type "text", no image): read, not trained on.
  rows.append(dict(rows[0], problem_id=4, data_type="text", path="",
                   problem="What is 2 + 3?"))
  with open(os.path.join(root, "math.json"), "w") as f:
    json.dump(rows, f, indent=1)
  return rows


def write_mathvista(root):
  """MathVista's three rows as the Hub's testmini parquet."""
  import datasets  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
  cols = {k: [r[k] for r in MV_ROWS] for k in MV_ROWS[0]}
  cols["image"] = [f"images/{r['pid']}.jpg" for r in MV_ROWS]
  cols["decoded_image"] = [Image.fromarray(_image(10 + i, 48 + 8 * i))
                           for i in range(len(MV_ROWS))]
  cols["metadata"] = [{"split": "testmini", "language": "english",
                       "img_width": 56, "img_height": 56,
                       "source": "fixture", "category": "math-targeted-vqa",
                       "task": "figure question answering",
                       "context": "synthetic scene", "grade": "elementary "
                       "school", "skills": ["arithmetic reasoning"]}
                      for _ in MV_ROWS]
  feats = datasets.Features({
      "pid": datasets.Value("string"), "question": datasets.Value("string"),
      "image": datasets.Value("string"), "decoded_image": datasets.Image(),
      "choices": datasets.Sequence(datasets.Value("string")),
      "unit": datasets.Value("string"),
      "precision": datasets.Value("float64"),
      "answer": datasets.Value("string"),
      "question_type": datasets.Value("string"),
      "answer_type": datasets.Value("string"),
      "metadata": {"split": datasets.Value("string"),
                   "language": datasets.Value("string"),
                   "img_width": datasets.Value("int64"),
                   "img_height": datasets.Value("int64"),
                   "source": datasets.Value("string"),
                   "category": datasets.Value("string"),
                   "task": datasets.Value("string"),
                   "context": datasets.Value("string"),
                   "grade": datasets.Value("string"),
                   "skills": datasets.Sequence(datasets.Value("string"))},
      "query": datasets.Value("string")})
  os.makedirs(os.path.join(root, "data"))
  datasets.Dataset.from_dict(cols, features=feats).to_parquet(
      os.path.join(root, "data", "testmini-00000-of-00001.parquet"))


class ScorerParityTest(absltest.TestCase):

  def test_mathvista_matching_equals_mathvista(self):
    n_true = 0
    for row in MV_ROWS:
      for reply in REPLIES:
        want = ref_true_false(reply, dict(row))
        self.assertEqual(mathvista.is_correct(reply, row), want,
                         (row["pid"], reply))
        n_true += want
    # Letters, "(B) text", near-miss text, ints, rounding: both verdicts.
    self.assertGreaterEqual(n_true, 7)
    self.assertLess(n_true, len(MV_ROWS) * len(REPLIES) - 10)
    self.assertAlmostEqual(
        mathvista.accuracy(REPLIES[:3], MV_ROWS), 1 / 3)

  def test_trm_score_parsing_equals_sophiavl(self):
    texts = ["<answer>0.7</answer>", "<answer> 1.0 </answer>", "0.3",
             "\\boxed{0.9}", "\\box{1}", "score: 0.45 hmm", "I give 7",
             "</think> <answer>5</answer>", "</think> 0.8", "no score",
             "**Total Wrong Steps**: 2", "**3 wrong steps**",
             "**Some Wrong Steps**: 4", "<answer>0.2</answer> then 1",
             "value 1.5 here", "1.0.1", ""]
    for t in texts:
      self.assertEqual(sophiavl.extract_score(t), ref_extract_score(t), t)

  def test_trm_prompt_and_choice_score_equal_sophiavl(self):
    for image in (None, "png"):
      self.assertEqual(
          sophiavl.trm_prompt("system\nQ?", "<think>a</think>",
                              has_image=image is not None),
          ref_trm_prompt("system\nQ?", "<think>a</think>", image))
    for reply in ("<think>x</think><answer>B</answer>",
                  "<think>x</think><answer>A,B</answer>",
                  "<think>x</think><answer> B </answer>",
                  "<answer>B</answer>", "<think>x</think><answer>C</answer>",
                  "<think>x</think>so<answer>B</answer>."):
      for truth in ("B", "A,B", "AB"):
        self.assertEqual(sophiavl.choices_score(reply, truth),
                         ref_choices_compute_score(reply, truth),
                         (reply, truth))
    self.assertEqual(sophiavl.outcome_score(
        "<think>t</think><answer>$5$</answer>", "<answer>5</answer>",
        "numerical"), 1.0)
    self.assertEqual(sophiavl.outcome_score(
        "<think>t</think><answer>5.0</answer>", "<answer>5</answer>",
        "numerical"), 1.0)
    self.assertEqual(sophiavl.outcome_score(
        "<answer>5</answer>", "<answer>5</answer>", "numerical"), 0.0)


class TrustRewardTest(absltest.TestCase):
  """`real.TrustReward` on hand-made groups with a stub TRM."""

  def _reward(self, variant):
    rows = [{"solution": "<answer>5</answer>", "problem_type": "numerical"},
            {"solution": "<answer>B</answer>",
             "problem_type": "multiple choice"}]
    tok = types.SimpleNamespace(decode=lambda c, **_: c)
    trm = types.SimpleNamespace(calls=[])

    def scores(prompt_strs, replies, images):
      trm.calls.extend(zip(prompt_strs, replies, images))
      return np.asarray([0.9 if "good" in r else 0.2 for r in replies])
    trm.scores = scores
    prompts = types.SimpleNamespace(prompt_str=lambda i: f"p{i}")
    trust = trust_variants.trust_config(
        variant, types.SimpleNamespace(alpha=0.3, anneal_T=0.0))
    return tg_real.TrustReward(rows, prompts, lambda i: f"im{i}", tok, trm,
                               trust, total_steps=4), trm

  COMPLETIONS = [
      # row 0: right answer with good thinking, wrong with good thinking
      "<think>good</think><answer>5</answer>",
      "<think>good</think><answer>4</answer>",
      # row 0: right with bad thinking, wrong with good: gamma < 1
      "<think>bad</think><answer>$5$</answer>",
      "<think>good</think><answer>4</answer>",
      # row 1: both wrong (a saturated group)
      "<think>good</think><answer>A</answer>",
      "<think>bad</think><answer>C</answer>",
  ]

  def test_paper_reading(self):
    reward, trm = self._reward("trust")
    r, m = reward.from_fields(completions=self.COMPLETIONS,
                              row=[0, 0, 0, 0, 1, 1], step=1, group_size=2)
    w = 0.3 * math.exp(-1 / 4)            # alpha exp(-t / T), T = steps
    g = math.exp(0.2 - 0.9)               # mu_c - mu_w of group 2
    want = [1 + w * 0.9, w * 0.9, 1 + g * w * 0.2, g * w * 0.9,
            w * 0.9, w * 0.2]             # no correct answer: gamma 1
    np.testing.assert_allclose(r, want, rtol=1e-5)
    self.assertLen(trm.calls, 6)          # R^t of every response
    self.assertEqual(trm.calls[2], ("p0", "<think>bad</think><answer>5"
                                    "</answer>", "im0"))   # $ removed
    self.assertEqual(m["gamma_lt1_groups"], 1)

  def test_code_switches_skip_the_trm(self):
    reward, trm = self._reward("trust_code")
    r, _ = reward.from_fields(completions=self.COMPLETIONS,
                              row=[0, 0, 0, 0, 1, 1], step=1, group_size=2)
    w = 0.3 * math.exp(-1 / 4)
    # (c): R^t only where R^o >= 0.2, so mu_w = 0 and gamma = 1; (b): the
    # all-wrong group gets no R^t and is never sent to the TRM.
    np.testing.assert_allclose(r, [1 + w * 0.9, 0, 1 + w * 0.2, 0, 0, 0],
                               rtol=1e-5)
    self.assertLen(trm.calls, 2)

  def test_outcome_only_never_asks(self):
    reward, trm = self._reward("outcome")
    r, _ = reward.from_fields(completions=self.COMPLETIONS,
                              row=[0, 0, 0, 0, 1, 1], step=1, group_size=2)
    np.testing.assert_array_equal(r, [1, 0, 1, 0, 0, 0])
    self.assertEmpty(trm.calls)


class TrustGrpoRealTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hf_fixtures.inductor_cleanup()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = vl_fixtures.make_qwen2_5_vl_checkpoint(
        os.path.join(cls.root, "policy"))
    cls.trm = vl_fixtures.make_qwen2_5_vl_checkpoint(
        os.path.join(cls.root, "trm"), seed=1)
    cls.data = os.path.join(cls.root, "SophiaVL-R1-130k")
    cls.rows = write_sophiavl(cls.data)
    cls.mv = os.path.join(cls.root, "MathVista")
    write_mathvista(cls.mv)
    os.environ["HF_DATASETS_CACHE"] = os.path.join(cls.root, "hf_cache")

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  def test_prefix_head_equals_chat_sequence(self):
    """The GRPO policy (prefix LM with the chat head) scores the chat
    template's own sequence: logits equal `Qwen2VL.forward` on it."""
    chat = vl_chat.VLChat.load(self.ckpt, dtype="float32")
    tok = chat.tokenizer
    img = _image(3)
    ids, mm = chat.image_prompt([img], "How many?", system="sys",
                                min_pixels=56 * 56, max_pixels=56 * 56)
    i0 = ids.index(tok.token_id("<|vision_start|>"))
    i1 = ids.index(tok.token_id("<|vision_end|>"))
    pre = qwen2_vl_prefix.PrefixConfig(
        kind="image", image_size=56,
        vision_end_token_id=tok.token_id("<|vision_end|>"),
        image_mean=chat.processor.image_mean,
        image_std=chat.processor.image_std, head_ids=ids[:i0])
    pm = qwen2_vl_prefix.Qwen2VLPrefixLM.wrap(chat.model, pre)
    tail = jnp.asarray([ids[i1 + 1:]])
    # Both forwards compiled (one program each), not op by op; the grid is
    # static, so the reference closes over it and takes the positions
    # `Qwen2VL.forward` would compute (`rope_index` of the prompt).
    got = nnx.jit(lambda m, t, x: m.forward(
        t, jnp.ones_like(t, bool), prefix_inputs=x).logits)(
            pm, tail, jnp.asarray(img[None] / 255.0, jnp.float32))
    grid = np.asarray(mm["image_grid_thw"])
    pos, _ = qwen2_vl.rope_index(np.asarray([ids]), chat.model.cfg, grid)
    want = nnx.jit(lambda m, t, pv, p3: m.forward(
        t, pixel_values=pv, image_grid_thw=grid, positions_3bt=p3).logits)(
            chat.model, jnp.asarray([ids]), mm["pixel_values"], pos)
    np.testing.assert_allclose(got, want[:, -tail.shape[1]:], atol=1e-5)

  def test_trm_prompt_is_sophiavl_messages(self):
    """The TRM's prompt is SophiaVL-R1's messages (system, [text, image])
    rendered by the checkpoint's own template (transformers'), the image
    placeholder expanded; its score parses its own greedy reply."""
    import transformers  # pylint: disable=g-import-not-at-top
    chat = vl_chat.VLChat.load(self.trm, dtype="float32")
    small = 56 * 56
    trm = sophiavl.VLThinkingRewardModel(chat, max_new_tokens=4,
                                         min_pixels=small, max_pixels=small)
    reply = "<think>Hmm, 3 + 2</think><answer>5</answer>"
    ids, mm = trm.prompt("system\nQ?", reply, _image(5))
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [
            {"type": "text", "text": ref_trm_prompt("system\nQ?", reply,
                                                    "png")},
            {"type": "image_url", "image_url": {"url": "data:image/png"}}]}]
    tok = transformers.AutoTokenizer.from_pretrained(self.trm)
    text = tok.apply_chat_template(messages, tokenize=False,
                                   add_generation_prompt=True)
    n = int(np.prod(mm["image_grid_thw"][0])) // 4
    text = text.replace("<|image_pad|>", "<|image_pad|>" * n)
    self.assertEqual(ids, tok(text, add_special_tokens=False)["input_ids"])
    r_t = trm(["system\nQ?"], [reply], [_image(5)])
    self.assertEqual(float(r_t[0]), ref_extract_score(trm.replies[-1]))
    # A batch (prompts of different lengths, left-padded) gives each
    # pair's own greedy reply.
    pairs = [("system\nQ?", reply, _image(5)),
             ("system\nWhat is shown?", "<think>a cat</think>", _image(6)),
             ("system\nQ?", "<think>x</think><answer>1</answer>",
              _image(7, 84))]
    from unittest import mock  # pylint: disable=g-import-not-at-top
    from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
    with mock.patch.object(sampler, "generate",
                           wraps=sampler.generate) as gen:
      batch = trm.scores(*zip(*pairs))
    # 3 pairs generate as 4 (a power of two: one program per bucket), the
    # copy of the last pair's reply dropped.
    self.assertLen(gen.call_args.args[1], 4)
    self.assertLen(batch, 3)
    replies = trm.replies[-3:]
    one = [trm.score(*p) for p in pairs]
    self.assertEqual(trm.replies[-3:], replies)
    np.testing.assert_array_equal(batch, one)

  def test_readers(self):
    cfg = tg_config.get_config("paper,short")
    cfg.data.path, cfg.eval_data.path = self.data, self.mv
    rows = sophiavl_data.read_train(cfg.data)
    self.assertEqual([r["problem_id"] for r in rows], [1, 2, 3, 4])
    self.assertIsNone(sophiavl_data.image(rows[3], self.data))
    img = sophiavl_data.image(rows[2], sophiavl_data.image_root(cfg.data))
    self.assertEqual(img.shape, (80, 80, 3))
    ev = sophiavl_data.read_eval(cfg.eval_data, max_rows=2)
    self.assertEqual([r["pid"] for r in ev], ["1", "2"])
    self.assertEqual(ev[0]["choices"], MV_ROWS[0]["choices"])
    self.assertEqual(sophiavl_data.image(ev[1], "").shape, (56, 56, 3))
    q = sophiavl.policy_question(rows[1])
    self.assertTrue(q.startswith("Subtract 1 cyan cubes. How many objects "
                                 "are left?A. 3; B. 4; C. 5\nPlease think"))

  def test_paper_short_end_to_end(self):
    from jaxlab import main as jmain  # pylint: disable=g-import-not-at-top
    work = os.path.join(self.root, "work")
    cfg = tg_config.get_config("paper,short")
    cfg.init_from, cfg.trm.init_from = self.ckpt, self.trm
    cfg.data.path, cfg.eval_data.path = self.data, self.mv
    cfg.model.dtype = "float32"
    cfg.rl.prompts_per_step = 2
    cfg.grpo.update(group_size=2, num_iterations=1)
    cfg.optim.grad_accum = 1       # 4 rollouts a step (paper: 128 / 8)
    cfg.trm.max_new_tokens = 4
    small = 56 * 56
    cfg.real.update(image_size=56, max_new_tokens=6, eval_max_new_tokens=6,
                    eval_min_pixels=small, eval_max_pixels=small,
                    trm_min_pixels=small, trm_max_pixels=small)
    jmain.run_experiment(cfg, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    with open(os.path.join(work, "replies.json")) as f:
      replies = json.load(f)
    self.assertEqual(res["data"]["rows"], {"train": 4, "testmini": 3})
    self.assertEqual(res["extra"]["train_image_rows"], 3)
    self.assertEqual(res["extra"]["eval_data"]["path"], self.mv)
    self.assertEqual(set(replies), {"init_from", "trust/0",
                                    "trust_code/0"})
    for name, reps in replies.items():
      self.assertLen(reps, 3)
      want = np.mean([ref_true_false(r["reply"], row)
                      for r, row in zip(reps, MV_ROWS)])
      key = name.split("/")[0]
      self.assertAlmostEqual(res["extra"]["accuracy"][key][0], want)
      # The multiple-choice reply maps to one of the choices, as MathVista's
      # normalisation maps it.
      m = re.findall(r"<answer>(.*?)</answer>", reps[0]["reply"], re.DOTALL)
      self.assertEqual(reps[0]["prediction"], ref_normalize_extracted_answer(
          ref_extract_answer((m[-1] if m else reps[0]["reply"]).strip(),
                             MV_ROWS[0]), MV_ROWS[0]["choices"],
          "multi_choice", "text", None))
    # The replies are the checkpoint's own: regenerated here.
    chat = vl_chat.VLChat.load(self.ckpt, dtype="float32")
    row = sophiavl_data.read_eval(cfg.eval_data)[1]
    again, _ = chat.answer_images(
        [sophiavl_data.image(row, "")], row["query"], max_new_tokens=6,
        min_pixels=small, max_pixels=small,
        system=sophiavl.EVAL_SYSTEM_PROMPT)
    self.assertEqual(replies["init_from"][1]["reply"], again)
    with open(os.path.join(work, "train_history.json")) as f:
      hist = json.load(f)
    self.assertLen(hist["trust/0"], 2)           # short: 2 RL steps
    # The paper's reading queries the TRM for every response (2 x 2 a step).
    self.assertEqual(hist["trust/0"][-1]["trm_calls"], 8)
    self.assertIn("init_from", res)


if __name__ == "__main__":
  absltest.main()
