"""Short factual questions with reference answers, shipped in the code.

A question set for evaluating a small pretrained chat model's *sampled*
answers (papers N and J on SmolLM2-135M-Instruct): country capitals, small
arithmetic, antonyms, weekday / month successors, plural forms and a few
common facts. Nothing is downloaded; everything is a deterministic function
of the arguments.

    qs = short_qa.question_set(("capital", "plural"), seed=0)
    short_qa.extract_answer("The capital of France is Paris.", qs[0].text)
    # -> "paris"
    short_qa.grade(qs[0], "Paris is the capital of France.")   # -> True

The answer normaliser `extract_answer` is the collapsing function B of paper
N (a rule-based stand-in for the paper's LLM answer extractor): the short
answer span of a free-form reply, lower-cased, without punctuation, articles
and filler words, number words as digits. `canonical` maps that span onto the
question's first reference answer when it is one of its aliases, so every
way of writing the right answer is one semantic class. `grade` is
correctness: the span equals one of the reference answers.
"""

from __future__ import annotations

import dataclasses
import re
import string

import numpy as np


@dataclasses.dataclass(frozen=True)
class Question:
  text: str
  answers: tuple[str, ...]   # normalised reference answers; [0] canonical
  category: str


_CAPITALS = (
    ("France", "paris"), ("Japan", "tokyo"), ("Italy", "rome"),
    ("Spain", "madrid"), ("Germany", "berlin"), ("Russia", "moscow"),
    ("Egypt", "cairo"), ("Kenya", "nairobi"), ("Peru", "lima"),
    ("Norway", "oslo"), ("Canada", "ottawa"), ("Australia", "canberra"),
    ("Turkey", "ankara"), ("Poland", "warsaw"), ("Greece", "athens"),
    ("Portugal", "lisbon"), ("Sweden", "stockholm"), ("Austria", "vienna"),
    ("Hungary", "budapest"), ("Cuba", "havana"), ("Iran", "tehran"),
    ("Iraq", "baghdad"), ("Thailand", "bangkok"), ("Vietnam", "hanoi"),
    ("Ghana", "accra"), ("Nigeria", "abuja"), ("Morocco", "rabat"),
    ("Chile", "santiago"), ("Argentina", "buenos aires"),
    ("Colombia", "bogota|bogotá"), ("Venezuela", "caracas"),
    ("Finland", "helsinki"), ("Denmark", "copenhagen"), ("Ireland", "dublin"),
    ("Belgium", "brussels"), ("Switzerland", "bern|berne"),
    ("China", "beijing|peking"), ("South Korea", "seoul"),
    ("Pakistan", "islamabad"), ("Nepal", "kathmandu"), ("Senegal", "dakar"),
    ("Uganda", "kampala"), ("Ukraine", "kyiv|kiev"), ("Romania", "bucharest"),
    ("Bulgaria", "sofia"), ("Serbia", "belgrade"), ("Croatia", "zagreb"),
    ("Philippines", "manila"), ("Indonesia", "jakarta"),
    ("Saudi Arabia", "riyadh"), ("Syria", "damascus"), ("Lebanon", "beirut"),
    ("Afghanistan", "kabul"), ("Mexico", "mexico city"),
    ("England", "london"), ("Scotland", "edinburgh"),
)
_ANTONYMS = (
    ("hot", "cold"), ("big", "small|little"), ("up", "down"),
    ("fast", "slow"), ("happy", "sad|unhappy"), ("early", "late"),
    ("open", "closed|close|shut"), ("day", "night"), ("wet", "dry"),
    ("old", "young|new"), ("tall", "short"), ("rich", "poor"),
    ("full", "empty"), ("love", "hate"), ("win", "lose"), ("push", "pull"),
    ("strong", "weak"), ("thick", "thin"), ("clean", "dirty"),
    ("top", "bottom"), ("inside", "outside"), ("black", "white"),
    ("north", "south"), ("east", "west"), ("left", "right"),
    ("true", "false"), ("buy", "sell"), ("alive", "dead"),
    ("cheap", "expensive"), ("always", "never"), ("first", "last"),
    ("friend", "enemy|foe"), ("above", "below|beneath"), ("heavy", "light"),
    ("sweet", "sour|bitter"), ("loud", "quiet|soft"), ("hard", "soft|easy"),
)
_PLURALS = (
    ("mouse", "mice"), ("child", "children"), ("man", "men"),
    ("woman", "women"), ("foot", "feet"), ("tooth", "teeth"),
    ("goose", "geese"), ("person", "people|persons"), ("ox", "oxen"),
    ("cactus", "cacti|cactuses"), ("leaf", "leaves"), ("knife", "knives"),
    ("wolf", "wolves"), ("box", "boxes"), ("city", "cities"),
    ("baby", "babies"), ("dog", "dogs"), ("bus", "buses|busses"),
    ("potato", "potatoes"), ("sheep", "sheep"), ("deer", "deer"),
    ("fish", "fish|fishes"), ("life", "lives"), ("wife", "wives"),
    ("half", "halves"), ("church", "churches"), ("louse", "lice"),
)
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
         "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july",
           "august", "september", "october", "november", "december")
