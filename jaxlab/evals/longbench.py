"""LongBench (Bai et al. 2024) as released: prompts, lengths, metrics.

    rows = pipeline.read_split(config.data)        # data.subset = a task
    ids, truncated = longbench.prompt_ids(tok, "qasper", rows[0],
                                          max_length=31500)
    ...                                            # generate, decode
    longbench.score("qasper", prediction, rows[0]["answers"],
                    rows[0]["all_classes"])        # in [0, 1]
    longbench.task_score("qasper", predictions, answers, all_classes)

The rows are LongBench's (THUDM/LongBench: `data/<task>.jsonl` in its
data.zip, or `<task>/test-*.parquet` on the Hub; one `test` split per task):
`input`, `context`, `answers` (a list), `length`, `dataset`, `language`,
`all_classes` (a list for classification tasks, else null), `_id`.

What follows is the released code of github.com/THUDM/LongBench (commit
2e00731, `LongBench/`), re-implemented here:

* `PROMPTS` / `MAX_NEW_TOKENS`: `config/dataset2prompt.json` and
  `config/dataset2maxlen.json`; a prompt is `PROMPTS[task].format(**row)`.
* `prompt_ids` follows `pred.py`: a prompt longer than `max_length` tokens
  keeps its first and last `max_length // 2` tokens (decoded and joined:
  "truncate in the middle, since the left and right side may contain
  crucial instructions"); the chat template wraps the (truncated) prompt
  except for `NO_CHAT_TASKS` (few-shot and code tasks, raw text); the
  plain text gets the tokenizer's leading special tokens
  (`add_special_tokens=True`), the template brings its own.
* `METRICS` is `eval.py`'s `dataset2metric` over the functions of
  `metrics.py` (`qa_f1_score`, `rouge_score`, `classification_score`,
  `retrieval_score`, `count_score`, `code_sim_score` and the Chinese
  variants); `score` is `eval.py`'s per-row `scorer`: the first line of the
  prediction for `FIRST_LINE_TASKS`, then the max over the answers;
  `task_score` is the task's number, `round(100 * mean, 2)`.
  - QA F1: SQuAD normalisation (lowercase, no punctuation, no articles,
    whitespace collapsed; no Unicode normalisation), bag-of-words F1.
  - ROUGE-L: the `rouge` package (pltrdy, 1.0.1) as LongBench calls it:
    sentences split on ".", words split on " ", ROUGE-L *summary level*
    with its default `exclusive=True`, i.e. over *sets* of words: the union
    of the words of each (reference sentence, prediction sentence) LCS,
    reconstructed with its tie rule, against the distinct words of each
    side; F = 2PR / (P + R + 1e-8); 0 for a prediction with no sentence
    (the package raises, LongBench returns 0). Not Google's `rouge_score`
    (`evals.text.rouge_l`): the numbers differ. The package's recursive LCS
    reconstruction overflows Python's stack on sentence pairs of ~1000
    words (LongBench then scores 0); this one is iterative.
  - code similarity: fuzzywuzzy's `fuzz.ratio` (round(100 x ratio) / 100)
    of the first prediction line without a backtick, "#" or "//", with
    difflib's `SequenceMatcher` as LongBench's requirements install it
    (fuzzywuzzy without python-Levenshtein); equal strings give 1, an empty
    side 0.
  - classification: the classes named in the prediction, less those that
    are a proper substring of the answer (removed while iterating, as the
    reference does: it skips the element after each removal), score
    1 / (classes kept) if the answer is one of them.
  - retrieval / count: the share of the numbers in the prediction equal to
    the answer's paragraph number / the answer.
  - Chinese tasks (`qa_f1_zh_score`, `rouge_zh_score`) segment with
    `jieba` (imported when used; not a jaxlab dependency).
"""

from __future__ import annotations

import collections
import difflib
import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxlab import _optional

