"""SophiaVL-R1's rewards as its code computes them (paper G, Trust-GRPO).

    r_o = outcome_score(reply, "<answer>B</answer>", "multiple choice")
    trm = VLThinkingRewardModel(vl_chat.VLChat.load(config.trm.init_from))
    r_t = trm.score(prompt_str, reply, image)           # in [0, 1]

Read from github.com/kxfan2002/SophiaVL-R1 (commit a818494):

* `verl/workers/reward/custom.py`: the thinking reward model's prompt
  (`get_process_reward`: a system turn "You are a helpful assistant.", a
  user turn with the prompt text and then the image, temperature 0), the
  score parsing (`extract_score`: the first of seven extractors that
  reads a number, clipped to [0, 1]; 0 when none does) and the reward
  preprocessing (`CustomRewardManager.__call__`: the ground truth's
  `<answer>` content, `$` / `$$` removed from reply and ground truth;
  the prompt string is the policy prompt decoded with the special tokens
  skipped, prefixed "<image> " for an image row).
* `verl/utils/reward_score/math.py`: the outcome scores per
  `problem_type` (`verl/trainer/main.py` `reward_fn_dict`: "numerical" ->
  `math_compute_score`, "multiple choice" -> `choices_compute_score`,
  "OCR" -> `ocr_compute_score` (exp(-WER)), "free-form" / "text" ->
  `free_form_compute_score` (mean ROUGE-1/2/L F); unknown types fall
  back to "numerical"), each 0 unless the reply matches the format
  `<think>(.*?)</think>.*<answer>(.*?)</answer>.*`.
* `verl/utils/dataset.py`: the policy prompt (`QUESTION_TEMPLATE`,
  `TYPE_TEMPLATE`, multiple-choice options appended with "; ", the image
  first) and `scripts/train_scripts/run_train.sh`'s system prompt.

One difference: `math_compute_score` grades with `mathruler.grader.
grade_answer` (not a jaxlab dependency); here the "numerical" grade is
`jaxlab.evals.math_answers.is_correct` (math-verify) on the `<answer>`
contents, after an exact string match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxlab.evals import text as text_metrics

# verl/utils/dataset.py (RLHFDataset.__getitem__).
QUESTION_TEMPLATE = (
    "{Question}\n"
    "Please think about this question as if you were a human pondering "
    "deeply. Engage in an internal dialogue using expressions such as 'let "
    "me think', 'wait', 'Hmm', 'oh, I see', 'let's break it down', etc, or "
    "other natural language thought expressions It's encouraged to include "
    "self-reflection or verification in the reasoning process. Provide your "
    "detailed reasoning between the <think> </think> tags, and then give "
    "your final answer between the <answer> </answer> tags.")
TYPE_TEMPLATE = {
    "multiple choice": " Please provide only the single option letter (e.g.,"
                       " A, B, C, D, etc.) within the <answer> </answer> "
                       "tags.",
    "numerical": " Please provide the numerical value (e.g., 42 or 3.14) "
                 "within the <answer> </answer> tags.",
    "OCR": " Please transcribe text from the image/video clearly and provide "
           "your text answer within the <answer> </answer> tags.",
    "free-form": " Please provide your text answer within the <answer> "
                 "</answer> tags.",
    "text": " Please provide the short text answer within the <answer> "
            "</answer> tags.",
}
# scripts/train_scripts/run_train.sh (SYSTEM_PROMPT, typo included).
SYSTEM_PROMPT = (
    "You FIRST think about the reasoning process as an internal monologue "
    "and then provide the final answer.\n The reasoning process MUST BE "
    "enclosed within <think> </think> tagsdd. The final answer MUST BE "
    "enclosed within <answer> </answer> tags, for example <think>"
    "your_thinking_process</think><answer>your_final_answer</answer>. If you "
    "use formula, please use LaTeX format.")
# README.md "Evaluation": the system prompt of every evaluation.
EVAL_SYSTEM_PROMPT = (
    "You FIRST think about the reasoning process as an internal monologue "
    "and then provide the final answer. Please think about this question as "
    "if you were a human pondering deeply. Engage in an internal dialogue "
    "using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', "
    "'let's break it down', etc, or other natural language thought "
    "expressions. It's encouraged to include self-reflection or verification "
    "in the reasoning process.The reasoning process MUST BE enclosed within "
    "<think> </think> tagsdd. The final answer MUST BE enclosed within "
    "<answer> </answer> tags, for example <think>your_thinking_process"
    "</think><answer>your_final_answer</answer>. If you use formula, please "
    "use LaTeX format.")
# verl/workers/reward/custom.py get_process_reward (the f-string's text).
TRM_SYSTEM = "You are a helpful assistant."
TRM_PROMPT = (
    "You are an expert reasoning evaluator. I will give you a multimodal "
    "question and an answer. Your goal is to judge a reward process and give "
    "a score between 0 and 1. You should focus on whether the reasoning "
    "process is good rather than whether the final answer is correct.### "
    "Evaluation Criteria:\n- **Logical Soundness**: Does each step follow "
    "logically from the previous one?\n- **Correct Reasoning**: Are the "
    "methods and steps used appropriate and valid? Are the facts and lemmas "
    "correctly stated and applied?\n- **Error Identification**: Are there "
    "any logical fallacies, unsupported assumptions, or incorrect steps?\n- "
    "**Language Consistency**: Is the reasoning process conducted in a "
    "single, consistent language without mixing different languages?\n- "
    "**Redundancy**: Is the reasoning concise, without unnecessary "
    "repetition or extraneous steps?\nProvide a single score from **{0, "
    "0.1, 0.2, ..., 1.0}** based on the reasoning quality, where:\n - "
    "**0**: Completely flawed reasoning\n- **1**: Perfectly sound "
    "reasoning\n- Intermediate values (e.g., 0.3, 0.7) should reflect "
    "partial correctness or minor errors.\nBe strict, reward the good "
    "process and punish the bad one. You should only output the score "
    "without any explanation.\n    Question: {question}\n    Reasoning "
    "process: {reasoning}\n    Your response format: <answer>your_score"
    "</answer>\n    ")


def policy_question(row: dict[str, Any]) -> str:
  """The user text of a SophiaVL-R1 row (`RLHFDataset.__getitem__`): the
  problem (+ "; "-joined options for multiple choice) in
  `QUESTION_TEMPLATE` plus the type's `TYPE_TEMPLATE`. The `<image>`
  marker the dataset puts first is the image entry of the chat turn
  (`vl_chat.VLChat` renders images before the text), so it is dropped
  here."""
  problem = str(row["problem"])
  ptype = row.get("problem_type") or "numerical"
  if ptype == "multiple choice":
    problem = problem + "; ".join(map(str, row.get("options") or []))
  problem = problem.replace("<image>", "")
  if ptype not in TYPE_TEMPLATE:
    raise ValueError(f"problem_type={ptype!r}; SophiaVL-R1's types: "
                     f"{', '.join(TYPE_TEMPLATE)}")
  return QUESTION_TEMPLATE.format(Question=problem) + TYPE_TEMPLATE[ptype]


def ground_truth(solution: str) -> str:
  """The reference answer: the `<answer>` content of `solution`, `$`
  removed (as `CustomRewardManager.__call__`)."""
  m = re.search(r"<answer>(.*?)</answer>", solution, re.DOTALL)
  if m:
    solution = m.group(1)
  return solution.replace("$$", "").replace("$", "")


# ---------------------------------------------------------------------------
# Outcome reward R^o (verl/utils/reward_score/math.py).
# ---------------------------------------------------------------------------

_FORMAT = re.compile(r"<think>(.*?)</think>.*<answer>(.*?)</answer>.*",
                     re.DOTALL)


def format_ok(reply: str) -> bool:
  """`math_format_reward`: the whole reply matches think ... answer."""
  return _FORMAT.fullmatch(reply) is not None


def _answer(reply: str) -> str:
  m = re.search(r"<answer>(.*?)</answer>", reply, re.DOTALL)
  return m.group(1) if m else reply


def math_score(reply: str, truth: str) -> float:
  """"numerical": 1 when the `<answer>` content grades equal to `truth`
  (exact match, else math-verify; see the module docstring)."""
  if not format_ok(reply):
    return 0.0
  got = _answer(reply).strip()
  if got == truth.strip():
    return 1.0
  from jaxlab.evals import math_answers  # pylint: disable=g-import-not-at-top
  try:
    return float(bool(math_answers.is_correct(
        f"\\boxed{{{got}}}", f"\\boxed{{{truth.strip()}}}")))
  except Exception:  # pylint: disable=broad-except
    return 0.0       # grade_answer's failures are "not equal" too


def choices_score(reply: str, truth: str) -> float:
  """`choices_compute_score`, line for line: the comma-separated letters
  of the `<answer>` content, each `in` the ground-truth string, and as
  many letters as the ground truth has characters."""
  if not format_ok(reply):
    return 0.0
  got = _answer(reply)
  if reply == "":
    return 0.0
  answer = [a.strip() for a in got.split(",")]
  if len(answer) != len(truth):
    return 0.0
  return float(all(a in truth for a in answer))


def ocr_score(reply: str, truth: str) -> float:
  """`ocr_compute_score`: exp(-WER) of the `<answer>` content (jiwer's
  WER, as `jaxlab.evals.text.word_error_rate` computes it)."""
  if not format_ok(reply):
    return 0.0
  return float(np.exp(-text_metrics.word_error_rate(
      [truth.strip()], [_answer(reply).strip()])))


def free_form_score(reply: str, truth: str) -> float:
  """`free_form_compute_score`: mean of ROUGE-1/2/L F-measure (stemmed)."""
  if not format_ok(reply):
    return 0.0
  from rouge_score import rouge_scorer  # pylint: disable=g-import-not-at-top
  got = _answer(reply).replace("\n", " ")
  scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"],
                                    use_stemmer=True)
  s = scorer.score(got.strip(), truth.replace("\n", " ").strip())
  return (s["rouge1"].fmeasure + s["rouge2"].fmeasure
          + s["rougeL"].fmeasure) / 3


OUTCOME_SCORES = {"numerical": math_score, "multiple choice": choices_score,
                  "OCR": ocr_score, "free-form": free_form_score,
                  "text": free_form_score}


def outcome_score(reply: str, solution: str, problem_type: str) -> float:
  """R^o of one reply: `reward_fn_dict[problem_type]` (default
  "numerical") on the reply and the solution, `$` removed from both."""
  fn = OUTCOME_SCORES.get(problem_type, math_score)
  reply = reply.replace("$$", "").replace("$", "")
  return fn(reply, ground_truth(solution))


# ---------------------------------------------------------------------------
# Thinking reward R^t: the TRM's prompt and the parsing of its reply.
# ---------------------------------------------------------------------------

_EXTRACTORS = (
    # extract_box_score
    (r"\\box(?:es)?\{([01](?:\.\d)?)\}", float),
    # extract_xml_answer
    (r"<answer>\s*([01](?:\.\d)?)\s*</answer>", float),
    # extract_plain_number
    (r"\b([01](?:\.\d)?)\b", float),
    # extract_after_think_number (two patterns)
    (r"</think>\s*<answer>\s*([\d.]+)\s*</answer>", "num"),
    (r"</think>\s*([\d.]+)", "num"),
    # extract_total_wrong_steps, extract_zero_wrong_steps,
    # extract_wrong_steps
    (r"Total Wrong Steps\*\*:\s*(\d+)", int),
    (r"\*\*(\d+)\s+wrong steps\*\*", int),
    (r"\*\*.*?\bWrong Steps\*\*:\s*(\d+)", int),
)


def _num(s: str):
  return int(s) if s.isdigit() else float(s)


def extract_score(text: str) -> float:
  """`custom.extract_score`: the first extractor that finds a number, in
  SophiaVL-R1's order, clipped to [0, 1]; 0 when none does. (Their
  `extract_after_think_number` tries its two patterns before giving up,
  as the two entries here; a "1." that `float` rejects raises there and
  here alike.)"""
  for pattern, conv in _EXTRACTORS:
    m = re.search(pattern, text)
    if m is None:
      continue
    score = _num(m.group(1)) if conv == "num" else conv(m.group(1))
    return min(max(score, 0), 1)
  return 0


def trm_prompt(prompt_str: str, reasoning: str, *, has_image: bool) -> str:
  """The TRM's user text (`get_process_reward`): "<image> " first for an
  image row whose prompt has no "<image>"."""
  if has_image and "<image>" not in prompt_str:
    prompt_str = f"<image> {prompt_str}"
  return TRM_PROMPT.replace("{question}", prompt_str).replace(
      "{reasoning}", reasoning)


class VLThinkingRewardModel:
  """SophiaVL-R1's thinking reward model on a Qwen2.5-VL checkpoint.

  `chat` is a `jaxlab.evals.vl_chat.VLChat` (the TRM's weights, tokenizer,
  chat template and processor, e.g. `VLChat.load(config.trm.init_from)`:
  bunny127/SophiaVL-R1-Thinking-Reward-Model-3B). `score` asks it as
  `get_process_reward` does: messages [system "You are a helpful
  assistant.", user [the prompt text, then the image]] rendered by the
  checkpoint's chat template, the image through its processor (within
  `min_pixels` / `max_pixels` when given), greedy decoding (temperature
  0), and the reply parsed by `extract_score`. A `ThinkingScorer`:
  `trm(questions, thinkings, images)` scores a batch.
  """

  def __init__(self, chat, *, max_new_tokens: int = 32,
               min_pixels: int | None = None,
               max_pixels: int | None = None):
    self.chat = chat
    self.max_new_tokens = int(max_new_tokens)
    self.min_pixels, self.max_pixels = min_pixels, max_pixels
    self.replies: list[str] = []   # the TRM's replies, in order

  def prompt(self, prompt_str: str, reasoning: str, image
             ) -> tuple[list[int], dict | None]:
    """(prompt ids with the image's placeholder expanded, the multimodal
    inputs or None) of one (prompt, reply) pair."""
    from jaxlab.evals import vl_chat  # pylint: disable=g-import-not-at-top
    chat = self.chat
    content = [{"type": "text", "text": trm_prompt(
        prompt_str, reasoning, has_image=image is not None)}]
    if image is not None:
      content.append({"type": "image_url", "image_url": "image"})
    messages = [{"role": "system", "content": TRM_SYSTEM},
                {"role": "user", "content": content}]
    kw = {"chat_template": chat.chat_template} if chat.chat_template else {}
    ids = chat.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, **kw)
    if image is None:
      return ids, None
    mm = chat.image_inputs([image], min_pixels=self.min_pixels,
                           max_pixels=self.max_pixels)
    ids = chat.processor.expand_placeholders(
        ids, image_grid_thw=mm["image_grid_thw"],
        image_token_id=chat.tokenizer.token_id(vl_chat.IMAGE_PAD),
        video_token_id=-1)
    return ids, mm

  def score(self, prompt_str: str, reasoning: str, image) -> float:
    """R^t in [0, 1] of one (prompt, reply) pair."""
    return float(self.scores([prompt_str], [reasoning], [image])[0])

  def scores(self, prompt_strs: Sequence[str], reasonings: Sequence[str],
             images: Sequence[Any]) -> np.ndarray:
    """R^t of a batch of pairs: one greedy `sampler.generate` call over
    the batch (the vision inputs concatenated in prompt order) when every
    pair has an image, else one call per pair. The batch is padded to a
    power of two with copies of its last pair (their replies dropped), so
    a run whose steps score 3, then 4, then 2 pairs compiles the
    generation for 4 and 2 pairs, not once per count."""
    from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
    if not prompt_strs:
      return np.zeros((0,), np.float32)
    built = [self.prompt(p, r, im)
             for p, r, im in zip(prompt_strs, reasonings, images)]
    tok = self.chat.tokenizer
    if any(mm is None for _, mm in built):
      outs = [self.chat.generate(ids, mm,
                                 max_new_tokens=self.max_new_tokens)[0]
              for ids, mm in built]
    else:
      n = len(built)
      built = built + [built[-1]] * (sampler.bucket_length(n, minimum=1) - n)
      mm = {k: np.concatenate([np.asarray(b[1][k]) for b in built], 0)
            for k in ("pixel_values", "image_grid_thw")}
      eos = tuple(tok.eos_ids)
      res = sampler.generate(
          self.chat.model, [ids for ids, _ in built],
          max_new_tokens=self.max_new_tokens, eos_id=eos[0] if eos else None,
          stop_ids=eos[1:], pad_id=tok.pad_id or 0, multimodal=mm)
      outs = [tok.decode(t, skip_special_tokens=True)
              for t in res.tokens[:n]]
    self.replies.extend(outs)
    return np.asarray([extract_score(o) for o in outs], np.float32)

  def __call__(self, questions: Sequence[str], thinkings: Sequence[str],
               images: Sequence[Any] | None = None) -> np.ndarray:
    images = [None] * len(questions) if images is None else images
    return self.scores(questions, thinkings, images)
