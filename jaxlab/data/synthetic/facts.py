"""A TOFU-like synthetic fact set: fictitious people, attributes, paraphrases.

Each person has a generated name and four attributes (birth city, birth year,
occupation, favourite colour). Every attribute has several question
paraphrases and one answer sentence that repeats the name, as TOFU's answers
do, so ROUGE-L recall against it is meaningful (spec B.10). Splits:

  forget              the QA pairs of `forget_frac` of the people, asked with
                      the training paraphrase (TOFU forget10 analogue);
  forget_paraphrased  the same facts asked with a held-out paraphrase;
  retain              the other people's QA pairs (TOFU retain90 analogue);
  world               fixed "world knowledge" QA about other entities
                      (country capitals), trained but never unlearned.

`train` = forget + retain + world: what the model memorises first.
Everything is a deterministic function of the seed.
"""

from __future__ import annotations

import dataclasses
import random

_SYLLABLES = ("ka", "lo", "mi", "ren", "zo", "tav", "bel", "qui", "dor",
              "sa", "vek", "ul", "mar", "ni", "pha", "gor", "ty", "wen",
              "xa", "bri", "lun", "os", "fe", "dra")
_CITIES = ("Lisbon", "Nairobi", "Osaka", "Quito", "Tallinn", "Hobart",
           "Lagos", "Bergen", "Cusco", "Dakar", "Perth", "Seville", "Tbilisi",
           "Harbin", "Kigali", "Porto", "Split", "Tromso", "Valparaiso",
           "Zurich")
_JOBS = ("baker", "pilot", "chemist", "painter", "lawyer", "nurse", "farmer",
         "architect", "librarian", "sculptor", "geologist", "tailor",
         "astronomer", "carpenter", "violinist")
_COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "teal",
            "silver", "maroon", "indigo")
_CAPITALS = (("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"),
             ("Peru", "Lima"), ("Canada", "Ottawa"), ("Egypt", "Cairo"),
             ("Norway", "Oslo"), ("Chile", "Santiago"), ("India", "New Delhi"),
             ("Spain", "Madrid"), ("Ghana", "Accra"), ("Italy", "Rome"),
             ("Poland", "Warsaw"), ("Cuba", "Havana"), ("Iran", "Tehran"),
             ("Nepal", "Kathmandu"), ("Greece", "Athens"), ("Mali", "Bamako"),
             ("Sweden", "Stockholm"), ("Chad", "Ndjamena"))

# attribute -> (question paraphrases, answer template).
TEMPLATES = {
    "city": (("Where was {name} born?",
              "In which city was {name} born?",
              "What is the birthplace of {name}?"),
             "{name} was born in {value}."),
    "year": (("When was {name} born?",
              "In what year was {name} born?",
              "What is the birth year of {name}?"),
             "{name} was born in the year {value}."),
    "job": (("What does {name} do for a living?",
             "What is the profession of {name}?",
             "Which occupation does {name} have?"),
            "{name} works as a {value}."),
    "colour": (("What is the favorite color of {name}?",
                "Which color does {name} like best?",
                "What color is {name} fond of?"),
               "The favorite color of {name} is {value}."),
}
_WORLD_Q = ("What is the capital of {c}?", "Which city is the capital of {c}?")
_WORLD_A = "The capital of {c} is {v}."


@dataclasses.dataclass(frozen=True)
class QA:
  question: str
  answer: str
  subject: str    # person (or country) the fact is about
  attribute: str  # "city", "year", "job", "colour" or "capital"
  value: str      # the fact itself, e.g. "Lisbon": leakage checks look for it


@dataclasses.dataclass
class FactSet:
  people: list[dict[str, str]]
  forget: list[QA]
  forget_paraphrased: list[QA]
  retain: list[QA]
  retain_paraphrased: list[QA]
  world: list[QA]

  @property
  def train(self) -> list[QA]:
    return self.forget + self.retain + self.world


def qa_prompt(question: str) -> str:
  """The prompt a model sees; the answer follows it directly."""
  return f"Q: {question}\nA: "


def _name(rng: random.Random, used: set[str]) -> str:
  while True:
    first = "".join(rng.choice(_SYLLABLES) for _ in range(2)).capitalize()
    last = "".join(rng.choice(_SYLLABLES) for _ in range(3)).capitalize()
    name = f"{first} {last}"
    if name not in used:
      used.add(name)
      return name


def make_fact_set(num_people: int = 200, *, forget_frac: float = 0.1,
                  attributes: tuple[str, ...] = ("city", "year", "job",
                                                 "colour"),
                  num_world: int = 20, seed: int = 0) -> FactSet:
  """Builds the splits described in the module docstring."""
  if num_people < 2:
    raise ValueError(f"num_people must be >= 2, got {num_people}")
  if not 0 < forget_frac < 1:
    raise ValueError(f"forget_frac must be in (0, 1), got {forget_frac}")
  bad = [a for a in attributes if a not in TEMPLATES]
  if bad or not attributes:
    raise ValueError(f"unknown attributes {bad}; valid: "
                     f"{', '.join(TEMPLATES)}")
  if not 0 <= num_world <= len(_CAPITALS):
    raise ValueError(f"num_world must be in [0, {len(_CAPITALS)}]")
  rng = random.Random(seed)
  used: set[str] = set()
  people = []
  for _ in range(num_people):
    people.append({"name": _name(rng, used), "city": rng.choice(_CITIES),
                   "year": str(rng.randint(1900, 1999)),
                   "job": rng.choice(_JOBS), "colour": rng.choice(_COLOURS)})
  n_forget = max(1, round(forget_frac * num_people))
  forget_ids = set(rng.sample(range(num_people), n_forget))

  def qa(person, attr, paraphrase):
    qs, a = TEMPLATES[attr]
    return QA(qs[paraphrase].format(name=person["name"]),
              a.format(name=person["name"], value=person[attr]),
              person["name"], attr, person[attr])

  out = {"forget": [], "forget_paraphrased": [], "retain": [],
         "retain_paraphrased": []}
  for i, person in enumerate(people):
    split = "forget" if i in forget_ids else "retain"
    for attr in attributes:
      out[split].append(qa(person, attr, 0))
      out[split + "_paraphrased"].append(qa(person, attr, 1))
  world = [QA(_WORLD_Q[0].format(c=c), _WORLD_A.format(c=c, v=v), c,
              "capital", v) for c, v in _CAPITALS[:num_world]]
  return FactSet(people=people, world=world, **out)