_FACTS = (
    ("What color is the sky on a clear day?", "blue"),
    ("What color is grass?", "green"), ("What color is snow?", "white"),
    ("What color is a ripe banana?", "yellow"),
    ("What color is coal?", "black"),
    ("How many legs does a spider have?", "8"),
    ("How many legs does a dog have?", "4"),
    ("How many days are in a week?", "7"),
    ("How many months are in a year?", "12"),
    ("How many sides does a triangle have?", "3"),
    ("How many sides does a hexagon have?", "6"),
    ("What is the largest planet in the solar system?", "jupiter"),
    ("Which planet do we live on?", "earth"),
    ("Who wrote Romeo and Juliet?", "shakespeare|william shakespeare"),
    ("What is frozen water called?", "ice"),
    ("What gas do plants absorb from the air?",
     "carbon dioxide|co2"),
    ("What is the chemical symbol for gold?", "au"),
    ("Which animal is known as the king of the jungle?", "lion"),
    ("What is the largest ocean on Earth?", "pacific|pacific ocean"),
    ("How many hours are in a day?", "24"),
)


def _q(text: str, answers: str, category: str) -> Question:
  return Question(text, tuple(answers.split("|")), category)


def _arithmetic(rng: np.random.Generator, n: int) -> list[Question]:
  out = []
  for i in range(n):
    kind = i % 3
    if kind == 0:  # one-digit sums
      a, b = rng.integers(2, 10, size=2)
      out.append(_q(f"What is {a} + {b}?", str(a + b), "add_small"))
    elif kind == 1:  # two-digit sums
      a, b = rng.integers(11, 50, size=2)
      out.append(_q(f"What is {a} + {b}?", str(a + b), "add_large"))
    else:  # one-digit products
      a, b = rng.integers(2, 10, size=2)
      out.append(_q(f"What is {a} times {b}?", str(a * b), "multiply"))
  return out


def all_questions(num_arithmetic: int = 30, seed: int = 0
                  ) -> dict[str, list[Question]]:
  """Every question of the set by category (arithmetic drawn with `seed`)."""
  rng = np.random.default_rng(seed)
  arith = _arithmetic(rng, num_arithmetic)
  return {
      "capital": [_q(f"What is the capital of {c}?", a, "capital")
                  for c, a in _CAPITALS],
      "antonym": [_q(f"What is the opposite of {w}?", a, "antonym")
                  for w, a in _ANTONYMS],
      "plural": [_q(f"What is the plural of {w}?", a, "plural")
                 for w, a in _PLURALS],
      "successor": (
          [_q(f"What day comes after {d.title()}?", _DAYS[(i + 1) % 7],
              "successor") for i, d in enumerate(_DAYS)] +
          [_q(f"What month comes after {m.title()}?", _MONTHS[(i + 1) % 12],
              "successor") for i, m in enumerate(_MONTHS)]),
      "arithmetic": arith,
      "fact": [_q(t, a, "fact") for t, a in _FACTS],
  }


CATEGORIES = ("capital", "antonym", "plural", "successor", "arithmetic",
              "fact")


def question_set(categories=CATEGORIES, *, num_questions: int = 0,
                 seed: int = 0, num_arithmetic: int = 30) -> list[Question]:
  """A shuffled question list of `categories` (`num_questions` > 0 keeps the
  first that many of the shuffle; a different `seed` is a different subset
  and order; the arithmetic items are fixed by `num_arithmetic` alone)."""
  pools = all_questions(num_arithmetic)
  bad = [c for c in categories if c not in pools]
  if bad:
    raise ValueError(f"unknown question categories {bad}; valid: "
                     f"{', '.join(CATEGORIES)}")
  qs = [q for c in categories for q in pools[c]]
  order = np.random.default_rng(1000 + seed).permutation(len(qs))
  qs = [qs[i] for i in order]
  return qs[:num_questions] if num_questions > 0 else qs