# config/dataset2prompt.json (LongBench v1, commit 2e00731), verbatim: the
# benchmark's prompt formats ("asconcisely" as released).
PROMPTS: dict[str, str] = {
    "narrativeqa": "You are given a story, which can be either a novel or a movie script, and a question. Answer the question asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: {context}\n\nNow, answer the question based on the story asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:",  # pylint: disable=line-too-long
    "qasper": "You are given a scientific article and a question. Answer the question as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on the information in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the question based on the above article as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on the information in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:",  # pylint: disable=line-too-long
    "multifieldqa_en": "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on the above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",  # pylint: disable=line-too-long
    "multifieldqa_zh": "阅读以下文字并用中文简短回答：\n\n{context}\n\n现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。\n\n问题：{input}\n回答：",  # pylint: disable=line-too-long
    "hotpotqa": "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",  # pylint: disable=line-too-long
    "2wikimqa": "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",  # pylint: disable=line-too-long
    "musique": "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",  # pylint: disable=line-too-long
    "dureader": "请基于给定的文章回答下述问题。\n\n文章：{context}\n\n请基于上述文章回答下面的问题。\n\n问题：{input}\n回答：",  # pylint: disable=line-too-long
    "gov_report": "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n{context}\n\nNow, write a one-page summary of the report.\n\nSummary:",  # pylint: disable=line-too-long
    "qmsum": "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting transcript in one or more sentences.\n\nQuery: {input}\nAnswer:",  # pylint: disable=line-too-long
    "multi_news": "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\nNow, write a one-page summary of all the news.\n\nSummary:",  # pylint: disable=line-too-long
    "vcsum": "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n会议记录：\n{context}\n\n会议总结：",  # pylint: disable=line-too-long
    "trec": "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}",  # pylint: disable=line-too-long
    "triviaqa": "Answer the question based on the given passage. Only give me the answer and do not output any other words. The following are some examples.\n\n{context}\n\n{input}",  # pylint: disable=line-too-long
    "samsum": "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}",  # pylint: disable=line-too-long
    "lsht": "请判断给定新闻的类别，下面是一些例子。\n\n{context}\n{input}",
    "passage_count": "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully read these paragraphs and determine how many unique paragraphs there are after removing duplicates. In other words, how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after removing duplicates. The output format should only contain the number, such as 1, 2, 3, and so on.\n\nThe final answer is: ",  # pylint: disable=line-too-long
    "passage_retrieval_en": "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of the paragraph that the abstract is from. The answer format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: ",  # pylint: disable=line-too-long
    "passage_retrieval_zh": "以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n\n{context}\n\n下面是一个摘要\n\n{input}\n\n请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n\n答案是：",  # pylint: disable=line-too-long
    "lcc": "Please complete the code given below. \n{context}Next line of code:\n",  # pylint: disable=line-too-long
    "repobench-p": "Please complete the code given below. \n{context}{input}Next line of code:\n",  # pylint: disable=line-too-long
}

# config/dataset2maxlen.json: new tokens per task.
MAX_NEW_TOKENS: dict[str, int] = {
    "narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64,
    "multifieldqa_zh": 64, "hotpotqa": 32, "2wikimqa": 32, "musique": 32,
    "dureader": 128, "gov_report": 512, "qmsum": 512, "multi_news": 512,
    "vcsum": 512, "trec": 64, "triviaqa": 32, "samsum": 128, "lsht": 64,
    "passage_count": 32, "passage_retrieval_en": 32,
    "passage_retrieval_zh": 32, "lcc": 64, "repobench-p": 64}

# pred.py: "chat models are better off without build prompts on these tasks".
NO_CHAT_TASKS = ("trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p")
# eval.py: only the prediction's first line is scored.
FIRST_LINE_TASKS = ("trec", "triviaqa", "samsum", "lsht")
# pred.py: samsum also stops at a newline token ("the model endlessly
# repeats '\nDialogue'").
NEWLINE_STOP_TASKS = ("samsum",)
# The 14 English tasks of paper M's LongBench table (spec M, Setup).
PAPER_M_TASKS = ("qasper", "narrativeqa", "multifieldqa_en", "hotpotqa",
                 "2wikimqa", "musique", "gov_report", "qmsum", "multi_news",
                 "trec", "triviaqa", "samsum", "lcc", "repobench-p")
# The columns of a released row.
ROW_FIELDS = ("input", "context", "answers", "length", "dataset", "language",
              "all_classes", "_id")


# --------------------------------------------------------------------------
# metrics.py
# --------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)
_CN_PUNCT = frozenset(
    "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.")  # pylint: disable=line-too-long


def normalize_answer(s: str) -> str:
  """LongBench's (SQuAD's) answer normalisation: lowercase, drop ASCII
  punctuation, drop articles, collapse whitespace (in that order)."""
  s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
  return " ".join(_ARTICLES.sub(" ", s).split())


def normalize_zh_answer(s: str) -> str:
  """Lowercase, drop ASCII and Chinese punctuation, drop all whitespace."""
  s = "".join(ch for ch in s.lower() if ch not in _PUNCT | _CN_PUNCT)
  return "".join(s.split())


def f1_score(prediction: Sequence[str], ground_truth: Sequence[str]) -> float:
  """Bag-of-tokens F1 (multiset overlap); 0 without a common token."""
  same = sum((collections.Counter(prediction)
              & collections.Counter(ground_truth)).values())
  if same == 0:
    return 0.0
  p, r = same / len(prediction), same / len(ground_truth)
  return 2 * p * r / (p + r)


def qa_f1_score(prediction: str, ground_truth: str, **_) -> float:
  return f1_score(normalize_answer(prediction).split(),
                  normalize_answer(ground_truth).split())


def _jieba_cut(text: str) -> list[str]:
  jieba = _optional.require("jieba", "longbench")  # Chinese word segmentation
  return list(jieba.cut(text, cut_all=False))


def qa_f1_zh_score(prediction: str, ground_truth: str, **_) -> float:
  def tokens(text):
    return [t for t in (normalize_zh_answer(w) for w in _jieba_cut(text)) if t]
  return f1_score(tokens(prediction), tokens(ground_truth))


def _sentences(text: str) -> list[str]:
  """The `rouge` package's sentences: split on ".", whitespace collapsed
  (a whitespace-only piece stays, as an empty sentence)."""
  return [" ".join(s.split()) for s in text.split(".") if s]


def _words(sentences: Sequence[str]) -> list[str]:
  return [w for s in sentences for w in s.split(" ")]


def _lcs_words(x: Sequence[str], y: Sequence[str]) -> list[str]:
  """The LCS of x and y as the `rouge` package reconstructs it (back from
  the end: a match is taken; else up when table[i-1][j] > table[i][j-1],
  else left)."""
  n, m = len(x), len(y)
  table = [[0] * (m + 1) for _ in range(n + 1)]
  for i in range(1, n + 1):
    xi, row, prev = x[i - 1], table[i], table[i - 1]
    for j in range(1, m + 1):
      row[j] = (prev[j - 1] + 1 if xi == y[j - 1]
                else max(prev[j], row[j - 1]))
  out, i, j = [], n, m
  while i > 0 and j > 0:
    if x[i - 1] == y[j - 1]:
      out.append(x[i - 1])
      i, j = i - 1, j - 1
    elif table[i - 1][j] > table[i][j - 1]:
      i -= 1
    else:
      j -= 1
  return out[::-1]


def rouge_l_summary(prediction: str, reference: str) -> float:
  """ROUGE-L F of the `rouge` package (summary level, exclusive: over sets
  of words; see the module docstring); 0 when a side has no sentence."""
  hyp, ref = _sentences(prediction), _sentences(reference)
  if not hyp or not ref:
    return 0.0
  m, n = len(set(_words(ref))), len(set(_words(hyp)))
  union: set[str] = set()
  for r in ref:
    r_words = r.split(" ")
    for h in hyp:
      union.update(_lcs_words(r_words, h.split(" ")))
  llcs = len(union)
  p, r = llcs / n, llcs / m
  return 2.0 * (p * r / (p + r + 1e-8))


def rouge_score(prediction: str, ground_truth: str, **_) -> float:
  return rouge_l_summary(prediction, ground_truth)


def rouge_zh_score(prediction: str, ground_truth: str, **_) -> float:
  return rouge_score(" ".join(_jieba_cut(prediction)),
                     " ".join(_jieba_cut(ground_truth)))


def classification_score(prediction: str, ground_truth: str, *,
                         all_classes: Sequence[str], **_) -> float:
  matches = [c for c in all_classes if c in prediction]
  # The reference removes from the list it iterates over (a for loop over
  # a list walks by index), so the element after each removal is skipped.
  i = 0
  while i < len(matches):
    term = matches[i]
    if term in ground_truth and term != ground_truth:
      matches.remove(term)
    i += 1
  return 1.0 / len(matches) if ground_truth in matches else 0.0


def _number_share(prediction: str, target: str) -> float:
  numbers = re.findall(r"\d+", prediction)
  if not numbers:
    return 0.0
  return sum(n == target for n in numbers) / len(numbers)


def retrieval_score(prediction: str, ground_truth: str, **_) -> float:
  return _number_share(prediction,
                       re.findall(r"Paragraph (\d+)", ground_truth)[0])


def retrieval_zh_score(prediction: str, ground_truth: str, **_) -> float:
  return _number_share(prediction, re.findall(r"段落(\d+)", ground_truth)[0])


def count_score(prediction: str, ground_truth: str, **_) -> float:
  return _number_share(prediction, str(ground_truth))


def code_sim_score(prediction: str, ground_truth: str, **_) -> float:
  line = ""
  for candidate in prediction.lstrip("\n").split("\n"):
    if "`" not in candidate and "#" not in candidate and "//" not in candidate:
      line = candidate
      break
  if line == ground_truth:
    return 1.0
  if not line or not ground_truth:
    return 0.0
  ratio = difflib.SequenceMatcher(None, line, ground_truth).ratio()
  return int(round(100 * ratio)) / 100


Metric = Callable[..., float]