def chat_messages(question: Question | str, system: str = ""
                  ) -> list[dict[str, str]]:
  """The chat-template messages asking `question` (with a system prompt)."""
  text = question.text if isinstance(question, Question) else question
  msgs = [{"role": "system", "content": system}] if system else []
  return msgs + [{"role": "user", "content": text}]


# -- the answer normaliser (collapsing function B) ---------------------------

_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve "
    "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
    "twenty".split())}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50",
                      "sixty": "60", "seventy": "70", "eighty": "80",
                      "ninety": "90", "hundred": "100"})
_ARTICLES = {"a", "an", "the"}
_FILLERS = {"indeed", "usually", "often", "typically", "actually", "called",
            "simply", "also", "probably", "generally", "definitely", "just",
            "certainly", "likely", "answer", "word", "correct", "really",
            "known", "as", "considered", "still", "always", "only"}
_STOP = _ARTICLES | {"what", "is", "of", "how", "many", "does", "do", "are",
                     "in", "which", "who", "comes", "after", "have", "on",
                     "we", "from", "for"}
# The first copula of a reply's first line; the answer follows it.
_COPULA = re.compile(
    r"(?:^|\s)(?:is|are|was|were|be|equals|means)(?:\s|$)|=|:(?:\s|$)")
# Where an answer span ends.
_CLAUSE_END = re.compile(
    r"[,.;!?()\[\]\n]|\s(?:and|but|which|or|because|so|not|since|while|"
    r"although|however|when|where|with|as)\s")
_CONJUNCTION = re.compile(r"\s(?:and|but|which|or|because|so|while)\s")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "“”‘’"})


def normalise(text: str) -> str:
  """Lower case, punctuation as spaces, no articles, single spaces."""
  words = text.lower().translate(_PUNCT).split()
  return " ".join(w for w in words if w not in _ARTICLES)


def _span_words(span: str) -> list[str]:
  span = span.replace("’", "'").replace("'s ", " ")
  words = [_NUMBER_WORDS.get(w, w) for w in normalise(span).split()]
  while words and words[0] in _FILLERS:
    words = words[1:]
  return words


def extract_answer(text: str, question: str = "") -> str | None:
  """The normalised short answer of a free-form reply (None if none).

  The reply's first non-empty line up to a conjunction; the span after its
  first copula
  ("is", "are", "be", "=", ": ", ...) up to the end of the clause, unless
  that span restates the question (its first word is a content word of the
  question, "Paris is the capital of France"), then the span before the
  copula. Lower case, no punctuation, articles or leading fillers
  ("indeed", "called", ...), number words as digits; a span that starts with
  a number, or any span with a number when the question asks for one
  ("How many ...", digits in the question), is its first number; else at
  most 4 words.
  """
  lines = [ln for ln in text.strip().split("\n") if ln.strip()]
  if not lines:
    return None
  # The first clause that a conjunction ends ("Spiders have eight legs
  # and are ...").
  line = _CONJUNCTION.split(lines[0].strip(), 1)[0]
  qwords = {_NUMBER_WORDS.get(w, w) for w in normalise(question).split()
            } - _STOP
  m = _COPULA.search(line)
  if m is not None:
    after = _span_words(_CLAUSE_END.split(" " + line[m.end():] + " ", 1)[0])
    before = _span_words(_CLAUSE_END.split(line[:m.start()])[-1])
    words = after
    if (not after or after[0] in qwords) and before and (
        before[0] not in qwords):
      words = before
  else:
    words = _span_words(_CLAUSE_END.split(" " + line + " ", 1)[0])
  if not words:
    return None
  numbers = [w for w in words if re.fullmatch(r"-?\d+", w)]
  if numbers and (re.fullmatch(r"-?\d+", words[0]) or re.search(
      r"\d|^how many", question.lower())):
    return numbers[0]
  return " ".join(words[:4])


def canonical(question: Question, text: str) -> str | None:
  """B_x: the extracted answer, mapped onto `question.answers[0]` when it is
  one of the reference answers (one class per meaning)."""
  key = extract_answer(text, question.text)
  return question.answers[0] if key in question.answers else key


def grade(question: Question, text: str) -> bool:
  """Correctness of a reply: its extracted answer is a reference answer."""
  return extract_answer(text, question.text) in question.answers


def cluster_key(question: Question, text: str) -> str:
  """The semantic-cluster key of a reply (paper J's clustering): its
  `canonical` answer; a reply without one is a meaning of its own."""
  return canonical(question, text) or f"<no answer> {text}"


def encode_chat(tokenizer, questions, system: str = "") -> list[list[int]]:
  """Chat-template token ids asking each question (generation prompt on)."""
  return [tokenizer.apply_chat_template(chat_messages(q, system))
          for q in questions]