# eval.py's dataset2metric.
METRICS: dict[str, Metric] = {
    "narrativeqa": qa_f1_score, "qasper": qa_f1_score,
    "multifieldqa_en": qa_f1_score, "multifieldqa_zh": qa_f1_zh_score,
    "hotpotqa": qa_f1_score, "2wikimqa": qa_f1_score,
    "musique": qa_f1_score, "dureader": rouge_zh_score,
    "gov_report": rouge_score, "qmsum": rouge_score,
    "multi_news": rouge_score, "vcsum": rouge_zh_score,
    "trec": classification_score, "triviaqa": qa_f1_score,
    "samsum": rouge_score, "lsht": classification_score,
    "passage_retrieval_en": retrieval_score, "passage_count": count_score,
    "passage_retrieval_zh": retrieval_zh_score, "lcc": code_sim_score,
    "repobench-p": code_sim_score}
TASKS = tuple(METRICS)


def check_task(task: str) -> str:
  """`task` without a LongBench-E suffix ("qasper_e" -> "qasper")."""
  base = task[:-2] if task.endswith("_e") else task
  if base not in METRICS:
    raise ValueError(f"unknown LongBench task {task!r} (data.subset); valid: "
                     f"{', '.join(TASKS)} (and their '_e' LongBench-E "
                     "subsets)")
  return base


def score(task: str, prediction: str, answers: Sequence[str],
          all_classes: Sequence[str] | None = None) -> float:
  """One row's score in [0, 1] (eval.py `scorer`'s per-row value)."""
  task = check_task(task)
  if task in FIRST_LINE_TASKS:
    prediction = prediction.lstrip("\n").split("\n")[0]
  metric = METRICS[task]
  best = 0.0
  for gt in answers:
    best = max(best, metric(prediction, gt, all_classes=all_classes or ()))
  return best


def task_score(task: str, predictions: Sequence[str],
               answers: Sequence[Sequence[str]],
               all_classes: Sequence[str] | None = None) -> float:
  """The task's LongBench number: round(100 * mean row score, 2)."""
  if len(predictions) != len(answers):
    raise ValueError(f"{len(predictions)} predictions for {len(answers)} "
                     "rows")
  total = sum(score(task, p, a, all_classes)
              for p, a in zip(predictions, answers))
  return round(100 * total / len(predictions), 2)


# --------------------------------------------------------------------------
# pred.py: prompts
# --------------------------------------------------------------------------

def prompt_text(task: str, row: Mapping[str, Any]) -> str:
  """`dataset2prompt[task].format(**row)`."""
  return PROMPTS[check_task(task)].format(**row)


def truncate_middle(tokenizer, text: str, max_length: int) -> tuple[str, bool]:
  """(text, truncated): `text` cut to its first and last `max_length // 2`
  tokens (pred.py; each half decoded without special tokens) when it has
  more than `max_length` tokens (counted as the tokenizer encodes it with
  its special tokens, as `tokenizer(prompt)` does)."""
  ids = tokenizer.encode(text, add_special_tokens=True)
  if max_length <= 0 or len(ids) <= max_length:
    return text, False
  half = max_length // 2
  head = tokenizer.decode(ids[:half], skip_special_tokens=True)
  tail = tokenizer.decode(ids[-half:], skip_special_tokens=True)
  return head + tail, True


def uses_chat_template(task: str, tokenizer) -> bool:
  """pred.py's `build_chat`: every task but `NO_CHAT_TASKS`, when the
  tokenizer has a chat template."""
  return (check_task(task) not in NO_CHAT_TASKS
          and bool(getattr(tokenizer, "chat_template", None)))


def prompt_ids(tokenizer, task: str, row: Mapping[str, Any], *,
               max_length: int) -> tuple[list[int], bool]:
  """(token ids, truncated) of a row's prompt, as pred.py builds it: the
  task's format, middle truncation to `max_length` tokens (0: none), then
  the chat template (a single user turn, generation prompt) unless the
  task is in `NO_CHAT_TASKS`; the plain text with the tokenizer's leading
  special tokens."""
  text, truncated = truncate_middle(tokenizer, prompt_text(task, row),
                                    max_length)
  if uses_chat_template(task, tokenizer):
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}],
        add_generation_prompt=True), truncated
  return tokenizer.encode(text, add_special_tokens=True), truncated


def answer_text(tokenizer, task: str, tokens: Sequence[int],
                stop_ids: Sequence[int] = ()) -> str:
  """The prediction pred.py decodes: the generated ids up to the first stop
  token (`stop_ids`, e.g. the tokenizer's eos ids; for samsum also the
  newline token from the second token on, kept), without special tokens."""
  stops = {int(s) for s in stop_ids}
  newline = None
  if check_task(task) in NEWLINE_STOP_TASKS:
    nl = tokenizer.encode("\n")
    newline = int(nl[-1]) if nl else None
  out = []
  for i, t in enumerate(int(t) for t in tokens):
    if t in stops:
      break
    out.append(t)
    if newline is not None and t == newline and i > 0:
      break
  return tokenizer.decode(out, skip_special_tokens=True)


def max_new_tokens(task: str) -> int:
  return MAX_NEW_TOKENS[check_task(task)]
